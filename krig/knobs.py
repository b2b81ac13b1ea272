"""Knobs: sysctls (`--sysctl NAME=VALUE`) and kernel command line words (`--cmdline ARG`) a run
sets on the machine under test, as one value (Knobs), checked before anything starts.

A boot parameter goes at the end of the command line the rig boots (a QEMU guest's -append,
a lab server's kexec command line: rigs/qemu/rig.py, rigs/ipmi/kexec.py); the words that make
krig reach the machine (the console, init, the root, the netconsole, krig's own) are refused.
The sysctls are written on the booted machine before the workload starts and read back
(SYSCTL_SCRIPT, through the rig's command protocol: the QEMU guest's agent or SSH); an unknown,
read-only or refused one is the run's ERROR naming it (`applied`). The manifest records each
knob as set and as read back (`Knobs.record`).

A series that adds a sysctl or a boot parameter is read by `series_knobs`: one line a knob,
naming the flag that would turn it on (never a value).
"""
import dataclasses
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    import argparse

SYSCTL_NAME = re.compile(r"^[a-z0-9_][a-z0-9_.\-/]*$")
SYSCTL_VALUE = re.compile(r"^[A-Za-z0-9_.,:+=/@%-][A-Za-z0-9 _.,:+=/@%-]*$")
CMDLINE_ARG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.,:=+/@%-]*$")
MAX_LEN = 200
# what makes krig reach and watch the machine: its console, what it runs first, its root, the
# netconsole, how a panic ends the boot, and every word krig or a rig sets itself
RESERVED = ("console", "earlycon", "earlyprintk", "init", "rdinit", "root", "rootfstype", "rootflags", "nfsroot",
            "ip", "netconsole", "panic", "oops", "loglevel", "clocksource", "tsc", "acpi_rsdp", "systemd.unit")
RESERVED_PREFIX = ("krig.",)
SIDES = ("base", "series")


@dataclasses.dataclass(frozen=True)
class Knobs:
    sysctl: tuple[tuple[str, str], ...] = ()          # ((name, value), ...) in the order given
    cmdline: tuple[str, ...] = ()         # ("arg", ...)

    def __bool__(self) -> bool:
        return bool(self.sysctl or self.cmdline)

    def args(self, prefix: str = "") -> list[str]:
        """The options that ask for these knobs again (`--sysctl N=V ... --cmdline A ...`)."""
        out = []
        for n, v in self.sysctl:
            out += [f"--{prefix}sysctl", f"{n}={v}"]
        for a in self.cmdline:
            out += [f"--{prefix}cmdline", a]
        return out

    def words(self) -> list[str]:
        """Each knob as one word, `name=value` for a sysctl, the argument for a boot parameter."""
        return [f"sysctl {n}={v}" for n, v in self.sysctl] + [f"cmdline {a}" for a in self.cmdline]

    def to_json(self) -> dict[str, Any]:
        return {"sysctl": [f"{n}={v}" for n, v in self.sysctl], "cmdline": list(self.cmdline)}

    def __add__(self, other: "Knobs") -> "Knobs":
        return Knobs(self.sysctl + other.sysctl, self.cmdline + other.cmdline)

    @classmethod
    def of_record(cls, data: object, where: str = "knobs") -> "Knobs":
        data = data if isinstance(data, dict) else {}
        return parse(data.get("sysctl") or [], data.get("cmdline") or [], where, where)


def check_sysctl(text: str, option: str = "--sysctl") -> tuple[str, str]:
    """'NAME=VALUE' -> (name, value), or one line naming the option and what is allowed."""
    text = str(text)
    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise UsageError(f"{option} {text!r}: expected NAME=VALUE (e.g. vm.vfs_cache_pressure=200)")
    if len(text) > MAX_LEN:
        raise UsageError(f"{option} {name}: longer than {MAX_LEN} characters")
    if not SYSCTL_NAME.match(name) or ".." in name or "//" in name or name.endswith(("/", ".")):
        raise UsageError(f"{option} {name!r}: not a sysctl name (lower-case letters, digits, _ . - /, a name "
                         "under /proc/sys such as vm.vfs_cache_pressure; no '..')")
    if not SYSCTL_VALUE.match(value) or value != value.strip():
        raise UsageError(f"{option} {name}={value!r}: the value must be letters, digits, spaces inside and "
                         "_ . , : + = / @ % - (no newline, no shell characters)")
    return name, value


