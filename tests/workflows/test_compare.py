"""Groups (`krig run --repeat`) and `krig compare`, on fake run directories (no guest).

The numbers are checked against an independent oracle (the statistics module
and hand-computed Mann-Whitney p-values), never against the code under test.

Covers: analysis/compare_html.py, analysis/stats.py, krig/record_group.py,
krig/reproducer_schema.py."""
import json
import math
import os
import statistics
import subprocess

import pytest

from analysis import stats
from krig import results
from workflows import group as kg
from workflows.compare import compare, format_text, parse_args
from krig.errors import UsageError
from krig.record import Verdict
from krig.record_group import GroupRecord

from conftest import KRIG, ROOT

PARAMS = {"files": 100, "timeout": 120, "sample_interval": 1.0}
def judged(files_seen_held: bool) -> str:
    """thresholds.json as the judge writes it for selftest-pass's two thresholds."""
    return json.dumps([{"threshold": "answer >= 42 and <= 42", "outcome": "pass", "message": "", "host_sensitive": False},
                       {"threshold": "files_seen >= 1", "outcome": "pass" if files_seen_held else "fail",
                        "message": "", "host_sensitive": False}])


def fake_run(d, files_seen, verdict="PASS", kernel="k1", rig="qemu-default", repro="selftest-pass",
             params=None, answer=42.0, ended=True):
    d.mkdir(parents=True)
    man = {"reproducer": repro, "preset": None, "params": params or PARAMS, "rig": {"name": rig},
           "kernel": {"name": kernel, "release": f"6.1-{kernel}"}, "ended": "x" if ended else None,
           "owner": {"pid": 1, "start": "0", "host": "elsewhere-not-this-host"} if not ended else None}
    (d / "manifest.json").write_text(json.dumps(man))
    if verdict:
        (d / "verdict.json").write_text(json.dumps({"verdict": verdict, "reason": "r"}))
        (d / "metrics.json").write_text(json.dumps({
            "answer": {"value": answer, "unit": "count", "better": "info"},
            "files_seen": {"value": files_seen, "unit": "files", "better": "higher"}}))
        (d / "thresholds.json").write_text(judged(verdict != "FAIL"))
    return d


def fake_group(root, name, values, verdict="PASS", **kw):
    g = root / name
    for i, v in enumerate(values, 1):
        fake_run(g / f"run-{i:02d}", v, verdict, **kw)
    runs = kg.group_runs(g)
    (g / kg.GROUP_FILE).write_text(json.dumps({"kind": "krig-group", **kg.summarize(runs)}))
    return g


# -- the significance test -------------------------------------------------------

def test_min_p_and_min_n():
    assert stats.min_p(3, 3) == pytest.approx(0.1)          # 2 / C(6,3)
    assert stats.min_p(4, 4) == pytest.approx(2 / 70)
    assert stats.min_p(3, 5) == pytest.approx(2 / 56)
    assert stats.min_p(3, 4) == pytest.approx(2 / 35)       # 0.057: not enough
    assert stats.min_n_per_side() == 4


def test_identical_samples_are_not_significant():
    r = stats.compare_samples([5.0, 5.0, 5.0, 5.0, 5.0], [5.0, 5.0, 5.0, 5.0, 5.0])
    assert r["p"] == 1.0 and not r["significant"]
    r = stats.compare_samples([1, 2, 3, 4, 5], [1, 2, 3, 4, 5])
    assert r["p"] == pytest.approx(1.0) and not r["significant"]


@pytest.mark.parametrize("n", [4, 5])
def test_separated_samples_at_the_minimum_n_are_significant(n):
    base, new = [100 + i for i in range(n)], [200 + i for i in range(n)]
    r = stats.compare_samples(base, new)
    # exact two-sided p of a complete separation: 2 / C(2n, n)
    assert r["p"] == pytest.approx(2 / math.comb(2 * n, n))
    assert r["significant"] and r["reachable"]


def test_three_a_side_cannot_be_significant_even_with_ties():
    r = stats.compare_samples([1.0, 1.0, 1.0], [9.0, 9.0, 9.0])      # ties: scipy's approximation
    assert not r["significant"] and not r["reachable"] and r["floor"] == pytest.approx(0.1)
    r = stats.compare_samples([1, 2, 3], [7, 8, 9])
    assert r["p"] == pytest.approx(0.1) and not r["significant"]


