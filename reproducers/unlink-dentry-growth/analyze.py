"""unlink-dentry-growth metrics: the dcache and the unlink rate during the parallel rm -rf."""
import numpy as np

SMOOTH_SECONDS = 2.0


def oscillation_period(t, rate) -> float:
    """Lag of the strongest autocorrelation peak (> 0.3) of the detrended rate; 0 if none."""
    if len(rate) < 8:
        return 0.0
    x = rate - np.polyval(np.polyfit(t, rate, 1), t)
    if not np.any(x):
        return 0.0
    ac = np.correlate(x, x, mode="full")[len(x) - 1:]
    ac = ac / ac[0]
    dt = float(np.median(np.diff(t)))
    for lag in range(2, len(ac) // 2):
        if ac[lag] > 0.3 and ac[lag] >= ac[lag - 1] and ac[lag] >= ac[lag + 1]:
            return lag * dt
    return 0.0


def unlink_rates(t, used, interval):
    w = max(1, int(round(SMOOTH_SECONDS / interval)))
    if len(t) <= w:
        return np.array([]), np.array([])
    rate = (used[:-w] - used[w:]) / (t[w:] - t[:-w])
    return t[w:], rate


def metrics(run) -> dict:
    s, ph, p = run.samples(), run.phases(), run.params
    files = p["top_dirs"] * p["subdirs"] * p["files_per_dir"]
    t0, t1 = ph["unlink"], ph["unlinked"]
    before = s["time"] < t0
    base_neg = s["nr_negative"][before][-1] if before.any() else s["nr_negative"][0]
    during = (s["time"] >= t0) & (s["time"] <= t1 + p["sample_interval"])
    # after the last rm, before run.sh unmounts (an unmount prunes everything)
    after = (s["time"] > t1) & (s["time"] <= ph.get("done", s["time"][-1]))
    neg = s["nr_negative"][during]
    slab = s["dentry_slab_bytes"][during]
    used = s["scratch_files"] - s["scratch_ffree"]
    tt, rate = unlink_rates(s["time"][during] - t0, used[during], p["sample_interval"])
    dur = t1 - t0
    mean = files / dur if dur > 0 else float("nan")
    mid = (tt >= 0.1 * dur) & (tt <= 0.9 * dur)
    if mid.sum() >= 3:
        peak, trough = float(np.percentile(rate[mid], 90)), float(np.percentile(rate[mid], 10))
    else:
        peak = trough = mean
    peak_neg = float(max(neg.max() - base_neg, 0)) if len(neg) else float("nan")
    end_neg = float(max(s["nr_negative"][after][-1] - base_neg, 0)) if after.any() else float("nan")
    forces = 0
    if run.path("trace.dat").exists():
        forces = run.trace().counts().get("xfs:xfs_log_force", 0)
    return {
        "files": files,
        "peak_nr_dentry": float(s["nr_dentry"][during].max()),
        "peak_nr_negative": peak_neg,
        "end_nr_negative": end_neg,
        "peak_negative_vs_inflight": peak_neg / (p["top_dirs"] * p["files_per_dir"]),
        "peak_negative_fraction": peak_neg / files,
        "peak_dentry_slab_bytes": float(slab.max()),
        "peak_dentry_slab_pct_ram": 100.0 * float(slab.max()) / run.mem_total_bytes,
        "unlink_rate_mean": mean, "unlink_rate_peak": peak, "unlink_rate_trough": trough,
        "trough_peak_ratio": trough / peak if peak > 0 else float("nan"),
        "oscillation_period_s": oscillation_period(tt[mid], rate[mid]) if mid.sum() else 0.0,
        "log_forces_per_1000_unlinks": 1000.0 * forces / files,
        "unlink_seconds": dur,
    }
