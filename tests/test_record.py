"""The run record (krig/record.py): facts derived from the typed manifest, decided once."""
import pytest

from krig.record import Manifest


@pytest.mark.parametrize("data, release", [
    ({"machine": {"release": "6.1.0-krig"}, "kernel": {"release": "6.1.0"}}, "6.1.0-krig"),
    ({"machine": {"cpus": 2}, "kernel": {"release": "6.1.0"}}, "6.1.0"),
    ({"machine": None, "kernel": {"release": "6.1.0"}}, "6.1.0"),
    ({"kernel": {"name": "distro"}}, None),
    ({}, None),
])
def test_the_release_that_ran_is_the_machines_else_the_kernels(data, release):
    assert Manifest.from_json(data).release == release
