"""`krig lab sim up NAME` / `krig lab sim down NAME`: a simulated lab server on 127.0.0.1.

A server that boots like a real one, driven by the IPMI rig exactly as one:
ipmi_sim is its BMC (rigs/labsim_bmc.py: RMCP+, SOL, SEL, NMI), UEFI firmware
(OVMF, its own variable store) boots GRUB from its own disk
(rigs/labsim_image.py: Debian 12 with systemd, sshd, sudo, kexec-tools,
xfsprogs, trace-cmd, fio), never -kernel. Its disk is a qcow2 overlay on the
cached image, made once per server: what the server writes survives power
cycles, as on a real disk. krig logs in as the non-root user `krig` (sudo
without a password) and checks the image's own host key. The scratch disk is
an emulated NVMe (/dev/nvme0n1); the root disk is virtio-blk (/dev/vda). The
server's kernel runs with panic=0: after a panic only krig's power cycle
through the BMC brings it back. Its RAM is --memory (default 2G); above the
host's RAM it is sparse, as the QEMU rig's `memory_backing = "sparse"`: a page
takes host memory only once the server touches it.

`up` starts a supervisor process (`python -m rigs.labsim serve NAME`, its own
session) that holds the BMC and the serial cable; ipmi_sim dies with it and
the server's QEMU with ipmi_sim (setpriv --pdeathsig), so a supervisor that
dies takes its server with it. With --owner PID the supervisor also stops by itself
when that process ends (a CI job's shell, a test session killed with SIGKILL), and
removes its state. Where things go:
  rig file     user_rig_dir()/NAME.toml (on krig's rig search path, rigs/__init__.py)
  BMC password secret_dir()/labsim-NAME-bmc (mode 0600; the rig file names it, never argv)
  everything   state_dir(NAME): state.json, the disk overlay, logs
With KRIG_LAB_COORDINATOR set, `up` also makes the server a place there (krig lab sync).
"""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from krig.config import load_toml, parse_size
from krig.errors import KrigError, UsageError
from krig.paths import owner_alive, process_record
from . import lab, lab_tags, labsim_image, labsim_redfish, qemu_confine, qemu_memory, user_rig_dir
from .labsim_bmc import SimServer, missing_tools as bmc_missing
from .labsim_redfish_server import RedfishLabServer

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
MEMORY_DEFAULT = "2G"
MEMORY_MIN, MEMORY_MAX = 1 << 30, 64 << 40
READY_WAIT = 120            # seconds for the supervisor to have its BMC answering
STOP_WAIT = 60


def _xdg(var: str, default: str) -> pathlib.Path:
    return pathlib.Path(os.environ.get(var) or os.path.expanduser(default)) / "krig"


def secret_dir() -> pathlib.Path:
    """krig's secret store: files of mode 0600 in a directory of mode 0700."""
    d = _xdg("XDG_CONFIG_HOME", "~/.config") / "secrets"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    d.chmod(0o700)
    return d


def state_dir(name: str) -> pathlib.Path:
    return _xdg("XDG_STATE_HOME", "~/.local/state") / "labsim" / name


def host_ram() -> int:
    for ln in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if ln.startswith("MemTotal:"):
            return int(ln.split()[1]) * 1024
    return 0


