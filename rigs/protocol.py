"""The rig protocols: what the run pipeline may ask of any machine under test.

Modelled on labgrid: a rig is a few small protocols with interchangeable
drivers. The pipeline, the reproducers and the analysis only ever use these
methods, so they never branch on the kind of rig.
"""
import abc
import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

from krig.schema import Record


class RigSpec(Record):
    """The fields every rig file has, first in its table (a driver's spec adds its own): the
    runner reads these of any rig."""
    driver: str
    description: str


@dataclasses.dataclass
class CommandResult:
    argv: list
    returncode: int
    stdout: bytes
    stderr: bytes
    duration: float


class PowerProtocol(abc.ABC):
    @abc.abstractmethod
    def on(self) -> None: ...

    @abc.abstractmethod
    def off(self) -> None:
        """Hard power off. Must be safe to call at any time, repeatedly."""

    def cycle(self) -> None:
        self.off()
        self.on()

    @abc.abstractmethod
    def status(self) -> str:
        """'on' or 'off'."""


class ConsoleProtocol(abc.ABC):
    """The kernel console, captured to a log file for the whole run."""

    log_path: pathlib.Path

    def text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class CommandProtocol(abc.ABC):
    @abc.abstractmethod
    def run(self, argv: list, env: dict | None = None, timeout: float = 60,
            salvage: list | None = None) -> CommandResult:
        """Run argv (a list, never a shell string) on the machine under test.

        Raises GuestHung when timeout passes, GuestCrashed when the machine
        dies underneath the command.  salvage: an argv to run on the machine,
        next to the overrunning command, before GuestHung is raised (bounded by
        SALVAGE_TIMEOUT; it keeps the trace a hung run would lose).  What became
        of it is the rig fact "salvage" (one line).
        """

    def partial_output(self) -> tuple[bytes, bytes]:
        """stdout and stderr of the last command as far as they got (a hung run keeps them);
        (b"", b"") for a rig that cannot tell."""
        return b"", b""


SALVAGE_TIMEOUT = 60   # seconds a salvage command may take before the hang is declared
SECRETS_FILE_ENV = "KRIG_SECRETS_FILE"   # names the secrets a parent hands its worker processes
OUTPUT_CAP = 256 << 20   # a command's stdout or stderr, as much as a rig reads back from the machine
CONSOLE_CAP = 1 << 30    # a lab server's console.log of one run (SOL or a network console), at most


class FilesProtocol(abc.ABC):
    @abc.abstractmethod
    def pull(self, remote: str, local: pathlib.Path) -> None:
        """Copy a remote directory's contents into local."""

    @abc.abstractmethod
    def stage(self, local: pathlib.Path) -> str:
        """Make a host directory (the krig tree) visible on the machine; return its path there."""

    @abc.abstractmethod
    def results_dir(self) -> str:
        """A fresh, writable directory on the machine for this run's results."""


# What a boot is given to ask before it kexecs a kernel (workflows/serverreach.py at_kexec):
# fn(server, kernel, warm) -> a line refusing a kernel that cannot reach the server, or None.
ReachCheck = Callable[[Any, Any, bool], "str | None"]


class BootProtocol(abc.ABC):
    @abc.abstractmethod
    def boot(self, kernel, cmdline: list, timeout: float | None = None, reach: ReachCheck | None = None) -> None:
        """Bring the machine up on `kernel` until the command protocol answers. reach: what a rig
        that kexecs into `kernel` on a server asks first (a refusal is a UsageError, the kernel
        never kexec'd); a rig that boots what it is given ignores it."""

    def bound(self, timeout: float | None = None) -> float | None:
        """The most boot() may take, every step of it at its limit (None: the rig's boot_timeout)."""
        return None


class DriversProtocol(abc.ABC):
    """The drivers the machine's installed system uses, read for a kernel built like it
    (`--kernel KERNEL,drivers=RIG`: kernels/drivers.py reads the text, workflows/serverdrivers.py
    keeps the last reading)."""

    @abc.abstractmethod
    def is_off(self) -> bool:
        """Whether the machine is off, asked without powering anything (a reading kept from
        before then serves: no power on only to read it)."""

    @abc.abstractmethod
    def read(self, log) -> str:
        """The inventory's text (kernels/drivers.py's format) read from the machine's installed
        system, the machine held as a run holds it; powered on into that system when it is off,
        and left on for the run that follows. Closes the rig."""

    @abc.abstractmethod
    def close(self) -> None:
        """Nothing read after all: what is_off opened closed (a BMC session logged out)."""


