"""neg-dentry-flood stops when the machine's numbers give the answer.

negflood watches nr_negative while it floods and stops at the first of: the
negatives crossing the RAM limit (unbounded: FAIL), a plateau after the minimum
run time (bounded: PASS), or a time cap computed from RAM and the measured rate
(judged by growth; the reason says so). Here:

- negflood itself on the host's own kernel and filesystem (no guest): each of the
  three stop reasons, forced by its options (a tiny RAM limit, a shared name set
  that is all cached, a short cap);
- the judge on a synthetic run that hit its time cap: the reason says so;
- real guests (marker kbuild: the tiny kernels `make ci-kernels` builds), each on
  the smallest guest that shows its stop reason: the cap kernel PASSes by plateau,
  and tiny-6.1 with a forced short cap stops there and FAILs by growth. The RAM-limit
  stop on the distro kernel is asserted on the smoke run in test_smoke.py (1 GB guest).
"""
import json
import math
import re
import subprocess

import numpy as np
import pytest

from conftest import ROOT, build_kernels, krig_run, qemu_pids, rig_with_memory, run_dir_of
from krig.check import load_analyzer
from krig.reproducer import load_reproducer

REPRO = ROOT / "reproducers" / "neg-dentry-flood"
NEGFLOOD = REPRO / "bin" / "negflood"
CAP_KERNEL, PLAIN_KERNEL = "tiny-6.1-negative-dentry-cap", "tiny-6.1"


