"""The IPMI rig against a real BMC simulator (OpenIPMI's ipmi_sim) on 127.0.0.1.

The simulated server (tests/ipmi_fixture.py) is powered on by `ipmitool
chassis power on`, its console comes over SOL, commands and files over SSH,
exactly as for a server in a lab. One simulator serves the whole module;
each boot takes ~15-40 s under TCG.

Order matters a little: the hang, panic and Ctrl-C tests run before
test_run_passes, so the passing run is "the next run on the same rig" after them.
"""
import dataclasses
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import KRIG, ROOT
from ipmi_fixture import running_sim
from test_progress import bounds_said
from krig.errors import RigError
from kernels.catalog import load_kernel
from workflows.run import run
from krig.knobs import parse as parse_knobs
from rigs.ipmi.rig import IpmiRig
from rigs import load_rig

pytestmark = [pytest.mark.ipmi, pytest.mark.long(22)]     # minutes on 2 cores: make test starts it early

# (reproducer, preset, expected verdict) run on the simulated server after the
# hang test. Add seed reproducers' smoke presets here, e.g. ("xfs-ail-storm", "smoke", "PASS").
# The flood's FAIL on Debian's kernel is tests/reproducers/test_smoke.py's in `make test`; here only in `make test-lab`.
PASS_CASES = [("selftest-pass", None, "PASS"),
              pytest.param("neg-dentry-flood", "smoke", "FAIL", marks=pytest.mark.testlab,
                           id="neg-dentry-flood-smoke-FAIL")]
# the flood stops at the RAM limit itself (a FAIL) instead of going on to its bound: the
# simulated server has one slow vCPU, and the bound is the QEMU rig's tests' business
SETS = {"neg-dentry-flood": {"settle_limit_x": "1"}}

# What every run directory has on the QEMU rig (minus qemu.log), and what the IPMI rig adds.
COMMON_FILES = {"manifest.json", "verdict.json", "junit.xml", "console.log", "krig.log", "stdout", "stderr", "exit_code",
                "facts.txt", "samples.tsv", "phases.tsv", "time.txt", "workload.rc", "metrics.json"}
IPMI_FILES = {"sel.txt", "sel-before.txt", "bmc.log", "sol.log", "ssh.log"}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with running_sim(tmp_path_factory, "ipmi") as server:
        yield server


def _leftovers(sim) -> list[str]:
    """ipmitool, ssh or qemu processes of this server (ipmi_sim itself may run)."""
    return [p for p in sim.processes() if re.search(r"\b(ipmitool|ssh|qemu-system-x86_64)\b", p)]


def _wait_no_leftovers(sim, timeout=30):
    for _ in range(int(timeout / 0.5)):
        if not _leftovers(sim):
            return []
        time.sleep(0.5)
    return _leftovers(sim)


def _cli(sim, tmp_path, *args, env=None, timeout=900):
    e = {**os.environ, "KRIG_RIG_PATH": str(sim.rigs), "KRIG_RESULTS": str(tmp_path / "results"), **(env or {})}
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=e)


class PasswordWatch(threading.Thread):
    """Scans every process's argv, and the environment of every process this test's
    krig started (its descendants), for the BMC password while runs are in progress."""

    def __init__(self, password: str):
        super().__init__(daemon=True)
        self.needle = password.encode()
        self.stop_flag = threading.Event()
        self.hits: list[str] = []
        self.env_hits: list[str] = []
        self.ipmitool_seen = 0
        self.ipmitool_env = 0           # ipmitool -E: the one child that must have it
        self.children_seen: set[int] = set()
        self.scans = 0

    def run(self):
        me = os.getpid()
        while not self.stop_flag.is_set():
            parents = {}
            for d in pathlib.Path("/proc").iterdir():
                if not d.name.isdigit():
                    continue
                try:
                    argv = (d / "cmdline").read_bytes()
                    parents[int(d.name)] = (int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]), argv)
                except (OSError, ValueError, IndexError):
                    continue
                if self.needle in argv:
                    self.hits.append(argv.replace(b"\0", b" ").decode(errors="replace"))
                if b"ipmitool" in argv:
                    self.ipmitool_seen += 1
            for pid, (ppid, argv) in parents.items():
                for _ in range(50):                    # is it a descendant of this test process?
                    if ppid in (me, 0, 1) or ppid not in parents:
                        break
                    ppid = parents[ppid][0]
                if ppid != me or pid == me:
                    continue
                try:
                    env = pathlib.Path(f"/proc/{pid}/environ").read_bytes()
                    # argv again, after the environment: a child that exec'd (ipmitool) since the
                    # first pass would otherwise be named by the argv it had before the exec
                    argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                self.children_seen.add(pid)
                if self.needle in env:
                    words = argv.split(b"\0")
                    # ipmitool itself, or setpriv handing it the environment as it execs it
                    # (rigs/procs.py dies_with_parent: setpriv --pdeathsig KILL -- ipmitool ...)
                    if words[0] == b"ipmitool" or (words[0].endswith(b"setpriv") and words[4:5] == [b"ipmitool"]):
                        self.ipmitool_env += 1
                    else:
                        self.env_hits.append(argv.replace(b"\0", b" ").decode(errors="replace"))
            self.scans += 1
            self.stop_flag.wait(0.2)


