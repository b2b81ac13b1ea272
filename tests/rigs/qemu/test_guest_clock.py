"""The guest's clock under TCG (rig field tcg_clocksource).

By default a TCG guest keeps the kernel's own clocksource (the HPET, an emulated MMIO
device); tcg_clocksource = "tsc" boots it with clocksource=tsc tsc=reliable (docs/rigs.md,
"The clock under TCG"). With the watchdog off (tsc=reliable), nothing in the guest
would notice a TSC that runs at the wrong rate, so the test holds the guest's clock
against the host's, for both settings.

Covers: rigs/qemu/spec.py.
"""
import pathlib
import time

import pytest

from kernels.catalog import load_kernel
from krig.errors import UsageError
from workflows.run import CLOCKSOURCE
from rigs import load_rig
from rigs.qemu.spec import validate_spec

GAP = 20.0        # host seconds between the two readings


def test_tcg_clocksource_values():
    assert validate_spec("r", {"driver": "qemu"}, "rigs/r.toml").tcg_clocksource == "kernel"
    assert validate_spec("r", {"driver": "qemu", "tcg_clocksource": "tsc"}, "r").tcg_clocksource == "tsc"
    with pytest.raises(UsageError, match=r"r.tcg_clocksource: 'hpet' is not one of tsc, kernel"):
        validate_spec("r", {"driver": "qemu", "tcg_clocksource": "hpet"}, "r")


def _guest_uptime(rig) -> tuple[float, float, float]:
    """(host before, guest uptime, host after): the guest read its clock between the two."""
    h0 = time.monotonic()
    res = rig.command.run(["cat", "/proc/uptime"], timeout=60)
    h1 = time.monotonic()
    assert res.returncode == 0, res.stderr
    return h0, float(res.stdout.split()[0]), h1


@pytest.mark.guest
@pytest.mark.parametrize("clock, want", [("tsc", "tsc"), ("kernel", None)])
def test_guest_clock_keeps_the_hosts_pace(tmp_path, no_leftover_qemu, clock, want):
    kernel = load_kernel("distro")
    rig = load_rig("qemu-default")
    rig.respec(accel="tcg", tcg_clocksource=clock)
    with rig:
        rig.prepare(pathlib.Path(tmp_path), kernel, {})
        rig.boot.boot(kernel, [])
        cur = rig.command.run(["cat", CLOCKSOURCE], timeout=60).stdout.decode().strip()
        cmdline = rig.facts()["kernel_cmdline"]
        a0, g0, a1 = _guest_uptime(rig)
        time.sleep(GAP)
        b0, g1, b1 = _guest_uptime(rig)
        rig.shutdown()
    if want:
        assert cur == want and "clocksource=tsc tsc=reliable" in cmdline
    else:
        assert cur != "tsc" and "clocksource=" not in cmdline     # the kernel's own choice
    # the guest's elapsed time lies between the shortest and the longest host interval
    # that can contain its two readings, give or take 3% of the gap
    lo, hi = b0 - a1, b1 - a0
    assert lo * 0.97 <= g1 - g0 <= hi * 1.03, (g1 - g0, lo, hi, cur)
