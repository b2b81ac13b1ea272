"""A server's serial console over the network: `rfc2217://host:port` (RFC 2217, through
pyserial's serial_for_url, the line's speed set to the rig file's `console_speed`),
`telnet://host:port` (plain telnet) or `raw://host:port` (the bytes of a TCP connection as they
come, no telnet), as a terminal server or ser2net in front of the server's serial line offers
it, or `unix:/PATH` (a console server's Unix socket on this host, raw bytes: the simulated
Redfish server's ser2net, a socket of mode 0600 only its user and root reach); the rig file's
`console` says which (`sol`, the IPMI default, is Serial over LAN through the BMC:
rigs/ipmi/bmc.py Sol). With telnet and raw the console server sets the line's speed.

The console goes to console.log for the whole run, byte for byte as the server wrote it
(telnet's IAC commands taken out); a dropped connection is reconnected a bounded number of
times, each time noted in netconsole.log, as SOL's restarts are in sol.log. What is kept is
bounded: past rigs/protocol.py CONSOLE_CAP bytes (a console server that floods; a serial line
at 115200 baud writes some 40 MB an hour) krig stops reading, says so in netconsole.log, and
`capped` says it.
"""
import errno
import os
import pathlib
import re
import socket
import struct
import threading
import time

from krig.errors import RigError
from rigs.procs import log_line
from rigs.protocol import CONSOLE_CAP

SCHEMES = ("rfc2217", "telnet", "raw")
SPEEDS = (9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600)
URL_RE = re.compile(r"^(rfc2217|telnet|raw)://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})$")
UNIX_RE = re.compile(r"^unix:(/[A-Za-z0-9_./+=@-]{1,106})$")        # a Unix socket's path: at most 107 bytes
RESTARTS = 20
CONNECT_TIMEOUT = 10
READ = 4096
IAC, DONT, DO, WONT, WILL, SB, SE = 255, 254, 253, 252, 251, 250, 240
BINARY, SGA = 0, 3


def net_console_ok(v: str) -> bool:
    """A console server: a network console URL with a port 1-65535, or unix:/PATH."""
    m = URL_RE.match(v)
    return (m is not None and 1 <= int(m.group(3)) <= 65535) or bool(UNIX_RE.match(v))


def console_ok(v: str) -> bool:
    """The rig file's console: sol, or a console server (net_console_ok)."""
    return v == "sol" or net_console_ok(v)


CONSOLE_SAYS = ("{v!r}: use sol (IPMI Serial over LAN), rfc2217://HOST:PORT, telnet://HOST:PORT or "
                "raw://HOST:PORT (a network serial console such as ser2net), or unix:/PATH (a console "
                "server's Unix socket)")


