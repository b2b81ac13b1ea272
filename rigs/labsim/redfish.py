"""A simulated Redfish BMC, all on 127.0.0.1: sushy-tools' sushy-emulator (a Redfish service
krig did not write) with its libvirt driver over a libvirt domain, libvirt's per-user
qemu:///session daemon (libvirtd) started here, and ser2net in front of the domain's serial
line. TLS with a self-signed certificate made here, basic authentication against an
htpasswd file of a generated password (sushy-emulator has no SessionService).

No part runs as root. When krig is root, sushy-emulator, ser2net and libvirtd (and so the
QEMU it starts) run as the lab user (rigs/labsim/user.py: krig-lab) from their first
instruction (setpriv), each a true per-user daemon, never the system one; otherwise as
krig's own user. The server's directory (`make_vm_dir`, under /var/tmp) is krig's: when krig
is root, root's with the lab user's group and mode 0710, so the lab user goes through it but
lists and creates nothing in it. What krig writes for the daemons (sushy-emulator's
configuration, which flask executes as Python; the htpasswd file; the TLS key) it creates
there, in its own directory (mode 0640, the lab user's group); the domain's files (its disk
overlay, firmware variables, scratch disk) it creates there and then gives to the lab user.
Its one subdirectory `run` is the lab user's (0700): libvirtd's home and sockets, the serial
line's socket, ser2net's console socket (0600) and sushy-emulator's state. Nothing running as
root opens, creates, changes or executes a path in a directory of another user; krig drives
libvirtd through virsh run as that user, and its console reader checks who answers
(rigs/netconsole.py).

krig binds the BMC's port itself (127.0.0.1, a port the kernel picks) and hands the listening
socket to sushy-emulator (werkzeug's WERKZEUG_SERVER_FD), so no other local user can take the
port between its choice and its use; the BMC is ready once it answers TLS with the
certificate made here. ser2net listens on a Unix socket, never a TCP port.

What a server started is known by record, never by command line: each part leads a session
of its own (krig.paths.process_record: pid + start time; rigs/labsim/wire.py
session_members). libvirt starts QEMU (and its log daemon) as daemons outside libvirtd's
session: those are the processes of the server's user, started after its first part, that
hold a file of the server's directory open (`holders`). stop() destroys the domains, stops
the parts and kills what remains of them; every wait is bounded.
"""
import hashlib
import os
import pathlib
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from krig.errors import KrigError
from krig.paths import dies_with_parent, process_record
from rigs.labsim.user import lab_ids
from rigs.labsim.wire import kill_session
from rigs.procs import kill_until_gone, stop_group

NEEDED = {"libvirtd": "libvirt-daemon", "ser2net": "ser2net", "openssl": "openssl",
          "qemu-system-x86_64": "qemu-system-x86"}
START_WAIT = 60
BOOT_FIRST = "<boot order='1'/>"
PREFIX = "krig-rf-"
PATH = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"


def missing_tools() -> list[str]:
    out = [f"{t} ({pkg})" for t, pkg in NEEDED.items() if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]
    for mod, pkg in (("libvirt", "libvirt-python"), ("sushy_tools", "sushy-tools")):
        try:
            __import__(mod)
        except ImportError:
            out.append(f"the Python module {mod} ({pkg}: make setup)")
    return out


def make_vm_dir() -> pathlib.Path:
    """A new directory for a server (above): krig's, 0700, or root's with the lab user's group
    and 0710 when krig is root; its `run` the lab user's, 0700. Outside any home directory the
    lab user cannot enter; short: libvirt's sockets go below."""
    d = pathlib.Path(tempfile.mkdtemp(prefix=PREFIX, dir="/var/tmp"))
    (d / "run").mkdir(mode=0o700)
    ids = lab_ids()
    if ids is not None:
        os.chown(d, 0, ids[1], follow_symlinks=False)
        d.chmod(0o710)
        os.chown(d / "run", *ids, follow_symlinks=False)
    return d


def remove_vm_dir(d) -> None:
    """Remove a directory make_vm_dir() made (a path of another shape is left alone)."""
    p = pathlib.Path(d) if d else None
    if p and p.name.startswith(PREFIX) and p.parent == pathlib.Path("/var/tmp") and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)


