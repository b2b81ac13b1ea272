"""Host contention (workflows/hostload.py): the host sampler on this host's real /proc, and the
verdict rule that keeps a timing threshold crossed on a contended host from blaming the
kernel (fed through the real pytest judge, as tests/analysis/test_judge.py)."""
import json
import subprocess
import sys
import time

import pytest

from workflows import hostload
from workflows.check import judge
from krig.record import Tally, read_thresholds
from krig.verdict import judged as verdict_of
from krig.errors import UsageError
from krig.reproducer import load_reproducer, parse_reproducer

from test_judge import FIXED


def test_sampler_sees_busy_processes_as_others(tmp_path):
    """Real /proc: processes spinning on every core are 'others' (no emulator here), one of
    them stands in for the emulator, and the sampler stops when told.

    What is asserted is the sampler's accounting against an independent reading of the
    same processes' CPU time, not how much CPU the scheduler gave them: on a shared
    machine a spinner may get anything from a sliver to a whole core."""
    spin = [subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<4: pass"])
            for _ in range(hostload.os.cpu_count() or 1)]
    interval = 0.5
    try:
        before = [hostload._proc_jiffies(p.pid) for p in spin]
        s = hostload.HostSampler(tmp_path / "host.tsv", emulator_pid=spin[0].pid, interval=interval).start()
        time.sleep(3)
        s.stop()
        after = [hostload._proc_jiffies(p.pid) for p in spin]
    finally:
        for p in spin:
            p.kill()
            p.wait()
    assert not s._thread.is_alive()
    lines = (tmp_path / "host.tsv").read_text().splitlines()
    assert lines[0] == hostload.HEADER.strip()
    rows = [[float(x) for x in ln.split("\t")] for ln in lines[1:]]
    assert len(rows) >= 2, rows  # at least one interval and the row written at the stop
    n = s.ncpus
    monos = [r[0] for r in rows]
    assert monos == sorted(monos) and len(set(monos)) == len(monos)
    for _, busy, emu, others in rows:
        assert 0.0 <= busy <= n + 0.05
        assert 0.0 <= emu <= 1.05          # one single-threaded process: at most one CPU
        assert others == pytest.approx(max(0.0, busy - emu), abs=0.002)
    # CPU seconds the sampler attributed, against /proc read independently around it.
    # Each row covers the time since the previous one; the first row's start is not
    # written, so it gets the nominal interval (one interval of slack either way).
    spans = [interval] + [b - a for a, b in zip(monos, monos[1:])]
    tick = hostload._TICK
    emu_seen = sum(r[2] * d for r, d in zip(rows, spans))
    emu_true = (after[0] - before[0]) / tick
    assert emu_seen <= emu_true + 0.05 + interval * 0.05
    assert emu_seen >= emu_true - interval - 0.05
    others_seen = sum(r[3] * d for r, d in zip(rows, spans))
    others_true = sum(a - b for a, b in zip(after[1:], before[1:])) / tick
    assert others_seen >= others_true - (n - 1) * interval - 0.05
    # contended: what the documented rule gives on the rows the sampler wrote
    hot = sum(1 for _, busy, _, others in rows
              if busy >= hostload.SATURATED * n and others >= hostload.OTHERS_CPUS)
    assert hostload.contended_pct(tmp_path / "host.tsv", n) == pytest.approx(100.0 * hot / len(rows))


def test_contended_pct_counts_saturated_seconds_with_others(tmp_path):
    p = tmp_path / "host.tsv"
    p.write_text(hostload.HEADER + "".join(
        f"{i}\t{busy}\t{emu}\t{busy - emu}\n" for i, (busy, emu) in enumerate(
            [(2.0, 1.0), (1.95, 1.5), (2.0, 1.8), (1.0, 0.5), (2.0, 0.9)])))
    # saturated (>= 1.8 of 2) with others >= 0.5: rows 0, 4 (row 1: others 0.45; row 2: 0.2)
    assert hostload.contended_pct(p, 2) == pytest.approx(40.0)
    (tmp_path / "empty.tsv").write_text(hostload.HEADER)
    assert hostload.contended_pct(tmp_path / "empty.tsv", 2) is None


