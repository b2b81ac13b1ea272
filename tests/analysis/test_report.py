"""`krig report` on synthetic run directories (no guest): plots and their CSVs,
summary.txt, report.html in Chromium, the KernelShark session on a real
trace.dat (tests/data), and the repro.toml [[plots]]/[session] validation.
The same checks run on the real smoke runs in test_smoke.py.

Covers: analysis/kshark.py, analysis/plots.py, analysis/rundata.py, analysis/summary.py,
krig/reproducer.py, krig/reproducer_plots.py."""
import json
import shutil
import subprocess

import numpy as np
import pytest

import report_checks
import viewers
from conftest import KRIG, ROOT
from analysis.report import write_report
from workflows import check as krig_check
from krig.errors import UsageError
from krig.reproducer import load_reproducer, parse_reproducer
from krig.config import load_toml

MEM = 4 * 1024 ** 3
TEMPLATE = ROOT / "tests" / "data" / "xfs_template_v7.dat"


def _manifest(name, **extra):
    repro = load_reproducer(name)
    return {"reproducer": name, "preset": "smoke", "params": repro.resolve_params("smoke", {}),
            "kernel": {"name": "distro", "release": "6.1.0-test", "description": "a <b>test</b> kernel"},
            "rig": {"name": "qemu-default", "kind": "qemu", "cpus": 2},
            "rig_facts": {"accel": "tcg"},
            "machine": {"release": "6.1.0-test", "cpus": 2, "mem_total_bytes": MEM},
            "started": "2026-01-01T00:00:00+00:00", "ended": "2026-01-01T00:01:40+00:00",
            "outcome": "completed", "complete": True, **extra}


def _metrics(name, values):
    repro = load_reproducer(name)
    return {m: {"value": values.get(m, 1.0), **meta} for m, meta in repro.metrics.items()}


def _judged(repro, failed=()):
    """thresholds.json as the judge writes it: each threshold held, or crossed if in failed."""
    return json.dumps([{"threshold": f"{t.metric} {t.describe()}", "outcome": "fail" if t.metric in failed else "pass",
                        "message": "crossed" if t.metric in failed else "held", "host_sensitive": False}
                       for t in repro.thresholds])


@pytest.fixture
def flood_run(tmp_path):
    """A neg-dentry-flood run: 100 samples at 1 Hz, the flood from t=5 to t=95."""
    d = tmp_path / "run"
    d.mkdir()
    t0, mono0 = 1_700_000_000.25, 100.0
    t = np.arange(100.0)
    neg = np.minimum(t * 9000.0, 700_000.0)
    slab = 2e6 + neg * 192.0
    lines = ["time\tnr_negative\tdentry_slab_bytes\tdentry_objsize\tmem_total_kb\tmono"]
    lines += [f"{t0 + x:.6f}\t{int(n)}\t{int(s)}\t192\t{MEM // 1024}\t{mono0 + x:.9f}" for x, n, s in zip(t, neg, slab)]
    (d / "samples.tsv").write_text("\n".join(lines) + "\n")
    (d / "phases.tsv").write_text(f"{t0}\tstart\n{t0 + 5}\tflood\n{t0 + 95}\tflooded\n{t0 + 99}\tend\n")
    (d / "manifest.json").write_text(json.dumps(_manifest("neg-dentry-flood")))
    repro = load_reproducer("neg-dentry-flood")
    (d / "metrics.json").write_text(json.dumps(_metrics("neg-dentry-flood", {
        "peak_dentry_pct_ram": 100.0 * slab.max() / MEM, "time_to_10pct_ram_s": None,
        "peak_nr_negative": 700000.0, "inotify_add_watch_ms": 12.345678,
        # still growing at its bound of 10% of RAM: unbounded, nothing settled
        "settle_bound_pct_ram": 10.0, "bounded": 0.0, "settled_negative_pct_ram": None,
        "settled_nr_negative": None})))
    (d / "verdict.json").write_text(json.dumps({"verdict": "FAIL", "reason": "growth <script>alert(1)</script>"}))
    (d / "thresholds.json").write_text(_judged(repro, failed={"last_quarter_growth_pct_of_limit"}))
    (d / "time.txt").write_text("0.50user 9.00system 1:40.00elapsed 9%CPU (0avgtext+0avgdata 2000maxresident)k\n"
                                "0inputs+0outputs (0major+100minor)pagefaults 0swaps\n")
    (d / "console.log").write_text("[    0.000000] Linux version 6.1.0-test\n")
    return d


