"""A kernel built for the server it boots on: the drivers a server uses, added to a kernel krig
builds (`--kernel KERNEL,drivers=RIG|PATH`, kernels/derived.py).

What the server uses (its *inventory*) is four lists, read from the server over its rig's SSH
(rigs/ipmi/drivers.py) or given as files:

    modules   its loaded modules (/proc/modules, or `lsmod`'s output: the first word of a line)
    bound     the drivers its devices are bound to (/sys/bus/*/devices/*/driver): bus, device,
              driver, and the driver's module (/sys/bus/*/drivers/D/module) when it has one
    boot      the drivers its network cards and disks hang off: for each /sys/class/net/*/device
              and /sys/block/*/device, every ancestor up to /sys/devices bound to a driver:
              role (net or block), interface or disk, bus, device, driver [module]
    config    its running kernel's config (/proc/config.gz, or /boot/config-$(uname -r))

The text form (what the rig reads, and what a file may hold) is `krig-drivers 1`, then
`release R` and sections `== modules`, `== bound` (bus device driver [module] a line),
`== boot` (role name bus device driver [module] a line) and `== config`. A directory holds the
same as the files `modules`, `bound`, `boot` and `config`; any other file is a module list.

The *scope* says which of them are added. `boot` (the default when the inventory has a boot
section): only the drivers of the network cards and disks, what a kexec'd kernel needs to come
back over SSH; the loaded modules and bound drivers are recorded as available, not added.
`all` (`,drivers-scope=all`): every loaded module and bound driver (DRM, USB, input...). An
inventory without a boot section (a module list the user chose) is taken whole.

Each module (and each bound driver's module, or its name) is mapped to config symbols the way
`make localmodconfig` does it: the tree's `obj-$(CONFIG_X) += name.o` lines (kernels/kbuildmap.py).
Only device drivers are added (objects under drivers/): the kernel under test keeps its own
file systems, network stack and core. When the server's config is known, a module that several
options build is taken with the ones the server's kernel has set. Every symbol is asked built
in (=y: krig's initramfs loads only the root disk's modules, and a NIC or a RAID controller has
to be there before anything is loaded), with the driver options it depends on (the `if`
blocks, menus and `depends on` lines around it: ETHERNET, NET_VENDOR_INTEL for e1000e). A
dependency outside drivers/ (arch/, net/, init/...) is left as the kernel has it, so the
kernel's core stays the one under test; a driver that needs one is reported, not built.
"""
import functools
import gzip
import hashlib
import json
import pathlib
import re
from collections.abc import Callable
from typing import Any

from krig.errors import UsageError
from krig.safeio import printable
from . import kbuildmap
from .kconfig import parse_dotconfig

FORMAT = "krig-drivers 1"
SECTIONS = ("modules", "bound", "boot", "config")
SCOPES = ("boot", "all")
ROLES = ("net", "block")
_MODULE_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_WORD_RE = re.compile(r"^[A-Za-z0-9_.:+@-]{1,128}$")
MAX_BYTES = 4 << 20
MAX_DEPTH = 8


# What reads a rig's server (the rig's name, or its rig file's path; a log) into an inventory
# (parse_inventory's dict): a workflow's (workflows/serverdrivers.py server_drivers), passed to
# the kernel loaders by the workflow that loads a kernel.
ServerReader = Callable[[str, Callable[..., Any]], dict]


@functools.lru_cache(maxsize=4)
def tree_index(tree: str) -> tuple[dict, dict]:
    """(modules, kconfig) of a source tree, once a process."""
    return kbuildmap.modules(pathlib.Path(tree)), kbuildmap.kconfig(pathlib.Path(tree))


# -- the inventory ------------------------------------------------------------------

def _modules(lines, label: str) -> list:
    out = []
    for n, raw in lines:
        words = raw.split()
        if not words or words[0].startswith("#") or words[:2] == ["Module", "Size"]:
            continue
        if not _MODULE_RE.match(words[0]):
            raise UsageError(f"{label}:{n}: {words[0][:40]!r} is not a module name (letters, digits, _ and -)")
        name = words[0].replace("-", "_")
        if name not in out:
            out.append(name)
    return out


