"""A lab server that attacks the controller through what it sends back over SSH: a stream
without end, escape sequences in its release and its stderr, a `uname` of its own first in
its PATH. The real sshd of the host on 127.0.0.1 (tests/sshd_fixture.py), each hostile
server one key whose forced command (or environment) is the attack; the reading krig
process is a child of the test, so that its memory is its own.

Fast cases (no sshd) check the bounded reader (rigs/procs.py drain) on local processes (a
workload's output files, an ipmitool whose answer never ends), a console server that floods,
and that the reply and the report show a server's control characters as text.

Covers: krig/safeio.py, rigs/ipmi/ssh.py, rigs/procs.py.
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from krig.errors import RigError
from rigs.ipmi.ssh import Ssh
from rigs.ipmi.state import Power
from rigs.procs import Overflow, drain
from sshd_fixture import running_sshd
from test_report import flood_run  # noqa: F401 (a fixture)
from test_validate import TESTER, reply_state, series_repo, sides  # noqa: F401 (series_repo: a fixture)

ESC_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")     # what no terminal line, reply or report may hold
HOSTILE_RELEASE = "\x1b[2J\x1b]0;title\x07 6.1-evil"


def _script(path: pathlib.Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile-sshd")
    (d / "zero").symlink_to("/dev/zero")            # the stream's source, named by this directory
    planted = d / "planted"
    planted.mkdir()
    for prog in ("uname", "env", "sh", "sudo", "zcat", "cat"):     # logins have a HOME of the test's (sshd_fixture.py)
        _script(planted / prog, f"echo \"$0 $*\" >> {d}/planted-ran\necho planted\n")
    stream = _script(d / "stream.sh", f"exec head -c 1G {d}/zero\n")
    keys = {
        "stream_key": f'command="{stream}"',
        "release_key": 'command="{}"'.format(_script(d / "release.sh", (
            "printf 'krig-drivers 1\\nrelease \\033[2J\\033]0;title\\007 6.1-evil\\n== modules\\n"
            "e1000e 1 0 - Live 0\\n'\n"))),
        "stderr_key": 'command="{}"'.format(_script(d / "stderr.sh", (
            "printf '\\033[2J\\033]0;pwned\\007 no such thing\\n' >&2; exit 1\n"))),
        "planted_key": f'environment="PATH={planted}:/usr/bin:/bin"',
    }
    with running_sshd(d, keys) as server:
        yield server


def _child(hostile, body: str) -> subprocess.CompletedProcess:
    """A krig process of its own (its memory measured by itself) running body with `rig(key)`."""
    code = f"""
import json, re, sys
sys.path.insert(0, {str(ROOT / 'tests')!r})
from sshd_fixture import ipmi_rig
def rig(key):
    return ipmi_rig({{"dir": __import__("pathlib").Path({str(hostile['dir'])!r}), "port": {hostile['port']}}},
                    "/tmp/krig-unused", key)
