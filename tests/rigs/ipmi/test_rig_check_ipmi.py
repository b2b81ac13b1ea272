"""`krig rig check` against a real IPMI BMC: OpenIPMI's ipmi_sim on 127.0.0.1 (tests/ipmi_fixture.py).
Off: every item ok, the power left off; a wrong password, a session privilege too low for power
and a closed console port one line each naming the field; a run with a wrong password refused
before its kernel is built. Then the server powered on by hand
(one boot of the simulated server, ~1 min under TCG): SSH logs in with the pinned host key, and a
known_hosts holding another key is one line naming ssh.known_hosts; the power left on."""
import os
import subprocess
import time

import pytest

from conftest import KRIG, ROOT, unbuilt_kernel
from ipmi_fixture import running_sim
from rig_check_fixture import only_bad, rig_check
from rigs.labsim.bmc import free_port

pytestmark = [pytest.mark.ipmi, pytest.mark.long(3)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with running_sim(tmp_path_factory, "rigcheck") as server:
        yield server


def _check(sim, tmp_path, rig) -> tuple[int, list[str]]:
    return rig_check(rig, tmp_path, sim.power_status, secret=sim.password)


def test_off_all_ok(sim, tmp_path):
    assert sim.power_status() == "off"
    rc, lines = _check(sim, tmp_path, sim.rig_file("rcok"))
    assert rc == 0, lines
    topics = {ln[5:].split(":")[0] for ln in lines if ln[:4] in ("ok  ", "--  ")}
    assert {"rig file", "secrets", "ssh host key", "drivers", "login", "privileges", "console", "power",
            "ssh"} <= topics, lines
    assert any(ln.startswith("ok   power: off") for ln in lines)
    assert any(ln.startswith("ok   console: sol: enabled") for ln in lines), lines
    assert any(ln.startswith("--   ssh: the server is off") for ln in lines)


def test_a_wrong_password_names_the_field(sim, tmp_path):
    pw = tmp_path / "wrong"
    pw.touch(mode=0o600)
    pw.write_text(f"notthepassword\nbmc = 127.0.0.1:{sim.lan_port}\n")
    rc, lines = _check(sim, tmp_path, sim.rig_file("rcpw", bmc={"password_file": str(pw)}))
    assert rc == 1
    assert "wrong password" in only_bad(lines, "login", "bmc.password_file")


def test_a_run_with_a_wrong_password_is_refused_before_its_build(sim, tmp_path):
    """`krig run` of a kernel krig would build (a git tree at a commit): the BMC's login is
    tried first, and the wrong password refused in one line naming the field; nothing built,
    nothing powered, no run directory."""
    pw = tmp_path / "wrong"
    pw.touch(mode=0o600)
    pw.write_text(f"notthepassword\nbmc = 127.0.0.1:{sim.lan_port}\n")
    rig = sim.rig_file("rcrunpw", bmc={"password_file": str(pw)}, boot="kexec")     # boots the kernel asked
    cache = tmp_path / "cache"
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results"), "KRIG_CACHE": str(cache)}
    p = subprocess.run(KRIG + ["run", "selftest-pass", "--rig", str(rig), "--kernel", unbuilt_kernel(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    line = p.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"krig: error: {rig}.bmc.password_file: login: "), line
    assert "wrong password" in line and line.endswith(f"nothing was built (`krig rig check {rig}` checks the whole rig)")
    assert "kbuild:" not in p.stdout + p.stderr and not (cache / "kbuild").exists()
    assert not (tmp_path / "results").exists()
    assert sim.password not in p.stderr and sim.power_status() == "off"


def test_a_user_session_cannot_power(sim, tmp_path):
    rc, lines = _check(sim, tmp_path, sim.rig_file("rcuser", bmc={"privilege": "USER"}))
    assert rc == 1
    assert "OPERATOR" in only_bad(lines, "privileges", "bmc.privilege")


def test_a_closed_console_port_names_the_field(sim, tmp_path):
    rc, lines = _check(sim, tmp_path, sim.rig_file("rccon", console=f"telnet://127.0.0.1:{free_port()}"))
    assert rc == 1
    assert "Connection refused" in only_bad(lines, "console", "console")


def test_up_ssh_with_the_pinned_key_and_a_wrong_key(sim, tmp_path):
    assert sim.ipmitool("chassis", "power", "on").returncode == 0
    rig = sim.rig_file("rcup")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        rc, lines = _check(sim, tmp_path, rig)
        if rc == 0 and any(ln.startswith("ok   ssh: ") for ln in lines):
            break
        time.sleep(5)
    assert rc == 0 and any(ln.startswith("ok   power: on") for ln in lines), lines
    rc, lines = _check(sim, tmp_path, sim.rig_file("rcbadkey", ssh={"known_hosts": str(sim.base / "bad_known_hosts")}))
    assert rc == 1
    assert "does not match" in only_bad(lines, "ssh", "ssh.known_hosts")