def _rows(lines, label: str, width: int, shape: str, first=None) -> list:
    """The lines of a table section as tuples of `width` words, the last one optional (then "");
    first: the words the first column may hold. Bad line: one line naming it and the shape."""
    out = []
    for n, raw in lines:
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) not in (width - 1, width) or (first is not None and words[0] not in first) \
                or not all(_WORD_RE.match(w) for w in words):
            raise UsageError(f"{label}:{n}: want `{shape}`, got {raw.strip()[:80]!r}")
        out.append(tuple(words) + (("",) if len(words) == width - 1 else ()))
    return out


def _bound(lines, label: str) -> list:
    return _rows(lines, label, 4, "bus device driver [module]")


def _boot(lines, label: str) -> list:
    return list(dict.fromkeys(_rows(lines, label, 6, "net|block name bus device driver [module]", ROLES)))


def _config(text: str, label: str) -> dict:
    cfg = parse_dotconfig(text)
    if not cfg:
        raise UsageError(f"{label}: no CONFIG_ line: not a kernel config")
    return cfg


def parse_inventory(text: str, label: str) -> dict:
    """The text form -> {"source", "release", "modules", "bound", "config"}; bad input: one line."""
    if len(text) > MAX_BYTES:
        raise UsageError(f"{label}: larger than {MAX_BYTES >> 20} MiB: not a driver inventory")
    lines = text.splitlines()
    if not lines or lines[0].strip() != FORMAT:
        raise UsageError(f"{label}: not a driver inventory (its first line is not {FORMAT!r})")
    parts: dict = {s: [] for s in SECTIONS}
    release, cur = None, None
    for n, raw in enumerate(lines[1:], 2):
        if raw.startswith("== "):
            cur = raw[3:].strip()
            if cur not in SECTIONS:
                raise UsageError(f"{label}:{n}: unknown section {cur!r}; allowed: {', '.join(SECTIONS)}")
        elif cur is None and raw.startswith("release "):
            release = printable(raw[8:].strip(), 128)      # a server's text: no escape sequence
        elif cur is not None:
            parts[cur].append((n, raw))
    inv: dict[str, Any] = {"source": label, "release": release, "modules": _modules(parts["modules"], label),
           "bound": _bound(parts["bound"], label), "boot": _boot(parts["boot"], label), "config": None}
    if any(raw.strip() for _, raw in parts["config"]):
        inv["config"] = _config("\n".join(raw for _, raw in parts["config"]), label)
    if not inv["modules"] and not inv["bound"] and not inv["boot"]:
        raise UsageError(f"{label}: no module, no bound driver and no boot device in it")
    return inv


def _read(path: pathlib.Path, label: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise UsageError(f"{label}: cannot read it ({e.strerror})") from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"{label}: larger than {MAX_BYTES >> 20} MiB: not a module list or config")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)[:MAX_BYTES]
        except (OSError, EOFError):
            raise UsageError(f"{label}: a damaged gzip file") from None
    return data.decode(errors="replace")


