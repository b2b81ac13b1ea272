"""The lifecycle of a lab server (rigs/ipmi/server.py, and the Redfish server built on it) as the
rig sees it during one run, or across the runs of one workflow that keeps it up between them
(rigs/ipmi/warm.py): which state it is in, and which state may follow which.

    UNKNOWN  nothing learnt yet: the server may be off, up, or running anything
    OFF      powered off by this run (an orderly shutdown, or a hard power off)
    BOOTING  told to boot another kernel (kexec -e), not yet answering SSH with a new boot id
    UP       answering SSH with the boot id this run knows: commands and pulls may go to it
    HUNG     stopped making progress (no answer in time): salvaged, NMI, power cycled
    CRASHED  went away: a kernel crash on the console, a reboot, a power off underneath

The transitions (TRANSITIONS), and what makes them:

    UNKNOWN -> UP | HUNG | CRASHED | OFF   the first wait for SSH, its probe, or the power off
    OFF     -> UP | HUNG | CRASHED | OFF   powered on and waited for; a second power off
    UP      -> UP | BOOTING | HUNG | CRASHED | OFF
                                           probed again (also by the next run of a workflow that
                                           kept it up); kexec -e (also from the previous run's
                                           kernel: a warm kexec); a command or a pull overran;
                                           the link failed and the console or BMC says why
    BOOTING -> UP | HUNG | CRASHED | OFF   the kexec'd kernel answers, or does not, or crashes
    HUNG    -> UP | HUNG | CRASHED | OFF   the power cycle after a hang brought it back, or not
    CRASHED -> OFF                         nothing runs on a crashed server but its power off (a
                                           workflow's next run too: a hard off, then power on)

Nothing returns to UNKNOWN, and only a server that is UP can be told to boot (BOOTING). Any
other change is krig's own mistake: ServerState.to() refuses it as IllegalTransition, one
line naming the server and both states.

The other values the rig decides on, each written to the run's facts (manifest.json) for the
record and never read back from them to decide anything:

    Power     the server's power as its BMC reports it (the BMC classes parse their text into it)
    Hang      what a hang did to the server: why, the NMI, whether its power cycle brought it back
    NextBoot  how the next run of a workflow that keeps the server up boots it (rigs/ipmi/warm.py),
    BootPlan  with the reason apart: its sentences are the facts booted_by and next_boot
"""
import dataclasses
import enum

from krig.errors import KrigError


class IllegalTransition(KrigError):
    """A change of a lab server's state that TRANSITIONS does not allow."""


class ServerState(enum.Enum):
    UNKNOWN = "unknown"
    OFF = "off"
    BOOTING = "booting"
    UP = "up"
    HUNG = "hung"
    CRASHED = "crashed"

    def __str__(self) -> str:
        return self.value

    def to(self, new: "ServerState", server: str) -> "ServerState":
        """new, when this state may be followed by it; else IllegalTransition naming `server`."""
        if not isinstance(new, ServerState):
            raise TypeError(f"a server state is a ServerState, not {new!r}")
        allowed = TRANSITIONS[self]
        if new not in allowed:
            raise IllegalTransition(f"rig {server}: the server cannot go from {self.value} to {new.value} "
                                    f"(from {self.value}: {', '.join(s.value for s in allowed)})")
        return new


_S = ServerState
TRANSITIONS: dict[ServerState, tuple[ServerState, ...]] = {
    _S.UNKNOWN: (_S.UP, _S.HUNG, _S.CRASHED, _S.OFF),
    _S.OFF: (_S.UP, _S.HUNG, _S.CRASHED, _S.OFF),
    _S.UP: (_S.UP, _S.BOOTING, _S.HUNG, _S.CRASHED, _S.OFF),
    _S.BOOTING: (_S.UP, _S.HUNG, _S.CRASHED, _S.OFF),
    _S.HUNG: (_S.UP, _S.HUNG, _S.CRASHED, _S.OFF),
    _S.CRASHED: (_S.OFF,),
}


class Power(enum.Enum):
    """A server's power as its BMC says it (rigs/ipmi/bmc.py, rigs/redfish/bmc.py)."""
    ON = "on"
    OFF = "off"

    def __str__(self) -> str:
        return self.value


class NextBoot(enum.Enum):
    """How the next run of a workflow boots a server kept up for it (rigs/ipmi/warm.py)."""
    WARM = "warm"               # kexec straight from the previous run's kernel (healthy)
    INSTALLED = "installed"     # kexec from the installed system a hang's power cycle brought back
    CYCLE = "cycle"             # a power cycle through the firmware first, then kexec


@dataclasses.dataclass(frozen=True)
class BootPlan:
    """A NextBoot and its reason: for WARM the release of the kernel kexec'd from, else what made
    the boot cold ("a hang (...)", "the rig file asks for cold boots (cold_boot = true)")."""
    how: NextBoot
    reason: str

    def said(self) -> str:
        """The plan as the facts say it (next_boot of this run, booted_by of the next)."""
        if self.how is NextBoot.WARM:
            return f"warm: kexec from {self.reason} of the previous run"
        if self.how is NextBoot.INSTALLED:
            return (f"cold: power cycle after {self.reason} (end of the previous run), then kexec from the "
                    "installed system")
        return f"cold: power cycle after {self.reason}"

    def powered_on(self) -> str:
        """booted_by when the server was found off: a power on does what the cycle would have."""
        return f"cold: power on after {self.reason}" if self.how is NextBoot.CYCLE else "cold: power on"


@dataclasses.dataclass(frozen=True)
class Hang:
    """A hang of the server in this run (rigs/ipmi/server.py on_hang), as far as its handling got:
    why; the NMI sent or why not; the console bytes that came after it; and, when the rig file
    asks for it (recover_after_hang), whether the power cycle brought the server back (recovered)
    and how, or why not (how; None while no recovery was tried)."""
    reason: str
    nmi: str | None = None
    console_bytes: int | None = None
    recovered: bool = False
    how: str | None = None

    def fact(self) -> dict:
        """The rig fact "hang" (manifest.json)."""
        out: dict = {"reason": self.reason}
        if self.nmi is not None:
            out["nmi"] = self.nmi
        if self.console_bytes is not None:
            out["console_bytes_after_nmi"] = self.console_bytes
        if self.how is not None:
            out["recovered"] = f"{'yes' if self.recovered else 'no'}: {self.how}"
        return out
