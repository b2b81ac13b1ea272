"""The Redfish rig against a real Redfish service: sushy-tools' sushy-emulator with its libvirt
driver over a TCG domain of libvirt's per-user session daemon, HTTPS with its own certificate,
and ser2net in front of the domain's serial line (tests/redfish_fixture.py). The domain has no
disk: its firmware boots nothing, so power states, reset types, the boot override, an NMI and
the facts are seen in seconds, and checked on the domain itself through libvirt, not only
through what the BMC answers. Faults (a busy BMC, a dropped session) come from
tests/redfish_faults.py in front of the emulator.

Covers: rigs/redfish/bmc.py, rigs/redfish/facts.py."""
import json
import os
import pathlib
import re
import subprocess
import threading
import time
from xml.etree import ElementTree

import pytest

from conftest import KRIG, ROOT
from krig.errors import RigError, UsageError
from redfish_fixture import running_bench
from rig_check_fixture import domain_active, redfish_table
from rigs import load_rig
from rigs.ipmi.bmc import BmcAuthError
from rigs.ipmi.state import Power
from rigs.redfish.spec import validate_spec

pytestmark = [pytest.mark.redfish, pytest.mark.long(4)]


@pytest.fixture(scope="module")
def bench():
    with running_bench() as b:
        yield b


@pytest.fixture
def rig(bench):
    bench.fault("")
    r = load_rig(str(bench.rig_file("rf")))
    yield r
    r.bmc.close()
    bench.fault("")
    _off(bench)


def _off(bench):
    dom = bench.domain()
    try:
        if dom.isActive():
            dom.destroy()
    finally:
        dom.connect().close()


def _wait_active(bench, want: bool, timeout: float = 30) -> bool:
    for _ in range(int(timeout / 0.5)):
        if domain_active(bench) == want:
            return True
        time.sleep(0.5)
    return False


def _cli(bench, tmp_path, *args, timeout=300):
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results"), "KRIG_LOCK_DIR": str(tmp_path / "locks")}
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)


def _one_line(out: str, pattern: str) -> str:
    assert "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if re.search(pattern, ln)]
    assert len(lines) == 1, f"no one line matching {pattern!r} in\n{out}"
    return lines[0]


def _run_dir(tmp_path) -> pathlib.Path:
    dirs = sorted((tmp_path / "results").glob("*/*/*/*"))
    assert dirs, "no run directory"
    return dirs[-1]


def test_power_through_the_offered_reset_types(bench, rig, tmp_path):
    bmc = rig.bmc
    bmc.log_path = tmp_path / "bmc.log"
    types = bmc.reset_types()
    assert {"On", "ForceOff", "Nmi"} <= set(types) and "PowerCycle" not in types
    assert bmc.power_status() is Power.OFF and not domain_active(bench)
    bmc.power("on")
    assert bmc.wait_power(Power.ON, 30) and _wait_active(bench, True)
    bmc.power("cycle")          # no PowerCycle offered: ForceRestart, the next one krig takes
    assert "ComputerSystem.Reset ForceRestart: ok" in bmc.log_path.read_text()
    assert domain_active(bench)
    bmc.power("off")
    assert bmc.wait_power(Power.OFF, 30) and _wait_active(bench, False)


def test_a_reset_type_the_system_does_not_offer_is_one_line(bench, rig, monkeypatch):
    from rigs.redfish import bmc as redfish_bmc
    monkeypatch.setitem(redfish_bmc.RESETS, "cycle", ("PowerCycle",))     # as a BMC whose cycle is PowerCycle only
    with pytest.raises(RigError) as e:
        rig.bmc.power("cycle")
    msg = str(e.value)
    assert msg.startswith(f"rig rf: BMC https://127.0.0.1:{bench.port} offers no ResetType for power cycle "
                          "(PowerCycle); it offers ") and "Nmi" in msg and "\n" not in msg
    assert not domain_active(bench)


def test_nmi_reaches_the_running_server(bench, rig, tmp_path):
    rig.bmc.log_path = tmp_path / "bmc.log"
    rig.bmc.power("on")
    assert _wait_active(bench, True)
    rig.bmc.power("diag")
    assert "ComputerSystem.Reset Nmi: ok" in (tmp_path / "bmc.log").read_text()
    qemu = next(ln for ln in bench.processes() if "qemu-system-x86_64" in ln)
    assert "-machine" in qemu and str(bench.base) in qemu      # the domain's own QEMU took the NMI
    rig.bmc.power("off")
    assert _wait_active(bench, False)


