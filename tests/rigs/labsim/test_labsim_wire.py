"""The simulated server's private wires (rigs/labsim/wire.py) with real sockets and processes,
no ipmi_sim: the serial cable takes only its BMC's process and never drops it for a newcomer,
another local user reaches no socket of the private directory, and a stop signals the session
its BMC leads and nothing else. The whole server's are tests/rigs/labsim/test_labsim_trust.py's.

Covers: rigs/labsim/user.py, rigs/labsim/wire.py."""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from krig.paths import process_record
from rigs.labsim.user import lab_user
from rigs.qemu import confine as qemu_confine
from rigs.labsim.wire import SerialCable, kill_session, remove_wire_dir, session_members, user_ids, wire_dir

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
# the QEMU rig's guests' user when the tests run as root: no simulated server's wire is theirs either
QEMU_GUEST = ["setpriv", f"--reuid={qemu_confine.USER}", f"--regid={qemu_confine.USER}", "--clear-groups", "--"]
# a client as ipmi_sim's SOL is: connects to the socket, prints what comes, stops at EOF
CLIENT = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\nprint('connected',flush=True)\n"
          "while True:\n d=s.recv(100)\n if not d: break\n print(d.decode(),flush=True)\n")


def _wait(cond, what, timeout=20):
    for _ in range(int(timeout * 20)):
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"waited {timeout}s for {what}")


class FakeCom:
    """QEMU's COM port: connects to the cable's server end; what it sends goes to the cable."""

    def __init__(self, path: pathlib.Path):
        self.conn = socket.socket(socket.AF_UNIX)
        self.conn.connect(str(path))


@pytest.fixture
def wires():
    d = wire_dir(lab_user())
    yield d
    remove_wire_dir(d)
    assert not d.exists()


def test_the_cable_takes_only_its_bmc_and_keeps_it(wires):
    cable = SerialCable(wires / "sol.sock", wires / "serial.sock")
    cable.start()
    com = FakeCom(wires / "serial.sock")
    bmc = subprocess.Popen([sys.executable, "-c", CLIENT, str(wires / "sol.sock")], stdout=subprocess.PIPE,
                           text=True)
    try:
        assert bmc.stdout.readline().strip() == "connected"
        cable.peer = bmc.pid
        _wait(lambda: cable.bmc is not None and cable.vm is not None, "the cable's two ends")
        # a newcomer of the same user (another process): closed at once, never the BMC end
        intruder = socket.socket(socket.AF_UNIX)
        intruder.connect(str(wires / "sol.sock"))
        intruder.settimeout(10)
        assert intruder.recv(100) == b""
        assert cable.refused == 1
        com.conn.sendall(b"console line")
        assert bmc.stdout.readline().strip() == "console line"      # the BMC still has the console
        intruder.close()
    finally:
        cable.stop()
        bmc.kill()
        bmc.wait()


def test_another_user_reaches_no_wire(wires):
    """A second local user (nobody) can connect to no socket of the private directory, nor read
    what is in it; the user the BMC runs as when krig is root can."""
    cable = SerialCable(wires / "sol.sock", wires / "serial.sock", owner=user_ids(lab_user()))
    (wires / "lan.conf").write_text("secret\n")
    try:
        for target in ("sol.sock", "serial.sock", "lan.conf", "run"):
            path = wires / target
            code = ("import socket,sys,os\np=sys.argv[1]\ntry:\n if p.endswith('.sock'):\n"
                    "  s=socket.socket(socket.AF_UNIX); s.connect(p)\n elif os.path.isdir(p): os.listdir(p)\n"
                    " else: open(p).read()\n print('reached')\nexcept PermissionError: print('refused')\n")
            for who in [NOBODY] + ([QEMU_GUEST] if os.geteuid() == 0 else []):
                p = subprocess.run(who + ["/usr/bin/python3", "-I", "-c", code, str(path)], capture_output=True,
                                   text=True, timeout=30)
                assert p.stdout.strip() == "refused", (who, target, p.stdout, p.stderr)
        assert oct(wires.stat().st_mode & 0o777) in ("0o700", "0o710")
        if lab_user() is not None:          # as root: the BMC's user goes through to the cable's sockets
            who = lab_user()
            code = "import socket,sys\ns=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print('reached')"
            for sock in ("sol.sock", "serial.sock"):
                p = subprocess.run(["setpriv", f"--reuid={who}", f"--regid={user_ids(who)[1]}", "--clear-groups", "--",
                                    "/usr/bin/python3", "-I", "-c", code, str(wires / sock)],
                                   capture_output=True, text=True, timeout=30)
                assert p.stdout.strip() == "reached", (sock, p.stderr)
    finally:
        cable.close()


def test_a_stop_signals_the_session_and_nothing_else(tmp_path):
    """kill_session: the session the record's process leads (a child it started too), never a
    process outside it whose command line says the same, nor a session whose leader's pid
    is another process's now."""
    lead = subprocess.Popen(["sh", "-c", "sleep 600 & exec sleep 601"], start_new_session=True)
    decoy = subprocess.Popen(["bash", "-c", f"exec -a 'sleep 600 {tmp_path}' sleep 602"])
    try:
        rec = process_record(lead.pid)
        _wait(lambda: len(session_members(rec)) == 2, "the session's two processes")
        assert decoy.pid not in session_members(rec)
        assert session_members({**rec, "start": str(int(rec["start"]) - 1)}) == []      # not that process any more
        killed = kill_session(rec)
        assert lead.pid in killed and len(killed) == 2 and decoy.poll() is None
        lead.wait(10)
        assert session_members(rec) == []
    finally:
        for p in (lead, decoy):
            p.kill()
            p.wait()
    assert os.path.exists(tmp_path)


def test_the_cable_feeds_no_com_port_but_its_servers(wires):
    """A connection to the COM port's end from a process that is not the server's QEMU (vm_ok
    says no): the cable hangs up on it and sends it nothing."""
    cable = SerialCable(wires / "sol.sock", wires / "serial.sock")
    seen = []
    cable.vm_ok = lambda pid: seen.append(pid) or False
    cable.start()
    com = FakeCom(wires / "serial.sock")
    try:
        com.conn.settimeout(10)
        assert com.conn.recv(100) == b"" and cable.vm is None
        assert seen and seen[0] == os.getpid()          # asked about the socket's server: this process
    finally:
        cable.stop()


def test_an_ended_process_not_yet_reaped_is_not_alive():
    """A supervisor killed with SIGKILL is a zombie until its parent (or init) reaps it: its record
    says it is gone at once, so `krig lab sim list` says stopped however slow the reaping."""
    from krig.paths import owner_alive, process_record
    child = subprocess.Popen(["sleep", "60"])
    try:
        rec = process_record(child.pid)
        assert owner_alive(rec)
        os.kill(child.pid, signal.SIGKILL)
        for _ in range(100):                 # the kill lands: the child's state turns Z (not waited for)
            if open(f"/proc/{child.pid}/stat").read().rpartition(")")[2].split()[0] == "Z":
                break
            time.sleep(0.05)
        assert os.path.exists(f"/proc/{child.pid}") and not owner_alive(rec)
        assert process_record(child.pid) is None
    finally:
        child.kill()
        child.wait()
