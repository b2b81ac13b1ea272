"""One test per threshold of the run's reproducer: pytest is the judge.

Run by `krig check RUN_DIR` as
  pytest analysis/test_thresholds.py --krig-run-dir=RUN_DIR --krig-outcomes=FILE
(krig reads the outcomes, conftest.py's JSON lines, and writes the run's junit.xml from them)
"""
import functools
import math
import pathlib

import pytest

from analysis.summary import threshold_id, threshold_properties
from krig.record import RunRecord
from krig.reproducer import load_reproducer


def _run_dir(config) -> pathlib.Path:
    d = config.getoption("krig_run_dir")
    if not d:
        pytest.skip("no --krig-run-dir given")
    return pathlib.Path(d)


@functools.cache
def _record(d: str) -> RunRecord:
    """The judged run's record, read once for every hook and fixture of this judge."""
    return RunRecord.read(d)


def pytest_generate_tests(metafunc):
    if "threshold" not in metafunc.fixturenames:
        return
    d = metafunc.config.getoption("krig_run_dir")
    if not d:
        metafunc.parametrize("threshold", [])
        return
    repro = load_reproducer(_record(d).manifest.reproducer or "?")
    metafunc.parametrize("threshold", repro.thresholds,
                         ids=[f"{t.metric} {t.describe()}" for t in repro.thresholds])


@pytest.fixture(scope="module")
def metrics(request):
    return _record(str(_run_dir(request.config))).metric_entries


def judge_value(threshold, value, unit) -> tuple[str, str]:
    """(outcome, one line): outcome is "pass", "fail" (a measured regression threshold crossed),
    "unmeasured" (the metric is missing, None or NaN) or "instrument" (an instrument check
    crossed: the measurement is broken, not the kernel)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unmeasured", f"{threshold.metric}: could not be computed ({unit}); {threshold.rationale}"
    crossed = None
    if threshold.max is not None and value > threshold.max:
        crossed = f"limit <= {threshold.max:g} {unit}"
    elif threshold.min is not None and value < threshold.min:
        crossed = f"limit >= {threshold.min:g} {unit}"
    if crossed is None:
        return "pass", f"{threshold.metric} = {value:g} {unit}"
    line = f"{threshold.metric} = {value:g} {unit}, {crossed}: {threshold.rationale}"
    return ("instrument" if threshold.kind == "instrument" else "fail"), line


@pytest.fixture
def measured(threshold, metrics, record_property):
    """The threshold's value, or an error (not a failure) when the run cannot be judged on it:
    pytest reports a fixture that raises as an error, which krig check turns into ERROR."""
    m = metrics.get(threshold.metric)
    value, unit = (m.value, m.unit) if m else (None, "")
    outcome, line = judge_value(threshold, value, unit)
    record_property("krig_threshold", threshold_id(threshold))
    record_property("krig_outcome", outcome)
    record_property("krig_message", line)
    record_property("krig_host_sensitive", "1" if threshold.host_sensitive else "0")
    # value, unit, better direction and limit, for CI dashboards that plot JUnit properties
    for name, v in threshold_properties(threshold, value, unit, m.better if m else "info").items():
        record_property(name, v)
    if outcome in ("unmeasured", "instrument"):
        raise NotJudged(line)
    return outcome, line


class NotJudged(Exception):
    """The metric could not be computed, or an instrument check failed."""


def test_threshold(threshold, measured):
    outcome, line = measured
    assert outcome == "pass", line
