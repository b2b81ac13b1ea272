"""`krig reproduce` on bundles a stranger shaped: every refusal is one line (exit 2), before
anything runs, and nothing is written outside krig's cache. No guest boots here: each bundle
is refused before the run, or the bundled kernel is unpacked by the function itself.
(The real bundle-and-rerun is tests/workflows/test_bundle.py.)

Covers: krig/tarbound.py, workflows/reproduce.py."""
import hashlib
import io
import json
import os
import pathlib
import secrets
import tarfile

import pytest

from krig.record import Verdict
from workflows import reproduce as kr

RELEASE = "6.1.0-test"
IMAGE = b"MZ" + bytes(range(256)) * 1200          # stands in for a bzImage
CONFIG = b"CONFIG_XFS_FS=y\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_bundle(path: pathlib.Path, run_args=("selftest-pass",), meta=None, kernel=None, sums=None,
                raw_meta: bytes | None = None) -> pathlib.Path:
    """A bundle as `krig bundle` lays it out, with what the test chooses in it. kernel: {name: bytes}
    under kernel/; sums: [(name, digest)] in the order kernel/SHA256SUMS lists them."""
    meta = {"reproducer": "selftest-pass", "verdict": "PASS", "kernel": {"release": RELEASE}} if meta is None else meta
    top = "krig-bundle-selftest-pass-20260101T000000Z"
    with tarfile.open(path, "w:gz") as t:
        def add(name, data: bytes):
            ti = tarfile.TarInfo(f"{top}/{name}")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        add("bundle.json", raw_meta if raw_meta is not None else json.dumps(meta).encode())
        add("run-args", "".join(a + "\n" for a in run_args).encode())
        for name, data in (kernel or {}).items():
            add(f"kernel/{name}", data)
        if sums is not None:
            add("kernel/SHA256SUMS", "".join(f"{d}  {n}\n" for n, d in sums).encode())
    return path


def files_under(d: pathlib.Path, but: pathlib.Path) -> set:
    return {p for p in d.rglob("*") if but not in p.parents and p != but}


@pytest.fixture
def reproduce(tmp_path, krig_cli):
    """`krig reproduce ARGS` with krig's cache and results in tmp_path; checks the refusal is one line,
    exit 2, that nothing ran and that nothing was written outside the cache. Returns the error line."""
    cache = tmp_path / "home" / ".cache" / "krig"       # so ../../../.ssh from its reproduce/ is home/.ssh
    cache.mkdir(parents=True)
    env = {"KRIG_CACHE": str(cache), "KRIG_RESULTS": str(tmp_path / "results")}

    def run(*args):
        before = files_under(tmp_path, cache)
        p = krig_cli("reproduce", *map(str, args), env=env, timeout=120)
        assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, p.stderr
        assert files_under(tmp_path, cache) == before, "written outside krig's cache"
        assert not (tmp_path / "results").exists(), "a run started"
        assert not [f for f in cache.rglob("*") if f.is_file()], "a file of a refused bundle stayed in the cache"
        return lines[0]
    return run


# -- kernel/SHA256SUMS ------------------------------------------------------------

def test_digests_that_are_paths_or_not_sha256_are_refused(tmp_path, reproduce):
    outside = f"/tmp/krh{secrets.token_hex(4)}"         # what the old [:16] of the digest became
    assert len(outside) == 16
    for digest in (outside, "../../../.ssh", "abc123", sha(IMAGE).upper(), sha(IMAGE) + "0"):
        # the config, listed first with its true sha256, must not land before the image's digest fails
        b = make_bundle(tmp_path / "b.tar.gz", kernel={"image": IMAGE, "config": CONFIG},
                        sums=[("config", sha(CONFIG)), ("image", digest)])
        line = reproduce(b, "--kernel", "bundled")
        assert "SHA256SUMS" in line and "not a sha256" in line, line
        assert not os.path.lexists(outside)
        assert not (tmp_path / "home" / ".ssh").exists()


def test_a_wrong_digest_leaves_nothing_in_place(tmp_path, reproduce):
    b = make_bundle(tmp_path / "b.tar.gz", kernel={"image": IMAGE, "config": CONFIG},
                    sums=[("config", sha(CONFIG)), ("image", sha(b"another image"))])
    assert "kernel/image's sha256 does not match" in reproduce(b, "--kernel", "bundled")


