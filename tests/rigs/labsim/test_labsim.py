"""The IPMI rig against a simulated lab server that boots like a real one.

The session's server of `krig lab sim up` (tests/labsim_fixture.py, rigs/labsim/sim.py):
ipmi_sim as the BMC, UEFI firmware + GRUB booting
Debian 12 with systemd from the server's own disk, a non-root SSH user with
sudo, its own host key, an NVMe scratch disk, panic=0. The kernel krig kexecs
into is tiny-6.1 (a release other than the installed Debian one),
with krig's own initramfs and its test_lockup module shipped by krig.

A systemd boot under TCG takes minutes, so these tests share the server with
tests/workflows/test_validate_e2e.py (`make test-lab`) and boot it as few times as possible, in this order:
  1. the test powers the server on itself (one boot, timed) and the rig finds
     it running: a changed host key and a missing package are each one line,
     and nothing is started, so the server is left on as found;
  2. a server that never answers SSH: ERROR, one line.
In `make test-lab` the next runs on the same server are tests/workflows/test_validate_e2e.py's (its
reproduced bundle loaded with kexec_file_load, `kexec -s`, what a locked-down server needs).
A wedged kexec'd kernel on a lab server (NMI, stacks on the console, HUNG, power
cycle back through firmware and GRUB) is tests/rigs/redfish/test_labsim_redfish.py's, through
its Redfish BMC; the IPMI NMI, SEL and SOL path is tests/rigs/ipmi/test_ipmi.py's
test_hang_recovers.

Covers: rigs/labsim/image.py.
"""
import json
import pathlib
import re
import time

import pytest

from krig.config import load_toml
from labsim_fixture import GROUP, NAME
from rigs.labsim import image as labsim_image
from rigs.labsim.bmc import free_port
from test_ipmi import _cli, _leftovers, _wait_no_leftovers

pytestmark = [pytest.mark.labsim, GROUP, pytest.mark.long(24)]     # minutes on 2 cores (not measured since its 3 boots)


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
    # the server's QEMU keeps a small translated-code cache (a warm kexec's copy stays quick), and its
    # installed system starts none of the units the image masks (they would delay sshd under TCG)
    pidfile = load_toml(lab.rigs / f"{NAME}.toml")["emulator_pidfile"]
    argv = pathlib.Path(f"/proc/{int(pathlib.Path(pidfile).read_text())}/cmdline").read_bytes().split(b"\0")
    assert f"tcg,tb-size={labsim_image.TB_CACHE_MIB}".encode() in argv, argv
    units = lab.ssh("sudo -n systemctl list-units --all --state=active --plain --no-legend").stdout
    active = [ln.split()[0] for ln in units.splitlines() if ln.strip()]
    assert "ssh.service" in active and not set(active) & set(labsim_image.MASKED), active

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


def test_server_that_never_answers_is_error(lab, tmp_path):
    """Powered on, but SSH never answers within boot_timeout: ERROR in one line with the
    recovery, no NMI, and the server is powered off again."""
    port = free_port()
    known = tmp_path / "known_hosts"        # the server's key pinned for the port nothing answers on
    key = (lab.base / "known_hosts").read_text().split("\n")[0].split(None, 1)[1]
    known.write_text(f"[127.0.0.1]:{port} {key}\n")
    lab.rig_file("gone", boot="installed", boot_timeout=20, ssh={"port": port, "known_hosts": str(known)})
    p = _cli(lab, tmp_path, "run", "selftest-pass", "--rig", "gone")
    assert p.returncode == 3, p.stdout + p.stderr
    line = _one_line(p.stdout + p.stderr, r"did not answer SSH within 20s after power on")
    assert "power it on by hand" in line
    m = json.loads(next((tmp_path / "results").rglob("manifest.json")).read_text())
    assert "hang" not in m["rig_facts"] and m["outcome"] == "error"
    assert lab.power_status() == "off"
    assert not _wait_no_leftovers(lab)