def test_change_and_direction():
    assert stats.change_pct(100, 150) == pytest.approx(50)
    assert stats.change_pct(0, 5) is None
    assert stats.direction(50, "lower") == "worse" and stats.direction(-5, "lower") == "better"
    assert stats.direction(50, "higher") == "better" and stats.direction(50, "info") == ""


# -- krig compare on fake runs -----------------------------------------------------

def test_compare_numbers_equal_the_runs(tmp_path):
    bvals, nvals = [100, 104, 98, 101, 99], [150, 160, 155, 149, 158]
    base = fake_group(tmp_path, "gb", bvals, kernel="k1")
    new = fake_group(tmp_path, "gn", nvals, kernel="k2", verdict="FAIL")
    res = compare([str(base)], [str(new)])
    row = next(r for r in res.metrics if r.metric == "files_seen")
    assert row.base.to_json() == {"n": 5, "median": statistics.median(bvals), "min": 98, "max": 104}
    assert row.new.to_json() == {"n": 5, "median": statistics.median(nvals), "min": 149, "max": 160}
    bm, nm = statistics.median(bvals), statistics.median(nvals)
    assert row.change_pct == pytest.approx(100 * (nm - bm) / bm)
    assert row.p == pytest.approx(2 / math.comb(10, 5)) and row.significant
    assert row.direction == "better"          # files_seen: higher is better
    ans = next(r for r in res.metrics if r.metric == "answer")
    assert ans.p == 1.0 and not ans.significant and ans.change_pct == 0
    th = {t.metric: t for t in res.thresholds}
    assert th["files_seen"].base.to_json() == {"held": 5, "judged": 5, "contended": 0, "state": "held"}
    assert th["files_seen"].new.state == "crossed" and th["files_seen"].flips
    assert not th["answer"].flips
    assert res.base.verdict_text == "PASS 5/5" and res.new.verdict_text == "FAIL 5/5"
    text = format_text(res)
    assert max(len(line) for line in text.splitlines()) <= 100
    line = next(ln for ln in text.splitlines() if ln.startswith("files_seen"))
    assert "+55.0%" in line and "0.008*" in line and line.rstrip().endswith("better")


def test_a_significant_but_tiny_change_is_small_not_better(tmp_path):
    """260,290 vs 260,297 events every run: p is at its floor, but 0.003% is no change a
    developer acts on; the metric's min_change_pct (default 1%) decides better/worse."""
    base = fake_group(tmp_path, "gb", [260290, 260291, 260290, 260289], kernel="k1")
    new = fake_group(tmp_path, "gn", [260297, 260298, 260297, 260296], kernel="k2")
    res = compare([str(base)], [str(new)])
    row = next(r for r in res.metrics if r.metric == "files_seen")
    assert row.significant and row.direction == "better" and abs(row.change_pct) < 0.01
    assert row.min_change_pct == 1.0 and not row.material and row.verdict == "small"
    line = next(ln for ln in format_text(res).splitlines() if ln.startswith("files_seen"))
    assert line.rstrip().endswith("small") and "better" not in line
    # a 2% change with the same spread is material: better
    new2 = fake_group(tmp_path, "gn2", [265500, 265501, 265500, 265499], kernel="k2")
    row2 = next(r for r in compare([str(base)], [str(new2)]).metrics if r.metric == "files_seen")
    assert row2.material and row2.verdict == "better"


def test_min_change_pct_is_checked(tmp_path):
    from krig.reproducer_schema import parse_metrics

    def parse(tables):
        return parse_metrics(tables, "repro.toml")
    assert parse({"m": {"unit": "s", "better": "lower", "min_change_pct": 5}})["m"]["min_change_pct"] == 5.0
    assert parse({"m": {"unit": "s", "better": "lower"}})["m"]["min_change_pct"] == 1.0
    for bad in (-1, "5", True, 1e6):
        with pytest.raises(UsageError, match=r"metrics\.m\.min_change_pct"):
            parse({"m": {"unit": "s", "better": "lower", "min_change_pct": bad}})


