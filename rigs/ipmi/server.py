"""The lab server of one IPMI rig, as the rig's protocols (rigs/ipmi/rig.py) share it: its BMC, its
SSH link, its rig file and console log, and the run's state on it (rigs/ipmi/state.py: its
lifecycle and the transitions allowed); powering it, waiting for it to come back, and what a
hang or a crash leaves on it."""
import dataclasses
import os
import pathlib
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from typing import Any

from krig import progress
from krig.errors import GuestCrashed, GuestHung, KrigError, RigError, UsageError
from krig.safeio import printable
from rigs.ipmi.spec import ServerSpec
from krig.paths import cache_dir
from krig.verdict import first_crash
from rigs import lab
from rigs.ipmi import lock as ipmi_lock
from rigs.ipmi.bmc import Sol
from rigs.ipmi.bmcbase import BmcBase
from rigs.netconsole import open_console
from rigs.ipmi.results import ServerResults
from rigs.ipmi.setup import ServerSetup
from rigs.ipmi.ssh import Ssh, SshLost, remote_command
from rigs.ipmi.state import BootPlan, Hang, Power, ServerState
from rigs.protocol import SALVAGE_TIMEOUT, ConsoleProtocol


POLL = 2.0
CRASH_SCAN = 8 << 20         # what of the console since a mark is searched for a crash: its last bytes


class BootTimeout(RigError):
    """The server did not come back: the rig's (or the lab's) problem, never the kernel's verdict."""


