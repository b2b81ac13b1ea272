"""Hung or just slow: a timeout while the workload still moves is ERROR, not HUNG.

Unit cases on written samples.tsv files; the real guests are in test_guest.py
(selftest-hang stays HUNG, a selftest-pass too big for its timeout is ERROR).
"""
import pytest

from krig.rundir import RunDir
from workflows.stall import still_progressing as _progressing, window_for
from krig.verdict import Evidence, decide

BANNER = "[    0.000000] Linux version 6.1.0\n"


def still_progressing(d, timeout):
    return _progressing(RunDir(d), timeout)


def slow_not_hung(d, timeout, reason, console, load):
    """The rule's verdict on a timeout of `timeout` s with these samples, console and host load."""
    run = RunDir(d)
    ev = Evidence("hung", reason, BANNER + console, machine_answered=True, timeout=timeout,
                  progress=_progressing(run, timeout), last_phase=run.last_phase(), host_load=load)
    return decide(ev)

HEADER = ["time", "nr_dentry", "nr_negative", "xfs_log_writes", "xfs_log_blocks",
          "scratch_files", "scratch_ffree", "mono"]


def write_samples(d, rows):
    lines = ["\t".join(HEADER)] + ["\t".join(str(v) for v in r) for r in rows]
    (d / "samples.tsv").write_text("\n".join(lines) + "\n")


def rows(seconds, dentry=lambda t: 5000, used=lambda t: 10, log=lambda t: 7):
    # time, nr_dentry, nr_negative, log writes, log blocks, files, ffree, mono
    return [(1e9 + t, dentry(t), 5, log(t), log(t) * 64, 1000, 1000 - used(t), float(t))
            for t in range(seconds + 1)]


def test_window():
    assert window_for(40) == 60 and window_for(900) == 90 and window_for(5400) == 300


def test_static_counters_are_a_hang(tmp_path):
    write_samples(tmp_path, rows(200, dentry=lambda t: 5000 + t % 7))
    assert still_progressing(tmp_path, 200) is None
    assert slow_not_hung(tmp_path, 200, "r", "", "1.0") == ("HUNG", "r")


def test_files_still_created_is_not_a_hang(tmp_path):
    write_samples(tmp_path, rows(900, used=lambda t: 30 * t))
    moved = still_progressing(tmp_path, 900)
    assert moved.startswith("scratch used inodes +2,700") and "last 90 s" in moved
    (tmp_path / "phases.tsv").write_text("1.0\tstart\n2.0\tcreate\n")
    verdict, reason = slow_not_hung(tmp_path, 900, "harness did not finish within 900s", "", "9.5 9.0 8.1")
    assert verdict == "ERROR" and "\n" not in reason
    assert reason.startswith("timeout, not a hang: the workload was still making progress in phase create at 900s")
    assert "host load 9.5 9.0 8.1" in reason and "--set timeout=" in reason


def test_unlinking_and_log_writes_count(tmp_path):
    write_samples(tmp_path, rows(300, used=lambda t: 100000 - 50 * t, log=lambda t: t // 10))
    moved = still_progressing(tmp_path, 300)
    assert "scratch used inodes -3,000" in moved and "xfs_log_writes +6" in moved


def test_small_dentry_jitter_is_not_progress(tmp_path):
    write_samples(tmp_path, rows(300, dentry=lambda t: 5000 + 3 * t))
    assert still_progressing(tmp_path, 300) is None
    write_samples(tmp_path, rows(300, dentry=lambda t: 5000 + 100 * t))
    assert still_progressing(tmp_path, 300).startswith("nr_dentry +6,000 in the last 60 s")


def test_sampler_that_stopped_early_is_a_hang(tmp_path):
    # samples stop at 100 s of a 600 s timeout: the machine itself stopped
    write_samples(tmp_path, rows(100, used=lambda t: 30 * t))
    assert still_progressing(tmp_path, 600) is None


@pytest.mark.parametrize("content", [None, "", "time\tmono\n", "garbage\x00\n\n"])
def test_no_usable_samples_stays_hung(tmp_path, content):
    if content is not None:
        (tmp_path / "samples.tsv").write_text(content)
    assert still_progressing(tmp_path, 100) is None


def test_console_lockup_keeps_hung(tmp_path):
    write_samples(tmp_path, rows(900, used=lambda t: 30 * t))
    assert slow_not_hung(tmp_path, 900, "r", "INFO: task rm:123 blocked for more than 120 seconds.\n",
                         None) == ("HUNG", "r")
