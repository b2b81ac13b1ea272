"""A server's BMC through `ipmitool -I lanplus`: power, boot device, SEL, NMI, SOL.

The password goes to ipmitool in its environment (IPMI_PASSWORD with -E),
never in argv. Every command is bounded in time and retried a bounded number
of times; a rejected login is not retried (BMCs lock accounts out).
"""
import os
import pathlib
import re
import shutil
import subprocess
import threading
import time

from krig.errors import RigError
from krig.paths import dies_with_parent
from rigs.ipmi.bmcbase import BmcAuthError, BmcBase
from rigs.ipmi.spec import IpmiSpecBmc
from rigs.ipmi.state import Power
from rigs.protocol import CONSOLE_CAP
from rigs.procs import drain, log_line, stop_group

IPMITOOL = "ipmitool"
SOL_RESTARTS = 20
OUT_CAPS = (16 << 20, 1 << 20)     # what krig reads of ipmitool's stdout and stderr (a BMC's answers)

# ipmitool -v stderr -> what went wrong (first match wins).
_AUTH = [
    (re.compile(r"RAKP 2 HMAC is invalid|invalid integrity check value|RAKP 4 message has invalid"),
     "wrong password"),
    (re.compile(r"unauthorized name|Unknown user|invalid user name", re.I), "unknown user"),
    (re.compile(r"Insufficient privilege level|requested maximum privilege level", re.I),
     "the user lacks the privilege asked for"),  # = PRIVILEGE: not a refused login
    (re.compile(r"invalid authentication algorithm|no matching cipher suite|invalid confidentiality|"
                r"invalid integrity algorithm", re.I), "cipher suite not supported by the BMC"),
]
PRIVILEGE = "the user lacks the privilege asked for"
_NO_ANSWER = re.compile(r"Get Auth Capabilities error|Error issuing Get Channel Authentication|"
                        r"No response from remote controller|Unable to establish (IPMI v2 / RMCP\+|LAN) session|"
                        r"Error sending|Address lookup|Connection refused", re.I)
_CHATTER = ("Loading IANA", "Running Get VSO", "Discovered IPMB", "Invalid completion code received",
            "Get HPM.x", "tcgetattr", "Err in cmd get sensor", "Get SDR ", "SDRR successfully")