def parse(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a console URL; ("unix", path, 0) of unix:/PATH."""
    u = UNIX_RE.match(url)
    if u:
        return "unix", u.group(1), 0
    m = URL_RE.match(url)
    if not m:
        raise RigError(f"not a network console URL: {url!r}")
    return m.group(1), m.group(2).strip("[]"), int(m.group(3))


class _Telnet:
    """A plain telnet client: refuses every option but binary and suppress-go-ahead, and
    hands back the data bytes only."""

    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), CONNECT_TIMEOUT)
        self.sock.settimeout(1.0)
        self._state, self._cmd = 0, 0

    def read(self) -> bytes:
        try:
            data = self.sock.recv(READ)
        except TimeoutError:
            return b""
        if not data:
            raise ConnectionError("the console server closed the connection")
        return self._filter(data)

    def _filter(self, data: bytes) -> bytes:
        out, reply = bytearray(), bytearray()
        for b in data:
            st = self._state
            if st == 0:
                if b == IAC:
                    self._state = 1
                else:
                    out.append(b)
            elif st == 1:                       # after IAC
                if b == IAC:
                    out.append(IAC)
                    self._state = 0
                elif b in (DO, DONT, WILL, WONT):
                    self._cmd, self._state = b, 2
                elif b == SB:
                    self._state = 3
                else:
                    self._state = 0
            elif st == 2:                       # the option of DO/DONT/WILL/WONT
                if self._cmd == DO:
                    reply += bytes([IAC, WILL if b in (BINARY, SGA) else WONT, b])
                elif self._cmd == WILL:
                    reply += bytes([IAC, DO if b in (BINARY, SGA) else DONT, b])
                self._state = 0
            elif st == 3:                       # inside a subnegotiation, until IAC SE
                self._state = 4 if b == IAC else 3
            else:
                self._state = 0 if b == SE else 3
        if reply:
            self.sock.sendall(bytes(reply))
        return bytes(out)

    def close(self):
        self.sock.close()


class _Raw(_Telnet):
    """A plain TCP connection: every byte is the console's (no telnet commands)."""

    def _filter(self, data: bytes) -> bytes:
        return data


class _Unix(_Raw):
    """A console server's Unix socket: the bytes as they come, taken only from a process of the
    user the socket file (not a link in its place) belongs to (SO_PEERCRED): a socket of
    another user's put at the name is never read; nothing is ever sent."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(CONNECT_TIMEOUT)
            self.sock.connect(path)
            peer = struct.unpack("3i", self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            owner = os.lstat(path).st_uid
            if peer != owner:
                raise PermissionError(errno.EPERM, f"answered by a process of uid {peer}, not of the socket's "
                                                   f"owner (uid {owner})")
        except OSError:
            self.sock.close()
            raise
        self.sock.settimeout(1.0)


class _Rfc2217:
    def __init__(self, host: str, port: int, speed: int = 115200):
        import serial       # pyserial (pyserial-labgrid, labgrid's own): RFC 2217 client
        try:
            where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            # ign_set_control: ser2net in front of a pty or socket does not answer modem-line changes
            self.port = serial.serial_for_url(f"rfc2217://{where}?ign_set_control&timeout={CONNECT_TIMEOUT}",
                                              baudrate=speed, timeout=1.0)
        except (serial.SerialException, OSError, ValueError) as e:
            raise ConnectionError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None

    def read(self) -> bytes:
        import serial
        try:
            return self.port.read(READ)
        except (serial.SerialException, OSError) as e:
            raise ConnectionError(str(e) or type(e).__name__) from None

    def close(self):
        self.port.close()


class NetConsole:
    """The console at `url` written to log_path for the whole run, reconnected when dropped
    (bounded); the same start/stop/alive/restarts as the SOL console."""

    def __init__(self, url: str, log_path: pathlib.Path, notes_path: pathlib.Path, where: str = "console",
                 speed: int = 115200):
        self.url, self.log_path, self.notes_path, self.where, self.speed = url, log_path, notes_path, where, speed
        self.scheme, self.host, self.port = parse(url)
        self.restarts = 0
        self.capped = False
        self._conn = None
        self._want = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _note(self, line: str):
        log_line(self.notes_path, f"krig: {line}")

    def _connect(self):
        if self.scheme == "unix":
            return _Unix(self.host)
        if self.scheme == "rfc2217":
            return _Rfc2217(self.host, self.port, self.speed)
        return (_Raw if self.scheme == "raw" else _Telnet)(self.host, self.port)

    def start(self):
        """Connects once now: a console that does not answer is one line before anything runs."""
        try:
            self._conn = self._connect()
        except OSError as e:
            raise RigError(f"{self.where}: cannot connect to the console {self.url}: "
                           f"{e.strerror or e}") from None
        self._want = True
        self._note(f"console {self.url} connected")
        self._thread = threading.Thread(target=self._pump, name="krig-netconsole", daemon=True)
        self._thread.start()

    def _pump(self):
        with open(self.log_path, "ab", buffering=0) as log:
            while self._want:
                try:
                    data = self._conn.read()
                except (OSError, EOFError) as e:
                    if not self._reconnect(e):
                        return
                    continue
                cap = CONSOLE_CAP
                if data and log.tell() + len(data) > cap:
                    log.write(data[:max(0, cap - log.tell())])
                    self.capped, self._want = True, False
                    self._note(f"the console went past {cap >> 20} MiB, the most krig keeps of it; "
                               "krig stopped reading it")
                    return
                if data:
                    log.write(data)

    def _reconnect(self, err) -> bool:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        for _ in range(RESTARTS - self.restarts):
            if not self._want:
                return False
            self.restarts += 1
            self._note(f"console connection lost ({err or type(err).__name__}); reconnecting ({self.restarts})")
            time.sleep(min(2 * self.restarts, 10))
            try:
                with self._lock:
                    if not self._want:
                        return False
                    self._conn = self._connect()
                return True
            except OSError as e:
                err = e
        self._note(f"console connection lost; gave up after {self.restarts} reconnections")
        self._want = False
        return False

    def alive(self) -> bool:
        return self._want and self._thread is not None and self._thread.is_alive()

    def stop(self):
        self._want = False
        if self._thread is not None:
            self._thread.join(15)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        self._note(f"console stopped ({self.restarts} reconnections)")


def open_console(url: str, bmc, run_dir: pathlib.Path, log_path: pathlib.Path, where: str, speed: int = 115200):
    """The rig's network console (url: the rig file's console, not "sol": SOL is the BMC's,
    rigs/ipmi/bmc.py Sol) writing log_path, started (speed: an RFC 2217 line's)."""
    con = NetConsole(url, log_path, run_dir / "netconsole.log", where, speed)
    con.start()
    return con
