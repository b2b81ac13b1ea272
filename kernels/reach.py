"""Can a kernel reach the server it is kexec'd on? The server's network cards and disks, and
the drivers each hangs off, are in its inventory's boot section (kernels/drivers.py: read from
the server's installed system for `drivers=`); a kernel whose .config builds none of the drivers
of any network card (SSH never answers), or not those of the scratch disk or of every disk (the
root file system), is refused before its kexec, naming the device, the CONFIG_ symbol it lacks
and the `drivers=` that adds it.

A driver is mapped to its symbols the way `drivers=` maps it (the source tree's `obj-$(CONFIG_X)
+= name.o` lines; when the server's own config is known, the symbols it sets). Only a kernel
krig built is judged (its build.json names its source tree); a driver the tree does not map (a
bus's own, such as pcieport) is not judged.
"""
import json
import pathlib

from . import drivers
from .kconfig import parse_dotconfig


def tree_of(kernel) -> pathlib.Path | None:
    """The source tree a kernel krig built was built from (its build.json), None for any other."""
    cfg = pathlib.Path(kernel.config) if getattr(kernel, "config", None) else None
    if cfg is None:
        return None
    try:
        tree = json.loads((cfg.parent / "build.json").read_text()).get("tree")
    except (OSError, ValueError):
        return None
    return pathlib.Path(tree) if tree and pathlib.Path(tree, "Makefile").is_file() else None


def lacking(inv: dict, kernel) -> dict:
    """{(role, name): [(driver, [CONFIG_X...]), ...]}: each network card and disk of the server, and
    the drivers of its chain the kernel's .config builds neither in nor as a module. {} when the
    kernel is not one krig built (no tree known) or the inventory has no boot section."""
    tree = tree_of(kernel)
    if tree is None or not inv.get("boot"):
        return {}
    config = parse_dotconfig(pathlib.Path(kernel.config).read_text(errors="replace"))
    index = drivers.tree_index(str(tree))[0]
    out: dict = {}
    for role, name, _bus, _dev, driver, module in inv["boot"]:
        out.setdefault((role, name), [])
        syms, why = drivers.symbols_of(module or driver, index, inv.get("config"))
        if why is None and not any(config.get(s) in ("y", "m") for s, _ in syms):
            out[(role, name)].append((module or driver, [s for s, _ in syms]))
    return out


def refusal(inv: dict, kernel, scratch_dev: str = "", rig: str = "") -> str | None:
    """One line when the kernel cannot reach the server: no network card it has every driver of, or
    a disk it lacks a driver of (the scratch disk, or every disk: the root file system is on one
    of them); None when it can (or cannot be judged)."""
    found = lacking(inv, kernel)
    nets = {k: v for k, v in found.items() if k[0] == "net"}
    disks = {k: v for k, v in found.items() if k[0] == "block"}
    scratch = scratch_dev.rsplit("/", 1)[-1] if scratch_dev else ""
    bad = []
    if nets and all(nets.values()):
        bad += [(k, v) for k, v in nets.items()]
    if scratch and disks.get(("block", scratch)):
        bad.append((("block", scratch), disks[("block", scratch)]))
    elif disks and all(disks.values()):
        bad += [(k, v) for k, v in disks.items()]
    if not bad:
        return None
    said = "; ".join(f"{'network card' if role == 'net' else 'disk'} {name} needs driver "
                     + ", ".join(f"{drv} ({' or '.join(syms)})" for drv, syms in missing)
                     for (role, name), missing in bad)
    return (f"kernel {kernel.release} cannot reach the server: its .config lacks drivers the server's devices "
            f"use: {said} (neither =y nor =m); build it with them: --kernel {kernel.arg or kernel.name},drivers={rig}")
