"""The pull of a lab server's results takes only data (rigs/ipmi/pull.py).

Crafted tar streams (made here with tarfile) go through the extraction: regular files
and directories are taken with krig's own modes; a symlink, a hard link, a device, a
FIFO, a name walking out, an absolute name, a member over a cap are refused with one
line, the host file each one aims at is untouched, and the good files around it are
kept. Then the real pipe (stream_from, Ssh.pipe_from) with a real `tar -c` in place of
ssh, and one real run on the simulated IPMI server whose results hold hostile entries.

Covers: rigs/ipmi/results.py (the server's pull of a run, in the real run at the end).
"""
import io
import json
import os
import pathlib
import re
import secrets
import stat
import subprocess
import tarfile
import types

import pytest

from krig.errors import RigError
from rigs.ipmi.pull import Refused, extract, move_into, pull_results, stream_from
from rigs.ipmi.ssh import Ssh

WHAT = "the server's results"
SECRET = b"the host's own file\n"


def member(name, kind=tarfile.REGTYPE, data=b"", **kw):
    t = tarfile.TarInfo(name)
    t.type, t.size, t.mode, t.uid, t.gid = kind, len(data) if kind == tarfile.REGTYPE else 0, 0o4777, 1234, 0
    for k, v in kw.items():
        setattr(t, k, v)
    return t, data


def stream(*members, fmt=tarfile.GNU_FORMAT) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for t, data in members:
            tf.addfile(t, io.BytesIO(data) if t.type == tarfile.REGTYPE else None)
    buf.seek(0)
    return buf


@pytest.fixture
def host(tmp_path):
    """dest: the run directory; secret: a host file outside it that hostile entries aim at."""
    dest = tmp_path / "run"
    dest.mkdir()
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    return dest, secret


def only_data(dest: pathlib.Path) -> dict:
    """Every entry below dest: regular files (path -> bytes) and directories; nothing else."""
    out = {}
    for dirpath, dirs, files in os.walk(dest):
        for n in dirs + files:
            p = pathlib.Path(dirpath, n)
            st = os.lstat(p)
            rel = str(p.relative_to(dest))
            if stat.S_ISDIR(st.st_mode):
                assert stat.S_IMODE(st.st_mode) == 0o755, rel
                out[rel + "/"] = None
            else:
                assert stat.S_ISREG(st.st_mode), f"{rel} is not a regular file"
                assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_nlink == 1, rel
                out[rel] = p.read_bytes()
    return out


def test_regular_files_and_directories_with_krig_modes(host):
    dest, _ = host
    got = extract(stream(member("./", tarfile.DIRTYPE), member("./facts.txt", data=b"facts\n"),
                         member("./trace", tarfile.DIRTYPE), member("./trace/cpu0", data=b"\0" * 5000),
                         member("deep/er/file", data=b"x"), member("./empty", data=b"")), dest)
    assert got.refusal(WHAT) is None and got.broken is None and got.stopped is None
    assert (got.files, got.bytes) == (4, 5007)
    assert only_data(dest) == {"facts.txt": b"facts\n", "trace/": None, "trace/cpu0": b"\0" * 5000,
                               "deep/": None, "deep/er/": None, "deep/er/file": b"x", "empty": b""}
    assert all(os.stat(dest / p).st_uid == os.getuid() for p in ("facts.txt", "trace"))


