"""A simulated IPMI server, all on 127.0.0.1: the BMC, the wire to the server's serial port, its power.

OpenIPMI's ipmi_sim is the BMC (RMCP+ on a free UDP port, users from a
generated lan.conf). Its `startcmd` starts a QEMU server with an external BMC
(`ipmi-bmc-extern` + `isa-ipmi-kcs`, chardev socket with reconnect) when the
chassis is powered on. SimServer's own server boots a distro kernel with krig's
initramfs in `krig.mode=sshd` (the guest root of rigs/guestroot.py, never the
host's /, the host's sshd with keys generated here); rigs/labsim.py's LabServer
boots UEFI firmware and GRUB from its own disk instead. Both have an NVMe
scratch disk and user networking with ssh forwarded to 127.0.0.1 only.

Two pieces model what a real server has and ipmi_sim lacks:
- rigs/ipmisim/krig_diag.c (loaded with `loadlib`): the "pulse diagnostic
  interrupt" chassis control, so `ipmitool chassis power diag` sends an NMI.
- SerialCable: the wire between the BMC's SOL UART and the server's COM port,
  which stays connected across power cycles (QEMU's socket would not; and
  ipmi_sim stops reconnecting to it once a SOL session is active).

ipmi_sim dies with the thread that started it and the server's QEMU with
ipmi_sim (setpriv --pdeathsig); stop() ends everything started here, and
every wait is bounded.
"""
import os
import pathlib
import secrets
import select
import shutil
import signal
import socket
import subprocess
import threading
import time