class Bmc(BmcBase[IpmiSpecBmc]):
    POWER_ON = "ipmitool ... chassis power on"
    NMI = "chassis power diag"

    def __init__(self, rig: str, cfg: IpmiSpecBmc, password: str, log_path: pathlib.Path | None = None):
        """cfg: the rig file's [bmc] table, checked (rigs/ipmi/spec.py BMC)."""
        super().__init__(rig, cfg, password, log_path)
        self.where = f"BMC {cfg.host}:{cfg.port}"

    # -- plumbing -----------------------------------------------------------
    def argv(self, *args, verbose=True) -> list:
        c = self.cfg
        # The password: ipmitool reads the rig's 0600 file itself (-f), or IPMI_PASSWORD (-E).
        pw = ["-f", c.password_file] if c.password_file else ["-E"]
        a = [IPMITOOL, "-I", "lanplus", "-H", c.host, "-p", str(c.port), "-U", c.user, *pw,
             "-C", str(c.cipher_suite), "-L", c.privilege, "-N", str(c.timeout), "-R", "1"]
        return a + (["-v"] if verbose else []) + list(args)

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("IPMI_", "IPMITOOL_"))}
        if not self.cfg.password_file:
            env["IPMI_PASSWORD"] = self._password
        return env

    def classify(self, err: str) -> str | None:
        for rx, what in _AUTH:
            if rx.search(err):
                return what
        return None

    def run(self, *args, retries: int | None = None, check: bool = True) -> str:
        """One ipmitool command; returns stdout. Raises RigError with one clear line.

        check=False returns stdout even when the BMC refused the command
        (but a rejected login or a BMC that does not answer still raise).
        """
        if self.failed == "login refused":      # never retry a refused login: BMCs lock accounts out
            raise BmcAuthError(self._auth_message)
        if not shutil.which(IPMITOOL):
            raise RigError(f"rig {self.rig}: {IPMITOOL} is not installed (apt-get install ipmitool)")
        tries = retries or self.cfg.retries
        last = "no answer"
        for attempt in range(1, tries + 1):
            t0 = time.monotonic()
            try:
                p = subprocess.Popen(dies_with_parent(self.argv(*args)), env=self.env(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
                b_out, b_err, _ = drain(p, self.cfg.timeout * 4 + 10, OUT_CAPS,
                                        f"rig {self.rig}: {self.where}: `ipmitool {' '.join(args)}`")
                out, err, rc = b_out.decode(errors="replace"), self._clean(b_err.decode(errors="replace")), p.returncode
            except subprocess.TimeoutExpired:
                out, err, rc = "", "ipmitool did not finish in time", -1
            ok = rc == 0 and not re.search(r"\bfailed\b", err, re.I)
            self._log(f"ipmitool {' '.join(args)} -> rc {rc} in {time.monotonic() - t0:.1f}s"
                      + ("" if ok else f": {self._summary(err)}"))
            if ok:
                self.failed = None
                return out
            why = self.classify(err)
            if why == PRIVILEGE:
                raise RigError(f"rig {self.rig}: {self.where}: `ipmitool {' '.join(args)}`: user "
                               f"{self.cfg.user!r} lacks the privilege (set bmc.privilege or the user's role)")
            if why is not None:
                self.failed = "login refused"
                self._auth_message = (f"rig {self.rig}: {self.where} rejected user {self.cfg.user!r}: {why} "
                                      f"(cipher suite {self.cfg.cipher_suite}, privilege {self.cfg.privilege})")
                raise BmcAuthError(self._auth_message)
            if rc != 0 and (rc == -1 or _NO_ANSWER.search(err)):
                last = self._summary(err)
                if attempt < tries:
                    time.sleep(min(2 ** attempt, 10))
                continue
            if not check:
                return out
            raise RigError(f"rig {self.rig}: {self.where}: `ipmitool {' '.join(args)}` failed: {self._summary(err)}")
        self.failed = "no answer"
        raise RigError(f"rig {self.rig}: {self.where} did not answer after {tries} tries "
                       f"({self.cfg.timeout}s each): {last}")

    def _clean(self, err: str) -> str:
        """ipmitool -v chatter that is not an error, and the password should it ever appear."""
        return "\n".join(ln for ln in self._scrub(err).splitlines() if ln.strip() and not ln.startswith(_CHATTER))

    @staticmethod
    def _summary(err: str) -> str:
        lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
        return " | ".join(lines[-2:]) or "no message"

    # -- chassis ------------------------------------------------------------
    def power_status(self) -> Power:
        """The server's power, from `chassis power status`."""
        out = self.run("chassis", "power", "status")
        if re.search(r"Chassis Power is on", out):
            return Power.ON
        if re.search(r"Chassis Power is off", out):
            return Power.OFF
        raise RigError(f"rig {self.rig}: {self.where}: unexpected power status {out.strip()!r}")

    def mc_info(self) -> str:
        """The BMC's identity from `mc info`: manufacturer and product, firmware and IPMI versions."""
        try:
            out = self.run("mc", "info", check=False)
        except BmcAuthError:
            raise
        except RigError as e:
            return f"unknown ({e})"
        f = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in out.splitlines()) if v.strip()}
        who = " ".join(x for x in (f.get("Manufacturer Name"), f.get("Product Name")) if x and not x.startswith("Unknown"))
        return (f"{who or 'manufacturer id ' + f.get('Manufacturer ID', '?')}, firmware "
                f"{f.get('Firmware Revision', '?')}, IPMI {f.get('IPMI Version', '?')}")

    def power(self, action: str) -> None:
        assert action in ("on", "off", "cycle", "reset", "soft", "diag")
        self.run("chassis", "power", action)

    def bootdev(self, device: str) -> None:
        self.run("chassis", "bootdev", device)

    # -- SEL ----------------------------------------------------------------
    def sel_text(self) -> str:
        info = self.run("sel", "info", check=False)
        try:
            entries = self.run("sel", "elist", check=False)
        except RigError:
            entries = self.run("sel", "list", check=False)
        return f"{info.rstrip()}\n\n{entries.rstrip()}\n"

    def sel_clear(self) -> str | None:
        """Clear the SEL (bmc.clear_sel = true); the line saying why not when the BMC refuses it to
        this account (some keep Clear SEL to ADMINISTRATOR): a fact of the run, never its end. A
        refused login or a BMC that does not answer still raise."""
        try:
            self.run("sel", "clear")
        except BmcAuthError:
            raise
        except RigError as e:
            if self.failed == "no answer":
                raise
            said = (f"not cleared: {str(e).split(': ', 1)[-1]}; the SEL stays (set bmc.clear_sel = false, or let "
                    f"user {self.cfg.user!r} clear it)")
            self._log(f"log clearing {said}")
            return said
        return None


