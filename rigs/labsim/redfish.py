"""A simulated Redfish BMC, all on 127.0.0.1: sushy-tools' sushy-emulator (a Redfish service
krig did not write) with its libvirt driver over a libvirt domain, libvirt's per-user
qemu:///session daemon (libvirtd) started here, and ser2net in front of the domain's serial
line. TLS with a self-signed certificate made here, basic authentication against an
htpasswd file of a generated password (sushy-emulator has no SessionService).

When krig runs as root, libvirtd (and so the QEMU it starts) runs as QEMU's own user
(rigs/qemu/confine.py: krig-qemu), a true per-user session daemon, never the system one;
everything it must read lives in a directory of that user outside root's home (`vm_dir`).
stop() destroys and undefines the domains, stops the daemons and kills what remains of
them (found by the directory in their argv); every wait is bounded.
"""
import hashlib
import os
import pathlib
import pwd
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

from krig.errors import KrigError
from rigs.qemu import confine as qemu_confine
from krig.paths import dies_with_parent
from rigs.procs import stop_group

NEEDED = {"libvirtd": "libvirt-daemon", "ser2net": "ser2net", "openssl": "openssl",
          "qemu-system-x86_64": "qemu-system-x86"}
START_WAIT = 60
BOOT_FIRST = "<boot order='1'/>"


def missing_tools() -> list[str]:
    out = [f"{t} ({pkg})" for t, pkg in NEEDED.items() if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]
    for mod, pkg in (("libvirt", "libvirt-python"), ("sushy_tools", "sushy-tools")):
        try:
            __import__(mod)
        except ImportError:
            out.append(f"the Python module {mod} ({pkg}: make setup)")
    return out


def vm_user() -> tuple[int, int] | None:
    """(uid, gid) libvirtd runs as: QEMU's own user when krig is root, else None (krig's own)."""
    name = qemu_confine.runas_user()
    if name is None:
        return None
    pw = pwd.getpwnam(name)
    return pw.pw_uid, pw.pw_gid


def make_vm_dir() -> pathlib.Path:
    """A fresh directory for libvirtd and the domain's files, of the user libvirtd runs as, 0700,
    outside any home directory that user cannot enter."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="krig-rf-", dir="/var/tmp"))     # short: libvirt's sockets go below
    own(d)
    return d


def own(path: pathlib.Path) -> None:
    u = vm_user()
    if u is not None:
        os.chown(path, *u)


def make_cert(d: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, str]:
    """A self-signed certificate for 127.0.0.1: (certificate, key, its SHA-256 fingerprint)."""
    cert, key = d / "bmc-cert.pem", d / "bmc-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "30", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    key.chmod(0o600)
    der = ssl.PEM_cert_to_DER_cert(cert.read_text())
    return cert, key, hashlib.sha256(der).hexdigest()


def write_htpasswd(path: pathlib.Path, user: str, password: str) -> None:
    import bcrypt       # sushy-tools' own dependency: its basic authentication reads bcrypt hashes
    path.touch(mode=0o600)
    path.write_text(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")


def wait_port(port: int, proc: subprocess.Popen, what: str, log: pathlib.Path) -> None:
    for _ in range(START_WAIT * 5):
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise KrigError(f"{what} exited {proc.returncode} at start: {tail[0] if tail else 'no output'} (log {log})")
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise KrigError(f"{what} does not listen on 127.0.0.1:{port} after {START_WAIT}s (log {log})")


class LibvirtSession:
    """libvirtd as a per-user session daemon with its home in vm_dir/libvirt."""

    def __init__(self, vm_dir: pathlib.Path, logs: pathlib.Path):
        self.home = vm_dir / "lv"          # short: a UNIX socket's path is at most 107 bytes
        self.logs = logs
        self.sock = self.home / "r" / "libvirt" / "libvirt-sock"
        self.uri = f"qemu:///session?socket={self.sock}"
        self.proc: subprocess.Popen | None = None

    def start(self):
        self.home.mkdir(mode=0o700)
        own(self.home)
        h = self.home
        env = ["env", "-i", f"HOME={h}", f"XDG_RUNTIME_DIR={h}/r", f"XDG_CONFIG_HOME={h}/c",
               f"XDG_CACHE_HOME={h}/k", f"XDG_DATA_HOME={h}/d", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
        u = vm_user()
        # setpriv sets the parent-death signal after the change of user, which would clear it
        drop = ["setpriv", f"--reuid={u[0]}", f"--regid={u[1]}", "--clear-groups", "--pdeathsig", "KILL"] if u else []
        argv = [*env, "libvirtd", "--timeout", "0", "--pid-file", str(h / "libvirtd.pid")]
        log = open(self.logs / "libvirtd.log", "ab")
        self.proc = subprocess.Popen([*drop, *argv] if u else dies_with_parent(argv),
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        for _ in range(START_WAIT * 5):
            if self.proc.poll() is not None:
                raise KrigError(f"libvirtd exited {self.proc.returncode} at start (log {self.logs}/libvirtd.log)")
            if self.sock.exists():
                try:
                    self.connect().close()
                    return
                except Exception:       # libvirt.libvirtError while it starts up
                    pass
            time.sleep(0.2)
        raise KrigError(f"libvirtd did not answer on {self.sock} after {START_WAIT}s")

    def connect(self):
        import libvirt
        libvirt.registerErrorHandler(lambda *a: None, None)     # errors are exceptions, not stderr lines
        return libvirt.open(self.uri)

    def define(self, xml: str) -> str:
        conn = self.connect()
        try:
            return conn.defineXML(xml).name()
        finally:
            conn.close()

    def stop(self):
        """Every domain destroyed and undefined, then the daemon stopped."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                import libvirt
                conn = self.connect()
                for dom in conn.listAllDomains():
                    if dom.isActive():
                        dom.destroy()
                    dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
                conn.close()
            except Exception as e:      # the daemon is stopping anyway: the sweep below ends the rest
                (self.logs / "libvirtd.log").open("a").write(f"krig: clean-up through libvirt: {e}\n")
        stop_group(self.proc, 10)


