"""The foundation on a real QEMU guest: each verdict, Ctrl-C, result files.

Covers: rigs/initramfs.py, rigs/qemu/rig.py."""
import json
import os
import pwd
import signal
import subprocess
import time

import pytest

from conftest import KRIG, ROOT, check_a_copy, krig_run, qemu_pids, run_dir_of
from workflows.stall import window_for
from rigs.qemu import confine as qemu_confine

pytestmark = pytest.mark.guest

# the user QEMU runs as: an unprivileged one when the tests run as root (rigs/qemu/confine.py)
QEMU_USER = qemu_confine.runas_user() or pwd.getpwuid(os.geteuid()).pw_name

RUN_FILES = ["manifest.json", "console.log", "stdout", "stderr", "exit_code", "samples.tsv",
             "metrics.json", "verdict.json", "junit.xml", "time.txt"]


def test_pass_has_every_file(tmp_path, no_leftover_qemu):
    p = krig_run(tmp_path, "selftest-pass")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS" in p.stdout
    d = run_dir_of(p)
    assert d.is_relative_to(tmp_path / "results")
    for f in RUN_FILES:
        assert (d / f).exists(), f"missing {f}"
    # what the guest wrote as QEMU's user is krig's once pulled
    assert {f.stat().st_uid for f in d.rglob("*")} == {os.geteuid()}
    m = json.loads((d / "manifest.json").read_text())
    assert m["complete"] is True and m["outcome"] == "completed"
    assert m["rig_facts"]["accel"] in ("kvm", "tcg") and m["rig_facts"]["accel_reason"]
    # QEMU ran the guest as its own user, never as root (the guest still wrote its share)
    assert m["rig_facts"]["qemu_user"] == QEMU_USER and QEMU_USER != "root", m["rig_facts"]["qemu_user"]
    # started as that user (rigs/qemu/launch.py), never root's to begin with and drop later
    started = m["rig_facts"]["qemu_started_as"]
    assert "-runas" not in started and (f"--reuid={pwd.getpwnam(QEMU_USER).pw_uid}" in started) == (os.geteuid() == 0)
    booted = next(ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("krig: booted in "))
    assert f"({m['rig_facts']['accel']}" in booted, booted
    if m["rig_facts"]["accel"] == "tcg":    # the console says why not KVM, as the manifest does
        assert m["rig_facts"]["accel_reason"] in booted, booted
    assert m["machine"]["release"] == m["kernel"]["release"]
    if m["rig_facts"]["accel"] == "tcg":   # the rig's default: the kernel's own clocksource
        assert m["rig_facts"]["tcg_clocksource"] == "kernel" and m["machine"]["clocksource"] not in ("", "tsc")
        assert "clocksource=" not in m["machine"]["cmdline"]
    assert m["params"]["files"] == 100
    assert (tmp_path / "results" / "latest").resolve() == d
    metrics = json.loads((d / "metrics.json").read_text())
    assert metrics["files_seen"]["value"] == 100
    # the host next to the emulator, sampled through the workload: QEMU used CPU in it
    host = [ln.split("\t") for ln in (d / "host.tsv").read_text().splitlines()[1:]]
    assert host and m["host"]["cpus"] >= 1 and all(float(r[2]) >= 0 for r in host)
    assert max(float(r[2]) for r in host) > 0.05, host
    assert 0 <= metrics["host_contended_pct"]["value"] <= 100
    assert metrics["host_contended_pct"]["unit"] == "%"
    assert "created 100 files" in (d / "stdout").read_text()
    assert "krig-agent" in (d / "console.log").read_text()
    assert "created 100" not in (d / "console.log").read_text()   # separate channels
    junit = (d / "junit.xml").read_text()
    assert junit.count("<testcase") == 2
    assert "Elapsed" in (d / "time.txt").read_text() or "elapsed" in (d / "time.txt").read_text()


def test_fail_verdict(tmp_path, no_leftover_qemu):
    p = krig_run(tmp_path, "selftest-fail")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL" in p.stdout and "answer = 42" in p.stdout and "<= 41" in p.stdout


def test_hang_verdict(tmp_path, no_leftover_qemu):
    p = krig_run(tmp_path, "selftest-hang", "--set", "timeout=40")
    assert p.returncode == 5, p.stdout + p.stderr
    assert "HUNG" in p.stdout
    d = run_dir_of(p)
    v = json.loads((d / "verdict.json").read_text())
    assert v["verdict"] == "HUNG"
    assert check_a_copy(d, tmp_path) == (5, f"HUNG: {v['reason']}", v)     # judged the same from the directory
    assert "hanging now" in (d / "stdout").read_text()
    assert "krig-agent: ready" in (d / "console.log").read_text()
    # the trace still in the guest's ring buffer came back (salvaged before the power-off)
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["rig_facts"]["salvage"].startswith("ran in"), manifest["rig_facts"].get("salvage")
    assert "ring buffer extracted to trace.dat" in (d / "salvage.log").read_text()
    from analysis.trace.tracedat import TraceFile
    assert TraceFile(d / "trace.dat").counts().get("sched:sched_process_exec", 0) >= 1
    # the rig stopped the workload at its timeout (not at the run's own limit): what it recorded
    assert manifest["params"]["timeout"] == 40 and "did not finish within 40s" in v["reason"], v["reason"]


