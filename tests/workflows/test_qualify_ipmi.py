"""krig qualify on two simulated IPMI servers (ipmi_sim on 127.0.0.1) at the same time,
and the bundle of an IPMI run: no secret or identity of the rig in it.

One selftest-pass per server (two guests booting at once, ~1.5-2.5 min on 2 cores).
Server b takes its BMC password from the environment: qualify takes it out of its
environment before the workers start and hands it to them in a file in memory it holds.

Covers: rigs/ipmi/bmc.py, rigs/ipmi/lock.py, rigs/ipmi/pull.py, rigs/ipmi/setup.py.
"""
import json
import os
import subprocess
import tarfile

import pytest

from conftest import KRIG, ROOT
from ipmi_fixture import two_sims
from test_qualify import check_outputs

pytestmark = pytest.mark.ipmi

SUITE = """
description = "two lab servers (ipmi_sim)"
rigs = ["lab-a", "lab-b"]
[[runs]]
reproducer = "selftest-pass"
"""


def test_two_ipmi_servers_in_parallel_and_clean_bundle(tmp_path):
    with two_sims(tmp_path, "the IPMI qualification test", "qual") as sims:     # BMC users to look for in the bundle
        sims[1].rig_file("lab-b", bmc={"password_file": None, "password_env": "KRIG_TEST_QUAL_PW"})
        suite = tmp_path / "lab.toml"
        suite.write_text(SUITE)
        out = tmp_path / "qual"
        env = {**os.environ, "KRIG_RIG_PATH": ":".join(str(s.rigs) for s in sims),
               "KRIG_LOCK_DIR": str(tmp_path / "locks"), "KRIG_TEST_QUAL_PW": sims[1].password}
        p = subprocess.run(KRIG + ["qualify", str(suite), "-o", str(out)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=1500)
        assert p.returncode == 0, p.stdout + p.stderr
        result = check_outputs(out, 2, ["lab-a", "lab-b"])
        owners = {}
        for c in result["cases"]:
            m = json.loads(open(os.path.join(c["run_dir"], "manifest.json")).read())
            assert m["rig"]["name"] == c["rig"] and m["rig"]["kind"] == "ipmi"
            owners[c["rig"]] = (m["owner"]["pid"], m["owner"]["start"])
        # one worker per rig (workflows/qualify.py): each server's run was made by its own process,
        # so neither waited for the other (whether they overlapped is the scheduler's business)
        assert len(set(owners.values())) == 2, owners
        assert all(s.power_status() == "off" for s in sims)

        for c, sim in zip(sorted(result["cases"], key=lambda c: c["rig"]), sims):
            tarball = tmp_path / f"bundle-{c['rig']}.tar.gz"
            b = subprocess.run(KRIG + ["bundle", c["run_dir"], "-o", str(tarball)], cwd=ROOT,
                               capture_output=True, text=True, timeout=120)
            assert b.returncode == 0, b.stdout + b.stderr
            unpacked = tmp_path / f"unpacked-{c['rig']}"
            unpacked.mkdir()
            with tarfile.open(tarball) as t:
                t.extractall(unpacked, filter="data")
            rig_toml = next(unpacked.glob("*/rig.toml")).read_text()
            assert 'host = "<BMC_HOST>"' in rig_toml and 'key = "<SSH_KEY>"' in rig_toml
            for needle in (sim.password, "127.0.0.1", sim.USER, "root@", str(sim.base / "client_key"),
                           str(sim.base / "known_hosts"), str(sim.base / "bmc-password"), str(sim.base),
                           *[os.uname().nodename] * (len(os.uname().nodename) >= 3)):
                g = subprocess.run(["grep", "-rlF", needle, str(unpacked)], capture_output=True, text=True)
                assert g.returncode == 1, f"{needle!r} is in the bundle of {c['rig']}: {g.stdout}"
