"""How `make test` spreads the suite over pytest-xdist workers (`-n 2 --dist loadgroup`): a file's
tests stay on one worker (its module fixtures run once), and every file that takes the
session's smoke runs shares one worker with them (each smoke guest boots once).

Needs pytest below 9: pytest-xdist 3.8 names a test's group in a nodeid field pytest 9 no
longer reads (tests/test_xdist_groups.py fails when the groups do not hold)."""
import pytest


@pytest.hookimpl(tryfirst=True)          # before xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Each test without a group of its own gets its file's, or "smoke" for the files that take
    smoke_run (a fixture of tests/conftest.py)."""
    smoke = {item.module.__name__ for item in items if "smoke_run" in getattr(item, "fixturenames", ())}
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            name = item.module.__name__
            item.add_marker(pytest.mark.xdist_group("smoke" if name in smoke else name))
