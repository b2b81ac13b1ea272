"""The fault suite's IPMI rig case (docs/verdicts.md: "Faults and what they give"): the BMC of a
simulated lab server (ipmi_sim) dies mid-run. The QEMU rig's cases are in tests/workflows/test_faults.py."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import KRIG, ROOT, setup_missing
from ipmi_fixture import GUEST_MODULES_EXTRA, SimServer, missing_tools
from kernels.catalog import load_kernel
from rigs import initramfs
from rigs.qemu import rig as qemu
from test_faults import running_manifest, verdict_line, wait_for

pytestmark = pytest.mark.faults

@pytest.mark.ipmi
def test_bmc_dies_mid_run(tmp_path):
    """ipmi_sim (the BMC) killed while the workload runs: ERROR naming the BMC, nothing left running.

    The simulated server's QEMU dies with ipmi_sim (its power goes with it), as the whole
    lab server would look to krig if its BMC and power went away together."""
    setup_missing(missing_tools(), "the IPMI fault case")
    kernel = load_kernel("distro")
    initrd = initramfs.build(kernel.release, kernel.modules_dir, qemu.BASE_MODULES + GUEST_MODULES_EXTRA)
    sim = SimServer(tmp_path / "sim", kernel, initrd)
    (tmp_path / "sim").mkdir()
    try:
        sim.start()
        sim.rig_file("sim", hang_timeout=20, bmc={"timeout": 1, "retries": 2})
        env = {**os.environ, "KRIG_RIG_PATH": str(sim.rigs), "KRIG_RESULTS": str(tmp_path / "results"),
               "KRIG_LOCK_DIR": str(tmp_path / "locks")}
        p = subprocess.Popen(KRIG + ["run", "selftest-hang", "--rig", "sim", "--set", "timeout=120"], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            man = wait_for(lambda: running_manifest(tmp_path), "the server to answer", 300)
            time.sleep(3)
            os.killpg(sim.proc.pid, signal.SIGKILL)
            out, err = p.communicate(timeout=400)
        finally:
            if p.poll() is None:
                p.kill()
        assert p.returncode == 3, out + err
        line = verdict_line(out)
        assert line.startswith("ERROR: ") and "BMC" in line, line
        assert "Traceback" not in err
        d = man.parent
        assert "Linux version" in (d / "console.log").read_text(errors="replace")
        assert json.loads((d / "verdict.json").read_text())["verdict"] == "ERROR"
        left = [ln for ln in sim.processes() if "ipmi_sim" in ln or "qemu-system" in ln or "ipmitool" in ln]
        assert not left, f"left running: {left}"
    finally:
        sim.stop()
    assert not sim.processes()
