"""The IPMI rig against a simulated lab server that boots like a real one.

The session's server of `krig lab sim up` (tests/labsim_fixture.py, rigs/labsim.py):
ipmi_sim as the BMC, UEFI firmware + GRUB booting
Debian 12 with systemd from the server's own disk, a non-root SSH user with
sudo, its own host key, an NVMe scratch disk, panic=0. The kernel krig kexecs
into is tiny-6.1 (a release other than the installed Debian one),
with krig's own initramfs and its test_lockup module shipped by krig.

A systemd boot under TCG takes minutes, so these tests share the server with
tests/test_validate_e2e.py and boot it as few times as possible, in this order:
  1. the test powers the server on itself (one boot, timed) and the rig finds
     it running: a changed host key and a missing package are each one line,
     and nothing is started, so the server is left on as found;
  2. two runs of one workflow: a kexec from the installed system, then a kexec
     straight from that run's kernel into a wedged one: NMI, stacks on the SOL
     console, HUNG, power cycle back into the installed system;
  3. a server that never answers SSH: ERROR, one line.
The next runs on the same server after the wedge are tests/test_validate_e2e.py's
(its reproduced bundle loaded with kexec_file_load, `kexec -s`, what a locked-down
server needs).
"""
import json
import re
import time

import pytest

from conftest import build_kernels
from kernels.catalog import load_kernel
from workflows.run import run
from workflows.session import Session
from labsim_fixture import GROUP
from rigs.labsim_bmc import free_port
from test_ipmi import _cli, _leftovers, _wait_no_leftovers

pytestmark = [pytest.mark.labsim, GROUP, pytest.mark.long(36)]     # minutes on 2 cores: its group with test_validate_e2e.py
KEXEC_KERNEL = "tiny-6.1"


@pytest.fixture(scope="module")
def lab(lab_sim):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KRIG_RIG_PATH", str(lab_sim.rigs))
        mp.setenv("KRIG_LOCK_DIR", lab_sim.env["KRIG_LOCK_DIR"])
        lab_sim.rig_file("lab", boot="kexec", kexec={"append": ["loglevel=6"]})
        yield lab_sim


def _one_line(out: str, pattern: str) -> str:
    lines = [ln for ln in out.splitlines() if re.search(pattern, ln)]
    assert len(lines) == 1, f"no one-line message matching {pattern!r} in\n{out}"
    assert "Traceback" not in out, out
    return lines[0]


def _boot_id(lab) -> str:
    p = lab.ssh("cat /proc/sys/kernel/random/boot_id")
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_found_running_host_key_and_missing_package(lab, tmp_path):
    """Powered on by hand (one boot from the disk, through the firmware and GRUB); the rig
    finds it running. A changed host key: one line, no run. A missing xfsprogs: one line
    naming the package, nothing started. Both times the server is left on as found."""
    t0 = time.monotonic()
    assert lab.ipmitool("chassis", "power", "on").returncode == 0
    for _ in range(600):
        if lab.ssh("true", timeout=30).returncode == 0:
            break
        time.sleep(2)
    print(f"power on -> SSH (firmware, GRUB, Debian's kernel + initrd, systemd): {time.monotonic() - t0:.0f}s")
    bid = _boot_id(lab)
    facts = lab.ssh("uname -r; id -un; sudo -n id -u; cat /proc/1/comm; cat /proc/cmdline").stdout.split("\n")
    image = json.loads((lab.image_dir / "image.json").read_text())
    assert facts[:4] == [image["release"], "krig", "0", "systemd"], facts
    assert "panic=0" in facts[4].split() and "root=UUID=" in facts[4], facts

    lab.rig_file("badkey", boot="kexec", ssh={"known_hosts": str(lab.base / "bad_known_hosts")})
    p = _cli(lab, tmp_path / "badkey", "run", "selftest-pass", "--rig", "badkey")
    assert p.returncode == 3, p.stdout + p.stderr
    _one_line(p.stdout + p.stderr, r"SSH host key of krig@127\.0\.0\.1:\d+ does not match .*bad_known_hosts")
    run_dir = next((tmp_path / "badkey" / "results").rglob("manifest.json")).parent
    assert not (run_dir / "stdout").exists() and "workload" not in json.loads((run_dir / "manifest.json").read_text())

    assert lab.ssh("sudo -n mv /usr/sbin/mkfs.xfs /usr/sbin/mkfs.xfs.hidden").returncode == 0
    try:
        p = _cli(lab, tmp_path / "nopkg", "run", "xfs-ail-storm", "--preset", "smoke", "--rig", "lab")
    finally:
        assert lab.ssh("sudo -n mv /usr/sbin/mkfs.xfs.hidden /usr/sbin/mkfs.xfs").returncode == 0
    assert p.returncode == 3, p.stdout + p.stderr
    _one_line(p.stdout + p.stderr, r"the server lacks mkfs\.xfs \(package xfsprogs\).*nothing was run")
    m = json.loads(next((tmp_path / "nopkg" / "results").rglob("manifest.json")).read_text())
    assert m["rig_facts"]["power"].startswith("left on"), m["rig_facts"]
    assert "kexec" not in m["rig_facts"]
    assert lab.ssh("ls /var/lib/krig 2>/dev/null | wc -l").stdout.strip() in ("0", "")
    assert lab.power_status() == "on" and _boot_id(lab) == bid       # as found: same boot
    assert not [p for p in _leftovers(lab) if "qemu-system" not in p]


