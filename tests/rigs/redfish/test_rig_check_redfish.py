"""`krig rig check` against a real Redfish BMC: sushy-tools' sushy-emulator over a libvirt domain
with no disk (tests/redfish_fixture.py). Every item ok on a good rig file; a wrong pin, no pin, a
wrong password, a system the BMC does not list and a closed console port each one line naming
the field, and a run with a wrong password refused before its kernel is built; the fingerprint
printed, pasted into the rig file, makes the next check pass; the
domain's power is what it was before every check (read from libvirt, not from the BMC)."""
import os
import re
import subprocess

import pytest

from conftest import KRIG, ROOT, unbuilt_kernel
from redfish_fixture import running_bench
from rig_check_fixture import domain_active, only_bad, rig_check
from rigs.labsim.bmc import free_port

pytestmark = [pytest.mark.redfish, pytest.mark.long(2)]


@pytest.fixture(scope="module")
def bench():
    with running_bench() as b:
        b.fault("")
        yield b


def _rig(bench, name, bmc=None, **top):
    """A rig file of the bench (its known_hosts pins a key for its SSH address; the bench's server
    has no sshd: it stays off, and the check says SSH waits for it to be up)."""
    return bench.rig_file(name, bmc=bmc, **top)


def _check(bench, tmp_path, rig) -> tuple[int, list[str]]:
    return rig_check(rig, tmp_path, lambda: domain_active(bench))


def test_a_good_rig_is_all_ok_and_nothing_is_powered(bench, tmp_path):
    assert not domain_active(bench)
    rc, lines = _check(bench, tmp_path, _rig(bench, "rfok"))
    assert rc == 0, lines
    topics = [ln[5:].split(":")[0] for ln in lines if ln[:4] in ("ok  ", "--  ")]
    for want in ("rig file", "secrets", "ssh host key", "drivers", "tls", "login", "system", "reset types",
                 "privileges", "power", "console", "ssh"):
        assert want in topics, (want, lines)
    assert not [ln for ln in lines if ln.startswith("FAIL")]
    assert any(re.match(r"ok   system: (\S+) \(server\), the BMC lists: \1$", ln) for ln in lines), lines
    assert any(ln.startswith("ok   power: Off") for ln in lines), lines
    assert any(ln.startswith("--   ssh: the server is off") for ln in lines), lines
    assert bench.password not in "\n".join(lines)


def test_no_pin_prints_the_line_to_paste_and_pasting_it_passes(bench, tmp_path):
    rig = _rig(bench, "rfnopin", bmc={"fingerprint": None})
    rc, lines = _check(bench, tmp_path, rig)
    assert rc == 1
    line = only_bad(lines, "tls", "bmc.fingerprint or bmc.ca_file")
    paste = re.search(r'(fingerprint = "[0-9A-F:]{95}")', line).group(1)
    assert paste.replace(":", "").lower().endswith(bench.fingerprint + '"')
    text = rig.read_text().replace("[bmc]\n", f"[bmc]\n{paste}\n")
    rig.write_text(text)
    rc, lines = _check(bench, tmp_path, rig)
    assert rc == 0, lines


def test_openssls_own_line_is_a_pin(bench, tmp_path):
    printed = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", str(bench.cert)],
                             capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    assert printed.lower().startswith("sha256 fingerprint=")
    rc, lines = _check(bench, tmp_path, _rig(bench, "rfossl", bmc={"fingerprint": printed}))
    assert rc == 0, lines


def test_a_wrong_pin_names_the_field(bench, tmp_path):
    rc, lines = _check(bench, tmp_path, _rig(bench, "rfpin", bmc={"fingerprint": "ab" * 32}))
    assert rc == 1
    line = only_bad(lines, "tls", "bmc.fingerprint")
    assert "not the pinned AB:AB" in line and bench.fingerprint[:2].upper() in line
    assert any(ln.startswith("--   login: not tried") for ln in lines)


def test_a_wrong_password_names_the_field(bench, tmp_path):
    pw = tmp_path / "wrong"
    pw.touch(mode=0o600)
    pw.write_text(f"not-the-password\nbmc = 127.0.0.1:{bench.port}\n")
    rc, lines = _check(bench, tmp_path, _rig(bench, "rfpw", bmc={"password_file": str(pw)}))
    assert rc == 1
    line = only_bad(lines, "login", "bmc.user or bmc.password_file")
    assert "401" in line and "not-the-password" not in "\n".join(lines)


def test_a_run_with_a_wrong_password_is_refused_before_its_build(bench, tmp_path):
    """`krig run` of a kernel krig would build (a git tree at a commit): the BMC's login is
    tried first, the wrong password refused in one line naming the fields; nothing built or
    powered, no run directory."""
    pw = tmp_path / "wrong"
    pw.touch(mode=0o600)
    pw.write_text(f"not-the-password\nbmc = 127.0.0.1:{bench.port}\n")
    rig = _rig(bench, "rfrunpw", bmc={"password_file": str(pw)}, boot="kexec")
    cache = tmp_path / "cache"
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results"), "KRIG_CACHE": str(cache)}
    p = subprocess.run(KRIG + ["run", "selftest-pass", "--rig", str(rig), "--kernel", unbuilt_kernel(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert p.returncode == 2, p.stdout + p.stderr
    line = p.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"krig: error: {rig}.bmc.user or bmc.password_file: "
                                                           "login: "), line
    assert "401" in line and line.endswith(f"nothing was built (`krig rig check {rig}` checks the whole rig)")
    assert "kbuild:" not in p.stdout + p.stderr and not (cache / "kbuild").exists()
    assert not (tmp_path / "results").exists()
    assert "not-the-password" not in p.stdout + p.stderr and not domain_active(bench)


def test_a_missing_system_lists_the_members(bench, tmp_path):
    rc, lines = _check(bench, tmp_path, _rig(bench, "rfsys", bmc={"system": "nosuch"}))
    assert rc == 1
    line = only_bad(lines, "system", "bmc.system")
    assert re.search(r"no system 'nosuch' \(the BMC lists: [0-9a-f-]{36}\)", line), line


def test_a_closed_console_port_names_the_field(bench, tmp_path):
    rc, lines = _check(bench, tmp_path, _rig(bench, "rfcon", console=f"telnet://127.0.0.1:{free_port()}"))
    assert rc == 1
    assert "Connection refused" in only_bad(lines, "console", "console")
