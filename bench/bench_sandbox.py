"""What the build sandbox costs: one kernel rebuild step in a built tiny-6.1 tree, run
in bubblewrap (kernels/sandbox.py) and without it, alternating (pairs, the order
flipped every pair). The step: touch fs/dcache.c, then `make bzImage` (one compile,
the vmlinux link and the bzImage). Reports each pair's ratio (sandboxed / plain) and
their median. Target: at most 1.02 (namespaces and bind mounts cost once per make,
not per compile).
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels import incremental as kt  # noqa: E402
from kernels import sandbox  # noqa: E402
from kernels.build import build  # noqa: E402


def step(tree: pathlib.Path, box: bool) -> float:
    (tree / "fs" / "dcache.c").touch()
    argv = kt.boxed(["make", "ARCH=x86_64", f"-j{os.cpu_count() or 1}", "bzImage"], tree, box)
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=tree, env=kt.clean_env(), capture_output=True, text=True)
    took = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"bench_sandbox: make failed ({'sandboxed' if box else 'plain'}): {p.stderr[-300:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3, help="pairs (default 3)")
    a = ap.parse_args()
    why = sandbox.problem()
    if why:
        print(f"bench_sandbox: the sandbox cannot run here: {why}")
        return 1
    meta = build("tiny-6.1", log=lambda m: None)
    tree = pathlib.Path(meta["tree"])
    load = os.getloadavg()
    print(f"touch fs/dcache.c + make bzImage in {tree.name}, {a.repeats} pairs; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cpus)", flush=True)
    with kt.locked(tree.with_name(tree.name + ".lock"), print, f"build tree {tree.name}"):
        step(tree, False)                       # once, so both sides start from a built tree
        ratios = []
        for i in range(a.repeats):
            order = (True, False) if i % 2 == 0 else (False, True)
            t = {box: step(tree, box) for box in order}
            ratios.append(t[True] / t[False])
            print(f"pair {i + 1}: sandboxed {t[True]:.1f}s, plain {t[False]:.1f}s, ratio {ratios[-1]:.3f} "
                  f"(first: {'sandboxed' if order[0] else 'plain'})", flush=True)
    med = statistics.median(ratios)
    load = os.getloadavg()
    print(f"median ratio sandboxed/plain {med:.3f} (target <= 1.02: {'met' if med <= 1.02 else 'NOT met'}); "
          f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
