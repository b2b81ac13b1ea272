"""The Redfish rig end to end, as a lab uses it, on `krig lab sim up NAME --bmc redfish --nic e1000e`
started as a user starts it: the disk-booted Debian 12 lab server as a libvirt session domain with
an Intel e1000e card, sushy-emulator its BMC (HTTPS, the certificate pinned in the generated rig
file), its console through ser2net (a Unix socket). Every kernel is tiny-6.1 built like the server
(`drivers=RIG`: its drivers read over SSH from the installed system, powered on through Redfish
for it): only the drivers of its network card and disks, so e1000e built in, which tiny-6.1 lacks.

1. The wedge (`make test-lab` only: marked testlab): selftest-wedge kexec'd from the installed
   system, HUNG, the stacks on the console after the Redfish NMI (ComputerSystem.Reset Nmi),
   recovered by a Redfish power cycle through firmware and GRUB. In `make test` a wedge's NMI,
   HUNG and power cycle are tests/rigs/ipmi/test_ipmi.py's test_hang_recovers (ipmi_sim).
2. `krig validate` of the rmdir-keeps-children series as mailed (one run a side: CI's budget),
   *regressed*, both kernels kexec'd (the second from the first run's kernel, the server kept up
   between them), back over SSH through the e1000e card, the consoles through ser2net, the
   server's facts from Redfish in validate.json: `make test`'s validation on a lab server with its
   warm kexec (the IPMI one with repeats and a reproduced bundle, tests/workflows/test_validate_e2e.py, is
   `make test-lab`'s).
3. `down` leaves nothing running.
"""
import json
import mailbox
import os
import pathlib
import subprocess

import pytest

from conftest import KRIG, ROOT, build_kernels, judged_as, setup_missing
from kernels.catalog import load_kernel
from kernels.demo_repo import culprit_series
from kernels.kconfig import read_dotconfig
from rigs.ipmi.drivers import kept
from rigs.labsim import image as labsim_image
from rigs.labsim import redfish as labsim_redfish

# minutes on 2 cores: its validation measured 4.75 (the wedge, testlab: 5.2)
pytestmark = [pytest.mark.labsim, pytest.mark.kbuild, pytest.mark.long(6)]
NAME = "krig-test-rf"
KERNEL = f"tiny-6.1,drivers={NAME}"
TESTER = "Krig Tester <tester@example.org>"


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
    assert 'driver = "redfish"' in text and f'console = "unix:{st["vm_dir"]}/run/console.sock"' in text
    assert f'port = {st["lan_port"]}' in text and "fingerprint = " in text and "password =" not in text
    assert st["bmc_kind"] == "redfish" and st["nic"] == "e1000e"


def _check_drivers_kernel(m: dict, tiny_release: str) -> None:
    """The kernel of a run: tiny-6.1 + the server's boot drivers, e1000e built in, from sysfs."""
    k = m["kernel"]
    assert k["release"].startswith(tiny_release + "-d"), k["release"]
    config = read_dotconfig(pathlib.Path(k["config"]))
    assert config.get("CONFIG_E1000E") == "y", k["config"]
    d = k["drivers"]
    # read from a rig's server: the kernel cache keys it by the drivers, so a kernel another rig of the
    # same server (image, NIC) built first names that rig
    assert d["scope"] == "boot" and d["source"].startswith("rig "), d
    e = next(a for a in d["added"] if a["symbol"] == "CONFIG_E1000E")
    assert e["from"].startswith("sysfs: net ") and e["from"].endswith(" e1000e") and " -> pci " in e["from"], e
    assert not [a for a in d["added"] if a.get("makefile", "").startswith(("drivers/gpu/", "drivers/usb/"))], d


@pytest.mark.testlab
def test_a_wedged_kernel_gets_the_redfish_nmi(rf_sim, tmp_path):
    """selftest-wedge on tiny-6.1 built like the server (the server powered on through Redfish
    to read its drivers first): the module spins with interrupts off; the NMI through Redfish
    puts the stacks on the console; HUNG; the Redfish power cycle brings the installed system
    back (panic=0: nothing else would)."""
    env, rig, st = rf_sim
    env = {**env, "KRIG_RESULTS": str(tmp_path / "results")}
    build_kernels("tiny-6.1")                           # cached: a no-op
    assert read_dotconfig(load_kernel("tiny-6.1").config).get("CONFIG_E1000E", "n") == "n"   # the card is a test
    kept(NAME).unlink(missing_ok=True)      # an earlier test's reading of this server would spare the power on
    p = _krig(env, "run", "selftest-wedge", "--rig", NAME, "--kernel", KERNEL)
    out = p.stdout + p.stderr
    assert "Traceback" not in out, out[-3000:]
    assert f"powering {NAME} on into its installed system to read its drivers" in out
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
    # libvirt gave the server's QEMU the small translated-code cache (what keeps a warm kexec's copy quick)
    qemu_logs = list(pathlib.Path(st["vm_dir"]).glob("run/k/libvirt/qemu/log/*.log"))
    assert any(f"tb-size={labsim_image.TB_CACHE_MIB}" in q.read_text(errors="replace") for q in qemu_logs), qemu_logs


