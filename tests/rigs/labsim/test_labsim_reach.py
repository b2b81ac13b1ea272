"""A kernel that cannot reach the server, on a simulated lab server with an Intel e1000e card
(`krig lab sim up NAME --nic e1000e`, its IPMI BMC ipmi_sim, Debian 12 booted from its own disk):
`krig run selftest-pass --kernel tiny-6.1` (tiny-6.1 has no e1000e driver) is ERROR before the
kexec, one line naming e1000e and CONFIG_E1000E and the drivers= that fixes it (the server
booted into its installed system once, its drivers read there and kept); the next run of the
same kernel is refused before anything is powered (exit 2); with `,drivers=NAME` it PASSes.
One boot of the installed system and one kexec'd run: ~5-10 min under TCG (plus an incremental
build of tiny-6.1 + e1000e when it is not cached). The refusal itself on a recorded inventory,
in seconds: tests/kernels/test_server_reach.py."""
import json
import os
import re
import subprocess

import pytest

from conftest import KRIG, ROOT, judged_as, setup_missing
from krig.paths import cache_dir
from rigs.labsim import image as labsim_image
from rigs.labsim.bmc import missing_tools as bmc_missing

pytestmark = [pytest.mark.testlab, pytest.mark.labsim, pytest.mark.kbuild, pytest.mark.long(12)]
NAME = "krig-test-e1k"


@pytest.fixture(scope="module")
def e1k(tmp_path_factory):
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the e1000e lab server test")
    base = tmp_path_factory.mktemp("labsim-e1k")
    env = {**os.environ, "XDG_CONFIG_HOME": str(base / "config"), "XDG_STATE_HOME": str(base / "state"),
           "KRIG_LOCK_DIR": str(base / "locks"), "KRIG_RESULTS": str(base / "results")}
    kept = cache_dir("servers") / f"{NAME}.drivers"
    kept.unlink(missing_ok=True)            # this server's drivers, read by this test only
    p = subprocess.run(KRIG + ["lab", "sim", "up", NAME, "--nic", "e1000e", "--owner", str(os.getpid())],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        yield env, base
    finally:
        down = subprocess.run(KRIG + ["lab", "sim", "down", NAME], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=300)
        kept.unlink(missing_ok=True)
        assert down.returncode == 0, down.stdout + down.stderr


def _krig(env, *args):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, env=env, timeout=5400)


def _runs(base):
    """The runs' manifests, oldest first."""
    return sorted(base.glob("results/selftest-pass/*/*/*/manifest.json"), key=lambda p: p.stat().st_mtime)


def test_refused_before_kexec_then_before_boot_then_passes_with_its_drivers(e1k):
    env, base = e1k
    p = _krig(env, "run", "selftest-pass", "--rig", NAME, "--kernel", "tiny-6.1")
    out = p.stdout + p.stderr
    assert p.returncode == 3 and "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if "cannot reach the server" in ln and ln.startswith("ERROR")]
    assert len(lines) == 1, out
    assert re.search(r"network card \S+ needs driver e1000e \(CONFIG_E1000E\)", lines[0]), lines[0]
    assert f"--kernel tiny-6.1,drivers={NAME}" in lines[0] and "it was not kexec'd" in lines[0]
    m = json.loads(_runs(base)[-1].read_text())
    assert "kexec" not in m["rig_facts"] and m["outcome"] == "error"
    assert (cache_dir("servers") / f"{NAME}.drivers").is_file()

    p = _krig(env, "run", "selftest-pass", "--rig", NAME, "--kernel", "tiny-6.1")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stdout + p.stderr
    assert "CONFIG_E1000E" in p.stderr and "nothing was booted" in p.stderr
    assert len(_runs(base)) == 1                # refused before a run directory was made

    p = _krig(env, "run", "selftest-pass", "--rig", NAME, "--kernel", f"tiny-6.1,drivers={NAME}")
    run = _runs(base)[-1].parent
    verdict = json.loads((run / "verdict.json").read_text())
    assert judged_as(verdict, "PASS", run), p.stdout + p.stderr
