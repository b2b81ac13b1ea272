"""Rig files of IPMI servers (driver = "ipmi"): validation on load.

The fields are declared as tables (TOP, and BMC, SSH, KEXEC, LAB below it; krig/schema.py);
every problem is one line naming the file and the field (UsageError, exit 2). The checked file
is an IpmiSpec (TOP as a frozen record: its bmc an IpmiSpecBmc, its ssh an IpmiSpecSsh, its
kexec an IpmiSpecKexec; lab the place tags, lab_tags()).
The BMC password is read here from the environment variable or the 0600 file
the rig file names; it is returned apart from the spec, so it never reaches
describe(), the manifest, a log or an error message. A password file is bound to the
BMCs it is for: below the password, one line `bmc = HOST` (any port) or `bmc = HOST:PORT`
(`bmc = [IPV6]:PORT`) for each; a rig file whose bmc.host (and port) is not among them
is refused, so a rig file cannot send another BMC's password to a host it picks.
"""
import dataclasses
import ipaddress
import json
import os
import pathlib
import re
import stat
from typing import Any, Generic, TypeVar

from krig.config import parse_size, read_secret_lines
from krig.errors import UsageError
from krig.schema import ANY, OMIT, Field, Record, check
from rigs.ipmi.pull import FILE_CAP, TOTAL_CAP
from rigs.netconsole import CONSOLE_SAYS, SPEEDS, console_ok
from rigs.protocol import SECRETS_FILE_ENV, RigSpec

TAG_KEY_RE = re.compile(r"^[a-z][a-z0-9_]+$")
TAG_VAL_RE = r"[a-z0-9][a-z0-9._-]*"
RESERVED_TAGS = ("name", "krig_holder", "krig_since", "krig_lease")
PRIVILEGES = ("USER", "OPERATOR", "ADMINISTRATOR")
BOOT_DEVICES = ("none", "pxe", "disk", "safe", "diag", "cdrom", "bios")
# The only -o options a rig file may set: how to connect and which algorithms,
# nothing that forwards (agent, ports, environment), runs a command, loads a
# library or changes how the host key is checked.
SSH_ALLOWED = ("AddressFamily", "BindAddress", "CASignatureAlgorithms", "CheckHostIP", "Ciphers",
               "Compression", "ConnectionAttempts", "HostKeyAlgorithms", "IPQoS", "KexAlgorithms", "LogLevel",
               "MACs", "PubkeyAcceptedAlgorithms", "PubkeyAcceptedKeyTypes", "RekeyLimit", "TCPKeepAlive")
HOST_RE = re.compile(r"^[A-Za-z0-9._:-]+$")
USER_RE = r"[A-Za-z0-9._][A-Za-z0-9._-]*"          # never an option: no leading '-'
ENV_RE = r"[A-Za-z_][A-Za-z0-9_]*"
_ENV_SECRETS: dict[str, str] = {}      # password_env values, taken out of os.environ


def _host_name(v: str) -> bool:
    return bool(HOST_RE.match(v)) and not v.startswith("-")


def _dedicated_dir(v: str) -> bool:
    """remote_dir (its trailing '/' gone): absolute, plain, not a shared directory such as /tmp."""
    return (v not in ("", "/tmp", "/var/tmp", "/run", "/root", "/home") and re.fullmatch(r"/[A-Za-z0-9._/-]+", v)
            is not None and ".." not in v.split("/"))


def absolute_path(value: str, field: str) -> str:
    """A path on this machine: absolute or ~/..., expanded."""
    p = pathlib.Path(value).expanduser()
    if not p.is_absolute():
        raise UsageError(f"{field}: {value!r}: use an absolute path or one starting with ~/")
    return str(p)


def a_file(value: str, field: str) -> str:
    p = absolute_path(value, field)
    if not pathlib.Path(p).is_file():
        raise UsageError(f"{field}: {p} does not exist or is not a file")
    return p