class Sol:
    """`ipmitool sol activate` writing the console to log_path for the whole run.

    A thread restarts the session if the BMC drops it (bounded); stop()
    leaves with the `~.` escape, kills what remains and deactivates the
    payload on the BMC so the next run can take the console. ipmitool's output
    goes through krig (a thread a session) into log_path, at most CONSOLE_CAP
    bytes a run (rigs/protocol.py): past it krig ends the session, sol.log
    says so and `capped` is set.
    """

    def __init__(self, bmc: Bmc, log_path: pathlib.Path, notes_path: pathlib.Path):
        self.bmc = bmc
        self.log_path = log_path
        self.notes_path = notes_path
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.capped = False
        self._want = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _note(self, line: str):
        log_line(self.notes_path, f"krig: {line}")

    def _spawn(self):
        err = open(self.notes_path, "ab")
        try:
            self.proc = subprocess.Popen(dies_with_parent(self.bmc.argv("sol", "activate", verbose=False)),
                                         env=self.bmc.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, start_new_session=True)
        finally:
            err.close()
        threading.Thread(target=self._keep, args=(self.proc,), name="krig-sol-log", daemon=True).start()

    def _keep(self, proc: subprocess.Popen):
        """The session's console into log_path as it comes, up to CONSOLE_CAP for the run."""
        cap, out = CONSOLE_CAP, proc.stdout
        assert out is not None                  # started with stdout=PIPE (_spawn)
        with open(self.log_path, "ab", buffering=0) as log, out:
            while b := os.read(out.fileno(), 65536):
                if log.tell() + len(b) > cap:
                    log.write(b[:max(0, cap - log.tell())])
                    with self._lock:
                        self.capped, self._want = True, False
                    self._note(f"the console went past {cap >> 20} MiB, the most krig keeps of it; "
                               "krig ended the SOL session")
                    stop_group(proc, 2)
                    return
                log.write(b)

    def start(self):
        try:
            self.bmc.run("sol", "deactivate", retries=1, check=False)   # a stale session blocks activate
        except RigError as e:
            if isinstance(e, BmcAuthError):
                raise
        with self._lock:
            self._want = True
            self._spawn()
        self._note("SOL session started")
        self._thread = threading.Thread(target=self._watch, name="krig-sol", daemon=True)
        self._thread.start()

    def _watch(self):
        while True:
            time.sleep(1.0)
            with self._lock:
                if not self._want:
                    return
                if self.proc.poll() is None:
                    continue
                if self.restarts >= SOL_RESTARTS:
                    self._note(f"SOL session ended (rc {self.proc.returncode}); gave up after {self.restarts} restarts")
                    self._want = False
                    return
                self.restarts += 1
                self._note(f"SOL session ended (rc {self.proc.returncode}); restarting ({self.restarts})")
            try:
                self.bmc.run("sol", "deactivate", retries=1, check=False)
            except RigError:
                pass
            time.sleep(min(2 * self.restarts, 10))
            with self._lock:
                if self._want:
                    self._spawn()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        with self._lock:
            self._want = False
            p = self.proc
        if p is None:
            return
        if p.poll() is None:
            try:
                p.stdin.write(b"\r~.")
                p.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                stop_group(p)
        try:
            p.stdin.close()
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(15)
        try:
            if not self.bmc.failed:
                self.bmc.run("sol", "deactivate", retries=1, check=False)
        except RigError:
            pass
        self._note(f"SOL session stopped ({self.restarts} restarts)")
        self.proc = None
