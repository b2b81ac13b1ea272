"""pytest options shared by krig's analysis (the judge) and its self-tests."""


def pytest_addoption(parser):
    parser.addoption("--krig-run-dir", default=None,
                     help="run directory whose thresholds analysis/test_thresholds.py judges")
