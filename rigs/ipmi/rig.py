"""The IPMI rig: a real server driven through its BMC, commands and files over SSH.

Power, boot device, SEL and NMI = `ipmitool -I lanplus` (rigs/ipmi/bmc.py);
console = Serial over LAN captured to console.log for the whole run; command
and files = OpenSSH with the rig's own known_hosts (rigs/ipmi/ssh.py); boot =
a power cycle into the installed kernel, or kexec into the kernel under test.
A hang (workload timeout, or neither console output nor an SSH answer for
hang_timeout) sends an NMI, waits for the console, power cycles the server and
waits for it to come back. One krig process per server: an fcntl lock
(rigs/ipmi/lock.py), or with KRIG_LAB_COORDINATOR a labgrid reservation, lock
and lease (rigs/lab.py). The rig file format is in rigs/ipmi/spec.py and
rigs/examples/lab-server.toml; the server as the protocols share it (its state,
power, waits) in rigs/ipmi/server.py; what is checked on a server after each boot in
rigs/ipmi/setup.py.
"""
import os
import pathlib
import shlex
import subprocess
import time
from collections.abc import Callable
from typing import Any

from krig import safeio
from krig.errors import GuestHung, KrigError, RigError
from rigs.ipmi.bmc import Bmc
from rigs.ipmi.bmcbase import BmcBase
from rigs.ipmi.drivers import ServerDrivers
from rigs.ipmi.pull import Refused, move_into
from rigs.ipmi.server import BootTimeout, IpmiServer
from rigs.ipmi.spec import ServerSpec, validate_spec
from rigs.ipmi.ssh import Ssh, SshLost, remote_command
from rigs.ipmi.state import Power, ServerState
from rigs.ipmi.warm import park
from rigs.protocol import (OUTPUT_CAP, BootProtocol, CommandProtocol, CommandResult, ConsoleProtocol,
                       FilesProtocol, PowerProtocol, Rig)


class IpmiRig(Rig):
    kind = "ipmi"
    spec: ServerSpec[Any]       # the checked rig file: an IpmiSpec, a RedfishSpec for the Redfish driver
    takes_path = True       # rigs.load_rig passes the rig file's path for messages
    # the rig file's checks, the BMC and the server: the Redfish driver's own (rigs/redfish/rig.py)
    validate: Callable[[str, dict, str | None], tuple[ServerSpec[Any], str]]
    bmc_class: Callable[..., BmcBase[Any]]
    validate, bmc_class, server_class = staticmethod(validate_spec), Bmc, IpmiServer

    def __init__(self, name: str, spec: dict, path=None):
        self.where = str(path) if path else f"rigs/{name}.toml"
        norm, password = self.validate(name, spec, self.where)
        super().__init__(name, norm)
        self.console = _Console()
        self.server = s = self.server_class(name, norm, self.where, self.bmc_class(name, norm.bmc, password),
                                            Ssh(name, norm.ssh), self.console)
        self.bmc, self.ssh = s.bmc, s.ssh
        self.power = _Power(s)
        self.command = _Command(s)
        self.files = _Files(s)
        self.boot = _Boot(s, self.power)

    def prepare(self, run_dir, kernel, needs):
        self.server.prepare(run_dir, needs)

    def installed_drivers(self):
        return ServerDrivers(self)      # its installed system's, over SSH (rigs/ipmi/drivers.py)

    def boots_installed_only(self):
        if self.spec.boot != "installed":
            return None
        return (f'{self.where} says boot = "installed": it powers the server on into the kernel installed '
                'there (boot = "kexec" boots the kernel asked)')

    def boot_timeout(self) -> float:
        return self.spec.boot_timeout

    def bmc_address(self) -> tuple[str, int]:
        return self.spec.bmc.host, self.spec.bmc.port

    def scratch_env(self):
        return {"KRIG_SCRATCH_DEV": self.spec.scratch_dev} if self.spec.scratch_dev else {}

    def emulator_pid(self):
        """A simulated server's emulator on this host (the rig file's emulator_pidfile: `krig lab sim`
        writes it), whose speed the host's other load sets; None for a real server. The file is the
        emulator's (it runs unprivileged): read through krig/safeio.py, no link followed, regular
        file only, 32 bytes at most."""
        path = self.spec.emulator_pidfile
        if not path:
            return None
        try:
            pid = int(safeio.read_bytes(*safeio.split(path), cap=32).strip())
        except (KrigError, OSError, ValueError):
            return None
        return pid if pid > 0 and os.path.isdir(f"/proc/{pid}") else None

    def facts(self):
        return self.server.facts    # the live dict: facts learnt while shutting down still reach the manifest

    def shutdown(self):
        """Pull the results, then an orderly power off; a hard one if it does not finish in time."""
        self.server.shutdown()

    def keep_for_next(self, cold):
        return park(self.server, cold)

    def close(self):
        self.server.close()


