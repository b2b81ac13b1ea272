"""The QEMU rig: a local guest with emulated NVMe disks.

Power = the QEMU process; console = the guest's ttyS0 captured to
console.log; command = a mailbox agent on a writable 9p share (workload output
and exit codes never mix with the kernel console); files = that share.
"""
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time

from krig import ROOT, safeio
from krig.errors import GuestCrashed, GuestHung, KrigError, RigError, UsageError, os_fault
from krig.paths import cache_dir, owner_alive, owner_record
from rigs import initramfs
from rigs.qemu import guestroot
from rigs.qemu import kimage
from rigs.qemu import confine as qemu_confine
from rigs.qemu import launch as qemu_launch
from rigs.qemu import memory as qemu_memory
from rigs.qemu import share as qemu_share
from rigs.procs import stop_group, stopped_by_host
from rigs.protocol import BootProtocol, ConsoleProtocol, FilesProtocol, PowerProtocol, Rig
from rigs.qemu.mailbox import MailboxCommand
from rigs.qemu.spec import TCG_TSC_CMDLINE, QemuSpec, validate_spec

QEMU = "qemu-system-x86_64"
BASE_MODULES = ["virtio_pci", "9pnet_virtio", "9p", "nvme", "xfs", "ext4"]
AGENT = pathlib.Path(__file__).resolve().parents[1] / "guest" / "agent.sh"
PROBE_TIMEOUT = 25.0
PROBE_CACHE_SECONDS = 24 * 3600
GUEST_SHARE = "/run/krig/share"
# QEMU's own seccomp filter: a guest that escapes into QEMU cannot exec, fork, raise its
# privileges, or change scheduling and resource limits (docs/security.md); when krig is
# root, QEMU is started as an unprivileged user (rigs/qemu/launch.py)
SANDBOX = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"


