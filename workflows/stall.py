"""Hung or just slow? What a workload did in the last stretch before its timeout.

A timeout is HUNG only when the machine stopped making progress. On a host
that is loaded (or an emulator that is slow) a healthy kernel can still be
creating files, writing its log or flooding the dcache when the timeout hits:
blaming the kernel for that would be a false HUNG, so the run is an ERROR that
says the workload was still moving and by how much (krig.verdict.decide).

Evidence comes from the sampler's samples.tsv (one row a second, taken inside
the guest): the scratch filesystem's used inodes, the XFS log's writes and
blocks, and the dentry counts. A kernel that is hung, or a workload stuck in
D state, moves none of them; the sampler itself stops when the whole machine
is hung, so the newest sample must be recent too.
"""
import numpy as np

from krig.errors import UsageError
from krig.rundir import RunDir

# (column or derived counter, smallest change that counts as progress). Dentry
# counts move a little with the rig's own agent and the sampler; file and log
# counters move only when something writes.
COUNTERS = (("used_inodes", 1), ("xfs_log_writes", 1), ("xfs_log_blocks", 1),
            ("nr_dentry", 1000), ("nr_negative", 1000))
MIN_WINDOW, MAX_WINDOW = 60.0, 300.0


def window_for(timeout: float) -> float:
    """The stretch before the timeout that is looked at: a tenth of it, 60-300 s."""
    return min(MAX_WINDOW, max(MIN_WINDOW, timeout / 10))


def _column(s: dict, name: str):
    if name == "used_inodes":
        return s["scratch_files"] - s["scratch_ffree"] if "scratch_files" in s and "scratch_ffree" in s else None
    return s.get(name)


def still_progressing(run: RunDir, timeout: float) -> str | None:
    """What moved in the last window before the timeout ("scratch used inodes +12,345,
    xfs_log_writes +210 in the last 90 s of samples"), or None when nothing did (or
    there are no samples to tell: then the timeout stays HUNG)."""
    try:
        s = run.samples() if run.exists("samples.tsv") else None
    except (UsageError, OSError):
        s = None
    if s is None or "mono" not in s:
        return None
    ok = np.isfinite(s["mono"])
    mono = s["mono"][ok]
    if len(mono) < 2:
        return None
    last_t, first_t = float(mono[-1]), float(mono[0])
    window = window_for(timeout)
    # The sampler must have been alive at the end: its newest row within the window
    # of the run's end (the run lasted at least `timeout` from its first sample).
    if last_t - first_t < timeout - window:
        return None
    start = int(np.argmax(mono >= last_t - window))
    moved = []
    for name, least in COUNTERS:
        col = _column(s, name)
        if col is None:
            continue
        a, b = col[ok][start], col[ok][-1]
        if np.isfinite(a) and np.isfinite(b) and abs(b - a) >= least:
            moved.append(f"{name.replace('used_inodes', 'scratch used inodes')} {b - a:+,.0f}")
    if not moved:
        return None
    return f"{', '.join(moved)} in the last {last_t - float(mono[start]):.0f} s of samples"