def test_one_time_boot_override(bench, rig):
    rig.bmc.bootdev("Pxe")
    dom = bench.domain()
    try:
        devices = ElementTree.fromstring(dom.XMLDesc()).find("devices")
        assert devices.find("interface/boot").get("order") == "1"      # the domain boots from its NIC first
    finally:
        dom.connect().close()
    assert rig.bmc.raw(rig.bmc._system.path)["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    with pytest.raises(RigError) as e:
        rig.bmc.bootdev("Floppy")
    assert "does not offer boot target Floppy; it offers Cd, Hdd, Pxe (bmc.boot_device)" in str(e.value)
    with pytest.raises(RigError, match=r"^rig rf: BMC \S+: HTTP 500 while setting a one-time boot from Hdd: "):
        rig.bmc.bootdev("Hdd")          # listed, but the domain has no disk: the BMC's refusal, one line


def test_facts_console_and_logs_of_a_run(bench, tmp_path):
    """A whole run: the facts in the manifest, the console through ser2net in console.log, the
    log services read; no SSH answers, so the run is ERROR and the server is powered off again."""
    bench.fault("")
    rig = bench.rig_file("rfrun")
    p = _cli(bench, tmp_path, "run", "selftest-pass", "--rig", str(rig))
    assert p.returncode == 3, p.stdout + p.stderr
    _one_line(p.stdout + p.stderr, r"^ERROR: rig rfrun: the server did not answer SSH within 30s after power on.*"
              r"ComputerSystem.Reset On")
    d = _run_dir(tmp_path)
    facts = json.loads((d / "manifest.json").read_text())["rig_facts"]
    assert facts["server_model"] == "Sushy Emulator" and facts["memory_gib"] == 1
    assert facts["processors"] == "1 x qemu64" and facts["firmware_versions"] == {"bios": "1.0.0"}
    assert facts["redfish_auth"] == "basic (no SessionService)" and "Redfish 1." in facts["bmc_info"]
    assert "iPXE" in (d / "console.log").read_text(errors="replace")       # the firmware, through ser2net
    assert "connected" in (d / "netconsole.log").read_text()
    assert "no log services" in (d / "sel-before.txt").read_text()
    assert not domain_active(bench)
    for f in d.rglob("*"):
        if f.is_file():
            assert bench.password not in f.read_text(errors="replace"), f


class _ArgvWatch(threading.Thread):
    def __init__(self, needle: str):
        super().__init__(daemon=True)
        self.needle, self.hits, self.stop = needle.encode(), [], threading.Event()

    def run(self):
        while not self.stop.wait(0.2):
            for p in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    if self.needle in p.read_bytes():
                        self.hits.append(p.parent.name)
                except OSError:
                    pass


def test_password_never_in_argv(bench, tmp_path):
    watch = _ArgvWatch(bench.password)
    watch.start()
    try:
        _cli(bench, tmp_path, "run", "selftest-pass", "--rig", str(bench.rig_file("rfpw", boot_timeout=5)))
    finally:
        watch.stop.set()
        watch.join(5)
    assert not watch.hits


@pytest.mark.parametrize("pin", ["other", "none"])
def test_a_certificate_not_pinned_or_trusted_is_one_line_and_nothing_starts(bench, tmp_path, pin):
    bmc = {"fingerprint": "ab" * 32} if pin == "other" else {"fingerprint": None}
    rig = bench.rig_file("rftls", bmc=bmc)
    p = _cli(bench, tmp_path, "run", "selftest-pass", "--rig", str(rig))
    assert p.returncode == 2, p.stdout + p.stderr          # the rig file's pin: before anything is built
    shown = ":".join([bench.fingerprint[i:i + 2] for i in range(0, 64, 2)]).upper()
    field = "fingerprint" if pin == "other" else r"fingerprint or bmc\.ca_file"
    line = _one_line(p.stdout + p.stderr, rf"^krig: error: \S+/rftls\.toml\.bmc\.{field}: tls: ")
    assert shown in line and line.endswith("; nothing was built (`krig rig check " + str(rig) + "` checks the whole rig)")
    assert ("not the pinned AB:AB" in line) if pin == "other" else ("the system's CAs do not trust" in line)
    assert not domain_active(bench)
    assert not (tmp_path / "results").exists()     # nothing started, not even the console


def test_a_ca_file_that_signed_the_certificate_is_trusted(bench):
    rig = load_rig(str(bench.rig_file("rfca", bmc={"fingerprint": None, "ca_file": str(bench.cert)})))
    try:
        assert rig.bmc.power_status() is Power.OFF
    finally:
        rig.bmc.close()


def test_a_busy_bmc_is_an_error_naming_it(bench, tmp_path):
    bench.fault("busy")
    try:
        p = _cli(bench, tmp_path, "run", "selftest-pass", "--rig", str(bench.rig_file("rfbusy")))
    finally:
        bench.fault("")
    assert p.returncode == 3, p.stdout + p.stderr            # the BMC's fault (ERROR's code), before any build
    _one_line(p.stdout + p.stderr, rf"^krig: error: rig rfbusy: login: BMC https://127.0.0.1:{bench.port}: HTTP 503 "
              r"\(busy: still after the retries\) while logging in: .*; nothing was built")
    assert not (tmp_path / "results").exists()


def test_a_session_dropped_mid_run_is_an_error_naming_the_bmc(bench, tmp_path):
    """The BMC refuses every request once the server is on (the session dropped, no new login):
    the run is ERROR naming the BMC, never a kernel verdict, and krig does not retry the login."""
    rig = bench.rig_file("rfdrop", boot_timeout=60)
    proc = subprocess.Popen(KRIG + ["run", "selftest-pass", "--rig", str(rig)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "KRIG_RESULTS": str(tmp_path / "results"),
                                 "KRIG_LOCK_DIR": str(tmp_path / "locks")})
    try:
        assert _wait_active(bench, True, 60)
        bench.fault("drop")
        out, _ = proc.communicate(timeout=180)
    finally:
        bench.fault("")
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _off(bench)
    assert proc.returncode == 3, out
    line = _one_line(out, rf"^ERROR: rig rfdrop: BMC https://127.0.0.1:{bench.port} refused user 'krig' \(HTTP 401\)")
    assert "while reading the power state: the session dropped and a new login refused" in line
    verdict = json.loads((_run_dir(tmp_path) / "verdict.json").read_text())
    assert verdict["verdict"] == "ERROR" and verdict["cause"] == "rig"


@pytest.mark.parametrize("over, says", [
    ({"bmc": {"fingerprint": "12:34"}}, r"\.bmc\.fingerprint: '12:34' is not a SHA-256 fingerprint"),
    ({"bmc": {"fingerprint": "ab" * 32, "ca_file": "/etc/hostname"}}, r"\.bmc: set at most one of ca_file"),
    ({"bmc": {"boot_device": "pxe"}}, r"\.bmc\.boot_device: 'pxe' is not a Redfish BootSourceOverrideTarget"),
    ({"bmc": {"verify": False}}, r"\.bmc: unknown field 'verify'"),
    ({"console": "sol"}, r"\.console: 'sol': use rfc2217://HOST:PORT, telnet://HOST:PORT or raw://HOST:PORT"),
    ({"console": "rfc2217://ts1:70000"}, r"\.console: 'rfc2217://ts1:70000': use rfc2217"),
])
def test_bad_rig_files_are_one_line(tmp_path, over, says):
    with pytest.raises(UsageError, match=says):
        validate_spec("x", redfish_table(tmp_path, "bmc1:443", **over), "rigs/x.toml")


def test_a_rig_file_without_console_names_it(tmp_path):
    spec = redfish_table(tmp_path, "bmc1:443")
    del spec["console"]
    with pytest.raises(UsageError, match=r"^rigs/x.toml: missing required field 'console'$"):
        validate_spec("x", spec, "rigs/x.toml")


def test_fingerprint_as_openssl_prints_it(tmp_path):
    fp = ":".join(["AB"] * 32)
    spec, pw = validate_spec("x", redfish_table(tmp_path, "bmc1:443", bmc={"fingerprint": f"sha256:{fp}"}), "rigs/x.toml")
    assert spec.bmc.fingerprint == "ab" * 32 and pw == "secret"
    assert "secret" not in json.dumps(spec.to_json()) and spec.lab["driver"] == "redfish"


@pytest.mark.parametrize("bmc, says", [
    ({"auth": "session"}, r" refused user 'krig' \(HTTP 401\) logging in: a wrong password or a locked account, "
                          r"or no SessionService \(auth = \"auto\" logs in without one\)$"),
    ({"user": "other"}, r" refused user 'other' \(HTTP 401\) logging in: a wrong password or a locked account$"),
    ({"system": "nope"}, r": no system 'nope' \(the BMC lists: [0-9a-f-]+\)$"),
])
def test_a_refused_login_or_an_unknown_system_is_one_line(bench, bmc, says):
    rig = load_rig(str(bench.rig_file("rflogin", bmc=bmc)))
    try:
        with pytest.raises(RigError, match=rf"^rig rflogin: BMC https://127.0.0.1:{bench.port}{says}"):
            rig.bmc.power_status()
        if "system" not in bmc:         # never a second try of a refused login: BMCs lock accounts out
            with pytest.raises(BmcAuthError):
                rig.bmc.power_status()
            assert "refused" in rig.bmc.failed
    finally:
        rig.bmc.close()