# (entries between a good file before and one after, what the one line says)
HOSTILE = {
    "symlink": (lambda s: [member("out/x", tarfile.SYMTYPE, linkname=str(s))],
                r"a symlink out/x -> {secret}"),
    "symlink-then-through-it": (lambda s: [member("out", tarfile.SYMTYPE, linkname=str(s.parent)),
                                           member(f"out/{s.name}", data=b"pwned\n")],
                                r"a symlink out -> {parent}: refused \(and 1 more: a name out/secret below the "
                                r"refused out\)"),
    "hardlink": (lambda s: [member("hl", tarfile.LNKTYPE, linkname=str(s))], r"a hard link hl to {secret}"),
    "char-device": (lambda s: [member("dev", tarfile.CHRTYPE, devmajor=1, devminor=3)],
                    r"a character device dev \(1,3\)"),
    "block-device": (lambda s: [member("sda", tarfile.BLKTYPE, devmajor=8, devminor=0)],
                     r"a block device sda \(8,0\)"),
    "fifo": (lambda s: [member("fifo", tarfile.FIFOTYPE)], r"a FIFO fifo"),
    "dotdot": (lambda s: [member(f"../{s.name}", data=b"pwned\n")],
               r"a name outside the results directory \.\./secret"),
    "dotdot-inside": (lambda s: [member(f"a/../../{s.name}", data=b"pwned\n")],
                      r"a name outside the results directory a/\.\./\.\./secret"),
    "absolute": (lambda s: [member(str(s), data=b"pwned\n")], r"an absolute name {secret}"),
    "unknown-type": (lambda s: [member("vol", b"V")], r"an entry of tar type 'V' vol"),
    "newline-in-name": (lambda s: [member("a\nb", tarfile.SYMTYPE, linkname="/etc/passwd\nx")],
                        r"a symlink a\\x0ab -> /etc/passwd\\x0ax"),
    # a server's judgement of itself: krig's own file names at the top of the run directory
    "krig-names": (lambda s: [member("./metrics.json", data=b'{"answer": {"value": 42}}'),
                              member("thresholds.json", data=b"[]"), member("./report.html", data=b"<html>"),
                              member("verdict.json", data=b'{"verdict": "PASS"}'),
                              member("plots", tarfile.DIRTYPE), member("plots/x.png", data=b"png")],
                   r"a file metrics\.json taking the name of krig's own metrics\.json: refused \(and 5 more: "
                   r"a file thresholds\.json .*; a file report\.html .*; a file verdict\.json .*; \.\.\.\)"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_entries_are_refused_and_the_rest_kept(host, case):
    dest, secret = host
    entries, pattern = HOSTILE[case]
    got = extract(stream(member("before.txt", data=b"before\n"), *entries(secret),
                         member("after.txt", data=b"after\n")), dest)
    line = got.refusal(WHAT)
    assert line is not None and "\n" not in line, line
    pattern = pattern.format(secret=re.escape(str(secret)), parent=re.escape(str(secret.parent)))
    assert re.match(rf"the server's results hold {pattern}", line) and ": refused" in line, line
    assert line.endswith("; 2 regular files pulled"), line
    assert secret.read_bytes() == SECRET
    assert only_data(dest) == {"before.txt": b"before\n", "after.txt": b"after\n"}


def test_a_planted_link_in_the_destination_is_never_written_through(host):
    """An entry already in the run directory (krig's own file, or a link): never overwritten."""
    dest, secret = host
    (dest / "samples.tsv").write_text("collected before\n")
    (dest / "trap").symlink_to(secret)
    (dest / "dirtrap").symlink_to(secret.parent)
    got = extract(stream(member("samples.tsv", data=b"forged\n"), member("trap", data=b"pwned\n"),
                         member(f"dirtrap/{secret.name}", data=b"pwned\n"), member("ok", data=b"ok\n")), dest)
    assert got.n_refused == 3 and got.files == 1, got
    assert got.refused[0] == f"a file samples.tsv where {dest} already has one"
    assert got.refused[2] == "a name dirtrap/secret through dirtrap, which is not a directory"
    assert (dest / "samples.tsv").read_text() == "collected before\n"
    assert secret.read_bytes() == SECRET and (dest / "ok").read_bytes() == b"ok\n"


def test_a_file_is_not_a_directory_to_walk_through(host):
    dest, _ = host
    got = extract(stream(member("f", data=b"1"), member("f/g", data=b"2"), member("f", tarfile.DIRTYPE)), dest)
    assert got.refused == ["a name f/g through f, which is not a directory",
                           f"a directory f where {dest} already has something else"]
    assert only_data(dest) == {"f": b"1"}


def test_caps_refuse_from_the_header_before_any_data(host):
    dest, _ = host
    got = extract(stream(member("a", data=b"a" * 600), member("big", data=b"b" * 2000),
                         member("z", data=b"z")), dest, total_cap=1 << 20, file_cap=1000)
    assert got.stopped and got.refusal(WHAT) == ("the server's results hold a file big of 2000 bytes, more than the "
                                                 "1000 bytes one file may hold: refused; the rest of the stream was "
                                                 "not read; 1 regular file pulled")
    assert only_data(dest) == {"a": b"a" * 600}
    # the whole stream: three files under the per-file cap, over the total
    for p in dest.iterdir():
        p.unlink()
    got = extract(stream(*(member(f"f{i}", data=bytes(900)) for i in range(3))), dest, total_cap=3000, file_cap=1000)
    assert "more than the 3000 bytes the results may hold in all (at f2)" in got.refusal(WHAT)
    assert sorted(only_data(dest)) == ["f0", "f1"]
    # a header that claims 100 GiB, with no data behind it: refused before reading any
    t, _ = member("huge")
    t.size = 100 << 30
    raw = io.BytesIO(t.tobuf(tarfile.GNU_FORMAT))
    got = extract(raw, dest)
    assert got.refusal(WHAT).startswith("the server's results hold a file huge of 107374182400 bytes, more "
                                        "than the 8 GiB one file may hold: refused")
    assert not (dest / "huge").exists()
    # the cap that stopped the stream is named even after four other refusals
    (dest / "many").mkdir()
    got = extract(stream(*(member(f"l{i}", tarfile.SYMTYPE, linkname="/") for i in range(5)),
                         member("big", data=bytes(2000))), dest / "many", file_cap=1000)
    assert got.refusal(WHAT).endswith("; ...); the rest of the stream was not read (a file big of 2000 bytes, "
                                      "more than the 1000 bytes one file may hold); 0 regular files pulled")
    # headers tarfile would read whole into memory, and sparse files: the stream stops there
    for kind, size, phrase in ((tarfile.XHDTYPE, 2 << 20, "an extended tar header of 2097152 bytes"),
                               (tarfile.GNUTYPE_LONGNAME, 2 << 20, "an extended tar header of 2097152 bytes"),
                               (tarfile.GNUTYPE_SPARSE, 10, "a GNU sparse file s")):
        t, _ = member("s", kind)
        t.size = size
        (dest / kind.decode()).mkdir()
        got = extract(io.BytesIO(stream(member("a", data=b"a")).getvalue()[:1024] + t.tobuf(tarfile.GNU_FORMAT)),
                      dest / kind.decode())
        assert got.stopped == phrase
        assert got.refusal(WHAT) == (f"the server's results hold {phrase}: refused; the rest of the stream was "
                                     f"not read; 1 regular file pulled")


def test_long_names_and_pax_headers(host):
    dest, _ = host
    name = "d/" + "n" * 200
    got = extract(stream(member(name, data=b"long\n"), fmt=tarfile.PAX_FORMAT), dest)
    assert got.refusal(WHAT) is None and (dest / name).read_bytes() == b"long\n"
    t, _ = member("p" * 3000)           # a pax header over one component's limit: refused, not a crash
    got = extract(stream((t, b"x"), member("ok", data=b"ok"), fmt=tarfile.PAX_FORMAT), dest)
    assert got.refused == [f"a name {'p' * 160}... the host cannot take (File name too long)"]
    assert (dest / "ok").read_bytes() == b"ok"


def test_not_a_tar_stream(host):
    dest, _ = host
    for data in (b"", b"garbage" * 200, stream(member("a", data=b"x" * 2000)).getvalue()[:1024]):
        got = extract(io.BytesIO(data), dest)
        assert got.broken and got.refusal(WHAT) is None, data[:20]


def test_move_into_never_replaces(host, tmp_path):
    dest, secret = host
    src = tmp_path / "prefetch"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_text("f")
    (src / "console.log").write_text("forged")
    (src / "trap").write_text("pwned")
    (dest / "console.log").write_text("krig's")
    (dest / "trap").symlink_to(secret)
    with pytest.raises(Refused) as e:
        move_into(src, dest, "rig t: the server's results")
    assert str(e.value) == f"rig t: the server's results hold a file console.log where {dest} already has one: " \
                           f"refused (and 1 more)"
    assert (dest / "console.log").read_text() == "krig's" and secret.read_bytes() == SECRET
    assert (dest / "sub" / "f").read_text() == "f"


# -- the real pipe: a local `tar -c` producer in place of ssh -------------------------------

@pytest.fixture
def hostile_dir(tmp_path, host):
    """A directory as a hostile server's results would be: data plus a symlink to the
    host's file, a hard link, a FIFO, a character device, a symlinked directory."""
    _, secret = host
    src = tmp_path / "server-results"
    (src / "trace").mkdir(parents=True)
    (src / "facts.txt").write_text("facts\n")
    (src / "trace" / "cpu0").write_bytes(os.urandom(300000))
    (src / "evil").symlink_to(secret)
    (src / "up").symlink_to(secret.parent)
    os.link(src / "facts.txt", src / "facts-again.txt")
    os.mkfifo(src / "fifo")
    try:
        os.mknod(src / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pass                         # not root: the other entries still stand
    (src / "facts.txt").chmod(0o4755)
    return src


def ssh_to(monkeypatch, argv) -> Ssh:
    """The rig's Ssh, with `argv` run in place of ssh: the real pipe_from and check_exit."""
    ssh = Ssh("t", types.SimpleNamespace(user="root", host="127.0.0.1", port=22))
    monkeypatch.setattr(ssh, "argv", lambda remote, *a, **k: list(argv))
    return ssh


def test_real_tar_through_the_pipe(host, hostile_dir, monkeypatch):
    dest, secret = host
    ssh = ssh_to(monkeypatch, ["tar", "-C", str(hostile_dir), "-cf", "-", "."])
    with pytest.raises(Refused) as e:
        pull_results(ssh, "/results", dest, 60)
    line = str(e.value)
    assert line.startswith("rig t: the server's results hold ") and "\n" not in line, line
    named = [f"a symlink evil -> {secret}", f"a symlink up -> {secret.parent}", "a FIFO fifo", "a hard link facts",
             "a character device null (1,3)"]
    assert ": refused (and 4 more: " in line and sum(p in line for p in named) == 4, line   # the fifth is "..."
    got = only_data(dest)
    assert {"trace/", "trace/cpu0"} <= set(got) and got["trace/cpu0"] == (hostile_dir / "trace" / "cpu0").read_bytes()
    assert [got.get("facts.txt"), got.get("facts-again.txt")].count(b"facts\n") == 1     # the other is the link
    assert not any(k in got for k in ("evil", "up", "fifo", "null"))
    assert secret.read_bytes() == SECRET


def test_clean_results_through_the_pipe(host, tmp_path, monkeypatch):
    dest, _ = host
    src = tmp_path / "clean"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"f" * 70000)
    (src / "g").write_text("g")
    got = pull_results(ssh_to(monkeypatch, ["tar", "-C", str(src), "-cf", "-", "."]), "/results", dest, 60)
    assert (got.files, got.dirs) == (2, 1)
    assert only_data(dest) == {"d/": None, "d/f": b"f" * 70000, "g": b"g"}


def test_pipe_failures_are_one_line(host, monkeypatch):
    dest, _ = host
    ssh = ssh_to(monkeypatch, ["tar", "-C", str(dest / "missing"), "-cf", "-", "."])
    with pytest.raises(RigError, match=r"^rig t: remote `tar -C /results -cf - \.` failed \(exit 2\): tar: "):
        pull_results(ssh, "/results", dest, 60)
    ssh = ssh_to(monkeypatch, ["sh", "-c", "echo not tar; head -c 3000000 /dev/zero"])
    with pytest.raises(RigError, match=r"^rig t: the server's results are not a tar stream krig can read: "):
        pull_results(ssh, "/results", dest, 60)
    clean = dest.parent / "clean"
    clean.mkdir()
    ssh = ssh_to(monkeypatch, ["sh", "-c", f"tar -C {clean} -cf - .; head -c 3000000 /dev/zero | tr '\\0' x"])
    with pytest.raises(RigError, match=r"^rig t: the server's results go on past the end of their tar stream$"):
        pull_results(ssh, "/results", dest, 60)
    assert os.listdir(dest) == []


def test_timeout_kills_the_producer(host, monkeypatch):
    dest, _ = host
    mark = secrets.token_hex(6)
    ssh = ssh_to(monkeypatch, ["sh", "-c", f"sleep 300; : {mark}"])
    with pytest.raises(subprocess.TimeoutExpired):
        pull_results(ssh, "/results", dest, 1)
    left = [p for p in pathlib.Path("/proc").iterdir() if p.name.isdigit() and mark.encode() in _cmdline(p)]
    assert not left, "the producer outlived the pull"


def _cmdline(p: pathlib.Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


def test_stream_from_reads_stderr_alongside(host):
    """A producer that writes much to stderr before its stdout neither blocks nor fills memory."""
    dest, _ = host
    rc, err, data = stream_from(["sh", "-c", "head -c 500000 /dev/zero | tr '\\0' e >&2; echo out"],
                                lambda f: f.read(100), 60, "t")
    assert (rc, data) == (0, b"out\n") and len(err) == 4096 and set(err) == {"e"}


def test_rig_file_caps(tmp_path):
    from rigs.ipmi.spec import validate_spec
    from krig.errors import UsageError
    for name in ("key", "pw"):
        (tmp_path / name).write_text("k\nbmc = 10.0.0.5\n")
        (tmp_path / name).chmod(0o600)
    (tmp_path / "known_hosts").write_text("")
    base = {"driver": "ipmi", "bmc": {"host": "10.0.0.5", "user": "krig", "password_file": str(tmp_path / "pw")},
            "ssh": {"host": "10.0.0.6", "key": str(tmp_path / "key"), "known_hosts": str(tmp_path / "known_hosts")}}
    spec, _ = validate_spec("t", base)
    assert (spec.pull_max_size, spec.pull_max_file_size) == (16 << 30, 8 << 30)
    spec, _ = validate_spec("t", {**base, "pull_max_size": "64G", "pull_max_file_size": "32G"})
    assert (spec.pull_max_size, spec.pull_max_file_size) == (64 << 30, 32 << 30)
    with pytest.raises(UsageError, match=r"rigs/t\.toml\.pull_max_size: expected a size"):
        validate_spec("t", {**base, "pull_max_size": "lots"})


# -- a real run on the simulated IPMI server whose results hold hostile entries ---------------

@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from ipmi_fixture import running_sim
    with running_sim(tmp_path_factory, "ipmi-pull") as server:
        yield server


@pytest.mark.ipmi
def test_run_whose_results_hold_hostile_entries_is_error(sim, tmp_path, monkeypatch):
    """selftest-pass on the server; before the pull, its results get a symlink to a host file,
    a symlinked directory, a hard link, a FIFO and a character device (the server is root).
    The verdict is ERROR naming the refusal; the host file is untouched; the data is kept."""
    from workflows.run import run
    from rigs.ipmi import rig as ipmi
    from rigs.ipmi.ssh import remote_command
    secret = tmp_path / "host-secret"
    secret.write_bytes(SECRET)
    orig = ipmi._Files.pull
    planted = []

    def planting_pull(files, remote, local):
        plant = (f"cd {remote} && ln -s {secret} evil && ln -s {tmp_path} up && echo data > a.txt && "
                 f"ln a.txt b.txt && mkfifo fifo && mknod null c 1 3 && echo after > zz-after.txt")
        rc, _, err = files.server.ssh.run(remote_command(["sh", "-c", plant], None), timeout=120)
        planted.append((rc, err))
        return orig(files, remote, local)

    monkeypatch.setattr(ipmi._Files, "pull", planting_pull)
    run_dir, verdict = run("selftest-pass", rig_name="sim", results_root=tmp_path / "results", log=print)
    assert planted and planted[0][0] == 0, planted
    assert verdict.verdict == "ERROR", verdict
    reason = verdict.reason
    assert reason.startswith("rig sim: the server's results hold ") and "\n" not in reason, reason
    assert ": refused (and 4 more: " in reason, reason
    assert f"a symlink evil -> {secret}" in reason or "; ..." in reason, reason
    assert secret.read_bytes() == SECRET
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["pull_error"] == reason and m["outcome"] == "completed"
    assert m["rig_facts"]["results_pull"] == "refused entries (pull_error)"
    for name in ("facts.txt", "samples.tsv", "phases.tsv", "workload.rc", "zz-after.txt", "console.log"):
        assert (run_dir / name).is_file() and not (run_dir / name).is_symlink(), name
    assert [(run_dir / n).exists() for n in ("a.txt", "b.txt")].count(True) == 1
    for p in run_dir.rglob("*"):
        st = os.lstat(p)
        assert stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode), p
    assert sim.power_status() == "off"
