"""Between the runs of one workflow: a lab server kept up, the next run kexec'd from the previous
run's healthy kernel or power cycled (rigs/ipmi/warm.py, workflows/session.py).

Fast: the decision on a real IpmiRig whose BMC and SSH are stand-ins answering as a server
would; the session through the real run pipeline on the fake rig. The real thing, on the
simulated lab servers: tests/rigs/redfish/test_labsim_redfish.py (Redfish, `make test`) and
tests/workflows/test_validate_e2e.py (IPMI, `make test-lab`), each a validation whose runs after the first
kexec from the previous run's kernel.

Covers: workflows/session.py.
"""
import json
import subprocess

import pytest

from rigs import load_rig
from krig.errors import RigError
from krig.record import Manifest
from rigs.fake import FakeRig
from rigs.ipmi.kexec import kexec_args
from rigs.ipmi.rig import IpmiRig
from rigs.ipmi.state import BootPlan, Hang, NextBoot, Power as On, ServerState as S
from rigs.ipmi.warm import INSTALLED, begin, health, keep_installed, next_boot, park, warm_words
from test_fake_rig import fake_rig
from test_ipmi_spec import files, spec  # noqa: F401 (the fixture)
from workflows.group import run_group
from workflows.session import Session, cold_reason

BOOT_ID = "1111-aaaa"
DMESG = "[    0.000000] Linux version 6.1.0-tiny\n[    1.2] systemd[1]: started\n"


class Bmc:
    failed = False

    def __init__(self, status=On.ON):
        self.status, self.did = status, []

    def power_status(self):
        return self.status

    def power(self, what):
        self.did.append(what)
        self.status = On.OFF if what == "off" else On.ON

    def wait_power(self, state, timeout, poll):
        return self.status == state

    def sel_text(self):
        return "SEL\n"


class Ssh:
    def __init__(self, tainted="0", boot_id=BOOT_ID, kexec="yes", dmesg=DMESG, probe=BOOT_ID):
        self.out = f"6.1.0-tiny\n{boot_id}\n{tainted}\nkexec={kexec}\n{dmesg}".encode()
        self.answer = probe

    def run(self, remote, timeout, **kw):
        return 0, self.out, b""

    def probe(self, timeout):
        return self.answer

    def stop_master(self):
        pass


class Hold:
    def release(self):
        pass


def server(files, ssh=None, bmc=None, **over):
    r = IpmiRig("lab", spec(files, **{"boot": "kexec", **over}))
    s = r.server
    s.bmc, s.ssh, s.hold = bmc or Bmc(), ssh or Ssh(), Hold()
    s.become(S.UP)
    s.boot_id, s.results, s.salvaged = BOOT_ID, "/var/lib/krig/run.x/out.y", True
    s.powered = True
    return r, s


def test_cold_reason_of_a_run():
    assert cold_reason("completed", "the workload finished", None) is None
    assert cold_reason("skip", "needs 4 CPUs", None) is None
    assert cold_reason("hung", "no SSH answer", None) == "a hang (no SSH answer)"
    assert cold_reason("crashed", "the kernel crashed: BUG", None) == "a crash (the kernel crashed: BUG)"
    assert cold_reason("error", "run.sh exited 1", None) == "an error (run.sh exited 1)"
    assert cold_reason("completed", "ok", "pulling failed").startswith("a failed pull (pulling failed")
    assert cold_reason("error", "no SSH after kexec", "no results directory") == "an error (no SSH after kexec)"


def test_a_healthy_kernel_is_kexeced_from(files):
    _, s = server(files)
    assert health(s) == ("6.1.0-tiny", None)
    assert next_boot(s, None) == BootPlan(NextBoot.WARM, "6.1.0-tiny")
    assert next_boot(s, None).said() == "warm: kexec from 6.1.0-tiny of the previous run"


