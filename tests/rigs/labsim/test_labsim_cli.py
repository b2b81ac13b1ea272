"""`krig lab sim up` / `down` themselves, without booting the server: bad input is one line,
the rig file and the BMC password land where krig finds them, and neither a `down` nor a
supervisor killed with SIGKILL leaves anything of the server running.

The server's boots, kexecs and runs are tests/rigs/labsim/test_labsim.py's and (`make test-lab`) tests/workflows/test_validate_e2e.py's.

Covers: rigs/labsim/sim.py."""
import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

from conftest import KRIG, ROOT, setup_missing
from lab_fixture import Coordinator
from labsim_fixture import started_under
from rigs.labsim import image as labsim_image
from rigs.ipmi.state import Power
from rigs.labsim.bmc import missing_tools as bmc_missing
from workflows import serverreach

pytestmark = pytest.mark.labsim


def _env(tmp_path):
    return {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "KRIG_LOCK_DIR": str(tmp_path / "locks")}


def _krig(tmp_path, *args):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, env=_env(tmp_path), timeout=900)


def _mine(tmp_path) -> list:
    return started_under(tmp_path / "state")


@pytest.mark.parametrize("args, line", [
    (["up", "Lab_1"], r"NAME: 'Lab_1' is not a lab server name"),
    (["up", "lab1", "--memory", "512M"], r"--memory: '512M' is outside 1G-64T"),
    (["up", "lab1", "--memory", "lots"], r"--memory: expected a size like 512M"),
    (["up", "lab1", "--memory", ""], r"^krig: error: --memory: '' is empty; give the server's RAM, 1G-64T"),
    (["up", "lab1", "--memory", "64T"], r"^krig: error: --memory 64T: a sparse 65536\.0 GiB guest would touch [\d.]+ GiB "
     r"at boot alone \(struct pages \(RAM/64\) 1024\.0 GiB .*more than this host's MemAvailable [\d.]+ GiB less a "
     r"[\d.]+ GiB margin \(the host budget, as for the QEMU rig\)$"),
    (["up", "qemu-default"], r"NAME: 'qemu-default' is already the rig .*rigs/qemu-default\.toml"),
    (["up", "lab1\n"], r"NAME: 'lab1\\n' is not a lab server name"),
    (["down", "lab1\n"], r"NAME: 'lab1\\n' is not a lab server name"),
])
def test_bad_input_is_one_line(tmp_path, args, line):
    import re
    p = _krig(tmp_path, "lab", "sim", *args)
    assert p.returncode == 2 and re.search(line, p.stderr) and len(p.stderr.splitlines()) == 1, p.stderr
    assert not (tmp_path / "state").exists()


def test_a_server_whose_owner_ends_stops_by_itself(tmp_path, downed):
    """`--owner PID`: the process that started it (a CI job, a test session) killed without a `down`."""
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the lab server tests")
    owner = subprocess.Popen(["sleep", "600"])
    try:
        p = _krig(tmp_path, "lab", "sim", "up", "lab1", "--owner", str(owner.pid))
        assert p.returncode == 0 and f"or process {owner.pid} ending" in p.stdout, p.stdout + p.stderr
        state = json.loads((tmp_path / "state" / "krig" / "labsim" / "lab1" / "state.json").read_text())
        sup = state["supervisor"]["pid"]
        assert any("ipmi_sim" in ln for ln in _mine(tmp_path)), _mine(tmp_path)
    finally:
        owner.kill()
        owner.wait()
    for _ in range(300):                # the supervisor polls its owner every second
        if not _mine(tmp_path) and not pathlib.Path(f"/proc/{sup}").exists():
            break
        time.sleep(0.2)
    assert not _mine(tmp_path) and not pathlib.Path(f"/proc/{sup}").exists()
    assert not (tmp_path / "config" / "krig" / "rigs" / "lab1.toml").exists()
    assert not list((tmp_path / "config" / "krig" / "secrets").glob("*"))
    assert _krig(tmp_path, "lab", "sim", "down", "lab1").stdout.strip() == "krig: lab sim lab1: not up"
    # an owner still running: `down` stops the server as without one
    p = _krig(tmp_path, "lab", "sim", "up", "lab1", "--owner", str(os.getpid()))
    assert p.returncode == 0, p.stdout + p.stderr
    down = _krig(tmp_path, "lab", "sim", "down", "lab1")
    assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
    assert not _mine(tmp_path)


