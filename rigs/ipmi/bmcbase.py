"""What the lab server's logic (rigs/ipmi/server.py) asks of a BMC, whichever way it speaks:
`ipmitool -I lanplus` (rigs/ipmi/bmc.py Bmc) or Redfish (rigs/redfish/bmc.py RedfishBmc).

Each subclass takes its own rig-file table (`cfg`: rigs/ipmi/spec.py IpmiSpecBmc,
rigs/redfish/spec.py RedfishSpecBmc), so neither reads a field the other lacks; what they
share lives here: the bmc.log lines, the password taken out of what a BMC wrote, the bounded
wait for a power state and the memory of a refused login (never retried: BMCs lock
accounts out).
"""
import pathlib
import time
from typing import Generic, TypeVar

from krig import progress
from krig.errors import RigError
from rigs.ipmi.state import Power
from rigs.procs import log_line

Cfg = TypeVar("Cfg")


class BmcAuthError(RigError):
    """The BMC refused krig's login (a wrong password, an unknown user, a pin that does not
    match): the run ends, and the login is not tried again."""


class BmcBase(Generic[Cfg]):
    POWER_ON = ""       # how to power the server on by hand, as errors say it
    NMI = ""            # how the NMI is sent, as rig_facts hang.nmi says it

    def __init__(self, rig: str, cfg: Cfg, password: str, log_path: pathlib.Path | None = None):
        self.rig = rig
        self.cfg = cfg
        self._password = password
        self.log_path = log_path
        self.where = "BMC"
        self.failed: str | None = None  # "no answer" or "login refused": clean-up then leaves the BMC alone
        self._auth_message = ""         # the refused login's line, said again instead of a new login

    def _log(self, line: str) -> None:
        log_line(self.log_path, line)

    def _scrub(self, text: str) -> str:
        """text with the password taken out, should a BMC or a client ever echo it."""
        return text.replace(self._password, "********") if self._password else text

    # -- what the server's logic asks -----------------------------------------
    def power_status(self) -> Power:
        raise NotImplementedError

    def power(self, action: str) -> None:
        raise NotImplementedError

    def bootdev(self, device: str) -> None:
        raise NotImplementedError

    def mc_info(self) -> str:
        raise NotImplementedError

    def sel_text(self) -> str:
        raise NotImplementedError

    def sel_clear(self) -> str | None:
        raise NotImplementedError

    def wait_power(self, want: Power, timeout: float, poll: float = 1.0) -> bool:
        deadline = time.monotonic() + timeout
        with progress.waiting(f"the server {self.rig}'s power to be {want} (its BMC)", timeout):
            for _ in range(int(timeout / poll) + 2):
                if self.power_status() is want:
                    return True
                if time.monotonic() > deadline:
                    break
                time.sleep(poll)
        return False
