"""krig-sampler on the host's own /proc and /sys (no guest): rows, clocks, the last row."""
import signal
import subprocess
import time

from conftest import ROOT

SAMPLER = ROOT / "reproducers" / "lib" / "bin" / "krig-sampler"


def _sample_for(tmp_path, seconds: float, interval: str = "1") -> list[list[str]]:
    out = tmp_path / "samples.tsv"
    p = subprocess.Popen([str(SAMPLER), "-i", interval, "-o", str(out), "-m", str(tmp_path)])
    time.sleep(seconds)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    return [line.split("\t") for line in out.read_text().splitlines()]


def test_a_run_shorter_than_one_interval_has_its_start_and_its_end(tmp_path):
    """A workload that ends inside the first interval (selftest-pass on a fast machine) still
    gets two rows, so the sampler's gap and every before/after comparison are defined."""
    rows = _sample_for(tmp_path, 0.3, interval="5")
    header, data = rows[0], rows[1:]
    assert header[0] == "time" and header[-1] == "mono"
    assert len(data) == 2
    t = [float(r[0]) for r in data]
    mono = [float(r[-1]) for r in data]
    assert t[1] > t[0] and mono[1] > mono[0]
    assert all(len(r) == len(header) for r in data)


def test_rows_follow_the_interval_and_end_with_the_stop(tmp_path):
    rows = _sample_for(tmp_path, 1.1, interval="0.25")[1:]
    mono = [float(r[-1]) for r in rows]
    gaps = [b - a for a, b in zip(mono, mono[1:])]
    assert 3 <= len(rows) <= 7, len(rows)        # 0, .25, .5, .75, 1.0 and the stop
    assert min(gaps) > 0
    assert int(rows[-1][1]) > 0                   # nr_dentry read from this host's dentry-state