@pytest.fixture
def ail_run(tmp_path):
    """An xfs-ail-storm run whose trace.dat is a real guest trace (tests/data)."""
    d = tmp_path / "ail"
    d.mkdir()
    shutil.copy(TEMPLATE, d / "trace.dat")
    (d / "manifest.json").write_text(json.dumps(_manifest("xfs-ail-storm")))
    (d / "metrics.json").write_text(json.dumps(_metrics("xfs-ail-storm", {
        "max_checkpoint_objects": 1020, "max_checkpoint_log_mib": 0.5, "cil_limit_new_mib": 32.0})))
    (d / "verdict.json").write_text(json.dumps({"verdict": "PASS", "reason": "3 thresholds held"}))
    (d / "thresholds.json").write_text(_judged(load_reproducer("xfs-ail-storm")))
    return d


def test_flood_plot_csv_png_and_summary(flood_run):
    res = write_report(flood_run)
    assert res["notes"] == []
    repro = load_reproducer("neg-dentry-flood")
    assert report_checks.check_plots(flood_run, repro, MEM) == 1
    rows = report_checks.read_csv(flood_run / "plot-flood.csv")
    # the threshold's own limit and the flood's bound; no settled level (unbounded)
    assert [float(r["y"]) for r in rows if r["kind"] == "hline"] == [5.0, 10.0]
    # the negatives' own series: nr_negative x the dentry size, in % of RAM
    neg = [(float(r["x"]), float(r["y"])) for r in rows if r["label"].startswith("negative dentries")]
    assert neg[-1][1] == pytest.approx(100.0 * 700_000 * 192 / MEM)
    shade = [r for r in rows if r["kind"] == "shade"][0]
    assert float(shade["x"]) == pytest.approx(5 + 0.75 * 90) and float(shade["x2"]) == pytest.approx(95)
    lines = report_checks.check_summary(flood_run)
    assert any("CROSSED: last_quarter_growth_pct" in line for line in lines)
    assert lines[-1].strip().startswith("--preset smoke") or "--preset smoke" in "\n".join(lines[-3:])


def test_flood_plot_shows_where_negatives_settled(flood_run):
    """A bounded run: the settled level is a line of its own (drawn only when measured)."""
    metrics = json.loads((flood_run / "metrics.json").read_text())
    metrics["bounded"]["value"], metrics["settled_negative_pct_ram"]["value"] = 1.0, 3.2
    (flood_run / "metrics.json").write_text(json.dumps(metrics))
    assert write_report(flood_run)["notes"] == []
    assert report_checks.check_plots(flood_run, load_reproducer("neg-dentry-flood"), MEM) == 1
    rows = report_checks.read_csv(flood_run / "plot-flood.csv")
    assert {r["label"]: float(r["y"]) for r in rows if r["kind"] == "hline"}["negatives settled (bounded)"] == 3.2


def test_html_escapes_and_lists_thresholds(flood_run):
    write_report(flood_run)
    page = (flood_run / "report.html").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "a &lt;b&gt;test&lt;/b&gt; kernel" in page
    n = len(load_reproducer("neg-dentry-flood").thresholds)
    assert page.count("CROSSED") == 1 and page.count("class=\"held\">held<") == n - 1
    assert 'src="plot-flood.png"' in page and "http" not in page.lower().replace("http-equiv", "")


def test_error_run_shows_console_not_plots(flood_run):
    (flood_run / "verdict.json").write_text(json.dumps({
        "verdict": "CRASHED", "reason": "kernel crash", "crash_context": ["Kernel panic - not syncing: <x>"]}))
    (flood_run / "stderr").write_text("negflood: <stopped>\n")
    write_report(flood_run)
    page = (flood_run / "report.html").read_text()
    assert "Kernel panic - not syncing: &lt;x&gt;" in page and "<img" not in page
    assert "negflood: &lt;stopped&gt;" in page


def test_judged_error_run_shows_plots_and_console(flood_run):
    """An ERROR whose thresholds were judged (the host was contended, or an instrument check
    failed) still has its numbers drawn, next to the console; an ERROR that judged nothing
    has only the console."""
    (flood_run / "verdict.json").write_text(json.dumps({
        "verdict": "ERROR", "reason": "host contention: other processes kept the host's CPUs saturated",
        "thresholds": {"passed": 5, "failed": 1}}))
    write_report(flood_run)
    page = (flood_run / "report.html").read_text()
    assert page.count("<img") == len(load_reproducer("neg-dentry-flood").plots) >= 1
    assert "<h2>Console</h2>" in page and "host contention" in page
    for png in flood_run.glob("plot-*.png"):
        png.unlink()
    (flood_run / "verdict.json").write_text(json.dumps({"verdict": "ERROR", "reason": "run.sh exited 1"}))
    write_report(flood_run)
    page = (flood_run / "report.html").read_text()
    assert "<img" not in page and not list(flood_run.glob("plot-*.png")) and "<h2>Console</h2>" in page


