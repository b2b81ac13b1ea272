"""`krig lab sim up NAME` / `krig lab sim down NAME`: a simulated lab server on 127.0.0.1.

A server that boots like a real one, driven by the IPMI rig exactly as one:
ipmi_sim is its BMC (rigs/labsim/bmc.py: RMCP+, SOL, SEL, NMI), UEFI firmware
(OVMF, its own variable store) boots GRUB from its own disk
(rigs/labsim/image.py: Debian 12 with systemd, sshd, sudo, kexec-tools,
xfsprogs, trace-cmd, fio), never -kernel. Its disk is a qcow2 overlay on the
cached image, made once per server: what the server writes survives power
cycles, as on a real disk. krig logs in as the non-root user `krig` (sudo
without a password) and checks the image's own host key. The scratch disk is
an emulated NVMe (/dev/nvme0n1); the root disk is virtio-blk (/dev/vda); the network card is
virtio-net, or --nic e1000e / e1000 (a card a kernel built for QEMU lacks the driver of). The
server's kernel runs with panic=0: after a panic only krig's power cycle
through the BMC brings it back. Its RAM is --memory (default 2G); above the
host's RAM it is sparse, as the QEMU rig's `memory_backing = "sparse"`: a page
takes host memory only once the server touches it.

`up` starts a supervisor process (`python -m rigs.labsim.sim serve NAME`, its own
session) that holds the BMC and the serial cable; ipmi_sim dies with it and
the server's QEMU with ipmi_sim (setpriv --pdeathsig), so a supervisor that
dies takes its server with it. When krig is root, ipmi_sim runs as
rigs/labsim/user.py's unprivileged `krig-lab` from its first instruction, and so does
the server's QEMU it starts: the supervisor opens the server's disk, its image,
firmware variables and scratch disk and hands them down (QEMU's -add-fd); the
BMC's wires are Unix sockets in a private directory (rigs/labsim/wire.py).
One `up` or `down` of a NAME at a time (a lock on the name); `down` signals the
supervisor and the session of the ipmi_sim it started, both known by their
process records (pid + start time), never by a command line. With --owner PID the supervisor also stops by itself
when that process ends (a CI job's shell, a test session killed with SIGKILL), and
removes its state. Where things go:
  rig file     user_rig_dir()/NAME.toml (on krig's rig search path, rigs/__init__.py)
  BMC password secret_dir()/labsim-NAME-bmc (mode 0600; the rig file names it, never argv)
  everything   state_dir(NAME): state.json, the disk overlay, logs
  the lock     state_dir(NAME)/../NAME.lock
  the wires    a private directory in the temp directory (state.json names it)
Both files are written only where nothing is, and removed only while they are what was
written (rigs/labsim/owned.py: a user's own rig file or secret at the name, or a link, is
one line, exit 2), in directories made 0700 and refused when a link.
With KRIG_LAB_COORDINATOR set, `up` also makes the server a place there (krig lab sync).
"""
import fcntl
import json
import os
import pathlib
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time

from krig import safeio
from krig.config import load_toml, parse_size
from krig.errors import KrigError, UsageError
from krig.paths import owner_alive, process_record
from rigs import lab, lab_tags, user_rig_dir
from rigs.labsim import image as labsim_image
from rigs.labsim import owned
from rigs.labsim import redfish as labsim_redfish
from rigs.qemu import memory as qemu_memory
from rigs.labsim.bmc import SimServer, missing_tools as bmc_missing
from rigs.labsim.redfish_server import RedfishLabServer
from rigs.labsim.wire import kill_session, remove_wire_dir

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,31}\Z")
MEMORY_DEFAULT = "2G"
NICS = {"virtio-net": "virtio-net-pci", "e1000e": "e1000e", "e1000": "e1000"}     # --nic: QEMU's device
MEMORY_MIN, MEMORY_MAX = 1 << 30, 64 << 40
READY_WAIT = 120            # seconds for the supervisor to have its BMC answering
STOP_WAIT = 60


def _xdg(var: str, default: str) -> pathlib.Path:
    return pathlib.Path(os.environ.get(var) or os.path.expanduser(default)) / "krig"


def own_dir(d: pathlib.Path, private: bool = False) -> pathlib.Path:
    """d, made with mode 0700 (its parent too) when missing; refused when it is a link or not the
    user's own directory. private: mode 0700 even when it was there."""
    d.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        d.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    what = (safeio.kind(st.st_mode) if not stat.S_ISDIR(st.st_mode) else
            "a directory of another user" if st.st_uid != os.geteuid() else None)
    if what:
        raise KrigError(f"{d}: refused: {what}, not a directory of the user's own")
    if private and st.st_mode & 0o077:
        d.chmod(0o700)
    return d