@pytest.mark.parametrize("name", ["../image", "/etc/passwd", "modules", "vmlinux", "modules/../../x"])
def test_names_that_are_not_the_kernels_files_are_refused(tmp_path, reproduce, name):
    b = make_bundle(tmp_path / "b.tar.gz", kernel={"image": IMAGE, name.lstrip("/"): CONFIG},
                    sums=[("image", sha(IMAGE)), (name, sha(CONFIG))])
    assert "not a file of the bundle's kernel" in reproduce(b, "--kernel", "bundled")


def test_the_bundled_kernel_goes_where_krig_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    mods = {"modules/modules.builtin": b"kernel/fs/xfs/xfs.ko\n", "modules/kernel/fs/xfs/xfs.ko": b"\x7fELF"}
    sums = [("image", sha(IMAGE)), ("config", sha(CONFIG))] + [(n, sha(d)) for n, d in mods.items()]
    b = make_bundle(tmp_path / "b.tar.gz", kernel={"image": IMAGE, "config": CONFIG, **mods}, sums=sums)
    args = []
    for _ in range(2):          # twice: the second finds the first's directory and keeps it
        with tarfile.open(b) as tar:
            _, members = kr._members(tar, str(b))
            args.append(kr._bundled_kernel(tar, members, str(b), kr._meta(tar, members, str(b))))
    assert args[0] == args[1]
    image, config, modules = args[0].split(",")
    dest = pathlib.Path(image).parent
    assert dest.parent == tmp_path / "cache" / "reproduce" and dest.name.startswith("kernel-")
    assert sha(IMAGE) not in dest.name         # named by krig, not by a value the bundle chose
    assert pathlib.Path(image).read_bytes() == IMAGE and config == f"config={dest / 'config'}"
    assert modules == f"modules={dest / 'mod/lib/modules' / RELEASE}"
    assert (dest / "mod/lib/modules" / RELEASE / "kernel/fs/xfs/xfs.ko").read_bytes() == b"\x7fELF"
    assert [p.name for p in dest.parent.iterdir()] == [dest.name], "a temporary directory was left"


def test_sources_named_outside_the_reproducer_are_not_read(tmp_path):
    b = tmp_path / "b.tar.gz"
    with tarfile.open(b, "w:gz") as t:
        for name in ("top/reproducer/selftest-pass/../../../../../etc/hostname", "top/reproducer/selftest-pass/run.sh"):
            data = b"x"
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    with tarfile.open(b) as tar:
        _, members = kr._members(tar, str(b))
        assert kr._sources_differ(tar, members, "selftest-pass") == ["../../../../../etc/hostname", "run.sh"]


# -- run-args' --kernel -----------------------------------------------------------

def test_run_args_kernel_must_be_a_kernel_name_of_krigs(tmp_path, reproduce):
    image = tmp_path / "bzImage"
    image.write_bytes(IMAGE)
    for kernel in ("tiny-6.1,series=<20261120.1234-1-dev@example.org>", str(image),
                   f"{image},config=/etc/passwd", "distro,modules=/root", "~/linux@v6.1", "../kernels/distro"):
        b = make_bundle(tmp_path / "b.tar.gz", run_args=("selftest-pass", "--kernel", kernel))
        line = reproduce(b)
        assert "run-args" in line and "refused" in line and "distro" in line and "bundled" in line, line


def test_a_kernel_given_by_the_user_wins_over_run_args(tmp_path, krig_cli):
    b = make_bundle(tmp_path / "b.tar.gz", run_args=("selftest-pass", "--kernel", "tiny-6.1,series=/x.mbox"))
    p = krig_cli("reproduce", str(b), "--kernel", "no-such-kernel", timeout=120,
                 env={"KRIG_CACHE": str(tmp_path / "cache"), "KRIG_RESULTS": str(tmp_path / "results")})
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "run-args" not in p.stderr and "no-such-kernel" in p.stderr


# -- malformed bundles: one line ------------------------------------------------------