@pytest.mark.parametrize("ssh,cold,said", [
    (Ssh(tainted=str(1 << 9)), None, "cold: power cycle after 6.1.0-tiny is tainted (W: 512)"),
    (Ssh(tainted=str(1 << 12)), None, "warm: kexec from 6.1.0-tiny"),     # O (an out-of-tree module): healthy
    (Ssh(dmesg=DMESG + "[   9.1] BUG: unable to handle page fault for address: 0\n"), None,
     "cold: power cycle after 6.1.0-tiny's dmesg shows: [   9.1] BUG: unable to handle page fault"),
    (Ssh(boot_id="2222-bbbb"), None, "cold: power cycle after the server rebooted during the run"),
    (Ssh(kexec="no"), None, "cold: power cycle after 6.1.0-tiny cannot kexec (built without CONFIG_KEXEC)"),
    (Ssh(), "a crash (the kernel crashed: Oops)", "cold: power cycle after a crash (the kernel crashed: Oops)"),
    (Ssh(), "a failed pull (x)", "cold: power cycle after a failed pull (x)"),
])
def test_what_makes_the_next_boot_cold(files, ssh, cold, said):
    _, s = server(files, ssh)
    assert next_boot(s, cold).said().startswith(said)


def test_only_what_came_since_the_boot_counts(files):
    """A soft lockup while a slow (emulated) machine booted is not the run's: taint from before
    the run is left out, and dmesg is read from the line the boot's setup counted."""
    seen = []
    _, s = server(files, Ssh(tainted=str(1 << 14 | 1 << 9)))
    s.ssh.run = lambda remote, timeout, **kw: (seen.append(remote), (0, s.ssh.out, b""))[1]
    s.at_boot = {"tainted": 1 << 14, "dmesg_lines": 812}
    assert health(s) == (None, "6.1.0-tiny is tainted (W: 16896)")
    assert seen[0].endswith("dmesg 2>/dev/null | tail -n +813")
    s.at_boot["tainted"] = 1 << 14 | 1 << 9
    assert health(s) == ("6.1.0-tiny", None)


def test_results_not_pulled_and_a_dead_server_are_cold(files):
    _, s = server(files)
    s.salvaged = False
    assert health(s) == (None, "a failed pull (the results were not brought back)")
    s.salvaged = True
    s.become(S.CRASHED)
    assert next_boot(s, None) == BootPlan(NextBoot.CYCLE, "the server is crashed")
    assert next_boot(s, None).said() == "cold: power cycle after the server is crashed"


def test_cold_boot_in_the_rig_file(files):
    _, s = server(files, cold_boot=True)
    assert next_boot(s, None).said() == ("cold: power cycle after the rig file asks for cold boots "
                                         "(cold_boot = true)")


def test_after_a_recovered_hang_the_next_kexec_is_from_the_installed_system(files):
    """The decision reads the server's Hang, never its facts: a fact saying "yes" decides nothing."""
    _, s = server(files)
    s.facts["hang"] = {"reason": "x", "recovered": "yes: power cycled and answering SSH again"}
    assert next_boot(s, "a hang (x)").how is NextBoot.CYCLE
    s.hung(Hang("x", recovered=False, how="no SSH answer"))
    assert next_boot(s, "a hang (x)").how is NextBoot.CYCLE
    s.hung(Hang("x", recovered=True, how="power cycled and answering SSH again"))
    assert s.facts["hang"] == {"reason": "x", "recovered": "yes: power cycled and answering SSH again"}
    plan = next_boot(s, "a hang (x)")
    assert plan == BootPlan(NextBoot.INSTALLED, "a hang (x)")
    assert plan.said() == ("cold: power cycle after a hang (x) (end of the previous run), then kexec from the "
                           "installed system")


def test_park_keeps_power_and_lock_and_says_what_comes_next(files, tmp_path):
    r, s = server(files)
    s.run_dir = tmp_path
    assert r.keep_for_next(None) is True
    assert s.holding and s.bmc.did == [] and s.facts["next_boot"].startswith("warm: ")
    assert s.next_boot == BootPlan(NextBoot.WARM, "6.1.0-tiny")
    assert (tmp_path / "sel.txt").read_text() == "SEL\n"
    r2, s2 = server(files, boot="installed")
    assert r2.keep_for_next(None) is False          # boots through its firmware anyway: off as ever
    s2.hold = None
    assert park(s2, None) is False


class Power:
    def __init__(self, s):
        self.s = s

    def on(self):
        self.s.bmc.power("on")