def negflood(tmp_path, *args, timeout=60):
    p = subprocess.run([str(NEGFLOOD), "-d", str(tmp_path), *args], capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr
    out = {}
    for tok in p.stdout.split():
        k, _, v = tok.partition("=")
        out[k] = v
    return out


def test_ram_limit_is_the_threshold():
    """run.sh stops the flood at the RAM limit the judge uses (one number, three places)."""
    limit = [t.max for t in load_reproducer("neg-dentry-flood").thresholds if t.metric == "peak_negative_pct_ram"]
    run_sh = (REPRO / "run.sh").read_text()
    assert re.findall(r"negflood\" .* -l (\S+) ", run_sh) == [f"{limit[0]:g}"]
    assert load_analyzer(load_reproducer("neg-dentry-flood")).LIMIT_PCT_RAM == limit[0]


def test_negflood_stops_at_ram_limit(tmp_path):
    """0.001% of this host's RAM is a few thousand negatives: crossed in well under a second."""
    r = negflood(tmp_path, "-g", "1,0,0", "-t", "30", "-l", "0.001", "-r", "20")
    assert r["stop_reason"] == "ram_limit"
    assert float(r["stop_seconds"]) < 30  # before its 30 s time cap: the limit, not the cap, stopped it
    assert int(r["negatives_at_stop"]) * int(r["dentry_objsize"]) >= float(r["limit_bytes"])
    # stopped before its 20 s rate window: the rate is measured over the flood it had
    # (a fast machine crosses a 1 GB guest's limit in under 5 s; CI lost the metric once)
    assert float(r["rate_seconds"]) == float(r["stop_seconds"])
    assert float(r["new_names_per_s"]) > 0


def test_negflood_stops_at_plateau(tmp_path):
    """samename generators on a set of 100 names: all cached after the first pass, so
    nr_negative does not grow; plateau right after the minimum run time."""
    r = negflood(tmp_path, "-g", "0,0,1", "-k", "100", "-t", "30", "-n", "2", "-w", "0.5", "-r", "0.5")
    assert r["stop_reason"] == "plateau"
    assert float(r["stop_seconds"]) >= 2  # not before min_duration (-n 2)
    assert int(r["samename_ops"]) > 1000 and float(r["new_names_per_s"]) == 0


def test_negflood_stops_at_time_cap(tmp_path):
    """A cap of 3 s (max_duration) on a flood that neither plateaus nor reaches 5% of RAM."""
    r = negflood(tmp_path, "-g", "1,1,0", "-t", "3", "-n", "60", "-r", "1")
    assert r["stop_reason"] == "time_cap" and float(r["time_cap_s"]) == 3
    assert float(r["stop_seconds"]) >= 3  # not before the cap
    assert int(r["lookup_ops"]) > 0 and int(r["tmpfile_ops"]) > 0 and float(r["new_names_per_s"]) > 0


def test_negflood_cap_from_rate(tmp_path):
    """The cap is safety x the time an unbounded dcache needs for the limit, within [min, max]."""
    r = negflood(tmp_path, "-g", "1,0,0", "-t", "4", "-n", "1", "-l", "90", "-s", "2", "-r", "1")
    want = 2 * float(r["limit_bytes"]) / (float(r["new_names_per_s"]) * int(r["dentry_objsize"]))
    assert float(r["time_cap_s"]) == pytest.approx(min(4.0, max(1.0, want)), rel=1e-3)


def test_negflood_bad_usage(tmp_path):
    for args in (["-g", "1,1"], ["-g", "0,0,0"], ["-m", "lookup", "-g", "1,0,0"], []):
        p = subprocess.run([str(NEGFLOOD), "-d", str(tmp_path), "-t", "1", *args], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2 and p.stderr.startswith(("usage:", "negflood:")), args


def _synthetic_run(tmp_path, flood_txt: str, neg):
    """A neg-dentry-flood run directory: samples at 1 Hz, the flood from t=5, negflood's report."""
    d = tmp_path / "run"
    d.mkdir()
    mem = 2 * 1024 ** 3
    t0 = 1_700_000_000.0
    lines = ["time\tmono\tnr_negative\tdentry_slab_bytes\tdentry_objsize\tmem_total_kb\tmem_available_kb"]
    for i, n in enumerate(neg):
        lines.append(f"{t0 + i:.3f}\t{100.0 + i:.3f}\t{int(n)}\t{int(1e6 + n * 192)}\t192\t{mem // 1024}\t{mem // 2048}")
    (d / "samples.tsv").write_text("\n".join(lines) + "\n")
    end = t0 + len(neg) - 3
    (d / "phases.tsv").write_text(f"{t0}\tstart\n{t0 + 5}\tflood\n{end}\tflooded\n{end + 1}\tinotify\n")
    (d / "flood.txt").write_text(flood_txt)
    (d / "inotify-us.txt").write_text("1000\n")
    (d / "manifest.json").write_text(json.dumps({
        "reproducer": "neg-dentry-flood", "preset": "smoke", "outcome": "completed", "complete": True,
        "params": {}, "machine": {"release": "6.1.0-test", "cpus": 2, "mem_total_bytes": mem}}))
    return d


def test_time_cap_verdict_says_so(tmp_path, krig_cli):
    """A flood ended by its time cap, growing 40k negatives/s (about 4% of RAM at the end):
    FAIL by growth, the reason says the cap was hit, and the stop metrics are there."""
    neg = np.concatenate([np.full(5, 1000.0), 1000 + 40_000.0 * np.arange(1, 14), np.full(3, 1000 + 40_000 * 13.0)])
    flood = ("generators=4\nops=900000 seconds=12.0 rate=75000\nstop_reason=time_cap\nstop_seconds=12.0\n"
             "new_names_per_s=40000\ntime_cap_s=12.000\nlimit_bytes=107374182\ndentry_objsize=192\n")
    d = _synthetic_run(tmp_path, flood, neg)
    p = krig_cli("check", str(d))
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.startswith("FAIL: last_quarter_growth_pct_of_limit")
    assert "hit its time cap of 12 s" in p.stdout and p.stdout.count("\n") == 1
    m = {k: v["value"] for k, v in json.loads((d / "metrics.json").read_text()).items()}
    assert m["stop_reason"] == 3 and m["time_cap_hit"] == 1 and m["time_cap_s"] == 12
    assert m["new_names_per_s_per_cpu"] == 20000
    assert m["unbounded_time_to_limit_s"] == pytest.approx(107374182 / (40000 * 192))
    assert m["peak_negative_pct_ram"] < 5
    v = json.loads((d / "verdict.json").read_text())
    assert v["notes"] and "time cap" in v["notes"][0]


def test_flood_without_stop_report_is_error(tmp_path, krig_cli):
    """negflood killed before it reported (no stop_reason): ERROR, never a verdict."""
    d = _synthetic_run(tmp_path, "generators=4\n", np.linspace(0, 1e5, 20))
    p = krig_cli("check", str(d))
    assert p.returncode == 3 and "stop_reason" in p.stdout and "Traceback" not in p.stdout + p.stderr


# --- real guests on the tiny kernels (built by `make ci-kernels`) ---

@pytest.fixture(scope="module")
def tiny_built():
    build_kernels(PLAIN_KERNEL, CAP_KERNEL)


def _guest_flood(tmp_path_factory, name, *args):
    tmp = tmp_path_factory.mktemp(name)
    p = krig_run(tmp, "neg-dentry-flood", "--preset", "smoke", *args, timeout=1200)
    assert not qemu_pids(str(tmp)), "qemu left behind"
    d = run_dir_of(p)
    verdict = json.loads((d / "verdict.json").read_text())
    metrics = {k: v["value"] for k, v in json.loads((d / "metrics.json").read_text()).items()}
    return p, verdict, metrics


@pytest.mark.kbuild
def test_cap_kernel_passes_by_plateau(tiny_built, tmp_path_factory):
    """The cap kernel (unused negatives at most 1% of RAM) on the default 4 GB guest: the
    negatives level off at the cap, the flood ends on a plateau after min_duration, PASS."""
    p, v, m = _guest_flood(tmp_path_factory, "plateau", "--kernel", CAP_KERNEL)
    assert v["verdict"] == "PASS" and p.returncode == 0, v["reason"]
    assert m["stop_reason"] == 2 and m["time_cap_hit"] == 0
    params = load_reproducer("neg-dentry-flood").resolve_params("smoke", {})
    assert params["min_duration"] <= m["flood_seconds"] < m["time_cap_s"]
    assert 0.3 <= m["peak_negative_pct_ram"] <= 1.5          # the cap: 1% of RAM (a jiffy's overshoot)
    assert m["new_names_per_s"] > 0 and m["generators"] == 4
    assert m["inotify_add_watch_ms"] is not None and m["soft_lockups"] == 0


@pytest.mark.kbuild
def test_plain_kernel_stops_at_time_cap(tiny_built, tmp_path_factory):
    """tiny-6.1 (no cap) on a 6 GB guest, one lookup generator, max_duration forced to 8 s:
    the flood ends at the cap before 5% of RAM (8 s at the 15-45k names/s one TCG generator
    made here is 0.4-1.1% of RAM; CI once made > 70k/s and crossed 5% of a 2 GB
    guest before 8 s, so the guest has room for 200k/s) and the verdict is the growth rule's, with the reason
    saying the cap was hit. Which verdict depends on the rate: an 8 s flood grows by 3-8%
    of the limit in its last quarter here (a cap this short is forced; a computed one is
    4x the time to the limit, so an unbounded flood that keeps its rate crosses the limit
    first); the judge's FAIL on a capped flood is test_time_cap_verdict_says_so."""
    rig = rig_with_memory(tmp_path_factory.mktemp("rig"), "6G")
    p, v, m = _guest_flood(tmp_path_factory, "timecap", "--kernel", PLAIN_KERNEL, "--rig", str(rig),
                           "--set", "max_duration=8", "--set", "lookup_per_cpu=0.5",
                           "--set", "tmpfile_per_cpu=0", "--set", "samename_per_cpu=0")
    assert m["stop_reason"] == 3 and m["time_cap_hit"] == 1 and m["time_cap_s"] == 8, v["reason"]
    assert m["flood_seconds"] >= 8 and m["generators"] == 1 and m["new_names_per_s"] > 0
    assert 0 < m["peak_negative_pct_ram"] < 5
    growth = m["last_quarter_growth_pct_of_limit"]
    # still growing at the cap, whatever the rate the host allowed: an unbounded flood at a
    # steady rate makes a quarter of its negatives in the last quarter (growth is in % of
    # the limit, 5% of RAM; the peak in % of RAM)
    assert growth * 0.05 / m["peak_negative_pct_ram"] > 0.1, "an unbounded dcache still growing at the cap"
    assert v["verdict"] == ("FAIL" if growth > 5 else "PASS") and p.returncode == (growth > 5), v["reason"]
    assert "the flood hit its time cap of 8 s" in v["reason"] and v["reason"].count("\n") == 0
    if growth > 5:
        assert v["reason"].startswith("last_quarter_growth_pct_of_limit")