from krig.config import toml_value
from rigs import guestroot, qemu_confine
from rigs.procs import dies_with_parent

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIAG_SRC = ROOT / "rigs" / "ipmisim" / "krig_diag.c"
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
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SerialCable(threading.Thread):
    """Relay: ipmi_sim's SOL connects to `bmc_port` (and stays connected); the
    relay connects to QEMU's serial server on `vm_port` whenever a guest runs."""

    def __init__(self, bmc_port: int, vm_port: int):
        super().__init__(name="ipmi-serial-cable", daemon=True)
        self.vm_port = vm_port
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", bmc_port))
        self.listener.listen(1)
        self.stop_flag = threading.Event()
        self.bmc = self.vm = None

    def _try_vm(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(0.2)
        try:
            s.connect(("127.0.0.1", self.vm_port))
            s.settimeout(None)
            self.vm = s
        except OSError:
            s.close()

    def run(self):
        last_try = 0.0
        while not self.stop_flag.is_set():
            if self.vm is None and time.monotonic() - last_try > 0.1:
                last_try = time.monotonic()
                self._try_vm()
            socks = [s for s in (self.listener, self.bmc, self.vm) if s is not None]
            try:
                ready, _, _ = select.select(socks, [], [], 0.1)
            except (OSError, ValueError):
                continue
            for s in ready:
                if s is self.listener:
                    conn, _ = self.listener.accept()
                    if self.bmc is not None:
                        self.bmc.close()
                    self.bmc = conn
                    continue
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
                    continue
                if other is not None:
                    try:
                        other.sendall(data)
                    except OSError:
                        pass
        for s in (self.listener, self.bmc, self.vm):
            if s is not None:
                s.close()

    def stop(self):
        self.stop_flag.set()
        self.join(5)


class SimServer:
    USER = "krig"

    def __init__(self, base: pathlib.Path, kernel, initrd: pathlib.Path, memory_mb: int = 2048,
                 scratch_bytes: int = 16 << 30):
        self.memory_mb = memory_mb
        self.scratch_bytes = scratch_bytes
        self.base = base
        self.kernel = kernel
        self.initrd = initrd
        self.password = "krigpw" + secrets.token_hex(5)      # ipmi_sim keeps 16 bytes
        self.lan_port = free_port(socket.SOCK_DGRAM)
        self.kcs_port = free_port()
        self.sol_port = free_port()
        self.vm_serial_port = free_port()
        self.ssh_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.cable: SerialCable | None = None
        self.rigs = base / "rigs"              # where rig_file() writes
        self.logs = base / "logs"
        self.password_file = base / "bmc-password"

    # -- setup --------------------------------------------------------------
    def _keys(self):
        cfg = self.base / "cfg"
        cfg.mkdir(mode=0o755)      # QEMU reads it as its own user (rigs/qemu_confine.py)
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
        pw = self.password_file
        pw.touch(mode=0o600)
        pw.chmod(0o600)
        pw.write_text(self.password + "\n")

    def _vm_argv(self) -> list:
        b = self.base
        root_args, root_cmdline = guestroot.build(b / "guestroot", ROOT)
        append = ("console=ttyS0,115200 panic=-1 loglevel=6 krig.mode=sshd krig.hostname=krig-ipmi-guest "
                  "krig.ip=10.0.2.15/24 krig.gw=10.0.2.2 " + " ".join(root_cmdline))
        # QEMU reads the host key after dropping to its user: the key is that user's
        return ["setpriv", "--pdeathsig", "KILL", *qemu_confine.confine([
                "qemu-system-x86_64", "-name", "krig-ipmi-sim-guest",
                "-machine", "q35", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", str(self.memory_mb),
                "-display", "none", "-vga", "none", "-nodefaults", "-pidfile", f"{b}/qemu.pid",
                "-chardev", f"socket,id=ipmi0,host=127.0.0.1,port={self.kcs_port},reconnect=2",
                "-device", "ipmi-bmc-extern,id=bmc0,chardev=ipmi0", "-device", "isa-ipmi-kcs,bmc=bmc0",
                "-chardev", f"socket,id=ser0,host=127.0.0.1,port={self.vm_serial_port},server=on,wait=on",
                "-serial", "chardev:ser0",
                "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
                "-device", "virtio-net-pci,netdev=n0",
                "-kernel", str(self.kernel.image), "-initrd", str(self.initrd), "-append", append,
                *root_args,
                "-virtfs", f"local,path={b}/cfg,mount_tag=krigcfg,security_model=none,readonly=on,multidevs=remap",
                "-drive", f"file={b}/scratch.img,if=none,id=nvme0,format=raw,cache=unsafe",
                "-device", "nvme,drive=nvme0,serial=krig-scratch"], owned=[b / "cfg" / "ssh_host_ed25519_key"])]

    def _configs(self):
        b = self.base
        with open(b / "scratch.img", "wb") as f:
            f.truncate(self.scratch_bytes)      # sparse
        start = b / "start-vm"
        start.write_text("#!/bin/sh\n# ipmi_sim's startcmd: the server's power\n"
                         + qemu_confine.guard_shell_line() + "exec "
                         + " ".join(f"'{a}'" for a in self._vm_argv()) + f" >>{self.logs}/qemu.log 2>&1\n")
        start.chmod(0o755)
        subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", str(b / "krig_diag.so"), str(DIAG_SRC)],
                       check=True, timeout=120, capture_output=True)
        (b / "lan.conf").write_text(f"""name "krigsim"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {self.lan_port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  serial 15 127.0.0.1 {self.kcs_port} codec VM
  startcmd "{start}"
  sol "tcp:127.0.0.1:{self.sol_port}" 115200
  startnow false
  poweroff_wait 5
  kill_wait 5
  user 2 true "{self.USER}" "{self.password}" admin 10 none md2 md5 straight
loadlib "{b}/krig_diag.so" ""
""")
        (b / "lan.conf").chmod(0o600)
        (b / "sim.emu").write_text(
            "mc_setbmc 0x20\n"
            "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"
            "sel_enable 0x20 1000 0x0a\n"
            "sensor_add 0x20 0 0 35 0x6f event-only\n"
            "sensor_set_event_support 0x20 0 0 enable scanning per-state "
            "000000000001111 000000000000000 000000000001111 000000000000000\n"
            "mc_enable 0x20\n")
        (b / "state").mkdir()

    def start(self):
        self.rigs.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir()
        self._keys()
        self._configs()
        self.cable = SerialCable(self.sol_port, self.vm_serial_port)
        self.cable.start()
        self.start_bmc()

    def start_bmc(self):
        """ipmi_sim (the BMC) on its LAN port; the chassis starts powered off."""
        log = open(self.logs / "ipmi_sim.log", "ab")
        self.proc = subprocess.Popen(dies_with_parent(["ipmi_sim", "-c", str(self.base / "lan.conf"), "-f",
                                                       str(self.base / "sim.emu"), "-s", str(self.base / "state"), "-n"]),
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        for _ in range(50):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ipmi_sim exited {self.proc.returncode}: "
                                   f"{(self.logs / 'ipmi_sim.log').read_text()[-500:]}")
            if self.ipmitool("chassis", "power", "status", timeout=5).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("ipmi_sim does not answer on its LAN port")

    def kill_bmc(self):
        """The BMC dies (SIGKILL of ipmi_sim); the server's QEMU dies with it (pdeathsig)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

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
                "hang_timeout": 60, "nmi_wait": 10, "shutdown_timeout": 60,
                "shutdown_command": ["sh", "-c", "sync; echo o > /proc/sysrq-trigger"], **top}
        b = {"host": "127.0.0.1", "port": self.lan_port, "user": self.USER,
             "password_file": str(self.password_file), "cipher_suite": 3, "timeout": 2, "retries": 3,
             **(bmc or {})}
        s = {"host": "127.0.0.1", "port": self.ssh_port, "user": "root", "key": str(self.base / "client_key"),
             "known_hosts": str(self.base / "known_hosts"), "connect_timeout": 30, **(ssh or {})}
        tables = {k: spec.pop(k) for k in list(spec) if isinstance(spec[k], dict)}
        text = "".join(f"{k} = {toml_value(v)}\n" for k, v in spec.items() if v is not None)
        for table, d in (("bmc", b), ("ssh", s), *tables.items()):
            text += f"\n[{table}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in d.items() if v is not None)
        path = self.rigs / f"{name}.toml"
        path.write_text(text)
        return path

    def processes(self) -> list[str]:
        """Processes whose argv mentions this server (its files or its ports)."""
        out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        marks = (str(self.base), f"-p {self.lan_port} ", f"port={self.kcs_port}")
        me = os.getpid()
        return [ln.strip() for ln in out.splitlines()
                if any(m in ln for m in marks) and int(ln.split()[0]) != me and " ps -ww -eo" not in ln]

    def stop(self):
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.ipmitool("chassis", "power", "off", timeout=15)
        except (subprocess.TimeoutExpired, OSError):
            pass
        if self.proc is not None and self.proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(10)
                    break
                except subprocess.TimeoutExpired:
                    continue
        pidfile = self.base / "qemu.pid"
        for _ in range(50):
            try:
                pid = int(pidfile.read_text().strip())
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                break
            time.sleep(0.1)
        if self.cable is not None:
            self.cable.stop()
        for _ in range(50):                 # let killed children disappear
            if not self.processes():
                break
            time.sleep(0.2)