def test_truncated_and_corrupt_tarballs_are_one_line(tmp_path, reproduce):
    good = make_bundle(tmp_path / "good.tar.gz", kernel={"image": IMAGE * 4},
                       sums=[("image", "0" * 64)]).read_bytes()
    for cut in (30, len(good) // 2, len(good) - 12):
        b = tmp_path / f"cut-{cut}.tar.gz"
        b.write_bytes(good[:cut])
        line = reproduce(b, "--kernel", "bundled")
        assert "tarball" in line or "not a krig bundle" in line or "does not match" in line, line
    corrupt = bytearray(good)
    corrupt[len(good) // 2: len(good) // 2 + 64] = b"\0" * 64
    (tmp_path / "corrupt.tar.gz").write_bytes(bytes(corrupt))
    reproduce(tmp_path / "corrupt.tar.gz", "--kernel", "bundled")      # one line, whatever it found


def test_not_a_tarball_is_one_line(tmp_path, reproduce):
    (tmp_path / "notes.txt").write_text("this is not a tarball\n" * 40)
    assert "not a tarball" in reproduce(tmp_path / "notes.txt")
    assert "a directory, not a bundle" in reproduce(tmp_path)
    assert "no such file" in reproduce(tmp_path / "gone.tar.gz")


@pytest.mark.parametrize("raw,needle", [
    (b'["a", "list"]', "not an object"),
    (b"[" * 200_000 + b"]" * 200_000, "not JSON"),
    (b'{"kernel": "6.1"}', "kernel is not an object"),
    (b"\xff\xfe{", "not JSON"),
], ids=["list", "deep", "kernel-string", "not-utf8"])     # short ids: the test's id is in every child's env
def test_bad_bundle_json_is_one_line(tmp_path, reproduce, raw, needle):
    b = make_bundle(tmp_path / "b.tar.gz", raw_meta=raw)
    assert needle in reproduce(b)



# -- what a bundle makes krig hold, keep and print ---------------------------------------------

def test_a_release_with_a_trailing_newline_is_refused(tmp_path, reproduce):
    meta = {"reproducer": "selftest-pass", "verdict": "PASS", "kernel": {"release": RELEASE + "\n"}}
    b = make_bundle(tmp_path / "b.tar.gz", meta=meta, kernel={"image": IMAGE}, sums=[("image", sha(IMAGE))])
    assert "is not a release" in reproduce(b, "--kernel", "bundled")


def test_headers_are_read_one_by_one_and_counted(tmp_path, monkeypatch):
    """No header stays in tarfile's list, and a bundle of more entries than the cap is one line."""
    b = make_bundle(tmp_path / "b.tar.gz", kernel={f"modules/m{i}.ko": b"x" for i in range(20)})
    with tarfile.open(b, tarinfo=kr.BoundedHeader) as tar:
        _, members = kr._members(tar, str(b))
        assert len(members) == 22 and tar.members == []
    monkeypatch.setattr(kr, "MAX_MEMBERS", 10)
    with tarfile.open(b, tarinfo=kr.BoundedHeader) as tar, pytest.raises(kr.UsageError, match="more than 10 entries"):
        kr._members(tar, str(b))


def test_bundled_kernels_do_not_pile_up_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    used = []
    for i in range(kr.KEEP_BUNDLED + 2):
        image = IMAGE + bytes([i])
        b = make_bundle(tmp_path / f"b{i}.tar.gz", kernel={"image": image}, sums=[("image", sha(image))])
        with tarfile.open(b) as tar:
            _, members = kr._members(tar, str(b))
            used.append(pathlib.Path(kr._bundled_kernel(tar, members, str(b), kr._meta(tar, members, str(b)))).parent)
        os.utime(used[-1], (i, 1000 + i))          # the order they were used in, whatever the clock's resolution
    kept = sorted((tmp_path / "cache" / "reproduce").glob("kernel-*"))
    assert kept == sorted(used[-kr.KEEP_BUNDLED:]), (kept, used)


def test_bundle_text_reaches_the_terminal_without_escape_sequences(tmp_path, monkeypatch, capsys):
    """The bundled verdict and the names of its files, printed by krig reproduce, as \\x1b text.
    (The run itself is a stand-in here: the real rerun is tests/workflows/test_bundle.py.)"""
    esc = "\x1b]0;owned\x07\x1b[2J"
    b = make_bundle(tmp_path / "b.tar.gz", meta={"reproducer": "selftest-pass", "verdict": f"PASS{esc}",
                                                 "kernel": {}},
                    kernel={})
    with tarfile.open(tmp_path / "b2.tar", "w") as t:
        with tarfile.open(b) as src:
            for m in src.getmembers():
                t.addfile(m, src.extractfile(m))
        data = b"x"
        ti = tarfile.TarInfo(f"{m.name.split('/')[0]}/reproducer/selftest-pass/run{esc}.sh")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    monkeypatch.setattr(kr, "run", lambda *a, **k: (tmp_path / "run", Verdict("PASS", "stand-in")))
    logged = []
    assert kr.reproduce(str(tmp_path / "b2.tar"), kernel="distro", log=logged.append) == 1
    out = capsys.readouterr().out + "\n".join(logged)
    assert "\x1b" not in out and "\x07" not in out and "bundled: PASS\\x1b]0;owned\\x07" in out, out
    assert "run\\x1b]0;owned" in out, out