def secret_dir() -> pathlib.Path:
    """krig's secret store: files of mode 0600 in a directory of mode 0700."""
    return own_dir(_xdg("XDG_CONFIG_HOME", "~/.config") / "secrets", private=True)


def own_files(name: str) -> tuple[pathlib.Path, pathlib.Path]:
    """Where `up NAME` writes beside the user's own files: the rig file and the BMC password."""
    return user_rig_dir() / f"{name}.toml", _xdg("XDG_CONFIG_HOME", "~/.config") / "secrets" / f"labsim-{name}-bmc"


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
                 scratch_bytes: int = 16 << 30, nic: str = "virtio-net"):
        super().__init__(base, kernel=None, initrd=None, memory_mb=memory_mb, scratch_bytes=scratch_bytes)
        self.image_dir, self.nic = image_dir, nic
        self.written: list[dict] = []       # the records of the files written beside the user's (owned.py)

    @classmethod
    def attach(cls, name: str) -> "LabServer":
        """The server `krig lab sim up NAME` started, seen from another process (its ports and files)."""
        st = read_state(name)
        if st is None or not st.get("ready"):
            raise UsageError(f"lab sim {name}: not up (krig lab sim up {name} starts it)")
        self = cls.__new__(cls)
        self.base, self.image_dir = pathlib.Path(st["base"]), pathlib.Path(st["image_dir"])
        self.memory_mb, self.scratch_bytes = st["memory_mb"], st["scratch_bytes"]
        self.nic = st.get("nic", "virtio-net")
        self.lan_port, self.ssh_port = st["lan_port"], st["ssh_port"]
        self.password_file, self.rigs = pathlib.Path(st["password_file"]), pathlib.Path(st["rigs"])
        self.password = (self.password_file.read_text().splitlines() or [""])[0] if self.password_file.exists() else ""
        self.logs, self.proc, self.cable = self.base / "logs", None, None
        self.wire, self.bmc_record, self.fds = pathlib.Path(st["wire"]), st["bmc"], []
        self.lan_sock, self.written = None, st.get("written") or []      # the supervisor's
        self.kernel = self.initrd = None
        return self

    def write_password(self):
        """The BMC password, mode 0600, bound to this BMC (rigs/ipmi/spec.py), a new file (owned.py:
        never over one that is there)."""
        text = f"{self.password}\nbmc = 127.0.0.1:{self.lan_port}\n"
        self.written.append(owned.write_new(self.password_file, text.encode(), 0o600))

    def _write_rig(self, name: str, text: str) -> pathlib.Path:
        path = self.rigs / f"{name}.toml"
        self.written.append(owned.write_new(path, (owned.header(name) + text).encode()))
        return path

    def _keys(self):
        b = self.base
        labsim_image.client_files(b, self.image_dir, self.ssh_port)
        self.write_password()
        # The server's own disk and firmware variables, kept across power cycles.
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
                        "-b", str(self.image_dir / "disk.qcow2"), str(b / "disk.qcow2")], check=True, timeout=60)
        shutil.copy(labsim_image.OVMF_VARS, b / "OVMF_VARS.fd")

    def _disk_fdsets(self) -> list:
        """-add-fd arguments: the server's disk, its image, firmware variables and scratch disk,
        opened here and handed to QEMU through ipmi_sim (QEMU's user reaches none of their paths),
        fd set n for /dev/fdset/n, read-only and (but the image) read-write."""
        b = self.base
        args = []
        for n, (path, rw) in enumerate(((b / "disk.qcow2", True), (self.image_dir / "disk.qcow2", False),
                                        (b / "OVMF_VARS.fd", True), (b / "scratch.img", True)), 1):
            for flags in (os.O_RDONLY, os.O_RDWR)[:1 + rw]:
                self.fds.append(os.open(path, flags))
                args += ["-add-fd", f"fd={self.fds[-1]},set={n}"]
        return args

    def _vm_argv(self) -> list:
        mem = self.memory_mb << 20
        machine = qemu_memory.machine_args("sparse" if mem > host_ram() else "ram", mem)
        return ["setpriv", "--pdeathsig", "KILL",
                "qemu-system-x86_64", "-name", "krig-labsim-server",
                *machine, "-accel", f"tcg,tb-size={labsim_image.TB_CACHE_MIB}", "-cpu", "max", "-smp", "1",
                "-m", str(self.memory_mb),
                "-display", "none", "-vga", "none", "-nodefaults", *self._disk_fdsets(),
                "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={labsim_image.OVMF_CODE}",
                "-drive", "if=pflash,format=raw,unit=1,file=/dev/fdset/3,file.locking=off",
                *self._wires(),
                "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
                "-device", f"{NICS[self.nic]},netdev=n0,romfile=",
                "-blockdev", "driver=file,node-name=image,filename=/dev/fdset/2,read-only=on,locking=off",
                "-blockdev", "driver=qcow2,node-name=base,file=image,read-only=on",
                "-blockdev", "driver=file,node-name=top,filename=/dev/fdset/1,locking=off",
                "-blockdev", "driver=qcow2,node-name=disk0,file=top,backing=base",
                "-device", "virtio-blk-pci,drive=disk0,bootindex=0",
                "-drive", "file=/dev/fdset/4,if=none,id=nvme0,format=raw,cache=unsafe,file.locking=off",
                "-device", "nvme,drive=nvme0,serial=krig-scratch"]

    def rig_file(self, name: str, bmc: dict | None = None, ssh: dict | None = None, **top) -> pathlib.Path:
        top = {"description": f"simulated lab server ({self.memory_mb} MiB, ipmi_sim on 127.0.0.1:{self.lan_port})",
               "remote_dir": "/var/lib/krig", "shutdown_command": ["systemctl", "poweroff"],
               "boot_timeout": 900, "hang_timeout": 60, "nmi_wait": 20, "shutdown_timeout": 120,
               "emulator_pidfile": f"{self.wire}/run/qemu.pid", **top}
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
    if not NAME_RE.fullmatch(name or ""):
        raise UsageError(f"NAME: {name!r} is not a lab server name (lower-case letters, digits and -, "
                         "a letter first, at most 32)")
    return name