class Rig(abc.ABC):
    """A machine under test. Drivers fill in the protocol attributes."""

    kind: str = "abstract"
    power: PowerProtocol
    console: ConsoleProtocol
    command: CommandProtocol
    files: FilesProtocol
    boot: BootProtocol

    def __init__(self, name: str, spec: RigSpec):
        self.name = name
        self.spec = spec            # the rig file, checked: a frozen record of its driver's fields
        # where the rig was described, as errors name it: a driver sets it before this runs
        if not getattr(self, "where", None):
            self.where = f"rigs/{name}.toml"

    @abc.abstractmethod
    def prepare(self, run_dir: pathlib.Path, kernel, needs: dict) -> None:
        """Set up per-run state (work dirs, disks, console log in run_dir)."""

    @abc.abstractmethod
    def scratch_env(self) -> dict:
        """Environment telling the harness which disk is the scratch disk."""

    arg: str | None = None      # what was given to --rig, when a rig file's path and not a name
    _make = None                # how rigs.load_rig made it (the rig file as read): fresh() makes another

    def fresh(self) -> "Rig":
        """Another object of this rig, its per-run state empty, made from the rig file as it was read
        (the file is not read again): one run's rig, from a plan made once (workflows/plan.py)."""
        if self._make is None:
            raise TypeError(f"rig {self.name}: not made by rigs.load_rig")
        return self._make()

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, **({"arg": self.arg} if self.arg else {}), **self.spec.to_json()}

    def facts(self) -> dict:
        """Facts learnt while running (accel used and why, versions...)."""
        return {}

    def host_fault(self) -> str | None:
        """One line when the host failed the run underneath the machine (the emulator stopped by
        a signal or a frozen cgroup, the filesystem under its disk images full), else None.
        Asked once the run has ended; recorded in manifest.json for the verdict rule."""
        return None

    def boot_timeout(self) -> float | None:
        """How long a boot may take (the rig file's boot_timeout, s); None when the rig sets no bound."""
        return None

    def bmc_address(self) -> tuple[str, int] | None:
        """The (host, port) of the BMC that powers the machine (a lab server's); None when it has none."""
        return None

    def emulator_pid(self) -> int | None:
        """The local process that runs the machine (QEMU), whose speed the host's other load
        sets; None for a real machine. krig samples the host next to it (workflows/hostload.py)."""
        return None

    def host_needs(self) -> dict:
        """What a run on this rig takes from the host running krig, checked before anything
        starts (workflows/preflight.py): any of memory (bytes), cpus, programs (names on PATH),
        work_dir (where per-run files such as disk images go)."""
        return {}

    def installed_drivers(self) -> DriversProtocol | None:
        """What reads the drivers of the machine's installed system (`drivers=RIG`); None for a
        rig whose machine has none to read: the QEMU rig (a guest boots the kernel it is given)
        and the fake one. The lab server rigs read theirs over SSH (rigs/ipmi/drivers.py)."""
        return None

    def boots_installed_only(self) -> str | None:
        """None when the rig boots the kernel it is given; else why it boots only the kernel the
        machine has installed (the IPMI rig with boot = "installed"), said before anything is
        built for it (workflows/preflight.py: check_boots)."""
        return None

    def shutdown(self) -> None:
        """Orderly power off after a finished run; drivers may do better than a hard off."""
        self.power.off()

    def keep_for_next(self, cold: str | None) -> bool:
        """After a run of a workflow with more runs to come (workflows/session.py), its results
        pulled: keep the machine up and held for the next run's boot, which then skips what it
        can (a lab server's firmware: rigs/ipmi/warm.py). cold: why the next boot must start
        from the firmware (a hang, a crash, a failed pull...), None after a healthy run. False
        (the default): nothing is kept; the run powers the machine off and closes it."""
        return False

    @abc.abstractmethod
    def close(self) -> None:
        """Stop everything this rig started. Safe to call repeatedly."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
