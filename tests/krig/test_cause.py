"""Who a verdict blames is data (verdict.json "cause"), and what decides reads that, not words.

Covers: krig/tally.py, krig/verdict.py."""
import dataclasses
import json

import pytest

from workflows import validate
from krig.record import Tally
from krig.verdict import CAUSES, Evidence, decide, judged

TALLY = Tally(passed=2)
CONSOLE = "[    0.000000] Linux version 6.1.0 (x@y) (gcc) #1\n"


@pytest.mark.parametrize("ev,verdict,cause", [
    (Evidence(outcome=None), "INCOMPLETE", "krig"),
    (Evidence(outcome="interrupted", reason="stopped"), "INTERRUPTED", "interrupted"),
    (Evidence(outcome="completed", pull_error="cannot move"), "ERROR", "rig"),
    (Evidence(outcome="completed", console=CONSOLE + "Kernel panic - not syncing: x\n"), "CRASHED", "kernel"),
    (Evidence(outcome="completed", host_fault="disk full"), "ERROR", "host-fault"),
    (Evidence(outcome="skip", reason="needs 2 CPUs"), "SKIP", "machine"),
    (Evidence(outcome="completed", analysis_error="bad samples"), "ERROR", "krig"),
    (Evidence(outcome="hung", reason="timeout", rig_fault="qemu said no"), "ERROR", "rig"),
    (Evidence(outcome="hung", reason="timeout"), "ERROR", "rig"),          # the kernel never ran
    (Evidence(outcome="hung", reason="timeout", console=CONSOLE, progress="samples moved", timeout=60.0),
     "ERROR", "host-fault"),
    (Evidence(outcome="hung", reason="timeout", console=CONSOLE), "HUNG", "kernel"),
    (Evidence(outcome="crashed", reason="died", machine_answered=True), "CRASHED", "kernel"),
    (Evidence(outcome="completed", thresholds=TALLY), "PASS", "kernel"),
])
def test_every_verdict_names_its_cause(ev, verdict, cause):
    d = decide(ev)
    assert d[0] == verdict and d.cause == cause and d.cause in CAUSES
    v, why = d                      # still a (verdict, reason) pair for every caller
    assert v == verdict


def test_judged_causes():
    fail = dataclasses.replace(TALLY, failed=1, failed_host_sensitive=1, failures=("t crossed",))
    assert judged(fail).cause == "kernel"
    assert judged(fail, host_contended_pct=50.0).cause == "host-contention"
    assert judged(dataclasses.replace(TALLY, broken=("x",), instrument=1)).cause == "krig"


def test_validate_counts_runs_lost_to_contention_by_cause_not_words(tmp_path, monkeypatch):
    runs = []
    for i, verdict in enumerate([
            {"verdict": "ERROR", "reason": "anything at all", "cause": "host-contention"},
            {"verdict": "ERROR", "reason": "host contention: but the cause says the rig", "cause": "rig"},
            {"verdict": "ERROR", "reason": "host contention: an older verdict, no cause: not guessed from words"},
            {"verdict": "FAIL", "reason": "t crossed", "cause": "kernel"}]):
        d = tmp_path / f"run-{i:02d}"
        d.mkdir()
        (d / "verdict.json").write_text(json.dumps(verdict))
        runs.append((d, verdict["verdict"]))
    monkeypatch.setattr(validate, "group_runs", lambda gdir: runs)
    assert validate.contended(tmp_path) == [runs[0][0]]