def _gib(value, field: str) -> str:
    """A size as a lab tag: whole GiB, at least 1."""
    return str(max(1, parse_size(value, field) >> 30))


def _seconds(key: str, default, least) -> Field:
    return Field(key, (int, float), default, min=least)


def _words(key: str, default=()) -> Field:
    return Field(key, list, list(default), each=lambda s: isinstance(s, str) and s != "",
                 says="expected a list of non-empty strings, got {item!r}")


HOST = Field("host", str, test=_host_name, says="{v!r} is not a host name or IP address")
USER = "{v!r}: use letters, digits, '.', '_' or '-'"


def login(port: int) -> tuple:
    """A BMC's address and account (an IPMI BMC's [bmc], a Redfish one's): host, port (default
    `port`), user, and where its password is (password_env or password_file)."""
    return (HOST,
            Field("port", int, port, min=1, max=65535, says="{v} is not a port number (1-65535)"),
            Field("user", str, pattern=USER_RE, says=USER),
            Field("password_env", str, OMIT, pattern=ENV_RE, says="{v!r} is not an environment variable name"),
            Field("password_file", str, OMIT, convert=absolute_path))


BMC = (
    *login(623),
    Field("cipher_suite", int, 17, min=0, max=17, says="{v} is not an IPMI cipher suite (0-17; 3 or 17 usual)"),
    Field("privilege", str, "ADMINISTRATOR", convert=lambda v, _: v.upper(), choices=PRIVILEGES),
    Field("timeout", int, 5, min=1, max=60, says="must be 1-60 s, got {v}"),
    Field("retries", int, 3, min=1, max=10, says="must be 1-10, got {v}"),
    Field("boot_device", str, "", choices=("", *BOOT_DEVICES), says="{v!r} is not one of " + ", ".join(BOOT_DEVICES)),
    # the SEL cleared after sel-before.txt: off by default, as some BMCs let only an ADMINISTRATOR clear it
    Field("clear_sel", bool, False),
)
SSH = (
    HOST,
    Field("port", int, 22, min=1, max=65535, says="{v} is not a port number (1-65535)"),
    Field("user", str, "root", pattern=USER_RE, says=USER),
    Field("key", str, convert=a_file),
    Field("known_hosts", str, convert=a_file),
    Field("host_key_alias", str, "", test=lambda v: not v or bool(HOST_RE.match(v.strip("[]").replace("]:", ":"))),
          says="{v!r} is not a host name"),
    Field("connect_timeout", int, 15, min=1),
    Field("alive_interval", int, 10, min=1),
    Field("alive_count", int, 6, min=1),
    _words("options"),
)
KEXEC = (
    Field("cmdline", str, "reuse"),
    _words("append"),
    Field("initrd", str, "auto", test=lambda v: v in ("auto", "none") or v.startswith(("/", "~/")),
          says="{v!r}: use auto, none or an absolute path on this machine"),
    _words("exec_command"),
    Field("syscall", str, "auto", choices=("auto", "kexec_load", "kexec_file_load")),
)
# [lab]: the labgrid place tags of the server (lab_tags), by tag name
LAB = (
    Field("model", str, OMIT, convert=lambda v, _: v.lower(), pattern=TAG_VAL_RE,
          says="{raw!r}: use letters, digits, '.', '_', '-'"),
    Field("memory", ANY, OMIT, convert=_gib, name="memory_gib"),
    Field("scratch_size", ANY, OMIT, convert=_gib, name="scratch_gib"),
    Field("cpus", int, OMIT, min=1),
    Field("numa", int, OMIT, min=1),
    Field("tags", dict, {}),
)
LAB_TABLE = Field("lab", dict, {}, table=LAB)
TOP = (
    Field("driver", str, "ipmi", choices=("ipmi",)),
    Field("description", str, ""),
    Field("scratch_dev", str, "", pattern=r"(/dev/[A-Za-z0-9._/-]+)?",
          says="{v!r} is not a device path like /dev/nvme0n1"),
    Field("remote_dir", str, "/var/lib/krig", convert=lambda v, _: v.rstrip("/"), test=_dedicated_dir,
          says="{raw!r}: use a dedicated absolute directory like /var/lib/krig"),
    Field("boot", str, "installed", choices=("installed", "kexec")),
    Field("console", str, "sol", test=console_ok, says=CONSOLE_SAYS),
    # an rfc2217:// console's line speed (telnet://, raw://: the console server's; sol: the BMC's)
    Field("console_speed", int, 115200, choices=SPEEDS),
    Field("cold_boot", bool, False),        # every run of a workflow through the firmware (rigs/ipmi/warm.py)
    _seconds("boot_timeout", 600, 1),
    _seconds("shutdown_timeout", 120, 0),
    _words("shutdown_command", ["systemctl", "poweroff"]),
    _seconds("hang_timeout", 120, 1),
    _seconds("nmi_wait", 20, 0),
    Field("nmi_panic", bool, True),
    Field("recover_after_hang", bool, True),
    _seconds("pull_timeout", 300, 1),
    Field("pull_max_size", (str, int), TOTAL_CAP, convert=parse_size),
    Field("pull_max_file_size", (str, int), FILE_CAP, convert=parse_size),
    Field("bmc", dict, table=BMC),
    Field("ssh", dict, table=SSH),
    Field("kexec", dict, {}, table=KEXEC),
    Field("lab", dict, {}),
    # a simulated server on this host (`krig lab sim`): its emulator's pid file, so a run samples
    # the host beside it and a busy host's timing is ERROR (host contention), never the kernel's
    Field("emulator_pidfile", str, OMIT, pattern=r"/.+", says="{v!r}: expected an absolute path (the pid file of "
          "a simulated server's emulator)"),
)