def hwm_kib():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
{body}
"""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=300)


def _left(d: pathlib.Path) -> list:
    """Processes other than the sshd itself whose command line names d (ssh, the stream)."""
    out = []
    for p in pathlib.Path("/proc").iterdir():
        try:
            cmd = (p / "cmdline").read_bytes() if p.name.isdigit() else b""
        except OSError:
            continue
        if str(d).encode() in cmd and not cmd.startswith((b"/usr/sbin/sshd", b"sshd")):
            out.append(cmd.replace(b"\0", b" ").decode(errors="replace"))
    return out


def test_a_server_streaming_without_end_is_cut_at_the_cap(hostile):
    """1 GiB on the inventory's stdout: krig reads 4 MiB of it, its memory stays bounded,
    one line names the cap (a rig error: exit 3, ERROR's), and no ssh nor stream is left."""
    p = _child(hostile, """
from krig.errors import guarded
from rigs.ipmi.drivers import inventory
r = rig("stream_key")
base = hwm_kib()
code = guarded(lambda: inventory(r.ssh, "local"))
print(json.dumps({"base": base, "peak": hwm_kib(), "code": code}))
""")
    got = json.loads(p.stdout.decode().strip().splitlines()[-1])
    err = p.stderr.decode()
    assert got["code"] == 3, err
    assert err.count("\n") == 1 and err.startswith("krig: error: rig local: reading the server's drivers "
                                                   "(over SSH): its stdout went past 4 MiB"), err
    assert (got["peak"] - got["base"]) < 64 * 1024, got           # KiB: under 64 MiB over the baseline
    for _ in range(100):
        if not _left(hostile["dir"]):
            break
        time.sleep(0.1)
    assert _left(hostile["dir"]) == []


def test_a_servers_escape_sequences_never_reach_the_terminal(hostile):
    """A release and a stderr full of escape sequences come back from the server as sent, and
    the progress line and the error line show them as text."""
    p = _child(hostile, """
from krig import progress
from krig.errors import guarded
from kernels.drivers import parse_inventory
from rigs.ipmi.drivers import inventory
text = inventory(rig("release_key").ssh, "local")
assert "\\x1b[2J" in text, text         # the server did send them
inv = parse_inventory(text, "rig local")
progress.say(f"krig: drivers from rig local ({inv['release']})")
sys.exit(guarded(lambda: inventory(rig("stderr_key").ssh, "local")))
""")
    out, err = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 3, out + err
    assert out == "krig: drivers from rig local (\\x1b[2J\\x1b]0;title\\x07 6.1-evil)\n"
    assert err == ("krig: error: rig local: reading the server's drivers failed: "
                   "\\x1b[2J\\x1b]0;pwned\\x07 no such thing\n")
    assert not ESC_RE.search(out.replace("\n", "") + err.replace("\n", ""))


def test_a_programme_the_server_put_first_in_its_path_is_not_run(hostile):
    """The login PATH of this server puts a directory of its own first (uname, env, sh, sudo,
    cat there): krig's commands run with krig's PATH, never one of them."""
    d = hostile["dir"]
    marker = d / "planted-ran"
    plain = subprocess.run(["ssh", "-F", "none", "-p", str(hostile["port"]), "-i", str(d / "planted_key"),
                            "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={d}/known_hosts",
                            "-o", "IdentitiesOnly=yes", "127.0.0.1", "uname -r"],
                           capture_output=True, text=True, timeout=60)
    assert plain.stdout == "planted\n" and marker.exists(), plain.stderr     # the plant works as planted
    marker.unlink()
    p = _child(hostile, """
from kernels.drivers import parse_inventory
from rigs.ipmi.drivers import inventory
r = rig("planted_key")
print(parse_inventory(inventory(r.ssh, "local"), "rig local")["release"])
rc, out, _ = r.ssh.run("cat /proc/sys/kernel/random/boot_id", timeout=60)
print(out.decode().strip())
""")
    assert p.returncode == 0, p.stderr.decode()
    release, boot_id = p.stdout.decode().splitlines()
    assert release == os.uname().release
    assert boot_id == pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert not marker.exists(), marker.read_text()


# -- fast: no sshd ----------------------------------------------------------------

def _popen(script: str) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def test_drain_bounds_stderr_as_it_streams_and_ends_the_group():
    mark = f"sleep 301.{os.getpid()}"
    p = _popen(f"{mark} & head -c 3000000 /dev/zero >&2; wait")
    with pytest.raises(Overflow, match=r"^t: its stderr went past 1 MiB, the most krig reads of it; krig stopped "
                                       r"reading and ended it$") as e:
        drain(p, 60, (1 << 20, 1 << 20), "t")
    assert isinstance(e.value, RigError)
    assert p.poll() is not None
    for _ in range(50):
        if not _pids_with(mark.encode()):
            break
        time.sleep(0.1)
    assert _pids_with(mark.encode()) == [], "the child's group outlived the cap"


def test_drain_keeps_both_channels_within_their_caps():
    out, err, tail = drain(_popen("echo out; head -c 5000 /dev/zero | tr '\\0' e >&2"), 60, (100, 10000), "t")
    assert out == b"out\n" and err == b"e" * 5000 and tail == b"e" * 4096
    with pytest.raises(subprocess.TimeoutExpired):
        drain(_popen("sleep 30"), 0.5, (100, 100), "t")


def test_a_command_written_to_files_stops_at_its_cap(tmp_path, monkeypatch):
    """A workload's stdout goes to a file of krig's: never more than its cap on the host's disk."""
    ssh = Ssh("t", type("Cfg", (), {"user": "root", "host": "127.0.0.1", "port": 22})())
    monkeypatch.setattr(ssh, "argv", lambda remote, *a, **k: ["sh", "-c", "head -c 3000000 /dev/zero"])
    with open(tmp_path / "0.out", "wb") as fo, open(tmp_path / "0.err", "wb") as fe:
        with pytest.raises(Overflow, match=r"^rig t: running x \(over SSH\): its stdout went past 1 MiB"):
            ssh.run("x", timeout=60, stdout=fo, stderr=fe, caps=(1 << 20, 1 << 20), what="running x")
    assert (tmp_path / "0.out").stat().st_size <= 1 << 20


def _pids_with(mark: bytes) -> list:
    out = []
    for p in pathlib.Path("/proc").iterdir():
        try:
            if p.name.isdigit() and mark in (p / "cmdline").read_bytes():
                out.append(int(p.name))
        except OSError:
            pass
    return out


# -- fast: what a server said, in the reply and the report ---------------------------

def _clean(text: str) -> bool:
    return not ESC_RE.search(text.replace("\n", "").replace("\t", ""))


def test_a_servers_strings_reach_the_reply_as_text(series_repo, tmp_path):
    from kernels.series import load_series
    from krig.record_validation import ServerFacts
    from workflows.reply import write_reply
    from workflows.validate import decide, format_answer, judged_metrics
    from krig.safeio import printable_text
    series = load_series(series_repo["mbox"], log=lambda *a: None)
    res = sides(tmp_path, [0, 0, 0, 0], [5, 6, 7, 8])
    answer, reason = decide(res, judged_metrics(res))
    state = reply_state(series, answer, reason, res, tmp_path)
    state.base_kernel.release = HOSTILE_RELEASE
    state.server = ServerFacts(rig="lab1", system="\x1b[2JEvil box", firmware="\x1b]0;pwned\x07 1.0", cpus=2,
                               cpu="\x9b31mCPU", bmc="BMC \x1bc", ram_bytes=4 << 30)
    vdir = tmp_path / "v"
    vdir.mkdir()
    write_reply(vdir, state, res, TESTER)
    for name in ("reply.txt", "reply.mbox"):
        text = (vdir / name).read_text()
        assert _clean(text) and "\\x1b[2J" in text and "\\x1b]0;pwned\\x07 1.0" in text, name
    assert _clean(printable_text(format_answer(vdir, state)))       # what `krig validate` prints


def test_a_servers_strings_reach_the_report_as_text(flood_run):
    from analysis.report import write_report
    manifest = json.loads((flood_run / "manifest.json").read_text())
    manifest["kernel"]["release"] = manifest["release"] = HOSTILE_RELEASE
    (flood_run / "manifest.json").write_text(json.dumps(manifest))
    (flood_run / "verdict.json").write_text(json.dumps({"verdict": "ERROR", "reason": "rig lab1: \x1b[2Jboom"}))
    (flood_run / "console.log").write_bytes(b"[    1.0] \x1b]0;title\x07 console \x1b[31mred\r\n")
    (flood_run / "stderr").write_bytes(b"\x1b[2J workload stderr\n")
    write_report(flood_run)
    page = (flood_run / "report.html").read_text()
    assert _clean(page), ESC_RE.findall(page)
    assert "\\x1b[2Jboom" in page and "\\x1b]0;title\\x07 console" in page and "\\x1b[2J workload" in page
    assert _clean((flood_run / "summary.txt").read_text())


def test_a_console_server_that_floods_is_cut_at_the_cap(tmp_path, monkeypatch):
    """A network console (telnet) that never stops writing: console.log stops at the cap,
    netconsole.log says so, and the reading thread ends."""
    import socket
    import threading
    from rigs import netconsole
    monkeypatch.setattr(netconsole, "CONSOLE_CAP", 1 << 20)
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def flood():
        conn, _ = srv.accept()
        with conn:
            while not stop.is_set():
                try:
                    conn.sendall(b"x" * 65536)
                except OSError:
                    return
    t = threading.Thread(target=flood, daemon=True)
    t.start()
    con = netconsole.NetConsole(f"telnet://127.0.0.1:{srv.getsockname()[1]}", tmp_path / "console.log",
                                tmp_path / "netconsole.log")
    con.start()
    try:
        for _ in range(300):
            if con.capped:
                break
            time.sleep(0.1)
        assert con.capped and not con.alive()
    finally:
        con.stop()
        stop.set()
        srv.close()
        t.join(10)
    assert (tmp_path / "console.log").stat().st_size == 1 << 20
    assert "the console went past 1 MiB, the most krig keeps of it" in (tmp_path / "netconsole.log").read_text()


def _fake_bmc(tmp_path, monkeypatch, answers: str):
    """The rig's Bmc with an ipmitool of this test's: `answers` is the body of its `case "$*"`."""
    from rigs.ipmi import bmc as ipmi_bmc
    from sshd_fixture import ipmi_rig
    for name, text in (("bmc-password", "unused\nbmc = 127.0.0.1\n"), ("client_key", "unused\n"),
                       ("known_hosts", "unused\n")):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o600)
    tool = _script(tmp_path / "ipmitool", f'case "$*" in {answers} esac\n')
    monkeypatch.setattr(ipmi_bmc, "IPMITOOL", tool)
    return ipmi_rig({"dir": tmp_path, "port": 22}, "/tmp/krig-unused").bmc, tool


