"""The IPMI rig: a real server driven through its BMC, commands and files over SSH.

Power, boot device, SEL and NMI = `ipmitool -I lanplus` (rigs/ipmi_bmc.py);
console = Serial over LAN captured to console.log for the whole run; command
and files = OpenSSH with the rig's own known_hosts (rigs/ipmi_ssh.py); boot =
a power cycle into the installed kernel, or kexec into the kernel under test.
A hang (workload timeout, or neither console output nor an SSH answer for
hang_timeout) sends an NMI, waits for the console, power cycles the server and
waits for it to come back. One krig process per server: an fcntl lock
(rigs/ipmi_lock.py), or with KRIG_LAB_COORDINATOR a labgrid reservation, lock
and lease (rigs/lab.py). The rig file format is in rigs/ipmi_spec.py and
rigs/examples/lab-server.toml; what is checked on a server after each boot is in
rigs/ipmi_server_setup.py.
"""
import os
import pathlib
import shlex
import shutil
import subprocess
import tempfile
import time

from krig import safeio
from krig.errors import GuestCrashed, GuestHung, KrigError, RigError, UsageError
from krig.paths import cache_dir
from krig.verdict import first_crash
from . import ipmi_lock, lab
from .ipmi_bmc import Bmc, Sol
from .ipmi_pull import Refused, move_into, pull_results
from .ipmi_server_setup import ServerSetup
from .ipmi_spec import validate_spec
from .ipmi_ssh import Ssh, SshLost, remote_command
from .protocol import (OUTPUT_CAP, SALVAGE_TIMEOUT, BootProtocol, CommandProtocol, CommandResult, ConsoleProtocol,
                       FilesProtocol, PowerProtocol, Rig)

POLL = 2.0


class BootTimeout(RigError):
    """The server did not come back: the rig's (or the lab's) problem, never the kernel's verdict."""


