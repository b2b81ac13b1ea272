"""pytest options shared by krig's analysis (the judge) and its self-tests."""
import json

import pytest


def pytest_addoption(parser):
    parser.addoption("--krig-run-dir", default=None,
                     help="run directory whose thresholds analysis/test_thresholds.py judges")
    parser.addoption("--krig-outcomes", default=None,
                     help="file the judge appends each threshold test's outcome to, one JSON line a phase "
                          "(krig check reads it and writes junit.xml from it)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With --krig-outcomes: each test phase that ran the judge's code (or failed), as data:
    the test's id, the phase, pytest's outcome, the properties the test recorded, and the first
    line of what went wrong."""
    made = yield
    path = item.config.getoption("krig_outcomes")
    report = made.get_result()
    if not path or (report.when == "teardown" and report.passed):
        return
    said = report.longreprtext.strip().splitlines() if report.failed else []
    row = {"id": getattr(item, "callspec", None) and item.callspec.id, "when": report.when,
           "outcome": report.outcome, "properties": dict(item.user_properties),
           "message": next((ln[2:].strip() for ln in said if ln.startswith("E ")), said[-1] if said else "")}
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
