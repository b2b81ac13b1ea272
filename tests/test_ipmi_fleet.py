"""A fleet of two simulated IPMI servers running reproducers in parallel (pytest-xdist).

It boots two guests at once (~75-85 s on 2 cores).
"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT
from ipmi_fixture import GUEST_MODULES_EXTRA, SimServer, missing_tools
from kernels.catalog import load_kernel
from rigs import initramfs, qemu

pytestmark = pytest.mark.ipmi


def test_two_servers_in_parallel(tmp_path):
    miss = missing_tools()
    if miss:
        pytest.skip(f"needs: {', '.join(miss)}")
    kernel = load_kernel("distro")
    initrd = initramfs.build(kernel.release, kernel.modules_dir, qemu.BASE_MODULES + GUEST_MODULES_EXTRA)
    sims = []
    try:
        for n in ("a", "b"):
            (tmp_path / n).mkdir()
            s = SimServer(tmp_path / n, kernel, initrd, memory_mb=1024)
            sims.append(s)
            s.start()
            s.rig_file(f"fleet-{n}")
        # fleet-b takes its password from the environment: the fleet takes it out of its
        # environment before the workers start, and hands it to them in a 0600 file.
        sims[1].rig_file("fleet-b", bmc={"password_file": None, "password_env": "KRIG_TEST_FLEET_PW"})
        env = {**os.environ, "KRIG_RIG_PATH": ":".join(str(s.rigs) for s in sims),
               "KRIG_LOCK_DIR": str(tmp_path / "locks"), "KRIG_TEST_FLEET_PW": sims[1].password}
        p = subprocess.run([sys.executable, "-m", "krig.fleet", "--rig", "fleet-a", "--rig", "fleet-b",
                            "--run", "selftest-pass", "--run", "selftest-fail", "--expect", "PASS", "--expect", "FAIL",
                            "--results", str(tmp_path / "results")],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        assert p.returncode == 0, p.stdout + p.stderr
        junit = next((tmp_path / "results").glob("fleet-*.xml"))
        cases = {}
        for tc in ET.parse(junit).iter("testcase"):
            props = {e.get("name"): e.get("value") for e in tc.iter("property")}
            cases[tc.get("name")] = props
        assert {c["verdict"] for c in cases.values()} == {"PASS", "FAIL"}
        assert {c["rig"] for c in cases.values()} == {"fleet-a", "fleet-b"}     # one run per server, both used
        for c in cases.values():
            m = json.loads((ROOT / c["run_dir"] / "manifest.json").read_text())
            assert m["rig"]["name"] == c["rig"]
    finally:
        for s in sims:
            s.stop()
    assert not [s.processes() for s in sims if s.processes()]
