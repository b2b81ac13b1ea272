"""What the host was doing while the workload ran: host.tsv, and whether it was contended.

A QEMU guest under TCG runs exactly as fast as the host lets it: when other processes
take the host's CPUs, the guest's workload slows and a timing metric (an unlink rate's
dips, say) moves although the kernel did nothing. HostSampler writes one row a second
from the host's /proc/stat and the emulator's /proc/<pid>/stat:

    mono            CLOCK_MONOTONIC of the host (s)
    busy_cpus       CPUs busy on the whole host (user+nice+system+irq+softirq+steal)
    emulator_cpus   CPUs the emulator process used (all its threads; empty: no emulator)
    others_cpus     busy_cpus - emulator_cpus: everything else on the host, krig included

A sample is *contended* when the host was at least SATURATED of its CPUs busy and other
processes used at least OTHERS_CPUS of them. `host_contended_pct` (the share of the
workload's samples that were contended) is every QEMU run's metric; krig check turns a
FAIL that rests only on thresholds marked `host_sensitive` into ERROR when it exceeds
krig.verdict.CONTENDED_LIMIT_PCT (docs/verdicts.md, "The verdict rule").
"""
from __future__ import annotations

import os
import pathlib
import threading
import time

from krig.rundir import RunDir

SATURATED = 0.9        # of the host's CPUs busy
OTHERS_CPUS = 0.5      # CPUs used by processes other than the emulator
HEADER = "mono\tbusy_cpus\temulator_cpus\tothers_cpus\n"
_TICK = os.sysconf("SC_CLK_TCK")


def _host_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot (guest time is inside user already)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v + [0] * (8 - len(v))
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def _proc_jiffies(pid: int) -> int | None:
    """utime + stime of a process, all threads (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):
        return None


class HostSampler:
    """Samples the host into `path` every `interval` s in a thread until stop(), and once
    more at the stop."""

    def __init__(self, path: pathlib.Path, emulator_pid: int | None, interval: float = 1.0):
        self.path, self.pid, self.interval = pathlib.Path(path), emulator_pid, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="krig-host-sampler", daemon=True)
        self.ncpus = os.cpu_count() or 1

    def start(self) -> HostSampler:
        self.path.write_text(HEADER)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self):
        busy0, total0 = _host_jiffies()
        emu0 = _proc_jiffies(self.pid) if self.pid else None
        t0 = time.monotonic()
        with open(self.path, "a") as out:
            stopped = False
            while not stopped:  # one last row at the stop: a short workload still has one
                stopped = self._stop.wait(self.interval)
                busy, total = _host_jiffies()
                emu = _proc_jiffies(self.pid) if self.pid else None
                t = time.monotonic()
                if total > total0:
                    busy_cpus = self.ncpus * (busy - busy0) / (total - total0)
                    emu_cpus = (emu - emu0) / _TICK / (t - t0) if emu is not None and emu0 is not None \
                        else None
                    others = busy_cpus - (emu_cpus or 0.0)
                    out.write(f"{t:.3f}\t{busy_cpus:.3f}\t{'' if emu_cpus is None else f'{emu_cpus:.3f}'}"
                              f"\t{max(0.0, others):.3f}\n")
                    out.flush()
                busy0, total0, emu0, t0 = busy, total, emu, t


def contended_pct(path: pathlib.Path, ncpus: int) -> float | None:
    """% of host.tsv's samples in which the host was contended (None: no samples)."""
    path = pathlib.Path(path)
    text = RunDir(path.parent).text(path.name, "")      # none when the run has no host.tsv
    rows = []
    for line in text.splitlines()[1:]:
        f = line.split("\t")
        try:
            rows.append((float(f[1]), float(f[3])))
        except (IndexError, ValueError):
            continue
    if not rows:
        return None
    hot = sum(1 for busy, others in rows if busy >= SATURATED * ncpus and others >= OTHERS_CPUS)
    return 100.0 * hot / len(rows)
