"""Which tier of the suite a pytest session runs (`--tier`, tests/README.md "Tiers"):

- `test`: what `make test` runs, every test but those marked `testlab`;
- `lab`: only the `testlab` ones (`make test-lab`);
- `all`: both (`make test-all`; also plain `pytest`, so that one file runs whole).

The tier deselects on its own, beside `-m`: `make test PYTEST_ARGS='-m guest'` runs the guest tests
of `make test`'s tier, never a `testlab` one. A test that takes the `linux_source` fixture is
marked `ksource` here (it unpacks Debian's linux-source-6.1), so `make test-fast` leaves it out
without each file saying so.
"""
import pytest

TIERS = ("test", "lab", "all")


def pytest_addoption(parser):
    parser.addoption("--tier", choices=TIERS, default="all",
                     help="test: all but the testlab tests (make test); lab: only them (make test-lab); all: both")


def apply(config, items) -> None:
    """Mark the tests that unpack the kernel source `ksource`, and drop (deselect) the tests
    of the other tier."""
    for item in items:
        if "linux_source" in getattr(item, "fixturenames", ()) and item.get_closest_marker("ksource") is None:
            item.add_marker(pytest.mark.ksource)
    tier = config.getoption("--tier", "all")
    if tier == "all":
        return
    want_lab = tier == "lab"
    kept, dropped = [], []
    for item in items:
        (kept if (item.get_closest_marker("testlab") is not None) == want_lab else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
