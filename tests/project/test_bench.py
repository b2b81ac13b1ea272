"""Benchmarks must stay runnable and correct; their speed is reported by `make bench`, not asserted."""
import re
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT


def test_trace_bench_quick_counts_agree():
    """The reader, `krig trace stats --group-by` and `trace-cmd report | grep | wc -l` count the
    same on v6 and v7+zstd."""
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_trace.py"), "--quick"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("xfs_")]
    counted = [line for line in rows if line.rstrip().endswith(("ok", "MISMATCH"))]
    assert len(counted) == 2 and all(line.rstrip().endswith("ok") for line in counted), p.stdout
    # krig trace stats, plain and grouped (--group-by), is timed on both files too; its count and
    # the sum of its groups were checked against the written events and trace-cmd (exit 0)
    assert len(rows) - len(counted) == 4, p.stdout
    assert p.stdout.count("krig trace stats --event xfs:xfs_ail_insert") == 2, p.stdout


def test_startup_bench_times_each_command_and_b4_check_answers():
    """bench_startup.py runs `krig --help`, `krig b4-check` on a one-patch series (it exits 1
    unless b4-check answers with one entry) and the bare interpreter, a row each."""
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_startup.py"), "--runs", "2"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("python -c pass", "krig --help", "krig b4-check (one patch)"):
        row = [line for line in p.stdout.splitlines() if line.startswith(name + " ")]
        assert len(row) == 1 and re.search(r"\d+ \(\d+-\d+\) +\d+ \(\d+-\d+\) +[\d.]+x", row[0]), p.stdout


@pytest.mark.guest
def test_flood_bench_pairs_agree():
    """bench_rig.py's flood comparison on a real guest: every round measures both the bare
    stat() loop and negflood (in the alternating order it says), each at a positive rate,
    and the median it prints is the median of the printed pairwise ratios."""
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_rig.py"), "--skip-overhead",
                        "--flood-seconds", "1", "--flood-rounds", "2"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    rounds = re.findall(r"round (\d) \((bare|negflood) first\): bare stat loop ([\d,]+) lookups/s, "
                        r"negflood ([\d,]+) lookups/s, ratio ([\d.]+)", p.stdout)
    assert [(r[0], r[1]) for r in rounds] == [("1", "bare"), ("2", "negflood")], p.stdout
    ratios = []
    for _, _, bare, gen, ratio in rounds:
        bare, gen = float(bare.replace(",", "")), float(gen.replace(",", ""))
        assert bare > 0 and gen > 0, p.stdout
        assert abs(gen / bare - float(ratio)) < 0.006, p.stdout
        ratios.append(gen / bare)
    med = re.search(r"median of 2 pairwise ratios ([\d.]+)", p.stdout)
    assert med and abs(float(med.group(1)) - statistics.median(ratios)) < 0.006, p.stdout


def test_history_bench_answers_as_the_walk():
    """bench_history.py on a few hundred run directories: the store's trend answer equals the one
    from walking the run directories, and every row is printed (its times are reported, not asserted)."""
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_history.py"), "--runs", "200", "--scale", "2"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "the store's answer over 200 runs equals the walk's: yes" in p.stdout, p.stdout
    for row in ("krig history import, 200 run dirs", "trend by walking 200 run dirs", "trend query, 400 runs"):
        assert any(line.startswith(row) and " MB " in line for line in p.stdout.splitlines()), p.stdout