def test_only_judged_runs_give_numbers_and_interrupted_runs_do_not_count(tmp_path):
    g = fake_group(tmp_path, "g", [10, 12])
    fake_run(g / "run-03", 999, verdict="ERROR")          # an instrument broke: its number is not used
    fake_run(g / "run-04", 0, verdict=None)              # killed: no verdict, owner gone
    runs = kg.group_runs(g)
    assert [v for _, v in runs] == ["PASS", "PASS", "ERROR", "INCOMPLETE"]
    s = kg.summarize(runs)
    assert s["counted"] == 3 and s["verdicts"] == {"PASS": 2, "ERROR": 1}
    assert s["metrics"]["files_seen"] == {"n": 2, "median": 11.0, "min": 10.0, "max": 12.0,
                                          "unit": "files", "better": "higher"}
    assert kg.verdict_text(s["verdicts"], 3) == "PASS 2/3, ERROR 1/3"
    assert kg.group_exit({"PASS": 4, "FAIL": 1}) == 1 and kg.group_exit({"PASS": 3}) == 0


def test_run_dirs_and_groups_mix(tmp_path):
    a = fake_run(tmp_path / "a", 10)
    b = fake_run(tmp_path / "b", 11)
    g = fake_group(tmp_path, "g", [20, 21, 22])
    res = compare([str(a), str(b)], [str(g)])
    row = next(r for r in res.metrics if r.metric == "files_seen")
    assert row.base.n == 2 and row.new.median == 21 and not row.reachable