def test_wedged_kexec_kernel_gets_nmi(lab, tmp_path):
    """Two runs of one workflow (a Session, as a group's): selftest-pass kexec'd from the
    installed system found running, then selftest-wedge kexec'd straight from the first run's
    kernel (no firmware, no installed system in between). kexec (systemctl kexec under systemd)
    into tiny-6.1 with krig's initramfs and its test_lockup module; the module spins with
    interrupts off. The NMI through the BMC puts the stacks on the SOL console; HUNG; the power
    cycle brings the installed system back (panic=0: nothing else would), and the next boot of
    the workflow is said to follow it."""
    build_kernels(KEXEC_KERNEL)         # make test built it first (ci-kernels): a no-op then
    kernel = load_kernel(KEXEC_KERNEL)
    image = json.loads((lab.image_dir / "image.json").read_text())
    assert kernel.release != image["release"]
    with Session(log=print) as session:
        first, verdict = run("selftest-pass", rig_name="lab", results_root=tmp_path / "pass", log=print,
                             kernel_name=KEXEC_KERNEL, session=session)
        assert verdict["verdict"] == "PASS", verdict
        run_dir, verdict = run("selftest-wedge", rig_name="lab", results_root=tmp_path / "wedge", log=print,
                               kernel_name=KEXEC_KERNEL, session=session)
    assert verdict["verdict"] == "HUNG", verdict
    f1 = json.loads((first / "manifest.json").read_text())["rig_facts"]
    assert f1["booted_by"] in ("found on: kexec from its running system", "cold: power on"), f1   # alone: off
    assert f1["next_boot"] == f"warm: kexec from {kernel.release} of the previous run", f1
    m = json.loads((run_dir / "manifest.json").read_text())
    f = m["rig_facts"]
    assert f["booted_by"] == f1["next_boot"] and f["power_at_start"] == "on", f
    assert f["firmware"] == f1["firmware"], f       # read in the installed system, before the first kexec
    assert f["next_boot"].startswith("cold: power cycle after a hang ("), f
    assert lab.power_status() == "off"              # the workflow's end: powered off
    assert m["machine"]["release"] == kernel.release
    assert f["kexec_exec"] == ["systemctl", "kexec"] and f["kexec"][:2] == ["kexec", "-l"], f
    assert f["kexec_modules"].startswith("copied"), f
    assert "krig.mode=root" in f["kexec"][-1], f
    assert f["hang"]["nmi"].startswith("sent") and f["hang"]["recovered"].startswith("yes"), f["hang"]
    console = (run_dir / "console.log").read_text(errors="replace")
    assert "wedging the kernel now" in (run_dir / "stdout").read_text()
    wedge = console.index("test_lockup") if "test_lockup" in console else console.index("Start on CPU")
    nmi = console.index("NMI received for unknown reason", wedge)
    assert "Call Trace" in console[nmi:] or "RIP:" in console[nmi:], console[nmi:nmi + 2000]
    assert console.index("Linux version", nmi) > nmi                  # came back after the power cycle
    assert "NMI/Diag Interrupt" in (run_dir / "sel.txt").read_text()



def test_server_that_never_answers_is_error(lab, tmp_path):
    """Powered on, but SSH never answers within boot_timeout: ERROR in one line with the
    recovery, no NMI, and the server is powered off again."""
    lab.rig_file("gone", boot="installed", boot_timeout=20, ssh={"port": free_port()})
    p = _cli(lab, tmp_path, "run", "selftest-pass", "--rig", "gone")
    assert p.returncode == 3, p.stdout + p.stderr
    line = _one_line(p.stdout + p.stderr, r"did not answer SSH within 20s after power on")
    assert "power it on by hand" in line
    m = json.loads(next((tmp_path / "results").rglob("manifest.json")).read_text())
    assert "hang" not in m["rig_facts"] and m["outcome"] == "error"
    assert lab.power_status() == "off"
    assert not _wait_no_leftovers(lab)
