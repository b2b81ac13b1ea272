"""`make bench`: every benchmark, each against its obvious alternative in the same run."""
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
BENCHES = [
    ("krig --help and krig b4-check start-up vs the bare interpreter's", ["bench_startup.py"]),
    ("trace reader vs trace-cmd report | grep | wc -l", ["bench_trace.py"]),
    ("rig overhead vs virtme-ng; flood generator vs bare stat loop", ["bench_rig.py"]),
    ("xfs-ail-storm smoke with and without tracing and sampling", ["bench_collect.py"]),
    ("a kernel rebuild step in the build sandbox vs without it", ["bench_sandbox.py"]),
    ("results history: import of 10,000 runs, a trend over 100,000, vs walking the run dirs", ["bench_history.py"]),
]


def main() -> int:
    rc = 0
    for title, argv in BENCHES:
        print(f"\n######## {title}", flush=True)
        p = subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]])
        rc = rc or p.returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