def test_mismatch_is_one_line_exit_2(tmp_path):
    a = fake_group(tmp_path, "ga", [1, 2])
    b = fake_group(tmp_path, "gb", [1, 2], repro="selftest-fail")
    c = fake_group(tmp_path, "gc", [1, 2], params={**PARAMS, "files": 7})
    for other, field in ((b, "reproducer"), (c, "params")):
        p = subprocess.run(KRIG + ["compare", "--out", str(tmp_path / "o"), str(a), "--", str(other)],
                           capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and field in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run(KRIG + ["compare", str(a)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "BASE and NEW" in p.stderr
    p = subprocess.run(KRIG + ["compare", str(a), "--", str(tmp_path / "nothing")], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 2 and "not a run or group directory" in p.stderr


def test_different_rig_is_a_warning_and_json_and_html(tmp_path):
    a = fake_group(tmp_path, "ga", [1, 2, 3, 4])
    b = fake_group(tmp_path, "gb", [5, 6, 7, 8], rig="big")
    out = tmp_path / "out"
    p = subprocess.run(KRIG + ["compare", str(a), "--", str(b), "--json", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "warning: different rigs: BASE qemu-default, NEW big" in p.stderr
    res = json.loads(p.stdout)
    row = next(r for r in res["metrics"] if r["metric"] == "files_seen")
    assert row["p"] == pytest.approx(2 / 70) and row["significant"]
    assert (out / "compare.html").exists() and "files_seen" in (out / "compare.html").read_text()
    # --json is the comparison's record as written, with the page's path; its shape, key by key
    assert res == {**compare([str(a)], [str(b)]).to_json(), "html": str(out / "compare.html")}
    assert list(res) == ["reproducer", "preset", "params", "test", "alpha", "min_n_per_side", "base", "new",
                         "warnings", "differences", "metrics", "thresholds", "html"]
    assert list(res["base"]) == list(res["new"]) == ["runs", "verdicts", "verdict_text", "judged", "kernels",
                                                     "releases", "rigs", "outcome", "projection"]
    assert list(row) == ["metric", "unit", "better", "base", "new", "change_pct", "direction", "p", "u", "floor",
                         "reachable", "significant", "min_change_pct", "material", "values", "verdict"]
    assert list(row["base"]) == ["n", "median", "min", "max"] and list(row["values"]) == ["base", "new"]
    t = res["thresholds"][0]
    assert list(t) == ["threshold", "metric", "kind", "base", "new", "flips"]
    assert list(t["base"]) == ["held", "judged", "contended", "state"]


def test_parse_args():
    assert parse_args(["a", "b", "--", "c"]) == {"json": False, "out": None, "format": "text", "base": ["a", "b"],
                                                 "new": ["c"]}
    assert parse_args(["a", "--", "c", "--json"])["json"]
    assert parse_args(["--format", "lkp", "a", "--", "c"])["format"] == "lkp"
    with pytest.raises(UsageError, match="--format: one of text, lkp"):
        parse_args(["--format", "html", "a", "--", "c"])
    with pytest.raises(UsageError):
        parse_args(["a", "--", "c", "--what"])


# -- resuming a group (the run itself faked: the real one is in test_group_guest.py) ---

def fake_runner(values, interrupt_at=None):
    calls = []

    def run(plan, results_root=None, log=None, run_dir=None, session=None):      # workflows.run.execute
        calls.append(run_dir.name)
        if interrupt_at is not None and len(calls) == interrupt_at:
            fake_run(run_dir, 0, verdict="INTERRUPTED")
            return run_dir, Verdict("INTERRUPTED", "signal")
        fake_run(run_dir, values[len(calls) - 1])
        return run_dir, Verdict("PASS", "ok")
    return run, calls


def test_group_resumes_without_redoing_finished_runs(tmp_path, monkeypatch):
    g = tmp_path / "g"
    run, calls = fake_runner([10, 11, 12, 13], interrupt_at=2)
    monkeypatch.setattr(kg, "execute", run)
    with pytest.raises(KeyboardInterrupt):
        kg.run_group("selftest-pass", "qemu-default", "distro", None, {}, 3, g, results_root=tmp_path, log=lambda m: 0)
    saved = json.loads((g / kg.GROUP_FILE).read_text())
    assert saved["counted"] == 1 and not saved["complete"]
    assert [r["counted"] for r in saved["runs"]] == [True, False]
    run2, calls2 = fake_runner([20, 21])
    monkeypatch.setattr(kg, "execute", run2)
    gdir, group, code = kg.run_group("selftest-pass", "qemu-default", "distro", None, {}, 3, g,
                                     results_root=tmp_path, log=lambda m: 0)
    assert calls2 == ["run-03", "run-04"], "run-01 is kept, the interrupted run-02 stays and is not counted"
    assert group.complete and group.counted == 3 and group.verdicts == {"PASS": 3} and code == 0
    assert group.metrics["files_seen"]["median"] == 20
    assert (g / "run-02" / "manifest.json").exists()
    run3, calls3 = fake_runner([])
    monkeypatch.setattr(kg, "execute", run3)
    kg.run_group("selftest-pass", "qemu-default", "distro", None, {}, 3, g, results_root=tmp_path, log=lambda m: 0)
    assert calls3 == [], "a complete group runs nothing"


def test_the_results_layout_names_a_groups_runs_and_a_validations_sides(tmp_path):
    """krig/results.py makes every name inside a group and a validation: run-NN one past the
    highest, whatever else the group holds; a side is base or new, nothing else."""
    g = tmp_path / "g"
    assert results.next_group_run(g, []) == g / "run-01"
    assert results.next_group_run(g, [g / "run-01", g / "run-07", g / "run-x"]) == g / "run-08"
    for n in ("run-02", "run-01", "notes"):
        (g / n).mkdir(parents=True)
    assert [d.name for d in results.run_dirs_of(g)] == ["run-01", "run-02"]
    assert [results.validation_side(tmp_path, s) for s in results.VALIDATE_SIDES] == [tmp_path / "base",
                                                                                       tmp_path / "new"]
    with pytest.raises(ValueError, match="no side"):
        results.validation_side(tmp_path, "../base")


def test_group_refuses_other_parameters(tmp_path, monkeypatch):
    g = tmp_path / "g"
    run, _ = fake_runner([1])
    monkeypatch.setattr(kg, "execute", run)
    kg.run_group("selftest-pass", "qemu-default", "distro", None, {}, 1, g, results_root=tmp_path, log=lambda m: 0)
    with pytest.raises(UsageError, match="made for params"):
        kg.run_group("selftest-pass", "qemu-default", "distro", None, {"files": "7"}, 2, g,
                     results_root=tmp_path, log=lambda m: 0)
    with pytest.raises(UsageError, match="made for reproducer"):
        kg.run_group("selftest-fail", "qemu-default", "distro", None, {}, 2, g, results_root=tmp_path,
                     log=lambda m: 0)


def test_repeat_bad_values_are_one_line(tmp_path):
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path)}
    for bad, word in (("0", "--repeat"), ("x", "--repeat")):
        p = subprocess.run(KRIG + ["run", "selftest-pass", "--repeat", bad], capture_output=True, text=True,
                           cwd=ROOT, env=env)
        assert p.returncode == 2 and word in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not list(tmp_path.rglob("manifest.json")), "a bad --repeat started a run"


from test_report import flood_run  # noqa: E402,F401 (a synthetic neg-dentry-flood run, the fixture)


def _has_colour(png, hex_colour, alpha, tol=40):
    """Pixels of hex_colour drawn with alpha on white."""
    import matplotlib.image as mpimg
    import numpy as np
    img = (mpimg.imread(png)[..., :3] * 255).astype(int)
    want = alpha * np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) + (1 - alpha) * 255
    return int((np.abs(img - want).sum(axis=2) < tol).sum())


def test_compare_html_overlays_both_sides_with_the_per_run_plots(flood_run, tmp_path):
    import shutil
    new = tmp_path / "new"
    shutil.copytree(flood_run, new)
    rows = (new / "samples.tsv").read_text().splitlines()
    cols = rows[0].split("\t")
    i = cols.index("nr_negative")
    out_rows = [rows[0]]
    for r in rows[1:]:
        f = r.split("\t")
        f[i] = str(int(f[i]) // 10)                      # the capped kernel: a tenth of the negatives
        out_rows.append("\t".join(f))
    (new / "samples.tsv").write_text("\n".join(out_rows) + "\n")
    res = compare([str(flood_run)], [str(new)])
    out = tmp_path / "cmp"
    from analysis.compare_html import SIDES, write_compare_html
    assert write_compare_html(res, out) == []
    png = out / "compare-flood.png"
    assert png.exists() and 10_000 < png.stat().st_size < 500_000
    # nr_negative (the second series) of BASE and of NEW are both drawn, each in its side's colour
    for side in ("base", "new"):
        assert _has_colour(png, SIDES[side]["colors"][1], SIDES[side]["alpha"]) > 200, side
    page = (out / "compare.html").read_text()
    assert 'src="compare-flood.png"' in page and "<script>" not in page


def test_group_table_fits_100_columns(tmp_path):
    g = fake_group(tmp_path, "g", [10, 12, 14])
    group = GroupRecord.from_json({**kg.summarize(kg.group_runs(g)), "repeat": 4, "complete": False})
    text = kg.format_group(g, group)
    assert text.splitlines()[0] == "group: PASS 3/3 (incomplete: 3 of 4 runs)"
    assert max(len(line) for line in text.splitlines()[:-1]) <= 100
    line = next(ln for ln in text.splitlines() if ln.startswith("files_seen"))
    assert line.split()[1:5] == ["3", "12", "10", "14"]


def test_overlaid_runs_name_each_phase_once():
    """Four runs drawn on one Axes: every run's phase lines, but each phase named once
    (the names of coinciding phases piled up into an unreadable smear)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from analysis.plots import PlotData, draw
    fig, ax = plt.subplots()
    named = set()
    try:
        for k in range(4):
            data = PlotData("p", "t", "y", "", "x", [], [], [("flood", 5.0 + k * 0.1), ("end", 9.0)], [])
            draw(ax, data, style={"named_phases": named})
        assert sorted(t.get_text() for t in ax.texts) == ["end", "flood"]
        assert len(ax.lines) == 8                         # every run's phase lines stay
        ax2 = fig.add_subplot(2, 1, 2)
        draw(ax2, data)                                   # a single run names its own phases
        assert sorted(t.get_text() for t in ax2.texts) == ["end", "flood"]
        # the largest bar: its text only on a single run's plot, its star on both
        import numpy as np
        from analysis.plots import Series
        bars = Series("objects", "left", "bars", np.array([1.0, 2.0]), np.array([5.0, 9.0]), np.array([0.5, 0.5]),
                      {"x": 2.25, "y": 9.0, "text": "largest: 9", "y2": 3.0, "y2_label": "MiB"})
        for style, texts in (({}, ["largest: 9"]), ({"mark_text": False}, [])):
            f2, a3 = plt.subplots()
            _, a4 = draw(a3, PlotData("p", "t", "y", "MiB", "x", [bars], [], [], []), style=style)
            assert [t.get_text() for t in a3.texts] == texts
            assert len(a4.lines) == 1                     # the star
            plt.close(f2)
    finally:
        plt.close(fig)
