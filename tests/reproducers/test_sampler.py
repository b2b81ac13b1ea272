"""krig-sampler on the host's own /proc and /sys (no guest): rows, clocks, the last row.

The sampler's rule (reproducers/lib/krig-sampler.c): a row at its start, one at each
deadline start + k x interval that passes before it is stopped (a late row is taken at once,
the schedule does not drift), and one more when stopped. What is asserted is that rule
applied to the clock the sampler recorded (its mono column, CLOCK_MONOTONIC, the same clock
as time.monotonic() here), not how many rows a given sleep should give."""
import math
import signal
import subprocess
import time

from conftest import ROOT

SAMPLER = ROOT / "reproducers" / "lib" / "bin" / "krig-sampler"


def _sample_for(tmp_path, seconds: float, interval: str = "1") -> tuple[list[list[str]], float]:
    """(rows, the monotonic time just before SIGTERM) of a sampler run for about `seconds`
    after its first row was written (it handles SIGTERM from then on)."""
    out = tmp_path / "samples.tsv"
    p = subprocess.Popen([str(SAMPLER), "-i", interval, "-o", str(out), "-m", str(tmp_path)])
    try:
        for _ in range(1200):           # bounded: the first row is written on start
            if out.exists() and len(out.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the sampler wrote no row in 60 s")
        time.sleep(seconds)
        stopped = time.monotonic()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
    return [line.split("\t") for line in out.read_text().splitlines()], stopped


def check_rule(data: list[list[str]], interval: float, stopped: float) -> None:
    """The rows are those the rule gives for the span the sampler's own clock recorded."""
    mono = [float(r[-1]) for r in data]
    assert all(b > a for a, b in zip(mono, mono[1:])), mono
    assert mono[-1] >= stopped, "the last row is taken when stopped, after the signal"
    # deadlines start + k x interval (k >= 0) up to the stop row; the first row is taken just
    # after the start and the stop may land just past a deadline that had no row yet: one either way
    deadlines = math.floor((mono[-1] - mono[0]) / interval) + 1
    assert deadlines - 1 <= len(data) - 1 <= deadlines + 1, (len(data), deadlines, mono)


def test_a_run_shorter_than_one_interval_has_its_start_and_its_end(tmp_path):
    """A workload that ends inside the first interval (selftest-pass on a fast machine) still
    gets two rows, so the sampler's gap and every before/after comparison are defined."""
    rows, stopped = _sample_for(tmp_path, 0.3, interval="5")
    header, data = rows[0], rows[1:]
    assert header[0] == "time" and header[-1] == "mono"
    assert len(data) >= 2                      # the start and the stop, whatever the machine
    t = [float(r[0]) for r in data]
    assert t[-1] > t[0]
    check_rule(data, 5.0, stopped)
    assert all(len(r) == len(header) for r in data)


def test_rows_follow_the_interval_and_end_with_the_stop(tmp_path):
    rows, stopped = _sample_for(tmp_path, 1.1, interval="0.25")
    data = rows[1:]
    check_rule(data, 0.25, stopped)
    assert int(data[-1][1]) > 0                   # nr_dentry read from this host's dentry-state