def check_memory(memory: str | None) -> int:
    """--memory (default 2G) in bytes, admitted by the host budget (admission); else one line."""
    if memory is not None and not memory.strip():
        raise UsageError(f"--memory: {memory!r} is empty; give the server's RAM, 1G-64T (default {MEMORY_DEFAULT})")
    mem = parse_size(MEMORY_DEFAULT if memory is None else memory, "--memory")
    if not MEMORY_MIN <= mem <= MEMORY_MAX or mem % (1 << 20):
        raise UsageError(f"--memory: {memory!r} is outside 1G-64T or not a whole number of MiB")
    info = qemu_memory.meminfo()
    said = admission(mem, info.get("MemAvailable", 0), info.get("MemTotal", 0))
    if said:
        raise UsageError(f"--memory {memory or MEMORY_DEFAULT}: {said} (the host budget, as for the QEMU rig)")
    return mem


def admission(mem: int, avail: int, total: int) -> str | None:
    """A server of `mem` bytes on a host of `total` bytes with `avail` available, by the QEMU
    rig's host-budget rule (rigs/qemu/memory.py: refusal): up to the host's RAM it is backed by
    RAM, which must fit in MemAvailable; above, sparse, what its boot touches (struct pages,
    hash tables, page tables, QEMU) must fit in MemAvailable less the margin. None: admitted."""
    sparse = qemu_memory.sparse_needs(mem, qemu_memory.margin(total)) if mem > total else None
    return qemu_memory.refusal(mem, avail, sparse)


def read_state(name: str) -> dict | None:
    try:
        return json.loads((state_dir(name) / "state.json").read_text())
    except (OSError, ValueError):
        return None


