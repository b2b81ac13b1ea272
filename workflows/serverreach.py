"""A kernel that cannot reach its lab server is refused before its kexec (kernels/reach.py): the
server's network cards and disks, and their drivers, from its inventory (what `drivers=`
reads: this process's reading, or the one kept in $KRIG_CACHE/servers/<rig>.drivers).

Known before the run (read or kept): the kernel is refused once it is built or loaded, before
anything is powered or booted (bad input, one line). Not known yet: the rig asks at its kexec
(the boot's `reach`: at_kexec), once its installed system is up, reads it there over SSH and keeps it;
the run is then ERROR with the same line, the kernel never kexec'd. QEMU rigs boot whatever
they are given: not checked.
"""
from kernels import drivers, reach
from krig.errors import RigError, UsageError
from rigs import kept_drivers, read_running_drivers

from . import serverdrivers


def _applies(rig) -> bool:
    """A rig that boots the kernel it is given on a machine whose installed system says which
    drivers that machine needs (a lab server with boot = "kexec")."""
    return rig.installed_drivers() is not None and rig.boots_installed_only() is None


def known(name: str) -> dict | None:
    """The server's inventory read this process, or kept from an earlier one; None when neither."""
    if name in serverdrivers.READ:
        return serverdrivers.READ[name]
    path = kept_drivers(name)
    if not path.is_file():
        return None
    try:
        return drivers.parse_inventory(path.read_text(errors="replace"), str(path))
    except UsageError:
        return None


def before_run(rig, kernel) -> None:
    """Refuse a kernel the rig's server is known to be unreachable with (UsageError)."""
    if not _applies(rig):
        return
    inv = known(rig.name)
    said = reach.refusal(inv, kernel, rig.spec.scratch_dev, rig.name) if inv else None
    if said:
        raise UsageError(f"rig {rig.name}: {said}; nothing was booted")


def at_kexec(server, kernel, warm: bool) -> str | None:
    """rigs/protocol.py ReachCheck: the line refusing `kernel` on `server` (an IpmiServer up in the system to
    kexec from), reading its inventory there when it is not known yet."""
    if reach.tree_of(kernel) is None:       # not a kernel krig built: not judged, nothing read
        return None
    inv = known(server.name)
    if inv is None:
        try:
            text = read_running_drivers(server)
        except RigError as e:           # the run goes on as it would have: the check is a help, not a gate
            server.facts["reach_check"] = f"not checked: {e}"
            return None
        if not warm:                # the installed system's, as `drivers=` reads it: kept
            path = kept_drivers(server.name)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
        inv = drivers.parse_inventory(text, f"rig {server.name}")
    return reach.refusal(inv, kernel, server.spec.scratch_dev, server.name)
