"""The Redfish rig end to end on `krig lab sim up NAME --bmc redfish`, started as a user starts
it: the disk-booted Debian 12 lab server as a libvirt session domain, sushy-emulator its BMC
(HTTPS, the certificate pinned in the generated rig file), its console through ser2net.
One run of selftest-pass boots the installed system (UEFI, GRUB, systemd) through a Redfish
ComputerSystem.Reset, kexecs into the kernel under test, runs, pulls the results over SSH
and powers the server off again; `down` leaves nothing running."""
import json
import os
import pathlib
import subprocess

import pytest

from conftest import KRIG, ROOT, setup_missing
from rigs import labsim_image, labsim_redfish

pytestmark = [pytest.mark.labsim, pytest.mark.long(25)]
NAME = "krig-test-rf"


@pytest.fixture(scope="module")
def rf_sim(tmp_path_factory):
    setup_missing(labsim_redfish.missing_tools() + labsim_image.missing_tools(), "the Redfish lab server test")
    base = tmp_path_factory.mktemp("labsim-redfish")
    env = {**os.environ, "XDG_CONFIG_HOME": str(base / "config"), "XDG_STATE_HOME": str(base / "state"),
           "KRIG_LOCK_DIR": str(base / "locks"), "KRIG_RESULTS": str(base / "results")}
    p = subprocess.run(KRIG + ["lab", "sim", "up", NAME, "--bmc", "redfish", "--owner", str(os.getpid())],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)
    st = json.loads((base / "state" / "krig" / "labsim" / NAME / "state.json").read_text()) \
        if p.returncode == 0 else {}
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        assert "BMC sushy-emulator (Redfish over HTTPS)" in p.stdout
        yield env, p.stdout.strip().splitlines()[-1], st
    finally:
        down = subprocess.run(KRIG + ["lab", "sim", "down", NAME], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
    left = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    marks = [str(base)] + ([st["vm_dir"]] if st.get("vm_dir") else [])
    left = [ln for ln in left.splitlines() if any(m in ln for m in marks) and " ps -ww -eo" not in ln]
    assert not left, f"left running after krig lab sim down: {left}"
    assert not st.get("vm_dir") or not os.path.exists(st["vm_dir"])
    assert not list((base / "config" / "krig" / "secrets").glob("*"))


def test_the_rig_file_pins_the_bmc_and_names_the_console(rf_sim):
    env, rig, st = rf_sim
    text = open(rig).read()
    assert 'driver = "redfish"' in text and 'console = "telnet://127.0.0.1:' in text
    assert f'port = {st["lan_port"]}' in text and "fingerprint = " in text and "password =" not in text
    assert st["bmc_kind"] == "redfish"


def test_a_run_boots_kexecs_and_pulls_through_redfish(rf_sim):
    env, rig, st = rf_sim
    p = subprocess.run(KRIG + ["run", "selftest-pass", "--rig", NAME], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=3600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "Traceback" not in out
    run_dir = sorted(pathlib.Path(env["KRIG_RESULTS"]).glob(f"selftest-pass/*/{NAME}/*"))[-1]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["verdict"] == "PASS", verdict
    facts = json.loads((run_dir / "manifest.json").read_text())["rig_facts"]
    assert facts["server_model"] == "Sushy Emulator" and facts["memory_gib"] == 2
    assert facts["kexec_syscall"].startswith("kexec_") and facts["results_pull"] == "pulled before the power off"
    console = (run_dir / "console.log").read_text(errors="replace")
    assert "Welcome to GRUB" in console and console.count("Linux version") >= 2     # firmware, then the kexec
    assert "ComputerSystem.Reset On: ok" in (run_dir / "bmc.log").read_text()
    assert facts["shutdown"] == "soft"
