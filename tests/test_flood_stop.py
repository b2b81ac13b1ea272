"""neg-dentry-flood stops when the machine's numbers give the answer.

negflood watches nr_negative while it floods and stops at the first of: a plateau
after the minimum run time (bounded: PASS below the RAM limit), the negatives
reaching the bound past the RAM limit still growing (unbounded: FAIL), or a time
cap computed from RAM and the measured rate (judged by growth; the reason says so).
Past the RAM limit the verdict is FAIL either way, and the reason and the metrics
say whether the negatives settled (where) or were still growing. Here:

- negflood itself on the host's own kernel and filesystem (no guest): each stop
  reason, forced by its options (a tiny RAM limit, a shared name set that is all
  cached, a short cap), the bound past the limit and its MemAvailable share;
- the judge on synthetic runs: a time cap, a flood that settled above the limit,
  one still growing at its bound, an OOM kill (ERROR), and `krig compare` saying
  where each side settled;
- real guests (marker kbuild: the tiny kernels `make ci-kernels` builds), each on
  the smallest guest that shows its stop reason: the cap kernel PASSes by plateau,
  with its cap at 7% of RAM it FAILs settled near 6.9%, tiny-6.1 FAILs still growing
  at its bound, and tiny-6.1 with a forced short cap stops there and FAILs by growth.
  The distro kernel's flood past the limit is asserted on the smoke run in
  test_smoke.py (1 GB guest).
"""
import json
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
CAP70_KERNEL = "tiny-6.1-negative-dentry-cap-70"     # the same build, its cap at 70/1000 at boot


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


def test_negflood_goes_on_past_the_limit_to_its_bound(tmp_path):
    """-x 10: past the limit (0.01% of this host's RAM) the flood goes on until the negatives
    reach 10x the limit, still growing: stop_reason bound."""
    r = negflood(tmp_path, "-g", "1,0,0", "-t", "30", "-l", "0.01", "-x", "10", "-r", "20", "-i", "0.05")
    assert r["stop_reason"] == "bound" and r["limit_crossed"] == "1", r
    assert 0 < float(r["limit_seconds"]) <= float(r["stop_seconds"]) <= float(r["time_cap_s"])
    assert float(r["bound_bytes"]) == pytest.approx(10 * float(r["limit_bytes"]), rel=1e-6)
    assert float(r["bound_pct_ram"]) == pytest.approx(0.1, rel=1e-3)
    assert int(r["negatives_at_stop"]) * int(r["dentry_objsize"]) >= float(r["bound_bytes"])
    # the time cap past the limit: the crossing + 4 x (limit to bound at the measured rate)
    to_bound = 9 * float(r["limit_bytes"]) / (float(r["new_names_per_s"]) * int(r["dentry_objsize"]))
    want = max(float(r["limit_seconds"]) + 4 * to_bound, 2 * float(r["limit_seconds"]))
    assert float(r["time_cap_s"]) == pytest.approx(min(30.0, want), rel=1e-3, abs=2e-3)


def test_negflood_settles_past_the_limit(tmp_path):
    """200,000 shared names: nr_negative passes the limit (0.05% of RAM, ~66k dentries on this
    24 GB host) on the first pass, then holds at ~200k: a plateau past the limit (bounded)."""
    # the limit is a % of MemTotal: scaled so that it is ~12.9 MB (0.05% of 24 GiB) on any host
    total = next(int(ln.split()[1]) << 10 for ln in open("/proc/meminfo") if ln.startswith("MemTotal:"))
    pct = 0.05 * (24 << 30) / total
    r = negflood(tmp_path, "-g", "0,0,1", "-k", "200000", "-t", "60", "-l", f"{pct:.6g}", "-x", "50",
                 "-n", "3", "-w", "1", "-r", "1", "-i", "0.1")
    limit_n = float(r["limit_bytes"]) / int(r["dentry_objsize"])
    assert float(r["limit_bytes"]) == pytest.approx(float(f"{pct:.6g}") / 100 * total, rel=1e-3)
    assert limit_n < 150_000, "the limit must sit below the 200,000 shared names"
    assert r["stop_reason"] == "plateau" and r["limit_crossed"] == "1", r
    assert 190_000 <= int(r["negatives_at_stop"]) <= 260_000
    assert float(r["limit_seconds"]) <= float(r["stop_seconds"]) and float(r["stop_seconds"]) >= 3  # min_duration


def test_negflood_bound_is_a_share_of_mem_available(tmp_path):
    """-a: the bound is at most that % of MemAvailable at the start, whatever -x says."""
    r = negflood(tmp_path, "-g", "1,0,0", "-t", "30", "-l", "0.001", "-x", "100", "-a", "0.002",
                 "-r", "20", "-i", "0.05")
    assert float(r["bound_bytes"]) == pytest.approx(0.002 / 100 * int(r["mem_available_bytes"]), rel=1e-6)
    assert float(r["bound_bytes"]) < 100 * float(r["limit_bytes"])
    assert r["stop_reason"] == "bound"