class IpmiServer(ServerSetup, ServerResults):
    """The lab server of one IPMI rig as its protocols share it, handed to each of them
    explicitly: the BMC, the SSH link, the rig file, the console log, and the run's state
    (its ServerState, boot id, work directories, results, what was learnt)."""

    def __init__(self, name: str, spec: ServerSpec[Any], where: str, bmc: BmcBase[Any], ssh: Ssh, console: ConsoleProtocol):
        self.name, self.spec, self.where = name, spec, where
        self.bmc, self.ssh, self.console = bmc, ssh, console
        self.rd = spec.remote_dir
        self.wd: str | None = None     # this boot's work directory: <remote_dir>/run.XXXXXX
        self.run_dir: pathlib.Path | None = None
        self.workdir: pathlib.Path | None = None
        self.lock_fd = None
        self.hold: lab.Hold | None = None      # the server held through the lab coordinator
        self.sol: Sol | None = None
        self.facts: dict = {}
        self.boot_id: str | None = None
        self.new_boot()                # results, prefetched, salvaged (rigs/ipmi/results.py)
        self._state = ServerState.UNKNOWN      # changed by become() only
        self.powered = False           # this run powered the server on
        self.power_at_start: Power | None = None
        self.hang: Hang | None = None  # this run's hang (its fact "hang" is written from it)
        self._hanging = False          # on_hang() is handling it
        self.on_timeout: tuple[list, dict] | None = None     # (argv, env): the running command's salvage
        self.needs: dict = {}
        # between the runs of one workflow (rigs/ipmi/warm.py): how the next run boots, the
        # installed system's command line and the firmware facts read before a kexec
        self.next_boot: BootPlan | None = None
        self.installed_cmdline: str | None = None
        self.acpi_rsdp: str | None = None   # the installed system's ACPI root pointer (EFI systab)
        self.firmware: dict = {}
        self.at_boot: dict = {}            # tainted, dmesg_lines after the boot (rigs/ipmi/setup.py)

    # -- per-run state ------------------------------------------------------
    def prepare(self, run_dir, needs):
        self.run_dir = pathlib.Path(run_dir)
        self.console.log_path = self.run_dir / "console.log"
        if self.holding:        # kept from the workflow's previous run: its facts stay in its manifest
            self.facts = {k: self.facts[k] for k in ("lab", "lock") if k in self.facts}
            self.hang, self._hanging, self.on_timeout = None, False, None
        else:
            self.take_lock()
        self.make_local_workdir()
        self.bmc.log_path = self.run_dir / "bmc.log"
        self.ssh.log_path = self.run_dir / "ssh.log"
        self.needs = dict(needs)
        if needs.get("scratch_size") and not self.spec.scratch_dev:
            raise UsageError(f"{self.where}: the reproducer needs a scratch disk; set scratch_dev")
        b = self.spec.bmc
        self.facts.update({"bmc": f"{b.host}:{b.port}", "ssh": self.ssh.target,
                            "boot_mode": self.spec.boot, "scratch_dev": self.spec.scratch_dev})
        self.power_at_start = self.bmc.power_status()   # also proves the login works
        self.facts["power_at_start"] = str(self.power_at_start)
        self.facts["bmc_info"] = self.bmc.mc_info()
        (self.run_dir / "sel-before.txt").write_text(self.bmc.sel_text())
        if b.clear_sel:
            said = self.bmc.sel_clear()         # a line when the account may not: the run goes on
            if said:
                self.facts["log_clearing"] = said
        self.console.log_path.touch()
        if self.spec.console == "sol":          # through the BMC, at the BMC's speed
            self.sol = Sol(self.bmc, self.console.log_path, self.run_dir / "sol.log")
            self.sol.start()
        else:
            self.sol = open_console(self.spec.console, self.bmc, self.run_dir, self.console.log_path,
                                    f"rig {self.name}", self.spec.console_speed)

    def make_local_workdir(self) -> pathlib.Path:
        """This run's work directory on this host (under the cache's work/), removed by end_run()."""
        self.workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"krig-{self.name}-", dir=cache_dir("work")))
        return self.workdir

    def take_lock(self):
        addr = lab.address()
        if addr:
            self.hold = lab.Coordinator(addr).hold(self.name, lab.priority(), ipmi_lock.lock_wait(),
                                                   lab.lease_seconds())
            self.facts["lab"] = self.hold.facts
            return
        b = self.spec.bmc
        self.lock_fd, path = ipmi_lock.take(self.name, b.host, b.port, log=lab.say)
        self.facts["lock"] = str(path)

    @property
    def state(self) -> ServerState:
        return self._state

    def become(self, state: ServerState) -> None:
        """The server is now in `state`: a change rigs/ipmi/state.py allows, else IllegalTransition."""
        self._state = self._state.to(state, self.name)

    def require_up(self, doing: str, crashed: bool = False) -> None:
        """The guard of whatever needs the server up (a command, a pull, a results directory):
        RigError naming the rig, or GuestCrashed when a server that is not up means the kernel
        under test went away (crashed)."""
        if self._state is ServerState.UP:
            return
        said = f"the server is {self._state.value}, not up: {doing}"
        raise GuestCrashed(said) if crashed else RigError(f"rig {self.name}: {said}")

    def answered(self, boot_id: str) -> None:
        """The server answered SSH with boot_id: it is up (booted, kept from the previous run, or
        found on)."""
        self.boot_id = boot_id
        self.become(ServerState.UP)

    def plan_next(self, plan: BootPlan | None) -> None:
        """How the workflow's next run boots this server (rigs/ipmi/warm.py); its fact next_boot."""
        self.next_boot = plan
        if plan is not None:
            self.facts["next_boot"] = plan.said()

    def take_plan(self) -> BootPlan | None:
        """The plan the previous run left, once."""
        plan, self.next_boot = self.next_boot, None
        return plan

    def keep_installed(self, cmdline: str, acpi_rsdp: str | None) -> None:
        """What a kexec from a kernel under test takes from the installed system (rigs/ipmi/warm.py)."""
        self.installed_cmdline, self.acpi_rsdp = cmdline, acpi_rsdp

    def keep_firmware(self, firmware: dict) -> None:
        """The server's firmware and model as the installed system read them; also facts."""
        self.firmware = firmware
        self.facts.update(firmware)

    @contextmanager
    def salvage_on_timeout(self, argv: list | None, env: dict) -> Iterator[None]:
        """While a command runs: argv (with env) is its salvage should it overrun (run_salvage)."""
        self.on_timeout = (argv, env) if argv else None
        try:
            yield
        finally:
            self.on_timeout = None

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
            if self.state is ServerState.UP and self.spec.shutdown_command:
                try:
                    rc, _, _ = self.ssh.run(remote_command(self.spec.shutdown_command, None), timeout=30)
                except (SshLost, subprocess.TimeoutExpired):
                    rc = 0                  # the connection died with the system going down
                self.ssh.stop_master()
            if rc != 0:
                self.bmc.power("soft")      # ACPI power button
            if not self.bmc.wait_power(Power.OFF, self.spec.shutdown_timeout, POLL):
                how = f"hard (still on {self.spec.shutdown_timeout:.0f}s after the soft shutdown)"
        except KrigError as e:
            how = f"hard ({e})"
        if how != "soft":
            self.hard_off()
        self.become(ServerState.OFF)
        self.facts["shutdown"] = how

    def close(self):
        # an interrupted run, or the last one of a workflow: never leave the server running it
        self.end_run(off=self.powered and self.state is not ServerState.OFF)
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        if self.hold is not None:
            self.hold.release()
            self.hold = None

    def end_run(self, off: bool):
        """The run's end on this side: SOL and SSH stopped, the SEL saved, the local work directory
        removed; powered off when off (else kept on and held for the workflow's next run)."""
        self.ssh.stop_master()
        if self.sol is not None:
            self.sol.stop()
            self.facts["sol_restarts" if self.spec.console == "sol" else "console_reconnects"] = \
                self.sol.restarts
            self.sol = None
        if self.holding and not self.bmc.failed:
            try:
                if off:
                    self.hard_off()
            except KrigError as e:
                self.facts["close_error"] = str(e)
            try:
                if self.run_dir is not None:
                    (self.run_dir / "sel.txt").write_text(self.bmc.sel_text())
            except (KrigError, OSError) as e:
                self.facts["sel_error"] = str(e)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    # -- helpers ------------------------------------------------------------
    def hard_off(self):
        self.ssh.stop_master()
        self.bmc.power("off")
        if not self.bmc.wait_power(Power.OFF, 60, POLL):
            raise RigError(f"rig {self.name}: the server is still on 60s after `chassis power off`")
        self.become(ServerState.OFF)

    def console_size(self) -> int:
        try:
            return self.console.log_path.stat().st_size
        except OSError:
            return 0

    def console_crash(self, since: int) -> str | None:
        """The first crash line in the console since the offset `since`, searched in its last
        CRASH_SCAN bytes at most (a console that floods is never read whole)."""
        try:
            with open(self.console.log_path, "rb") as f:
                f.seek(max(since, f.seek(0, os.SEEK_END) - CRASH_SCAN))
                text = f.read(CRASH_SCAN).decode(errors="replace")
        except OSError:
            return None
        return first_crash(text)

    def wait_up(self, timeout: float, what: str, old_boot_id=None):
        """Until SSH answers with a boot_id other than old_boot_id; crash/off/timeout raise."""
        mark, t0 = self.console_size(), time.monotonic()
        with progress.waiting(f"the server {self.name} to answer SSH {what}", timeout):
            for n in range(int(timeout / POLL) + 2):
                left = timeout - (time.monotonic() - t0)
                bid = self.ssh.probe(max(1.0, min(self.spec.ssh.connect_timeout, left)))
                if bid and bid != old_boot_id:
                    self.answered(bid)
                    self.facts["ssh_shared_connection"] = self.ssh.start_master(self.workdir or self.make_local_workdir())
                    return
                crash = self.console_crash(mark)
                if crash:
                    self.become(ServerState.CRASHED)
                    raise GuestCrashed(f"the kernel crashed {what}: {crash}")
                if n % 5 == 4 and self.bmc.power_status() is Power.OFF:
                    self.become(ServerState.CRASHED)
                    raise GuestCrashed(f"the server powered off {what}")
                if time.monotonic() - t0 > timeout:
                    break
                time.sleep(POLL)
        self.become(ServerState.HUNG)
        raise BootTimeout(f"rig {self.name}: the server did not answer SSH within {timeout:.0f}s {what}; "
                          f"krig powers it off: see console.log, then power it on by hand ({self.bmc.POWER_ON}) "
                          f"and log in (docs/lab-server.md: a server that does not come back)")

    def ssh_call(self, what: str, remote: str, timeout: float, **kw) -> tuple[int, bytes, bytes]:
        """ssh.run with the rig's handling of a lost connection and of a timeout."""
        mark = self.console_size()
        try:
            return self.ssh.run(remote, timeout=timeout, what=what, **kw)
        except subprocess.TimeoutExpired:
            self.on_hang(f"{what} did not finish within {timeout:.0f}s")
        except SshLost as e:
            self.diagnose_lost(what, e, mark)

    def diagnose_lost(self, what: str, err: SshLost, mark: int) -> NoReturn:
        """The SSH connection failed: crashed, rebooted, hung, or only the network?"""
        t0 = time.monotonic()
        size, quiet_since = self.console_size(), time.monotonic()
        limit = self.spec.hang_timeout
        for n in range(int(3 * limit / POLL) + 2):
            crash = self.console_crash(mark)
            if crash:
                self.become(ServerState.CRASHED)
                raise GuestCrashed(f"the kernel crashed while {what}: {crash}")
            bid = self.ssh.probe(min(10.0, self.spec.ssh.connect_timeout))
            if bid and bid != self.boot_id:
                self.become(ServerState.CRASHED)
                raise GuestCrashed(f"the server rebooted while {what} (SSH: {err})")
            if bid:
                raise RigError(f"rig {self.name}: the SSH connection to {self.ssh.target} failed while {what} "
                               f"({err}), but the server still answers")
            if n % 5 == 4 and self.bmc.power_status() is Power.OFF:
                self.become(ServerState.CRASHED)
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

    def on_hang(self, reason: str) -> NoReturn:
        """Save what can be saved, NMI, let the console show it, power cycle, wait; raise GuestHung.
        What it did is the Hang on the server (and its fact "hang"), step by step."""
        if self._hanging:
            raise GuestHung(reason)
        self._hanging = True
        self.become(ServerState.HUNG)
        self.hung(hang := Hang(reason))
        try:
            self.run_salvage()
            self.prefetch_results(probe=True)
            mark = self.console_size()
            try:
                if self.bmc.power_status() is Power.ON:
                    self.bmc.power("diag")
                    nmi = f"sent ({self.bmc.NMI})"
                else:
                    nmi = "not sent: the server is off"
            except RigError as e:
                nmi = f"failed: {e}"
            self.hung(hang := dataclasses.replace(hang, nmi=nmi))
            self.console_settles(mark)
            self.hung(hang := dataclasses.replace(hang, console_bytes=self.console_size() - mark))
            if self.spec.recover_after_hang:
                try:
                    old = self.boot_id
                    self.power_cycle()
                    self.wait_up(self.spec.boot_timeout, "after the power cycle", old_boot_id=old)
                    self.hung(dataclasses.replace(hang, recovered=True, how="power cycled and answering SSH again"))
                except KrigError as e:
                    self.hung(dataclasses.replace(hang, recovered=False, how=str(e)))
        finally:
            self._hanging = False
        raise GuestHung(reason)

    def hung(self, hang: Hang) -> None:
        """The hang as far as its handling got; the fact "hang" is written from it."""
        self.hang = hang
        self.facts["hang"] = hang.fact()

    def console_settles(self, mark: int) -> None:
        """After an NMI: until the console printed something and then stayed quiet for 3s, or
        nmi_wait passed."""
        t0 = time.monotonic()
        size, quiet = self.console_size(), time.monotonic()
        for _ in range(int(self.spec.nmi_wait / 0.5) + 2):
            if time.monotonic() - t0 >= self.spec.nmi_wait:
                break
            time.sleep(0.5)
            if self.console_size() != size:
                size, quiet = self.console_size(), time.monotonic()
            elif size > mark and time.monotonic() - quiet > 3:
                break

    def boot_override(self):
        """The one-time boot override (bmc.boot_device) before a power on or cycle: every one of
        them must reach the installed system (boot = "kexec" kexecs from there), also on a server
        whose firmware boots from the network by default."""
        if self.spec.bmc.boot_device:
            self.bmc.bootdev(self.spec.bmc.boot_device)

    def power_on(self):
        self.powered = True
        self.boot_override()
        self.bmc.power("on")

    def power_cycle(self):
        self.powered = True
        self.ssh.stop_master()
        self.boot_override()
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

    def results_dir(self) -> str:
        """This boot's remote results directory, made on first use under the work directory."""
        if self.results is None:
            self.require_up("no results directory")
            if self.wd is None:
                raise RigError(f"rig {self.name}: the server has no work directory (nothing was started); "
                               "no results directory")
            rc, out, err = self.ssh_call("making the results directory",
                                         f"mktemp -d {shlex.quote(self.wd)}/out.XXXXXX", 60)
            path = out.decode(errors="replace").strip()
            if rc != 0 or not path.startswith(self.wd + "/out."):
                raise RigError(f"rig {self.name}: cannot make a results directory in {self.wd}: "
                               f"{printable(err.decode(errors='replace').strip()[-200:], 200)}")
            self.results = path
        return self.results
