"""Rigs: machines that run reproducers. See rigs/protocol.py for the protocols.

A rig is a file rigs/<name>.toml whose `driver` names an implementation.
"""
import importlib

from krig import RIG_DIR
from krig.config import load_toml
from krig.errors import UsageError

# driver name -> "module:Class"; a new kind of rig is one module and one line here.
DRIVERS = {
    "qemu": "rigs.qemu:QemuRig",
    "ipmi": "rigs.ipmi:IpmiRig",
}


def rig_names() -> list[str]:
    return sorted(p.stem for p in RIG_DIR.glob("*.toml"))


def load_rig(name: str):
    path = RIG_DIR / f"{name}.toml"
    if not path.is_file():
        raise UsageError(f"--rig {name!r}: unknown rig; allowed: {', '.join(rig_names())}")
    spec = load_toml(path)
    driver = spec.get("driver")
    if driver not in DRIVERS:
        raise UsageError(f"rigs/{name}.toml.driver: {driver!r} is not one of {', '.join(DRIVERS)}")
    mod, cls = DRIVERS[driver].split(":")
    return getattr(importlib.import_module(mod), cls)(name, spec)
