"""What collection costs: the xfs-ail-storm smoke workload with and without
tracing and sampling, alternating, on the default rig. Reports the create
phase's wall time (phases.tsv) and the slowdown. Target: at most 5%.
"""
import argparse
import pathlib
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.rundata import RunData  # noqa: E402
from krig.run import run  # noqa: E402


def create_seconds(run_dir) -> float:
    ph = RunData(run_dir).phases()
    return ph["sync"] - ph["create"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--files", type=int, default=None, help="override the smoke preset's file count")
    a = ap.parse_args()
    sets = {"files": str(a.files)} if a.files else {}
    times = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="krig-bench-") as td:
        for i in range(a.repeats):
            for collect in (False, True):
                d, v = run("xfs-ail-storm", preset="smoke", sets=sets, results_root=pathlib.Path(td),
                           log=lambda *_: None, collect=collect)
                t = create_seconds(d)
                times[collect].append(t)
                print(f"run {i + 1} {'traced+sampled' if collect else 'bare          '}: create {t:.1f} s"
                      f"{' (' + v['verdict'] + ')' if collect else ''}")
    bare, full = statistics.median(times[False]), statistics.median(times[True])
    slow = 100.0 * (full - bare) / bare
    print(f"median create: bare {bare:.1f} s, traced+sampled {full:.1f} s, slowdown {slow:+.1f}% "
          f"(target <= 5%: {'met' if slow <= 5 else 'NOT met'})")


if __name__ == "__main__":
    main()