class Login(Record):
    """The fields login() declares, first in a BMC's table (IPMI or Redfish)."""
    host: str
    port: int
    user: str
    password_env: str | None
    password_file: str | None


class IpmiSpecBmc(Login, fields=BMC):
    cipher_suite: int
    privilege: str
    timeout: int
    retries: int
    boot_device: str
    clear_sel: bool


class IpmiSpecSsh(Record, fields=SSH):
    host: str
    port: int
    user: str
    key: str
    known_hosts: str
    host_key_alias: str
    connect_timeout: int
    alive_interval: int
    alive_count: int
    options: tuple[str, ...]


class IpmiSpecKexec(Record, fields=KEXEC):
    cmdline: str
    append: tuple[str, ...]
    initrd: str
    exec_command: tuple[str, ...]
    syscall: str


B = TypeVar("B", bound=Login)


class ServerSpec(RigSpec, Generic[B]):
    """The fields of TOP after driver and description: a lab server's rig file, its [bmc] an
    IPMI BMC's (IpmiSpec) or a Redfish service's (rigs/redfish/spec.py)."""
    scratch_dev: str
    remote_dir: str
    boot: str
    console: str
    console_speed: int
    cold_boot: bool
    boot_timeout: float
    shutdown_timeout: float
    shutdown_command: tuple[str, ...]
    hang_timeout: float
    nmi_wait: float
    nmi_panic: bool
    recover_after_hang: bool
    pull_timeout: float
    pull_max_size: int
    pull_max_file_size: int
    bmc: B
    ssh: IpmiSpecSsh
    kexec: IpmiSpecKexec
    lab: dict[str, str]                 # the place tags (lab_tags)
    emulator_pidfile: str | None


class IpmiSpec(ServerSpec[IpmiSpecBmc], fields=TOP):
    bmc: IpmiSpecBmc


S = TypeVar("S", bound=ServerSpec[Any])


