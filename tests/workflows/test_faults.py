"""The fault suite: what each rig, host or krig fault gives (docs/verdicts.md: "Faults and what they give").

Every case asserts the verdict or exit code, the one-line message, that nothing
already collected was lost, and that no qemu (or ipmi_sim) process is left.
Preflight and rule cases boot nothing; the others boot selftest-pass or a short
selftest-hang on a QEMU rig whose work directory is the test's own. The IPMI rig's case
(its BMC dying mid-run) is in tests/rigs/ipmi/test_faults_ipmi.py.
"""
import json
import math
import os
import pathlib
import re
import shutil
import signal
import stat
import subprocess
import threading
import time

import pytest

from conftest import KRIG, ROOT, krig_run, qemu_pids, run_dir_of
from krig.paths import owner_record
from krig.verdict import INCOMPLETE_REASON, Evidence, decide, exit_code
from rigs.qemu.rig import OWNER_FILE, reap_stale
from test_qemu_share import guest_made

pytestmark = pytest.mark.faults

RIG = """driver = "qemu"
memory = "{memory}"
cpus = 2
accel = "auto"
boot_timeout = 180
work_dir = "{work}"
extra_args = {extra}

[[disks]]
serial = "krig-scratch"
size = "16G"
role = "scratch"
"""
PANIC = "[    2.100000] Kernel panic - not syncing: Attempted to kill init!\n"
BANNER = "[    0.000000] Linux version 6.1.0-56-amd64 (debian-kernel@lists.debian.org)\n"


def rig_file(tmp_path, name="faulty", memory="2G", extra=(), work=None) -> pathlib.Path:
    d = tmp_path / "rigs"
    d.mkdir(exist_ok=True)
    p = d / f"{name}.toml"
    p.write_text(RIG.format(memory=memory, work=work or tmp_path / "work", extra=json.dumps(list(extra))))
    return p


def one_line(text: str, *needles) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def verdict_line(stdout: str) -> str:
    """The verdict line `krig run` prints (the one line saying what happened)."""
    return next(ln for ln in stdout.splitlines() if ln.split(":")[0] in ("PASS", "FAIL", "ERROR", "SKIP", "HUNG",
                                                                        "CRASHED", "INTERRUPTED", "INCOMPLETE"))


def finished(p: subprocess.Popen, out: str, err: str) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def no_runs(tmp_path):
    assert not list((tmp_path / "results").glob("*/*/*/*/manifest.json")), "a run directory was made"


def wait_for(cond, what: str, timeout: float = 240):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def running_manifest(tmp_path, repro="selftest-hang"):
    """The run's manifest once the kernel under test answered (machine facts recorded)."""
    for m in (tmp_path / "results").glob(f"{repro}/*/*/*/manifest.json"):
        try:
            if json.loads(m.read_text()).get("machine"):
                return m
        except ValueError:
            pass
    return None


# -- the rule itself -----------------------------------------------------------------------------

@pytest.mark.parametrize("outcome,console,fault,answered,verdict", [
    ("completed", BANNER, None, True, None),                          # thresholds decide
    ("completed", BANNER + PANIC, None, True, "CRASHED"),
    ("crashed", BANNER + PANIC, None, False, "CRASHED"),              # panicked at boot
    ("crashed", BANNER + PANIC, "QEMU exited with status 1", False, "CRASHED"),  # the kernel went first
    ("crashed", "", "QEMU exited with status 1: cannot set up guest memory", False, "ERROR"),
    ("crashed", BANNER, "QEMU was killed by signal 9", True, "ERROR"),  # the host killed the emulator
    ("crashed", "", None, False, "ERROR"),                            # gone before the kernel printed
    ("crashed", BANNER, None, True, "CRASHED"),                       # reset itself after it ran
    ("hung", BANNER, None, True, "HUNG"),
    ("hung", "", None, False, "ERROR"),                               # the rig never started it
    ("hung", "", None, True, "HUNG"),                                 # a server without serial console
    ("hung", BANNER + "[   40.1] Kernel panic - not syncing: NMI: Not continuing\n", None, True,
     "HUNG"),                                                         # the panic krig's NMI asked for
    ("hung", BANNER + PANIC + "[   40.1] Kernel panic - not syncing: NMI: Not continuing\n", None, True,
     "CRASHED"),                                                      # a crash before krig's NMI
    ("error", BANNER + PANIC, None, True, "ERROR"),
    ("skip", "", None, False, "SKIP"),
    ("interrupted", "", None, False, "INTERRUPTED"),
    (None, BANNER, None, True, "INCOMPLETE"),
])
def test_rule(outcome, console, fault, answered, verdict):
    v, reason = decide(Evidence(outcome, "why", console, rig_fault=fault, machine_answered=answered))
    assert v == verdict, reason
    if v == "ERROR" and fault:
        assert fault in reason


