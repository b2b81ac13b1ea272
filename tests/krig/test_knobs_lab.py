"""Knob-gated fixes and knob-only A/Bs validated end to end on real guests (the long lab tier:
`make test-lab`; each validation is several neg-dentry-flood smoke runs).

The series is kernels/patches/negative-dentry-knob: negative-dentry-cap's cap with its sysctl,
fs.negative-dentry-limit, at 0 by default (off). Validated on tiny-6.1 without the knob it
changes nothing (not fixed); with `--series-sysctl fs.negative-dentry-limit=10` on the patched
side it bounds the flood (fixed), and the reply names the knob. validate says the series adds
the sysctl and names the flag, never a value. Then a knob-only A/B on tiny-6.1 (no series):
`vm.vfs_cache_pressure` on the flood, four runs a side, with the significance the statistics
give for each judged metric.
"""
import json
import os
import subprocess

import pytest

from conftest import KRIG, ROOT, build_kernels, judged_as

pytestmark = [pytest.mark.testlab, pytest.mark.kbuild, pytest.mark.guest]
TESTER = "Krig Tester <tester@example.org>"
SERIES = ROOT / "kernels" / "patches" / "negative-dentry-knob"
KNOB = "fs.negative-dentry-limit"


def _validate(tmp_path, out: str, *args, timeout=7200):
    argv = ["validate", "neg-dentry-flood", "--base", "tiny-6.1", "--preset", "smoke", "--from", TESTER,
                "-o", str(tmp_path / out), *args]
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    p = subprocess.run(KRIG + argv, capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)
    state = json.loads((tmp_path / out / "validate.json").read_text()) if (tmp_path / out / "validate.json").exists() \
        else None
    return p, state


def _runs(vdir, side):
    return [(r, json.loads((r / "manifest.json").read_text()), json.loads((r / "verdict.json").read_text()))
            for r in sorted((vdir / side).glob("run-*"))]


def test_a_fix_behind_a_sysctl(tmp_path):
    build_kernels("tiny-6.1")
    p, state = _validate(tmp_path, "off", "--series", str(SERIES), "--repeat", "1")
    said = f"krig: the series adds the sysctl {KNOB} (fs/dcache.c): validate with it on as --series-sysctl {KNOB}=VALUE"
    assert said in p.stdout.splitlines(), p.stdout[-3000:]
    assert p.returncode == 1 and state["answer"] == "not fixed", p.stdout[-3000:] + p.stderr[-2000:]
    for run, man, _ in _runs(tmp_path / "off", "new"):
        assert "knobs" not in man, run

    p, state = _validate(tmp_path, "on", "--series", str(SERIES), "--repeat", "1", "--series-sysctl", f"{KNOB}=10")
    assert p.returncode == 0 and state["answer"] == "fixed", p.stdout[-3000:] + p.stderr[-2000:]
    assert state["knobs"] == {"base": [], "series": [f"sysctl {KNOB}=10"]}
    for run, man, verdict in _runs(tmp_path / "on", "new"):
        assert man["knobs"]["sysctl"] == [{"name": KNOB, "set": "10", "read_back": "10"}], run
        assert judged_as(verdict, "PASS", run)
    for run, man, verdict in _runs(tmp_path / "on", "base"):
        assert "knobs" not in man and verdict["verdict"] == "FAIL", run
    reply = (tmp_path / "on" / "reply.txt").read_text()
    assert f"  patched knob    sysctl {KNOB}=10" in reply
    assert f"--series-sysctl {KNOB}=10" in " ".join(reply.replace("\\\n", " ").split())


def test_a_knob_only_ab(tmp_path):
    build_kernels("tiny-6.1")
    p, state = _validate(tmp_path, "ab", "--series-sysctl", "vm.vfs_cache_pressure=1000", "--repeat", "4")
    assert state is not None and state["answer"], p.stdout[-3000:] + p.stderr[-2000:]
    assert p.returncode in (0, 1, 3, 4, 5), p.stderr[-2000:]
    assert state["series"] is None and state["knobs"]["series"] == ["sysctl vm.vfs_cache_pressure=1000"]
    assert state["base_kernel"]["release"] == state["new_kernel"]["release"]
    if state["comparison"]:             # four runs a side: each judged metric has its p-value
        rows = {r["metric"]: r for r in state["comparison"]["metrics"]}
        assert state["judged_metrics"] and all(rows[m]["p"] is not None for m in state["judged_metrics"])
    for run, man, _ in _runs(tmp_path / "ab", "new"):
        assert man["knobs"]["sysctl"][0]["read_back"] == "1000", run
    reply = (tmp_path / "ab" / "reply.txt").read_text()
    assert "on these knobs (one kernel, with and without them)" in " ".join(reply.split())
    assert "  patched knob    sysctl vm.vfs_cache_pressure=1000" in reply
