"""The fake rig: a machine that exists only in krig's process, for fast tests of the runner.

In the spirit of labgrid's fake drivers, the five protocols are implemented
without a machine: booting writes a kernel banner into console.log, the
workload "runs" by leaving the files a rig file says it leaves (metrics,
samples, output) in a results directory on the host, and every failure the
runner must survive is one rig-file field away:

    driver = "fake"
    fault = "command-timeout"     # none (default) | FAULTS below
    samples = "moving"            # none (default) | moving | static: samples.tsv over the timeout
    output_bytes = 0              # extra bytes the workload leaves in its results
    [metrics]                     # what the workload reports with krig_metric
    answer = 42

Nothing is executed on the host except, for fault "emulator-stopped", one
`sleep` standing in for the emulator, which the fake stops with SIGSTOP so the
real host-fault detection (rigs/procs.py) sees a real stopped process.
"""
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

from krig.errors import GuestCrashed, GuestHung, RigError, UsageError, os_fault
from krig.schema import Field, check
from krig.paths import dies_with_parent
from .procs import stopped_by_host
from .protocol import (BootProtocol, CommandProtocol, CommandResult, ConsoleProtocol, FilesProtocol,
                       PowerProtocol, Rig, RigSpec)

FAULTS = {
    "none": "nothing fails",
    "boot-fails": "the machine does not come up (the rig's fault: ERROR)",
    "boot-panic": "the kernel panics during boot (CRASHED)",
    "command-timeout": "the workload does not finish within its timeout (HUNG, or ERROR if samples move)",
    "pull-fails": "the results cannot be brought back from the machine (ERROR naming where they are)",
    "power-off-fails": "the machine does not power off after the run (a warning; the verdict stands)",
    "emulator-stopped": "the host stops the emulator (SIGSTOP) and the workload times out (ERROR: host)",
}
SAMPLES = ("none", "moving", "static")
BANNER = "[    0.000000] Linux version {release} (fake rig)\n"
PANIC = "[    1.000000] Kernel panic - not syncing: VFS: Unable to mount root fs (fake rig)\n"
RESULTS = "/fake/out"
# the fake machine's /proc/sys: path -> (value, writable); a writable one takes integers only
SYSCTLS = {"vm/vfs_cache_pressure": ("100", True), "fs/dentry-negative": ("0", True),
           "kernel/osrelease": ("fake", False)}


FIELDS = (
    Field("driver", str, "fake", choices=("fake",)),
    Field("description", str, "a fake machine"),
    Field("fault", str, "none", choices=tuple(FAULTS)),
    Field("samples", str, "none", choices=SAMPLES),
    Field("output_bytes", int, 0),
    Field("metrics", dict, {}),
    Field("work_dir", str, None),
)


class FakeSpec(RigSpec, fields=FIELDS):
    fault: str
    samples: str
    output_bytes: int
    metrics: dict[str, float]
    work_dir: str | None


def validate_spec(spec: dict, where: str) -> FakeSpec:
    """A fake rig file (FIELDS), checked."""
    out = check(spec, FIELDS, where)
    for k, v in out["metrics"].items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UsageError(f"{where}.metrics.{k}: expected a number, got {v!r}")
    return FakeSpec.of(out)


class FakeMachine:
    """The state the fake's protocols share, handed to each explicitly."""

    def __init__(self, fault: str):
        self.fault = fault
        self.up = False
        self.release: str | None = None
        self.share: pathlib.Path | None = None      # the machine's results directory, on the host
        self.emulator: subprocess.Popen | None = None
        self.stopped: str | None = None
        self.facts: dict = {}
        self.cmdline: list = []                     # the words the last boot was given
        self.sysctl: dict = {}                      # /proc/sys as this boot changed it


class FakeRig(Rig):
    kind = "fake"
    spec: FakeSpec
    takes_path = True

    def __init__(self, name: str, spec: dict, path=None):
        self.where = str(path) if path else f"rigs/{name}.toml"
        super().__init__(name, validate_spec(spec, self.where))
        self.machine = FakeMachine(self.spec.fault)
        self.console = _Console()
        self.power = _Power(self.machine, name)
        self.boot = _Boot(self.machine, self.console, self.power)
        self.command = _Command(self.machine, self.spec)
        self.files = _Files(self.machine, name)

    def prepare(self, run_dir, kernel, needs):
        self.console.log_path = pathlib.Path(run_dir) / "console.log"
        base = pathlib.Path(self.spec.work_dir) if self.spec.work_dir else None
        self.machine.share = pathlib.Path(tempfile.mkdtemp(prefix=f"krig-{self.name}-", dir=base))

    def scratch_env(self):
        return {"KRIG_SCRATCH_SERIAL": "fake-scratch"}

    def facts(self):
        return {"accel": "fake", **self.machine.facts}

    def emulator_pid(self):
        e = self.machine.emulator
        return e.pid if e is not None and e.poll() is None else None

    def host_fault(self):
        return self.machine.stopped

    def close(self):
        self.power.off(must=False)
        if self.machine.share is not None and not self.machine.facts.get("kept_share"):
            shutil.rmtree(self.machine.share, ignore_errors=True)


class _Console(ConsoleProtocol):
    log_path = pathlib.Path("/nonexistent")

    def write(self, text: str):
        with open(self.log_path, "a") as f:
            f.write(text)


