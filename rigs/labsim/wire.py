"""The simulated server's private wires: its directory, the serial cable, the processes it started.

A simulated server's BMC side channels are Unix sockets in a directory of its
own (`wire_dir`, made by mkdtemp: a new name, mode 0700), never TCP ports:
  run/kcs.sock     ipmi_sim's VM serial interface (the KCS wire); QEMU connects
  sol.sock         the serial cable's BMC end; ipmi_sim's SOL connects
  serial.sock      the serial cable's server end; QEMU's COM port connects
(the cable's two are krig's, made in krig's directory, mode 0600, ipmi_sim's user's)
ipmi_sim knows only TCP for the first two: rigs/labsim/ipmisim/krig_unix.c, preloaded
into it, turns its bind and connect to the privileged ports lan.conf names into
these sockets. When krig runs as root, ipmi_sim and QEMU run as rigs/labsim/user.py's
`krig-lab`: the directory is then root's with that user's group and mode 0710 (the
user goes through it, lists and creates nothing in it: its configuration, the
libraries preloaded into ipmi_sim and the cable's socket stay root's to make), and
`run` and `state` are that user's (0700). No other user reaches a socket: not
`nobody`, not `krig-qemu` (the QEMU rig's guests).

The serial cable also checks its peers (SO_PEERCRED): only ipmi_sim's own process
is the BMC end and only a process of ipmi_sim's session (the server's QEMU) the COM
port; another connection is closed at once and never displaces either.

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
import socket
import struct
import tempfile
import threading

from krig.paths import process_record
from rigs.procs import kill_until_gone

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


def _listen(path: pathlib.Path, owner: tuple[int, int] | None) -> socket.socket:
    """A Unix socket listening at `path` (in krig's own directory), mode 0600, `owner`'s."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        s.bind(str(path))
    finally:
        os.umask(old)
    if owner is not None:
        os.chown(path, *owner, follow_symlinks=False)
    s.listen(4)
    return s


class SerialCable(threading.Thread):
    """The wire between the BMC's SOL UART and the server's COM port, which stays connected
    across power cycles. Both ends are the cable's sockets, made in krig's own directory (mode
    0600, `owner`'s: the user ipmi_sim and QEMU run as): ipmi_sim's SOL connects to `bmc_path`
    (its process only: `peer`, set once it runs), the server's QEMU connects its COM port to
    `vm_path` each time it starts (a process `vm_ok(pid)` says is the server's). Any other
    connection to either is closed at once and never displaces the end it knocked on; krig
    itself connects to nothing another user could have put in its way."""

    def __init__(self, bmc_path: pathlib.Path, vm_path: pathlib.Path, owner: tuple[int, int] | None = None):
        super().__init__(name="ipmi-serial-cable", daemon=True)
        self.bmc_listener = _listen(bmc_path, owner)
        self.vm_listener = _listen(vm_path, owner)
        self.stop_flag = threading.Event()
        self.bmc = self.vm = None
        self.peer: int | None = None        # ipmi_sim's pid
        self.vm_ok = lambda pid: True
        self.pending: list[tuple[socket.socket, str]] = []
        self.refused = 0

    def _admit(self, conn: socket.socket, end: str) -> bool:
        try:
            pid = peer_pid(conn)
        except OSError:
            return False
        return pid == self.peer if end == "bmc" else bool(self.vm_ok(pid))

    def _judge(self):
        """New connections: ipmi_sim's becomes the BMC end, the server's QEMU's the COM port,
        any other is closed (BMC ones wait until ipmi_sim's pid is known)."""
        keep = []
        for conn, end in self.pending:
            if end == "bmc" and self.peer is None:
                keep.append((conn, end))
            elif self._admit(conn, end):
                old = getattr(self, end)
                if old is not None:
                    old.close()
                setattr(self, end, conn)
            else:
                self.refused += 1
                conn.close()
        self.pending = keep

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
        while not self.stop_flag.is_set():
            self._judge()
            socks = [s for s in (self.bmc_listener, self.vm_listener, self.bmc, self.vm) if s is not None]
            try:
                ready, _, _ = select.select(socks, [], [], 0.1)
            except (OSError, ValueError):
                continue
            for s in ready:
                if s is self.bmc_listener:
                    self.pending.append((s.accept()[0], "bmc"))
                elif s is self.vm_listener:
                    self.pending.append((s.accept()[0], "vm"))
                elif s in (self.bmc, self.vm):
                    self._relay(s)
        self.close()

    def close(self):
        for s in (self.bmc_listener, self.vm_listener, self.bmc, self.vm, *(c for c, _ in self.pending)):
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
    return kill_until_gone(lambda: session_members(rec), int(wait * 10))

