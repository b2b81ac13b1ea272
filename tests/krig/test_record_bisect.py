"""A bisection's state (krig/record_bisect.py): typed, written back as it was read, and a state
no step can read is one line naming it."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from krig.errors import UsageError
from krig.record_bisect import ZonesRecord, read_bisection, write_bisection
from krig.results import BISECT_STATE
from workflows import metric_bisect as mb

STATE = {"tree": "/src/linux", "ref": "BISECT_HEAD", "kernel": "bisect-x", "kernels": "/b/kernels",
         "repro": "unlink-dentry-growth", "preset": "smoke", "repeat": 3, "rig": "qemu-default",
         "sets": ["timeout=60"], "log": "/b/bisect.log", "metric": "m", "mode": "verdict"}


def test_the_state_reads_typed_and_writes_back_as_it_was(tmp_path):
    (tmp_path / BISECT_STATE).write_text(json.dumps(STATE))
    st = read_bisection(tmp_path / BISECT_STATE)
    assert (st.repro, st.repeat, st.sets, st.zones) == ("unlink-dentry-growth", 3, ["timeout=60"], None)
    assert st.to_json() == STATE, "no zones until the endpoints are measured"
    write_bisection(tmp_path, st)
    assert json.loads((tmp_path / BISECT_STATE).read_text()) == STATE


def test_unknown_keys_survive_a_round_trip(tmp_path):
    zones = {**mb.to_state(mb.zones("m", [1.0, 1.2], [50.0, 48.0])).to_json(), "width": 2}
    data = {**STATE, "mode": "metric", "zones": zones, "newer": {"a": 1}}
    (tmp_path / BISECT_STATE).write_text(json.dumps(data))
    st = read_bisection(tmp_path / BISECT_STATE)
    assert isinstance(st.zones, ZonesRecord) and st.extra == {"newer": {"a": 1}} and st.zones.extra == {"width": 2}
    assert st.to_json() == data
    z = mb.from_state(st.zones)
    assert z.vote(1.1) == "good" and z.vote(49.0) == "bad"
    assert mb.to_state(z).to_json() == {k: v for k, v in zones.items() if k != "width"}


@pytest.mark.parametrize("text, says", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({k: v for k, v in STATE.items() if k not in ("tree", "log")}), "no tree, log"),
])
def test_a_bad_state_is_one_line_naming_it(tmp_path, text, says):
    (tmp_path / BISECT_STATE).write_text(text)
    with pytest.raises(UsageError) as e:
        read_bisection(tmp_path / BISECT_STATE)
    assert str(tmp_path / BISECT_STATE) in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


def test_a_missing_state_is_one_line(tmp_path):
    with pytest.raises(UsageError, match=f"{tmp_path / BISECT_STATE}: missing"):
        read_bisection(tmp_path / BISECT_STATE)


def test_the_oracle_stops_the_bisection_on_a_state_it_cannot_read(tmp_path):
    """git bisect run's step: one line naming the file, and 255 (abort), never a skip that would
    walk every commit, nor a traceback."""
    (tmp_path / BISECT_STATE).write_text('"a string"')
    p = subprocess.run([sys.executable, "-m", "workflows.bisect", "oracle", str(tmp_path / BISECT_STATE)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 255, p.stdout + p.stderr
    assert p.stderr.strip().splitlines() == [f"krig: error: {tmp_path / BISECT_STATE}: not a JSON object "
                                             f"(not a bisection's {BISECT_STATE})"]
