"""`--kernel KERNEL,drivers=RIG`: the drivers of a rig's server, for kernels/drivers.py.

Read from the server (rigs/ipmi/drivers.py) once a krig process, and kept in
$KRIG_CACHE/servers/<rig>.drivers: a server found off is read from there rather than powered
on only to be read (the reading says when it was made); one never read is powered on into its
installed system, read, and left on for the run that follows.
"""
import pathlib
import time

from kernels import drivers
from krig.errors import UsageError
from rigs import kept_drivers, load_rig, rig_names, rig_path
from rigs import read_server_drivers as read

READ: dict = {}            # rig name -> inventory, this process


def check_named(value: str, label: str = "") -> None:
    """drivers=VALUE names something: a file or directory, or a rig (its name or its file)."""
    if pathlib.Path(value).expanduser().exists() or rig_path(value) is not None:
        return
    raise UsageError(f"{label}drivers={value}: no such file or directory, and no rig of that name; rigs: "
                     f"{', '.join(rig_names())}")


def server_drivers(name: str, log=print) -> dict:
    """The inventory of rig `name`'s server (kernels.drivers.rig_reader)."""
    if name in READ:
        return READ[name]
    check_named(name)
    rig = load_rig(name, "drivers=")
    kept = kept_drivers(rig.name)
    if kept.is_file() and getattr(rig, "kind", None) in ("ipmi", "redfish") and rig.power.status() == "off":
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(kept.stat().st_mtime))
        log(f"krig: {name} is off: its drivers as read on {when} ({kept})")
        text = kept.read_text(errors="replace")
        getattr(rig.bmc, "close", lambda: None)()       # a Redfish session logged out
    else:
        text = read(rig, log)
        tmp = kept.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(kept)
    inv = drivers.parse_inventory(text, f"rig {name}")
    inv.update(source=f"rig {name}" + (f" ({inv['release']})" if inv.get("release") else ""), from_server=True)
    READ[name] = READ[rig.name] = inv      # a rig file's path too: by its rig's name (workflows/serverreach.py)
    return inv
