"""A run projected to other machine sizes (analysis/projection.py, neg-dentry-flood's model):
the settled level per dentry hash bucket times the buckets 6.1 gives each size, or an
unbounded flood's time to the limit at its rate per CPU; labelled as a projection in
summary.txt, report.html, projection.json, `krig compare --json` and the reply, and never
made for a run that told neither. Synthetic run directories, `krig check` as a user runs it;
the real per-bucket floods at a big machine's density are in test_flood_retention.py."""
import json

import numpy as np
import pytest

from krig import hashsize
from krig.record_validation import ValidationRecord
from workflows.compare import compare
from workflows.reply import write_reply
from test_flood_stop import LIMIT_2G, _past_limit, flood_run_dir

BUCKETS_2G = 262144            # 6.1's dentry hash table on 2 GiB: one bucket per 8 KiB


def _settled(tmp_path, name="run", level=799_000.0, buckets=BUCKETS_2G):
    ramp = np.minimum(1000 + 40_000.0 * np.arange(1, 33), level)
    neg = np.concatenate([np.full(5, 1000.0), ramp, np.full(3, level)])
    d = flood_run_dir(tmp_path / name, _past_limit("plateau", level - 1000, 0.0), range(len(neg)), neg, 5,
                      len(neg) - 3)
    man = json.loads((d / "manifest.json").read_text())
    man["machine"]["dentry_hash_entries"] = buckets
    (d / "manifest.json").write_text(json.dumps(man))
    return d


def _unbounded(tmp_path, name="run"):
    top = 1000 + 2 * LIMIT_2G / 192
    neg = np.concatenate([np.full(5, 1000.0), np.minimum(1000 + 40_000.0 * np.arange(1, 30), top), np.full(3, top)])
    return flood_run_dir(tmp_path / name, _past_limit("bound", top - 1000, 0.98), range(len(neg)), neg, 5,
                         len(neg) - 3)


def test_settled_level_projected_per_bucket(tmp_path, krig_cli):
    d = _settled(tmp_path)
    p = krig_cli("check", str(d), "--project", "512G:64")
    assert p.returncode == 1, p.stdout + p.stderr
    m = {k: v["value"] for k, v in json.loads((d / "metrics.json").read_text()).items()}
    per = 798_000 / BUCKETS_2G               # above the 1,000 before the flood
    assert m["settled_per_bucket"] == pytest.approx(per) and m["peak_per_bucket"] == pytest.approx(per)
    proj = json.loads((d / "projection.json").read_text())
    assert proj["kind"] == "per_bucket" and proj["measured_per_bucket"] == pytest.approx(per)
    rows = {r["machine"]: r for r in proj["rows"]}
    assert list(rows) == ["4 GB", "256 GB", "512 GB", "3 TB"]
    for label, ram in (("4 GB", 4 << 30), ("256 GB", 256 << 30), ("512 GB", 512 << 30), ("3 TB", 3 << 40)):
        assert rows[label]["dentry_buckets"] == hashsize.dentry_entries(ram)
        assert rows[label]["negatives"] == pytest.approx(per * hashsize.dentry_entries(ram))
        assert rows[label]["pct_ram"] == pytest.approx(100 * per * hashsize.dentry_entries(ram) * 192 / ram)
    # a bound per bucket takes a smaller share of a bigger machine (scale grows above 64 GB)
    assert rows["4 GB"]["pct_ram"] > rows["256 GB"]["pct_ram"] > rows["3 TB"]["pct_ram"]
    summary = (d / "summary.txt").read_text()
    words = " ".join(summary.split())
    assert "projection to other machines (not a measurement):" in summary
    assert f"{per:.3g} negatives per" in words and "A projection, not a measurement" in words
    assert f"{rows['3 TB']['negatives']:,.0f}" in summary
    html = (d / "report.html").read_text()
    assert "Projection to other machines (not a measurement)" in html and f"{rows['256 GB']['negatives']:,.0f}" in html
    # krig report without --project: the three sizes only
    assert krig_cli("report", str(d)).returncode == 0
    assert [r["machine"] for r in json.loads((d / "projection.json").read_text())["rows"]] == ["4 GB", "256 GB", "3 TB"]