# -- preflight and bad input: nothing starts -----------------------------------------------------

def test_memory_beyond_host(krig_cli, tmp_path):
    """A rig asking for 4x this host's MemTotal is refused: one line giving the MemAvailable
    the preflight read, which the request exceeds (the rule, applied to the number it states)."""
    total_kib = next(int(ln.split()[1]) for ln in open("/proc/meminfo") if ln.startswith("MemTotal:"))
    gib = math.ceil(4 * total_kib / (1 << 20))
    rig = rig_file(tmp_path, memory=f"{gib}G")
    p = krig_cli("run", "selftest-pass", "--rig", str(rig), env={"KRIG_RESULTS": str(tmp_path / "results")})
    assert p.returncode == 2, p.stdout + p.stderr
    line = one_line(p.stderr, f"{rig}.memory:", f"{gib:.1f} GiB", "MemAvailable")
    m = re.search(r"\(MemAvailable ([\d.]+) (GiB|MiB|KiB)\)$", line)
    assert m, line
    avail = float(m.group(1)) * {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10}[m.group(2)]
    assert gib << 30 > avail, line
    no_runs(tmp_path)
    assert not qemu_pids(str(tmp_path))


def test_bad_rig_path_named_as_given(krig_cli, tmp_path):
    rig = rig_file(tmp_path, memory="lots")
    p = krig_cli("run", "selftest-pass", "--rig", str(rig))
    assert p.returncode == 2
    line = one_line(p.stderr, "memory", "lots")
    assert line.startswith(f"krig: error: {rig}.memory: "), line


@pytest.mark.parametrize("repro,setting,needle", [
    ("selftest-pass", "timeout=-5", "below the minimum 1"),
    ("selftest-pass", "files=0", "below the minimum 1"),
    ("xfs-ail-storm", "writers=100000", "above the maximum 128 (64 per CPU x 2 CPUs"),
    ("selftest-pass", "sample_interval=0", "below the minimum"),
    ("xfs-ail-storm", "log_size=10M", "below the minimum 64M"),
    ("xfs-ail-storm", "log_size=4G", "above the maximum 2038M"),
])
def test_parameter_ranges(krig_cli, tmp_path, repro, setting, needle):
    p = krig_cli("run", repro, "--set", setting, env={"KRIG_RESULTS": str(tmp_path / "results")})
    assert p.returncode == 2, p.stdout + p.stderr
    one_line(p.stderr, f"--set {setting.split('=')[0]}: ", needle)
    no_runs(tmp_path)