def test_a_server_is_admitted_by_the_qemu_rigs_host_budget():
    """The decision, without booting, on a 24 GiB host with 22 GiB available: a 64 TiB server's
    struct pages alone exceed the host; a 256 GiB one is sparse and fits as the QEMU rig's 256 GiB
    sparse guest does; up to the host's RAM a server is backed by RAM, which must be available."""
    from rigs import load_rig
    from rigs.qemu import memory as qemu_memory
    from rigs.labsim.sim import admission
    gib = 1 << 30
    total, avail = 24 * gib, 22 * gib
    said = admission(64 << 40, avail, total)
    assert said.startswith("a sparse 65536.0 GiB guest would touch ") and "struct pages (RAM/64) 1024.0 GiB" in said
    assert said.endswith("more than this host's MemAvailable 22.0 GiB less a 1.2 GiB margin"), said
    assert admission(256 * gib, avail, total) is None
    sparse = load_rig("qemu-256g-sparse").host_needs()["sparse_memory"]
    assert qemu_memory.refusal(256 * gib, avail, {**sparse, "margin": qemu_memory.margin(total)}) is None
    assert admission(256 * gib, 5 * gib, total).startswith("a sparse 256.0 GiB guest would touch 4.7 GiB at boot alone")
    assert admission(2 * gib, avail, total) is None
    assert admission(16 * gib, 8 * gib, total) == "16.0 GiB is more than this host can give now (MemAvailable 8.0 GiB)"


@pytest.mark.parametrize("args, line", [
    (["up", "lab1", "--owner", "x"], r"--owner: expected a whole number"),
    (["up", "lab1", "--owner", "0"], r"--owner: 0 is not a running process's pid"),
])
def test_a_bad_owner_is_one_line(tmp_path, args, line):
    import re
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the lab server tests")
    p = _krig(tmp_path, "lab", "sim", *args)
    assert p.returncode == 2 and re.search(line, p.stderr) and len(p.stderr.splitlines()) == 1, p.stderr
    assert not _mine(tmp_path)


@pytest.fixture
def downed(tmp_path):
    """`krig lab sim down lab1` at the end whatever happened (the test's own downs are checked)."""
    yield
    _krig(tmp_path, "lab", "sim", "down", "lab1")


def test_up_down_and_a_supervisor_that_dies(tmp_path, downed):
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the lab server tests")
    p = _krig(tmp_path, "lab", "sim", "up", "lab1", "--memory", "3G")
    assert p.returncode == 0, p.stdout + p.stderr
    rig = tmp_path / "config" / "krig" / "rigs" / "lab1.toml"
    assert p.stdout.splitlines()[-1] == str(rig) and rig.is_file()
    secret = tmp_path / "config" / "krig" / "secrets" / "labsim-lab1-bmc"
    assert oct(secret.stat().st_mode & 0o777) == "0o600" and f'password_file = "{secret}"' in rig.read_text()
    password = secret.read_text().splitlines()[0]
    assert password not in rig.read_text() and not [ln for ln in _mine(tmp_path) if password in ln]
    state = json.loads((tmp_path / "state" / "krig" / "labsim" / "lab1" / "state.json").read_text())
    # its QEMU's pid file: a run samples the host beside the emulator (host.tsv, host contention)
    assert f'emulator_pidfile = "{state["wire"]}/run/qemu.pid"' in rig.read_text()
    listed = subprocess.run(KRIG + ["list"], capture_output=True, text=True, cwd=ROOT, env=_env(tmp_path))
    assert any(ln.split()[:2] == ["lab1", "ipmi"] for ln in listed.stdout.splitlines()), listed.stdout
    again = _krig(tmp_path, "lab", "sim", "up", "lab1")
    assert again.returncode == 0 and "already up (3072 MiB)" in again.stdout and again.stdout.splitlines()[-1] == str(rig)
    assert _krig(tmp_path, "lab", "sim", "down", "lab1").returncode == 0
    assert not rig.exists() and not secret.exists() and not _mine(tmp_path)

    # with a lab coordinator: up makes the server a place there, as `krig lab sync` would
    coord = Coordinator(tmp_path / "coord")
    coord.start()
    try:
        env = {**_env(tmp_path), "KRIG_LAB_COORDINATOR": coord.addr}
        p = subprocess.run(KRIG + ["lab", "sim", "up", "lab1"], capture_output=True, text=True, cwd=ROOT, env=env,
                           timeout=900)
        assert p.returncode == 0 and "lab: place lab1: created" in p.stdout, p.stdout + p.stderr
        assert "lab1" in coord.client("places").stdout
    finally:
        coord.kill()

    # the supervisor killed: its BMC and the powered-on server die with it
    state = json.loads((tmp_path / "state" / "krig" / "labsim" / "lab1" / "state.json").read_text())
    env = {**os.environ, "IPMI_PASSWORD": secret.read_text().splitlines()[0]}
    on = subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(state["lan_port"]), "-U", "krig",
                         "-E", "-C", "3", "chassis", "power", "on"], capture_output=True, text=True, env=env, timeout=60)
    assert on.returncode == 0, on.stderr
    for _ in range(100):
        if any("qemu-system-x86_64" in ln for ln in _mine(tmp_path)):
            break
        time.sleep(0.2)
    assert any("qemu-system-x86_64" in ln for ln in _mine(tmp_path)), _mine(tmp_path)
    os.kill(state["supervisor"]["pid"], signal.SIGKILL)
    for _ in range(100):
        if not _mine(tmp_path):
            break
        time.sleep(0.2)
    assert not _mine(tmp_path)
    listed = _krig(tmp_path, "lab", "sim", "list")       # what it left, until `down` clears it
    assert listed.returncode == 0 and listed.stdout.splitlines()[1].split()[:2] == ["lab1", "stopped"], listed.stdout
    down = _krig(tmp_path, "lab", "sim", "down", "lab1")
    assert down.returncode == 0 and "stopped" in down.stdout
    assert not rig.exists() and not secret.exists()
    assert _krig(tmp_path, "lab", "sim", "down", "lab1").stdout.strip() == "krig: lab sim lab1: not up"


