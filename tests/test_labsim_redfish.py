"""The Redfish rig end to end, as a lab uses it, on `krig lab sim up NAME --bmc redfish --nic e1000e`
started as a user starts it: the disk-booted Debian 12 lab server as a libvirt session domain with
an Intel e1000e card, sushy-emulator its BMC (HTTPS, the certificate pinned in the generated rig
file), its console through ser2net.

1. selftest-pass on tiny-6.1 built like the server (`drivers=RIG`: its drivers read over SSH
   from the installed system, powered on through Redfish for it): only the drivers of its
   network card and disks, so e1000e built in, which tiny-6.1 lacks; kexec'd from the installed
   system, back over SSH through the e1000e card, results pulled, powered off.
2. The wedge on the same kernel (cached): HUNG, the stacks on the console after the Redfish NMI
   (ComputerSystem.Reset Nmi), recovered by a Redfish power cycle through firmware and GRUB.
3. `down` leaves nothing running.

A validation on this server (`krig validate --base tiny-6.1,drivers=RIG`, one run a side) is what
a lab does next; the suite validates on the IPMI server (tests/test_validate_e2e.py) and keeps
this module to two runs: its time is CI's budget."""
import json
import os
import pathlib
import subprocess

import pytest

from conftest import KRIG, ROOT, build_kernels, setup_missing
from kernels.catalog import load_kernel
from kernels.spec import read_dotconfig
from rigs import labsim_image, labsim_redfish

pytestmark = [pytest.mark.labsim, pytest.mark.kbuild, pytest.mark.long(20)]
NAME = "krig-test-rf"
KERNEL = f"tiny-6.1,drivers={NAME}"


@pytest.fixture(scope="module")
def rf_sim(tmp_path_factory):
    setup_missing(labsim_redfish.missing_tools() + labsim_image.missing_tools(), "the Redfish lab server test")
    base = tmp_path_factory.mktemp("labsim-redfish")
    env = {**os.environ, "XDG_CONFIG_HOME": str(base / "config"), "XDG_STATE_HOME": str(base / "state"),
           "KRIG_LOCK_DIR": str(base / "locks"), "KRIG_RESULTS": str(base / "results")}
    p = subprocess.run(KRIG + ["lab", "sim", "up", NAME, "--bmc", "redfish", "--nic", "e1000e",
                               "--owner", str(os.getpid())], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=3600)
    st = json.loads((base / "state" / "krig" / "labsim" / NAME / "state.json").read_text()) \
        if p.returncode == 0 else {}
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        assert "BMC sushy-emulator (Redfish over HTTPS)" in p.stdout and ", NIC e1000e" in p.stdout, p.stdout
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


def _krig(env, *args):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, env=env, timeout=5400)


def test_the_rig_file_pins_the_bmc_and_names_the_console(rf_sim):
    env, rig, st = rf_sim
    text = open(rig).read()
    assert 'driver = "redfish"' in text and 'console = "telnet://127.0.0.1:' in text
    assert f'port = {st["lan_port"]}' in text and "fingerprint = " in text and "password =" not in text
    assert st["bmc_kind"] == "redfish" and st["nic"] == "e1000e"


def _check_drivers_kernel(m: dict, tiny_release: str) -> None:
    """The kernel of a run: tiny-6.1 + the server's boot drivers, e1000e built in, from sysfs."""
    k = m["kernel"]
    assert k["release"].startswith(tiny_release + "-d"), k["release"]
    config = read_dotconfig(pathlib.Path(k["config"]))
    assert config.get("CONFIG_E1000E") == "y", k["config"]
    d = k["drivers"]
    assert d["scope"] == "boot" and d["source"].startswith(f"rig {NAME}"), d
    e = next(a for a in d["added"] if a["symbol"] == "CONFIG_E1000E")
    assert e["from"].startswith("sysfs: net ") and e["from"].endswith(" e1000e") and " -> pci " in e["from"], e
    assert not [a for a in d["added"] if a.get("makefile", "").startswith(("drivers/gpu/", "drivers/usb/"))], d


