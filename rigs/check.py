"""`krig rig check RIG`: what can be checked of a rig without powering anything or booting a
kernel, one line an item: `ok`, or `FAIL` saying what is wrong and the rig file's field to
change, or `--` for what is not checked now and why (a server that is off is not powered on to
try its SSH).

The parts every rig with a server behind a BMC shares are here: the secret files, the SSH host
key pinned in known_hosts (and an SSH login when the server is up), a network console's port,
(the drivers inventory krig keeps of the server: workflows/rigcheck.py). The BMC's own items (TLS, the login, the
account's privileges, the system, the power state) are the driver's: rigs/ipmi/check.py,
rigs/redfish/check.py (CHECKS). Nothing here changes the server's power, its boot override
or its logs. A workflow runs the same checks before its first kernel build (before_build).
"""
import dataclasses
import importlib
import os
import socket
import stat
import subprocess

from krig.errors import RigError, UsageError
from rigs.ipmi.state import Power

OK, BAD, NOTE = "ok", "FAIL", "--"
CHECKS = {"ipmi": "rigs.ipmi.check:bmc_items", "redfish": "rigs.redfish.check:bmc_items"}
CONNECT_TIMEOUT = 5


@dataclasses.dataclass(frozen=True)
class Item:
    state: str          # OK, BAD or NOTE
    what: str           # the topic: tls, login, console...
    text: str           # what was found, or what is wrong
    field: str = ""     # the rig file's field to change (BAD)

    def line(self) -> str:
        fix = f" (field: {self.field})" if self.field and self.state == BAD else ""
        return f"{self.state:4s} {self.what}: {self.text}{fix}"


def ok(what: str, text: str) -> Item:
    return Item(OK, what, text)


def bad(what: str, text: str, field: str) -> Item:
    return Item(BAD, what, text, field)


def note(what: str, text: str) -> Item:
    return Item(NOTE, what, text)


def items(rig, bmc: bool = True):
    """Every item of `rig`, in order (a generator: each line can be printed as it is known).
    bmc=False: only what needs no network (the checks a workflow runs before its builds)."""
    yield ok("rig file", f"{rig.where}: driver {rig.kind}, every field valid")
    if rig.kind not in CHECKS:
        yield from _programs(rig)
        return
    yield secrets(rig)
    yield known_host(rig)
    if not bmc:
        return
    power: dict[str, Power | None] = {}     # "state": the power the BMC reported (None: neither on nor off)
    yield from bmc_items(rig, power)
    if rig.spec.console != "sol":
        yield console_port(rig.spec.console)
    yield ssh_up(rig, power.get("state"))


def _programs(rig) -> list:
    import shutil
    progs = rig.host_needs().get("programs", [])
    missing = [p for p in progs if shutil.which(p) is None]
    if missing:
        return [bad("programs", f"{', '.join(missing)} not on PATH: run `make setup`", "driver")]
    return [ok("programs", ", ".join(progs) or "none needed")]


def _mode(path: str) -> str:
    return f"{stat.S_IMODE(os.stat(path).st_mode):04o}"


def secrets(rig) -> Item:
    """The BMC password and the SSH key: the rig file's load already refused what is unreadable,
    empty or readable by others; this says where each came from."""
    b, s = rig.spec.bmc, rig.spec.ssh
    pw = f"bmc.password_env {b.password_env} (set)" if b.password_env else \
        f"bmc.password_file {b.password_file} (mode {_mode(b.password_file)})"
    return ok("secrets", f"{pw}, ssh.key {s.key} (mode {_mode(s.key)})")


def password_field(bmc) -> str:
    """The rig file's field the BMC password comes from (a refused password names it)."""
    return "bmc.password_env" if bmc.password_env else "bmc.password_file"


def ssh_target(cfg) -> str:
    """The name ssh looks the server's host key up by: host_key_alias, else [host]:port (host alone on 22)."""
    if cfg.host_key_alias:
        return cfg.host_key_alias
    return cfg.host if cfg.port == 22 else f"[{cfg.host}]:{cfg.port}"


