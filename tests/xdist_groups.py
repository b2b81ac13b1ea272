"""How `make test` spreads the suite over pytest-xdist workers (`-n 2 --dist loadgroup
--no-loadscope-reorder`): a file's tests stay on one worker (its module fixtures run once),
every file that takes the session's smoke runs shares one worker with them (each smoke guest
boots once), and the longest groups start first, so the last minutes are not one long file
running alone while the other worker idles.

A file says how long it takes with `pytest.mark.long(MINUTES)` (2 cores, both workers busy;
tests/README.md); a group is as long as its longest file, and groups start longest first, the
rest in collection order. It is an ordering hint, never asserted.

Needs pytest below 9: pytest-xdist 3.8 names a test's group in a nodeid field pytest 9 no
longer reads (tests/project/test_xdist_groups.py fails when the groups do not hold)."""
import pytest

import tiers


def _minutes(item) -> float:
    mark = item.get_closest_marker("long")
    return float(mark.args[0]) if mark is not None and mark.args else 0.0


@pytest.hookimpl(tryfirst=True)          # before xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Each test without a group of its own gets its file's, or "smoke" for the files that take
    smoke_run (a fixture of tests/conftest.py); then the groups are put longest first. The
    session's tier (tests/tiers.py) is applied first, so a group is as long as what runs of it."""
    tiers.apply(config, items)
    smoke = {item.module.__name__ for item in items if "smoke_run" in getattr(item, "fixturenames", ())}
    groups = []
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            name = item.module.__name__
            decorator = pytest.mark.xdist_group("smoke" if name in smoke else name)
            item.add_marker(decorator)
            mark = decorator.mark
        groups.append(mark.args[0] if mark.args else mark.kwargs.get("name"))
    length = {}
    for group, item in zip(groups, items):
        length[group] = max(length.get(group, 0.0), _minutes(item))
    ranked = sorted(range(len(items)), key=lambda i: (-length[groups[i]], i))
    items[:] = [items[i] for i in ranked]
