"""Every failure branch of the runner, driven through the fake rig (rigs/fake.py): no guest boots.

Each case runs the real pipeline (workflows.run.run: preflight, run directory, rig protocols,
pull, power-off, krig check with the pytest judge) and asserts the verdict, its one line,
and that `krig check` on a copy of the run directory decides exactly the same.

Covers: rigs/fake.py, rigs/protocol.py, workflows/check.py, workflows/run.py.
"""
import json
import shutil
import subprocess

import pytest

from workflows.check import check
from workflows.run import accel_said, run
from rigs import load_rig
from rigs.fake import FAULTS

RIG = """driver = "fake"
fault = "{fault}"
samples = "{samples}"
output_bytes = {output}
work_dir = "{work}"

[metrics]
answer = 42
files_seen = 100
"""


def fake_rig(tmp_path, fault="none", samples="none", output=0):
    (tmp_path / "work").mkdir(exist_ok=True)
    p = tmp_path / f"fake-{fault}-{samples}.toml"
    p.write_text(RIG.format(fault=fault, samples=samples, output=output, work=tmp_path / "work"))
    return str(p)


def fake_run(tmp_path, results=None, timeout=120, **kw):
    d, verdict = run("selftest-pass", fake_rig(tmp_path, **kw), "distro", sets={"timeout": str(timeout)},
                     results_root=results or tmp_path / "results", log=lambda m: None)
    return d, verdict


def same_on_a_copy(tmp_path, d, verdict):
    """krig check on a copy of the run directory gives the run's verdict and line."""
    copy = tmp_path / "copy"
    shutil.copytree(d, copy)
    (copy / "verdict.json").unlink()
    again = check(copy)
    assert (again.verdict, again.reason) == (verdict.verdict, verdict.reason)


def test_every_fault_has_a_case():
    assert set(FAULTS) == {"none", "boot-fails", "boot-panic", "command-timeout", "pull-fails",
                           "power-off-fails", "emulator-stopped"}


def test_fake_rig_refuses_unknown_faults(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('driver = "fake"\nfault = "meteor"\n')
    with pytest.raises(Exception, match=r"bad.toml.fault: 'meteor' is not one of none, boot-fails"):
        load_rig(str(p))


def test_pass(tmp_path):
    d, v = fake_run(tmp_path)
    assert v.verdict == "PASS", v.reason
    assert (d / "stdout").read_text() == "the fake workload ran\n"
    assert json.loads((d / "manifest.json").read_text())["outcome"] == "completed"
    assert not list((tmp_path / "work").iterdir()), "the fake machine's results directory was left behind"


def test_boot_fails(tmp_path):
    d, v = fake_run(tmp_path, fault="boot-fails")
    assert v.verdict == "ERROR" and v.reason == "the fake machine did not come up (fake fault boot-fails)"
    same_on_a_copy(tmp_path, d, v)


def test_boot_panic(tmp_path):
    d, v = fake_run(tmp_path, fault="boot-panic")
    assert v.verdict == "CRASHED" and "Kernel panic - not syncing: VFS" in v.reason, v.reason
    same_on_a_copy(tmp_path, d, v)


def test_hung(tmp_path):
    """A timeout while nothing moved: HUNG, and HUNG again on a copy of the run directory."""
    d, v = fake_run(tmp_path, fault="command-timeout", samples="static")
    assert v.verdict == "HUNG", v.reason
    assert v.reason.endswith("did not finish within 120s")
    assert (d / "stdout").read_text() == "the fake workload started\n"     # the partial output is kept
    same_on_a_copy(tmp_path, d, v)


def test_slow_not_hung(tmp_path):
    """A timeout while files were still being created: ERROR (the host's slowness), on a copy too."""
    d, v = fake_run(tmp_path, fault="command-timeout", samples="moving")
    assert v.verdict == "ERROR", v.reason
    assert v.reason.startswith("timeout, not a hang: the workload was still making progress in phase "
                                  "create at 120s (scratch used inodes +1,800 in the last 60 s of samples; "
                                  "host load "), v.reason
    same_on_a_copy(tmp_path, d, v)


def test_pull_fails(tmp_path):
    d, v = fake_run(tmp_path, fault="pull-fails")
    assert v.verdict == "ERROR" and "cannot reach the machine to pull" in v.reason, v.reason
    kept = next((tmp_path / "work").iterdir())
    assert f"kept in {kept}" in v.reason and (kept / "workload-metrics.tsv").exists()
    same_on_a_copy(tmp_path, d, v)


def test_power_off_fails(tmp_path):
    """The results were pulled before the power-off: the verdict stands, with a warning."""
    d, v = fake_run(tmp_path, fault="power-off-fails")
    assert v.verdict == "PASS", v.reason
    assert v.warnings == ["the rig failed to power off after the run: rig fake-power-off-fails-none: "
                             "the machine did not power off (fake fault power-off-fails)"]


def test_emulator_stopped(tmp_path):
    """The host stopped the emulator (SIGSTOP on a real process): ERROR naming the host, not HUNG."""
    d, v = fake_run(tmp_path, fault="emulator-stopped", samples="static")
    assert v.verdict == "ERROR", v.reason
    assert v.reason.startswith("host: the emulator (pid ") and "stopped (process state T" in v.reason
    assert v.reason.endswith("; the kernel was not judged")
    rows = (d / "host.tsv").read_text().splitlines()
    assert rows[0].startswith("mono\tbusy_cpus\temulator_cpus"), "the host was sampled next to the emulator"
    same_on_a_copy(tmp_path, d, v)


def test_results_disk_fills(tmp_path):
    """The results filesystem (a 3 MiB tmpfs) fills as the results are moved in: ERROR naming
    the full disk and where the collected files are kept."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "krig-test-fake", str(mnt)], check=True)
    try:
        d, v = fake_run(tmp_path, results=mnt / "results", output=4 << 20)
        assert v.verdict == "ERROR", v.reason
        assert "No space left on device" in v.reason and "kept in" in v.reason, v.reason
        kept = next((tmp_path / "work").iterdir())
        assert (kept / "output.bin").stat().st_size == 4 << 20
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_the_boot_line_says_why_not_kvm():
    assert accel_said({"accel": "tcg", "accel_reason": "/dev/kvm is missing or not accessible"}, "qemu") \
        == "tcg: /dev/kvm is missing or not accessible"
    assert accel_said({"accel": "kvm", "accel_reason": "KVM probe boot reached init in 2.0s"}, "qemu") == "kvm"
    assert accel_said({}, "ipmi") == "ipmi"
