"""Rigs: machines that run reproducers. See rigs/protocol.py for the protocols.

A rig is a file rigs/<name>.toml whose `driver` names an implementation.
Rig files may also live in the user's own rig directory ($XDG_CONFIG_HOME/krig/rigs,
default ~/.config/krig/rigs: `krig lab sim up` writes there) and in the directories
listed in KRIG_RIG_PATH (':'-separated), searched in that order after rigs/, or be
given as a path to a .toml file.
"""
import copy
import importlib
import os
import pathlib

from krig import RIG_DIR
from krig.config import load_toml
from krig.errors import UsageError

# What the runner asks of rigs besides a Rig (rigs/protocol.py): a rig file's lab tags (krig lab
# sync), and the secrets rig files took from the environment, handed to worker processes
# (krig qualify). Only the IPMI driver has either today; the runner names none of its modules,
# and a run that loads no IPMI rig does not import them (they are imported when first asked).
from .protocol import SECRETS_FILE_ENV  # noqa: E402,F401 (names the handed-over secrets in a worker)


def lab_tags(spec: dict, where: str) -> dict[str, str]:
    """A rig file's labgrid place tags (rigs/ipmi/spec.py)."""
    from rigs.ipmi.spec import lab_tags as tags
    return tags(spec, where)


def hand_over_secrets():
    """The secrets rig files took so far, for worker processes (rigs/ipmi/spec.py)."""
    from rigs.ipmi.spec import hand_over_secrets as hand_over
    return hand_over()


def memory_refusal(mem: int, avail: int) -> str | None:
    """Why a guest of mem bytes does not fit the host's budget (MemAvailable avail), or None
    (rigs/qemu/memory.py: the rule the QEMU rig and the simulated lab server admit by)."""
    from rigs.qemu.memory import refusal
    return refusal(mem, avail)


def read_running_drivers(server) -> str:
    """What a lab server that is up runs: its modules, bound drivers, boot devices and config, read
    over its SSH (rigs/ipmi/drivers.py)."""
    from rigs.ipmi.drivers import read_running
    return read_running(server)


def kept_drivers(name: str) -> pathlib.Path:
    """Where the last reading of rig `name`'s server drivers is kept (rigs/ipmi/drivers.py)."""
    from rigs.ipmi.drivers import kept
    return kept(name)


def take_handed_secrets() -> None:
    """In a worker: the secrets its parent handed over (rigs/ipmi/spec.py)."""
    from rigs.ipmi.spec import take_handed_secrets as take
    take()

# driver name -> "module:Class"; a new kind of rig is one module and one line here.
DRIVERS = {
    "qemu": "rigs.qemu.rig:QemuRig",
    "ipmi": "rigs.ipmi.rig:IpmiRig",
    "redfish": "rigs.redfish.rig:RedfishRig",
    "fake": "rigs.fake:FakeRig",      # no machine: fast tests of the runner (rigs/fake.py)
}


def user_rig_dir() -> pathlib.Path:
    """The user's own rig files: $XDG_CONFIG_HOME/krig/rigs (default ~/.config/krig/rigs)."""
    return pathlib.Path(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "krig", "rigs")


def rig_dirs() -> list[pathlib.Path]:
    extra = [pathlib.Path(d) for d in os.environ.get("KRIG_RIG_PATH", "").split(":") if d]
    return [RIG_DIR, user_rig_dir()] + extra


def rig_names() -> list[str]:
    return sorted({p.stem for d in rig_dirs() for p in d.glob("*.toml")})


def rig_places() -> str:
    """Where rig files are found, as errors and --help say it."""
    extra = os.environ.get("KRIG_RIG_PATH", "")
    return (f"rigs/, {user_rig_dir()} (`krig lab sim up` writes there), then KRIG_RIG_PATH "
            + (f"({extra})" if extra else "(not set)"))


def rig_path(name: str) -> pathlib.Path | None:
    if name.endswith(".toml") or "/" in name:
        p = pathlib.Path(name).expanduser()
        return p if p.is_file() else None
    for d in rig_dirs():
        p = d / f"{name}.toml"
        if p.is_file():
            return p
    return None


def load_rig(name: str, what: str = "--rig"):
    """The rig `name` (a name of rigs/ or KRIG_RIG_PATH, or a rig file's path); errors name it
    as `what` (the option or argument that gave it)."""
    path = rig_path(name)
    if path is None and (name.endswith(".toml") or "/" in name):
        p = pathlib.Path(name).expanduser()
        why = "a directory, not a rig file" if p.is_dir() else "no such file"
        raise UsageError(f"{what} {name}: {why} (a rig file's path, or a rig's name: {', '.join(rig_names())}, "
                         f"found in {rig_places()})")
    if path is None:
        raise UsageError(f"{what} {name!r}: unknown rig; allowed: {', '.join(rig_names())} (rig files are "
                         f"found in {rig_places()}; or give a rig file's path)")
    if name.endswith(".toml") or "/" in name:
        where = name                    # the path exactly as the user gave it
    else:
        where = f"rigs/{path.name}" if path.parent == RIG_DIR else str(path)
    spec = load_toml(path, what)
    if "driver" not in spec:
        raise UsageError(f"{where}: missing required field 'driver' (one of {', '.join(DRIVERS)})"
                         + ("; the file is empty" if not spec else ""))
    driver = spec["driver"]
    if driver not in DRIVERS:
        raise UsageError(f"{where}.driver: {driver!r} is not one of {', '.join(DRIVERS)}")
    mod, cls = DRIVERS[driver].split(":")
    rig_cls = getattr(importlib.import_module(mod), cls)
    arg = name if name.endswith(".toml") or "/" in name else None   # a rig file's path, as given: a rerun names it

    def make():
        spec_copy = copy.deepcopy(spec)
        rig = rig_cls(path.stem, spec_copy, path=where) if getattr(rig_cls, "takes_path", False) \
            else rig_cls(path.stem, spec_copy)
        rig.arg, rig._make = arg, make
        return rig
    return make()