def write_shared(d: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
    """A new file d/name (krig's own directory) the parts read: mode 0640 of the lab user's
    group (0600 when they keep krig's user); never an existing name, never through a link."""
    fd = os.open(d / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        ids = lab_ids()
        if ids is not None:
            os.fchown(fd, 0, ids[1])
            os.fchmod(fd, 0o640)
        os.write(fd, data)
    finally:
        os.close(fd)
    return d / name


def give(path: pathlib.Path) -> None:
    """A file krig made in its own directory, handed to the lab user (the domain writes it)."""
    ids = lab_ids()
    if ids is not None:
        os.chown(path, *ids, follow_symlinks=False)


def as_lab_user(argv: list) -> list:
    """argv run as the lab user from its first instruction, or as krig's user; either way it
    gets SIGKILL when its starter dies (setpriv sets it after the change of user, so it holds)."""
    ids = lab_ids()
    if ids is None:
        return dies_with_parent(argv)
    return ["setpriv", f"--reuid={ids[0]}", f"--regid={ids[1]}", "--clear-groups", "--no-new-privs",
            "--pdeathsig", "KILL", "--", *[str(a) for a in argv]]


def start_part(argv: list, log: pathlib.Path, lab: bool = True, **kw) -> subprocess.Popen:
    """A part of the server started as the lab user (lab) or krig's, in a session of its own
    and in /, its output to log."""
    with open(log, "ab") as out:
        return subprocess.Popen(as_lab_user(argv) if lab else dies_with_parent(argv), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out, start_new_session=True, cwd="/", **kw)


def make_cert(d: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, str]:
    """A self-signed certificate for 127.0.0.1 in d: (certificate, key, its SHA-256 fingerprint);
    the key made in a private temporary directory, then written as write_shared does."""
    with tempfile.TemporaryDirectory(prefix="krig-cert-") as tmp:
        key, cert = pathlib.Path(tmp) / "key.pem", pathlib.Path(tmp) / "cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "30", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
        pem = cert.read_bytes()
        write_shared(d, "bmc-key.pem", key.read_bytes())
    write_shared(d, "bmc-cert.pem", pem)
    der = ssl.PEM_cert_to_DER_cert(pem.decode())
    return d / "bmc-cert.pem", d / "bmc-key.pem", hashlib.sha256(der).hexdigest()


def write_htpasswd(d: pathlib.Path, user: str, password: str) -> pathlib.Path:
    import bcrypt       # sushy-tools' own dependency: its basic authentication reads bcrypt hashes
    line = f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"
    return write_shared(d, "htpasswd", line.encode())


def listen_local() -> socket.socket:
    """A TCP socket krig binds and listens on, 127.0.0.1, a port the kernel picks."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


def _exited(proc: subprocess.Popen, what: str, log: pathlib.Path) -> None:
    if proc.poll() is not None:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        raise KrigError(f"{what} exited {proc.returncode} at start: {tail[0] if tail else 'no output'} (log {log})")


def wait_port(port: int, proc: subprocess.Popen, what: str, log: pathlib.Path) -> None:
    for _ in range(START_WAIT * 5):
        _exited(proc, what, log)
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise KrigError(f"{what} does not listen on 127.0.0.1:{port} after {START_WAIT}s (log {log})")


def wait_path(path: pathlib.Path, proc: subprocess.Popen, what: str, log: pathlib.Path) -> None:
    for _ in range(START_WAIT * 5):
        _exited(proc, what, log)
        if path.exists():
            return
        time.sleep(0.2)
    raise KrigError(f"{what} does not listen on {path} after {START_WAIT}s (log {log})")


class LibvirtSession:
    """libvirtd as a per-user session daemon with its home in vm_dir/run. krig speaks to it only
    through `virsh` run as the lab user: no root process connects to a socket of that user's
    (one put in its place would be root's to talk to)."""

    def __init__(self, vm_dir: pathlib.Path, logs: pathlib.Path):
        self.home = vm_dir / "run"
        self.logs = logs
        self.sock = self.home / "r" / "libvirt" / "libvirt-sock"
        self.uri = f"qemu:///session?socket={self.sock}"
        self.proc: subprocess.Popen | None = None
        h = self.home
        self.env = ["env", "-i", f"HOME={h}", f"XDG_RUNTIME_DIR={h}/r", f"XDG_CONFIG_HOME={h}/c",
                    f"XDG_CACHE_HOME={h}/k", f"XDG_DATA_HOME={h}/d", PATH]

    def start(self):
        self.proc = start_part([*self.env, "libvirtd", "--timeout", "0"], self.logs / "libvirtd.log")
        for _ in range(START_WAIT * 5):
            if self.proc.poll() is not None:
                raise KrigError(f"libvirtd exited {self.proc.returncode} at start (log {self.logs}/libvirtd.log)")
            if self.sock.exists() and self.virsh("uri", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise KrigError(f"libvirtd did not answer on {self.sock} after {START_WAIT}s")

    def virsh(self, *args, check: bool = True) -> subprocess.CompletedProcess:
        """virsh ARGS against the daemon, as the lab user (bounded)."""
        p = subprocess.run(as_lab_user([*self.env, "virsh", "-q", "-c", self.uri, *args]), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60, cwd="/")
        if check and p.returncode != 0:
            why = (p.stderr.strip().splitlines() or ["no output"])[0]
            raise KrigError(f"libvirtd: virsh {args[0]} failed: {why} (log {self.logs}/libvirtd.log)")
        return p

    def connect(self):
        """A libvirt connection of this process (an observer's, the tests'; krig uses virsh)."""
        import libvirt
        libvirt.registerErrorHandler(lambda *a: None, None)     # errors are exceptions, not stderr lines
        return libvirt.open(self.uri)

    def define(self, xml: str) -> None:
        """The domain of `xml`, from a file krig writes in its own directory (vm_dir)."""
        self.virsh("define", str(write_shared(self.home.parent, "domain.xml", xml.encode())))

    def stop(self):
        """Every running domain destroyed, then the daemon stopped (the directory, with the
        domains' definitions, goes after)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                for name in self.virsh("list", "--name").stdout.split():
                    self.virsh("destroy", name, check=False)
            except (KrigError, subprocess.TimeoutExpired) as e:     # the sweep after this ends the rest
                with (self.logs / "libvirtd.log").open("a") as f:
                    f.write(f"krig: clean-up through libvirt: {e}\n")
        stop_group(self.proc, 10)


RUNNER = ("import runpy, sys; site, what = sys.argv[1:3]; del sys.argv[1:3]; sys.path[:0] = [site]; "
          "runpy.run_path(what, run_name='__main__') if what.endswith('.py') else "
          "runpy.run_module(what, run_name='__main__', alter_sys=True)")


def _reachable(path: str) -> bool:
    """Can any user (the lab user) read path, and go through every directory above it?"""
    p = pathlib.Path(path).resolve()
    return all(os.stat(d).st_mode & 0o001 for d in p.parents) and bool(os.stat(p).st_mode & 0o004)


def lab_python(what) -> list:
    """The argv prefix that runs `what` (a module's name, or [script, args...]) with the Python
    modules krig has (sushy-tools' and its dependencies) as the lab user: krig's Python when that
    user can run it, else the system's python3 of the same version (krig's may be in root's home);
    krig's site-packages first on its path, which that user must be able to read."""
    import sushy_tools
    what = [what] if isinstance(what, str) else [str(a) for a in what]
    site = str(pathlib.Path(sushy_tools.__file__).resolve().parents[1])
    py = sys.executable
    if lab_ids() is not None and not _reachable(py):
        py = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
        if not os.path.exists(py):
            raise KrigError(f"sushy-emulator runs as the lab user, who cannot run krig's Python {sys.executable}, "
                            f"and there is no {py}: install python3 (make setup)")
    if lab_ids() is not None and not _reachable(site):
        raise KrigError(f"sushy-emulator runs as the lab user, who cannot read {site} (krig's Python modules): "
                        "keep krig's checkout where any user can read it, not in root's home")
    return [py, "-I", "-B", "-c", RUNNER, site, *what]


class SushyEmulator:
    """sushy-emulator over a libvirt URI, HTTPS with basic authentication, on the listening
    socket `listener` (krig's, handed over; closed here once it is). Its configuration is
    written in base, krig's directory; VirtualMedia has no device (an insert is refused before
    any download), its state in state_dir. launcher: the argv prefix that runs it (default:
    its module): a module's name, or a script's path (tests/redfish_faults.py) followed by its
    arguments."""

    def __init__(self, base: pathlib.Path, uri: str, listener: socket.socket, cert, key, auth_file,
                 logs: pathlib.Path, state_dir: pathlib.Path, fingerprint: str, launcher=None):
        self.base, self.uri, self.listener, self.logs = base, uri, listener, logs
        self.port = listener.getsockname()[1]
        self.cert, self.key, self.auth_file, self.state_dir = cert, key, auth_file, state_dir
        self.fingerprint = fingerprint
        self.launcher = lab_python(launcher or "sushy_tools.emulator.main")
        self.proc: subprocess.Popen | None = None

    def start(self):
        cfg = write_shared(self.base, "sushy-emulator.conf", (
            f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {self.port}\n"
            f"SUSHY_EMULATOR_SSL_CERT = {str(self.cert)!r}\nSUSHY_EMULATOR_SSL_KEY = {str(self.key)!r}\n"
            f"SUSHY_EMULATOR_AUTH_FILE = {str(self.auth_file)!r}\nSUSHY_EMULATOR_LIBVIRT_URI = {self.uri!r}\n"
            f"SUSHY_EMULATOR_STATE_DIR = {str(self.state_dir)!r}\nSUSHY_EMULATOR_VMEDIA_DEVICES = {{}}\n"
            "SUSHY_EMULATOR_IGNORE_BOOT_DEVICE = False\n").encode())
        fd = self.listener.fileno()
        env = ["env", "-i", PATH, f"HOME={self.state_dir.parent}", "LANG=C.UTF-8", "WERKZEUG_RUN_MAIN=true",
               f"WERKZEUG_SERVER_FD={fd}"]
        log = self.logs / "sushy-emulator.log"
        try:
            self.proc = start_part([*env, *self.launcher, "--config", str(cfg)], log, pass_fds=[fd])
        finally:
            self.listener.close()
        self.wait_ready(log)

    def wait_ready(self, log: pathlib.Path) -> None:
        """Until the BMC answers TLS with the certificate made for it."""
        from rigs.redfish.bmc import fingerprint_of
        assert self.proc is not None, "started before it is waited for"
        for _ in range(START_WAIT * 5):
            _exited(self.proc, "sushy-emulator", log)
            try:
                if fingerprint_of("127.0.0.1", self.port, timeout=2).replace(":", "").lower() == self.fingerprint:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise KrigError(f"sushy-emulator does not answer TLS on 127.0.0.1:{self.port} with its certificate "
                        f"after {START_WAIT}s (log {log})")

    def stop(self):
        stop_group(self.proc, 10)


class Ser2net:
    """ser2net: an accepter, on `listen` (a Path: a Unix socket of mode 0600, raw bytes; an int:
    telnet, or telnet(rfc2217), on 127.0.0.1:port), in front of `connector` (a unix socket:
    `unix,PATH`; a serial device or pty: `serialdev,PATH,115200n81,local`). lab: run as the
    lab user (the simulated server's); otherwise krig's. Its configuration is its argv (-Y)."""

    def __init__(self, listen, connector: str, logs: pathlib.Path, rfc2217: bool = False, lab: bool = False):
        self.listen, self.connector, self.logs, self.rfc2217, self.lab = listen, connector, logs, rfc2217, lab
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        if isinstance(self.listen, pathlib.Path):
            return f"unix:{self.listen}"
        return f"{'rfc2217' if self.rfc2217 else 'telnet'}://127.0.0.1:{self.listen}"

    def start(self):
        unix = isinstance(self.listen, pathlib.Path)
        accepter = (f"unix,{self.listen}" if unix else
                    f"{'telnet(rfc2217)' if self.rfc2217 else 'telnet'},tcp,127.0.0.1,{self.listen}")
        lines = ["connection: &console", f"  accepter: {accepter}", f"  connector: {self.connector}",
                 "  options:", "    kickolduser: true"]
        argv = ["ser2net", "-n", "-u", *[a for ln in lines for a in ("-Y", ln)]]
        log = self.logs / "ser2net.log"
        self.proc = start_part(argv, log, lab=self.lab, umask=0o177)
        if unix:
            wait_path(self.listen, self.proc, "ser2net", log)
        else:
            wait_port(self.listen, self.proc, "ser2net", log)

    def stop(self):
        stop_group(self.proc, 5)


def _uid(pid: int) -> int | None:
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Uid:")))


def holders(d: pathlib.Path, since: int) -> list[int]:
    """The processes of the server whose directory is d that libvirt started outside its
    session (QEMU, its log daemon): running as the user d/run belongs to, started no earlier
    than `since` (a process_record's start), holding a file below d open."""
    try:
        uid = os.lstat(d / "run").st_uid
    except OSError:
        return []
    top, out = str(d) + "/", []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid() or _uid(int(name)) != uid:
            continue
        rec = process_record(int(name))
        try:
            fds = os.listdir(f"/proc/{name}/fd") if rec and int(rec["start"]) >= int(since) else []
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}").startswith(top):
                    out.append(int(name))
                    break
            except OSError:
                continue
    return sorted(out)


def kill_leftovers(d, parts: list | None, since: int | None = None) -> list[int]:
    """SIGKILL what remains of a server (after the orderly stops): the sessions of its parts
    (records), then the holders of its directory d; the pids signalled."""
    left = [pid for rec in parts or [] if rec for pid in kill_session(rec)]
    starts = [int(r["start"]) for r in parts or [] if r]
    first = min(starts) if starts else since
    if d and first is not None:
        left += kill_until_gone(lambda: holders(pathlib.Path(d), first), 50)
    return sorted(set(left))


def describe(pids) -> list[str]:
    """'PID ARGS' of each live process of pids (for a message or a test)."""
    out = []
    for pid in pids:
        try:
            args = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out.append(f"{pid} {args.strip()}")
    return out


def domain_xml(name: str, memory_mb: int, serial_sock: pathlib.Path, disks: Sequence = (), os_extra: str = "",
               qemu_args: Sequence = (), nic: bool = False, cpu: str = "qemu64", tb_cache_mib: int = 0) -> str:
    """A TCG domain: its serial line a unix socket (ser2net's connector); disks: (file, format,
    target dev vdX); nic: a user-mode network card (something to boot from over PXE); cpu: a
    CPU model, or "max" for every feature TCG has; tb_cache_mib: the size of QEMU's translated-code
    cache (0: QEMU's default);
    qemu_args: QEMU arguments libvirt has no element for (qemu:commandline)."""
    from xml.sax.saxutils import escape, quoteattr
    disk = "".join(f"<disk type='file' device='disk'><driver name='qemu' type={quoteattr(fmt)}/>"
                   f"<source file={quoteattr(str(f))}/><target dev={quoteattr(dev)} bus='virtio'/>"
                   + (BOOT_FIRST if i == 0 else "") + "</disk>" for i, (f, fmt, dev) in enumerate(disks))
    extra = "".join(f"<qemu:arg value={quoteattr(a)}/>" for a in qemu_args)
    return (f"<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>"
            f"<name>{escape(name)}</name><memory unit='MiB'>{memory_mb}</memory><vcpu>1</vcpu>"
            f"<os><type arch='x86_64' machine='q35'>hvm</type>{os_extra}</os><features><acpi/>"
            + (f"<tcg><tb-cache unit='MiB'>{int(tb_cache_mib)}</tb-cache></tcg>" if tb_cache_mib else "")
            + "</features>"
            + ("<cpu mode='maximum'/>" if cpu == "max" else f"<cpu mode='custom'><model>{escape(cpu)}</model></cpu>")
            + "<on_poweroff>destroy</on_poweroff>"
            f"<on_reboot>restart</on_reboot><on_crash>destroy</on_crash>"
            f"<devices><emulator>/usr/bin/qemu-system-x86_64</emulator>{disk}"
            + ("<interface type='user'><model type='virtio'/></interface>" if nic else "") +
            f"<serial type='unix'><source mode='bind' path={quoteattr(str(serial_sock))}/><target port='0'/></serial>"
            f"<console type='unix'><source mode='bind' path={quoteattr(str(serial_sock))}/><target type='serial'/>"
            f"</console><memballoon model='none'/></devices>"
            + (f"<qemu:commandline>{extra}</qemu:commandline>" if extra else "") + "</domain>")