def read_password(bmc: Login, where: str) -> str:
    """The BMC password from the environment or a 0600 file; never echoed."""
    pw = password_of(bmc, where)
    if len(pw.encode()) > 20:
        field = "password_env" if bmc.password_env else "password_file"
        raise UsageError(f"{where}.{field}: the password is longer than 20 bytes, the IPMI 2.0 limit")
    return pw


def take_env_secret(var: str) -> str | None:
    """A secret from the environment, read once: the variable is removed from
    os.environ (so no child inherits it) and kept in this process only. A
    qualify run's workers get it from their parent (hand_over_secrets)."""
    value = os.environ.pop(var, None)
    if value:
        _ENV_SECRETS[var] = value
    return _ENV_SECRETS.get(var)


def hand_over_secrets() -> tuple[int, str] | None:
    """The secrets taken so far, for worker processes: (fd, path) of a file in memory only
    (memfd) that this process holds and that /proc/<this pid>/fd/<fd> reaches. It has no name
    on any file system, so nothing of it outlives this process however it ends (SIGKILL too).
    The caller closes fd after the workers; None when there is no secret."""
    if not _ENV_SECRETS:
        return None
    fd = os.memfd_create("krig-secrets", os.MFD_CLOEXEC)
    os.fchmod(fd, 0o600)
    with os.fdopen(os.dup(fd), "w") as f:
        json.dump(_ENV_SECRETS, f)
    return fd, f"/proc/{os.getpid()}/fd/{fd}"


def take_handed_secrets() -> None:
    """In a worker: the secrets its parent handed over (KRIG_SECRETS_FILE names them), read
    once; the variable leaves the environment, so no child of the worker (ssh, tar, the pytest
    judge) inherits it."""
    path = os.environ.pop(SECRETS_FILE_ENV, None)
    if path:
        try:
            _ENV_SECRETS.update(json.loads(pathlib.Path(path).read_text()))
        except (OSError, ValueError):
            pass


def password_of(bmc: Login, where: str) -> str:
    """The password of a checked [bmc] table (password_env or password_file)."""
    if bmc.password_env:
        var = bmc.password_env
        value = take_env_secret(var)
        if not value:
            raise UsageError(f"{where}.password_env: environment variable {var} is not set or empty")
        return value
    field = f"{where}.password_file"
    assert bmc.password_file is not None, "validate_spec: a [bmc] sets password_env or password_file"
    lines = read_secret_lines(bmc.password_file, field)
    bound = _bound_to(lines[1:], f"{field}: {bmc.password_file}")
    here = f"{url_host(bmc.host)}:{bmc.port}"
    if not bound:
        raise UsageError(f"{field}: {bmc.password_file} does not say which BMC its password is for: add the line "
                         f"`bmc = {here}` below the password (a password file goes only to the BMCs it names)")
    if not any(h == host_key(bmc.host) and p in (None, bmc.port) for h, p in bound):
        names = ", ".join(f"{url_host(h)}:{p}" if p else h for h, p in bound)
        raise UsageError(f"{field}: {bmc.password_file} is for {names} (its bmc lines), not bmc.host {here}: "
                         "a password file goes only to the BMCs it names")
    return lines[0]


def host_key(host: str) -> str:
    """A host as compared: an IP address in its one written form, a name in lower case."""
    h = host.strip("[]")
    try:
        return str(ipaddress.ip_address(h))
    except ValueError:
        return h.lower().rstrip(".")


def url_host(host: str) -> str:
    """A host as written in a URL or beside a port: an IPv6 address in brackets."""
    try:
        return f"[{host}]" if ipaddress.ip_address(host.strip("[]")).version == 6 else host
    except ValueError:
        return host


