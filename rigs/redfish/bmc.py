"""A server's BMC through Redfish, on the sushy client library: power, one-time boot override,
NMI, log services, the server's facts; the methods rigs/ipmi/bmcbase.py's BmcBase declares, as
the IPMI Bmc (rigs/ipmi/bmc.py) has them, so the lab server's logic (rigs/ipmi/server.py)
drives either.

Power is ComputerSystem.Reset with a ResetType the system lists (AllowableValues); an NMI is
ResetType Nmi where offered. Login is a session token (SessionService), or with
`auth = "auto"` basic authentication on a BMC without sessions. TLS is verified against the
system's CAs, the rig file's ca_file, or a pinned SHA-256 fingerprint: never turned off. The
password is handed to sushy in this process only, and every request goes through
rigs/redfish/origin.py: to the BMC's own origin over TLS only, its body read within a cap.
sushy's own log lines go to bmc.log, the password taken out. Every failure is one RigError
line naming the BMC; what the BMC wrote reaches it as printable text only (krig.safeio).
"""
import hashlib
import logging
import socket
import ssl
import time
from typing import TYPE_CHECKING

from krig.errors import RigError
from krig.safeio import printable
from rigs.ipmi.bmcbase import BmcAuthError, BmcBase
from rigs.ipmi.state import Power
from rigs.redfish.origin import BmcRefused, bmc_url, guard, public_session
from rigs.redfish.facts import clear_logs, log_text, manager_line, server_facts

if TYPE_CHECKING:
    from rigs.redfish.spec import RedfishSpecBmc

# krig's power actions -> the ResetTypes that do them, the first one the system offers wins
RESETS = {"on": ("On", "ForceOn"), "off": ("ForceOff",), "soft": ("GracefulShutdown",),
          "cycle": ("PowerCycle", "ForceRestart"), "reset": ("ForceRestart", "PowerCycle"), "diag": ("Nmi",)}


def power_of(state: str | None) -> Power | None:
    """A system's PowerState as krig's Power (a transition as the state it leaves); None for
    another value."""
    return {"On": Power.ON, "PoweringOff": Power.ON, "Off": Power.OFF, "PoweringOn": Power.OFF}.get(state or "")


class _ToBmcLog(logging.Handler):
    def __init__(self, bmc: "RedfishBmc"):
        super().__init__(logging.INFO)
        self.bmc = bmc

    def emit(self, record):
        try:
            self.bmc._log(f"sushy: {self.bmc._clean(record.getMessage())}")
        except Exception:       # a log line never fails the run
            pass


