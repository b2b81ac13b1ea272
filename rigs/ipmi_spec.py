"""Rig files of IPMI servers (driver = "ipmi"): validation on load.

Every problem is one line naming the file and the field (UsageError, exit 2).
The BMC password is read here from the environment variable or the 0600 file
the rig file names; it is returned apart from the spec, so it never reaches
describe(), the manifest, a log or an error message.
"""
import json
import os
import pathlib
import re
import stat

from krig.config import optional, parse_size, read_secret_file, reject_unknown, require
from krig.errors import UsageError
from .ipmi_pull import FILE_CAP, TOTAL_CAP
from .protocol import SECRETS_FILE_ENV

TOP = {"driver", "description", "scratch_dev", "remote_dir", "boot", "boot_timeout", "shutdown_timeout",
       "shutdown_command", "hang_timeout", "nmi_wait", "nmi_panic", "recover_after_hang",
       "pull_timeout", "pull_max_size", "pull_max_file_size", "bmc", "ssh", "kexec", "lab"}
BMC = {"host", "port", "user", "password_env", "password_file", "cipher_suite", "privilege", "timeout",
       "retries", "boot_device", "clear_sel"}
SSH = {"host", "port", "user", "key", "known_hosts", "host_key_alias", "connect_timeout",
       "alive_interval", "alive_count", "options"}
