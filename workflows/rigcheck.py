"""`krig rig check RIG`: what can be checked of a rig without powering anything or booting a
kernel (rigs/check.py), one line an item as it is known. Exit 0 when every item is ok (a `--`
line is something not checked now, not a fault), 1 when one is not, 2 for a rig file that does
not load (its one line names the field)."""
from rigs import load_rig
from rigs.check import BAD, items


def cmd_rig_check(args) -> int:
    rig = load_rig(args.rig, "rig check")
    failed = 0
    try:
        for item in items(rig):
            print(item.line(), flush=True)
            failed += item.state == BAD
    finally:
        rig.close()
    print(f"rig {rig.name}: " + (f"{failed} item(s) to fix" if failed else "every item checked is ok"))
    return 1 if failed else 0