@pytest.fixture
def tiny_fs(tmp_path):
    """A 24 KiB tmpfs (root only)."""
    if os.geteuid() != 0:
        pytest.fail("the full-filesystem cases mount a tmpfs: run the fault suite as root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24k", "krig-test-tiny", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_results_fs_preflight(krig_cli, tiny_fs):
    p = krig_cli("run", "selftest-pass", env={"KRIG_RESULTS": str(tiny_fs / "results")})
    assert p.returncode == 2, p.stdout + p.stderr
    one_line(p.stderr, str(tiny_fs / "results"), "free", "needs at least")
    assert not list(tiny_fs.iterdir())


def test_scratch_writes_counted_by_preflight(krig_cli, tmp_path):
    """A preset that declares how much of the scratch disk it writes (xfs-ail-storm smoke:
    requires.scratch_write) does not start on a work directory that cannot hold it."""
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m", "krig-test-scratch", str(work)], check=True)
    try:
        p = krig_cli("run", "xfs-ail-storm", "--preset", "smoke", "--rig", str(rig_file(tmp_path, work=work)),
                     env={"KRIG_RESULTS": str(tmp_path / "results")})
    finally:
        subprocess.run(["umount", "-l", str(work)], check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    one_line(p.stderr, f"{work}: 128.0 MiB free for ", "work directory",
             "+ scratch disk writes 256.0 MiB (requires.scratch_write)")
    no_runs(tmp_path)


def test_incomplete_run(krig_cli, tmp_path):
    """A run directory whose krig was killed: INCOMPLETE, exit 7; a live owner's run is not judged."""
    d = tmp_path / "run"
    d.mkdir()
    dead = {"pid": 2 ** 22 + 7, "start": "1", "host": os.uname().nodename}
    man = {"reproducer": "selftest-pass", "params": {}, "outcome": None, "status": "running", "owner": dead}
    (d / "manifest.json").write_text(json.dumps(man))
    p = krig_cli("check", str(d))
    assert p.returncode == exit_code("INCOMPLETE") == 7, p.stdout + p.stderr
    assert one_line(p.stdout) == f"INCOMPLETE: {INCOMPLETE_REASON}"
    assert json.loads((d / "verdict.json").read_text())["verdict"] == "INCOMPLETE"
    (d / "manifest.json").write_text(json.dumps({**man, "owner": owner_record()}))   # this process: alive
    p = krig_cli("check", str(d))
    assert p.returncode == 2
    one_line(p.stderr, "still running")


def test_reap_keeps_what_was_collected(tmp_path):
    """A dead owner's work directory: images deleted, the guest's results moved to the run dir."""
    work, run_dir = tmp_path / "work", tmp_path / "run"
    run_dir.mkdir()
    dead = work / "krig-x-dead"
    (dead / "share" / "out").mkdir(parents=True)
    (dead / "share" / "ctl").mkdir()
    (dead / "share" / "out" / "samples.tsv").write_text("t\tnr_dentry\n0\t1\n")
    (dead / "share" / "ctl" / "1.out").write_text("hanging now\n")
    (dead / "nvme0.img").write_bytes(b"\0" * 4096)
    (dead / OWNER_FILE).write_text(json.dumps({"pid": 2 ** 22 + 7, "start": "1", "host": os.uname().nodename,
                                               "run_dir": str(run_dir)}))
    live = work / "krig-x-live"
    live.mkdir()
    (live / "nvme0.img").write_bytes(b"\0")
    (live / OWNER_FILE).write_text(json.dumps({**owner_record(), "run_dir": str(run_dir)}))
    assert reap_stale(work) == ["krig-x-dead"]
    assert not dead.exists() and (live / "nvme0.img").exists()
    assert (run_dir / "samples.tsv").read_text().startswith("t\t")
    assert (run_dir / "stdout").read_text() == "hanging now\n"


def test_reap_takes_no_forged_verdict_and_no_link(tmp_path):
    """A killed run whose share holds what a hostile guest left: a forged verdict.json and
    metrics.json, a guest-made symlink (mapped-xattr), a host symlink to a secret, a FIFO, a
    linked ctl channel. The reaper moves the plain result only, and records what it dropped."""
    work, run_dir = tmp_path / "work", tmp_path / "run"
    run_dir.mkdir()
    secret = tmp_path / "host-secret"
    secret.write_text("krig-secret\n")
    dead = work / "krig-x-dead"
    out, ctl = dead / "share" / "out", dead / "share" / "ctl"
    out.mkdir(parents=True)
    ctl.mkdir()
    (out / "samples.tsv").write_text("t\tnr_dentry\n0\t1\n")
    (out / "verdict.json").write_text('{"verdict": "PASS", "reason": "forged"}\n')
    (out / "metrics.json").write_text('{"answer": {"value": 42}}\n')
    (out / "link").symlink_to(secret)
    guest_made(out / "guest-link", stat.S_IFLNK | 0o777, str(secret).encode())
    os.mkfifo(out / "fifo")
    (ctl / "1.out").symlink_to(secret)
    (dead / OWNER_FILE).write_text(json.dumps({"pid": 2 ** 22 + 7, "start": "1", "host": os.uname().nodename,
                                               "run_dir": str(run_dir)}))
    dropped = []
    assert reap_stale(work, dropped) == ["krig-x-dead"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["samples.tsv"]
    assert not dead.exists() and secret.read_text() == "krig-secret\n"
    text = "\n".join(dropped)
    for what in ("verdict.json takes the name of krig's own", "metrics.json takes the name of krig's own",
                 "out/link is a symlink", "guest-link is a symlink the guest made", "out/fifo is a FIFO",
                 "ctl/1.out"):
        assert what in text, dropped


# -- on a real guest -----------------------------------------------------------------------------

@pytest.mark.guest
def test_qemu_refuses_to_start(tmp_path, no_leftover_qemu):
    """QEMU's own error (here an unknown CPU model) is ERROR quoting QEMU, not CRASHED."""
    rig = rig_file(tmp_path, extra=["-cpu", "no-such-cpu-krig"])
    p = krig_run(tmp_path, "selftest-pass", "--rig", str(rig))
    assert p.returncode == 3, p.stdout + p.stderr
    line = verdict_line(p.stdout)
    assert line.startswith("ERROR: rig faulty: QEMU exited with status 1: ") and "no-such-cpu-krig" in line, line
    d = run_dir_of(p)
    assert "no-such-cpu-krig" in (d / "qemu.log").read_text()
    assert not list((tmp_path / "work").iterdir()), "the work directory was left behind"


def test_readonly_image_dir(tmp_path, no_leftover_qemu):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64m", "krig-test-ro", str(ro)], check=True)
    try:
        p = krig_run(tmp_path, "selftest-pass", "--rig", str(rig_file(tmp_path, work=ro)))
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)
    assert p.returncode == 3, p.stdout + p.stderr
    line = verdict_line(p.stdout)
    assert line.startswith("ERROR: rig faulty: cannot set up the work directory") and "Read-only file system" in line
    assert str(ro) in line


@pytest.mark.guest
def test_kill9_incomplete_then_reaped(tmp_path, krig_cli, no_leftover_qemu):
    rig = rig_file(tmp_path)
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    p = subprocess.Popen(KRIG + ["run", "selftest-hang", "--rig", str(rig), "--set", "timeout=300"], cwd=ROOT,
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        man = wait_for(lambda: running_manifest(tmp_path), "the guest to answer")
        d = man.parent
        wait_for(lambda: any("hanging now" in f.read_text() for f in (tmp_path / "work").glob("*/share/ctl/*.out")),
                 "the workload's first output", 120)
    finally:
        p.kill()
        p.wait()
    wait_for(lambda: not qemu_pids(str(tmp_path)), "qemu to die with krig (PR_SET_PDEATHSIG)", 30)
    assert json.loads(man.read_text())["status"] == "running"
    stale = [w for w in (tmp_path / "work").iterdir()]
    assert len(stale) == 1 and list(stale[0].glob("nvme*.img")), "the killed run's work directory"
    c = krig_cli("check", str(d))
    assert c.returncode == 7 and one_line(c.stdout) == f"INCOMPLETE: {INCOMPLETE_REASON}"
    # the next run on a rig with the same work directory reaps it (this one fails fast: QEMU refuses)
    q = krig_run(tmp_path, "selftest-pass", "--rig", str(rig_file(tmp_path, "next", extra=["-cpu", "nope"])))
    assert q.returncode == 3, q.stdout + q.stderr
    assert not list((tmp_path / "work").iterdir()), "the stale work directory (and its image) is still there"
    assert "hanging now" in (d / "stdout").read_text(), "the killed run's output was lost"
    assert (d / "console.log").stat().st_size > 0
    assert json.loads((run_dir_of(q) / "manifest.json").read_text())["rig_facts"]["reaped_work_dirs"] == \
        [stale[0].name]


@pytest.mark.guest
def test_sigterm_during_boot(tmp_path, no_leftover_qemu):
    rig = rig_file(tmp_path)
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    p = subprocess.Popen(KRIG + ["run", "selftest-pass", "--rig", str(rig)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # QEMU is stopped (SIGSTOP) as soon as it is seen, so the boot cannot get further
        # however fast this machine is; the SIGTERM then lands during the boot by construction
        pids = set()
        for _ in range(2400):               # bounded: 120 s
            pids = qemu_pids(str(tmp_path))
            if pids or p.poll() is not None:
                break
            time.sleep(0.05)
        assert pids, "qemu did not start"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        assert running_manifest(tmp_path, "selftest-pass") is None, "the guest had answered before QEMU was stopped"
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out + err
    assert "Traceback" not in err and verdict_line(out).startswith("INTERRUPTED: ")
    d = run_dir_of(finished(p, out, err))
    m = json.loads((d / "manifest.json").read_text())
    assert m["status"] == "incomplete" and m["complete"] is False
    assert (d / "console.log").exists()
    assert not qemu_pids(str(tmp_path)), "qemu survived SIGTERM"
    assert not list((tmp_path / "work").iterdir())


@pytest.mark.guest
def test_results_fs_fills_mid_run(tmp_path, no_leftover_qemu):
    """The results filesystem fills while the guest runs: exit 3 (ERROR's code), one line, and
    what the guest collected is kept (the line says where)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "krig-test-small", str(mnt)], check=True)
    try:
        env = {**os.environ, "KRIG_RESULTS": str(mnt / "results")}
        p = subprocess.Popen(KRIG + ["run", "selftest-hang", "--rig", str(rig_file(tmp_path)), "--set",
                                     "timeout=15"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: running_manifest(mnt), "the guest to answer")
            subprocess.run(["dd", "if=/dev/zero", f"of={mnt}/filler", "bs=64k"], capture_output=True)
            out, err = p.communicate(timeout=240)
        finally:
            if p.poll() is None:
                p.kill()
        assert p.returncode == 3, out + err
        line = one_line(err, "No space left on device", "kept in")
        kept = pathlib.Path(line.split("kept in ")[1].split(";")[0].split(" ")[0].rstrip(")"))
        assert kept.is_dir() and any(kept.iterdir()), f"nothing kept in {kept}"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.guest
def test_emulator_stopped_is_the_hosts_fault(tmp_path, krig_cli, no_leftover_qemu):
    """QEMU stopped (SIGSTOP) past the run's timeout: ERROR naming the stopped emulator, not
    HUNG; krig check on a copy of the run directory says the same."""
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    p = subprocess.Popen(KRIG + ["run", "selftest-hang", "--rig", str(rig_file(tmp_path)), "--set", "timeout=20"],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: running_manifest(tmp_path), "the guest to answer")
        pids = wait_for(lambda: qemu_pids(str(tmp_path)), "qemu", 30)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, out + err
    line = verdict_line(out)
    assert line.startswith("ERROR: host: the emulator (QEMU pid ") and "stopped (process state T" in line, line
    d = run_dir_of(finished(p, out, err))
    copy = tmp_path / "copy"
    shutil.copytree(d, copy)
    c = krig_cli("check", str(copy))
    assert c.returncode == 3 and one_line(c.stdout) == line


@pytest.mark.guest
def test_work_dir_fills_under_the_scratch_image(tmp_path, no_leftover_qemu):
    """The filesystem under the rig's work directory (a 4 MiB tmpfs) fills while the sparse
    scratch image grows: ERROR quoting QEMU's own message, not `run.sh exited 255`."""
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "krig-test-work", str(work)], check=True)
    try:
        p = krig_run(tmp_path, "selftest-pass", "--rig", str(rig_file(tmp_path, work=work)),
                     "--set", "files=15000", "--set", "timeout=300")
        assert not list(work.iterdir()), "the work directory was left behind"
    finally:
        subprocess.run(["umount", "-l", str(work)], check=False)
    assert p.returncode == 3, p.stdout + p.stderr
    line = verdict_line(p.stdout)
    assert line.startswith(f"ERROR: host: the filesystem under the rig's work directory {work} refused the "
                           "disk images' writes: QEMU said \"qemu-system-x86_64: aio failed: No space left on "
                           "device\" (qemu.log)"), line


@pytest.mark.guest
def test_two_runs_same_rig_at_once(tmp_path, no_leftover_qemu):
    rig = rig_file(tmp_path)
    res = {}

    def one(i):
        res[i] = krig_run(tmp_path, "selftest-pass", "--rig", str(rig), timeout=900)
    threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dirs = set()
    for p in res.values():
        assert p.returncode == 0, p.stdout + p.stderr
        d = run_dir_of(p)
        dirs.add(d)
        assert json.loads((d / "verdict.json").read_text())["verdict"] == "PASS"
        assert "created 100 files" in (d / "stdout").read_text()
    assert len(dirs) == 2
    assert not list((tmp_path / "work").iterdir())
