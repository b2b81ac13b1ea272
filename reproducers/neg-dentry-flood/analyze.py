"""neg-dentry-flood metrics: the dcache over time, normalised by RAM."""
import math
import re

import numpy as np


def first_crossing(t, y, level):
    idx = np.nonzero(y >= level)[0]
    return float(t[idx[0]]) if len(idx) else None


def metrics(run) -> dict:
    s = run.samples()
    ph = run.phases()
    ram = run.mem_total_bytes
    t0, t1 = ph["flood"], ph.get("flooded", s["time"][-1])
    during = (s["time"] >= t0) & (s["time"] <= t1)
    if during.sum() < 4:
        raise ValueError(f"only {int(during.sum())} samples during the flood; lower sample_interval")
    t = s["time"][during] - t0
    neg = s["nr_negative"][during]
    base_slab = s["dentry_slab_bytes"][s["time"] < t0]
    base_slab = base_slab[-1] if len(base_slab) else s["dentry_slab_bytes"][0]
    slab = s["dentry_slab_bytes"][during]
    pct = 100.0 * slab / ram
    q = t >= 0.75 * t[-1]
    at_q = neg[q][0]
    ops = 0.0
    for gen in sorted(run.dir.glob("gen-*.txt")):
        m = re.search(r"rate=(\d+)", gen.read_text())
        ops += float(m.group(1)) if m else 0.0
    inotify_us = float(run.text("inotify-us.txt").strip() or "nan")
    console = run.path("console.log").read_text(errors="replace") if run.path("console.log").exists() else ""
    return {
        "peak_nr_negative": float(neg.max()), "end_nr_negative": float(neg[-1]),
        "peak_dentry_bytes": float(slab.max()), "end_dentry_bytes": float(slab[-1]),
        "peak_dentry_pct_ram": float(pct.max()), "end_dentry_pct_ram": float(pct[-1]),
        "last_quarter_growth_pct": 100.0 * (neg[-1] - at_q) / neg[-1] if neg[-1] > 0 else 0.0,
        "time_to_1pct_ram_s": first_crossing(t, pct, 1.0),
        "time_to_5pct_ram_s": first_crossing(t, pct, 5.0),
        "time_to_10pct_ram_s": first_crossing(t, pct, 10.0),
        "generator_ops_per_s": ops,
        "mem_available_min_pct": float(100.0 * s["mem_available_kb"][during].min() * 1024 / ram),
        "inotify_add_watch_ms": inotify_us / 1000.0 if not math.isnan(inotify_us) else math.nan,
        "soft_lockups": float(len(re.findall(r"BUG: soft lockup", console))),
        "dentry_slab_before_bytes": float(base_slab),
    }