def _lock(name: str) -> int:
    """The name's lock (flock of state_dir(NAME)/../NAME.lock), held by an `up` until its server
    answers and by a `down`: a second one at once is one line."""
    top = own_dir(state_dir(name).parent, private=True)
    fd = os.open(top / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        reads = (os.pread(fd, 32, 0).strip() or time.sleep(0.05) for _ in range(40))  # type: ignore[func-returns-value]  # its pid follows its lock; sleep's None: not read yet
        holder = next((r.decode(errors="replace") for r in reads if r), "?")
        os.close(fd)
        raise KrigError(f"lab sim {name}: being started or stopped by another krig lab sim (process {holder}); "
                        f"try again once it is done") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


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


def up(name: str, memory: str | None = None, log=print, owner: int | None = None, nic: str | None = None,
       bmc: str = "ipmi") -> pathlib.Path:
    check_name(name)
    owner_rec = None if owner is None else process_record(owner)
    if owner is not None and owner_rec is None:
        raise UsageError(f"--owner: {owner} is not a running process's pid")
    mem = check_memory(memory)
    nic = nic or "virtio-net"
    if nic not in NICS:
        raise UsageError(f"--nic: {nic!r} is not a network card the server can have; allowed: {', '.join(NICS)}")
    from rigs import rig_path
    existing = rig_path(name)
    if existing is not None and existing.parent != user_rig_dir():
        raise UsageError(f"NAME: {name!r} is already the rig {existing}; choose another name")
    lock = _lock(name)
    try:
        st = read_state(name)
        if st and owner_alive(st.get("supervisor")):
            log(f"krig: lab sim {name}: already up ({st['memory_mb']} MiB); krig lab sim down {name} stops it")
            return pathlib.Path(st["rig"])
        owned.in_the_way(name, own_files(name), (st or {}).get("written"))
        st = _start(name, mem, owner_rec, st, log, nic, bmc)
    finally:
        os.close(lock)
    what = "ipmi_sim" if bmc == "ipmi" else "sushy-emulator (Redfish over HTTPS)"
    log(f"krig: lab sim {name}: BMC {what} on 127.0.0.1:{st['lan_port']} (power off), SSH on 127.0.0.1:"
        f"{st['ssh_port']}, {st['memory_mb']} MiB" + (" sparse" if st["sparse"] else "") + f", NIC {nic}" +
        f"; the rig powers it on (krig lab sim down {name} stops it" +
        (f", or process {owner} ending)" if owner else ")"))
    if address := lab.address():            # KRIG_LAB_COORDINATOR: a place there, as `krig lab sync NAME` makes
        spec = load_toml(pathlib.Path(st["rig"]))
        tags = lab_tags(spec, st["rig"])
        how = lab.Coordinator(address).sync_place(name, tags)
        log(f"lab: place {name}: {how}: " + " ".join(f"{k}={v}" for k, v in sorted(tags.items())))
    return pathlib.Path(st["rig"])


def servers() -> list[dict]:
    """Every simulated server `up` left state for (this user's): its name, state (up; starting;
    stopped: its supervisor is gone, `down` clears it), memory, ports, rig file and owner."""
    root = _xdg("XDG_STATE_HOME", "~/.local/state") / "labsim"      # state_dir(NAME)'s parent
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if not NAME_RE.fullmatch(d.name) or not d.is_dir():
            continue
        st = read_state(d.name) or {}
        try:
            req = json.loads((d / "request.json").read_text())
        except (OSError, ValueError):
            req = {}
        alive = owner_alive(st.get("supervisor"))
        state = "up" if alive and st.get("ready") else "starting" if alive or (req and not st) else "stopped"
        out.append({"name": d.name, "state": state, "memory_mb": st.get("memory_mb", req.get("memory_mb")),
                    "sparse": st.get("sparse"), "bmc_port": st.get("lan_port"), "ssh_port": st.get("ssh_port"),
                    "rig": st.get("rig"), "owner": (req.get("owner") or {}).get("pid"),
                    "bmc_kind": st.get("bmc_kind") or req.get("bmc_kind") or "ipmi",
                    "nic": st.get("nic") or req.get("nic") or "virtio-net"})
    return out


def _start(name: str, mem: int, owner_rec: dict | None, old: dict | None, log, nic: str, bmc: str) -> dict:
    """Start the supervisor (under the name's lock) and wait for its BMC: its state."""
    miss = bmc_missing() if bmc == "ipmi" else labsim_redfish.missing_tools()
    if miss:
        raise KrigError(f"a simulated lab server needs {', '.join(miss)} (make setup installs them)")
    own_dir(user_rig_dir())                 # refused in one line here when a link, not in the supervisor
    secret_dir()
    image = ensure_image(log)
    d = state_dir(name)
    if old:                                 # a supervisor that died: its leftovers
        _clean(old)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(mode=0o700)
    (d / "request.json").write_text(json.dumps({"name": name, "memory_mb": mem >> 20, "image_dir": str(image),
                                                "owner": owner_rec, "nic": nic, "bmc_kind": bmc}))
    logf = open(d / "supervisor.log", "ab")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "rigs.labsim.sim", "serve", name], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
    logf.close()
    for _ in range(READY_WAIT * 5):
        st = read_state(name)
        if st and st.get("ready"):
            return st
        if proc.poll() is not None:
            tail = (d / "supervisor.log").read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise KrigError(f"lab sim {name}: the simulator stopped at start: {tail[0]} (log {d}/supervisor.log)")
        time.sleep(0.2)
    _stop_supervisor(process_record(proc.pid))
    raise KrigError(f"lab sim {name}: the BMC did not answer within {READY_WAIT}s (log {d}/supervisor.log)")