def test_negflood_bad_usage(tmp_path):
    for args in (["-g", "1,1"], ["-g", "0,0,0"], ["-m", "lookup", "-g", "1,0,0"], [],
                 ["-g", "1,0,0", "-x", "0.5"], ["-g", "1,0,0", "-a", "0"], ["-g", "1,0,0", "-a", "101"]):
        p = subprocess.run([str(NEGFLOOD), "-d", str(tmp_path), "-t", "1", *args], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2 and p.stderr.startswith(("usage:", "negflood:")), args


def _synthetic_run(tmp_path, flood_txt: str, neg):
    """A neg-dentry-flood run directory: samples at 1 Hz, the flood from t=5, negflood's report."""
    d = tmp_path / "run"
    d.mkdir(parents=True)
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


GIB2 = 2 * 1024 ** 3
LIMIT_2G = 0.05 * GIB2        # 5% of the synthetic runs' 2 GiB


def _past_limit(stop: str, level: float, extra: str = "") -> str:
    """negflood's report of a flood on the 2 GiB synthetic machine that crossed the limit."""
    return (f"generators=4\nops=900000 seconds=30.0 rate=75000\nstop_reason={stop}\nstop_seconds=30.0\n"
            f"new_names_per_s=40000\ntime_cap_s=100.000\nlimit_bytes={LIMIT_2G:.0f}\ndentry_objsize=192\n"
            f"limit_crossed=1\nlimit_seconds=14.0\nbound_bytes={2 * LIMIT_2G:.0f}\nnegatives_at_stop={level:.0f}\n"
            + extra)


def _settled_run(tmp_path, level=800_000.0):
    """40k negatives/s from 1000 up to `level` (7.2% of 2 GiB), then flat for 12 s: a plateau."""
    ramp = np.minimum(1000 + 40_000.0 * np.arange(1, 33), level)
    neg = np.concatenate([np.full(5, 1000.0), ramp, np.full(3, level)])
    return _synthetic_run(tmp_path, _past_limit("plateau", level - 1000), neg)


def _unbounded_run(tmp_path):
    """Still growing at 40k/s when it reached its bound of 10% of RAM."""
    top = 1000 + 2 * LIMIT_2G / 192
    neg = np.concatenate([np.full(5, 1000.0), np.minimum(1000 + 40_000.0 * np.arange(1, 30), top),
                          np.full(3, top)])
    return _synthetic_run(tmp_path, _past_limit("bound", top - 1000), neg)


def _values(d):
    return {k: v["value"] for k, v in json.loads((d / "metrics.json").read_text()).items()}


def test_settled_above_the_limit_fails_saying_where(tmp_path, krig_cli):
    """Bounded at 7.2% of RAM: FAIL (the limit is the policy), and the reason and the metrics
    say the negatives settled, where, and that it is above the 5% limit."""
    d = _settled_run(tmp_path)
    p = krig_cli("check", str(d))
    assert p.returncode == 1 and p.stdout.startswith("FAIL: peak_negative_pct_ram"), p.stdout + p.stderr
    m = _values(d)
    assert m["stop_reason"] == 2 and m["limit_crossed"] == 1 and m["bounded"] == 1
    assert m["settled_nr_negative"] == 799_000
    assert m["settled_negative_pct_ram"] == pytest.approx(100 * 799_000 * 192 / GIB2)
    assert m["settle_bound_pct_ram"] == pytest.approx(10.0)
    assert m["last_quarter_growth_pct_of_limit"] == 0
    assert (f"negatives settled at {m['settled_negative_pct_ram']:.3g}% of RAM, 799,000 dentries: bounded, "
            "above the 5% limit") in p.stdout and p.stdout.count("\n") == 1


def test_still_growing_at_the_bound_fails_saying_unbounded(tmp_path, krig_cli):
    d = _unbounded_run(tmp_path)
    p = krig_cli("check", str(d))
    assert p.returncode == 1, p.stdout + p.stderr
    m = _values(d)
    assert m["stop_reason"] == 4 and m["bounded"] == 0 and m["settled_negative_pct_ram"] is None
    assert m["end_negative_pct_ram"] == pytest.approx(10.0, rel=1e-3)
    assert "negatives still growing at 10% of RAM" in p.stdout and "when the flood stopped: unbounded" in p.stdout
    assert m["last_quarter_growth_pct_of_limit"] > 5


def test_guest_oom_kill_is_error(tmp_path, krig_cli):
    """The OOM killer in the guest's console: the instrument broke (ERROR), never a verdict."""
    d = _settled_run(tmp_path)
    (d / "console.log").write_text("[   30.1] negflood invoked oom-killer: gfp_mask=0x140cca\n"
                                   "[   30.2] Out of memory: Killed process 321 (negflood)\n")
    p = krig_cli("check", str(d))
    assert p.returncode == 3 and p.stdout.startswith("ERROR: instrument: oom_kill_lines = 2"), p.stdout
    assert p.stdout.count("\n") == 1


def test_compare_says_where_each_side_settled(tmp_path, krig_cli):
    base, new = _settled_run(tmp_path / "a"), _unbounded_run(tmp_path / "b")
    for d in (base, new):
        assert krig_cli("check", str(d)).returncode == 1
    p = krig_cli("compare", "--out", str(tmp_path / "cmp"), str(base), "--", str(new))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "BASE: negatives settled at 7.14% of RAM: bounded in 1/1 runs" in lines
    assert "NEW:  negatives still growing at 10% of RAM when the flood stopped: unbounded in 1/1 runs" in lines
    js = json.loads(krig_cli("compare", "--json", "--out", str(tmp_path / "cmp"), str(base), "--",
                             str(new)).stdout)
    assert js["base"]["outcome"].startswith("negatives settled") and "unbounded" in js["new"]["outcome"]
    assert "negatives settled at 7.14% of RAM" in (tmp_path / "cmp" / "compare.html").read_text()


def test_flood_without_stop_report_is_error(tmp_path, krig_cli):
    """negflood killed before it reported (no stop_reason): ERROR, never a verdict."""
    d = _synthetic_run(tmp_path, "generators=4\n", np.linspace(0, 1e5, 20))
    p = krig_cli("check", str(d))
    assert p.returncode == 3 and "stop_reason" in p.stdout and "Traceback" not in p.stdout + p.stderr


# --- real guests on the tiny kernels (built by `make ci-kernels`) ---

@pytest.fixture(scope="module")
def tiny_built():
    build_kernels(PLAIN_KERNEL, CAP_KERNEL, CAP70_KERNEL)


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
    assert m["limit_crossed"] == 0 and m["bounded"] == 1 and m["settled_negative_pct_ram"] <= m["peak_negative_pct_ram"]
    assert "bounded, below the 5% limit" in v["reason"]
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
    assert m["limit_crossed"] == 0 and m["bounded"] is None, "not told: the flood never reached the limit"
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


def _cap_allows(mem_total_bytes: int, permille: int) -> int:
    """The cap patch's own bound on unused negatives: totalram_pages() / 1000 * permille *
    (PAGE_SIZE / sizeof(struct dentry)), i.e. 21 dentries of 192 bytes per 4 KiB page."""
    return mem_total_bytes // 4096 // 1000 * permille * (4096 // 192)


@pytest.mark.kbuild
def test_cap_at_7pct_fails_bounded_where_the_cap_holds(tiny_built, tmp_path_factory):
    """The cap kernel booted with its cap at 70/1000 (sysctl.fs.negative-dentry-limit=70 on the
    command line, kernels/tiny-6.1-negative-dentry-cap-70.toml) on a 1 GB guest: the negatives
    cross the 5% limit and the flood goes on; they settle at the cap, ~6.9% of RAM, under the
    10% bound: FAIL (the limit is the policy), bounded, settled within 3% of what the cap allows."""
    rig = rig_with_memory(tmp_path_factory.mktemp("rig70"), "1G")
    p, v, m = _guest_flood(tmp_path_factory, "cap70", "--kernel", CAP70_KERNEL, "--rig", str(rig))
    assert v["verdict"] == "FAIL" and p.returncode == 1, v["reason"]
    d = run_dir_of(p)
    machine = json.loads((d / "manifest.json").read_text())["machine"]
    assert "sysctl.fs.negative-dentry-limit=70" in machine["cmdline"]
    assert m["stop_reason"] == 2 and m["limit_crossed"] == 1 and m["bounded"] == 1, v["reason"]
    allowed = _cap_allows(machine["mem_total_bytes"], 70)
    assert 0.97 * allowed <= m["settled_nr_negative"] <= 1.03 * allowed, (m["settled_nr_negative"], allowed)
    assert 6.5 < m["settled_negative_pct_ram"] < m["settle_bound_pct_ram"] == pytest.approx(10.0)
    assert v["reason"].startswith("peak_negative_pct_ram")
    assert (f"negatives settled at {m['settled_negative_pct_ram']:.3g}% of RAM, "
            f"{m['settled_nr_negative']:,.0f} dentries: bounded, above the 5% limit") in v["reason"]
    assert m["oom_kill_lines"] == 0


@pytest.mark.kbuild
def test_plain_kernel_fails_unbounded(tiny_built, tmp_path_factory):
    """tiny-6.1 (no cap) on a 1 GB guest: past the 5% limit the negatives keep growing until
    they reach the flood's bound (10% of RAM): FAIL, unbounded, nothing settled."""
    rig = rig_with_memory(tmp_path_factory.mktemp("rigplain"), "1G")
    p, v, m = _guest_flood(tmp_path_factory, "unbounded", "--kernel", PLAIN_KERNEL, "--rig", str(rig))
    assert v["verdict"] == "FAIL" and p.returncode == 1, v["reason"]
    assert m["stop_reason"] == 4 and m["limit_crossed"] == 1 and m["bounded"] == 0, v["reason"]
    assert m["settled_negative_pct_ram"] is None and m["settled_nr_negative"] is None
    assert m["end_negative_pct_ram"] >= m["settle_bound_pct_ram"] == pytest.approx(10.0)
    assert m["last_quarter_growth_pct_of_limit"] > 5
    assert f"negatives still growing at {m['end_negative_pct_ram']:.3g}% of RAM" in v["reason"]
    assert "when the flood stopped: unbounded" in v["reason"] and m["oom_kill_lines"] == 0
