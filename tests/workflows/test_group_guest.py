"""`krig run --repeat`, `krig compare` and `krig export kcidb` on real guest runs (selftest-pass, 3 boots)."""
import json
import os
import shutil
import statistics
import subprocess

import pytest

import kcidb_checks
from conftest import KRIG, ROOT

pytestmark = pytest.mark.guest


def krig(tmp_path, *args, timeout=900):
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)


def metric(run_dir, name):
    return json.loads((run_dir / "metrics.json").read_text())[name]["value"]


def test_group_resumes_and_compare_matches_metrics_json(tmp_path, no_leftover_qemu):
    g = tmp_path / "group"
    p = krig(tmp_path, "run", "selftest-pass", "--repeat", "2", "--group", str(g))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "group: PASS 2/2" in p.stdout
    first = json.loads((g / "group.json").read_text())
    assert [r["dir"] for r in first["runs"]] == ["run-01", "run-02"] and first["complete"]
    stamp = {d: (g / d / "verdict.json").stat().st_mtime_ns for d in ("run-01", "run-02")}

    # the same command with a larger --repeat continues the group: only run-03 is new
    p = krig(tmp_path, "run", "selftest-pass", "--repeat", "3", "--group", str(g))
    assert p.returncode == 0, p.stdout + p.stderr
    group = json.loads((g / "group.json").read_text())
    assert [r["dir"] for r in group["runs"]] == ["run-01", "run-02", "run-03"]
    assert group["verdicts"] == {"PASS": 3}
    assert stamp == {d: (g / d / "verdict.json").stat().st_mtime_ns for d in stamp}, "finished runs not redone"
    runs = [g / f"run-0{i}" for i in (1, 2, 3)]
    gaps = [metric(d, "sampler_max_gap_intervals") for d in runs]
    s = group["metrics"]["sampler_max_gap_intervals"]
    assert (s["n"], s["median"], s["min"], s["max"]) == (3, statistics.median(gaps), min(gaps), max(gaps))

    # a different parameter is refused before anything runs
    p = krig(tmp_path, "run", "selftest-pass", "--repeat", "3", "--group", str(g), "--set", "files=7")
    assert p.returncode == 2 and "made for params" in p.stderr and len(p.stderr.strip().splitlines()) == 1

    out = tmp_path / "cmp"
    p = krig(tmp_path, "compare", "--json", "--out", str(out), str(runs[0]), str(runs[1]), "--", str(runs[2]))
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    row = next(r for r in res["metrics"] if r["metric"] == "sampler_max_gap_intervals")
    base = gaps[:2]
    assert row["base"] == {"n": 2, "median": statistics.median(base), "min": min(base), "max": max(base)}
    assert row["new"]["median"] == gaps[2]
    assert row["change_pct"] == pytest.approx(100 * (gaps[2] - statistics.median(base)) / statistics.median(base))
    assert not row["significant"] and not row["reachable"]       # 2 vs 1 can never be
    html = (out / "compare.html").read_text()
    assert "sampler_max_gap_intervals" in html and "PASS 2/2" in html

    # the group against a copy of itself: identical samples, nothing significant, no flips
    # (the group against itself, the same directories on both sides, is refused)
    p = krig(tmp_path, "compare", "--out", str(out), str(g), "--", str(g))
    assert p.returncode == 2 and "are BASE's too" in p.stderr, p.stderr
    twin = tmp_path / "twin"
    shutil.copytree(g, twin)
    p = krig(tmp_path, "compare", "--out", str(out), str(g), "--", str(twin))
    assert p.returncode == 0, p.stderr
    rows = {prefix: [ln for ln in p.stdout.splitlines() if ln.startswith(prefix)]
            for prefix in ("answer", "files_seen", "sampler")}
    assert all(rows.values()), f"metric rows missing from the comparison: {rows}\n{p.stdout}"
    assert "*" not in "".join(ln for lines in rows.values() for ln in lines)
    assert "FLIPS" not in p.stdout
    # the table within 100 columns (the last line names compare.html: a path, as long as it is)
    assert max(len(ln) for ln in p.stdout.splitlines() if not ln.startswith("compare.html: ")) <= 100

    # the group as a KCIDB report: its three runs, each threshold with its number
    report = kcidb_checks.export(lambda *a: krig(tmp_path, *a), tmp_path / "kcidb", g)
    kcidb_checks.check_report(report, runs)
    assert len(report["builds"]) == 1 and len({t["id"] for t in report["tests"]}) == len(report["tests"])