def test_report_failure_never_changes_the_verdict(flood_run, capsys):
    before = (flood_run / "verdict.json").read_text()
    (flood_run / "samples.tsv").write_text("time\tnr_negative\n")   # a broken sample file
    krig_check.report(flood_run)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("krig: report: plot flood:")
    assert (flood_run / "verdict.json").read_text() == before and (flood_run / "report.html").exists()


def test_cli_report_bad_dir(tmp_path):
    p = subprocess.run(KRIG + ["report", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "manifest.json" in p.stderr


def test_ail_bars_equal_trace_cmd_and_session_window(ail_run):
    res = write_report(ail_run)
    assert res["notes"] == []
    repro = load_reproducer("xfs-ail-storm")
    report_checks.check_plots(ail_run, repro, MEM)
    doc = json.loads((ail_run / "trace.kshark.json").read_text())
    assert doc["type"] == "kshark.config.session"
    a, b = doc["Model"]["range"]
    # the window holds the largest new_lsn group's inserts (1020 of them), per trace-cmd
    out = subprocess.run(["trace-cmd", "report", "-t", "-i", str(ail_run / "trace.dat")], capture_output=True,
                         text=True, timeout=300).stdout
    ts = {}
    for line in out.splitlines():
        if " xfs_ail_insert:" in line:
            lsn = line.split("new lsn ")[1].split()[0]
            ts.setdefault(lsn, []).append(int(round(float(line.split(": ")[0].split()[-1]) * 1e9)))
    big = max(ts.values(), key=len)
    assert len(big) == 1020 and a <= min(big) and max(big) <= b
    assert doc["data streams"][0]["filters"]["show event filter"] == [e.replace(":", "/")
                                                                      for e in repro.trace_events]


def test_report_page_in_chromium(flood_run, tmp_path):
    write_report(flood_run)
    report_checks.check_page(flood_run, tmp_path / "chromium", n_images=1)


def test_chromium_check_catches_a_missing_image(flood_run, tmp_path):
    write_report(flood_run)
    (flood_run / "plot-flood.png").unlink()
    res = viewers.check_report_in_chromium(flood_run / "report.html", tmp_path)
    assert res["broken"] == ["plot-flood.png"]


def test_kernelshark_opens_the_session(ail_run, tmp_path):
    write_report(ail_run)
    report_checks.check_session(ail_run, tmp_path / "ks", ROOT)


BAD_PLOTS = [
    ({"plots": [{"name": "x", "series": []}]}, "plots[0].series"),
    ({"plots": [{"name": "x", "series": [{"column": "a", "transform": "log"}]}]}, "series[0].transform"),
    ({"plots": [{"name": "x", "series": [{"event": "xfs:nope", "group_by": "f"}]}]}, "series[0].event"),
    ({"plots": [{"name": "x", "series": [{"column": "a"}], "lines": [{"threshold": "nope"}]}]}, "lines[0]"),
    ({"plots": [{"name": "x", "series": [{"column": "a"}], "shade": [{"between": ["a"]}]}]}, "shade[0].between"),
    ({"plots": [{"name": "x", "colour": 1, "series": [{"column": "a"}]}]}, "unknown field 'colour'"),
    ({"session": {"window": "worst"}}, "session.window"),
    ({"plots": [{"name": "x", "series": [{"event": "xfs:xfs_ail_insert", "group_by": "f", "times": "a"}]}]},
     "'times'"),
    ({"plots": [{"name": "x", "series": [{"column": "a"}],
                 "lines": [{"threshold": "max_checkpoint_vs_fixed_limit", "optional": True}]}]}, "lines[0].optional"),
]


@pytest.mark.parametrize("extra,field", BAD_PLOTS)
def test_bad_plot_spec_is_one_line(extra, field):
    path = ROOT / "reproducers" / "xfs-ail-storm"
    data = {k: v for k, v in load_toml(path / "repro.toml").items() if k not in ("plots", "session")}
    with pytest.raises(UsageError) as e:
        parse_reproducer("xfs-ail-storm", path, {**data, **extra})
    assert field in str(e.value) and "\n" not in str(e.value)


def test_threshold_lines_never_take_a_series_colour():
    """A dashed threshold must not be mistaken for a curve (a red 5% line beside a red nr_negative)."""
    from analysis.compare_html import SIDES
    from analysis.plots import COLORS, LINE_COLORS
    series = set(COLORS) | {c for side in SIDES.values() for c in side["colors"]}
    assert not set(LINE_COLORS) & series