def test_power_console_command_and_lock(sim, tmp_path):
    """Power on/off through the BMC, console over SOL, a command over SSH, the lock."""
    kernel = load_kernel("distro")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rig = load_rig("sim")
    with rig:
        rig.prepare(run_dir, kernel, {})
        assert rig.power.status() == "off" and rig.facts()["power_at_start"] == "off"
        rig.boot.boot(kernel, [])
        assert sim.power_status() == "on"
        # A second krig (here: a second rig object) is kept off the server, and leaves it alone.
        other = load_rig("sim")
        with pytest.raises(RigError, match="in use by another krig process"):
            other.prepare(tmp_path / "run2", kernel, {})
        other.close()
        assert sim.power_status() == "on"
        # argv words and env values reach the remote command unchanged (quoted for the remote shell).
        tricky = "a b 'c' \"d\" $(e) `f` ; g"
        res = rig.command.run(["sh", "-c", 'printf "%s\\n" "$KRIG_X" "$1"; uname -r; exit 3', "sh", tricky],
                              env={"KRIG_X": tricky}, timeout=120)
        assert res.returncode == 3, res.stderr
        assert res.stdout.decode().splitlines() == [tricky, tricky, kernel.release]
        rig.power.off()
        assert sim.power_status() == "off"
        assert rig.power.status() == "off"
    console = (run_dir / "console.log").read_text(errors="replace")
    assert "Linux version" in console and "krig-init: starting sshd" in console
    assert (run_dir / "sel.txt").exists() and (run_dir / "sel-before.txt").exists()
    assert "SOL session stopped" in (run_dir / "sol.log").read_text()
    assert not _wait_no_leftovers(sim)


def test_bad_bmc_and_host_key_give_one_clear_line(sim, tmp_path):
    """Wrong password, a BMC that does not answer, a loose password file, a changed host key."""
    cases = []
    sim.rig_file("badpw", bmc={"password_file": None, "password_env": "KRIG_TEST_BMC_PW"})
    cases.append(("badpw", {"KRIG_TEST_BMC_PW": "not-the-password"}, 2,
                  r"\.bmc\.password_env: login: .* refused user 'krig': wrong password; nothing was built"))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bound = sim.base / "noanswer-password"      # a password file names the BMCs it goes to: this one
    bound.touch(mode=0o600)
    bound.write_text(f"{sim.password}\nbmc = 127.0.0.1:{port}\n")
    sim.rig_file("noanswer", bmc={"port": port, "timeout": 1, "retries": 2, "password_file": str(bound)})
    cases.append(("noanswer", {}, 3, rf"BMC 127\.0\.0\.1:{port} did not answer after 2 tries"))
    loose = sim.base / "loose-password"
    loose.write_text(sim.password + "\n")
    loose.chmod(0o644)
    sim.rig_file("loose", bmc={"password_file": str(loose)})
    cases.append(("loose", {}, 2, r"has mode 0644, readable by others; run `chmod 600"))
    sim.rig_file("badkey", ssh={"known_hosts": str(sim.base / "bad_known_hosts")}, boot_timeout=240)
    cases.append(("badkey", {}, 3, r"SSH host key of root@127\.0\.0\.1:\d+ does not match .*bad_known_hosts"))
    for name, env, code, pattern in cases:
        t0 = time.monotonic()
        p = _cli(sim, tmp_path / name, "run", "selftest-pass", "--rig", name, env=env)
        out = p.stdout + p.stderr
        assert p.returncode == code, f"{name}: exit {p.returncode}\n{out}"
        assert "Traceback" not in out, out
        lines = [ln for ln in out.splitlines() if re.search(pattern, ln)]
        assert len(lines) == 1, f"{name}: no one-line message matching {pattern!r} in\n{out}"
        assert sim.password not in out
        assert not _wait_no_leftovers(sim), f"{name}: processes left: {_leftovers(sim)}"
        print(f"{name}: exit {p.returncode} in {time.monotonic() - t0:.0f}s: {lines[0]}")
    assert sim.power_status() == "off"