class LabServer(SimServer):
    """The simulated lab server: SimServer's BMC, a server booting firmware + GRUB from its own disk."""
    USER = "krig"

    def __init__(self, base: pathlib.Path, image_dir: pathlib.Path, memory_mb: int = 2048,
                 scratch_bytes: int = 16 << 30):
        super().__init__(base, kernel=None, initrd=None, memory_mb=memory_mb, scratch_bytes=scratch_bytes)
        self.image_dir = image_dir

    @classmethod
    def attach(cls, name: str) -> "LabServer":
        """The server `krig lab sim up NAME` started, seen from another process (its ports and files)."""
        st = read_state(name)
        if st is None or not st.get("ready"):
            raise UsageError(f"lab sim {name}: not up (krig lab sim up {name} starts it)")
        self = cls.__new__(cls)
        self.base, self.image_dir = pathlib.Path(st["base"]), pathlib.Path(st["image_dir"])
        self.memory_mb, self.scratch_bytes = st["memory_mb"], st["scratch_bytes"]
        for k in ("lan_port", "kcs_port", "sol_port", "vm_serial_port", "ssh_port"):
            setattr(self, k, st[k])
        self.password_file, self.rigs = pathlib.Path(st["password_file"]), pathlib.Path(st["rigs"])
        self.password = self.password_file.read_text().strip() if self.password_file.exists() else ""
        self.logs, self.proc, self.cable = self.base / "logs", None, None
        self.kernel = self.initrd = None
        return self

    def _keys(self):
        b = self.base
        shutil.copy(self.image_dir / "client_key", b / "client_key")
        (b / "client_key").chmod(0o600)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "krig-labsim-other",
                        "-f", str(b / "other_host_key")], check=True, timeout=60)
        host = f"[127.0.0.1]:{self.ssh_port}"
        good = (self.image_dir / "host_key.pub").read_text().split()[:2]
        bad = (b / "other_host_key.pub").read_text().split()[:2]
        (b / "known_hosts").write_text(f"{host} {' '.join(good)}\n")
        (b / "bad_known_hosts").write_text(f"{host} {' '.join(bad)}\n")
        self.write_password()
        # The server's own disk and firmware variables, kept across power cycles.
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
                        "-b", str(self.image_dir / "disk.qcow2"), str(b / "disk.qcow2")], check=True, timeout=60)
        shutil.copy(labsim_image.OVMF_VARS, b / "OVMF_VARS.fd")

    def _vm_argv(self) -> list:
        b = self.base
        mem = self.memory_mb << 20
        machine = qemu_memory.machine_args({"memory_backing": "sparse" if mem > host_ram() else "ram",
                                            "memory_bytes": mem})
        return ["setpriv", "--pdeathsig", "KILL", *qemu_confine.confine([
                "qemu-system-x86_64", "-name", "krig-labsim-server",
                *machine, "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", str(self.memory_mb),
                "-display", "none", "-vga", "none", "-nodefaults", "-pidfile", f"{b}/qemu.pid",
                "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={labsim_image.OVMF_CODE}",
                "-drive", f"if=pflash,format=raw,unit=1,file={b}/OVMF_VARS.fd",
                "-chardev", f"socket,id=ipmi0,host=127.0.0.1,port={self.kcs_port},reconnect=2",
                "-device", "ipmi-bmc-extern,id=bmc0,chardev=ipmi0", "-device", "isa-ipmi-kcs,bmc=bmc0",
                "-chardev", f"socket,id=ser0,host=127.0.0.1,port={self.vm_serial_port},server=on,wait=on",
                "-serial", "chardev:ser0",
                "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
                "-device", "virtio-net-pci,netdev=n0,romfile=",
                "-drive", f"file={b}/disk.qcow2,if=none,id=disk0,format=qcow2",
                "-device", "virtio-blk-pci,drive=disk0,bootindex=0",
                "-drive", f"file={b}/scratch.img,if=none,id=nvme0,format=raw,cache=unsafe",
                "-device", "nvme,drive=nvme0,serial=krig-scratch"])]

    def rig_file(self, name: str, bmc: dict | None = None, ssh: dict | None = None, **top) -> pathlib.Path:
        top = {"description": f"simulated lab server ({self.memory_mb} MiB, ipmi_sim on 127.0.0.1:{self.lan_port})",
               "remote_dir": "/var/lib/krig", "shutdown_command": ["systemctl", "poweroff"],
               "boot_timeout": 900, "hang_timeout": 60, "nmi_wait": 20, "shutdown_timeout": 120, **top}
        return super().rig_file(name, bmc=bmc, ssh={"user": self.USER, **(ssh or {})}, **top)

    def ssh(self, *remote: str, known_hosts: str = "known_hosts", timeout: float = 60) -> subprocess.CompletedProcess:
        """A command on the server as krig (through sudo when it needs root), outside any run."""
        b = self.base
        return subprocess.run(["ssh", "-F", "none", "-p", str(self.ssh_port), "-l", self.USER,
                               "-i", str(b / "client_key"), "-o", "BatchMode=yes",
                               "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={b / known_hosts}",
                               "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
                               "127.0.0.1", *remote], capture_output=True, text=True, timeout=timeout)