def check_cmdline(text: str, option: str = "--cmdline") -> str:
    """One kernel command line word, or one line naming the option and what is allowed."""
    text = str(text)
    if len(text) > MAX_LEN:
        raise UsageError(f"{option}: longer than {MAX_LEN} characters")
    if not CMDLINE_ARG.match(text):
        raise UsageError(f"{option} {text!r}: one boot parameter, NAME or NAME=VALUE of letters, digits and "
                         "_ . , : = + / @ % - (no space, no quotes, no shell characters)")
    key = text.partition("=")[0].replace("-", "_")
    if key in (r.replace("-", "_") for r in RESERVED) or key.startswith(RESERVED_PREFIX):
        raise UsageError(f"{option} {text}: {key}= is how krig reaches or watches the machine and cannot be "
                         f"changed (refused: {', '.join(r + '=' for r in RESERVED)}, krig.*)")
    return text


def parse(sysctls: Iterable[str] | None, cmdlines: Iterable[str] | None, sysctl_option: str = "--sysctl", cmdline_option: str = "--cmdline") -> Knobs:
    """The options' texts -> Knobs; a sysctl given twice is refused (which value would win?)."""
    pairs = tuple(check_sysctl(s, sysctl_option) for s in sysctls or ())
    names = [n for n, _ in pairs]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice:
        raise UsageError(f"{sysctl_option} {twice}: given twice; give each sysctl once")
    return Knobs(pairs, tuple(check_cmdline(c, cmdline_option) for c in cmdlines or ()))


def sides(args: "argparse.Namespace") -> dict[str, Knobs]:
    """A validation's knobs a side ({"base": Knobs, "series": Knobs}): --sysctl/--cmdline on both,
    --base-sysctl/--base-cmdline and --series-sysctl/--series-cmdline on one."""
    both = parse(getattr(args, "sysctl", None), getattr(args, "cmdline", None))
    out = {}
    for side in SIDES:
        own = parse(getattr(args, f"{side}_sysctl", None), getattr(args, f"{side}_cmdline", None),
                    f"--{side}-sysctl", f"--{side}-cmdline")
        clash = {n for n, _ in own.sysctl} & {n for n, _ in both.sysctl}
        if clash:
            raise UsageError(f"--{side}-sysctl {sorted(clash)[0]}: given with --sysctl too; give it once")
        out[side] = both + own
    return out


def path_of(name: str) -> str:
    """A sysctl's file under /proc/sys: dots are directories, as sysctl(8) reads them (a name with
    a / is a path already)."""
    return name if "/" in name else name.replace(".", "/")


# Arguments: NAME PATH VALUE, repeated. One line a sysctl: set NAME READ-BACK | unknown NAME |
# read-only NAME | refused NAME WHY (tab-separated). The values are arguments, never code.
SYSCTL_SCRIPT = r"""
while [ $# -ge 3 ]; do
    n=$1 p=/proc/sys/$2 v=$3
    shift 3
    if [ ! -e "$p" ]; then printf 'unknown\t%s\n' "$n"; continue; fi
    if [ ! -w "$p" ]; then printf 'read-only\t%s\n' "$n"; continue; fi
    if ! err=$( { printf '%s\n' "$v" > "$p"; } 2>&1 ); then
        printf 'refused\t%s\t%s\n' "$n" "${err##*: }"; continue
    fi
    if [ -r "$p" ]; then r=$(tr -s '\t\n' '  ' < "$p"); else r='(write-only)'; fi
    printf 'set\t%s\t%s\n' "$n" "${r% }"
done
"""


def apply_argv(knobs: Knobs) -> list[str]:
    """The command that writes the knobs' sysctls on the machine and reads them back."""
    argv = ["bash", "-c", SYSCTL_SCRIPT, "krig-sysctl"]
    for n, v in knobs.sysctl:
        argv += [n, path_of(n), v]
    return argv


WHY = {"unknown": "no such sysctl on this kernel (/proc/sys/{path})",
       "read-only": "read-only on this kernel", "refused": "the kernel refused the value {value!r}: {why}"}