class _Power(PowerProtocol):
    def __init__(self, server: IpmiServer):
        self.server = server

    def on(self):
        self.server.power_on()          # the boot override (bmc.boot_device) first

    def off(self):
        r = self.server
        if not r.holding:               # never touch a server this process does not hold
            return
        if not r.powered and r.wd is None and r.power_at_start is Power.ON:
            # Found running, and nothing was started on it (a preflight or the host key
            # stopped the run): left as it was found, up and ready for the next run.
            r.facts["power"] = "left on as found: this run neither powered it on nor started anything"
            return
        r.prefetch_results(probe=r.state is not ServerState.UP)
        r.hard_off()

    def cycle(self):
        self.server.power_cycle()

    def status(self):
        return self.server.bmc.power_status().value     # the protocol's "on" or "off"


class _Console(ConsoleProtocol):
    def __init__(self):
        self.log_path = pathlib.Path("/nonexistent")


class _Boot(BootProtocol):
    def __init__(self, server: IpmiServer, power: _Power):
        self.server, self.power = server, power

    def boot(self, kernel, cmdline, timeout=None, reach=None):
        r = self.server
        timeout = timeout or r.spec.boot_timeout
        r.new_boot()
        t0 = time.monotonic()
        try:
            if r.spec.boot == "kexec":
                from rigs.ipmi.kexec import kexec_boot
                kexec_boot(r, self.power, kernel, cmdline, timeout, reach)
            else:                       # power on and cycle set the boot override (bmc.boot_device)
                if r.bmc.power_status() is Power.ON:
                    r.power_cycle()
                    r.facts["booted_by"] = "cold: power cycle"
                else:
                    self.power.on()
                    r.facts["booted_by"] = "cold: power on"
                r.wait_up(timeout, "after power on")
            r.after_boot()
        except BootTimeout as e:
            r.facts["boot_timeout"] = str(e)
            raise
        except GuestHung as e:
            if r.hang is not None:     # handled already (on_hang raised it), or a second one
                raise
            r.on_hang(str(e))
        r.facts["boot_seconds"] = round(time.monotonic() - t0, 1)

    def bound(self, timeout=None):
        """The most a boot may take, its progress line's "at most": a kexec boot's steps summed."""
        r = self.server
        if r.spec.boot == "kexec":
            from rigs.ipmi.kexec import boot_bound
            return boot_bound(r.spec, timeout)
        return timeout or r.spec.boot_timeout


class _Command(CommandProtocol):
    def __init__(self, server: IpmiServer):
        self.server = server
        self.n = 0

    def run(self, argv, env=None, timeout=60, salvage=None):
        r = self.server
        r.require_up(f"running {' '.join(map(str, argv))}", crashed=True)
        n = self.n
        self.n += 1
        home = f"{r.wd}/home"
        env = {"HOME": home, **(env or {})}
        remote = remote_command(argv, env, cwd=home, rc_file=f"{r.wd}/rc.{n}")
        out_p, err_p = r.workdir / f"{n}.out", r.workdir / f"{n}.err"
        t0 = time.monotonic()
        with r.salvage_on_timeout(salvage, env), open(out_p, "wb") as fo, open(err_p, "wb") as fe:
            rc, _, _ = r.ssh_call(f"running {' '.join(map(str, argv))}", remote, timeout, stdout=fo, stderr=fe,
                                  rc_file=f"{r.wd}/rc.{n}", caps=(OUTPUT_CAP, OUTPUT_CAP))
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
                          r.spec.pull_timeout)
        except subprocess.TimeoutExpired:
            r.on_hang(f"copying reproducers/ did not finish within {r.spec.pull_timeout:.0f}s")
        except SshLost as e:
            r.diagnose_lost("copying reproducers/", e, mark)
        return f"{r.wd}/tree"

    def results_dir(self):
        return self.server.results_dir()

    def pull(self, remote, local):
        r = self.server
        local = pathlib.Path(local)
        local.mkdir(parents=True, exist_ok=True)
        prefetched = r.take_prefetched(remote)
        if prefetched is not None:
            src, refused = prefetched
            try:
                move_into(src, local, f"rig {r.name}: the server's results")
            except Refused:
                if refused is None:
                    raise
            if refused is not None:
                raise refused
            return
        r.require_up(f"{remote} was not pulled")
        try:
            r.pull_over_ssh(remote, local, r.spec.pull_timeout)
        except Refused:
            r.pulled(remote, refused=True)      # what it holds was taken; shutdown() does not pull it again
            raise
        except (SshLost, subprocess.TimeoutExpired) as e:
            raise RigError(f"rig {r.name}: pulling {remote} failed: {e or type(e).__name__}") from None
        r.pulled(remote, refused=False)         # shutdown() need not pull it again