def read_inventory(path: pathlib.Path, label: str) -> dict:
    """An inventory given as files: the text form, a directory of modules/bound/config, or a module list."""
    path = pathlib.Path(path)
    if path.is_dir():
        if not (path / "modules").is_file():
            raise UsageError(f"{label}: the directory has no file `modules` (a copy of the server's "
                             "/proc/modules or `lsmod`'s output)")
        modules = _modules(enumerate(_read(path / "modules", f"{label}/modules").splitlines(), 1), f"{label}/modules")
        inv: dict[str, Any] = {"source": str(path), "release": None, "config": None, "modules": modules,
                               "bound": [], "boot": []}
        for part, fn in (("bound", _bound), ("boot", _boot)):
            if (path / part).is_file():
                inv[part] = fn(enumerate(_read(path / part, f"{label}/{part}").splitlines(), 1), f"{label}/{part}")
        if (path / "config").is_file():
            inv["config"] = _config(_read(path / "config", f"{label}/config"), f"{label}/config")
        if not inv["modules"] and not inv["bound"]:
            raise UsageError(f"{label}/modules: no module in it")
        return inv
    text = _read(path, label)
    if text.startswith(FORMAT):
        return {**parse_inventory(text, label), "source": str(path)}
    mods = _modules(enumerate(text.splitlines(), 1), label)
    if not mods:
        raise UsageError(f"{label}: no module in it (one module a line, as /proc/modules or lsmod)")
    return {"source": str(path), "release": None, "modules": mods, "bound": [], "boot": [], "config": None}


# -- the plan: which symbols, and why -------------------------------------------------

def _candidates(inv: dict, scope: str) -> list:
    """[(name to look up, where it came from)] in the order found: the boot devices' drivers
    (scope boot), or the modules, then the bound drivers (scope all)."""
    if scope == "boot":
        out, seen = [], set()
        for role, name, bus, dev, driver, module in inv.get("boot", []):
            if (module or driver) not in seen:
                seen.add(module or driver)
                out.append((module or driver, f"sysfs: {role} {name} -> {bus} {dev} {driver}"))
        return out
    out = [(m, "/proc/modules" if inv.get("from_server") else inv["source"]) for m in inv["modules"]]
    for bus, dev, driver, module in inv["bound"]:
        out.append((module or driver, f"sysfs: {bus} {dev} bound to {driver}"))
    return out


def scope_of(inv: dict, scope: str | None, label: str) -> str:
    """The scope a plan takes: the one asked, or boot when the inventory has a boot section."""
    if scope is not None and scope not in SCOPES:
        raise UsageError(f"{label}: drivers-scope={scope}: allowed: {', '.join(SCOPES)}")
    if scope == "boot" and not inv.get("boot"):
        raise UsageError(f"{label}: drivers-scope=boot but {inv['source']} has no boot section (the drivers of "
                         "the server's network cards and disks); give drivers-scope=all, or a rig krig reads")
    return scope or ("boot" if inv.get("boot") else "all")


def _available(inv: dict, candidates: list) -> list:
    """The modules and bound drivers of the inventory a boot-scope plan leaves out."""
    taken = {n for n, _ in candidates}
    names = list(inv["modules"]) + [module or driver for _, _, driver, module in inv["bound"]]
    return sorted({n for n in names if n not in taken})


def symbols_of(name: str, index: dict, config: dict | None) -> tuple[list, str | None]:
    """The driver symbols a module name maps to, or ([], why not)."""
    found = index.get(name.replace("-", "_"), [])
    if not found:
        return [], "no obj-$(CONFIG_...) += " + name + ".o in this tree's Makefiles"
    drv = [(s, d) for s, d in found if d == "drivers" or d.startswith("drivers/")]
    if not drv:
        return [], f"not a device driver ({found[0][1]}/): the kernel keeps its own"
    if config:
        on = [(s, d) for s, d in drv if config.get(s, "n") in ("y", "m")]
        drv = on or drv
    return drv, None


