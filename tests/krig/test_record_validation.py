"""validate.json's record (krig/record_validation.py) and the comparison's (krig/record_compare.py):
typed, written back as they were read (a key this krig does not know kept, at every level), and
a file that cannot be read is one line naming it.

Covers: krig/record_compare.py."""
import json

import pytest

from conftest import ROOT
from krig.errors import UsageError
from krig.record_compare import Comparison, MetricRow, Side, Spread, ThresholdRow, ThresholdSide
from krig.record_machine import Machine, RigRecord
from krig.record_validation import (SeriesProvenance, ServerFacts, SideKernel, ValidationRecord, read_validation,
                                    write_validation)
from test_validate import _fake_groups, series_repo  # noqa: F401 (series_repo: a fixture)

ROW = {"metric": "files_seen", "unit": "files", "better": "higher",
       "base": {"n": 4, "median": 2.5, "min": 1.0, "max": 4.0}, "new": {"n": 4, "median": 6.5, "min": 5.0, "max": 8.0},
       "change_pct": 160.0, "direction": "better", "p": 0.0286, "u": 0.0, "floor": 0.0286, "reachable": True,
       "significant": True, "min_change_pct": 1.0, "material": True,
       "values": {"base": [1, 2, 3, 4], "new": [5, 6, 7, 8]}, "verdict": "better"}
SIDE = {"runs": ["/r/ga/run-01"], "verdicts": {"PASS": 4}, "verdict_text": "PASS 4/4", "judged": 4,
        "kernels": ["k1"], "releases": ["6.1-k1"], "rigs": ["qemu-default"], "outcome": None, "projection": None}
COMPARISON = {"reproducer": "selftest-pass", "preset": None, "params": {"files": 100}, "test": "Mann-Whitney U",
              "alpha": 0.05, "min_n_per_side": 4, "base": SIDE, "new": {**SIDE, "kernels": ["k2"]},
              "warnings": [], "differences": ["CONFIG_KASAN: BASE n, NEW y"], "metrics": [ROW],
              "thresholds": [{"threshold": "files_seen >= 5", "metric": "files_seen", "kind": "regression",
                              "base": {"held": 0, "judged": 4, "contended": 0, "state": "crossed"},
                              "new": {"held": 4, "judged": 4, "contended": 0, "state": "held"}, "flips": True}]}
KERNEL = {"name": "tiny-6.1", "release": "6.1.192-krig", "git": {"repository": "https://x/linux.git", "commit": "a" * 40},
          "machine": {"cpus": 2, "mem_total_bytes": 4 << 30, "cpu": {"model": "QEMU"}},
          "rig": {"name": "lab1", "kind": "ipmi", "memory": "2G"}, "rig_facts": {"firmware": "OVMF", "bmc": "h:623"},
          "host_cpu": {"model": "Xeon"}}
SERVER = {"rig": "lab1", "system": "QEMU Standard PC", "firmware": "OVMF", "ram_bytes": 4 << 30, "cpus": 2,
          "cpu": "QEMU", "bmc": None, "bmc_address": "h:623", "memory_gib": 4}
VALIDATION = {"kind": "krig-validate", "reproducer": "selftest-pass", "base": "tiny-6.1", "series": "m@example.org",
              "rig": "lab1", "preset": None, "params": {"files": 100}, "repeat": 4,
              "series_provenance": {"message_id": "m@example.org", "subject": "[PATCH] x", "author": "P <p@x.org>",
                                    "base_commit": None, "patchset_hash": "0" * 64, "cc": ["l@x.org"]},
              "reply_subject": "[PATCH] x", "patches": ["x"], "krig_revision": "c" * 40, "krig_version": "0.1.0",
              "updated": "2026-01-01T00:00:00+00:00", "created": "2026-01-01T00:00:00+00:00",
              "answer": "fixed", "reason": "every base run FAILed", "judged_metrics": ["files_seen"],
              "finished": "2026-01-01T01:00:00+00:00", "base_kernel": KERNEL, "new_kernel": {}, "server": SERVER,
              "differences": ["CONFIG_KASAN: BASE n, NEW y"], "command": ["krig", "validate"],
              "comparison": COMPARISON}


def test_a_comparison_reads_typed_and_writes_back_as_it_was():
    res = Comparison.from_json(COMPARISON)
    assert isinstance(res.base, Side) and isinstance(res.metrics[0], MetricRow)
    assert isinstance(res.metrics[0].base, Spread) and isinstance(res.thresholds[0], ThresholdRow)
    assert isinstance(res.thresholds[0].new, ThresholdSide) and res.thresholds[0].new.state == "held"
    assert res.metrics[0].new.median == 6.5 and res.side("new").kernels == ["k2"]
    assert res.to_json() == COMPARISON
    assert json.dumps(res.to_json()) == json.dumps(COMPARISON)          # the keys in their order too