def test_unbounded_projected_as_time_to_the_limit(tmp_path, krig_cli):
    d = _unbounded(tmp_path)
    assert krig_cli("check", str(d), "--project", "1T").returncode == 1
    proj = json.loads((d / "projection.json").read_text())
    assert proj["kind"] == "unbounded" and proj["measured_rate_per_cpu"] == 20000    # 40,000/s on 2 CPUs
    rows = {r["machine"]: r for r in proj["rows"]}
    assert rows["1 TB"]["cpus"] == 2                     # no CPUs given: this run's
    for label, ram, cpus in (("4 GB", 4 << 30, 4), ("256 GB", 256 << 30, 24), ("3 TB", 3 << 40, 384)):
        n = 0.05 * ram / 192
        assert rows[label]["cpus"] == cpus and rows[label]["negatives"] == pytest.approx(n)
        assert rows[label]["seconds_to_limit"] == pytest.approx(n / (20000 * cpus))
    assert "a real machine gets there sooner" in " ".join((d / "summary.txt").read_text().split())


def test_a_run_that_told_neither_is_not_projected(tmp_path, krig_cli):
    """Stopped by its name cap, not told whether bounded: no projection anywhere; a projection an
    earlier check wrote is removed."""
    neg = np.concatenate([np.full(5, 1000.0), 1000 + 40_000.0 * np.arange(1, 14), np.full(3, 1000 + 40_000 * 13.0)])
    flood = ("generators=4\nops=900000 seconds=12.0 rate=75000\nstop_reason=name_cap\nstop_seconds=12.0\n"
             "new_names_per_s=40000\nnew_names=520000\nname_cap=520000\nretention=0.3\nretention_names=130000\n"
             "plateau_retention_pct=5\nlimit_bytes=107374182\ndentry_objsize=192\nlimit_crossed=0\n")
    d = flood_run_dir(tmp_path / "run", flood, range(len(neg)), neg, 5, len(neg) - 3)
    (d / "projection.json").write_text("{}")
    assert krig_cli("check", str(d)).returncode == 1
    assert not (d / "projection.json").exists()
    assert "projection" not in (d / "summary.txt").read_text()
    assert "Projection" not in (d / "report.html").read_text()


def test_bad_project_is_one_line(tmp_path, krig_cli):
    d = _settled(tmp_path)
    for arg, says in (("12", "the RAM must be 1G-64T"), ("512G:x", "CPUs after ':' must be a whole number"),
                      ("lots", "--project"), ("100T", "the RAM must be 1G-64T")):
        p = krig_cli("report", str(d), "--project", arg)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and says in p.stderr, (arg, p.stderr)


def test_compare_and_reply_carry_the_patched_sides_projection(tmp_path, krig_cli):
    """Each side's projection is that of its median run; the reply gives the patched kernel's,
    labelled as a projection, within 72 columns."""
    base = [_unbounded(tmp_path / "base", f"r{i}") for i in range(2)]
    new = [_settled(tmp_path / "new", f"r{i}", level=lv) for i, lv in enumerate((700_000.0, 760_000.0, 799_000.0))]
    for d in base + new:
        assert krig_cli("check", str(d)).returncode == 1
    res = compare([str(d) for d in base], [str(d) for d in new])
    assert res.base.projection["kind"] == "unbounded"
    proj = res.new.projection
    assert proj["kind"] == "per_bucket" and proj["runs"] == 3
    assert proj["measured_per_bucket"] == pytest.approx(759_000 / BUCKETS_2G)       # the median run's (760k - 1k)
    state = ValidationRecord.from_json({"reproducer": "neg-dentry-flood", "preset": "smoke", "repeat": 3, "answer": "not fixed",
             "reason": "the patched kernel still FAILs", "judged_metrics": [], "differences": [],
             "series_provenance": {"patchset_hash": "0" * 64, "message_id": "s@example.org", "subject": "x"},
             "reply_subject": "[PATCH] dcache: cap negatives", "base_kernel": {}, "new_kernel": {},
             "command": ["krig", "validate", "neg-dentry-flood"], "series": "s@example.org"})
    write_reply(tmp_path, state, res, ("Krig Tester", "tester@example.org"))
    text = (tmp_path / "reply.txt").read_text()
    assert "Projected to other machines from the patched kernel's median run\n(not a measurement):" in text
    assert "patched: negatives settled at" in text and "base: negatives still growing" in text
    rows = {r["machine"]: r for r in proj["rows"]}
    assert f"{rows['3 TB']['negatives']:,.0f}" in text
    assert text.isascii() and all(len(ln) <= 72 for ln in text.splitlines()), max(text.splitlines(), key=len)