def plan(inv: dict, tree: pathlib.Path, kernel_config: dict, scope: str | None = None, label: str = "drivers=") -> dict:
    """What to add to a kernel whose fragments ask kernel_config, for the server of inv:
    {"config": {CONFIG_X: "y"}, "added": [...], "skipped": [...], "held": {...}, "scope", ...}."""
    index, kc = tree_index(str(tree))
    scope = scope_of(inv, scope, label)
    candidates = _candidates(inv, scope)
    config, added, skipped, seen = {}, [], [], set()
    for name, origin in candidates:
        syms, why = symbols_of(name, index, inv.get("config"))
        if why:
            if name not in seen:
                skipped.append({"module": name, "from": origin, "why": why})
            seen.add(name)
            continue
        for sym, d in syms:
            if sym in config:
                continue
            if kernel_config.get(sym) == "y":
                skipped.append({"module": name, "symbol": sym, "from": origin, "why": "the kernel has it already"})
                continue
            if kernel_config.get(sym) == "n":
                skipped.append({"module": name, "symbol": sym, "from": origin, "why": "the kernel turns it off"})
                continue
            config[sym] = "y"
            added.append({"module": name, "symbol": sym, "from": origin, "makefile": f"{d}/Makefile"})
    held = _dependencies(config, added, kc, kernel_config)
    return {"source": inv["source"], "release": inv.get("release"), "config": dict(sorted(config.items())),
            "added": added, "skipped": skipped, "held": held, "scope": scope,
            "available": _available(inv, candidates) if scope == "boot" else [],
            "hash": hashlib.sha256(json.dumps(sorted(config.items())).encode()).hexdigest()[:8]}


def _dependencies(config: dict, added: list, kc: dict, kernel_config: dict) -> dict:
    """The driver options the added symbols depend on, added too (bounded); returns the ones
    left as the kernel has them: {CONFIG_X: why}."""
    held, queue = {}, [(e["symbol"], 0) for e in added]
    while queue:
        sym, depth = queue.pop(0)
        info = kc.get(sym)
        if info is None or depth >= MAX_DEPTH:
            continue
        for expr in info.depends:
            for atom in kbuildmap.atoms(expr):
                dep = f"CONFIG_{atom}"
                if dep in config or kernel_config.get(dep) == "y" or dep in held:
                    continue
                d = kc.get(dep)
                if d is None:
                    continue
                if not d.where.startswith("drivers/"):
                    held[dep] = f"not a driver option ({d.where}): the kernel's own, left as it has it"
                elif not d.prompt or d.in_choice or d.type not in ("bool", "tristate"):
                    held[dep] = f"set by the kernel's config itself ({d.where}), not by a user"
                elif kernel_config.get(dep) == "n":
                    held[dep] = "the kernel turns it off"
                else:
                    config[dep] = "y"
                    added.append({"symbol": dep, "for": sym, "from": f"{info.where}: depends on {expr}"})
                    queue.append((dep, depth + 1))
    return held


def outcome(p: dict, final: dict, tree: pathlib.Path | None = None) -> list:
    """The plan's symbols the final .config does not build in, each with why:
    [{"symbol", "module", "value", "why"}]."""
    kc = tree_index(str(tree))[1] if tree else {}
    out = []
    by_symbol = {e["symbol"]: e for e in p["added"]}
    for sym in p["config"]:
        got = final.get(sym, "n")
        if got == "y":
            continue
        info = kc.get(sym)
        unmet = [f"CONFIG_{a}" for expr in (info.depends if info else []) for a in kbuildmap.atoms(expr)
                 if final.get(f"CONFIG_{a}", "n") != "y"]
        if unmet:
            why = "needs " + ", ".join(f"{u} ({p['held'].get(u, 'not set')})" for u in dict.fromkeys(unmet))
        elif info and info.depends:
            why = "its dependencies are not met: depends on " + " && ".join(info.depends)
        else:
            why = "not set after make olddefconfig (the symbol does not exist in this source?)"
        if got == "m":
            why = "a module only (" + why + ")"
        e = by_symbol.get(sym, {})
        out.append({"symbol": sym, "module": e.get("module") or e.get("for"), "value": got, "why": why})
    return out


def record(p: dict, final: dict, tree: pathlib.Path | None = None) -> dict:
    """What build.json and a run's manifest keep of it: where the drivers came from, module ->
    symbol -> source, what was skipped and what did not end up built in."""
    return {"source": p["source"], "release": p["release"], "hash": p["hash"], "scope": p.get("scope", "all"),
            "added": p["added"], "skipped": p["skipped"], "available": p.get("available", []),
            "not_built_in": outcome(p, final, tree)}