def _bound_to(lines: list[str], where: str) -> list[tuple[str, int | None]]:
    """The (host, port or None) a password file's `bmc = ...` lines name (blank lines and
    # comments skipped); any other line is refused, its number named, never its text."""
    out = []
    for n, line in enumerate(lines, 2):
        key, eq, value = line.partition("=")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        v = value.strip()
        host, port = (v[1:].partition("]")[0], v.partition("]")[2]) if v.startswith("[") else (
            v.rpartition(":")[0], ":" + v.rpartition(":")[2]) if v.count(":") == 1 else (v, "")
        ok = key.strip() == "bmc" and eq and _host_name(host.strip("[]")) and (
            port == "" or (port[:1] == ":" and port[1:].isdigit() and 0 < int(port[1:]) < 65536))
        if not ok:
            raise UsageError(f"{where} line {n}: expected `bmc = HOST` or `bmc = HOST:PORT` (`bmc = [IPV6]:PORT`), "
                             "a BMC this password is for")
        out.append((host_key(host), int(port[1:]) if port else None))
    return out


def validate_spec(name: str, spec: dict, where: str | None = None) -> tuple[IpmiSpec, str]:
    """The rig file (TOP) checked: (the checked spec, BMC password)."""
    where = where or f"rigs/{name}.toml"
    out = IpmiSpec.of(check(spec, TOP, where))
    bw = f"{where}.bmc"
    if (out.bmc.password_env is None) == (out.bmc.password_file is None):
        raise UsageError(f"{bw}: set exactly one of password_env (an environment variable's name) "
                         "or password_file (a file of mode 0600)")
    password = read_password(out.bmc, bw)
    return check_ssh(out, spec, where), password


def check_ssh(out: S, spec: dict, where: str) -> S:
    """What the SSH table's fields cannot say alone (the options allowed, the key's mode), and
    the lab tags: the rig file's parts the IPMI and Redfish drivers share. `out` is the checked
    rig file, `spec` the file as read; the checked file comes back with its lab tags."""
    sw = f"{where}.ssh"
    for o in out.ssh.options:
        key = o.split("=", 1)[0].strip()
        if "=" not in o or not key.isalnum():
            raise UsageError(f"{sw}.options: {o!r}: expected Name=value (an ssh -o option)")
        if key.lower() not in {a.lower() for a in SSH_ALLOWED}:
            raise UsageError(f"{sw}.options: {key} is not allowed; allowed: {', '.join(SSH_ALLOWED)}")
    key = out.ssh.key
    key_mode = stat.S_IMODE(pathlib.Path(key).stat().st_mode)
    if key_mode & 0o077:
        raise UsageError(f"{sw}.key: {key} has mode {key_mode:04o}; ssh refuses a private key others "
                         f"can read: run `chmod 600 {key}`")
    return dataclasses.replace(out, lab=lab_tags(spec, where))


def lab_tags(spec: dict, where: str) -> dict[str, str]:
    """The labgrid place tags of a rig, from its [lab] table (LAB) and scratch_dev (nothing secret:
    no BMC or SSH address, user or path). Sizes become whole GiB."""
    lw = f"{where}.lab"
    lab = LAB_TABLE.value(spec, where)
    tags = {"driver": spec.get("driver", "ipmi"), "scratch": "yes" if spec.get("scratch_dev") else "no",
            **{k: str(v) for k, v in lab.items() if k != "tags"}}
    for k, v in lab["tags"].items():
        if not TAG_KEY_RE.match(k) or k in RESERVED_TAGS or k in tags:
            raise UsageError(f"{lw}.tags.{k}: a tag name is lowercase letters, digits and '_' (2+ characters), "
                             f"not one krig sets ({', '.join(sorted(set(tags) | set(RESERVED_TAGS)))})")
        tags[k] = str(v).lower() if isinstance(v, (str, int)) and not isinstance(v, bool) else ""
        if not re.fullmatch(TAG_VAL_RE, tags[k]):
            raise UsageError(f"{lw}.tags.{k}: {v!r}: a tag value is a number or a word "
                             "(letters, digits, '.', '_', '-')")
    return tags