class SushyEmulator:
    """sushy-emulator over a libvirt URI, HTTPS with basic authentication, on 127.0.0.1:port.
    launcher: the argv prefix that runs it (default: its own module)."""

    def __init__(self, base: pathlib.Path, uri: str, port: int, cert, key, auth_file, logs: pathlib.Path,
                 launcher: list | None = None):
        self.base, self.uri, self.port, self.logs = base, uri, port, logs
        self.cert, self.key, self.auth_file = cert, key, auth_file
        self.launcher = launcher or [sys.executable, "-m", "sushy_tools.emulator.main"]
        self.proc: subprocess.Popen | None = None

    def start(self):
        cfg = self.base / "sushy-emulator.conf"
        cfg.write_text(f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {self.port}\n"
                       f"SUSHY_EMULATOR_SSL_CERT = {str(self.cert)!r}\nSUSHY_EMULATOR_SSL_KEY = {str(self.key)!r}\n"
                       f"SUSHY_EMULATOR_AUTH_FILE = {str(self.auth_file)!r}\n"
                       f"SUSHY_EMULATOR_LIBVIRT_URI = {self.uri!r}\n"
                       "SUSHY_EMULATOR_IGNORE_BOOT_DEVICE = False\n")
        log = open(self.logs / "sushy-emulator.log", "ab")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SUSHY_", "OS_"))}
        self.proc = subprocess.Popen(dies_with_parent([*self.launcher, "--config", str(cfg)]), env=env,
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        wait_port(self.port, self.proc, "sushy-emulator", self.logs / "sushy-emulator.log")

    def stop(self):
        stop_group(self.proc, 10)


class Ser2net:
    """ser2net: `accepter` (telnet or telnet(rfc2217) on 127.0.0.1:port) in front of `connector`
    (a unix socket: `unix,PATH`; a serial device or pty: `serialdev,PATH,115200n81,local`)."""

    def __init__(self, base: pathlib.Path, port: int, connector: str, logs: pathlib.Path, rfc2217: bool = False):
        self.base, self.port, self.connector, self.logs, self.rfc2217 = base, port, connector, logs, rfc2217
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{'rfc2217' if self.rfc2217 else 'telnet'}://127.0.0.1:{self.port}"

    def start(self):
        cfg = self.base / "ser2net.yaml"
        cfg.write_text(f"connection: &console\n  accepter: {'telnet(rfc2217)' if self.rfc2217 else 'telnet'},"
                       f"tcp,127.0.0.1,{self.port}\n  connector: {self.connector}\n"
                       "  options:\n    kickolduser: true\n")
        log = open(self.logs / "ser2net.log", "ab")
        self.proc = subprocess.Popen(dies_with_parent(["ser2net", "-n", "-u", "-c", str(cfg), "-P",
                                                       str(self.base / "ser2net.pid")]),
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        wait_port(self.port, self.proc, "ser2net", self.logs / "ser2net.log")

    def stop(self):
        stop_group(self.proc, 5)


def processes(mark: str) -> list[str]:
    """Processes whose argv mentions mark (a directory of the simulation)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    me = os.getpid()
    return [ln.strip() for ln in out.splitlines() if mark in ln and int(ln.split()[0]) != me and " ps -ww" not in ln]


def sweep(mark: str) -> int:
    """SIGKILL whatever still runs with mark in its argv (after the orderly stops); how many."""
    left = processes(mark)
    for ln in left:
        try:
            os.kill(int(ln.split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    for _ in range(50):
        if not processes(mark):
            break
        time.sleep(0.1)
    return len(left)


def domain_xml(name: str, memory_mb: int, serial_sock: pathlib.Path, disks: list = (), os_extra: str = "",
               qemu_args: list = (), nic: bool = False, cpu: str = "qemu64", tb_cache_mib: int = 0) -> str:
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
