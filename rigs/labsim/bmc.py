"""A simulated IPMI server, all on 127.0.0.1: the BMC, the wire to the server's serial port, its power.

OpenIPMI's ipmi_sim is the BMC: RMCP+ on a UDP port of 127.0.0.1 that krig binds
itself and hands to ipmi_sim (no other user can take the port first), one user
from a generated lan.conf with a generated password, cipher suite 3 only (no
IPMI 1.5 session, no RMCP+ suite without password, integrity or confidentiality:
rigs/labsim/ipmisim/krig_unix.c), no anonymous user. Its `startcmd` starts a QEMU server with an external BMC
(`ipmi-bmc-extern` + `isa-ipmi-kcs`, chardev socket with reconnect) when the
chassis is powered on. SimServer's own server boots a distro kernel with krig's
initramfs in `krig.mode=sshd` (the guest root of rigs/qemu/guestroot.py, never the
host's /, the host's sshd with keys generated here); rigs/labsim/sim.py's LabServer
boots UEFI firmware and GRUB from its own disk instead. Both have an NVMe
scratch disk and user networking with ssh forwarded to 127.0.0.1 only.

Two pieces model what a real server has and ipmi_sim lacks:
- rigs/labsim/ipmisim/krig_diag.c (loaded with `loadlib`): the "pulse diagnostic
  interrupt" chassis control, so `ipmitool chassis power diag` sends an NMI.
- SerialCable (rigs/labsim/wire.py): the wire between the BMC's SOL UART and
  the server's COM port, which stays connected across power cycles (QEMU's
  socket would not; and ipmi_sim stops reconnecting to it once a SOL session
  is active).

The BMC's side channels (the KCS wire, SOL, QEMU's COM port) are Unix sockets
in the server's private directory, never TCP ports (rigs/labsim/wire.py); what
stays on 127.0.0.1 is what a real BMC and server offer: the IPMI LAN (RMCP+,
password) and SSH (key, its host key pinned). When krig is root, ipmi_sim and the
server's QEMU it starts run as rigs/labsim/user.py's `krig-lab` from their first
instruction (never as root, never as the QEMU rig's `krig-qemu`); the files QEMU
needs are opened by krig and handed down as descriptors (rigs/qemu/launch.py's
Handover: a root-only /boot/vmlinuz goes as a sealed copy).

ipmi_sim dies with the thread that started it and the server's QEMU with
ipmi_sim (setpriv --pdeathsig); stop() ends everything started here (the
session ipmi_sim leads, known by its process record), and every wait is bounded.
"""
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import time

from krig import safeio
from krig.config import toml_document
from krig.paths import process_record
from rigs.qemu import guestroot
from rigs.qemu import confine as qemu_confine
from rigs.qemu.launch import Handover
from rigs.labsim.user import lab_user
from rigs.procs import stop_group
from rigs.labsim.wire import (KCS_MARK, SOL_MARK, SerialCable, kill_session,
                              remove_wire_dir, session_members, user_ids, wire_dir)
from krig.paths import SETPRIV

ROOT = pathlib.Path(__file__).resolve().parents[2]
DIAG_SRC = ROOT / "rigs" / "labsim" / "ipmisim" / "krig_diag.c"
UNIX_SRC = ROOT / "rigs" / "labsim" / "ipmisim" / "krig_unix.c"
GUEST_MODULES_EXTRA = ["virtio_net", "ipmi_si", "ipmi_devintf"]
NEEDED = {"ipmi_sim": "openipmi", "ipmitool": "ipmitool", "sshd": "openssh-server", "ssh": "openssh-client",
          "qemu-system-x86_64": "qemu-system-x86", "gcc": "gcc"}


def missing_tools() -> list[str]:
    out = [f"{t} ({pkg})" for t, pkg in NEEDED.items()
           if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]
    if not os.path.exists("/usr/include/OpenIPMI/serv.h"):
        out.append("OpenIPMI headers (libopenipmi-dev)")
    return out


def free_port(kind=socket.SOCK_STREAM) -> int:
    """A port free now: another process may bind it before whoever binds it later (bound_udp
    keeps its socket instead)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bound_udp() -> socket.socket:
    """A UDP socket bound to a new port of 127.0.0.1: ipmi_sim's LAN, held by krig from its
    choice to the server's stop (ipmi_sim gets the descriptor, krig_unix.c)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return s


