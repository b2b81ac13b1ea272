"""A qualification's records (krig/record_qualify.py): a case's and suite.json, typed, written
back as they were read, and a bad file is one line naming it."""
import json

import pytest

from krig.errors import UsageError
from krig.record_qualify import CaseRecord, SuiteRecord, case_file, read_case, read_suite, write_case, write_suite
from krig.results import QUALIFY_CASES, SUITE_FILE
from workflows.kcidb import run_dirs
from workflows.qualify import finished

ASKED = {"reproducer": "selftest-pass", "preset": None, "set": {"timeout": "60"}, "kernel": "distro",
         "rig": "qemu-default", "repeat": 1, "expect": "PASS", "id": "selftest-pass-default-1@distro@qemu-default#1"}
RAN = {**ASKED, "started": "2026-01-01T00:00:00+00:00", "verdict": "PASS", "reason": "all thresholds passed",
       "run_dir": "/q/runs/x", "ended": "2026-01-01T00:01:00+00:00", "seconds": 60.2, "ok": True}


def test_a_case_is_written_as_qualify_writes_it(tmp_path):
    """What it asks, then what it gave, in that order; a case not run yet only its verdict (None)."""
    assert list(CaseRecord(**ASKED).to_json().items()) == list({**ASKED, "verdict": None}.items())
    rec = CaseRecord(**ASKED, started=RAN["started"])
    rec.verdict, rec.reason, rec.run_dir = "PASS", RAN["reason"], RAN["run_dir"]
    rec.ended, rec.seconds, rec.ok = RAN["ended"], 60.2, True
    (tmp_path / QUALIFY_CASES).mkdir()              # krig qualify makes it before any case runs
    write_case(tmp_path, rec)
    assert case_file(tmp_path, ASKED["id"]).parent == tmp_path / QUALIFY_CASES
    assert list(json.loads(case_file(tmp_path, ASKED["id"]).read_text()).items()) == list(RAN.items())
    assert read_case(tmp_path, ASKED["id"]) == rec


def test_unknown_keys_survive_a_round_trip(tmp_path):
    case = {**RAN, "host": "lab-7"}
    (tmp_path / QUALIFY_CASES).mkdir()
    write_case(tmp_path, CaseRecord.from_json(case))
    assert read_case(tmp_path, ASKED["id"]).extra == {"host": "lab-7"}
    assert json.loads(case_file(tmp_path, ASKED["id"]).read_text()) == case
    suite = {"suite": "s", "file": "s.toml", "description": "", "krig_revision": "abc", "started": "t0",
             "written": "t1", "complete": True, "all_as_expected": True, "rigs": ["qemu-default"],
             "signoff": ["rig qemu-default: SIGNED OFF: all 1 runs as expected (PASS 1)"], "cases": [case],
             "lab": {"site": "b"}}
    (tmp_path / SUITE_FILE).write_text(json.dumps(suite))
    rec = read_suite(tmp_path)
    assert isinstance(rec.cases[0], CaseRecord) and rec.cases[0].ok and rec.extra == {"lab": {"site": "b"}}
    write_suite(tmp_path, rec)
    assert json.loads((tmp_path / SUITE_FILE).read_text()) == suite
    assert SuiteRecord.from_json(suite).to_json() == suite


@pytest.mark.parametrize("text, says", [
    ("{not json", "not valid JSON"),
    ("[]", "not a JSON object"),
    ('{"cases": {"a": 1}}', "cases is not a list"),
])
def test_a_bad_suite_is_one_line_naming_it(tmp_path, text, says):
    (tmp_path / SUITE_FILE).write_text(text)
    for read in (read_suite, lambda q: run_dirs([q], note=lambda line: None)):      # krig export kcidb's reader
        with pytest.raises(UsageError) as e:
            read(tmp_path)
        assert str(tmp_path / SUITE_FILE) in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


def test_a_bad_case_file_is_one_line_and_a_case_to_run_again(tmp_path):
    (tmp_path / QUALIFY_CASES).mkdir()
    case_file(tmp_path, ASKED["id"]).write_text('"PASS"')
    with pytest.raises(UsageError, match=f"^{case_file(tmp_path, ASKED['id'])}: not a JSON object"):
        read_case(tmp_path, ASKED["id"])
    assert finished(tmp_path, [ASKED]) == {}
    case_file(tmp_path, ASKED["id"]).write_text(json.dumps(RAN))
    assert finished(tmp_path, [ASKED]) == {ASKED["id"]: CaseRecord.from_json(RAN)}