def fingerprint_of(host: str, port: int, timeout: float = 10) -> str:
    """The SHA-256 fingerprint of the certificate a TLS server presents (not verified)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((host, port), timeout) as s, ctx.wrap_socket(s, server_hostname=host) as t:
        cert = t.getpeercert(binary_form=True)
    if cert is None:        # a handshake without a certificate (an anonymous cipher)
        raise ssl.SSLError(f"{host}:{port} presented no certificate")
    return hashlib.sha256(cert).hexdigest()


def _colons(fp: str) -> str:
    return ":".join(fp[i:i + 2] for i in range(0, len(fp), 2)).upper()


class RedfishBmc(BmcBase["RedfishSpecBmc"]):
    POWER_ON = "ComputerSystem.Reset On, from the BMC's web page or any Redfish client"
    NMI = "ComputerSystem.Reset Nmi"

    def __init__(self, rig: str, cfg: "RedfishSpecBmc", password: str, log_path=None):
        """cfg: the rig file's [bmc] table, checked (rigs/redfish/spec.py BMC)."""
        super().__init__(rig, cfg, password, log_path)
        self.url = bmc_url(self.cfg.host, self.cfg.port)
        self.where = f"BMC {self.url}"
        self._root = self._system = self._conn = self._auth = self._guard = None
        self._handler = None

    # -- plumbing -----------------------------------------------------------
    def _connect(self):
        import sushy
        from sushy import auth, connector
        c = self.cfg
        if self._handler is None:
            self._handler = _ToBmcLog(self)
            log = logging.getLogger("sushy")
            log.addHandler(self._handler)
            log.setLevel(logging.INFO)
            log.propagate = False           # never on krig's stderr
        verify = c.ca_file or c.fingerprint is None
        self._conn = connector.Connector(self.url, verify=verify, server_side_retries=c.retries,
                                         server_side_retries_delay=2, default_request_timeout=c.timeout,
                                         connect_timeout=min(10, c.timeout))
        where, deadline = f"rig {self.rig}: {self.where}", 2 * c.timeout
        self._guard = guard(self._conn, self.url, where, c.fingerprint, deadline)
        kind = auth.SessionAuth if c.auth == "session" else auth.SessionOrBasicAuth
        self._auth = kind(c.user, self._password)
        self._root = sushy.Sushy(self.url, auth=self._auth, connector=self._conn,
                                 public_connector=public_session(self.url, where, c.fingerprint, deadline))
        systems = self._root.get_system_collection().members_identities
        want = [s for s in systems if s.rstrip("/").rsplit("/", 1)[-1] == c.system] if c.system else systems
        if len(want) != 1:
            listed = printable(", ".join(s.rstrip("/").rsplit("/", 1)[-1] for s in systems) or "none", 300)
            raise RigError(f"rig {self.rig}: {self.where}: " + (
                f"no system {c.system!r} (the BMC lists: {listed})" if c.system else
                f"lists {len(systems)} systems ({listed}); set bmc.system to one of them"))
        self._system = self._root.get_system(want[0])

    def call(self, what: str, fn, *args):
        """fn(system, *args) with the BMC's failures as one RigError line naming the BMC."""
        import sushy.exceptions as sx
        if self.failed == "login refused":      # never retry a refused login: BMCs lock accounts out
            raise BmcAuthError(self._auth_message)
        t0, login = time.monotonic(), self._system is None
        try:
            if login:
                self._connect()
            out = fn(self._system, *args)
            if self._guard is not None and self._guard.refused:         # a refusal sushy took as a missing attribute
                raise BmcRefused(self._guard.refused)
            self._log(f"{what}: ok in {time.monotonic() - t0:.1f}s")
            self.failed = None
            return out
        except BmcRefused as e:
            self._drop()
            self.failed, self._auth_message = "login refused", str(e)
            self._log(f"{what}: {e}")
            raise
        except sx.AccessError as e:
            self._drop()
            self.failed = "login refused"
            why = ("a wrong password or a locked account" + (", or no SessionService (auth = \"auto\" logs in "
                   "without one)" if self.cfg.auth == "session" else "") if login else
                   "the session dropped and a new login refused")
            self._auth_message = (f"rig {self.rig}: {self.where} refused user {self.cfg.user!r} "
                                  f"(HTTP {e.status_code}) {'logging in' if login else 'while ' + what}: {why}")
            raise BmcAuthError(self._auth_message) from None
        except sx.ConnectionError as e:
            self._drop()
            why = self._tls_refusal(e) or f"did not answer: {self._clean(str(getattr(e, 'kwargs', {}).get('error', e)))}"
            self.failed = "no answer" if not why.startswith("presents") else "login refused"
            if self.failed == "login refused":
                self._auth_message = f"rig {self.rig}: {self.where} {why}"
            self._log(f"{what}: {why}")
            raise RigError(f"rig {self.rig}: {self.where} {why} (while {what})") from None
        except sx.ServerSideError as e:
            self._log(f"{what}: HTTP {e.status_code}")
            busy = " (busy: still after the retries)" if e.status_code == 503 else ""
            raise RigError(f"rig {self.rig}: {self.where}: HTTP {e.status_code}{busy} while {what}: "
                           f"{self._clean(e.message or '')[:200]}") from None
        except (TypeError, AttributeError, KeyError, ValueError) as e:    # a field of another type than the schema's
            self._log(f"{what}: {type(e).__name__}")
            raise RigError(f"rig {self.rig}: {self.where}: {what} failed: its answer is not what the Redfish "
                           f"schema says ({type(e).__name__})") from None
        except sx.SushyError as e:
            self._log(f"{what}: {type(e).__name__}")
            raise RigError(f"rig {self.rig}: {self.where}: {what} failed: "
                           f"{self._clean(str(e))}") from None

    def _tls_refusal(self, e) -> str | None:
        """A TLS failure as one line saying what the BMC presented; None for other failures."""
        err = str(getattr(e, "kwargs", {}).get("error", e))
        if "SSL" not in err and "certificate" not in err.lower() and "ingerprint" not in err:
            return None
        try:
            got = _colons(fingerprint_of(self.cfg.host, self.cfg.port))
        except (OSError, ssl.SSLError):
            got = "unknown"
        if self.cfg.fingerprint is not None:
            return (f"presents a certificate with SHA-256 fingerprint {got}, not the pinned "
                    f"{_colons(self.cfg.fingerprint)}; nothing was started")
        trust = f"ca_file {self.cfg.ca_file}" if self.cfg.ca_file else "the system's CAs"
        return (f"presents a certificate that {trust} do not trust (SHA-256 fingerprint {got}; pin it as "
                f"bmc.fingerprint once checked on the BMC itself); nothing was started")

    def _clean(self, err: str) -> str:
        """What the BMC or sushy wrote, the password taken out, as one printable line."""
        lines = [ln for ln in self._scrub(err).splitlines() if ln.strip()]
        return printable(lines[0] if lines else "", 300)

    def _drop(self):
        self._system = self._root = None

    def close(self):
        """Log the session out (best effort) and detach sushy's log."""
        if self._auth is not None and self.failed is None:
            try:
                self._auth.close()
            except Exception as e:      # the BMC may be gone: never fails the clean-up
                self._log(f"logout: {e if isinstance(e, BmcRefused) else type(e).__name__}")
        self._auth = None
        self._drop()
        if self._handler is not None:
            logging.getLogger("sushy").removeHandler(self._handler)
            self._handler = None

    def raw(self, path: str) -> dict:
        """A resource of the BMC as JSON through sushy's connector (what sushy has no class for)."""
        conn = self._conn
        assert conn is not None, "call() connects before it reads"
        return conn.get(path).json()

    # -- power --------------------------------------------------------------
    def power_status(self) -> Power:
        def status(s):
            s.refresh(force=True)
            return s.power_state.value if s.power_state else None
        state = self.call("reading the power state", status)
        power = power_of(state)
        if power is not None:
            return power
        raise RigError(f"rig {self.rig}: {self.where}: unexpected PowerState {state!r}")

    def reset_types(self) -> list[str]:
        return sorted(v.value for v in self.call("reading the reset types", lambda s: s.get_allowed_reset_system_values()))

    def power(self, action: str) -> None:
        allowed = self.reset_types()
        kind = next((k for k in RESETS[action] if k in allowed), None)
        if kind is None:
            raise RigError(f"rig {self.rig}: {self.where} offers no ResetType for power {action} "
                           f"({' or '.join(RESETS[action])}); it offers {', '.join(allowed) or 'none'}")
        from sushy import ResetType
        self.call(f"ComputerSystem.Reset {kind}", lambda s: s.reset_system(ResetType(kind)))

    def bootdev(self, device: str) -> None:
        """A one-time boot override (BootSourceOverrideEnabled Once) to a target the system lists."""
        from sushy import BootSource, BootSourceOverrideEnabled
        allowed = sorted(v.value for v in self.call("reading the boot targets",
                                                     lambda s: s.get_allowed_system_boot_source_values()))
        if device not in allowed:
            raise RigError(f"rig {self.rig}: {self.where} does not offer boot target {device}; it offers "
                           f"{', '.join(allowed) or 'none'} (bmc.boot_device)")
        self.call(f"setting a one-time boot from {device}", lambda s: s.set_system_boot_options(
            target=BootSource(device), enabled=BootSourceOverrideEnabled.ONCE))

    # -- facts and logs -------------------------------------------------------
    def mc_info(self) -> str:
        return manager_line(self)

    def server_facts(self) -> dict:
        return server_facts(self)

    def sel_text(self) -> str:
        return log_text(self)

    def sel_clear(self) -> str | None:
        return clear_logs(self)