class _Power(PowerProtocol):
    def __init__(self, machine: FakeMachine, name: str):
        self.m, self.name = machine, name

    def on(self):
        self.m.up = True
        if self.m.fault == "emulator-stopped" and self.m.emulator is None:
            self.m.emulator = subprocess.Popen(dies_with_parent(["sleep", "600"]), stdin=subprocess.DEVNULL,
                                               start_new_session=True)

    def off(self, must: bool = True):
        e, self.m.emulator = self.m.emulator, None
        if e is not None:
            e.kill()
            e.wait()
        was_up, self.m.up = self.m.up, False
        if must and was_up and self.m.fault == "power-off-fails":
            raise RigError(f"rig {self.name}: the machine did not power off (fake fault power-off-fails)")

    def status(self):
        return "on" if self.m.up else "off"


class _Boot(BootProtocol):
    def __init__(self, machine: FakeMachine, console: _Console, power: _Power):
        self.m, self.console, self.power = machine, console, power

    def boot(self, kernel, cmdline, timeout=None, reach=None):
        self.power.on()
        if self.m.fault == "boot-fails":
            self.m.up = False
            raise RigError("the fake machine did not come up (fake fault boot-fails)")
        self.console.write(BANNER.format(release=kernel.release))
        if self.m.fault == "boot-panic":
            self.console.write(PANIC)
            self.m.up = False
            raise GuestCrashed("guest died during boot; see console.log")
        self.m.release = kernel.release
        self.m.facts["boot_seconds"] = 0.0
        self.m.cmdline, self.m.sysctl = list(cmdline), {k: v for k, (v, _) in SYSCTLS.items()}


class _Command(CommandProtocol):
    """Answers the runner's facts command; the harness leaves the rig file's results."""

    def __init__(self, machine: FakeMachine, spec: FakeSpec):
        self.m, self.spec = machine, spec

    def run(self, argv, env=None, timeout=60, salvage=None):
        if not self.m.up:
            raise GuestCrashed(f"the fake machine is off (before running {argv[0]})")
        if "krig-sysctl" in argv:
            return CommandResult(list(argv), 0, self._sysctl(argv[argv.index("krig-sysctl") + 1:]).encode(), b"", 0.0)
        if not any(str(a).endswith("harness.sh") for a in argv):
            out = f"{self.m.release}\n{' '.join(['console=ttyS0', *self.m.cmdline])} (fake)\n2\n{4 << 20}\nfake\n"
            return CommandResult(list(argv), 0, out.encode(), b"", 0.0)
        out = self.m.share
        self._samples(out / "samples.tsv", float(timeout))
        (out / "phases.tsv").write_text("1000.0\tstart\n1001.0\tcreate\n")
        if self.m.fault in ("command-timeout", "emulator-stopped"):
            if self.m.emulator is not None:
                self.m.emulator.send_signal(signal.SIGSTOP)
                why = None
                for _ in range(50):         # the stop takes effect when the process is next scheduled
                    why = stopped_by_host(self.m.emulator.pid)
                    if why:
                        break
                    time.sleep(0.05)
                if why:
                    self.m.stopped = f"the emulator (pid {self.m.emulator.pid}) was {why} when the timeout passed"
            self.m.facts["salvage"] = "no answer (fake)"
            raise GuestHung(f"{' '.join(map(str, argv))} did not finish within {timeout:.0f}s")
        (out / "workload-metrics.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in self.spec.metrics.items()))
        if self.spec.output_bytes:
            with open(out / "output.bin", "wb") as f:
                f.write(b"\0" * self.spec.output_bytes)
        return CommandResult(list(argv), 0, b"the fake workload ran\n", b"", 0.0)

    def _sysctl(self, args: list) -> str:
        """krig/knobs.py SYSCTL_SCRIPT's answer, from the fake's SYSCTLS."""
        out = []
        for name, path, value in zip(args[0::3], args[1::3], args[2::3]):
            if path not in SYSCTLS:
                out.append(f"unknown\t{name}")
            elif not SYSCTLS[path][1]:
                out.append(f"read-only\t{name}")
            elif not value.isdigit():
                out.append(f"refused\t{name}\tInvalid argument")
            else:
                self.m.sysctl[path] = value
                out.append(f"set\t{name}\t{value}")
        return "".join(f"{ln}\n" for ln in out)

    def _samples(self, path: pathlib.Path, timeout: float):
        """One row a second over the whole timeout; files are created throughout ("moving") or
        stop early ("static")."""
        if self.spec.samples == "none":
            return
        rows = ["time\tnr_dentry\tnr_negative\txfs_log_writes\txfs_log_blocks\tscratch_files\tscratch_ffree\tmono"]
        for t in range(int(timeout) + 1):
            used = 30 * t if self.spec.samples == "moving" else 30 * min(t, 5)
            rows.append(f"{1000 + t}\t5000\t5\t7\t448\t1000000\t{1000000 - used}\t{t}")
        path.write_text("\n".join(rows) + "\n")

    def partial_output(self) -> tuple[bytes, bytes]:
        return b"the fake workload started\n", b""


class _Files(FilesProtocol):
    def __init__(self, machine: FakeMachine, name: str):
        self.m, self.name = machine, name

    def stage(self, local):
        return str(local)

    def results_dir(self):
        return RESULTS

    def pull(self, remote, local):
        if self.m.share is None:
            return
        if self.m.fault == "pull-fails":
            self.m.facts["kept_share"] = True
            raise RigError(f"rig {self.name}: cannot reach the machine to pull {remote} (fake fault pull-fails); "
                           f"the collected files are kept in {self.m.share}")
        local = pathlib.Path(local)
        for p in sorted(self.m.share.iterdir()):
            try:
                shutil.move(str(p), str(local / p.name))
            except OSError as e:
                self.m.facts["kept_share"] = True
                (local / p.name).unlink(missing_ok=True)
                raise RigError(f"cannot move {p.name} into {local}: {os_fault(e)}; the collected files "
                               f"are kept in {self.m.share}") from None
