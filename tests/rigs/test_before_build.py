"""What a workflow checks of a lab server before its first kernel build (rigs/check.py
before_build): the host key every time, the BMC's items once a process, a FAIL refused in one
line naming the rig file's field, a BMC that does not answer refused with ERROR's exit code,
a refused log clearing never refused. The BMC's answers here are a stand-in for its driver's
items (rigs/ipmi/check.py); against the real ipmi_sim: tests/rigs/ipmi/test_rig_check_ipmi.py."""
import pytest

import rigs.check as rc
from krig.errors import RigError, UsageError
from rigs import load_rig
from rigs.check import bad, note, ok


def _rig(tmp_path, known: bool = True):
    for name, text in (("key", "k\n"), ("pw", "pw\nbmc = 127.0.0.1\n"),
                       ("known_hosts", "[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0\n" if known else "")):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o600)
    path = tmp_path / "lab1.toml"
    path.write_text(f'driver = "ipmi"\nboot = "kexec"\n[bmc]\nhost = "127.0.0.1"\nport = 6230\nuser = "krig"\n'
                    f'password_file = "{tmp_path / "pw"}"\n[ssh]\nhost = "127.0.0.1"\nport = 2222\n'
                    f'key = "{tmp_path / "key"}"\nknown_hosts = "{tmp_path / "known_hosts"}"\n')
    return load_rig(str(path))


@pytest.fixture
def answers(monkeypatch):
    """The BMC's items as the driver's check would give them; each check of the BMC counted."""
    said, calls = [], []

    def bmc_items(rig, power):
        calls.append(rig.name)
        yield from said
    monkeypatch.setattr("rigs.ipmi.check.bmc_items", bmc_items)
    monkeypatch.setattr(rc, "_BMC_CHECKED", set())
    return said, calls


def test_the_bmc_is_checked_once_a_process(tmp_path, answers):
    said, calls = answers
    said += [ok("login", "user 'krig'"), ok("privileges", "OPERATOR"), ok("power", "off")]
    rig = _rig(tmp_path)
    rc.before_build(rig)
    rc.before_build(rig)
    assert calls == ["lab1"]


def test_a_wrong_password_is_one_line_naming_the_field(tmp_path, answers):
    said, _ = answers
    said += [bad("login", "BMC 127.0.0.1:6230 refused user 'krig': wrong password", "bmc.password_file")]
    rig = _rig(tmp_path)
    with pytest.raises(UsageError) as e:
        rc.before_build(rig)
    line = str(e.value)
    assert line.startswith(f"{tmp_path}/lab1.toml.bmc.password_file: login: ") and "wrong password" in line
    assert line.endswith("nothing was built (`krig rig check " + str(tmp_path / "lab1.toml") + "` checks the whole rig)")
    assert "\n" not in line
    with pytest.raises(UsageError):         # a failed check is not kept as passed
        rc.before_build(rig)


def test_a_bmc_that_does_not_answer_is_the_bmcs_fault(tmp_path, answers):
    said, _ = answers
    said += [bad("login", "BMC 127.0.0.1:6230 did not answer after 3 tries", "bmc.host or bmc.port")]
    with pytest.raises(RigError) as e:
        rc.before_build(_rig(tmp_path))
    assert not isinstance(e.value, UsageError) and e.value.exit_code == 3
    assert str(e.value).startswith("rig lab1: login: BMC 127.0.0.1:6230 did not answer")


def test_a_refused_log_clearing_and_a_note_are_no_refusal(tmp_path, answers):
    said, calls = answers
    said += [ok("login", "user 'krig'"), note("reset types", "no Nmi"),
             bad("log clearing", "role Operator lacks ConfigureManager", "bmc.clear_log = false")]
    rc.before_build(_rig(tmp_path))
    assert calls == ["lab1"]


def test_the_host_key_is_checked_before_the_bmc(tmp_path, answers):
    _, calls = answers
    with pytest.raises(UsageError, match=r"lab1\.toml\.ssh\.known_hosts: ssh host key: .* has no host key"):
        rc.before_build(_rig(tmp_path, known=False))
    assert calls == []


def test_a_qemu_rig_is_not_checked(answers):
    rc.before_build(load_rig("qemu-default"))
    assert answers[1] == []