def test_begin_boots_as_the_previous_run_left_it(files):
    _, s = server(files)
    s.plan_next(BootPlan(NextBoot.WARM, "6.1.0-tiny"))
    assert begin(s, Power(s), 60) == ("warm: kexec from 6.1.0-tiny of the previous run", True)
    assert s.bmc.did == [] and s.next_boot is None

    ups = []
    s.wait_up = lambda timeout, what, old_boot_id=None: ups.append(old_boot_id)
    s.plan_next(BootPlan(NextBoot.CYCLE, "a hang (x)"))
    assert begin(s, Power(s), 60) == ("cold: power cycle after a hang (x)", False)
    assert s.bmc.did == ["cycle"] and ups == [BOOT_ID]

    s.bmc = Bmc(On.OFF)
    s.plan_next(BootPlan(NextBoot.CYCLE, "a crash (y)"))
    assert begin(s, Power(s), 60) == ("cold: power on after a crash (y)", False) and s.bmc.did == ["on"]

    s.bmc, s.ssh = Bmc(), Ssh(probe="3333-cccc")       # not the kernel the previous run left
    s.plan_next(BootPlan(NextBoot.WARM, "6.1.0-tiny"))
    assert begin(s, Power(s), 60) == ("cold: power cycle: the previous run's system did not answer SSH", False)
    assert s.bmc.did == ["cycle"]

    s.bmc, s.ssh, s.boot_id = Bmc(), Ssh(), BOOT_ID
    assert begin(s, Power(s), 60) == ("found on: kexec from its running system", False) and s.bmc.did == []

    # the installed system a hang's power cycle brought back: up, but no kernel of a run to kexec from
    said = "cold: power cycle after a hang (x) (end of the previous run), then kexec from the installed system"
    s.plan_next(BootPlan(NextBoot.INSTALLED, "a hang (x)"))
    assert begin(s, Power(s), 60) == (said, False)
    assert s.bmc.did == []


def test_a_crashed_server_is_powered_off_before_the_next_runs_boot(files):
    """A server kept after a crash boots the next run through OFF (rigs/ipmi/state.py: nothing
    runs on a crashed server but its power off), whether the BMC still has it on or not."""
    _, s = server(files)
    seen = []

    def wait_up(timeout, what, old_boot_id=None):
        seen.append(s.state)
        s.become(S.UP)
    s.wait_up = wait_up
    s.become(S.CRASHED)
    s.plan_next(BootPlan(NextBoot.CYCLE, "a crash (y)"))
    assert begin(s, Power(s), 60) == ("cold: power cycle after a crash (y)", False)
    assert s.bmc.did == ["off", "on"] and seen == [S.OFF] and s.state is S.UP
    s.become(S.CRASHED)
    s.bmc = Bmc(On.OFF)                                  # it powered off underneath
    s.plan_next(BootPlan(NextBoot.CYCLE, "a crash (the server powered off)"))
    assert begin(s, Power(s), 60) == ("cold: power on after a crash (the server powered off)", False)
    assert s.bmc.did == ["on"] and seen == [S.OFF, S.OFF] and s.state is S.UP


def test_a_warm_kexec_gives_the_installed_command_line(files):
    class K:
        cmdline = ["mitigations=off"]
    r, _ = server(files)
    assert kexec_args(r, K, ["krig.mode=root"], "/r/boot/bzImage", None, "kexec_load",
                      "root=UUID=ab ro panic=0") == \
        ["kexec", "-l", "/r/boot/bzImage", "--command-line=root=UUID=ab ro panic=0 mitigations=off krig.mode=root"]


def test_the_installed_systems_acpi_root_pointer_goes_to_a_warm_kexec(files, tmp_path):
    """INSTALLED run by a real shell over an EFI systab as Linux shows it; what the installed
    system said is kept, what a kernel under test says later (no EFI there) changes nothing."""
    systab = tmp_path / "systab"
    systab.write_text("ACPI20=0x7fb7e014\nACPI=0x7fb7e000\nSMBIOS=0x7f9c6000\n")
    out = subprocess.run(["sh", "-c", INSTALLED.replace("/sys/firmware/efi/systab", str(systab))],
                         capture_output=True, text=True, check=True).stdout
    _, r = server(files)
    keep_installed(r, out, warm=False)
    assert warm_words(r) == ["acpi_rsdp=0x7fb7e014"] and r.installed_cmdline, (out, r.installed_cmdline)
    keep_installed(r, "running_cmdline=root=UUID=ab krig.mode=root\nacpi_rsdp=\n", warm=True)
    assert warm_words(r) == ["acpi_rsdp=0x7fb7e014"] and "krig.mode=root" not in r.installed_cmdline
    systab.unlink()                     # a server booted by a BIOS: nothing to carry over
    out = subprocess.run(["sh", "-c", INSTALLED.replace("/sys/firmware/efi/systab", str(systab))],
                         capture_output=True, text=True, check=True).stdout
    keep_installed(r, out, warm=False)
    assert warm_words(r) == [], out


