"""The QEMU rig: a local guest with emulated NVMe disks.

Power = the QEMU process; console = the guest's ttyS0 captured to
console.log; command = a mailbox agent on a writable 9p share (workload output
and exit codes never mix with the kernel console); files = that share.
"""
import ctypes
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

from krig import ROOT
from krig.config import optional, parse_size, reject_unknown, require
from krig.errors import GuestCrashed, GuestHung, RigError, UsageError
from krig.paths import cache_dir
from . import initramfs
from .protocol import (BootProtocol, CommandProtocol, CommandResult, ConsoleProtocol,
                       FilesProtocol, PowerProtocol, Rig)

QEMU = "qemu-system-x86_64"
BASE_MODULES = ["virtio_pci", "9pnet_virtio", "9p", "nvme", "xfs", "ext4"]
AGENT = pathlib.Path(__file__).resolve().parent / "guest" / "agent.sh"
# How TCG runs the vCPUs: "multi" (one host thread per vCPU, QEMU's default) or
# "single" (all vCPUs round-robin on one thread). See README, "TCG boot flake".
TCG_THREAD = "single"
PROBE_TIMEOUT = 25.0
PROBE_CACHE_SECONDS = 24 * 3600
GUEST_SHARE = "/run/krig/share"


def _pdeathsig():
    """Child dies with its parent (covers SIGKILL of krig): no orphan qemu."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def qemu_version() -> str:
    try:
        out = subprocess.run([QEMU, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RigError(f"{QEMU} not usable ({e}); run `make setup`") from None
    return out.splitlines()[0] if out else "unknown"


def validate_spec(name: str, spec: dict) -> dict:
    where = f"rigs/{name}.toml"
    reject_unknown(spec, {"driver", "description", "memory", "cpus", "accel", "tcg_thread", "boot_timeout",
                          "disks", "modules", "extra_args", "keep_disks"}, where)
    out = {"driver": "qemu", "description": optional(spec, "description", str, where, "")}
    out["memory_bytes"] = parse_size(optional(spec, "memory", (str, int), where, "4G"), f"{where}.memory")
    out["memory"] = optional(spec, "memory", (str, int), where, "4G")
    out["cpus"] = optional(spec, "cpus", int, where, 2)
    if out["cpus"] < 1:
        raise UsageError(f"{where}.cpus: must be at least 1, got {out['cpus']}")
    out["accel"] = optional(spec, "accel", str, where, "auto")
    if out["accel"] not in ("auto", "kvm", "tcg"):
        raise UsageError(f"{where}.accel: {out['accel']!r} is not one of auto, kvm, tcg")
    out["tcg_thread"] = optional(spec, "tcg_thread", str, where, TCG_THREAD)
    if out["tcg_thread"] not in ("single", "multi"):
        raise UsageError(f"{where}.tcg_thread: {out['tcg_thread']!r} is not one of single, multi")
    out["boot_timeout"] = optional(spec, "boot_timeout", (int, float), where, 180)
    out["modules"] = optional(spec, "modules", list, where, [])
    out["extra_args"] = optional(spec, "extra_args", list, where, [])
    for a in out["extra_args"] + out["modules"]:
        if not isinstance(a, str):
            raise UsageError(f"{where}: extra_args and modules must be lists of strings, got {a!r}")
    out["keep_disks"] = optional(spec, "keep_disks", bool, where, False)
    disks = []
    for i, d in enumerate(optional(spec, "disks", list, where, [])):
        dw = f"{where}.disks[{i}]"
        if not isinstance(d, dict):
            raise UsageError(f"{dw}: expected a table with size and serial")
        reject_unknown(d, {"size", "serial", "role"}, dw)
        size = parse_size(require(d, "size", (str, int), dw), f"{dw}.size")
        serial = require(d, "serial", str, dw)
        if not serial.isascii() or not serial.replace("-", "").isalnum() or len(serial) > 20:
            raise UsageError(f"{dw}.serial: {serial!r}: use up to 20 letters, digits or '-'")
        role = optional(d, "role", str, dw, "scratch" if i == 0 else "extra")
        disks.append({"size": size, "serial": serial, "role": role})
    out["disks"] = disks
    return out


def probe_accel(kernel, initrd: pathlib.Path) -> tuple[str, str]:
    """Decide kvm or tcg by booting for real; cache the answer for a day."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg", "/dev/kvm is missing or not accessible"
    key = f"{os.uname().release}|{qemu_version()}|{kernel.release}"
    cache = cache_dir() / "accel-probe.json"
    try:
        c = json.loads(cache.read_text())
        if c.get("key") == key and time.time() - c.get("time", 0) < PROBE_CACHE_SECONDS:
            return c["accel"], c["reason"] + " (cached probe)"
    except (OSError, ValueError, KeyError):
        pass
    with tempfile.TemporaryDirectory(prefix="krig-probe-") as td:
        log = pathlib.Path(td, "console.log")
        argv = [QEMU, "-accel", "kvm", "-cpu", "host", "-m", "512M", "-smp", "1",
                "-display", "none", "-vga", "none", "-nodefaults", "-no-reboot",
                "-chardev", f"file,id=con,path={log}", "-serial", "chardev:con",
                "-kernel", str(kernel.image), "-initrd", str(initrd),
                "-append", "console=ttyS0 panic=-1 krig.mode=probe"]
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_pdeathsig)
        try:
            _, err = p.communicate(timeout=PROBE_TIMEOUT)
        except subprocess.TimeoutExpired:
            _kill(p)
            err = b""
        ok = "KRIG-PROBE-OK" in log.read_text(errors="replace") if log.exists() else False
        took = time.monotonic() - t0
    if ok:
        accel, reason = "kvm", f"KVM probe boot reached init in {took:.1f}s"
    else:
        why = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output from the guest"]
        accel, reason = "tcg", f"KVM probe boot failed within {PROBE_TIMEOUT:.0f}s ({why[0]}); using TCG"
    cache.write_text(json.dumps({"key": key, "time": time.time(), "accel": accel, "reason": reason}))
    return accel, reason


