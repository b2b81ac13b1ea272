"""A lab server's lifecycle (rigs/ipmi/state.py) as rigs/ipmi/server.py walks it, on a fake BMC
and a fake SSH link: no server, no ipmitool, no ssh. Each wait, hang, crash and power off
reads its rig file's fields by attribute and moves the server only as TRANSITIONS allow.

Covers: rigs/ipmi/kexec.py, rigs/ipmi/state.py."""
import dataclasses
import itertools
import types

import pytest

from krig.errors import GuestCrashed, GuestHung, RigError, UsageError
from rigs.ipmi import kexec as ipmi_kexec
from rigs.ipmi import server as ipmi_server
from rigs.ipmi.rig import IpmiRig, _Command, _Files, _Power
from rigs.ipmi.ssh import SshLost
from rigs.ipmi.state import TRANSITIONS, Hang, IllegalTransition, Power, ServerState as S

PW = "s3cret-Pw"


class FakeBmc:
    POWER_ON, NMI = "power on by hand", "nmi"

    def __init__(self):
        self.power_state, self.calls, self.failed = Power.ON, [], None

    def power_status(self):
        return self.power_state

    def power(self, what):
        self.calls.append(what)
        self.power_state = {"off": Power.OFF, "soft": Power.OFF, "on": Power.ON, "cycle": Power.ON}.get(
            what, self.power_state)

    def wait_power(self, state, timeout, poll):
        self.calls.append(f"wait {state} {timeout}")
        return self.power_state is state

    def sel_text(self):
        return ""


class FakeSsh:
    target = "root@s:22"

    def __init__(self, boot_ids):
        self.boot_ids, self.ran, self.probes = iter(boot_ids), [], []

    def probe(self, timeout):
        self.probes.append(timeout)
        return next(self.boot_ids, None)

    def start_master(self, workdir):
        return False

    def stop_master(self):
        pass

    def run(self, remote, timeout=60, **kw):
        self.ran.append((remote, timeout))
        return 0, b"", b""


@pytest.fixture
def server(tmp_path, monkeypatch):
    """An IpmiServer of a checked rig file, its BMC and SSH fakes, its console a file."""
    for f in ("key", "known_hosts"):
        (tmp_path / f).write_text("k\n")
        (tmp_path / f).chmod(0o600)
    monkeypatch.setenv("KRIG_TEST_PW", PW)
    monkeypatch.setattr(ipmi_server, "POLL", 0.01)
    raw = {"driver": "ipmi", "nmi_wait": 0, "hang_timeout": 1, "shutdown_timeout": 7,
           "bmc": {"host": "10.0.0.5", "user": "krig", "password_env": "KRIG_TEST_PW"},
           "ssh": {"host": "10.0.0.6", "key": str(tmp_path / "key"), "known_hosts": str(tmp_path / "known_hosts"),
                   "connect_timeout": 3}}
    rig = IpmiRig("lab", raw)
    s = rig.server
    s.bmc, s.ssh = FakeBmc(), FakeSsh([])
    s.console.log_path = tmp_path / "console.log"
    s.console.log_path.write_text("")
    s.workdir = tmp_path
    return s


def boots(s, *ids):
    s.ssh.boot_ids = iter(ids)


def test_every_state_has_its_transitions_and_none_returns_to_unknown():
    assert set(TRANSITIONS) == set(S)
    assert not any(S.UNKNOWN in to for to in TRANSITIONS.values())
    assert [a for a, to in TRANSITIONS.items() if S.BOOTING in to] == [S.UP]
    assert TRANSITIONS[S.CRASHED] == (S.OFF,)
    assert str(S.HUNG) == "hung" and f"{S.UP}" == "up"


@pytest.mark.parametrize("a,b", [(a, b) for a, b in itertools.product(S, S) if b not in TRANSITIONS[a]])
def test_an_illegal_transition_is_one_line_naming_both(a, b):
    with pytest.raises(IllegalTransition) as e:
        a.to(b, "lab")
    assert str(e.value).startswith(f"rig lab: the server cannot go from {a.value} to {b.value} (from {a.value}: ")
    assert "\n" not in str(e.value)


def test_a_state_is_a_server_state_not_a_string():
    with pytest.raises(TypeError, match="not 'up'"):
        S.UNKNOWN.to("up", "lab")


