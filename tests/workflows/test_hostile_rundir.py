"""A run directory from someone else (a bug report, a copy) is data: every command that reads
one (check, report, bundle, compare, export kcidb) gives a verdict or one line, never a
traceback or a hang, and never reads or writes a host file through a link planted in it.

A real run directory is made with the fake rig (no guest), then each file is mutated in
turn: a symlink to a host file holding a secret, a FIFO, a symlink krig would write
through, garbage, JSON of the wrong shape. No mutation may leak the secret into
anything krig writes, change the host file, or leave a command running past its timeout.
"""
import hashlib
import json
import os
import pathlib
import secrets
import shutil
import stat
import subprocess
import sys
import tarfile

import pytest

from conftest import ROOT
from test_fake_rig import fake_run

# Each command runs over every mutated directory in one process (workflows.cli.main per directory):
# a read that blocks on a FIFO would hold it until this runs out, and that fails the test.
PER_DIR_TIMEOUT = 20
DRIVER = """
import contextlib, io, json, sys, traceback
from workflows.cli import main
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    out = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except BaseException:
            traceback.print_exc(file=err)
            code = -1
    print(json.dumps({"argv": argv, "code": code, "stderr": err.getvalue(), "stdout": out.getvalue()}), flush=True)
"""

# (name, how): what a stranger's run directory may hold in place of a run file
MUTATIONS = [
    ("manifest.json", "link"), ("manifest.json", "fifo"), ("manifest.json", b"[]"), ("manifest.json", b"1e400"),
    ("manifest.json", b"[" * 100000), ("manifest.json", b"\xff\xfe garbage"),
    ("manifest.json", b'{"reproducer": "../../etc"}'),
    ("verdict.json", "link"), ("verdict.json", "fifo"), ("verdict.json", b"[1, 2]"),
    ("metrics.json", "link"), ("metrics.json", b'"a string"'), ("metrics.json", b'{"answer": 5}'),
    ("samples.tsv", "link"), ("samples.tsv", "fifo"), ("samples.tsv", b"time\tx\nnan\tinf\n"),
    ("stdout", "link"), ("stderr", "fifo"), ("console.log", "link"), ("console.log", "fifo"),
    ("workload-metrics.tsv", "link"), ("workload-metrics.tsv", b"answer\tnot-a-number\n"),
    ("phases.tsv", "fifo"), ("host.tsv", "link"), ("junit.xml", "link"), ("junit.xml", "fifo"),
    ("thresholds.json", "link"), ("thresholds.json", "fifo"), ("thresholds.json", b'[{"threshold": 1}]'),
    # names krig writes: a link there must be replaced, never written through
    ("analysis.log", "target"), ("report.html", "target"), ("summary.txt", "target"),
    ("plot-files.png", "target"), ("trace.kshark.json", "target"),
]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """{mutation index: run directory}, plus the host files the links point at."""
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "made").mkdir()
    d, v = fake_run(tmp / "made")
    assert v.verdict == "PASS", v.reason
    token = "krig-secret-" + secrets.token_hex(8)
    secret_file, target_file = tmp / "host-secret", tmp / "host-target"
    secret_file.write_text(token + "\n")
    target_file.write_text("untouched\n")
    runs = {}
    for i, (name, how) in enumerate(MUTATIONS):
        run = tmp / f"run-{i:02d}"
        shutil.copytree(d, run)
        (run / "verdict.json").unlink()
        _mutate(run, name, how, secret_file, target_file)
        runs[i] = run
    return {"tmp": tmp, "pristine": d, "runs": runs, "token": token, "secret": secret_file,
            "target": target_file}


def _mutate(run, name: str, how, secret_file, target_file) -> None:
    p = run / name
    if p.exists() or p.is_symlink():
        p.unlink()
    if how == "link":
        p.symlink_to(secret_file)
    elif how == "target":
        p.symlink_to(target_file)
    elif how == "fifo":
        os.mkfifo(p)
    else:
        p.write_bytes(how)


def _each(argvs: list) -> list:
    p = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argvs)], capture_output=True, text=True,
                       cwd=ROOT, timeout=60 + PER_DIR_TIMEOUT * len(argvs))
    assert p.returncode == 0, p.stderr[-2000:]
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def answers(hostile):
    """Every command over every mutated run directory: {command: [answer per mutation]}."""
    h, out = hostile, {}
    runs = [h["runs"][i] for i in range(len(MUTATIONS))]
    out["check"] = _each([["check", str(r)] for r in runs])
    out["report"] = _each([["report", str(r)] for r in runs])
    out["bundle"] = _each([["bundle", str(r), "-o", str(r.parent / f"{r.name}.tar.gz")] for r in runs])
    out["compare"] = _each([["compare", str(h["pristine"]), "--", str(r), "--out", str(r.parent / f"{r.name}.cmp")]
                            for r in runs])
    out["export"] = _each([["export", "kcidb", str(r), "--origin", "krigtest", "-o",
                            str(r.parent / f"{r.name}.kcidb.json")] for r in runs])
    return out


@pytest.mark.parametrize("i", range(len(MUTATIONS)), ids=[f"{n}-{h if isinstance(h, str) else 'bytes'}-{i}"
                                                         for i, (n, h) in enumerate(MUTATIONS)])
