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
    """A checkpoint is every xfs_ail_insert and xfs_ail_move sharing its new_lsn: items already
    in the AIL are moved, not inserted, and a checkpoint of moves only still ends the one
    before it in log space."""
    logb = log_bytes(run.text("xfs_info.txt"))
    old_limit = logb / 8
    new_limit = min(logb / 8, NEW_RULE_CAP)
    trace = run.trace()
    ins = trace.columns("xfs:xfs_ail_insert", ["new_lsn"])
    mov = trace.columns("xfs:xfs_ail_move", ["new_lsn"])
    lsn = np.concatenate([ins["new_lsn"].astype(np.uint64), mov["new_lsn"].astype(np.uint64)])
    ts = np.concatenate([ins["ts"], mov["ts"]])
    counts_by_event = trace.counts()
    out = {
        "ail_inserts": len(ins["new_lsn"]), "ail_moves": len(mov["new_lsn"]),
        "log_mib": logb / MIB, "cil_limit_old_mib": old_limit / MIB, "cil_limit_new_mib": new_limit / MIB,
        "log_forces": counts_by_event.get("xfs:xfs_log_force", 0),
        "trace_lost_events": trace.lost_events()["total"],
    }
    ph = run.phases()
    out["create_seconds"] = ph["sync"] - ph["create"] if "sync" in ph and "create" in ph else math.nan
    # No insert at all: the kernel has no xfs tracepoints or the trace is empty: not measured.
    out["xfs_ail_events"] = float(len(lsn))
    if len(ins["new_lsn"]) == 0:
        out.update(checkpoints=0, max_checkpoint_objects=math.nan, max_checkpoint_inserts=math.nan,
                   p99_checkpoint_objects=math.nan, max_burst_seconds=math.nan,
                   max_checkpoint_log_mib=math.nan, max_checkpoint_vs_fixed_limit=math.nan,
                   objects_per_mib=math.nan)
        return out
    lsns, counts, sizes = checkpoint_sizes(lsn)
    big = int(np.argmax(counts))
    in_big = lsn == lsns[big]
    known = ~np.isnan(sizes)
    # The largest checkpoint's own log space must be known (a later checkpoint ends it):
    # otherwise the judged maximum could skip exactly the checkpoint that matters.
    max_log = float(sizes[known].max()) if known.any() and known[big] else math.nan
    out.update(
        checkpoints=len(lsns), max_checkpoint_objects=int(counts[big]),
        max_checkpoint_inserts=int((ins["new_lsn"].astype(np.uint64) == lsns[big]).sum()),
        p99_checkpoint_objects=float(np.percentile(counts, 99)),
        max_burst_seconds=float(ts[in_big].max() - ts[in_big].min()) / 1e9,
        max_checkpoint_log_mib=max_log / MIB, max_checkpoint_vs_fixed_limit=max_log / new_limit,
        objects_per_mib=float(counts[known].sum() / (sizes[known].sum() / MIB)) if known.any() else math.nan,
    )
    return out