def _stop_supervisor(rec: dict | None) -> None:
    """SIGTERM, then SIGKILL, the process of record rec if it is still that process (a pidfd: a
    pid used again since is never signalled)."""
    if not rec:
        return
    try:
        fd = os.pidfd_open(int(rec["pid"]))
    except (ProcessLookupError, OSError):
        return
    try:
        if not owner_alive(rec):
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                signal.pidfd_send_signal(fd, sig)
            except ProcessLookupError:
                return
            if select.select([fd], [], [], STOP_WAIT)[0]:       # readable: it ended
                return
    finally:
        os.close(fd)


def down(name: str, log=print) -> int:
    check_name(name)
    lock = _lock(name)
    try:
        st = read_state(name)
        if st is None:
            log(f"krig: lab sim {name}: not up")
            return 0
        _stop_supervisor(st.get("supervisor"))        # it stops its server
        left = _clean(st)
        if st.get("vm_dir"):                # a Redfish server's parts and directory (rigs/labsim/redfish_server.py)
            left += labsim_redfish.kill_leftovers(st["vm_dir"], st.get("parts"), since=st["supervisor"]["start"])
            labsim_redfish.remove_vm_dir(st["vm_dir"])
        shutil.rmtree(state_dir(name), ignore_errors=True)
    finally:
        os.close(lock)
    log(f"krig: lab sim {name}: stopped" + (f" ({len(left)} process(es) killed)" if left else ""))
    return 0


def _clean(st: dict) -> list[int]:
    """What a server's state names and its supervisor left: the processes of its ipmi_sim's
    session (killed), its private directory, its rig file and password."""
    left = kill_session(st.get("bmc"))
    remove_wire_dir(st.get("wire"))
    _forget(st)
    return left


def _forget(st: dict) -> None:
    """Remove the rig file and password the server wrote, if they are still what it wrote."""
    owned.remove(st.get("written"))


# -- the supervisor ---------------------------------------------------------------

def serve(name: str) -> int:
    d = state_dir(name)
    req = json.loads((d / "request.json").read_text())
    if req.get("bmc_kind") == "redfish":
        server: LabServer | RedfishLabServer = RedfishLabServer(d / "server", pathlib.Path(req["image_dir"]),
            memory_mb=req["memory_mb"], name=name, nic=req.get("nic") or "virtio-net", nic_device=NICS[req.get("nic") or "virtio-net"])
    else:
        server = LabServer(d / "server", pathlib.Path(req["image_dir"]), memory_mb=req["memory_mb"],
                           nic=req.get("nic") or "virtio-net")
    server.base.mkdir()
    server.rigs = own_dir(user_rig_dir())
    secret_dir()
    server.password_file = own_files(name)[1]
    written = server.__dict__.setdefault("written", [])     # the records of what it writes there (owned.py)
    stop = threading.Event()
    owner, orphaned = req.get("owner"), False
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *a: stop.set())
    state = {"name": name, "supervisor": process_record(os.getpid()), "base": str(server.base),
             "image_dir": req["image_dir"], "memory_mb": server.memory_mb,
             "sparse": (server.memory_mb << 20) > host_ram(), "nic": getattr(server, "nic", "virtio-net"),
             "scratch_bytes": server.scratch_bytes,
             "password_file": str(server.password_file), "rigs": str(server.rigs),
             "lan_port": server.lan_port, "ssh_port": server.ssh_port, "written": written}
    try:
        server.start()
        rig = server.rig_file(name, boot="kexec", kexec={"append": ["loglevel=6"]})
        for path in {str(rig), str(server.password_file)} - {r["path"] for r in written}:
            rec = owned.record_of(pathlib.Path(path))       # a server that writes them another way
            written += [rec] if rec else []
        state.update(rig=str(rig), ready=True, wire=str(getattr(server, "wire", "") or ""),
                     bmc=getattr(server, "bmc_record", None), bmc_kind=req.get("bmc_kind", "ipmi"),
                     vm_dir=str(getattr(server, "vm_dir", "") or ""), parts=getattr(server, "parts", None))
        safeio.write_text(d, "state.json", json.dumps(state, indent=1) + "\n", mode=0o600)
        print(f"labsim {name}: up, rig {rig}", flush=True)
        assert server.proc is not None, "start() started it"
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
    print("usage: python -m rigs.labsim.sim serve NAME (krig lab sim up NAME starts it)", file=sys.stderr)
    sys.exit(2)