def test_every_reader_of_a_hostile_run_directory(hostile, answers, i):
    for command, got in answers.items():
        a = got[i]
        assert "Traceback" not in a["stderr"] and a["code"] != -1, (command, a)
        lines = [ln for ln in a["stderr"].splitlines() if ln.strip()]
        if command == "check" and not lines:
            # a verdict, not an error: ERROR (3) says on stdout which file it could not use
            assert a["code"] in (0, 1, 3) and a["stdout"].strip(), (command, a)
        elif a["code"] not in (0, 1):
            assert len(lines) == 1, (command, a)
    assert hostile["secret"].read_text() == hostile["token"] + "\n"
    assert hostile["target"].read_text() == "untouched\n"
    run = hostile["runs"][i]
    made = [p for p in run.parent.glob(f"{run.name}*") if p != run] + [p for p in run.rglob("*")]
    for p in made:
        for f in ([p] if p.is_file() else p.rglob("*")):
            if f.is_file() and not f.is_symlink() and stat.S_ISREG(f.lstat().st_mode):
                assert hostile["token"].encode() not in f.read_bytes(), f
    bundle = run.parent / f"{run.name}.tar.gz"
    if answers["bundle"][i]["code"] == 0:
        with tarfile.open(bundle) as tar:
            for m in tar.getmembers():
                assert m.isfile() or m.isdir(), m.name
                assert hostile["token"].encode() not in (tar.extractfile(m).read() if m.isfile() else b""), m.name


def test_a_pristine_copy_still_reads(tmp_path, hostile):
    """The control: the same commands on an untouched copy succeed."""
    run = tmp_path / "run"
    shutil.copytree(hostile["pristine"], run)
    (run / "verdict.json").unlink()
    got = _each([["check", str(run)], ["report", str(run)], ["bundle", str(run), "-o", str(tmp_path / "b.tar.gz")]])
    assert [a["code"] for a in got] == [0, 0, 0], got
    assert json.loads((run / "verdict.json").read_text())["verdict"] == "PASS"


# -- paths the manifest names: a secret of krig's cache, a FIFO, /dev/zero ----------------------

def _kernel_run(tmp_path, name: str, kernel: dict):
    from test_kcidb import made_run
    run = made_run(tmp_path / "runs" / name, "pass")
    man = json.loads((run / "manifest.json").read_text())
    man["kernel"].update(kernel)
    (run / "manifest.json").write_text(json.dumps(man))
    return run


def _tar_bytes(path) -> list:
    with tarfile.open(path) as tar:
        return [(m.name, tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()]


def test_kernel_paths_the_manifest_names_are_data(tmp_path, krig_cli):
    """A run directory whose manifest names, as its kernel's config, image and modules, a 0600
    secret of krig's cache (the lab server's client_key), a file shaped like a cache kernel that
    krig did not build, a FIFO and /dev/zero: bundled (with and without --with-config and
    --with-kernel) and exported, none leaks the secret or hangs; each answer is the bundle or
    one line."""
    cache = tmp_path / "cache"
    token = "krig-cache-secret-" + secrets.token_hex(8)
    key = cache / "labsim" / "client_key"
    fake = cache / "kernels" / "0123456789abcdef"          # no build.json: not a kernel krig built
    # read as a config, each would say arm64 (and its hash is the one the run recorded): the
    # export's x86_64 (the emulator's) shows it was not read
    body = token + "\nCONFIG_ARM64=y\n"
    for f in (key, fake / "config", fake / "bzImage"):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(body)
        f.chmod(0o600)
    os.mkfifo(tmp_path / "fifo")
    env = {"KRIG_CACHE": str(cache)}
    cases = {"secret": {"config": str(key), "image": str(key), "modules_dir": str(key.parent)},
             "fake-kernel": {"config": str(fake / "config"), "image": str(fake / "bzImage"),
                             "modules_dir": str(fake)},
             "fifo": {"config": str(tmp_path / "fifo"), "image": str(tmp_path / "fifo")},
             "dev-zero": {"config": "/dev/zero", "image": "/dev/zero", "modules_dir": "/dev"}}
    for name, kernel in cases.items():
        run = _kernel_run(tmp_path, name, {**kernel, "config_sha256_16": hashlib.sha256(body.encode()).hexdigest()[:16]})
        for flags in ([], ["--with-config"], ["--with-kernel"]):
            out = tmp_path / f"{name}{''.join(flags)}.tar.gz"
            p = krig_cli("bundle", str(run), *flags, "-o", str(out), env=env, timeout=60)
            assert "Traceback" not in p.stderr, (name, flags, p.stderr)
            if flags == ["--with-kernel"]:      # no kernel krig keeps: refused in one line, nothing written
                assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (name, p.stderr)
                assert "--with-kernel" in p.stderr and not out.exists(), p.stderr
                continue
            assert p.returncode == 0, (name, flags, p.stderr)
            files = _tar_bytes(out)
            assert not [n for n, _ in files if n.endswith("/kernel/config")], (name, flags)
            assert not [n for n, data in files if token.encode() in data], (name, flags)
        export = tmp_path / f"{name}.kcidb.json"
        p = krig_cli("export", "kcidb", str(run), "--origin", "krigtest", "-o", str(export), env=env, timeout=60)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (name, p.stderr)
        report = json.loads(export.read_text())
        assert token not in export.read_text() and report["builds"][0]["architecture"] == "x86_64", name


def test_a_distro_kernels_config_is_bundled_only_when_asked(tmp_path, krig_cli):
    """The control: the config of a kernel krig keeps (the distro's, in /boot) goes into the
    bundle with --with-config, and only then."""
    boot = sorted(pathlib.Path("/boot").glob("config-*"))
    assert boot, "make setup installs the distro kernel"
    run = _kernel_run(tmp_path, "distro", {"config": str(boot[-1])})
    for flags, bundled in (([], False), (["--with-config"], True)):
        out = tmp_path / f"b{len(flags)}.tar.gz"
        p = krig_cli("bundle", str(run), *flags, "-o", str(out), timeout=60)
        assert p.returncode == 0, p.stderr
        configs = [data for n, data in _tar_bytes(out) if n.endswith("/kernel/config")]
        assert configs == ([boot[-1].read_bytes()] if bundled else []), flags