def known_host(rig) -> Item:
    """known_hosts holds a key for the server (krig never adds one: StrictHostKeyChecking=yes)."""
    s = rig.spec.ssh
    name = ssh_target(s)
    try:
        p = subprocess.run(["ssh-keygen", "-F", name, "-f", s.known_hosts], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return bad("ssh host key", f"ssh-keygen -F could not read {s.known_hosts}: {e}", "ssh.known_hosts")
    keys = [ln.split()[1] for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith("#")
            and len(ln.split()) >= 3]
    if p.returncode != 0 or not keys:
        return bad("ssh host key", f"{s.known_hosts} has no host key for {name}: krig refuses to connect "
                   f"(add the server's key, e.g. `ssh-keyscan -p {s.port} {s.host}`, its fingerprint checked on "
                   "the server's console)", "ssh.known_hosts")
    return ok("ssh host key", f"{name} pinned in {s.known_hosts} ({', '.join(sorted(set(keys)))})")


def console_port(url: str) -> Item:
    """A network console (rfc2217://, telnet://, raw://): its port accepts a connection (closed at
    once). A console server's Unix socket (unix:/PATH) is a socket at that path, not a link, that
    this user may connect to: it is not connected to, so a console server that lets one reader in
    at a time keeps the one it has."""
    from rigs.netconsole import parse
    scheme, host, port = parse(url)
    if scheme == "unix":
        try:
            st = os.lstat(host)
        except OSError as e:
            return bad("console", f"{url}: {e.strerror} (a console server must listen there)", "console")
        if not stat.S_ISSOCK(st.st_mode):
            return bad("console", f"{url}: not a socket (a console server must listen there)", "console")
        if not os.access(host, os.R_OK | os.W_OK):
            return bad("console", f"{url}: this user may not connect to it (uid {st.st_uid}'s, mode "
                       f"{stat.S_IMODE(st.st_mode):04o})", "console")
        return ok("console", f"{url} is a console server's socket this user may connect to")
    try:
        with socket.create_connection((host, port), CONNECT_TIMEOUT):
            pass
    except OSError as e:
        why = e.strerror or type(e).__name__
        return bad("console", f"{url}: {why} (a console server such as ser2net must listen there)", "console")
    return ok("console", f"{url} accepts a connection")


def ssh_up(rig, power: Power | None) -> Item:
    """An SSH login with the pinned host key, when the server is up; never powered on for it."""
    from rigs.ipmi.ssh import HostKeyError
    if power is not Power.ON:
        why = "is off" if power is Power.OFF else "power state is unknown"
        return note("ssh", f"the server {why}: SSH is checked when it is up (a check powers nothing on)")
    s = rig.spec.ssh
    try:
        boot_id = rig.ssh.probe(min(s.connect_timeout, 15))
    except HostKeyError:
        return bad("ssh", f"the host key of {s.host}:{s.port} does not match {s.known_hosts}", "ssh.known_hosts")
    except RigError as e:
        return bad("ssh", f"{str(e).split(': ', 1)[-1]}", "ssh.key or ssh.user")
    if boot_id is None:
        return bad("ssh", f"the server is on but {s.user}@{s.host}:{s.port} does not answer SSH", "ssh.host or ssh.port")
    return ok("ssh", f"{s.user}@{s.host}:{s.port} logs in (host key pinned), boot id {boot_id[:8]}")


# the rig files whose BMC a workflow checked before its first build, once a process; a FAIL among
# the items is refused before any kernel is built
_BMC_CHECKED: set[str] = set()
# the items a workflow does not refuse: a refused log clearing is a fact of the run, never its end
NOT_REFUSED = ("log clearing",)
# a BMC that does not answer: the BMC's fault (ERROR's exit code), not the rig file's
NO_ANSWER = ("bmc.host or bmc.port", "bmc.timeout or bmc.retries")


def before_build(rig) -> None:
    """What a workflow checks of a lab server before it builds a kernel for it, as `krig rig
    check` does, without powering anything or reaching the server itself: the rig file, the
    secrets and the host key pinned (every time: no network), then the BMC (TLS and its pin, the
    login, the account's privileges, the system, Serial over LAN) once a process. A network
    console's port is not connected to: a console server that keeps one reader at a time would
    drop the one another run on the server has. A FAIL is refused in one line naming the rig
    file's field (UsageError); a BMC that does not answer is the BMC's fault (RigError): either
    way nothing was built."""
    if rig.kind not in CHECKS:
        return
    for item in items(rig, bmc=False):
        _refuse(rig, item)
    if rig.where in _BMC_CHECKED:
        return
    for item in bmc_items(rig, {}):
        if item.what not in NOT_REFUSED:
            _refuse(rig, item)
    _BMC_CHECKED.add(rig.where)


def bmc_items(rig, power: dict):
    """The rig's driver's BMC items (CHECKS); power["state"] is set to the power the BMC reported."""
    mod, fn = CHECKS[rig.kind].split(":")
    yield from getattr(importlib.import_module(mod), fn)(rig, power)


def _refuse(rig, item: Item) -> None:
    if item.state != BAD:
        return
    tail = f"; nothing was built (`krig rig check {rig.arg or rig.name}` checks the whole rig)"
    if item.field in NO_ANSWER:
        raise RigError(f"rig {rig.name}: {item.what}: {item.text}{tail}")
    raise UsageError(f"{rig.where}.{item.field}: {item.what}: {item.text}{tail}")