def qemu_version() -> str:
    try:
        out = subprocess.run([QEMU, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RigError(f"{QEMU} not usable ({e}); run `make setup`") from None
    return out.splitlines()[0] if out else "unknown"


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
                "-display", "none", "-vga", "none", "-nodefaults", "-no-reboot", "-sandbox", SANDBOX,
                "-chardev", f"file,id=con,path={log}", "-serial", "chardev:con",
                "-kernel", str(kernel.image), "-initrd", str(initrd),
                "-append", "console=ttyS0 panic=-1 krig.mode=probe"]
        t0 = time.monotonic()
        p, guard, _ = qemu_launch.start(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, err = p.communicate(timeout=PROBE_TIMEOUT)
        except subprocess.TimeoutExpired:
            stop_group(p, 5.0)
            err = b""
        qemu_confine.end_guard(guard)
        ok = "KRIG-PROBE-OK" in log.read_text(errors="replace") if log.exists() else False
        took = time.monotonic() - t0
    if ok:
        accel, reason = "kvm", f"KVM probe boot reached init in {took:.1f}s"
    else:
        why = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output from the guest"]
        accel, reason = "tcg", f"KVM probe boot failed within {PROBE_TIMEOUT:.0f}s ({why[0]}); using TCG"
    cache.write_text(json.dumps({"key": key, "time": time.time(), "accel": accel, "reason": reason}))
    return accel, reason


def qemu_fault(proc: subprocess.Popen, qemu_log: pathlib.Path) -> str | None:
    """QEMU's own side of a guest that went away: an error exit and QEMU's last message, or None.

    QEMU exits 0 when the guest powers off or resets itself (-no-reboot, panic=-1):
    that is the guest's doing. A non-zero status or a signal is the emulator or the host."""
    rc = proc.returncode
    if rc is None or rc == 0:
        return None
    how = f"exited with status {rc}" if rc > 0 else f"was killed by signal {-rc}"
    try:
        lines = [ln.strip() for ln in qemu_log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    said = [ln for ln in lines if "warning:" not in ln] or lines
    return f"QEMU {how}" + (f": {said[-1]} ({qemu_log.name})" if said else f" without a message in {qemu_log.name}")


# what QEMU says when the filesystem under a disk image refuses a write
HOST_DISK_ERRORS = re.compile(r"No space left on device|Disk quota exceeded")


def host_disk_error(qemu_log: pathlib.Path) -> str | None:
    """QEMU's first line saying a disk image could not be written (the host's disk full), or None."""
    try:
        text = qemu_log.read_text(errors="replace")
    except OSError:
        return None
    return next((ln.strip() for ln in text.splitlines() if HOST_DISK_ERRORS.search(ln)), None)


OWNER_FILE = "owner.json"


def reap_stale(work_dir: pathlib.Path, refused: list | None = None) -> list[str]:
    """Work directories of runs whose krig process is gone (killed): their disk images are
    deleted; results the guest had written are moved into the run directory first, by the
    live pull's rules (rigs/qemu/share.py: regular files and directories only, never a name
    krig writes itself such as verdict.json; what is dropped is appended to `refused`, one
    line each, and deleted with the directory). A directory whose results cannot be moved
    (no run directory, a full disk) is kept, without its images."""
    reaped = []
    for owner in sorted(work_dir.glob(f"*/{OWNER_FILE}")):
        d = owner.parent
        try:
            rec = json.loads(owner.read_text())
        except (OSError, ValueError):
            continue
        if owner_alive(rec):
            continue
        for img in d.glob("nvme*.img"):
            img.unlink(missing_ok=True)
        out, run_dir = d / "share" / "out", pathlib.Path(rec.get("run_dir") or "/nonexistent")
        dropped, keep = [], False
        try:
            if out.is_dir() and not out.is_symlink() and run_dir.is_dir():
                dropped = qemu_share.pull_tree(out, run_dir, label=f"{d.name}/out")
                _reap_channels(d / "share" / "ctl", run_dir, d.name, dropped)
            else:               # no run directory to take them: kept where they are
                keep = out.is_dir() and not out.is_symlink() and any(out.iterdir())
        except (OSError, KrigError) as e:
            dropped.append(f"{d.name}: {os_fault(e) if isinstance(e, OSError) else e}")
            keep = True
        if refused is not None:
            refused += dropped
        if not keep:            # what was refused goes with the directory
            shutil.rmtree(d, ignore_errors=True)
        reaped.append(d.name)
    return reaped


def _reap_channels(ctl: pathlib.Path, run_dir: pathlib.Path, label: str, dropped: list) -> None:
    """The last command's channels (ctl/<n>.out, .err): the workload's stdout and stderr so far,
    copied as data (a regular file, no link) under the names krig gives them."""
    outs = sorted((p for p in ctl.glob("*.out") if p.stem.isdigit()), key=lambda p: int(p.stem))
    if not outs or ctl.is_symlink():
        return
    for src, name in ((outs[-1].name, "stdout"), (outs[-1].with_suffix(".err").name, "stderr")):
        if safeio.lstat(ctl, src) is None or safeio.lstat(run_dir, name) is not None:
            continue
        try:
            safeio.copy_out(ctl, src, run_dir / name, cap=qemu_share.PULL_CAP)
        except safeio.UsageError as e:
            dropped.append(f"{label}/ctl/{src}: {e}")


class QemuMachine:
    """One run's guest as the QEMU protocols share it, handed to each of them explicitly:
    the QEMU process, the run directory, the work directory with the 9p share and the disk
    images, QEMU's argv, and the facts learnt on the way."""

    def __init__(self, name: str):
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.guard: subprocess.Popen | None = None     # kills QEMU if krig dies (rigs/qemu/confine.py)
        self.run_dir: pathlib.Path | None = None
        self.workdir: pathlib.Path | None = None
        self.share: pathlib.Path | None = None
        self.argv: list = []        # krig's own QEMU options, naming host paths (rigs/qemu/launch.py)
        self.extra: list = []       # the rig file's extra_args, checked (rigs/qemu/args.py)
        self.disks: list = []
        self.facts: dict = {}
        self.keep_share = False     # results that could not be moved stay in the share
        self.share_model = "mapped-xattr"   # rigs/qemu/share.py: the guest's links arrive as regular files
        self.stopped: str | None = None
        self.watch: qemu_memory.MemoryWatch | None = None   # a sparse guest's host memory

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died(self, what: str) -> GuestCrashed:
        """The guest went away while `what`: QEMU's own fault, if it had one, goes along."""
        assert self.proc is not None and self.run_dir is not None, "a guest dies once started"
        fault = qemu_fault(self.proc, self.run_dir / "qemu.log")
        return GuestCrashed(f"guest died {what} (qemu exit {self.proc.returncode}); see console.log",
                            rig_fault=f"rig {self.name}: {fault}" if fault else None)

    def timed_out(self) -> None:
        """A wait for the guest ran out of time: note whether the host had stopped QEMU."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        why = stopped_by_host(proc.pid)
        if why:
            self.stopped = f"the emulator (QEMU pid {proc.pid}) was {why} when the timeout passed"


class QemuRig(Rig):
    kind = "qemu"
    spec: QemuSpec
    boot: "_Boot"
    takes_path = True       # rigs.load_rig passes the rig file's path, as the user gave it, for messages

    def __init__(self, name: str, spec: dict, path=None):
        self.where = str(path) if path else f"rigs/{name}.toml"
        super().__init__(name, validate_spec(name, spec, self.where))
        self.m = QemuMachine(name)
        self.power = _Power(self.m)
        self.console = _Console()
        self.command = MailboxCommand(self.m)
        self.files = _Files(self.m)
        self.boot = _Boot(self.m, self.spec, self.console, self.power)

    def respec(self, **changes) -> None:
        """Some fields of the checked rig file replaced (tests and benchmarks: accel = "tcg"...)."""
        self.spec = self.boot.spec = dataclasses.replace(self.spec, **changes)

    # what tests and benchmarks read of the current run
    share = property(lambda self: self.m.share)
    workdir = property(lambda self: self.m.workdir)
    proc = property(lambda self: self.m.proc)

    def work_dir(self) -> pathlib.Path:
        """Where per-run work directories (scratch disk images, the 9p share) go."""
        if not self.spec.work_dir:
            return cache_dir("work")
        d = pathlib.Path(self.spec.work_dir).expanduser()
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass            # prepare() says what is wrong with it
        return d

    def boot_timeout(self) -> float:
        return self.spec.boot_timeout

    def emulator_pid(self):
        return self.m.proc.pid if self.m.alive() else None

    def host_needs(self):
        return {"memory": self.spec.memory_bytes, "cpus": self.spec.cpus, "programs": [QEMU],
                "work_dir": self.work_dir(), **qemu_memory.host_needs(self.spec)}

    # -- per-run state ------------------------------------------------------
    def prepare(self, run_dir, kernel, needs):
        self.m.run_dir = pathlib.Path(run_dir)
        self.console.log_path = self.m.run_dir / "console.log"
        if needs.get("scratch_size") and not any(d.role == "scratch" for d in self.spec.disks):
            raise UsageError(f"{self.where}: the reproducer needs a scratch disk; add a [[disks]] entry")
        base = self.work_dir()
        dropped = []
        self.m.facts["reaped_work_dirs"] = reap_stale(base, dropped)
        if dropped:
            self.m.facts["reaped_refused"] = dropped[:50]
        try:
            self.m.workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"krig-{self.name}-", dir=base))
            (self.m.workdir / OWNER_FILE).write_text(json.dumps({**owner_record(), "run_dir": str(self.m.run_dir)}))
            self.m.share = self.m.workdir / "share"
            (self.m.share / "ctl").mkdir(parents=True)
            (self.m.share / "out").mkdir()
            self.m.share_model = qemu_share.security_model(self.m.workdir)
            self.m.facts["share_security_model"] = self.m.share_model
            want = needs.get("scratch_size", 0)
            self.m.disks = []
            for i, d in enumerate(self.spec.disks):
                size = max(d.size, want) if d.role == "scratch" else d.size
                img = self.m.workdir / f"nvme{i}.img"
                with open(img, "wb") as f:
                    f.truncate(size)    # sparse
                self.m.disks.append({**d.to_json(), "size": size, "path": img})
        except OSError as e:
            raise RigError(f"rig {self.name}: cannot set up the work directory and scratch images in "
                           f"{base}: {os_fault(e)}") from None
        self.m.facts["disks"] = [{"serial": d["serial"], "role": d["role"], "size": d["size"]} for d in self.m.disks]

    def scratch_env(self):
        env = qemu_memory.guest_env(self.m.watch, GUEST_SHARE)     # a sparse guest's host budget
        for d in self.m.disks:
            if d["role"] == "scratch":
                return {**env, "KRIG_SCRATCH_SERIAL": d["serial"]}
        return env

    def facts(self):
        return {**self.m.facts, **(self.m.watch.facts() if self.m.watch else {})}

    def shutdown(self, grace: float = 20.0):
        """Ask the agent to power the guest off, then make sure it is."""
        if self.m.alive() and self.m.share is not None:
            try:
                safeio.write_bytes(self.m.share, "ctl/poweroff", b"")
            except (OSError, KrigError):
                pass        # the guest spoilt its mailbox: power.off() below ends it
            assert self.m.proc is not None          # alive()
            try:
                self.m.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        self.power.off()

    def close(self):
        if self.m.proc is not None:
            stop_group(self.m.proc, 5.0)
            qemu_confine.end_guard(self.m.guard)
        if self.m.watch is not None:
            self.m.watch.stop()
        if self.m.workdir and self.m.workdir.exists() and not self.spec.keep_disks:
            if self.m.keep_share:     # results that could not be moved stay; the images go
                for d in self.m.disks:
                    pathlib.Path(d["path"]).unlink(missing_ok=True)
            else:
                shutil.rmtree(self.m.workdir, ignore_errors=True)

    def host_fault(self):
        if self.m.stopped:
            return self.m.stopped
        oom = qemu_memory.host_oom(self.m.proc, self.m.watch)
        if oom:
            return oom
        said = host_disk_error(self.m.run_dir / "qemu.log") if self.m.run_dir else None
        if said:
            return (f"the filesystem under the rig's work directory {self.work_dir()} refused the disk "
                    f"images' writes: QEMU said \"{said}\" (qemu.log)")
        return None


class _Power(PowerProtocol):
    def __init__(self, machine: QemuMachine):
        self.m = machine

    def on(self):
        r = self.m
        if r.alive():
            return
        if not r.argv:
            raise RigError(f"rig {r.name}: power on before a kernel was chosen")
        qlog = open(r.run_dir / "qemu.log", "ab")
        try:
            # the guest writes the share as QEMU's user
            r.proc, r.guard, started = qemu_launch.start(r.argv, r.extra, owned=[r.share], stdin=subprocess.DEVNULL,
                                                         stdout=qlog, stderr=qlog, start_new_session=True)
        except OSError as e:
            raise RigError(f"cannot start {QEMU}: {e}") from None
        finally:
            qlog.close()
        r.facts.update(started)

    def off(self):
        if self.m.proc is not None:
            stop_group(self.m.proc, 5.0)

    def status(self):
        return "on" if self.m.alive() else "off"


class _Console(ConsoleProtocol):
    def __init__(self):
        self.log_path = pathlib.Path("/nonexistent")


class _Boot(BootProtocol):
    def __init__(self, machine: QemuMachine, spec: QemuSpec, console: _Console, power: _Power):
        self.m, self.spec, self.console, self.power = machine, spec, console, power

    def boot(self, kernel, cmdline, timeout=None, reach=None):
        r, spec = self.m, self.spec
        initrd = initramfs.build(kernel.release, kernel.modules_dir, [*BASE_MODULES, *spec.modules])
        accel, reason = spec.accel, "set in the rig file"
        if accel == "auto":
            accel, reason = probe_accel(kernel, initrd)
        r.facts.update({"accel": accel, "accel_reason": reason, "qemu_version": qemu_version(),
                         "initramfs": str(initrd)})
        if any(c.isspace() for c in str(ROOT)):
            raise RigError(f"the krig tree {ROOT} has whitespace in its path; the guest cannot be told it")
        accel_arg = f"tcg,thread={spec.tcg_thread}" if accel == "tcg" else accel
        r.facts["accel_arg"] = accel_arg
        root_args, root_cmdline = guestroot.cached(ROOT)
        image, entry = kernel.image, "bzimage"
        if spec.kernel_entry == "auto":  # the same kernel, not decompressed under emulation
            elf = kimage.pvh_image(pathlib.Path(kernel.image))
            image, entry = (elf, "pvh") if elf else (image, entry)
        r.facts.update({"kernel_entry": entry, "boot_image": str(image)})
        shutil.copy(AGENT, r.share / "agent.sh")
        # the kernel's and the caller's command line come last: theirs win
        clock = TCG_TSC_CMDLINE if accel == "tcg" and spec.tcg_clocksource == "tsc" else []
        r.facts["tcg_clocksource"] = spec.tcg_clocksource if accel == "tcg" else None
        append = ["console=ttyS0", "panic=-1", "oops=panic", "loglevel=6", *clock,
                  f"krig.agent={GUEST_SHARE}/agent.sh", *root_cmdline, *qemu_memory.hash_cmdline(spec),
                  *kernel.cmdline, *cmdline]
        machine = qemu_memory.machine_args(spec.memory_backing, spec.memory_bytes)
        argv = [QEMU, "-name", f"krig-{r.name}", *machine, "-accel", accel_arg,
                "-cpu", "host" if accel == "kvm" else "max",
                "-smp", str(spec.cpus), "-m", str(spec.memory_bytes // (1 << 20)),
                "-display", "none", "-vga", "none", "-nodefaults", "-no-reboot", "-sandbox", SANDBOX,
                "-chardev", f"file,id=con,path={self.console.log_path}", "-serial", "chardev:con",
                "-kernel", str(image), "-initrd", str(initrd), "-append", " ".join(append),
                *root_args,
                "-virtfs", f"local,path={r.share},mount_tag=krig,security_model={r.share_model},multidevs=remap"]
        for i, d in enumerate(r.disks):
            argv += ["-drive", f"file={d['path']},if=none,id=nvme{i},format=raw,cache=unsafe",
                     "-device", f"nvme,drive=nvme{i},serial={d['serial']}"]
        r.argv, r.extra = argv, list(spec.extra_args)      # started by power.on() (rigs/qemu/launch.py)
        r.facts["kernel_cmdline"] = " ".join(append)
        # the run has a console.log from the start, even if QEMU is stopped before it opens it
        self.console.log_path.touch()
        self.power.on()
        r.watch = qemu_memory.watch(spec, r.proc, r.run_dir, r.share)
        deadline = time.monotonic() + (timeout or spec.boot_timeout)
        ready = r.share / "ctl" / "ready"
        t0 = time.monotonic()
        while not ready.exists():
            if not r.alive():
                raise r.died("during boot")
            if time.monotonic() > deadline:
                r.timed_out()
                raise GuestHung(f"guest did not come up within {timeout or spec.boot_timeout:.0f}s")
            time.sleep(0.1)
        r.facts["boot_seconds"] = round(time.monotonic() - t0, 2)
        r.facts["qemu_user"] = qemu_confine.process_user(r.proc.pid)     # the user the guest runs under
        r.facts.update(qemu_memory.booted(spec, r.proc.pid))


class _Files(FilesProtocol):
    def __init__(self, machine: QemuMachine):
        self.m = machine

    def stage(self, local):
        """The krig tree's reproducers/ is shared at its own path (rigs/qemu/guestroot.py)."""
        local = pathlib.Path(local).resolve()
        if local != ROOT.resolve():
            raise RigError(f"rig {self.m.name}: only the krig tree {ROOT} is shared with the guest, not {local}")
        return str(local)

    def results_dir(self):
        return f"{GUEST_SHARE}/out"

    def pull(self, remote, local):
        if self.m.share is None:
            return                  # the run never got a share: nothing to pull
        if not remote.startswith(GUEST_SHARE + "/"):
            raise RigError(f"rig {self.m.name}: can only pull from {GUEST_SHARE}, not {remote}")
        rel = remote[len(GUEST_SHARE) + 1:]
        src = self.m.share / rel
        local = pathlib.Path(local)
        local.mkdir(parents=True, exist_ok=True)
        if not src.is_dir() or src.is_symlink():
            return
        try:
            refused = qemu_share.pull_tree(src, local, label=rel)
        except (OSError, KrigError) as e:
            self.m.keep_share = True
            why = os_fault(e) if isinstance(e, OSError) else str(e)
            raise RigError(f"cannot move the results into {local}: {why}; the collected files "
                           f"are kept in {src}") from None
        if refused:
            self.m.facts["refused_from_guest"] = refused[:50]
            more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
            raise RigError(f"the guest's results were refused in part: {refused[0]}{more}; "
                           "krig takes only regular files and directories from a guest")