def test_hang_recovers(sim, tmp_path):
    """A workload that never ends: HUNG, NMI over the BMC (panic trace on the SOL console),
    power cycle, the server answers again; then it is powered off and released."""
    run_dir, verdict = run("selftest-hang", rig_name="sim", sets={"timeout": "30"},
                           results_root=tmp_path / "results", log=print)
    assert verdict.verdict == "HUNG", verdict
    m = json.loads((run_dir / "manifest.json").read_text())
    hang = m["rig_facts"]["hang"]
    assert list(hang) == ["reason", "nmi", "console_bytes_after_nmi", "recovered"], hang
    assert hang["nmi"].startswith("sent"), hang
    assert hang["recovered"] == "yes: power cycled and answering SSH again", hang
    console = (run_dir / "console.log").read_text(errors="replace")
    assert "NMI received for unknown reason" in console and "Kernel panic" in console
    assert console.index("Kernel panic") < console.rindex("Linux version")     # came back after the cycle
    assert "NMI/Diag Interrupt" in (run_dir / "sel.txt").read_text()
    assert "hanging now" in (run_dir / "stdout").read_text()                  # partial output kept
    assert (run_dir / "facts.txt").exists()                                    # results pulled before the NMI
    # the ring buffer's trace was extracted over a second SSH connection before the NMI
    assert m["rig_facts"]["salvage"].startswith("ran in"), m["rig_facts"].get("salvage")
    assert "ring buffer extracted to trace.dat" in (run_dir / "salvage.log").read_text()
    from analysis.trace.tracedat import TraceFile
    assert TraceFile(run_dir / "trace.dat").counts().get("sched:sched_process_exec", 0) >= 1
    assert sim.power_status() == "off"
    assert not _wait_no_leftovers(sim)


def test_panic_is_crashed(sim, tmp_path):
    """The kernel panics under the workload: the SSH connection drops, the SOL console has the panic."""
    run_dir, verdict = run("selftest-panic", rig_name="sim", results_root=tmp_path / "results", log=print)
    assert verdict.verdict == "CRASHED", verdict
    assert "sysrq: Trigger a crash" in verdict.reason
    assert "Kernel panic" in (run_dir / "console.log").read_text(errors="replace")
    assert sim.power_status() == "off"
    assert not _wait_no_leftovers(sim)


