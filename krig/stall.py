"""Hung or just slow? What a workload did in the last stretch before its timeout.

A timeout is HUNG only when the machine stopped making progress. On a host
that is loaded (or an emulator that is slow) a healthy kernel can still be
creating files, writing its log or flooding the dcache when the timeout hits:
blaming the kernel for that would be a false HUNG, so the run is an ERROR that
says the workload was still moving and by how much.

Evidence comes from the sampler's samples.tsv (one row a second, taken inside
the guest): the scratch filesystem's used inodes, the XFS log's writes and
blocks, and the dentry counts. A kernel that is hung, or a workload stuck in
D state, moves none of them; the sampler itself stops when the whole machine
is hung, so the newest sample must be recent too.
"""
import csv
import pathlib

# (column or derived counter, smallest change that counts as progress). Dentry
# counts move a little with the rig's own agent and the sampler; file and log
# counters move only when something writes.
COUNTERS = (("used_inodes", 1), ("xfs_log_writes", 1), ("xfs_log_blocks", 1),
            ("nr_dentry", 1000), ("nr_negative", 1000))
MIN_WINDOW, MAX_WINDOW = 60.0, 300.0


def window_for(timeout: float) -> float:
    """The stretch before the timeout that is looked at: a tenth of it, 60-300 s."""
    return min(MAX_WINDOW, max(MIN_WINDOW, timeout / 10))


def _rows(path: pathlib.Path) -> list[dict]:
    try:
        with path.open(newline="") as f:
            return [r for r in csv.DictReader(f, delimiter="\t") if r.get("mono")]
    except (OSError, csv.Error, UnicodeDecodeError):
        return []


def _value(row: dict, name: str) -> float | None:
    try:
        if name == "used_inodes":
            return float(row["scratch_files"]) - float(row["scratch_ffree"])
        return float(row[name])
    except (KeyError, TypeError, ValueError):
        return None


def still_progressing(run_dir: pathlib.Path, timeout: float) -> str | None:
    """What moved in the last window before the timeout ("scratch used inodes +12,345,
    xfs_log_writes +210 in the last 90 s of samples"), or None when nothing did (or
    there are no samples to tell: then the timeout stays HUNG)."""
    rows = _rows(run_dir / "samples.tsv")
    if len(rows) < 2:
        return None
    try:
        last_t = float(rows[-1]["mono"])
        first_t = float(rows[0]["mono"])
    except ValueError:
        return None
    window = window_for(timeout)
    # The sampler must have been alive at the end: its newest row within the window
    # of the run's end (the run lasted at least `timeout` from its first sample).
    if last_t - first_t < timeout - window:
        return None
    start = next((r for r in rows if float(r["mono"]) >= last_t - window), rows[0])
    moved = []
    for name, least in COUNTERS:
        a, b = _value(start, name), _value(rows[-1], name)
        if a is not None and b is not None and abs(b - a) >= least:
            moved.append(f"{name.replace('used_inodes', 'scratch used inodes')} {b - a:+,.0f}")
    if not moved:
        return None
    return f"{', '.join(moved)} in the last {last_t - float(start['mono']):.0f} s of samples"


def last_phase(run_dir: pathlib.Path) -> str | None:
    """The last phase the reproducer announced (phases.tsv), if any."""
    try:
        lines = (run_dir / "phases.tsv").read_text().strip().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return lines[-1].split("\t")[-1] if lines else None


def slow_not_hung(run_dir: pathlib.Path, timeout: float, reason: str, lockups: list[str],
                  load: str | None) -> tuple[str, str] | None:
    """("error", one line) when a timed-out run was still making progress and the console
    shows no lockup or hung task; None when the timeout is a real HUNG."""
    if lockups:
        return None
    moved = still_progressing(run_dir, timeout)
    if not moved:
        return None
    phase = last_phase(run_dir)
    where = f" in phase {phase}" if phase else ""
    host = f"; host load {load}" if load else ""
    return ("error", f"timeout, not a hang: the workload was still making progress{where} at "
                     f"{timeout:.0f}s ({moved}{host}); the machine ran too slowly for this timeout: "
                     f"rerun with --set timeout=<more seconds> ({reason})")
