"""unlink-dentry-growth metrics: the dcache and the unlink rate during the parallel rm -rf.

One clock: phases.tsv, samples.tsv and progress.tsv carry the wall clock; the trace
(trace-cmd -C mono) is put on it with the sampler's mono column.
"""
import math

import numpy as np

from krig.rundir import load_samples

# A 5 s window keeps ~90% of the amplitude of the report's ~20 s oscillation and averages
# out the noise of a TCG guest.
SMOOTH_SECONDS = 5.0


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


def unlink_rates(t, done, interval):
    """Rate of a cumulative count over a SMOOTH_SECONDS window: (window end times, rates)."""
    w = max(1, int(round(SMOOTH_SECONDS / interval)))
    if len(t) <= w:
        return np.array([]), np.array([])
    return t[w:], (done[w:] - done[:-w]) / (t[w:] - t[:-w])


def rate_stats(progress, t0, dur, interval):
    """Peak (p90), trough (p10), trough/peak ratio and the series of the smoothed unlink rate,
    middle 80% of the run. The ratio is taken around a linear trend (the rate drifts as the
    parallel rm's finish one by one): it measures oscillation, not drift."""
    tt, rate = unlink_rates(progress["time"] - t0, progress["count"], interval)
    mid = (tt >= 0.1 * dur) & (tt <= 0.9 * dur)
    tt, rate = tt[mid], rate[mid]
    if len(tt) < 3:
        return math.nan, math.nan, math.nan, tt, rate
    trend = np.polyval(np.polyfit(tt, rate, 1), tt)
    if (trend <= 0).any():
        return math.nan, math.nan, math.nan, tt, rate
    rel = rate / trend
    return (float(np.percentile(rate, 90)), float(np.percentile(rate, 10)),
            float(np.percentile(rel, 10) / np.percentile(rel, 90)), tt, rate)


def log_forces_in(run, t0, t1) -> float:
    """xfs_log_force events between the unlink and unlinked phase marks (not create, umount...)."""
    if not run.path("trace.dat").exists():
        return math.nan
    ts = run.trace().columns("xfs:xfs_log_force")["ts"]
    wall = run.trace_wall_times(ts)
    return float(((wall >= t0) & (wall <= t1)).sum())


def metrics(run) -> dict:
    s, ph, p = run.samples(), run.phases(), run.params
    files = p["top_dirs"] * p["subdirs"] * p["files_per_dir"]
    t0, t1 = ph["unlink"], ph["unlinked"]
    dur = t1 - t0
    progress = load_samples(run.require("progress.tsv"))
    counted = float(progress["count"][-1])
    peak, trough, ratio, tt, rate = rate_stats(progress, t0, dur, p["sample_interval"])

    before = s["time"] < t0
    during = (s["time"] >= t0) & (s["time"] <= t1 + p["sample_interval"])
    # after the last rm, before run.sh unmounts (an unmount prunes everything)
    after = (s["time"] > t1) & (s["time"] <= ph.get("done", s["time"][-1]))
    neg_ok = run.nr_negative_available()
    nan = math.nan
    if neg_ok:
        neg = s["nr_negative"]
        base_neg = float(neg[before][np.isfinite(neg[before])][-1]) if np.isfinite(neg[before]).any() else nan
        peak_neg = max(float(np.nanmax(neg[during])) - base_neg, 0.0) if np.isfinite(neg[during]).any() else nan
        aft = neg[after][np.isfinite(neg[after])]
        end_neg = max(float(aft[-1]) - base_neg, 0.0) if len(aft) else nan
    else:
        peak_neg = end_neg = nan
    slab = s["dentry_slab_bytes"][during]
    peak_slab = float(np.nanmax(slab)) if np.isfinite(slab).any() else nan
    forces = log_forces_in(run, t0, t1)
    return {
        "files": files,
        "files_unlinked_counted": counted,
        "unlinks_counted_fraction": counted / files,
        "nr_negative_reported": 1.0 if neg_ok else 0.0,
        "peak_nr_dentry": float(np.nanmax(s["nr_dentry"][during])) if during.any() else nan,
        "peak_nr_negative": peak_neg,
        "end_nr_negative": end_neg,
        "peak_negative_vs_inflight": peak_neg / (p["top_dirs"] * p["files_per_dir"]),
        "peak_negative_fraction": peak_neg / files,
        "peak_dentry_slab_bytes": peak_slab,
        "peak_dentry_slab_pct_ram": 100.0 * peak_slab / run.mem_total_bytes,
        "unlink_rate_mean": counted / dur if dur > 0 else nan,
        "unlink_rate_peak": peak, "unlink_rate_trough": trough,
        "trough_peak_ratio": ratio,
        "oscillation_period_s": oscillation_period(tt, rate) if len(tt) else 0.0,
        "log_forces_unlink_phase": forces,
        "log_forces_per_1000_unlinks": 1000.0 * forces / counted if counted > 0 else nan,
        "unlink_seconds": dur,
    }