def applied(knobs: Knobs, out: str | None, cmdline: str | None) -> tuple[dict[str, Any], str | None]:
    """The machine's answer to apply_argv and its /proc/cmdline -> (the manifest's record of each
    knob as set and as read back, the first fault naming its knob or None). out None: not asked
    yet (the record as the run starts)."""
    said: dict[str, list[str]] = {}
    for ln in (out or "").splitlines():
        f = ln.split("\t")
        if len(f) >= 2 and f[0] in ("set", *WHY):
            said[f[1]] = f
    rec: dict[str, list[dict[str, Any]]] = {"sysctl": [], "cmdline": []}
    fault: str | None = None
    words = (cmdline or "").split()
    for n, v in knobs.sysctl:
        got = said.get(n)
        entry = {"name": n, "set": v, "read_back": got[2] if got and got[0] == "set" and len(got) > 2 else None}
        if got is None and out is not None:
            entry["fault"] = "the machine did not answer for it"
        elif got is not None and got[0] != "set":
            entry["fault"] = WHY[got[0]].format(path=path_of(n), value=v, why=got[2] if len(got) > 2 else "")
        rec["sysctl"].append(entry)
        if "fault" in entry and fault is None:
            fault = f"--sysctl {n}={v}: {entry['fault']}; nothing ran"
    for a in knobs.cmdline:
        rec["cmdline"].append({"arg": a, "read_back": a in words if cmdline is not None else None})
    return rec, fault


def summary(record: dict[str, Any] | None) -> list[str]:
    """The manifest's knobs record as lines `sysctl NAME=VALUE (read back VALUE)` / `cmdline ARG`."""
    out = []
    for s in (record or {}).get("sysctl") or []:
        back = s.get("read_back")
        out.append(f"sysctl {s.get('name')}={s.get('set')}"
                   + (f" (read back {back})" if back is not None and back != s.get("set") else ""))
    for c in (record or {}).get("cmdline") or []:
        out.append(f"cmdline {c.get('arg')}" + ("" if c.get("read_back") is not False else " (not in /proc/cmdline)"))
    return out


_PROCNAME = re.compile(r'^\+.*\.procname\s*=\s*"([A-Za-z0-9_.-]+)"')
_REGISTER = re.compile(r'register_sysctl(?:_init|_sz)?\s*\(\s*"([a-z0-9_/]+)"')
_SETUP = re.compile(r'^\+\s*(__setup|early_param)\s*\(\s*"([A-Za-z0-9_.-]+=?)"')
_DIR_PREFIX = {"fs": "fs", "mm": "vm", "kernel": "kernel", "net": "net"}


def series_knobs(patch_texts: Iterable[str]) -> list[str]:
    """The sysctls (a new .procname) and boot parameters (a new __setup/early_param) a series adds,
    each as one line naming the flag that would turn it on; VALUE is left for the user to choose."""
    out = []
    for text in patch_texts:
        path, prefix = None, None
        for ln in text.splitlines():
            if ln.startswith("+++ "):
                path = ln[4:].strip().removeprefix("b/")
                top = path.split("/", 1)[0]
                prefix = _DIR_PREFIX.get(top)
            m = _REGISTER.search(ln)
            if m and not ln.startswith("-"):
                prefix = m.group(1).replace("/", ".")
            m = _PROCNAME.match(ln)
            if m:
                name = f"{prefix}.{m.group(1)}" if prefix else f"PATH.{m.group(1)}"
                out.append(f"the series adds the sysctl {name} ({path}): validate with it on as "
                           f"--series-sysctl {name}=VALUE")
            m = _SETUP.match(ln)
            if m:
                key = m.group(2)
                # __setup("name=") takes a value, __setup("name") none; an early_param may take one
                arg = key + "VALUE" if key.endswith("=") else key + ("[=VALUE]" if m.group(1) == "early_param" else "")
                out.append(f"the series adds the boot parameter {key.rstrip('=')} ({path}): validate with "
                           f"it on as --series-cmdline {arg}")
    return list(dict.fromkeys(out))


def from_args(words: Iterable[str], where: str) -> Knobs:
    """AskedRun.knobs' flat options (`--sysctl N=V`, `--cmdline A`, as a bundle's run-args or a
    bisection's step carry them) back into Knobs, checked again (bad ones name `where`)."""
    words = list(words)
    sysctls = [v for o, v in zip(words[0::2], words[1::2]) if o == "--sysctl"]
    cmdlines = [v for o, v in zip(words[0::2], words[1::2]) if o == "--cmdline"]
    try:
        return parse(sysctls, cmdlines)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
