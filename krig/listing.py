"""`krig list`: the reproducers with their presets, the rigs and the kernels this checkout has."""
from kernels.catalog import kernel_names, load_kernel
from rigs import load_rig, rig_names

from .errors import KrigError
from .reproducer import load_reproducer, reproducer_names


def cmd_list(a) -> int:
    print("reproducers:")
    for n in reproducer_names():
        r = load_reproducer(n)
        first = r.description.splitlines()[0] if r.description else ""
        print(f"  {n:24s} presets: {', '.join(sorted(r.presets)) or '-':26s} {first}")
    print("rigs:")
    for n in rig_names():
        try:
            rig = load_rig(n)
            print(f"  {n:24s} {rig.kind:6s} {rig.spec.get('description', '')}")
        except KrigError as e:
            print(f"  {n:24s} INVALID: {e}")
    print("kernels:")
    not_built = False
    for n in kernel_names():
        try:
            k = load_kernel(n)
            print(f"  {n:32s} {k.release:40s} {k.description}")
        except KrigError as e:
            if type(e).__name__ == "KernelNotBuilt":
                print(f"  {n:32s} {'(not built)':40s} {e.description}")
                not_built = True
            else:
                print(f"  {n:32s} (not available: {e})")
    if not_built:
        print("  (build one with `krig kernel build <name>`)")
    return 0
