"""Benchmark: how long `krig --help` and `krig b4-check` take from start to exit, beside the bare
interpreter's start (`python -c pass`) in the same run.

    python bench/bench_startup.py [--runs N]

b4 runs `krig b4-check` once per patch of a series under review, so its start-up is most of
its cost: here it answers on a one-patch series (made with git format-patch in a temporary
directory) with one validation of another series in --dir, so it reads the series as it does
for a series krig has not validated. The three commands run in turn, N rounds (default 10),
the order rotating each round; each row is the median (min-max) of wall time and CPU time
(user + system, the process and its children), next to the target (150 ms).
The project's bytecode is compiled first (python -m compileall), as after an install: with
PYTHONDONTWRITEBYTECODE set, every start would otherwise compile every module it imports.
Prints the load average (the machine may be shared: on a loaded one wall time exceeds CPU time).
Exits 1 if a command fails or b4-check does not answer with one entry.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from krig.record_validation import SeriesProvenance, ValidationRecord, write_validation      # noqa: E402

KRIG = pathlib.Path(sys.executable).parent / "krig"
TARGET_S = 0.150
PACKAGES = ("krig", "kernels", "analysis", "rigs")


def compile_bytecode():
    """The project's bytecode, as after an install (python -m compileall)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)


def one_patch_series(tmp: pathlib.Path) -> pathlib.Path:
    """A one-patch series as git format-patch writes it."""
    repo = tmp / "tree"
    ident = ["-c", "user.name=A Developer", "-c", "user.email=dev@example.org"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "count.c").write_text("int count;\n")
    subprocess.run(["git", "-C", str(repo), "add", "count.c"], check=True)
    subprocess.run(["git", "-C", str(repo), *ident, "commit", "-q", "-m", "count"], check=True)
    (repo / "count.c").write_text("int count;\nint counted;\n")
    subprocess.run(["git", "-C", str(repo), *ident, "commit", "-q", "-a", "-m", "mm: count once"], check=True)
    out = subprocess.run(["git", "-C", str(repo), "format-patch", "-q", "-1", "-o", str(tmp / "series")],
                         check=True, capture_output=True, text=True).stdout.split()
    return pathlib.Path(out[0]) if out else next((tmp / "series").glob("*.patch"))


def validations(tmp: pathlib.Path) -> pathlib.Path:
    """--dir: one finished validation, of another series."""
    d = tmp / "validate"
    (d / "other").mkdir(parents=True)
    write_validation(d / "other", ValidationRecord(
        reproducer="selftest-pass", answer="fixed",
        series_provenance=SeriesProvenance(message_id="other@example.org", patchset_hash="0" * 64)))
    return d


def timed(argv: list, stdin: pathlib.Path | None) -> dict:
    """One run, from start to exit: wall seconds, CPU seconds (with its children)."""
    with open(stdin or os.devnull, "rb") as f:
        t = time.perf_counter()
        p = subprocess.Popen(argv, stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{' '.join(map(str, argv))}: exit {p.returncode}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime}


def spread(xs: list, fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="rounds of the three commands (default 10)")
    args = ap.parse_args(argv)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at the start: {load} ({os.cpu_count()} cpus)")
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="krig-bench-startup-") as td:
        tmp = pathlib.Path(td)
        patch, vdir = one_patch_series(tmp), validations(tmp)
        b4 = [str(KRIG), "b4-check", "--dir", str(vdir)]
        with open(patch, "rb") as f:
            answer = subprocess.run(b4, stdin=f, capture_output=True, text=True)
        if answer.returncode or len(json.loads(answer.stdout or "[]")) != 1:
            print(f"krig b4-check did not answer: {answer.stderr.strip()[-300:]}", file=sys.stderr)
            return 1
        cmds = [("python -c pass", [sys.executable, "-c", "pass"], None),
                ("krig --help", [str(KRIG), "--help"], None),
                ("krig b4-check (one patch)", b4, patch)]
        got = {name: [] for name, _, _ in cmds}
        for i in range(args.runs):
            for name, argv_, stdin in cmds[i % 3:] + cmds[:i % 3]:
                got[name].append(timed(argv_, stdin))
    base = statistics.median(r["wall_s"] for r in got["python -c pass"])
    print(f"\nstart to exit, median (min-max) of {args.runs} runs; cpu = user+sys")
    title = f"{'command':<28} {'wall ms':>17} {'cpu ms':>17} {'/ python':>8}  target"
    print(title + "\n" + "-" * len(title))
    for name, _, _ in cmds:
        rs = got[name]
        wall = statistics.median(r["wall_s"] for r in rs)
        target = "-" if name.startswith("python") else \
            f"wall < {TARGET_S * 1000:.0f} ms: {'met' if wall < TARGET_S else 'NOT met'}"
        print(f"{name:<28} {spread([r['wall_s'] * 1000 for r in rs], '.0f'):>17} "
              f"{spread([r['cpu_s'] * 1000 for r in rs], '.0f'):>17} {wall / base:>7.1f}x  {target}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cpus)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
