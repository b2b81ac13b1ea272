"""The simulated server's private wires: its directory, the serial cable, the processes it started.

A simulated server's BMC side channels are Unix sockets in a directory of its
own (`wire_dir`, made by mkdtemp: a new name, mode 0700), never TCP ports:
  run/kcs.sock     ipmi_sim's VM serial interface (the KCS wire); QEMU connects
  sol.sock         the serial cable's BMC end (krig's, mode 0600, ipmi_sim's user's); ipmi_sim's SOL connects
  run/serial.sock  QEMU's COM port; the serial cable connects
ipmi_sim knows only TCP for the first two: rigs/labsim/ipmisim/krig_unix.c, preloaded
into it, turns its bind and connect to the privileged ports lan.conf names into
these sockets. When krig runs as root, ipmi_sim and QEMU run as rigs/labsim/user.py's
`krig-lab`: the directory is then root's with that user's group and mode 0710 (the
user goes through it, lists and creates nothing in it: its configuration, the
libraries preloaded into ipmi_sim and the cable's socket stay root's to make), and
`run` and `state` are that user's (0700). No other user reaches a socket: not
`nobody`, not `krig-qemu` (the QEMU rig's guests).

The serial cable also checks its peers: only ipmi_sim's own process (SO_PEERCRED)
is the BMC end, another connection is closed at once and never displaces it; and
the COM port it connects to must be served by a process of ipmi_sim's session
(the server's QEMU), so a socket put in its place is never fed the console.

What a server started is known by record, never by a command line: ipmi_sim's
process (krig.paths.process_record: pid + start time) leads a session of its own,
where the server's QEMU runs too; `session_members` finds that session's
processes, so a stop signals those and nothing else.
"""
import os
import pathlib
import pwd
import select
import shutil
import signal
import socket
import struct
import tempfile
import threading
import time

from krig.paths import process_record

PREFIX = "krig-bmc-"
KCS_MARK, SOL_MARK = 1, 2       # the privileged ports lan.conf names for the KCS wire and SOL


def wire_dir(user: str | None) -> pathlib.Path:
    """A new private directory for a server's wires and BMC files (see above); user: who ipmi_sim
    and QEMU run as when it is not krig's own user (None)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix=PREFIX))
    for sub in ("run", "state"):
        (d / sub).mkdir(mode=0o700)
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(d, 0, pw.pw_gid)
        d.chmod(0o710)
        for sub in ("run", "state"):
            os.chown(d / sub, pw.pw_uid, pw.pw_gid)
    return d


def remove_wire_dir(d) -> None:
    """Remove a directory wire_dir() made (a path of another shape is left alone)."""
    if d and pathlib.Path(d).name.startswith(PREFIX) and pathlib.Path(d).parent == pathlib.Path(tempfile.gettempdir()):
        shutil.rmtree(d, ignore_errors=True)


def user_ids(user: str | None) -> tuple[int, int]:
    if user is None:
        return os.getuid(), os.getgid()
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def peer_pid(conn: socket.socket) -> int:
    """The pid of the process at the other end of a Unix socket (SO_PEERCRED)."""
    pid, _uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid


class SerialCable(threading.Thread):
    """The wire between the BMC's SOL UART and the server's COM port, which stays connected
    across power cycles. ipmi_sim's SOL connects to `bmc_path` (its process only: `peer`, set
    once it runs); the cable connects to QEMU's serial socket `vm_path` whenever a server runs,
    and keeps the connection when `vm_ok(pid of the socket's server)` says it is the server's."""

    def __init__(self, bmc_path: pathlib.Path, vm_path: pathlib.Path, owner: tuple[int, int] | None = None):
        super().__init__(name="ipmi-serial-cable", daemon=True)
        self.vm_path = str(vm_path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(str(bmc_path))
        finally:
            os.umask(old)
        if owner is not None:
            os.chown(bmc_path, *owner, follow_symlinks=False)
        self.listener.listen(4)
        self.stop_flag = threading.Event()
        self.bmc = self.vm = None
        self.peer: int | None = None        # ipmi_sim's pid
        self.vm_ok = lambda pid: True
        self.pending: list[socket.socket] = []
        self.refused = 0

    def _try_vm(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(0.2)
        try:
            s.connect(self.vm_path)
            if not self.vm_ok(peer_pid(s)):
                raise OSError("not the server's COM port")
            s.settimeout(None)
            self.vm = s
        except OSError:
            s.close()

    def _judge(self):
        """Connections to the BMC end: ipmi_sim's becomes it, any other is closed."""
        if self.peer is None:
            return
        for conn in self.pending:
            try:
                ok = peer_pid(conn) == self.peer
            except OSError:
                ok = False
            if ok:
                if self.bmc is not None:
                    self.bmc.close()
                self.bmc = conn
            else:
                self.refused += 1
                conn.close()
        self.pending = []

    def _relay(self, s):
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        other = self.vm if s is self.bmc else self.bmc
        if not data:
            s.close()
            if s is self.vm:
                self.vm = None
            else:
                self.bmc = None
            return
        if other is not None:
            try:
                other.sendall(data)
            except OSError:
                pass

    def run(self):
        last_try = 0.0
        while not self.stop_flag.is_set():
            if self.vm is None and time.monotonic() - last_try > 0.1:
                last_try = time.monotonic()
                self._try_vm()
            self._judge()
            socks = [s for s in (self.listener, self.bmc, self.vm) if s is not None]
            try:
                ready, _, _ = select.select(socks, [], [], 0.1)
            except (OSError, ValueError):
                continue
            for s in ready:
                if s is self.listener:
                    self.pending.append(self.listener.accept()[0])
                elif s in (self.bmc, self.vm):
                    self._relay(s)
        for s in (self.listener, self.bmc, self.vm, *self.pending):
            if s is not None:
                s.close()

    def stop(self):
        self.stop_flag.set()
        self.join(5)


def _stat(pid: int) -> list[str] | None:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def session_members(rec: dict | None) -> list[int]:
    """The live processes of the session that the process `rec` (process_record) leads: itself
    while it runs, and every process of its session started no earlier (what it started). When
    its pid is another process's now, that session is not its: nothing."""
    if not rec or not rec.get("pid"):
        return []
    sid, start = int(rec["pid"]), int(rec["start"])
    now = process_record(sid)
    if now is not None and int(now["start"]) != start:
        return []
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        f = _stat(int(d))
        if f and f[0] != "Z" and int(f[3]) == sid and int(f[19]) >= start:
            out.append(int(d))
    return sorted(out)


def kill_session(rec: dict | None, wait: float = 10) -> list[int]:
    """SIGKILL the processes session_members(rec) finds until none is left (at most `wait`
    seconds); the pids signalled."""
    killed: list[int] = []
    for _ in range(int(wait * 10)):
        left = session_members(rec)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    return sorted(set(killed))

