"""One simulated lab server for the test session, started as a user starts one: `krig lab sim up`.

rigs/labsim/sim.py is the server (ipmi_sim BMC, UEFI firmware + GRUB booting
Debian 12 from its own disk, sshd, an NVMe scratch disk, panic=0). The session
fixture `lab_sim` starts it once with `krig lab sim up krig-test-lab` in
directories of its own (XDG_CONFIG_HOME: the rig file and the BMC password;
XDG_STATE_HOME: the server's disk, logs) and yields a LabServer attached to it
(its ports, ipmitool, ssh, rig files of its own). The files that use it
(tests/rigs/labsim/test_labsim.py, and in `make test-lab` tests/workflows/test_validate_e2e.py) share one xdist group, so one
worker holds the server and the tests take turns on it. At the end `krig lab sim
down`; nothing of it may be left running.
"""
import os
import pathlib
import subprocess

import pytest

from conftest import KRIG, ROOT, setup_missing
from rigs.labsim import sim as labsim
from rigs.labsim import image as labsim_image
from rigs.labsim.bmc import missing_tools as bmc_missing

NAME = "krig-test-lab"
GROUP = pytest.mark.xdist_group("labsim")       # every file that uses lab_sim


@pytest.fixture(scope="session")
def lab_sim(tmp_path_factory):
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the lab server tests")
    base = tmp_path_factory.mktemp("labsim-session")
    env = {**os.environ, "XDG_CONFIG_HOME": str(base / "config"), "XDG_STATE_HOME": str(base / "state"),
           "KRIG_LOCK_DIR": str(base / "locks")}
    # --owner: a session killed before its `down` (SIGKILL, a CI timeout) takes the server with it
    p = subprocess.run(KRIG + ["lab", "sim", "up", NAME, "--owner", str(os.getpid())], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=3600)
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        rig = p.stdout.strip().splitlines()[-1]
        with pytest.MonkeyPatch.context() as mp:
            for k in ("XDG_CONFIG_HOME", "XDG_STATE_HOME"):
                mp.setenv(k, env[k])
            server = labsim.LabServer.attach(NAME)
        assert rig == str(server.rigs / f"{NAME}.toml")
        server.env = env            # what a test's krig needs to find it: its rig file, secret, locks
        yield server
    finally:
        down = subprocess.run(KRIG + ["lab", "sim", "down", NAME], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
    left = started_under(base / "state")
    assert not left, f"left running after krig lab sim down: {left}"
    assert not (base / "config" / "krig" / "rigs" / f"{NAME}.toml").exists()
    assert not list((base / "config" / "krig" / "secrets").glob("*"))


def started_under(state_home) -> list[str]:
    """"pid argv" of every process running with XDG_STATE_HOME=state_home in its environment: what
    a `krig lab sim up` with it started (the supervisor, ipmi_sim, the server's QEMU inherit it;
    their command lines name the server's private directory, not the test's)."""
    mark = f"XDG_STATE_HOME={state_home}".encode()
    out = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if mark in (d / "environ").read_bytes().split(b"\0"):
                out.append(f"{d.name} " + (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return out