def test_slow_workload_is_error_not_hung(tmp_path, no_leftover_qemu):
    """A workload still creating files when its timeout hits did not hang: the machine
    was too slow for the timeout, and that is not the kernel's fault (ERROR).

    Whether a million files take more than 25 s is the machine's business; what is asserted
    is the verdict for what the run recorded: the files the scratch filesystem gained over
    the samples' last window before the timeout (the rule's progress, workflows/stall.py), or,
    had the workload finished, a PASS with every file seen."""
    p = krig_run(tmp_path, "selftest-pass", "--set", "files=1000000", "--set", "timeout=25")
    d = run_dir_of(p)
    v = json.loads((d / "verdict.json").read_text())
    outcome = json.loads((d / "manifest.json").read_text())["outcome"]
    if outcome == "completed":                 # a machine that creates 1M files within 25 s
        assert (p.returncode, v["verdict"]) == (0, "PASS"), v["reason"]
        assert json.loads((d / "metrics.json").read_text())["files_seen"]["value"] == 1_000_000
        return
    assert outcome == "hung", (outcome, v["reason"])
    lines = (d / "samples.tsv").read_text().splitlines()
    head = lines[0].split("\t")
    rows = [dict(zip(head, ln.split("\t"))) for ln in lines[1:]]
    mono = [float(r["mono"]) for r in rows]
    window = window_for(25)
    last = [r for r, t in zip(rows, mono) if t >= mono[-1] - window]
    used = [float(r["scratch_files"]) - float(r["scratch_ffree"]) for r in (last[0], last[-1])]
    gained = used[1] - used[0]
    assert gained > 0, "the samples show no file created in the last window: the rule gives HUNG"
    assert p.returncode == 3, p.stdout + p.stderr
    assert v["verdict"] == "ERROR"
    assert v["reason"].startswith("timeout, not a hang: the workload was still making progress in phase create")
    assert f"scratch used inodes {gained:+,.0f}" in v["reason"] and "\n" not in v["reason"]
    assert check_a_copy(d, tmp_path) == (3, f"ERROR: {v['reason']}", v)


def test_panic_verdict(tmp_path, no_leftover_qemu):
    p = krig_run(tmp_path, "selftest-panic")
    assert p.returncode == 6, p.stdout + p.stderr
    d = run_dir_of(p)
    assert "Kernel panic - not syncing" in (d / "console.log").read_text()
    v = json.loads((d / "verdict.json").read_text())
    assert v["verdict"] == "CRASHED"
    assert any("Kernel panic" in line for line in v["crash_context"])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_leaves_nothing(tmp_path, sig):
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    p = subprocess.Popen(KRIG + ["run", "selftest-hang", "--set", "timeout=300"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600      # generous: a busy host boots a TCG guest slowly
    # wait until the guest is up and the workload runs
    while time.monotonic() < deadline:
        runs = list((tmp_path / "results").glob("selftest-hang/*/*/*/manifest.json"))
        if runs and json.loads(runs[0].read_text()).get("machine"):
            break
        time.sleep(0.5)
    else:
        p.kill()
        pytest.fail("guest never came up")
    time.sleep(2)
    # while the guest runs, its emulator is not root
    users = {qemu_confine.process_user(pid) for pid in qemu_pids(str(tmp_path))}
    assert users == {QEMU_USER} and "root" not in users, users
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, out + err
    assert "Traceback" not in err
    assert not (qemu_pids(str(tmp_path))), "qemu survived the signal"
    m = json.loads(runs[0].read_text())
    assert m["complete"] is False and m["status"] == "incomplete"
    d = runs[0].parent
    assert (d / "console.log").exists() and (d / "verdict.json").exists()
    assert json.loads((d / "verdict.json").read_text())["verdict"] == "INTERRUPTED"


def test_preset_requirement_skips(tmp_path, no_leftover_qemu):
    """A preset's own [presets.X.requires] is checked on the booted machine: the unlink seed
    preset (the report's 8 CPUs) on the 2-vCPU default rig is SKIP, before any workload."""
    p = krig_run(tmp_path, "unlink-dentry-growth", "--preset", "seed")
    assert p.returncode == 4, p.stdout + p.stderr
    d = run_dir_of(p)
    v = json.loads((d / "verdict.json").read_text())
    assert v["verdict"] == "SKIP" and "needs 8 CPUs, the machine has 2" in v["reason"]
    assert not (d / "samples.tsv").exists()
