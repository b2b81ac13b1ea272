"""Benchmark: the results history on SQLite, beside walking the run directories for the same question.

    python bench/bench_history.py [--runs N] [--scale M]

Makes N run directories (default 10,000) from a real run's records (tests/history_runs.py:
tests/data's neg-dentry-flood run, its kernel, rig, verdict and metric varied: 50 kernels, 4 rigs),
then times, each in its own process with its peak RSS:
  - `krig history import` of the N directories into a new store (target <= 60 s, <= 200 MB);
  - the trend question (`query.trend`: peak_negative_pct_ram of neg-dentry-flood on one SKU, per
    kernel, median and spread) on the store grown to N x M runs (default M = 10: 100,000 runs; the
    rows copied in SQL under new run directories and kernels) (target <= 200 ms, <= 200 MB);
  - the same question answered by walking the N run directories and reading each run's records
    (krig/record.py), as one would without the history.
Prints a row each: wall time, CPU time, peak RSS, target (on a shared machine wall time exceeds CPU
time; the load average is printed). Exits 1 if a step fails or the two answers over the
same N runs differ.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))      # tests/history_runs.py: run directories from real records

METRIC, REPRO = "peak_negative_pct_ram", "neg-dentry-flood"
SKU = "qemu-2c-1g"

TREND = """
import json, sys, time
from workflows.history import query, store
eng = store.engine(sys.argv[1])
t0, c0 = time.perf_counter(), time.process_time()
points = query.trend(eng, sys.argv[2], sys.argv[3], sku=sys.argv[4])
took, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"seconds": took, "cpu": cpu, "answer": [[p.kernel, len(p.values), p.median] for p in points]}))
"""

WALK = """
import json, os, statistics, sys, time
from krig.record import RunRecord
from workflows.history.remember import run_dirs_under
from workflows.history.rows import sku_of
from workflows.history.query import kernel_label
t0, c0 = time.perf_counter(), time.process_time()
by = {}
for d in run_dirs_under(sys.argv[1]):
    rec = RunRecord.read(d)
    m, v = rec.manifest, rec.verdict
    if m.reproducer != sys.argv[3] or not v or v.verdict not in ("PASS", "FAIL"):
        continue
    if sku_of(m.rig.kind, None, m.cpus, m.mem_total_bytes) != sys.argv[4]:
        continue
    value = rec.metrics.get(sys.argv[2])
    if value is None:
        continue
    git = m.kernel.git or {}
    label = kernel_label({"kernel": m.kernel.name, "kernel_release": m.release, "kernel_commit": git.get("commit")})
    first, vals = by.setdefault(label, [m.started, []])
    by[label][0] = min(first, m.started)
    vals.append(value)
took, cpu = time.perf_counter() - t0, time.process_time() - c0
answer = [[k, len(v), statistics.median(v)] for k, (first, v) in sorted(by.items(), key=lambda kv: (kv[1][0], kv[0]))]
print(json.dumps({"seconds": took, "cpu": cpu, "answer": answer}))
"""


def timed(argv: list, env: dict) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, stdout) of a child process (its own rusage: os.wait4)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err, text=True)
        _pid, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, argv[:6]))} failed ({p.returncode}): {err.read().strip()[-500:]}")
        return wall, usage.ru_maxrss / 1024, out.read()


_cpu_seen = [0.0]


def _children_cpu() -> float:
    """CPU seconds (user + system) of the children waited for since the last call."""
    import resource
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = u.ru_utime + u.ru_stime
    took, _cpu_seen[0] = total - _cpu_seen[0], total
    return took


def make_runs(root: pathlib.Path, n: int) -> None:
    from history_runs import make_run
    for i in range(n):
        k = f"v{i % 50:02d}"
        verdict = "FAIL" if (i % 50) >= 40 else "PASS"
        make_run(root, k, verdict, 1.0 + (i % 50) / 5 + (i % 7) / 10, rig=f"qemu-1g-{i % 4}",
                 started=f"2026-{1 + i // 2000 % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00+00:00",
                 commit=f"{i % 50:040x}", name=f"r{i:05d}")


def grow(url: str, copies: int) -> int:
    """The store's runs copied `copies - 1` times under new run directories and kernels (SQL): its size."""
    import sqlalchemy as sa
    from workflows.history import store
    eng = store.engine(url)
    cols = [c.name for c in store.runs.columns if c.name not in ("id", "run_dir", "kernel")]
    with eng.begin() as conn:
        top = conn.execute(sa.text("SELECT max(id) FROM runs")).scalar()
        for c in range(1, copies):
            conn.execute(sa.text(f"INSERT INTO runs (id, run_dir, kernel, {', '.join(cols)}) SELECT id + {c * top}, "
                                 f"run_dir || '-copy{c}', kernel || '-c{c}', {', '.join(cols)} FROM runs WHERE id <= {top}"))
            conn.execute(sa.text(f"INSERT INTO metrics (run_id, name, value, unit) SELECT run_id + {c * top}, name, "
                                 f"value, unit FROM metrics WHERE run_id <= {top}"))
            conn.execute(sa.text(f"INSERT INTO thresholds (run_id, name, outcome, limit_text) SELECT run_id + {c * top}, "
                                 f"name, outcome, limit_text FROM thresholds WHERE run_id <= {top}"))
        return conn.execute(sa.text("SELECT count(*) FROM runs")).scalar()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000, help="run directories made and imported (default 10000)")
    ap.add_argument("--scale", type=int, default=10, help="the store grown to runs x scale for the query (default 10)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="krig-bench-history-") as tmp:
        tmp = pathlib.Path(tmp)
        t0 = time.perf_counter()
        make_runs(tmp / "results", a.runs)
        _children_cpu()
        print(f"made {a.runs} run directories from a real run's records in {time.perf_counter() - t0:.1f} s")
        url = f"sqlite:///{tmp / 'history.sqlite'}"
        env = {**os.environ, "KRIG_HISTORY_URL": url, "PYTHONPATH": str(ROOT)}
        rows = [("what", "wall", "CPU", "peak RSS", "target")]
        wall, rss, out = timed([sys.executable, "-m", "workflows.cli", "history", "import", str(tmp / "results")], env)
        cpu = _children_cpu()
        rows.append((f"krig history import, {a.runs} run dirs", f"{wall:.2f} s", f"{cpu:.2f} s", f"{rss:.0f} MB",
                     "<= 60 s, <= 200 MB"))
        same = [sys.executable, "-c", TREND, url, METRIC, REPRO, SKU]
        _w, _r, small = timed(same, env)
        wall, rss, walked = timed([sys.executable, "-c", WALK, str(tmp / "results"), METRIC, REPRO, SKU], env)
        walk = json.loads(walked)
        rows.append((f"trend by walking {a.runs} run dirs", f"{walk['seconds']:.3f} s", f"{walk['cpu']:.3f} s",
                     f"{rss:.0f} MB", "-"))
        agree = json.loads(small)["answer"] == walk["answer"]
        n = grow(url, a.scale)
        wall, rss, out = timed(same, env)
        got = json.loads(out)
        rows.append((f"trend query, {n} runs in the store", f"{got['seconds'] * 1000:.1f} ms",
                     f"{got['cpu'] * 1000:.1f} ms", f"{rss:.0f} MB", "<= 200 ms, <= 200 MB"))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
        print(f"the store's answer over {a.runs} runs equals the walk's: {'yes' if agree else 'NO'}; "
              f"{len(got['answer'])} kernels over {n} runs; load {os.getloadavg()[0]:.1f}")
        return 0 if agree and got["answer"] else 1


if __name__ == "__main__":
    sys.exit(main())