def test_validate_on_the_redfish_server(rf_sim, tmp_path):
    """The rmdir-keeps-children series as mailed, validated on the kernel built like the server
    (its drivers read over SSH from its installed system, powered on through Redfish for it, or
    cached from the wedge's run when `make test-all` ran it first; after a HUNG run the server
    works again):
    *regressed* (exit 5), both kernels kexec'd (the first from the installed system, the second
    straight from the first run's kernel: the server stays up between the runs), back over SSH
    through the e1000e card, consoles through ser2net, the server's facts from Redfish."""
    env, rig, st = rf_sim
    tiny = load_kernel("tiny-6.1")
    mbox = culprit_series(tmp_path / "rmdir.mbox", log=lambda *a: None)
    vdir = tmp_path / "v"
    p = _krig({**env, "KRIG_RESULTS": str(tmp_path / "results")}, "validate", "unlink-dentry-growth", "--rig", NAME,
              "--base", KERNEL, "--series", str(mbox), "--repeat", "1", "--preset", "smoke", "--from", TESTER,
              "-o", str(vdir))
    out = p.stdout + p.stderr
    assert p.returncode == 5, p.stdout[-4000:] + p.stderr[-4000:]
    assert "Traceback" not in out
    answer = [ln for ln in p.stdout.splitlines() if not ln.startswith(("krig: ", "kbuild: "))]
    assert answer[0].startswith("regressed: "), answer
    state = json.loads((vdir / "validate.json").read_text())
    assert state["answer"] == "regressed" and state["rig"] == NAME
    server = state["server"]                            # as Redfish gives it, and as the server says it
    assert server["server_model"] == "Sushy Emulator" and server["memory_gib"] == 2, server
    assert "OVMF" in server["firmware"] or "EFI" in server["firmware"], server
    assert server["ram_bytes"] > 1 << 30 and server["bmc"], server
    base_release = state["base_kernel"]["release"]
    assert base_release.startswith(tiny.release + "-d"), base_release
    assert state["new_kernel"]["release"] == f"{base_release}-s{state['series_provenance']['patchset_hash'][:8]}"
    consoles, bmc_logs = [], []
    last = max((r for side in ("base", "new") for r in (vdir / side).glob("run-*")),
               key=lambda r: json.loads((r / "manifest.json").read_text())["started"])
    for side, release, want in (("base", base_release, "PASS"), ("new", state["new_kernel"]["release"], "FAIL")):
        runs = sorted((vdir / side).glob("run-*"))     # a run the host's contention took is run again
        assert 1 <= len(runs) <= 2, runs
        for run in runs:
            v = json.loads((run / "verdict.json").read_text())
            assert judged_as(v, want, run), (side, v["reason"], p.stdout[-3000:])      # back over SSH
            m = json.loads((run / "manifest.json").read_text())
            f = m["rig_facts"]
            assert m["machine"]["release"] == release, m["machine"]
            assert f["kexec"][0] == "kexec" and f["kexec_syscall"].startswith("kexec_"), f
            assert f["kexec_exec"] == ["systemctl", "kexec"], f
            assert f["server_model"] == "Sushy Emulator" and f["memory_gib"] == 2, f
            # kept up for the next run (rigs/ipmi/warm.py): the validation's end shuts it down, in
            # the record of the run it ran last (workflows/session.py)
            assert f["results_pull"] == "pulled before the power off", f
            assert ("shutdown" in f) == (run == last) and "power_off_error" not in m, (run, last, f)
            assert (run / "host.tsv").exists(), "the simulated server's emulator: the host sampled beside it"
            _check_drivers_kernel(m, tiny.release)
            console = (run / "console.log").read_text(errors="replace")       # through ser2net
            assert f"Linux version {release} " in console, side
            consoles.append(console)
            bmc_logs.append((run / "bmc.log").read_text())
        assert json.loads((runs[-1] / "verdict.json").read_text())["verdict"] == want, side
    # the first run from the installed system (powered on, or found on: left up by the drivers' read
    # or the wedge's power cycle),
    # the second kexec'd straight from the first's kernel, as the first said (next_boot)
    order = sorted((json.loads((r / "manifest.json").read_text()) for side in ("base", "new")
                    for r in (vdir / side).glob("run-*")), key=lambda m: m["started"])
    booted = [m["rig_facts"]["booted_by"] for m in order]
    assert booted[0].startswith(("cold: ", "found on: ")), booted
    assert booted[1] == f"warm: kexec from {order[0]['machine']['release']} of the previous run", booted
    assert booted[1:] == [m["rig_facts"]["next_boot"] for m in order[:-1]], booted
    if booted[0].startswith("cold: "):     # the installed system booted through Redfish (firmware, GRUB), then the kexec
        assert any("Welcome to GRUB" in c and c.count("Linux version") >= 2 for c in consoles), booted
        assert any("ComputerSystem.Reset On: ok" in b for b in bmc_logs), booted
    else:                                   # found on (left up before the validation): nothing powered it on
        assert not any("ComputerSystem.Reset On: ok" in b for b in bmc_logs), booted
    (reply,) = list(mailbox.mbox(str(vdir / "reply.mbox")))
    assert reply["In-Reply-To"] == f"<{state['series_provenance']['message_id']}>"
    assert "  server          " in reply.get_payload() and server["bmc"].split()[0] in reply.get_payload()