def _kill(p: subprocess.Popen, grace: float = 5.0):
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


class QemuRig(Rig):
    kind = "qemu"

    def __init__(self, name: str, spec: dict):
        super().__init__(name, validate_spec(name, spec))
        self.proc: subprocess.Popen | None = None
        self.workdir: pathlib.Path | None = None
        self.share: pathlib.Path | None = None
        self.run_dir: pathlib.Path | None = None
        self.argv: list = []
        self._facts: dict = {}
        self._disks: list = []
        self.power = _Power(self)
        self.console = _Console(self)
        self.command = _Command(self)
        self.files = _Files(self)
        self.boot = _Boot(self)

    # -- per-run state ------------------------------------------------------
    def prepare(self, run_dir, kernel, needs):
        self.run_dir = pathlib.Path(run_dir)
        self.console.log_path = self.run_dir / "console.log"
        self.workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"krig-{self.name}-", dir=cache_dir("work")))
        self.share = self.workdir / "share"
        (self.share / "ctl").mkdir(parents=True)
        (self.share / "out").mkdir()
        want = needs.get("scratch_size", 0)
        self._disks = []
        for i, d in enumerate(self.spec["disks"]):
            size = max(d["size"], want) if d["role"] == "scratch" else d["size"]
            img = self.workdir / f"nvme{i}.img"
            with open(img, "wb") as f:
                f.truncate(size)    # sparse
            self._disks.append({**d, "size": size, "path": img})
        if needs.get("scratch_size") and not any(d["role"] == "scratch" for d in self._disks):
            raise UsageError(f"rigs/{self.name}.toml: the reproducer needs a scratch disk; add a [[disks]] entry")
        self._facts["disks"] = [{"serial": d["serial"], "role": d["role"], "size": d["size"]} for d in self._disks]

    def scratch_env(self):
        for d in self._disks:
            if d["role"] == "scratch":
                return {"KRIG_SCRATCH_SERIAL": d["serial"]}
        return {}

    def facts(self):
        return dict(self._facts)

    def shutdown(self, grace: float = 20.0):
        """Ask the agent to power the guest off, then make sure it is."""
        if self.alive() and self.share is not None:
            (self.share / "ctl" / "poweroff").touch()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        self.power.off()

    def close(self):
        if self.proc is not None:
            _kill(self.proc)
        if self.workdir and self.workdir.exists() and not self.spec["keep_disks"]:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class _Power(PowerProtocol):
    def __init__(self, rig: QemuRig):
        self.rig = rig

    def on(self):
        r = self.rig
        if r.alive():
            return
        if not r.argv:
            raise RigError(f"rig {r.name}: power on before a kernel was chosen")
        qlog = open(r.run_dir / "qemu.log", "ab")
        try:
            r.proc = subprocess.Popen(r.argv, stdin=subprocess.DEVNULL, stdout=qlog, stderr=qlog,
                                      start_new_session=True, preexec_fn=_pdeathsig)
        except OSError as e:
            raise RigError(f"cannot start {QEMU}: {e}") from None
        finally:
            qlog.close()

    def off(self):
        if self.rig.proc is not None:
            _kill(self.rig.proc)

    def status(self):
        return "on" if self.rig.alive() else "off"


class _Console(ConsoleProtocol):
    def __init__(self, rig):
        self.rig = rig
        self.log_path = pathlib.Path("/nonexistent")