def test_a_comparison_keeps_a_key_it_does_not_know_at_every_level():
    odd = {**COMPARISON, "effect_size": 0.8, "base": {**SIDE, "cpus": 2},
           "metrics": [{**ROW, "ci": [1, 2], "base": {**ROW["base"], "mean": 2.5}}],
           "thresholds": [{**COMPARISON["thresholds"][0], "note": "x",
                           "new": {**COMPARISON["thresholds"][0]["new"], "skipped": 1}}]}
    assert Comparison.from_json(odd).to_json() == odd


def test_the_judged_runs_of_a_comparison_are_never_written():
    res = Comparison.from_json(COMPARISON)
    res.judged_runs = {"base": [ROOT], "new": []}
    assert "judged_runs" not in res.to_json() and res.to_json() == COMPARISON


def test_a_validation_reads_typed_and_writes_back_as_it_was(tmp_path):
    write_validation(tmp_path, ValidationRecord.from_json(VALIDATION))
    v = read_validation(tmp_path)
    assert isinstance(v.series_provenance, SeriesProvenance) and v.series_provenance.message_id == "m@example.org"
    assert isinstance(v.base_kernel, SideKernel) and isinstance(v.base_kernel.machine, Machine)
    assert isinstance(v.base_kernel.rig, RigRecord) and v.base_kernel.rig.spec == {"memory": "2G"}
    assert v.new_kernel is None                          # {}: no run of the side could be read
    assert isinstance(v.server, ServerFacts) and v.server.memory_gib == 4 and v.server.server_model is None
    assert isinstance(v.comparison, Comparison) and v.comparison.metrics[0].metric == "files_seen"
    assert json.loads((tmp_path / "validate.json").read_text()) == VALIDATION
    assert v.to_json() == VALIDATION


def test_a_validation_keeps_a_key_it_does_not_know_at_every_level(tmp_path):
    odd = {**VALIDATION, "host": "builder", "series_provenance": {**VALIDATION["series_provenance"], "to": ["a"]},
           "base_kernel": {**KERNEL, "modules": 3, "machine": {**KERNEL["machine"], "numa": 2}},
           "server": {**SERVER, "psu": "2x"}, "comparison": {**COMPARISON, "effect_size": 0.8}}
    (tmp_path / "validate.json").write_text(json.dumps(odd))
    write_validation(tmp_path, read_validation(tmp_path))
    assert json.loads((tmp_path / "validate.json").read_text()) == odd


def test_an_unanswered_validation_has_no_answer_yet():
    """Before its answer, validate.json holds what was asked and the series, nothing of the answer."""
    asked = {k: v for k, v in VALIDATION.items() if k not in ValidationRecord.WHEN_ANSWERED}
    v = ValidationRecord.from_json(asked)
    assert not v.answered and v.to_json() == asked
    stopped = ValidationRecord.from_json({**VALIDATION, "server": None, "comparison": None, "judged_metrics": []})
    assert stopped.to_json()["comparison"] is None and stopped.to_json()["server"] is None


@pytest.mark.parametrize("text, says", [
    (None, "-o {d}: validate.json: missing"),
    ("{not json", "-o {d}: validate.json: not valid JSON ("),
    ("[1, 2]", "-o {d}: validate.json is not a JSON object"),
    ('"fixed"', "-o {d}: validate.json is not a JSON object"),
])
def test_a_bad_validation_file_is_one_line_naming_it(tmp_path, text, says):
    if text is not None:
        (tmp_path / "validate.json").write_text(text)
    with pytest.raises(UsageError) as e:
        read_validation(tmp_path)
    assert str(e.value).startswith(says.format(d=tmp_path)) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(UsageError, match=r"^--dir "):
        read_validation(tmp_path, "--dir")


def test_validate_on_a_bad_validation_file_says_one_line(series_repo, tmp_path, monkeypatch):  # noqa: F811
    """-o names a directory whose validate.json is not a validation's: one line naming it, nothing run."""
    from workflows.validate import validate
    calls = _fake_groups(monkeypatch, {"base": ("FAIL", -100), "new": ("PASS", 10)})
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "validate.json").write_text("[]")
    with pytest.raises(UsageError) as e:
        validate("selftest-pass", "tiny-6.1", str(series_repo["mbox"]), 1, out=tmp_path / "v",
                 sender="Krig Tester <tester@example.org>", log=lambda *a: None)
    assert str(e.value) == f"-o {tmp_path / 'v'}: validate.json is not a JSON object" and not calls