class IpmiServer(ServerSetup):
    """The lab server of one IPMI rig as its protocols share it, handed to each of them
    explicitly: the BMC, the SSH link, the rig file, the console log, and the run's state
    (up/hung/crashed/off, boot id, work directories, results, what was learnt)."""

    def __init__(self, name: str, spec: dict, where: str, bmc: Bmc, ssh: Ssh, console: "_Console"):
        self.name, self.spec, self.where = name, spec, where
        self.bmc, self.ssh, self.console = bmc, ssh, console
        self.rd = spec["remote_dir"]
        self.wd: str | None = None     # this boot's work directory: <remote_dir>/run.XXXXXX
        self.run_dir: pathlib.Path | None = None
        self.workdir: pathlib.Path | None = None
        self.lock_fd = None
        self.hold: lab.Hold | None = None      # the server held through the lab coordinator
        self.sol: Sol | None = None
        self.facts: dict = {}
        self.boot_id = None
        self.results = None            # remote results dir of this boot
        self.prefetched = None         # (remote, local dir, Refused or None) pulled before a power off
        self.salvaged = False
        self.state = "unknown"         # up | hung | crashed | off | unknown
        self.powered = False           # this run powered the server on
        self.in_hang = False
        self.on_timeout = None         # (argv, env): the salvage of the running command
        self.needs: dict = {}

    # -- per-run state ------------------------------------------------------
    def prepare(self, run_dir, needs):
        self.run_dir = pathlib.Path(run_dir)
        self.console.log_path = self.run_dir / "console.log"
        self.take_lock()
        self.workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"krig-{self.name}-", dir=cache_dir("work")))
        self.bmc.log_path = self.run_dir / "bmc.log"
        self.ssh.log_path = self.run_dir / "ssh.log"
        self.needs = dict(needs)
        if needs.get("scratch_size") and not self.spec["scratch_dev"]:
            raise UsageError(f"{self.where}: the reproducer needs a scratch disk; set scratch_dev")
        b = self.spec["bmc"]
        self.facts.update({"bmc": f"{b['host']}:{b['port']}", "ssh": self.ssh.target,
                            "boot_mode": self.spec["boot"], "scratch_dev": self.spec["scratch_dev"]})
        self.facts["power_at_start"] = self.bmc.power_status()   # also proves the login works
        self.facts["bmc_info"] = self.bmc.mc_info()
        (self.run_dir / "sel-before.txt").write_text(self.bmc.sel_text())
        if b["clear_sel"]:
            self.bmc.sel_clear()
        self.console.log_path.touch()
        self.sol = Sol(self.bmc, self.console.log_path, self.run_dir / "sol.log")
        self.sol.start()

    def take_lock(self):
        addr = lab.address()
        if addr:
            self.hold = lab.Coordinator(addr).hold(self.name, lab.priority(), ipmi_lock.lock_wait(),
                                                   lab.lease_seconds())
            self.facts["lab"] = self.hold.facts
            return
        b = self.spec["bmc"]
        self.lock_fd, path = ipmi_lock.take(self.name, b["host"], b["port"], log=lab.say)
        self.facts["lock"] = str(path)

    @property
    def holding(self) -> bool:
        """This process holds the server (lock file or lab coordinator)."""
        return self.lock_fd is not None or self.hold is not None

    def shutdown(self):
        """Pull the results, then an orderly power off; a hard one if it does not finish in time."""
        if not self.holding:
            return
        self.prefetch_results()
        how = "soft"
        try:
            rc = None
            if self.state == "up" and self.spec["shutdown_command"]:
                try:
                    rc, _, _ = self.ssh.run(remote_command(self.spec["shutdown_command"], None), timeout=30)
                except (SshLost, subprocess.TimeoutExpired):
                    rc = 0                  # the connection died with the system going down
                self.ssh.stop_master()
            if rc != 0:
                self.bmc.power("soft")      # ACPI power button
            if not self.bmc.wait_power("off", self.spec["shutdown_timeout"], POLL):
                how = f"hard (still on {self.spec['shutdown_timeout']:.0f}s after the soft shutdown)"
        except KrigError as e:
            how = f"hard ({e})"
        if how != "soft":
            self.hard_off()
        self.state = "off"
        self.facts["shutdown"] = how

    def close(self):
        self.ssh.stop_master()
        if self.sol is not None:
            self.sol.stop()
            self.facts["sol_restarts"] = self.sol.restarts
            self.sol = None
        if self.holding and not self.bmc.failed:
            try:
                if self.powered and self.state != "off":
                    self.hard_off()        # interrupted run: never leave the server running it
            except KrigError as e:
                self.facts["close_error"] = str(e)
            try:
                if self.run_dir is not None:
                    (self.run_dir / "sel.txt").write_text(self.bmc.sel_text())
            except (KrigError, OSError) as e:
                self.facts["sel_error"] = str(e)
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        if self.hold is not None:
            self.hold.release()
            self.hold = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    # -- helpers ------------------------------------------------------------
    def hard_off(self):
        self.ssh.stop_master()
        self.bmc.power("off")
        if not self.bmc.wait_power("off", 60, POLL):
            raise RigError(f"rig {self.name}: the server is still on 60s after `chassis power off`")
        self.state = "off"

    def console_size(self) -> int:
        try:
            return self.console.log_path.stat().st_size
        except OSError:
            return 0

    def console_crash(self, since: int) -> str | None:
        try:
            with open(self.console.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        return first_crash(text)

    def wait_up(self, timeout: float, what: str, old_boot_id=None):
        """Until SSH answers with a boot_id other than old_boot_id; crash/off/timeout raise."""
        mark, t0 = self.console_size(), time.monotonic()
        for n in range(int(timeout / POLL) + 2):
            left = timeout - (time.monotonic() - t0)
            bid = self.ssh.probe(max(1.0, min(self.spec["ssh"]["connect_timeout"], left)))
            if bid and bid != old_boot_id:
                self.boot_id, self.state = bid, "up"
                self.facts["ssh_shared_connection"] = self.ssh.start_master(self.workdir)
                return
            crash = self.console_crash(mark)
            if crash:
                self.state = "crashed"
                raise GuestCrashed(f"the kernel crashed {what}: {crash}")
            if n % 5 == 4 and self.bmc.power_status() == "off":
                self.state = "crashed"
                raise GuestCrashed(f"the server powered off {what}")
            if time.monotonic() - t0 > timeout:
                break
            time.sleep(POLL)
        self.state = "hung"
        raise BootTimeout(f"rig {self.name}: the server did not answer SSH within {timeout:.0f}s {what}; "
                          f"krig powers it off: see console.log, then power it on by hand (ipmitool ... "
                          f"chassis power on) and log in (docs/lab-server.md: a server that does not come back)")

    def ssh_call(self, what: str, remote: str, timeout: float, **kw):
        """ssh.run with the rig's handling of a lost connection and of a timeout."""
        mark = self.console_size()
        try:
            return self.ssh.run(remote, timeout=timeout, **kw)
        except subprocess.TimeoutExpired:
            self.on_hang(f"{what} did not finish within {timeout:.0f}s")
        except SshLost as e:
            self.diagnose_lost(what, e, mark)

    def diagnose_lost(self, what: str, err: SshLost, mark: int):
        """The SSH connection failed: crashed, rebooted, hung, or only the network?"""
        t0 = time.monotonic()
        size, quiet_since = self.console_size(), time.monotonic()
        limit = self.spec["hang_timeout"]
        for n in range(int(3 * limit / POLL) + 2):
            crash = self.console_crash(mark)
            if crash:
                self.state = "crashed"
                raise GuestCrashed(f"the kernel crashed while {what}: {crash}")
            bid = self.ssh.probe(min(10.0, self.spec["ssh"]["connect_timeout"]))
            if bid and bid != self.boot_id:
                self.state = "crashed"
                raise GuestCrashed(f"the server rebooted while {what} (SSH: {err})")
            if bid:
                raise RigError(f"rig {self.name}: the SSH connection to {self.ssh.target} failed while {what} "
                               f"({err}), but the server still answers")
            if n % 5 == 4 and self.bmc.power_status() == "off":
                self.state = "crashed"
                raise GuestCrashed(f"the server powered off while {what}")
            now = time.monotonic()
            if self.console_size() != size:
                size, quiet_since = self.console_size(), now
            if now - quiet_since > limit:
                self.on_hang(f"no SSH answer and no console output for {limit:.0f}s while {what}")
            if now - t0 > 3 * limit:
                break
            time.sleep(POLL)
        self.on_hang(f"no SSH answer for {3 * limit:.0f}s while {what} (the console kept printing)")

    def on_hang(self, reason: str):
        """Save what can be saved, NMI, let the console show it, power cycle, wait; raise GuestHung."""
        if self.in_hang:
            raise GuestHung(reason)
        self.in_hang = True
        self.state = "hung"
        hang = self.facts.setdefault("hang", {})
        hang["reason"] = reason
        try:
            self.run_salvage()
            self.prefetch_results(probe=True)
            mark = self.console_size()
            try:
                if self.bmc.power_status() == "on":
                    self.bmc.power("diag")
                    hang["nmi"] = "sent (chassis power diag)"
                else:
                    hang["nmi"] = "not sent: the server is off"
            except RigError as e:
                hang["nmi"] = f"failed: {e}"
            t0 = time.monotonic()
            size, quiet = self.console_size(), time.monotonic()
            for _ in range(int(self.spec["nmi_wait"] / 0.5) + 2):     # until the console settles
                if time.monotonic() - t0 >= self.spec["nmi_wait"]:
                    break
                time.sleep(0.5)
                if self.console_size() != size:
                    size, quiet = self.console_size(), time.monotonic()
                elif size > mark and time.monotonic() - quiet > 3:
                    break
            hang["console_bytes_after_nmi"] = self.console_size() - mark
            if self.spec["recover_after_hang"]:
                try:
                    old = self.boot_id
                    self.power_cycle()
                    self.wait_up(self.spec["boot_timeout"], "after the power cycle", old_boot_id=old)
                    hang["recovered"] = "yes: power cycled and answering SSH again"
                except KrigError as e:
                    hang["recovered"] = f"no: {e}"
        finally:
            self.in_hang = False
        raise GuestHung(reason)

    def power_cycle(self):
        self.powered = True
        self.ssh.stop_master()
        try:
            self.bmc.power("cycle")
        except RigError:
            self.hard_off()
            self.bmc.power("on")

    def run_salvage(self):
        """The overrunning command's salvage argv, over a second SSH connection (bounded)."""
        if self.on_timeout is None:
            return
        argv, env = self.on_timeout
        self.on_timeout = None
        t0 = time.monotonic()
        try:
            rc, _, _ = self.ssh.run(remote_command(argv, env, cwd=f"{self.wd}/home"), timeout=SALVAGE_TIMEOUT,
                                    connect_timeout=10)
            self.facts["salvage"] = f"ran in {time.monotonic() - t0:.1f}s, exit {rc}"
        except subprocess.TimeoutExpired:
            self.facts["salvage"] = f"no answer within {SALVAGE_TIMEOUT}s (the server is stuck too)"
        except (SshLost, KrigError) as e:
            self.facts["salvage"] = f"not possible: {e}"

    def prefetch_results(self, probe: bool = False):
        """Pull this run's remote results before the server goes off (best effort, bounded)."""
        if self.salvaged or self.results is None or self.state not in ("up", "hung"):
            return
        self.salvaged = True
        if probe and self.ssh.probe(10) != self.boot_id:
            self.facts["results_pull"] = "not possible: the server does not answer SSH"
            return
        dest = pathlib.Path(tempfile.mkdtemp(prefix="prefetch.", dir=self.workdir))
        try:
            self.pull_over_ssh(self.results, dest, 60 if probe else self.spec["pull_timeout"])
            self.prefetched = (self.results, dest, None)
            self.facts["results_pull"] = "pulled before the power off"
        except Refused as e:
            self.prefetched = (self.results, dest, e)       # the files it took are kept; pull() says why
            self.facts["results_pull"] = "refused entries (pull_error)"
        except (KrigError, SshLost, subprocess.TimeoutExpired) as e:
            self.facts["results_pull"] = f"failed: {e or type(e).__name__}"

    def pull_over_ssh(self, remote: str, local: pathlib.Path, timeout: float):
        """The directory remote into local: only regular files and directories (rigs/ipmi_pull.py)."""
        local.mkdir(parents=True, exist_ok=True)
        pull_results(self.ssh, remote, local, timeout, self.spec["pull_max_size"], self.spec["pull_max_file_size"])


class IpmiRig(Rig):
    kind = "ipmi"
    takes_path = True       # rigs.load_rig passes the rig file's path for messages

    def __init__(self, name: str, spec: dict, path=None):
        self.where = str(path) if path else f"rigs/{name}.toml"
        norm, password = validate_spec(name, spec, self.where)
        super().__init__(name, norm)
        self.console = _Console()
        self.server = s = IpmiServer(name, norm, self.where, Bmc(name, norm["bmc"], password),
                                     Ssh(name, norm["ssh"]), self.console)
        self.bmc, self.ssh = s.bmc, s.ssh
        self.power = _Power(s)
        self.command = _Command(s)
        self.files = _Files(s)
        self.boot = _Boot(s, self.power)

    def prepare(self, run_dir, kernel, needs):
        self.server.prepare(run_dir, needs)

    def scratch_env(self):
        return {"KRIG_SCRATCH_DEV": self.spec["scratch_dev"]} if self.spec["scratch_dev"] else {}

    def facts(self):
        return self.server.facts    # the live dict: facts learnt while shutting down still reach the manifest

    def shutdown(self):
        """Pull the results, then an orderly power off; a hard one if it does not finish in time."""
        self.server.shutdown()

    def close(self):
        self.server.close()


class _Power(PowerProtocol):
    def __init__(self, server: IpmiServer):
        self.server = server

    def on(self):
        self.server.powered = True
        self.server.bmc.power("on")

    def off(self):
        r = self.server
        if not r.holding:               # never touch a server this process does not hold
            return
        if not r.powered and r.wd is None and r.facts.get("power_at_start") == "on":
            # Found running, and nothing was started on it (a preflight or the host key
            # stopped the run): left as it was found, up and ready for the next run.
            r.facts["power"] = "left on as found: this run neither powered it on nor started anything"
            return
        r.prefetch_results(probe=r.state != "up")
        r.hard_off()

    def cycle(self):
        self.server.power_cycle()

    def status(self):
        return self.server.bmc.power_status()


class _Console(ConsoleProtocol):
    def __init__(self):
        self.log_path = pathlib.Path("/nonexistent")


class _Boot(BootProtocol):
    def __init__(self, server: IpmiServer, power: _Power):
        self.server, self.power = server, power

    def boot(self, kernel, cmdline, timeout=None):
        r = self.server
        timeout = timeout or r.spec["boot_timeout"]
        r.results, r.prefetched, r.salvaged = None, None, False
        t0 = time.monotonic()
        try:
            if r.spec["boot"] == "kexec":
                from .ipmi_kexec import kexec_boot
                kexec_boot(r, self.power, kernel, cmdline, timeout)
            else:
                if r.spec["bmc"]["boot_device"]:
                    r.bmc.bootdev(r.spec["bmc"]["boot_device"])
                if r.bmc.power_status() == "on":
                    r.power_cycle()
                else:
                    self.power.on()
                r.wait_up(timeout, "after power on")
            r.after_boot()
        except BootTimeout as e:
            r.facts["boot_timeout"] = str(e)
            raise
        except GuestHung as e:
            if r.in_hang or "hang" in r.facts:
                raise
            r.on_hang(str(e))
        r.facts["boot_seconds"] = round(time.monotonic() - t0, 1)


class _Command(CommandProtocol):
    def __init__(self, server: IpmiServer):
        self.server = server
        self.n = 0

    def run(self, argv, env=None, timeout=60, salvage=None):
        r = self.server
        if r.state != "up":
            raise GuestCrashed(f"the server is not up ({r.state})")
        n = self.n
        self.n += 1
        home = f"{r.wd}/home"
        env = {"HOME": home, **(env or {})}
        remote = remote_command(argv, env, cwd=home, rc_file=f"{r.wd}/rc.{n}")
        out_p, err_p = r.workdir / f"{n}.out", r.workdir / f"{n}.err"
        t0 = time.monotonic()
        r.on_timeout = (salvage, env) if salvage else None
        try:
            with open(out_p, "wb") as fo, open(err_p, "wb") as fe:
                rc, _, _ = r.ssh_call(f"running {' '.join(map(str, argv))}", remote, timeout, stdout=fo, stderr=fe,
                                  rc_file=f"{r.wd}/rc.{n}")
        finally:
            r.on_timeout = None
        return CommandResult(list(argv), rc, self._read(out_p), self._read(err_p), time.monotonic() - t0)

    def _read(self, path: pathlib.Path) -> bytes:
        """What the server wrote to a command's stdout or stderr (a file of krig's work directory):
        at most OUTPUT_CAP bytes; more is the rig's one-line error, never read into memory."""
        try:
            return safeio.read_bytes(path.parent, path.name, OUTPUT_CAP)
        except KrigError as e:
            stream = "stdout" if path.suffix == ".out" else "stderr"
            raise RigError(f"rig {self.server.name}: the server's {stream} of a command: "
                           f"{str(e).rsplit(': ', 1)[-1]}") from None

    def partial_output(self) -> tuple[bytes, bytes]:
        """stdout/stderr of the last command so far (kept when it hangs)."""
        d = self.server.workdir
        if d is None:
            return b"", b""

        def read(p):
            try:
                return self._read(p) if p.exists() else b""
            except RigError as e:
                return f"krig: {e}\n".encode()
        return read(d / f"{self.n - 1}.out"), read(d / f"{self.n - 1}.err")


class _Files(FilesProtocol):
    def __init__(self, server: IpmiServer):
        self.server = server

    def stage(self, local):
        """Copy reproducers/ (scripts and their static bin/ helpers) to <remote_dir>/tree."""
        r = self.server
        dest = shlex.quote(f"{r.wd}/tree")
        producer = ["tar", "-C", str(pathlib.Path(local).resolve()), "--exclude=__pycache__",
                    "--exclude=*.pyc", "-czf", "-", "reproducers"]
        mark = r.console_size()
        try:
            r.ssh.pipe_to(f"rm -rf {dest} && mkdir -p {dest} && tar -xzf - -C {dest}", producer,
                          r.spec["pull_timeout"])
        except subprocess.TimeoutExpired:
            r.on_hang(f"copying reproducers/ did not finish within {r.spec['pull_timeout']:.0f}s")
        except SshLost as e:
            r.diagnose_lost("copying reproducers/", e, mark)
        return f"{r.wd}/tree"

    def results_dir(self):
        r = self.server
        if r.results is None:
            if r.state != "up" or r.wd is None:
                why = "is not up" if r.state != "up" else "has no work directory (nothing was started)"
                raise RigError(f"rig {r.name}: the server {why}; no results directory")
            rc, out, err = r.ssh_call("making the results directory",
                                  f"mktemp -d {shlex.quote(r.wd)}/out.XXXXXX", 60)
            path = out.decode(errors="replace").strip()
            if rc != 0 or not path.startswith(r.wd + "/out."):
                raise RigError(f"rig {r.name}: cannot make a results directory in {r.wd}: "
                               f"{err.decode(errors='replace').strip()[-200:]}")
            r.results = path
        return r.results

    def pull(self, remote, local):
        r = self.server
        local = pathlib.Path(local)
        local.mkdir(parents=True, exist_ok=True)
        if r.prefetched and r.prefetched[0] == remote:
            _, src, refused = r.prefetched
            r.prefetched = None
            try:
                move_into(src, local, f"rig {r.name}: the server's results")
            except Refused:
                if refused is None:
                    raise
            if refused is not None:
                raise refused
            return
        if r.state != "up":
            raise RigError(f"rig {r.name}: the server is {r.state}; {remote} was not pulled")
        try:
            r.pull_over_ssh(remote, local, r.spec["pull_timeout"])
        except Refused:
            if remote == r.results:
                r.salvaged = True      # what it holds was taken; shutdown() does not pull it again
                r.facts["results_pull"] = "refused entries (pull_error)"
            raise
        except (SshLost, subprocess.TimeoutExpired) as e:
            raise RigError(f"rig {r.name}: pulling {remote} failed: {e or type(e).__name__}") from None
        if remote == r.results:
            r.salvaged = True          # shutdown() need not pull them again
            r.facts["results_pull"] = "pulled before the power off"
