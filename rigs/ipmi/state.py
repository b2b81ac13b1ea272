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
"""
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
