"""xfs-ail-storm metrics: checkpoint sizes from xfs_ail_insert grouped by new_lsn."""
import math
import re

import numpy as np

MIB = 1 << 20
NEW_RULE_CAP = 32 * MIB      # 16 x 2 MB of in-flight log IO (108a42358a05), 32 MiB in 6.1
BBSIZE = 512


def log_bytes(xfs_info: str) -> int:
    m = re.search(r"^log\s*=.*?bsize=(\d+)\s+blocks=(\d+)", xfs_info, re.M)
    if not m:
        raise ValueError("xfs_info.txt has no log line")
    return int(m.group(1)) * int(m.group(2))


def checkpoint_sizes(new_lsn: np.ndarray):
    """Objects per checkpoint, and each checkpoint's log bytes where a later one shows its end."""
    lsns, counts = np.unique(new_lsn.astype(np.uint64), return_counts=True)
    cycles, blocks = lsns >> np.uint64(32), lsns & np.uint64(0xFFFFFFFF)
    log_sizes = np.full(len(lsns), np.nan)
    same_cycle = cycles[1:] == cycles[:-1]
    diff = (blocks[1:].astype(np.int64) - blocks[:-1].astype(np.int64)) * BBSIZE
    log_sizes[:-1] = np.where(same_cycle, diff, np.nan)
    return lsns, counts, log_sizes


def metrics(run) -> dict:
    logb = log_bytes(run.text("xfs_info.txt"))
    old_limit = logb / 8
    new_limit = min(logb / 8, NEW_RULE_CAP)
    trace = run.trace()
    cols = trace.columns("xfs:xfs_ail_insert", ["new_lsn"])
    lost = trace.lost_events()
    counts_by_event = trace.counts()
    out = {
        "ail_inserts": len(cols["new_lsn"]),
        "log_mib": logb / MIB, "cil_limit_old_mib": old_limit / MIB, "cil_limit_new_mib": new_limit / MIB,
        "log_forces": counts_by_event.get("xfs:xfs_log_force", 0),
        "trace_lost_events": lost.get("total", 0),
    }
    ph = run.phases()
    out["create_seconds"] = ph["sync"] - ph["create"] if "sync" in ph and "create" in ph else math.nan
    if len(cols["new_lsn"]) == 0:
        out.update(checkpoints=0, max_checkpoint_objects=0, p99_checkpoint_objects=0, max_burst_seconds=0,
                   max_checkpoint_log_mib=math.nan, max_checkpoint_vs_fixed_limit=math.nan)
        return out
    lsns, counts, sizes = checkpoint_sizes(cols["new_lsn"])
    big = int(np.argmax(counts))
    ts = cols["ts"][cols["new_lsn"].astype(np.uint64) == lsns[big]]
    known = sizes[~np.isnan(sizes)]
    max_log = float(known.max()) if len(known) else math.nan
    out.update(
        checkpoints=len(lsns), max_checkpoint_objects=int(counts[big]),
        p99_checkpoint_objects=float(np.percentile(counts, 99)),
        max_burst_seconds=float(ts.max() - ts.min()) / 1e9,
        max_checkpoint_log_mib=max_log / MIB, max_checkpoint_vs_fixed_limit=max_log / new_limit,
    )
    return out