class Kept(FakeRig):
    """The fake rig, kept up between runs like a lab server."""
    seen: list = []

    def keep_for_next(self, cold):
        self.seen.append((id(self), cold))
        return True

    refuse: str | None = None       # a shutdown that fails with this line

    def shutdown(self):
        self.seen.append((id(self), "shutdown"))
        if self.refuse:
            raise RigError(self.refuse)
        super().shutdown()
        self.machine.facts["shutdown"] = "soft (fake)"


def test_a_group_keeps_one_rig_across_its_runs_and_powers_it_off_at_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr("rigs.fake.FakeRig", Kept)
    Kept.seen = []
    rig = fake_rig(tmp_path)
    gdir, group, code = run_group("selftest-pass", rig, "distro", None, {}, 3, tmp_path / "g",
                                  results_root=tmp_path / "results", log=lambda m: None)
    assert group.verdicts == {"PASS": 3}, group
    ids = {i for i, _ in Kept.seen}
    assert len(ids) == 1, Kept.seen                     # one rig object for the three runs
    assert [c for _, c in Kept.seen] == [None, None, None, "shutdown"]
    manifests = [json.loads((gdir / r["dir"] / "manifest.json").read_text()) for r in group.runs]
    # the power-off after the last run is in the last run's record, as a single run has its own
    assert [m["rig_facts"].get("shutdown") for m in manifests] == [None, None, "soft (fake)"]
    assert not any("power_off_error" in m for m in manifests)


def test_a_failed_power_off_after_a_workflow_is_in_its_last_runs_record(tmp_path, monkeypatch):
    monkeypatch.setattr("rigs.fake.FakeRig", Kept)
    monkeypatch.setattr(Kept, "refuse", "rig fake: the BMC does not answer (fake)")
    said = []
    gdir, group, code = run_group("selftest-pass", fake_rig(tmp_path), "distro", None, {}, 2, tmp_path / "g",
                                  results_root=tmp_path / "results", log=said.append)
    assert group.verdicts == {"PASS": 2} and code == 0, group
    first, last = (gdir / r["dir"] for r in group.runs)
    assert json.loads((last / "manifest.json").read_text())["power_off_error"] == Kept.refuse
    assert "power_off_error" not in json.loads((first / "manifest.json").read_text())
    v = json.loads((last / "verdict.json").read_text())
    assert v["verdict"] == "PASS" and v["warnings"] == [f"the rig failed to power off after the run: {Kept.refuse}"]
    assert any(m.endswith(f"powering off after the last run: {Kept.refuse}") for m in said), said


def ran(tmp_path):
    """A run's directory and its manifest, as the runner offers them to the session."""
    return tmp_path / "run", Manifest("selftest-pass")


def test_nothing_is_kept_while_a_ctrl_c_ends_the_run(tmp_path):
    Kept.seen = []
    s = Session(log=lambda m: None)
    rig = Kept("k", {"work_dir": str(tmp_path)})
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        assert s.keep(rig, "error", "the run did not start", ran(tmp_path)) is False
    assert Kept.seen == [] and s.rig is None


def test_a_rig_that_keeps_nothing_is_closed_after_each_run(tmp_path):
    s = Session(log=lambda m: None)
    loaded = load_rig(fake_rig(tmp_path))               # a plan's rig (workflows/plan.py)
    rig = s.take(loaded)
    assert rig is not loaded and s.take(loaded) is rig  # a run that stopped early leaves it to the session
    assert s.keep(rig, "completed", "ok", ran(tmp_path)) is False and s.rig is None
    assert s.take(loaded) is not rig                    # nothing kept: the next run has a fresh one
    s.close()


def test_a_plan_of_another_rig_gets_its_own(tmp_path, monkeypatch):
    """The kept machine is the next run's only for a plan of the same loaded rig; another rig
    powers it off first."""
    monkeypatch.setattr("rigs.fake.FakeRig", Kept)
    Kept.seen = []
    s = Session(log=lambda m: None)
    one, other = load_rig(fake_rig(tmp_path)), load_rig(fake_rig(tmp_path, samples="moving"))
    rig = s.take(one)
    assert s.keep(rig, "completed", "ok", ran(tmp_path)) is True and s.take(one) is rig
    assert s.take(other) is not rig and Kept.seen[-1] == (id(rig), "shutdown")
    s.close()