# -- up / down ------------------------------------------------------------------

def check_name(name: str) -> str:
    if not NAME_RE.match(name or ""):
        raise UsageError(f"NAME: {name!r} is not a lab server name (lower-case letters, digits and -, "
                         "a letter first, at most 32)")
    return name


def read_state(name: str) -> dict | None:
    try:
        return json.loads((state_dir(name) / "state.json").read_text())
    except (OSError, ValueError):
        return None


def _supervisor_alive(st: dict | None) -> bool:
    if not st or not st.get("pid"):
        return False
    try:
        cmd = pathlib.Path(f"/proc/{st['pid']}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"rigs.labsim" in cmd and st["name"].encode() in cmd


def ensure_image(log) -> pathlib.Path:
    d = labsim_image.image_dir()
    if (d / "image.json").exists():
        return d
    miss = labsim_image.missing_tools()
    if miss:
        raise KrigError(f"the lab server's disk image is not built and cannot be built here: it needs "
                        f"{', '.join(miss)} (`make setup`, then `make test-prereqs` as root builds it)")
    log(f"krig: building the lab server's disk image once (mmdebstrap of Debian 12, about 2 min; log {d}/build.log)")
    try:
        return labsim_image.build(log=lambda m: None)
    except RuntimeError as e:
        raise KrigError(f"the lab server's disk image: {e}") from None


def up(name: str, memory: str | None = None, log=print, owner: int | None = None,
       bmc: str = "ipmi") -> pathlib.Path:
    from . import rig_path
    check_name(name)
    owner_rec = None if owner is None else process_record(owner)
    if owner is not None and owner_rec is None:
        raise UsageError(f"--owner: {owner} is not a running process's pid")
    mem = parse_size(memory or MEMORY_DEFAULT, "--memory")
    if not MEMORY_MIN <= mem <= MEMORY_MAX or mem % (1 << 20):
        raise UsageError(f"--memory: {memory!r} is outside 1G-64T or not a whole number of MiB")
    st = read_state(name)
    if _supervisor_alive(st):
        log(f"krig: lab sim {name}: already up ({st['memory_mb']} MiB); krig lab sim down {name} stops it")
        return pathlib.Path(st["rig"])
    existing = rig_path(name)
    if existing is not None and existing.parent != user_rig_dir():
        raise UsageError(f"NAME: {name!r} is already the rig {existing}; choose another name")
    miss = bmc_missing() if bmc == "ipmi" else labsim_redfish.missing_tools()
    if miss:
        raise KrigError(f"a simulated lab server needs {', '.join(miss)} (make setup installs them)")
    image = ensure_image(log)
    d = state_dir(name)
    if st:                                  # a supervisor that died: its leftovers
        _forget(st)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True, mode=0o700)
    (d / "request.json").write_text(json.dumps({"name": name, "memory_mb": mem >> 20, "image_dir": str(image),
                                                "owner": owner_rec, "bmc": bmc}))
    logf = open(d / "supervisor.log", "ab")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "rigs.labsim", "serve", name], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
    logf.close()
    for _ in range(READY_WAIT * 5):
        st = read_state(name)
        if st and st.get("ready"):
            break
        if proc.poll() is not None:
            tail = (d / "supervisor.log").read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise KrigError(f"lab sim {name}: the simulator stopped at start: {tail[0]} (log {d}/supervisor.log)")
        time.sleep(0.2)
    else:
        _stop_supervisor(proc.pid)
        raise KrigError(f"lab sim {name}: the BMC did not answer within {READY_WAIT}s (log {d}/supervisor.log)")
    what = "ipmi_sim" if bmc == "ipmi" else "sushy-emulator (Redfish over HTTPS)"
    log(f"krig: lab sim {name}: BMC {what} on 127.0.0.1:{st['lan_port']} (power off), SSH on 127.0.0.1:"
        f"{st['ssh_port']}, {st['memory_mb']} MiB" + (" sparse" if st["sparse"] else "") +
        f"; the rig powers it on (krig lab sim down {name} stops it" +
        (f", or process {owner} ending)" if owner else ")"))
    if lab.address():                       # KRIG_LAB_COORDINATOR: a place there, as `krig lab sync NAME` makes
        spec = load_toml(pathlib.Path(st["rig"]))
        tags = lab_tags(spec, st["rig"])
        how = lab.Coordinator(lab.address()).sync_place(name, tags)
        log(f"lab: place {name}: {how}: " + " ".join(f"{k}={v}" for k, v in sorted(tags.items())))
    return pathlib.Path(st["rig"])