def test_a_run_on_a_kernel_built_like_the_server(rf_sim, tmp_path):
    """selftest-pass on tiny-6.1 built like the server: its drivers read over SSH from the
    installed system (powered on through Redfish for it), only its network card's and disks'
    added, so e1000e built in, which tiny-6.1 lacks; kexec'd from the installed system, back over
    SSH through the e1000e card, results pulled, powered off."""
    env, rig, st = rf_sim
    env = {**env, "KRIG_RESULTS": str(tmp_path / "results")}
    build_kernels("tiny-6.1")                           # cached: a no-op
    tiny = load_kernel("tiny-6.1")
    assert read_dotconfig(tiny.config).get("CONFIG_E1000E", "n") == "n"      # what makes the card a real test
    p = _krig(env, "run", "selftest-pass", "--rig", NAME, "--kernel", KERNEL)
    out = p.stdout + p.stderr
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert "Traceback" not in out
    assert f"powering {NAME} on into its installed system to read its drivers" in out
    run_dir = next((tmp_path / "results").rglob("manifest.json")).parent
    assert json.loads((run_dir / "verdict.json").read_text())["verdict"] == "PASS"       # back over SSH
    m = json.loads((run_dir / "manifest.json").read_text())
    f = m["rig_facts"]
    assert m["machine"]["release"] == m["kernel"]["release"], m["machine"]
    assert f["kexec"][0] == "kexec" and f["kexec_syscall"].startswith("kexec_"), f
    assert f["kexec_exec"] == ["systemctl", "kexec"], f
    assert f["server_model"] == "Sushy Emulator" and f["memory_gib"] == 2, f
    assert f["results_pull"] == "pulled before the power off" and f["shutdown"] == "soft", f
    _check_drivers_kernel(m, tiny.release)
    console = (run_dir / "console.log").read_text(errors="replace")       # through ser2net
    assert f"Linux version {m['kernel']['release']} " in console


def test_a_wedged_kernel_gets_the_redfish_nmi(rf_sim, tmp_path):
    """selftest-wedge on validate's base kernel (cached: no build): the module spins with
    interrupts off; the NMI through Redfish puts the stacks on the console; HUNG; the Redfish
    power cycle brings the installed system back (panic=0: nothing else would)."""
    env, rig, st = rf_sim
    env = {**env, "KRIG_RESULTS": str(tmp_path / "results")}
    p = _krig(env, "run", "selftest-wedge", "--rig", NAME, "--kernel", KERNEL)
    out = p.stdout + p.stderr
    assert "Traceback" not in out, out[-3000:]
    assert not [ln for ln in out.splitlines() if ln.startswith("kbuild: ") and ": tree " in ln], out[-3000:]  # cached
    run_dir = next((tmp_path / "results").rglob("manifest.json")).parent
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["verdict"] == "HUNG", verdict
    m = json.loads((run_dir / "manifest.json").read_text())
    f = m["rig_facts"]
    _check_drivers_kernel(m, load_kernel("tiny-6.1").release)
    assert f["kexec"][0] == "kexec" and f["kexec_exec"] == ["systemctl", "kexec"], f
    assert f["hang"]["nmi"] == "sent (ComputerSystem.Reset Nmi)", f["hang"]
    assert f["hang"]["recovered"].startswith("yes"), f["hang"]
    assert "ComputerSystem.Reset Nmi: ok" in (run_dir / "bmc.log").read_text()
    console = (run_dir / "console.log").read_text(errors="replace")
    assert "wedging the kernel now" in (run_dir / "stdout").read_text()
    wedge = console.index("test_lockup") if "test_lockup" in console else console.index("Start on CPU")
    nmi = console.index("NMI received for unknown reason", wedge)
    assert "Call Trace" in console[nmi:] or "RIP:" in console[nmi:], console[nmi:nmi + 2000]
    back = console.index("Linux version", nmi)                       # came back after the power cycle:
    assert "Welcome to GRUB" in console[nmi:], console[nmi:nmi + 2000]     # firmware, GRUB, the installed system
    assert back > nmi
