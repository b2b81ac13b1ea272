"""`krig rig check RIG`: what can be checked of a rig without powering anything or booting a
kernel (rigs/check.py), one line an item as it is known, and the drivers inventory krig keeps of
a lab server (for `drivers=`). Exit 0 when every item is ok (a `--` line is something not
checked now, not a fault), 1 when one is not, 2 for a rig file that does not load (its one line
names the field)."""
import time

from kernels import drivers
from krig.errors import KrigError
from rigs import kept_drivers, load_rig
from rigs.check import BAD, CHECKS, bad, items, note, ok


def drivers_cache(name: str):
    """The server's drivers as last read for `drivers=` ($KRIG_CACHE/servers/<rig>.drivers)."""
    path = kept_drivers(name)
    if not path.is_file():
        return note("drivers", f"none kept yet ({path}): the first `drivers={name}` reads the server")
    try:
        inv = drivers.parse_inventory(path.read_text(errors="replace"), str(path))
    except KrigError as e:
        return bad("drivers", f"{e}: remove it, the next `drivers={name}` reads the server again", "(the cache)")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))
    boot = sorted({f"{role} {dev} -> {mod or drv}" for role, dev, _, _, drv, mod in inv.get("boot", [])})
    return ok("drivers", f"read {when}, release {inv.get('release') or '?'}"
              + (f": {', '.join(boot[:6])}" if boot else ": no boot section"))


def every_item(rig):
    """The rig's items (rigs/check.py), then the drivers kept of a lab server."""
    yield from items(rig)
    if rig.kind in CHECKS:
        yield drivers_cache(rig.name)


def cmd_rig_check(args) -> int:
    rig = load_rig(args.rig, "rig check")
    failed = 0
    try:
        for item in every_item(rig):
            print(item.line(), flush=True)
            failed += item.state == BAD
    finally:
        rig.close()
    print(f"rig {rig.name}: " + (f"{failed} item(s) to fix" if failed else "every item checked is ok"))
    return 1 if failed else 0
