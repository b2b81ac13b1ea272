"""What collection costs: the xfs-ail-storm smoke workload with and without
tracing and sampling, alternating (pairs, the order flipped every pair), on the
default rig. Reports the create phase's wall time (phases.tsv) of each run, the
ratio of each pair and the median of those ratios. Target: at most 1.05.
bench/collect_breakdown.py shows where the cost goes (one guest, several ways of
collecting).
"""
import os
import argparse
import pathlib
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.rundata import RunData  # noqa: E402
from kernels.catalog import load_kernel  # noqa: E402
from krig.errors import KrigError  # noqa: E402
from workflows.run import run  # noqa: E402


def create_seconds(run_dir) -> float:
    ph = RunData(run_dir).phases()
    return ph["sync"] - ph["create"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5, help="pairs (at least 3 for the target; 5: the pairs scatter by +-12%%)")
    ap.add_argument("--kernel", default=None, help="default: tiny-6.1 if it is built, else distro")
    ap.add_argument("--files", type=int, default=None, help="override the smoke preset's file count")
    ap.add_argument("--rig", default="qemu-default",
                    help="rig name or file (a rig with tcg_clocksource = \"kernel\" shows the HPET's cost)")
    a = ap.parse_args()
    sets = {"files": str(a.files)} if a.files else {}
    if a.kernel is None:
        try:
            a.kernel = "tiny-6.1" if load_kernel("tiny-6.1").image.exists() else "distro"
        except KrigError:  # not built
            a.kernel = "distro"
    times = {True: [], False: []}
    load = os.getloadavg()
    print(f"xfs-ail-storm smoke on {a.kernel}, rig {a.rig}, {a.repeats} pairs; load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cpus)", flush=True)
    with tempfile.TemporaryDirectory(prefix="krig-bench-") as td:
        for i in range(a.repeats):
            for collect in ((False, True) if i % 2 == 0 else (True, False)):
                d, v = run("xfs-ail-storm", rig_name=a.rig, kernel_name=a.kernel, preset="smoke", sets=sets,
                           results_root=pathlib.Path(td), log=lambda *_: None, collect=collect)
                t = create_seconds(d)
                times[collect].append(t)
                clock = RunData(d).record.manifest.machine_said.clocksource or "?"
                print(f"pair {i + 1} {'traced+sampled' if collect else 'bare          '}: create {t:.1f} s"
                      f" (clocksource {clock}{', ' + v.verdict if collect else ''})", flush=True)
    ratios = [f / b for f, b in zip(times[True], times[False])]
    med = statistics.median(ratios)
    load = os.getloadavg()
    print(f"pairwise traced/bare: {' '.join(f'{r:.3f}' for r in ratios)}; median {med:.3f} "
          f"(target <= 1.05: {'met' if med <= 1.05 else 'NOT met'}); load average at the end "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