def test_wait_up_then_a_reboot_under_a_command_is_crashed_then_off(server):
    s = server
    assert s.state is S.UNKNOWN
    boots(s, None, "b1")
    s.wait_up(5, "after power on")
    assert (s.state, s.boot_id) == (S.UP, "b1") and s.ssh.probes[0] == 3     # ssh.connect_timeout
    boots(s, "b2")
    with pytest.raises(GuestCrashed, match="rebooted while running x"):
        s.diagnose_lost("running x", SshLost("gone", True), 0)
    assert s.state is S.CRASHED
    with pytest.raises(IllegalTransition, match="from crashed to up"):
        boots(s, "b3")
        s.wait_up(5, "again")
    s.hard_off()
    assert s.state is S.OFF and s.bmc.calls[-2:] == ["off", "wait off 60"]


def test_a_crash_on_the_console_while_booting(server, monkeypatch):
    s = server

    def probe(timeout):         # no answer; meanwhile the console shows a panic
        with open(s.console.log_path, "a") as f:
            f.write("[ 1.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n")
    monkeypatch.setattr(s.ssh, "probe", probe)
    with pytest.raises(GuestCrashed, match=r"the kernel crashed after power on: \[ 1.0\] Kernel panic"):
        s.wait_up(5, "after power on")
    assert s.state is S.CRASHED


def test_no_answer_in_time_is_hung(server):
    with pytest.raises(ipmi_server.BootTimeout, match="did not answer SSH within 0s after power on"):
        server.wait_up(0.05, "after power on")
    assert server.state is S.HUNG


def test_a_hang_power_cycles_and_comes_back_up(server):
    s = server
    boots(s, "b1")
    s.wait_up(5, "after power on")
    boots(s, None, "b2")
    with pytest.raises(GuestHung, match="it stopped"):
        s.on_hang("it stopped")
    assert (s.state, s.boot_id) == (S.UP, "b2") and s.bmc.calls[:2] == ["diag", "cycle"]
    assert s.hang == Hang("it stopped", "sent (nmi)", 0, True, "power cycled and answering SSH again")
    assert s.facts["hang"] == {"reason": "it stopped", "nmi": "sent (nmi)", "console_bytes_after_nmi": 0,
                               "recovered": "yes: power cycled and answering SSH again"}


def test_a_hang_left_hung_without_recovery(server):
    s = server
    s.spec = dataclasses.replace(s.spec, recover_after_hang=False)
    boots(s, "b1")
    s.wait_up(5, "after power on")
    with pytest.raises(GuestHung):
        s.on_hang("it stopped")
    assert s.state is S.HUNG and "recovered" not in s.facts["hang"]
    assert s.hang is not None and not s.hang.recovered and s.hang.how is None


def test_an_orderly_shutdown_of_a_server_that_is_up(server):
    s = server
    s.hold = types.SimpleNamespace(release=lambda: None)       # held: shutdown() touches the server
    boots(s, "b1")
    s.wait_up(5, "after power on")
    s.bmc.power_state = Power.OFF                               # the shutdown command powered it off
    s.shutdown()
    assert s.state is S.OFF and s.facts["shutdown"] == "soft"
    assert "systemctl poweroff" in s.ssh.ran[-1][0] and s.ssh.ran[-1][1] == 30
    assert s.bmc.calls == ["wait off 7"]                        # shutdown_timeout


def test_kexec_boots_from_up_through_booting(server, monkeypatch):
    s = server
    seen = []
    boots(s, "b1")                                              # the installed system answers
    monkeypatch.setattr(s, "check_programs", lambda progs: None)
    monkeypatch.setattr(s, "make_workdir", lambda: "/var/lib/krig/run.x")
    monkeypatch.setattr(ipmi_kexec, "initrd_for", lambda rig, kernel: (None, []))
    monkeypatch.setattr(ipmi_kexec, "_ship_modules", lambda rig, kernel: "none")
    monkeypatch.setattr(s.ssh, "pipe_to", lambda *a: None, raising=False)
    monkeypatch.setattr(s, "ssh_call", lambda what, remote, timeout: (0, b"", b""))
    monkeypatch.setattr(s, "wait_up", lambda timeout, what, old_boot_id=None: seen.append((s.state, old_boot_id)))
    kernel = types.SimpleNamespace(image="/boot/vmlinuz-6.1", release="6.1", cmdline=[], modules_dir=None)
    ipmi_kexec.kexec_boot(s, types.SimpleNamespace(on=lambda: None), kernel, [], 60)
    assert seen == [(S.BOOTING, "b1")]
    assert s.facts["kexec_exec"] == ["kexec", "-e"] and s.facts["kexec"][:2] == ["kexec", "-l"]