def test_a_bmc_whose_answer_never_ends_is_cut_at_the_cap(tmp_path, monkeypatch):
    """ipmitool's output (what the BMC answered) is read as it comes: an answer past the cap is
    one line naming it, nothing retried, ipmitool ended."""
    bmc, tool = _fake_bmc(tmp_path, monkeypatch, '*status*) echo "Chassis Power is on" ;; '
                                                 '*) exec head -c 100000000 /dev/zero ;;')
    assert bmc.power_status() is Power.ON
    with pytest.raises(Overflow, match=r"^rig local: BMC 127\.0\.0\.1:623: `ipmitool mc info`: its stdout went "
                                       r"past 16 MiB, the most krig reads of it; krig stopped reading and ended it$"):
        bmc.run("mc", "info")
    assert _pids_with(tool.encode()) == []


def test_a_sol_console_that_floods_is_cut_at_the_cap(tmp_path, monkeypatch):
    """SOL (ipmitool sol activate) that never stops writing: console.log stops at the cap, the
    session is ended and not restarted, sol.log says so."""
    from rigs.ipmi import bmc as ipmi_bmc
    monkeypatch.setattr(ipmi_bmc, "CONSOLE_CAP", 1 << 20)
    bmc, tool = _fake_bmc(tmp_path, monkeypatch, '*"sol activate"*) exec head -c 50000000 /dev/zero ;; '
                                                 '*) exit 0 ;;')
    sol = ipmi_bmc.Sol(bmc, tmp_path / "console.log", tmp_path / "sol.log")
    sol.start()
    try:
        for _ in range(300):
            if sol.capped and not sol.alive():
                break
            time.sleep(0.1)
        assert sol.capped and not sol.alive() and sol.restarts == 0
    finally:
        sol.stop()
    assert (tmp_path / "console.log").stat().st_size == 1 << 20
    assert "the console went past 1 MiB, the most krig keeps of it" in (tmp_path / "sol.log").read_text()
    assert _pids_with(tool.encode()) == []