def _stop_supervisor(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        for _ in range(STOP_WAIT * 5):
            try:
                os.kill(pid, 0)
                if pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    return
            except (ProcessLookupError, FileNotFoundError):
                return
            time.sleep(0.2)


def down(name: str, log=print) -> int:
    check_name(name)
    st = read_state(name)
    if st is None:
        log(f"krig: lab sim {name}: not up")
        return 0
    if _supervisor_alive(st):
        _stop_supervisor(st["pid"])
    left = LabServer.attach(name).processes() if st.get("ready") else []
    for ln in left:                        # the supervisor was killed before it stopped them
        try:
            os.kill(int(ln.split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    if st.get("vm_dir"):                   # a Redfish server's domain files (rigs/labsim_redfish_server.py)
        left += labsim_redfish.processes(st["vm_dir"])
        labsim_redfish.sweep(st["vm_dir"])
        shutil.rmtree(st["vm_dir"], ignore_errors=True)
    _forget(st)
    shutil.rmtree(state_dir(name), ignore_errors=True)
    log(f"krig: lab sim {name}: stopped" + (f" ({len(left)} process(es) killed)" if left else ""))
    return 0


def _forget(st: dict) -> None:
    for f in (st.get("rig"), st.get("password_file")):
        if f:
            pathlib.Path(f).unlink(missing_ok=True)


# -- the supervisor ---------------------------------------------------------------

def serve(name: str) -> int:
    d = state_dir(name)
    req = json.loads((d / "request.json").read_text())
    if req.get("bmc") == "redfish":
        server = RedfishLabServer(d / "server", pathlib.Path(req["image_dir"]), memory_mb=req["memory_mb"], name=name)
    else:
        server = LabServer(d / "server", pathlib.Path(req["image_dir"]), memory_mb=req["memory_mb"])
    server.base.mkdir()
    server.rigs = user_rig_dir()
    server.password_file = secret_dir() / f"labsim-{name}-bmc"
    stop = threading.Event()
    owner, orphaned = req.get("owner"), False
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *a: stop.set())
    state = {"name": name, "pid": os.getpid(), "base": str(server.base), "image_dir": req["image_dir"],
             "memory_mb": server.memory_mb, "sparse": (server.memory_mb << 20) > host_ram(),
             "scratch_bytes": server.scratch_bytes, "password_file": str(server.password_file),
             "rigs": str(server.rigs), **{k: getattr(server, k) for k in
                                          ("lan_port", "kcs_port", "sol_port", "vm_serial_port", "ssh_port")}}
    try:
        server.start()
        rig = server.rig_file(name, boot="kexec", kexec={"append": ["loglevel=6"]})
        state.update(rig=str(rig), ready=True, bmc=req.get("bmc", "ipmi"),
                     vm_dir=str(getattr(server, "vm_dir", "") or ""))
        tmp = d / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        tmp.rename(d / "state.json")
        print(f"labsim {name}: up, rig {rig}", flush=True)
        while not stop.wait(1):
            if server.proc.poll() is not None:
                print(f"labsim {name}: ipmi_sim exited {server.proc.returncode}; stopping", flush=True)
                break
            if owner and not owner_alive(owner):
                print(f"labsim {name}: its owner, process {owner['pid']}, ended; stopping", flush=True)
                orphaned = True
                break
    finally:
        server.stop()
        _forget(state)
        if orphaned:                # nobody will say `down`: the state goes with the server
            shutil.rmtree(d, ignore_errors=True)
    print(f"labsim {name}: stopped", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        sys.exit(serve(sys.argv[2]))
    print("usage: python -m rigs.labsim serve NAME (krig lab sim up NAME starts it)", file=sys.stderr)
    sys.exit(2)