KEXEC = {"cmdline", "append", "initrd", "exec_command", "syscall"}
LAB = {"model", "memory", "cpus", "numa", "scratch_size", "tags"}
TAG_KEY_RE = re.compile(r"^[a-z][a-z0-9_]+$")
TAG_VAL_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
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
USER_RE = re.compile(r"^[A-Za-z0-9._-]+$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEV_RE = re.compile(r"^/dev/[A-Za-z0-9._/-]+$")
_ENV_SECRETS: dict[str, str] = {}      # password_env values, taken out of os.environ


def _number(table, key, where, default, minimum=0.0):
    v = optional(table, key, (int, float), where, default)
    if v < minimum:
        raise UsageError(f"{where}.{key}: must be at least {minimum:g}, got {v!r}")
    return v


def _port(table, key, where, default):
    v = optional(table, key, int, where, default)
    if not 1 <= v <= 65535:
        raise UsageError(f"{where}.{key}: {v} is not a port number (1-65535)")
    return v


def _host(table, where):
    h = require(table, "host", str, where)
    if not HOST_RE.match(h) or h.startswith("-"):
        raise UsageError(f"{where}.host: {h!r} is not a host name or IP address")
    return h


def _user(table, where, default=None):
    u = optional(table, "user", str, where, default) if default is not None else require(table, "user", str, where)
    if not USER_RE.match(u) or u.startswith("-"):
        raise UsageError(f"{where}.user: {u!r}: use letters, digits, '.', '_' or '-'")
    return u


def _path(table, key, where, required=True, must_exist=True):
    v = require(table, key, str, where) if required else optional(table, key, str, where)
    if v is None:
        return None
    p = pathlib.Path(v).expanduser()
    if not p.is_absolute():
        raise UsageError(f"{where}.{key}: {v!r}: use an absolute path or one starting with ~/")
    if must_exist and not p.is_file():
        raise UsageError(f"{where}.{key}: {p} does not exist or is not a file")
    return p


def _strings(table, key, where, default):
    v = optional(table, key, list, where, default)
    for s in v:
        if not isinstance(s, str) or not s:
            raise UsageError(f"{where}.{key}: expected a list of non-empty strings, got {s!r}")
    return list(v)


def read_password(bmc: dict, where: str) -> str:
    """The BMC password from the environment or a 0600 file; never echoed."""
    pw = _read_password(bmc, where)
    if len(pw.encode()) > 20:
        field = "password_env" if bmc.get("password_env") else "password_file"
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


def _read_password(bmc: dict, where: str) -> str:
    if bmc.get("password_env"):
        var = bmc["password_env"]
        value = take_env_secret(var)
        if not value:
            raise UsageError(f"{where}.password_env: environment variable {var} is not set or empty")
        return value
    return read_secret_file(bmc["password_file"], f"{where}.password_file")


def validate_spec(name: str, spec: dict, where: str | None = None) -> tuple[dict, str]:
    """Returns (normalized spec, BMC password)."""
    where = where or f"rigs/{name}.toml"
    reject_unknown(spec, TOP, where)
    out = {"driver": "ipmi", "description": optional(spec, "description", str, where, "")}
    scratch = optional(spec, "scratch_dev", str, where, "")
    if scratch and not DEV_RE.match(scratch):
        raise UsageError(f"{where}.scratch_dev: {scratch!r} is not a device path like /dev/nvme0n1")
    out["scratch_dev"] = scratch
    rd = optional(spec, "remote_dir", str, where, "/var/lib/krig")
    if not rd.startswith("/") or rd.rstrip("/") in ("", "/tmp", "/var/tmp", "/run", "/root", "/home") \
            or not re.match(r"^/[A-Za-z0-9._/-]+$", rd) or ".." in rd.split("/"):
        raise UsageError(f"{where}.remote_dir: {rd!r}: use a dedicated absolute directory like /var/lib/krig")
    out["remote_dir"] = rd.rstrip("/")
    out["boot"] = optional(spec, "boot", str, where, "installed")
    if out["boot"] not in ("installed", "kexec"):
        raise UsageError(f"{where}.boot: {out['boot']!r} is not one of installed, kexec")
    out["boot_timeout"] = _number(spec, "boot_timeout", where, 600, 1)
    out["shutdown_timeout"] = _number(spec, "shutdown_timeout", where, 120, 0)
    out["shutdown_command"] = _strings(spec, "shutdown_command", where, ["systemctl", "poweroff"])
    out["hang_timeout"] = _number(spec, "hang_timeout", where, 120, 1)
    out["nmi_wait"] = _number(spec, "nmi_wait", where, 20, 0)
    out["nmi_panic"] = optional(spec, "nmi_panic", bool, where, True)
    out["recover_after_hang"] = optional(spec, "recover_after_hang", bool, where, True)
    out["pull_timeout"] = _number(spec, "pull_timeout", where, 300, 1)
    for key, default in (("pull_max_size", TOTAL_CAP), ("pull_max_file_size", FILE_CAP)):
        out[key] = parse_size(optional(spec, key, (str, int), where, default), f"{where}.{key}")

    bw = f"{where}.bmc"
    bmc = require(spec, "bmc", dict, where)
    reject_unknown(bmc, BMC, bw)
    b = {"host": _host(bmc, bw), "port": _port(bmc, "port", bw, 623), "user": _user(bmc, bw)}
    has_env, has_file = "password_env" in bmc, "password_file" in bmc
    if has_env == has_file:
        raise UsageError(f"{bw}: set exactly one of password_env (an environment variable's name) "
                         "or password_file (a file of mode 0600)")
    if has_env:
        b["password_env"] = require(bmc, "password_env", str, bw)
        if not ENV_RE.match(b["password_env"]):
            raise UsageError(f"{bw}.password_env: {b['password_env']!r} is not an environment variable name")
    else:
        b["password_file"] = str(_path(bmc, "password_file", bw, must_exist=False))
    b["cipher_suite"] = optional(bmc, "cipher_suite", int, bw, 17)
    if not 0 <= b["cipher_suite"] <= 17:
        raise UsageError(f"{bw}.cipher_suite: {b['cipher_suite']} is not an IPMI cipher suite (0-17; 3 or 17 usual)")
    b["privilege"] = optional(bmc, "privilege", str, bw, "ADMINISTRATOR").upper()
    if b["privilege"] not in PRIVILEGES:
        raise UsageError(f"{bw}.privilege: {b['privilege']!r} is not one of {', '.join(PRIVILEGES)}")
    b["timeout"] = optional(bmc, "timeout", int, bw, 5)
    b["retries"] = optional(bmc, "retries", int, bw, 3)
    if not 1 <= b["timeout"] <= 60 or not 1 <= b["retries"] <= 10:
        raise UsageError(f"{bw}: timeout must be 1-60 s and retries 1-10")
    b["boot_device"] = optional(bmc, "boot_device", str, bw, "")
    if b["boot_device"] and b["boot_device"] not in BOOT_DEVICES:
        raise UsageError(f"{bw}.boot_device: {b['boot_device']!r} is not one of {', '.join(BOOT_DEVICES)}")
    b["clear_sel"] = optional(bmc, "clear_sel", bool, bw, True)
    out["bmc"] = b
    password = read_password(b, bw)

    sw = f"{where}.ssh"
    ssh = require(spec, "ssh", dict, where)
    reject_unknown(ssh, SSH, sw)
    s = {"host": _host(ssh, sw), "port": _port(ssh, "port", sw, 22), "user": _user(ssh, sw, "root"),
         "key": str(_path(ssh, "key", sw)), "known_hosts": str(_path(ssh, "known_hosts", sw))}
    s["host_key_alias"] = optional(ssh, "host_key_alias", str, sw, "")
    if s["host_key_alias"] and not HOST_RE.match(s["host_key_alias"].strip("[]").replace("]:", ":")):
        raise UsageError(f"{sw}.host_key_alias: {s['host_key_alias']!r} is not a host name")
    s["connect_timeout"] = optional(ssh, "connect_timeout", int, sw, 15)
    s["alive_interval"] = optional(ssh, "alive_interval", int, sw, 10)
    s["alive_count"] = optional(ssh, "alive_count", int, sw, 6)
    for k in ("connect_timeout", "alive_interval", "alive_count"):
        if s[k] < 1:
            raise UsageError(f"{sw}.{k}: must be at least 1, got {s[k]}")
    s["options"] = _strings(ssh, "options", sw, [])
    for o in s["options"]:
        key = o.split("=", 1)[0].strip().lower()
        if "=" not in o or not key.isalnum():
            raise UsageError(f"{sw}.options: {o!r}: expected Name=value (an ssh -o option)")
        if key not in {a.lower() for a in SSH_ALLOWED}:
            raise UsageError(f"{sw}.options: {o.split('=', 1)[0].strip()} is not allowed; "
                             f"allowed: {', '.join(SSH_ALLOWED)}")
    key_mode = stat.S_IMODE(pathlib.Path(s["key"]).stat().st_mode)
    if key_mode & 0o077:
        raise UsageError(f"{sw}.key: {s['key']} has mode {key_mode:04o}; ssh refuses a private key others "
                         f"can read: run `chmod 600 {s['key']}`")
    out["ssh"] = s

    kw = f"{where}.kexec"
    k = optional(spec, "kexec", dict, where, {})
    reject_unknown(k, KEXEC, kw)
    out["kexec"] = {"cmdline": optional(k, "cmdline", str, kw, "reuse"),
                    "append": _strings(k, "append", kw, []),
                    "initrd": optional(k, "initrd", str, kw, "auto"),
                    "exec_command": _strings(k, "exec_command", kw, []),
                    "syscall": optional(k, "syscall", str, kw, "auto")}
    if out["kexec"]["syscall"] not in ("auto", "kexec_load", "kexec_file_load"):
        raise UsageError(f"{kw}.syscall: {out['kexec']['syscall']!r} is not one of auto, kexec_load, "
                         "kexec_file_load")
    ini = out["kexec"]["initrd"]
    if ini not in ("auto", "none") and not ini.startswith(("/", "~/")):
        raise UsageError(f"{kw}.initrd: {ini!r}: use auto, none or an absolute path on this machine")
    out["lab"] = lab_tags(spec, where)
    return out, password


def lab_tags(spec: dict, where: str) -> dict[str, str]:
    """The labgrid place tags of a rig, from its [lab] table and scratch_dev (nothing secret:
    no BMC or SSH address, user or path). Sizes become whole GiB."""
    lw = f"{where}.lab"
    lab = optional(spec, "lab", dict, where, {})
    reject_unknown(lab, LAB, lw)
    tags = {"driver": "ipmi", "scratch": "yes" if spec.get("scratch_dev") else "no"}
    if "model" in lab:
        tags["model"] = require(lab, "model", str, lw).lower()
    for key, tag in (("memory", "memory_gib"), ("scratch_size", "scratch_gib")):
        if key in lab:
            tags[tag] = str(max(1, parse_size(lab[key], f"{lw}.{key}") >> 30))
    for key in ("cpus", "numa"):
        if key in lab:
            n = require(lab, key, int, lw)
            if n < 1:
                raise UsageError(f"{lw}.{key}: must be at least 1, got {n}")
            tags[key] = str(n)
    extra = optional(lab, "tags", dict, lw, {})
    for k, v in extra.items():
        if not TAG_KEY_RE.match(k) or k in RESERVED_TAGS or k in tags:
            raise UsageError(f"{lw}.tags.{k}: a tag name is lowercase letters, digits and '_' (2+ characters), "
                             f"not one krig sets ({', '.join(sorted(set(tags) | set(RESERVED_TAGS)))})")
        tags[k] = str(v).lower() if isinstance(v, (str, int)) and not isinstance(v, bool) else ""
        if not TAG_VAL_RE.match(tags[k]):
            raise UsageError(f"{lw}.tags.{k}: {v!r}: a tag value is a number or a word "
                             "(letters, digits, '.', '_', '-')")
    if "model" in tags and not TAG_VAL_RE.match(tags["model"]):
        raise UsageError(f"{lw}.model: {lab['model']!r}: use letters, digits, '.', '_', '-'")
    return tags