def judged(tmp_path, values, contended):
    name = "unlink-dentry-growth"
    repro = load_reproducer(name)
    (tmp_path / "manifest.json").write_text(json.dumps({"reproducer": name, "preset": "smoke"}))
    metrics = {m: {"value": values.get(m, 0.0), **meta} for m, meta in repro.metrics.items()}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    return verdict_of(judge(tmp_path), contended)


def test_timing_threshold_on_a_contended_host_is_error_not_fail(tmp_path):
    fixed = FIXED["unlink-dentry-growth"]
    dip = {**fixed, "trough_peak_ratio": 0.45}   # the dip a busy host made here (docs/verdicts.md)
    v, why = judged(tmp_path, dip, contended=35.0)
    assert v == "ERROR" and why.startswith("host contention:") and "trough_peak_ratio = 0.45" in why
    assert "\n" not in why
    # the same numbers on a quiet host: the kernel is blamed
    assert judged(tmp_path, dip, contended=2.0)[0] == "FAIL"
    assert judged(tmp_path, dip, contended=None)[0] == "FAIL"    # a real server: no host.tsv
    # a threshold the host cannot move crossed as well: FAIL whatever the host did
    both = {**dip, "peak_negative_vs_inflight": 50.0}
    v, why = judged(tmp_path, both, contended=80.0)
    assert v == "FAIL" and "peak_negative_vs_inflight" in why


def test_a_starved_sampler_on_a_contended_host_is_the_hosts_error(tmp_path):
    """The sampler's gaps (an instrument marked host_sensitive) on a contended host: ERROR whose cause
    is host contention (krig validate runs it again), not krig's; on a quiet host, or with a
    threshold the host cannot move crossed as well, the instrument's ERROR stays krig's."""
    fixed = FIXED["unlink-dentry-growth"]
    gap = {**fixed, "sampler_max_gap_intervals": 15.4}
    v, why = judged(tmp_path, gap, contended=99.0)
    assert v == "ERROR" and why.startswith("host contention:") and "sampler_max_gap_intervals = 15.4" in why
    assert verdict_of(tally_of(tmp_path), 99.0).cause == "host-contention"
    v, why = judged(tmp_path, gap, contended=2.0)
    assert v == "ERROR" and why.startswith("instrument: ") and verdict_of(tally_of(tmp_path), 2.0).cause == "krig"
    lost = {**gap, "trace_lost_events": 3.0}          # an instrument the host does not starve, broken too
    v, why = judged(tmp_path, lost, contended=99.0)
    assert v == "ERROR" and why.startswith("instrument: ")


def tally_of(tmp_path) -> Tally:
    """The judge's tally of the run judged last in tmp_path (thresholds.json)."""
    return Tally.of(list(read_thresholds(tmp_path).values()))


def test_host_sensitive_is_checked(tmp_path):
    base = {"description": "d", "metrics": {"m": {"unit": "s", "better": "lower"}}}
    r = parse_reproducer("x", tmp_path, {**base, "thresholds": [
        {"metric": "m", "max": 1, "rationale": "r", "host_sensitive": True}]})
    assert r.thresholds[0].host_sensitive
    r = parse_reproducer("x", tmp_path, {**base, "thresholds": [
        {"metric": "m", "max": 1, "rationale": "r", "kind": "instrument", "host_sensitive": True}]})
    assert r.thresholds[0].host_sensitive and r.thresholds[0].kind == "instrument"
    with pytest.raises(UsageError, match=r"host_sensitive"):
        parse_reproducer("x", tmp_path, {**base, "thresholds": [
            {"metric": "m", "max": 1, "rationale": "r", "host_sensitive": "yes"}]})