def test_kexec_boot_then_ctrl_c(sim, tmp_path):
    """Boot by kexec (installed system first, then the kernel under test with its own
    command line), then Ctrl-C: SOL deactivated, server off, lock released, nothing left.
    (This rig takes the BMC password from the environment, the others from a 0600 file.)"""
    kernel = load_kernel("distro")
    initrd = sim.base / "initrd.cpio.gz"                     # compressed: less to copy over SSH
    with open(initrd, "wb") as f:
        subprocess.run(["gzip", "-1", "-c", str(sim.initrd)], stdout=f, check=True, timeout=120)
    sim.rig_file("simkexec", boot="kexec", bmc={"password_file": None, "password_env": "KRIG_TEST_BMC_PW"},
                 kexec={"initrd": str(initrd), "exec_command": ["kexec", "-e"], "append": ["krig.kexec=1"]})
    env = {**os.environ, "KRIG_RIG_PATH": str(sim.rigs), "KRIG_RESULTS": str(tmp_path / "results"),
           "PYTHONUNBUFFERED": "1", "KRIG_TEST_BMC_PW": sim.password}
    p = subprocess.Popen(KRIG + ["run", "selftest-hang", "--rig", "simkexec"], cwd=ROOT, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        for _ in range(1200):                       # up to 600 s
            if any(ln.startswith("krig: booted") for ln in lines) or p.poll() is not None:
                break
            time.sleep(0.5)
        assert any(ln.startswith("krig: booted") for ln in lines), "".join(lines) + p.stderr.read()
        os.kill(p.pid, signal.SIGINT)
        rc = p.wait(300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    reader.join(10)
    err = p.stderr.read()
    assert rc == 130, "".join(lines) + err
    assert "Traceback" not in err
    run_dir = pathlib.Path(lines[0].split(" -> ")[1].strip())
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["outcome"] == "interrupted" and m["complete"] is False
    assert m["rig_facts"]["kexec"][:2] == ["kexec", "-l"]
    assert "krig.kexec=1" in m["rig_facts"]["cmdline"]      # the kexec'd kernel's command line
    assert m["kernel"]["release"] == kernel.release
    console = (run_dir / "console.log").read_text(errors="replace")
    assert console.count("Linux version") == 2              # the installed system, then the kexec'd kernel
    assert "SOL session stopped" in (run_dir / "sol.log").read_text()
    assert sim.power_status() == "off"
    assert not _wait_no_leftovers(sim)
    rig = load_rig("sim")                                    # the lock was released
    rig.server.take_lock()
    rig.close()


@pytest.mark.parametrize("repro,preset,expected", PASS_CASES)
def test_run_passes(sim, tmp_path, repro, preset, expected, monkeypatch, capfd):
    """The normal pipeline on the server (its SEL cleared: clear_sel = true); no argv ever holds
    the BMC password, and no file does.
    The password comes from the environment (password_env): krig takes it out of its own
    environment, and no child but ipmitool gets it (every child's /proc/PID/environ is read)."""
    sim.rig_file("simenv", bmc={"password_file": None, "password_env": "KRIG_TEST_BMC_PW", "clear_sel": True})
    monkeypatch.setenv("KRIG_TEST_BMC_PW", sim.password)
    monkeypatch.setenv("KRIG_PROGRESS_INTERVAL", "1")       # the progress of its waits, every second
    watch = PasswordWatch(sim.password)
    watch.start()
    try:
        run_dir, verdict = run(repro, rig_name="simenv", preset=preset, sets=SETS.get(repro),
                               results_root=tmp_path / "results", log=print)
    finally:
        watch.stop_flag.set()
        watch.join(10)
    assert verdict.verdict == expected, verdict
    assert "KRIG_TEST_BMC_PW" not in os.environ, "the password stayed in krig's environment"
    assert not watch.hits, f"the BMC password was in a process's argv: {watch.hits}"
    assert watch.scans > 10 and watch.ipmitool_seen > 0, "the argv scan never saw ipmitool running"
    assert not watch.env_hits, f"children other than ipmitool had the password in their environment: {watch.env_hits}"
    assert watch.ipmitool_env > 0, "the environment scan never saw ipmitool with its password"
    assert len(watch.children_seen) > 5, f"the environment scan saw only {len(watch.children_seen)} children"
    files = {p.name for p in run_dir.iterdir()}
    assert COMMON_FILES <= files, f"missing: {COMMON_FILES - files}"
    assert IPMI_FILES <= files, f"missing: {IPMI_FILES - files}"
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["machine"]["release"] == m["kernel"]["release"]
    assert m["rig"]["kind"] == "ipmi" and m["rig_facts"]["shutdown"] == "soft" and "power_off_error" not in m
    assert m["rig_facts"]["results_pull"] == "pulled before the power off"
    assert "Linux version" in (run_dir / "console.log").read_text(errors="replace")
    # clear_sel = true: the SEL cleared after sel-before.txt (ipmi_sim lets the account)
    assert "log_clearing" not in m["rig_facts"] and "ipmitool sel clear -> rc 0" in (run_dir / "bmc.log").read_text()
    # what it waited for, said as it waited: the boot (power on, firmware, kernel to SSH) and the workload
    said = (run_dir / "krig.log").read_text()
    assert re.search(r"(?m)^krig: waiting for kernel \S+ to boot on simenv, \d+ s so far \(at most \d+ (s|min)\): "
                     r"the server simenv to answer SSH after power on, \d+ s so far", said), said
    if m["workload"]["seconds"] >= 2:
        assert re.search(rf"(?m)^krig: waiting for the workload {repro} on simenv, \d+ s so far", said), said
    assert all(so_far <= most for ln in said.splitlines() for so_far, most in bounds_said(ln)), said
    assert "\nkrig: waiting for kernel " in capfd.readouterr().out         # and on the terminal
    g = subprocess.run(["grep", "-rl", "-F", sim.password, str(tmp_path), str(sim.logs)],
                       capture_output=True, text=True)
    assert g.returncode == 1 and not g.stdout, f"the BMC password is in {g.stdout}"
    assert sim.power_status() == "off"
    assert not _wait_no_leftovers(sim)


def test_bmc_dies_before_power_off_results_kept(sim, tmp_path, monkeypatch):
    """Results first: the BMC (ipmi_sim) is killed at the end of a run, before the power
    off. The results were already pulled and judged; the failed power off is a note in the
    manifest and the verdict, not a lost run. ipmi_sim is started again afterwards."""
    orig = IpmiRig.shutdown

    def shutdown_with_dead_bmc(rig):
        sim.kill_bmc()          # the server (its QEMU) dies with it: nothing is left to pull
        # the dead BMC's tries end soon; the run before it had the rig file's BMC timeouts, as a
        # real run does (one try of one second is short for a SOL console on a busy host)
        bmc = rig.server.bmc
        bmc.cfg = dataclasses.replace(bmc.cfg, timeout=1, retries=1)
        return orig(rig)

    monkeypatch.setattr(IpmiRig, "shutdown", shutdown_with_dead_bmc)
    sim.rig_file("simdies")
    try:
        run_dir, verdict = run("selftest-pass", rig_name="simdies", results_root=tmp_path / "results", log=print)
    finally:
        sim.start_bmc()
    assert verdict.verdict == "PASS", verdict
    assert any("failed to power off" in w for w in verdict.warnings or []), verdict
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["outcome"] == "completed" and m["complete"] is True and m["power_off_error"], m
    for f in ("metrics.json", "samples.tsv", "stdout", "facts.txt", "junit.xml"):
        assert (run_dir / f).exists(), f"{f} lost"
    assert json.loads((run_dir / "metrics.json").read_text())["files_seen"]["value"] == 100
    assert sim.power_status() == "off"
    assert not _wait_no_leftovers(sim)


def test_kexec_knobs(sim, tmp_path):
    """A sysctl and a boot parameter on a lab server: the boot parameter on the kexec'd kernel's
    command line (the kernel sized its dentry hash table by it), the sysctl written over SSH
    before the workload and read back; both in the manifest."""
    initrd = sim.base / "initrd-knobs.cpio.gz"
    with open(initrd, "wb") as f:
        subprocess.run(["gzip", "-1", "-c", str(sim.initrd)], stdout=f, check=True, timeout=120)
    sim.rig_file("simknobs", boot="kexec", kexec={"initrd": str(initrd), "exec_command": ["kexec", "-e"]})
    knobs = parse_knobs(["vm.vfs_cache_pressure=200"], ["dhash_entries=32768"])
    run_dir, verdict = run("selftest-pass", rig_name="simknobs", results_root=tmp_path / "results", log=print,
                           knobs=knobs)
    assert verdict.verdict == "PASS", verdict
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["knobs"] == {"sysctl": [{"name": "vm.vfs_cache_pressure", "set": "200", "read_back": "200"}],
                          "cmdline": [{"arg": "dhash_entries=32768", "read_back": True}]}
    assert m["rig_facts"]["kexec"][0] == "kexec" and "dhash_entries=32768" in " ".join(m["rig_facts"]["kexec"])
    assert "dhash_entries=32768" in m["machine"]["cmdline"].split()
    assert m["machine"]["dentry_hash_entries"] == 32768, m["machine"]
    assert sim.power_status() == "off"
    assert not _wait_no_leftovers(sim)