class _Boot(BootProtocol):
    def __init__(self, rig: QemuRig):
        self.rig = rig

    def boot(self, kernel, cmdline, timeout=None):
        r = self.rig
        spec = r.spec
        initrd = initramfs.build(kernel.release, kernel.modules_dir, BASE_MODULES + spec["modules"])
        accel, reason = spec["accel"], "set in the rig file"
        if accel == "auto":
            accel, reason = probe_accel(kernel, initrd)
        r._facts.update({"accel": accel, "accel_reason": reason, "qemu_version": qemu_version(),
                         "initramfs": str(initrd)})
        append = ["console=ttyS0", "panic=-1", "oops=panic", "loglevel=6",
                  f"krig.agent={AGENT}", f"krig.tree={ROOT}", *kernel.cmdline, *cmdline]
        if any(c.isspace() for c in str(ROOT)):
            raise RigError(f"the krig tree {ROOT} has whitespace in its path; the guest cannot be told it")
        accel_arg = f"tcg,thread={spec['tcg_thread']}" if accel == "tcg" else accel
        r._facts["accel_arg"] = accel_arg
        argv = [QEMU, "-name", f"krig-{r.name}", "-machine", "q35", "-accel", accel_arg,
                "-cpu", "host" if accel == "kvm" else "max",
                "-smp", str(spec["cpus"]), "-m", str(spec["memory_bytes"] // (1 << 20)),
                "-display", "none", "-vga", "none", "-nodefaults", "-no-reboot",
                "-chardev", f"file,id=con,path={r.console.log_path}", "-serial", "chardev:con",
                "-kernel", str(kernel.image), "-initrd", str(initrd), "-append", " ".join(append),
                "-virtfs", "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
                "-virtfs", f"local,path={r.share},mount_tag=krig,security_model=none,multidevs=remap",
                "-virtfs", f"local,path={ROOT},mount_tag=krigtree,security_model=none,readonly=on,multidevs=remap"]
        for i, d in enumerate(r._disks):
            argv += ["-drive", f"file={d['path']},if=none,id=nvme{i},format=raw,cache=unsafe",
                     "-device", f"nvme,drive=nvme{i},serial={d['serial']}"]
        argv += spec["extra_args"]
        r.argv = argv
        r._facts["qemu_argv"] = argv
        r._facts["kernel_cmdline"] = " ".join(append)
        r.power.on()
        deadline = time.monotonic() + (timeout or spec["boot_timeout"])
        ready = r.share / "ctl" / "ready"
        t0 = time.monotonic()
        while not ready.exists():
            if not r.alive():
                raise GuestCrashed(f"guest died during boot (qemu exit {r.proc.returncode}); see console.log")
            if time.monotonic() > deadline:
                raise GuestHung(f"guest did not come up within {timeout or spec['boot_timeout']:.0f}s")
            time.sleep(0.1)
        r._facts["boot_seconds"] = round(time.monotonic() - t0, 2)


class _Command(CommandProtocol):
    def __init__(self, rig: QemuRig):
        self.rig = rig
        self.n = 0

    def run(self, argv, env=None, timeout=60):
        r = self.rig
        if not r.alive():
            raise GuestCrashed("guest is not running")
        ctl = r.share / "ctl"
        n = self.n
        self.n += 1
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": "/run/krig/home", "LANG": "C.UTF-8", **(env or {})}
        (ctl / f"{n}.argv").write_bytes(b"".join(str(a).encode() + b"\0" for a in argv))
        (ctl / f"{n}.env").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
        (ctl / f"{n}.req").touch()
        t0 = time.monotonic()
        rc_file = ctl / f"{n}.rc"
        while not rc_file.exists():
            if not r.alive():
                raise GuestCrashed(f"guest died while running {argv[0]} (qemu exit {r.proc.returncode})")
            if time.monotonic() - t0 > timeout:
                raise GuestHung(f"{' '.join(map(str, argv))} did not finish within {timeout:.0f}s")
            time.sleep(0.1)
        rc = int(rc_file.read_text().strip() or 255)
        return CommandResult(list(argv), rc, (ctl / f"{n}.out").read_bytes(),
                             (ctl / f"{n}.err").read_bytes(), time.monotonic() - t0)

    def partial_output(self) -> tuple[bytes, bytes]:
        """stdout/stderr of the last command so far (kept when it hangs)."""
        ctl = self.rig.share / "ctl"
        n = self.n - 1
        read = lambda p: p.read_bytes() if p.exists() else b""  # noqa: E731
        return read(ctl / f"{n}.out"), read(ctl / f"{n}.err")


class _Files(FilesProtocol):
    def __init__(self, rig: QemuRig):
        self.rig = rig

    def stage(self, local):
        return str(pathlib.Path(local).resolve())     # the host root is the guest root

    def results_dir(self):
        return f"{GUEST_SHARE}/out"

    def pull(self, remote, local):
        if not remote.startswith(GUEST_SHARE + "/"):
            raise RigError(f"rig {self.rig.name}: can only pull from {GUEST_SHARE}, not {remote}")
        src = self.rig.share / remote[len(GUEST_SHARE) + 1:]
        local = pathlib.Path(local)
        local.mkdir(parents=True, exist_ok=True)
        if src.exists():
            for p in src.iterdir():
                shutil.move(str(p), str(local / p.name))
