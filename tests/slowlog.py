"""Lines a run that is stopped from outside still leaves behind: each test phase of a minute or
more, and each failure, printed when it ends (in the controller, as xdist workers report it),
with the minutes since the session began. A CI run killed at its time limit then shows what
took its time and what failed, which the summary at the end of a finished run would have said.
"""
import os
import time

import pytest

SLOW_S = float(os.environ.get("KRIG_TEST_SLOW_S", "60"))     # what is slow enough to be said
_START = time.monotonic()
_SEEN = {}                      # "config": the session's, set at pytest_configure


def _line(report, what: str) -> str:
    m, s = divmod(int(time.monotonic() - _START), 60)
    return f"[+{m:02d}:{s:02d}] {what} {report.when} {report.duration:.0f} s {report.nodeid}"


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    config = _SEEN.get("config")
    if config is None or hasattr(config, "workerinput"):
        return
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        why = (crash.message if crash else report.longreprtext or "").strip().splitlines()
        tr.write_line(_line(report, "FAILED") + (f": {why[0][:200]}" if why else ""), red=True)
    elif report.duration >= SLOW_S:
        tr.write_line(_line(report, "slow"))


def pytest_configure(config):
    _SEEN["config"] = config