def test_commands_and_pulls_need_a_server_that_is_up(server, tmp_path):
    """One guard (require_up): a command on a server not up is the kernel's crash, a pull or a
    results directory the rig's error; each says the state and what was not done."""
    assert server.state is S.UNKNOWN
    with pytest.raises(GuestCrashed, match=r"^the server is unknown, not up: running true$"):
        _Command(server).run(["true"])
    with pytest.raises(RigError, match=r"^rig lab: the server is unknown, not up: /r was not pulled$"):
        _Files(server).pull("/r", tmp_path / "out")
    with pytest.raises(RigError, match=r"^rig lab: the server is unknown, not up: no results directory$"):
        _Files(server).results_dir()
    assert server.ssh.ran == []


def test_a_server_found_on_is_left_on_by_what_the_bmc_said_not_by_the_facts(server):
    """The power at the run's start is a Power read from the BMC; the fact power_at_start is
    written from it and never read back: a fact saying "on" keeps nothing on."""
    s = server
    s.hold = types.SimpleNamespace(release=lambda: None)
    s.power_at_start, s.facts["power_at_start"] = Power.OFF, "on"
    _Power(s).off()
    assert s.bmc.calls == ["off", "wait off 60"] and s.state is S.OFF and "power" not in s.facts
    s.bmc.calls.clear()
    s.power_at_start, s.facts["power_at_start"] = Power.ON, "off"
    _Power(s).off()                     # found on, nothing started on it: left as found
    assert s.bmc.calls == [] and s.facts["power"].startswith("left on as found")
    s.powered = True                    # this run powered it on: off it goes
    _Power(s).off()
    assert s.bmc.calls == ["off", "wait off 60"]


def test_a_boot_that_hangs_is_handled_once(server, monkeypatch):
    """A boot that hangs goes through on_hang; a hang handled already (the server's Hang) is
    raised as it is, not handled again, whatever the facts say."""
    from rigs.ipmi.rig import _Boot
    s = server
    s.spec = dataclasses.replace(s.spec, boot="installed", recover_after_hang=False)
    handled = []

    def wait_up(timeout, what, old_boot_id=None):
        raise GuestHung("no progress")

    def on_hang(reason):
        handled.append(reason)
        raise GuestHung(reason)
    monkeypatch.setattr(s, "wait_up", wait_up)
    monkeypatch.setattr(s, "on_hang", on_hang)
    boot = _Boot(s, _Power(s))
    s.facts["hang"] = {"reason": "a fact only"}
    with pytest.raises(GuestHung):
        boot.boot(None, [])
    assert handled == ["no progress"]
    s.hang = Hang("earlier")
    with pytest.raises(GuestHung):
        boot.boot(None, [])
    assert handled == ["no progress"]


def test_a_kexec_boot_asks_reach_before_anything_is_copied(server):
    """The boot asks its `reach` (workflows/serverreach.py at_kexec in a run) once the server is
    up, with the kernel and whether the boot is warm: a refusal is one line, nothing copied or
    kexec'd; no refusal, and the kexec goes on (here: to its check for the kexec program)."""
    from rigs.ipmi.rig import _Boot
    s = server
    s.spec = dataclasses.replace(s.spec, boot="kexec")
    kernel = types.SimpleNamespace(release="6.1.0-krig")
    asked = []

    def refuse(srv, k, warm):
        asked.append((srv, k, warm))
        return "kernel 6.1.0-krig cannot reach the server: network card eth0 needs driver e1000e"

    boots(s, "b1")
    with pytest.raises(UsageError, match=r"^rig lab: kernel 6\.1\.0-krig cannot reach the server: .*e1000e; "
                                         r"it was not kexec'd$"):
        _Boot(s, _Power(s)).boot(kernel, [], reach=refuse)
    assert asked == [(s, kernel, False)] and s.ssh.ran == []
    boots(s, "b1")
    with pytest.raises(RigError, match="cannot check the programs on the server"):   # the fake SSH answers nothing
        _Boot(s, _Power(s)).boot(kernel, [], reach=lambda srv, k, warm: asked.append(k))
    assert asked[-1] is kernel and s.ssh.ran, "no refusal: the kexec went on to the server"