def test_a_bisection_step_on_a_lab_server_boots_its_kernel_by_kexec(tmp_path, downed, monkeypatch):
    """`krig bisect run --rig lab1`: a step's run takes the IPMI rig's kexec path with the step's
    kernel (the kexec itself stopped here: the real one is test_labsim.py's and validate's)."""
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the lab server tests")
    from kernels.catalog import load_kernel
    from workflows import bisect
    from krig.errors import RigError
    from krig.record_bisect import BisectionRecord
    import rigs.ipmi.kexec
    assert _krig(tmp_path, "lab", "sim", "up", "lab1").returncode == 0
    for k, v in _env(tmp_path).items():
        if k.startswith(("XDG_", "KRIG_")):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("KRIG_RESULTS", str(tmp_path / "results"))
    seen = []

    def kexec_boot(rig, power, kernel, cmdline, timeout, reach):
        assert reach is serverreach.at_kexec, "the run's boot asks whether the kernel reaches the server"
        seen.append((rig.name, kernel.release, rig.bmc.power_status()))
        raise RigError(f"rig {rig.name}: the kexec is not part of this test")
    monkeypatch.setattr(rigs.ipmi.kexec, "kexec_boot", kexec_boot)
    state = BisectionRecord(repro="selftest-pass", rig="lab1", kernel="distro", preset=None, sets=[], metric=None)
    attempt = bisect.run_krig(state)
    assert seen == [("lab1", load_kernel("distro").release, Power.OFF)]
    assert attempt.verdict == "ERROR" and "the kexec is not part of this test" in attempt.reason, attempt
    assert bisect.asked_of(state).argv()[3:5] == ["--rig", "lab1"]         # the step's command in bisect.log


def test_a_server_larger_than_the_host_is_sparse(tmp_path, downed):
    """--memory 256G: the server's QEMU is told 256 GiB backed by memory-backend-ram,reserve=off
    (the QEMU rig's sparse backing); nothing is booted here."""
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the lab server tests")
    p = _krig(tmp_path, "lab", "sim", "up", "lab1", "--memory", "256G")
    assert p.returncode == 0 and "262144 MiB sparse" in p.stdout, p.stdout + p.stderr
    state = json.loads((tmp_path / "state" / "krig" / "labsim" / "lab1" / "state.json").read_text())
    start = (pathlib.Path(state["wire"]) / "start-vm").read_text()
    assert f"'memory-backend-ram,id=m0,size={256 << 30},reserve=off'" in start and "'-m' '262144'" in start
    rig = tmp_path / "config" / "krig" / "rigs" / "lab1.toml"
    assert "(262144 MiB," in rig.read_text()
    state = json.loads((tmp_path / "state" / "krig" / "labsim" / "lab1" / "state.json").read_text())
    listed = _krig(tmp_path, "lab", "sim", "list")
    head, row = listed.stdout.splitlines()
    assert head.split()[:4] == ["NAME", "STATE", "MEMORY", "BMC"] and head.endswith("RIG FILE"), listed.stdout
    assert head.split()[4] == "NIC", listed.stdout
    assert row.split() == ["lab1", "up", "262144", "MiB", "sparse", "ipmi", f"127.0.0.1:{state['lan_port']}",
                           "virtio-net", f"127.0.0.1:{state['ssh_port']}", "-", str(rig)], row
    assert _krig(tmp_path, "lab", "sim", "down", "lab1").returncode == 0
    assert _krig(tmp_path, "lab", "sim", "list").stdout.startswith("no simulated lab servers")