def _drain(sock: socket.socket) -> None:
    """Discard the datagrams queued on sock (without changing its flags, shared with ipmi_sim)."""
    for _ in range(10000):
        try:
            sock.recv(65536, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return


class SimServer:
    USER = "krig"

    def __init__(self, base: pathlib.Path, kernel, initrd: pathlib.Path | None, memory_mb: int = 2048,
                 scratch_bytes: int = 16 << 30):
        self.memory_mb = memory_mb
        self.scratch_bytes = scratch_bytes
        self.base = base
        self.kernel = kernel
        self.initrd = initrd
        self.password = "krigpw" + secrets.token_hex(5)      # ipmi_sim keeps 16 bytes
        lan_sock = bound_udp()
        self.lan_sock: socket.socket | None = lan_sock      # the BMC's LAN: krig's until stop()
        self.lan_port = lan_sock.getsockname()[1]
        self.ssh_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.bmc_record: dict | None = None    # ipmi_sim's process record: its session is the server's
        self.cable: SerialCable | None = None
        self.wire: pathlib.Path | None = None   # the private directory (rigs/labsim/wire.py)
        self.fds: list[int] = []                # what ipmi_sim hands on to the server's QEMU
        self.rigs = base / "rigs"              # where rig_file() writes
        self.logs = base / "logs"
        self.password_file = base / "bmc-password"

    # -- setup --------------------------------------------------------------
    def _keys(self):
        cfg = self.base / "cfg"
        cfg.mkdir(mode=0o755)      # QEMU reads it as its own user (rigs/qemu/confine.py)
        for name in ("ssh_host_ed25519_key", "other_host_key", "client_key"):
            d = cfg if name.startswith("ssh_host") else self.base
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"krig-test-{name}",
                            "-f", str(d / name)], check=True, timeout=60)
        shutil.copy(self.base / "client_key.pub", cfg / "authorized_keys")
        (cfg / "authorized_keys").chmod(0o644)
        (cfg / "sshd_config").write_text(
            "Port 22\nHostKey /run/krig/cfg/ssh_host_ed25519_key\n"
            "AuthorizedKeysFile /run/krig/cfg/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nUseDNS no\n"
            "PrintMotd no\nPrintLastLog no\nPidFile /run/sshd.pid\nMaxStartups 50\nMaxSessions 50\n"
            "Subsystem sftp /usr/lib/openssh/sftp-server\n")
        host = f"[127.0.0.1]:{self.ssh_port}"
        good = (cfg / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        bad = (self.base / "other_host_key.pub").read_text().split()[:2]
        (self.base / "known_hosts").write_text(f"{host} {' '.join(good)}\n")
        (self.base / "bad_known_hosts").write_text(f"{host} {' '.join(bad)}\n")
        self.write_password()

    def write_password(self):
        """The BMC password, mode 0600, bound to this BMC (rigs/ipmi/spec.py): a new file renamed over
        the name (a link there is replaced)."""
        safeio.write_text(self.password_file.parent, self.password_file.name,
                          f"{self.password}\nbmc = 127.0.0.1:{self.lan_port}\n", mode=0o600)

    def _wires(self) -> list:
        """QEMU's end of the KCS wire (ipmi_sim's socket) and its COM port (connected to the
        serial cable's socket, there before any power on): Unix sockets in the private directory."""
        assert self.wire is not None, "made by start() before QEMU's argv"
        w = self.wire / "run"
        return ["-pidfile", f"{w}/qemu.pid", "-chardev", f"socket,id=ipmi0,path={w}/kcs.sock,reconnect=2",
                "-device", "ipmi-bmc-extern,id=bmc0,chardev=ipmi0", "-device", "isa-ipmi-kcs,bmc=bmc0",
                "-chardev", f"socket,id=ser0,path={self.wire}/serial.sock", "-serial", "chardev:ser0"]

    def _handed(self, argv: list) -> list:
        """QEMU's argv as ipmi_sim's user runs it: when that is krig-lab, each host file it names
        is a descriptor krig opened (QEMU gets them through ipmi_sim), its host key krig-lab's."""
        who = lab_user()
        if who is None:
            return argv
        qemu_confine.give([self.base / "cfg" / "ssh_host_ed25519_key"], who)
        h = Handover(who)
        out = h.rewrite(argv)
        self.fds += h.fds               # closed at stop(), after ipmi_sim (and QEMU) got them
        return out

    def _vm_argv(self) -> list:
        b = self.base
        root_args, root_cmdline = guestroot.build(b / "guestroot", ROOT)
        append = ("console=ttyS0,115200 panic=-1 loglevel=6 krig.mode=sshd krig.hostname=krig-ipmi-guest "
                  "krig.ip=10.0.2.15/24 krig.gw=10.0.2.2 " + " ".join(root_cmdline))
        return ["setpriv", "--pdeathsig", "KILL", *self._handed([
                "qemu-system-x86_64", "-name", "krig-ipmi-sim-guest",
                "-machine", "q35", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", str(self.memory_mb),
                "-display", "none", "-vga", "none", "-nodefaults", *self._wires(),
                "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
                "-device", "virtio-net-pci,netdev=n0",
                "-kernel", str(self.kernel.image), "-initrd", str(self.initrd), "-append", append,
                *root_args,
                "-virtfs", f"local,path={b}/cfg,mount_tag=krigcfg,security_model=none,readonly=on,multidevs=remap",
                # file.locking=off: the disk is a descriptor ipmi_sim holds across power cycles, and a
                # lock QEMU takes on it would outlive that QEMU (the next power-on found it taken)
                "-drive", f"file={b}/scratch.img,if=none,id=nvme0,format=raw,cache=unsafe,file.locking=off",
                "-device", "nvme,drive=nvme0,serial=krig-scratch"])]

    def _configs(self):
        b, w = self.base, self.wire
        with open(b / "scratch.img", "wb") as f:
            f.truncate(self.scratch_bytes)      # sparse
        log = os.open(self.logs / "qemu.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.fds.append(log)
        start = w / "start-vm"                  # root's when krig is: ipmi_sim runs it, cannot change it
        start.write_text("#!/bin/bash\n# ipmi_sim's startcmd: the server's power\nexec "
                         + " ".join(f"'{a}'" for a in self._vm_argv()) + f" >&{log} 2>&1\n")
        start.chmod(0o755)
        for src in (DIAG_SRC, UNIX_SRC):
            subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", str(w / f"{src.stem}.so"), str(src),
                            "-ldl"], check=True, timeout=120, capture_output=True)
        conf = os.open(w / "lan.conf", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        os.fchown(conf, -1, user_ids(lab_user())[1])     # its password: root and ipmi_sim's user
        with os.fdopen(conf, "w") as f:
            f.write(f"""name "krigsim"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {self.lan_port}
    priv_limit admin
    allowed_auths_callback
    allowed_auths_user
    allowed_auths_operator
    allowed_auths_admin
    guid a123456789abcdefa123456789abcdef
  endlan
  serial 15 127.0.0.1 {KCS_MARK} codec VM
  startcmd "{start}"
  sol "tcp:127.0.0.1:{SOL_MARK}" 115200
  startnow false
  poweroff_wait 5
  kill_wait 5
  user 2 true "{self.USER}" "{self.password}" admin 10
loadlib "{w}/krig_diag.so" ""
""")
        (w / "sim.emu").write_text(
            "mc_setbmc 0x20\n"
            "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"
            "sel_enable 0x20 1000 0x0a\n"
            "sensor_add 0x20 0 0 35 0x6f event-only\n"
            "sensor_set_event_support 0x20 0 0 enable scanning per-state "
            "000000000001111 000000000000000 000000000001111 000000000000000\n"
            "mc_enable 0x20\n")

    def start(self):
        self.rigs.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir()
        user = lab_user()
        self.wire = wire_dir(user)
        self._keys()
        self._configs()
        self.cable = SerialCable(self.wire / "sol.sock", self.wire / "serial.sock",
                                 owner=None if user is None else user_ids(user))
        self.cable.start()
        self.start_bmc()

    def _bmc_argv(self) -> list:
        """ipmi_sim with krig_unix.so preloaded (rigs/labsim/wire.py) and krig's LAN socket, as
        krig-lab when krig is root; dies with the starting thread (--pdeathsig, set after the user
        changes)."""
        w = self.wire
        assert self.lan_sock is not None, "the LAN socket is krig's until stop()"
        who = lab_user()
        drop = [] if who is None else ["--reuid", who, "--regid", str(user_ids(who)[1]), "--clear-groups"]
        return [SETPRIV, *drop, "--pdeathsig", "KILL", "--", "env", f"LD_PRELOAD={w}/krig_unix.so",
                f"KRIG_BMC_LISTEN={KCS_MARK}:{w}/run/kcs.sock", f"KRIG_BMC_CONNECT={SOL_MARK}:{w}/sol.sock",
                f"KRIG_BMC_LAN={self.lan_port}:{self.lan_sock.fileno()}",
                "ipmi_sim", "-c", f"{w}/lan.conf", "-f", f"{w}/sim.emu", "-s", f"{w}/state", "-n"]

    def start_bmc(self):
        """ipmi_sim (the BMC) on its LAN port; the chassis starts powered off."""
        _drain(self.lan_sock)                   # what came while no ipmi_sim read it is not the new one's
        log = open(self.logs / "ipmi_sim.log", "ab")
        self.proc = subprocess.Popen(self._bmc_argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                                     pass_fds=[*self.fds, self.lan_sock.fileno()], start_new_session=True)
        log.close()
        self.bmc_record = process_record(self.proc.pid)
        self.cable.peer = self.proc.pid
        self.cable.vm_ok = lambda pid: pid in session_members(self.bmc_record)
        for _ in range(50):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ipmi_sim exited {self.proc.returncode}: "
                                   f"{(self.logs / 'ipmi_sim.log').read_text()[-500:]}")
            try:
                answered = self.ipmitool("chassis", "power", "status", timeout=15).returncode == 0
            except subprocess.TimeoutExpired:       # a busy host: ipmitool's own retries outlast the wait
                answered = False
            if answered:
                return
            time.sleep(0.2)
        raise RuntimeError("ipmi_sim does not answer on its LAN port")

    def kill_bmc(self):
        """The BMC dies (SIGKILL of ipmi_sim) and the server's QEMU with it. pdeathsig kills QEMU
        when ipmi_sim is gone, not before it returns: every process of ipmi_sim's session is
        killed here and waited for, since one still holding the BMC's KCS socket (QEMU inherits
        ipmi_sim's descriptors) keeps the next ipmi_sim from binding it."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        left = kill_session(self.bmc_record, wait=30)
        if session_members(self.bmc_record):
            raise RuntimeError(f"the killed BMC's processes {left} are still there after 30 s")

    # -- use ----------------------------------------------------------------
    def ipmitool(self, *args, timeout=30) -> subprocess.CompletedProcess:
        env = {**os.environ, "IPMI_PASSWORD": self.password}
        return subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(self.lan_port),
                               "-U", self.USER, "-E", "-C", "3", "-N", "2", "-R", "2", *args],
                              capture_output=True, text=True, timeout=timeout, env=env)

    def power_status(self) -> str:
        out = self.ipmitool("chassis", "power", "status").stdout
        return "on" if "is on" in out else "off" if "is off" in out else f"unknown: {out!r}"

    def rig_file(self, name: str, bmc: dict | None = None, ssh: dict | None = None, **top) -> pathlib.Path:
        """Write <rigs>/<name>.toml for this server (<base>/rigs unless set: KRIG_RIG_PATH=<base>/rigs)."""
        spec = {"driver": "ipmi", "description": f"ipmi_sim server on 127.0.0.1:{self.lan_port}",
                "scratch_dev": "/dev/nvme0n1", "remote_dir": "/run/krig-remote", "boot_timeout": 300,
                "hang_timeout": 60, "nmi_wait": 10, "shutdown_timeout": 180,    # a busy host powers off late
                "shutdown_command": ["sh", "-c", "sync; echo o > /proc/sysrq-trigger"], **top}
        b = {"host": "127.0.0.1", "port": self.lan_port, "user": self.USER,
             "password_file": str(self.password_file), "cipher_suite": 3, "timeout": 2, "retries": 3,
             **(bmc or {})}
        s = {"host": "127.0.0.1", "port": self.ssh_port, "user": "root", "key": str(self.base / "client_key"),
             "known_hosts": str(self.base / "known_hosts"), "connect_timeout": 30, **(ssh or {})}
        return self._write_rig(name, toml_document(spec, bmc=b, ssh=s))

    def _write_rig(self, name: str, text: str) -> pathlib.Path:
        safeio.write_text(self.rigs, f"{name}.toml", text)
        return self.rigs / f"{name}.toml"

    def processes(self) -> list[str]:
        """What a test looks at for leftovers (never what is stopped: that is own()): processes
        whose argv mentions this server (its files, its private directory or its LAN port)."""
        out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        marks = (str(self.base), f"-p {self.lan_port} ") + ((str(self.wire),) if self.wire else ())
        me = os.getpid()
        return [ln.strip() for ln in out.splitlines()
                if any(m in ln for m in marks) and int(ln.split()[0]) != me and " ps -ww -eo" not in ln]

    def stop(self):
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.ipmitool("chassis", "power", "off", timeout=15)
        except (subprocess.TimeoutExpired, OSError):
            pass
        stop_group(self.proc, 10)
        kill_session(self.bmc_record)      # the server's QEMU, if it outlived ipmi_sim
        if self.cable is not None:
            self.cable.stop()
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        if getattr(self, "lan_sock", None) is not None:
            self.lan_sock.close()
            self.lan_sock = None
        remove_wire_dir(self.wire)

    def own(self) -> list[int]:
        """The processes this server started that still run (ipmi_sim's session)."""
        return session_members(self.bmc_record)

