"""neg-dentry-flood metrics: negative dentries over time, their memory normalised by RAM.

Memory is negatives only, as in the report (10.6 GB / 55.3M = 192 bytes each): the
increase of nr_negative over its pre-flood level x the dentry object size from
/proc/slabinfo (names under 32 bytes, as the generators' are, live inside the dentry).
Why and when the flood stopped (RAM limit, plateau, name cap, bound, time limit, the host's
budget of a sparse guest) comes from
negflood's own report, flood.txt. Whether the negatives are bounded follows from their
retention there: the negatives gained per new name the generators made, over the last
quarter of the names made (a count the host's speed does not move). A dcache that settled
keeps almost none of the new names (bounded, at the level it held); one that keeps at least
half of them past the RAM limit is unbounded; between, or still below the limit, not told.
"""
import math
import re
import statistics

import numpy as np

from krig import hashsize
from krig.verdict import WARN_PATTERNS

LIMIT_PCT_RAM = 5.0   # the peak_negative_pct_ram threshold; growth is judged against it
# metric stop_reason
STOP_REASONS = {"ram_limit": 1.0, "plateau": 2.0, "name_cap": 3.0, "bound": 4.0, "time_limit": 5.0,
                "host_budget": 6.0}
# Retention (negatives gained per new name over the last quarter of the names made) at or
# above which a flood past the limit is unbounded. An unbounded dcache keeps ~every new name
# (0.93-1.0 measured here); a bounded one below plateau_retention_pct (5%) has settled; a
# per-bucket bound between the two is still approaching its level (docs/negative-dentry-flood.md).
UNBOUNDED_RETENTION = 0.5


def flood_report(run) -> dict:
    """negflood's key=value lines (flood.txt), numbers as floats, stop_reason as its code."""
    out = {}
    for tok in run.text("flood.txt").split():
        k, eq, v = tok.partition("=")
        if eq:
            out[k] = STOP_REASONS.get(v, math.nan) if k == "stop_reason" else float(v)
    for key in ("stop_reason", "retention"):
        if key not in out:
            raise ValueError(f"flood.txt has no {key}: negflood did not finish")
    return out


def _value(metrics: dict, name: str):
    return (metrics.get(name) or {}).get("value")


def outcome(values: dict) -> str | None:
    """Where the negatives went, in words (values: metric name -> value), or None when there
    is nothing to say (the flood stopped at the limit itself)."""
    side = "above" if values.get("limit_crossed") == 1 else "below"
    kept = values.get("retention")
    kept_s = f"{100 * kept:.3g}% of the last quarter's new names kept" if kept is not None else None
    if values.get("bounded") == 1 and values.get("settled_negative_pct_ram") is not None:
        return (f"negatives settled at {values['settled_negative_pct_ram']:.3g}% of RAM, "
                f"{values['settled_nr_negative']:,.0f} dentries: bounded, {side} the {LIMIT_PCT_RAM:g}% limit")
    if values.get("bounded") == 0 and values.get("end_negative_pct_ram") is not None:
        return (f"negatives still growing at {values['end_negative_pct_ram']:.3g}% of RAM, "
                f"{values['end_nr_negative']:,.0f} dentries, {kept_s}, when the flood stopped: unbounded")
    if values.get("stop_reason") != STOP_REASONS["ram_limit"] and values.get("end_negative_pct_ram") is not None:
        return (f"negatives at {values['end_negative_pct_ram']:.3g}% of RAM, {side} the {LIMIT_PCT_RAM:g}% "
                f"limit, {kept_s or 'too few new names to measure retention'}, when the flood stopped: "
                "not told whether bounded")
    return None


def notes(metrics: dict) -> list[str]:
    """Said next to the verdict: where the negatives settled or that they were still growing,
    and a flood ended by its time cap."""
    values = {k: _value(metrics, k) for k in metrics}
    out = []
    where = "past the RAM limit" if values.get("limit_crossed") == 1 else "before the RAM limit"
    if values.get("name_cap_hit") == 1 and values.get("name_cap") is not None:
        out.append(f"the flood reached its cap of {values['name_cap']:,.0f} new names {where}, "
                   "before its bound or a plateau")
    if values.get("host_budget_hit") == 1:
        budget = values.get("host_budget_mib")
        out.append(f"the host's memory ended the flood {where}"
                   + (f" (it could back {budget:,.0f} MiB more of the guest's memory when the flood began)"
                      if budget is not None else "") + ": the host was short, not the kernel; not told whether bounded")
    if values.get("time_limit_hit") == 1 and values.get("flood_seconds") is not None:
        out.append(f"the flood hit its time limit (max_duration) at {values['flood_seconds']:.0f} s {where}, "
                   f"after {values.get('new_names') or 0:,.0f} new names")
    said = outcome(values)
    return out + ([said] if said else [])


def side_summary(runs: list[dict]) -> str | None:
    """One line for `krig compare` about one side (runs: each judged run's metric values):
    where the negatives settled, or how far they had grown still growing, in how many runs."""
    def spread(rows, name, what):
        v = [r[name] for r in rows if r.get(name) is not None]
        if not v:
            return what
        lo, hi = min(v), max(v)
        return (f"{what} at {statistics.median(v):.3g}% of RAM" +
                (f" ({lo:.3g}-{hi:.3g})" if len(v) > 1 and f"{lo:.3g}" != f"{hi:.3g}" else ""))
    bounded = [r for r in runs if r.get("bounded") == 1]
    growing = [r for r in runs if r.get("bounded") == 0]
    parts = []
    if bounded:
        parts.append(f"{spread(bounded, 'settled_negative_pct_ram', 'settled')}: bounded in "
                     f"{len(bounded)}/{len(runs)} runs")
    if growing:
        parts.append(f"{spread(growing, 'end_negative_pct_ram', 'still growing')} when the flood stopped: "
                     f"unbounded in {len(growing)}/{len(runs)} runs")
    rest = len(runs) - len(bounded) - len(growing)
    if rest:
        parts.append(f"not told whether bounded in {rest}/{len(runs)}" + (" runs" if len(parts) == 0 else ""))
    return "negatives " + "; ".join(parts) if runs else None


# The machines the seed report names (RAM, CPUs), and a small one, that a run is projected to.
PROJECT_TO = ((4 << 30, 4), (256 << 30, 24), (3 << 40, 384))


def _size(ram: int) -> str:
    return f"{ram / (1 << 40):g} TB" if ram >= 1 << 40 else f"{ram / (1 << 30):g} GB"


def projection(values: dict, machine, extra: tuple = ()) -> dict | None:
    """From this run to machines of other sizes, said as a projection, never as a measurement.

    Bounded: the settled level as negatives per dentry hash bucket (the buckets the kernel
    printed at boot), times the buckets 6.1's sizing rule gives each size: what a bound *per
    bucket* would hold there. Unbounded: the rate of new names per CPU, and the time an
    unbounded dcache takes to 5% of RAM at that rate on each size's CPUs. extra: more
    (ram, cpus) to project to (cpus None: this run's). machine: the machine's facts as the run
    recorded them (krig.record_machine.Machine). None when the run tells neither."""
    sizes = sorted(set(PROJECT_TO) | {(ram, cpus or machine.cpus) for ram, cpus in extra})
    objsize = values.get("dentry_objsize_bytes") or hashsize.DENTRY_BYTES
    buckets, ram_here = machine.dentry_hash_entries, machine.mem_total_bytes
    if values.get("bounded") == 1 and values.get("settled_nr_negative") is not None and buckets:
        per = values["settled_nr_negative"] / buckets
        rows = []
        for ram, _ in sizes:
            n = per * hashsize.dentry_entries(ram)
            rows.append({"ram_bytes": ram, "machine": _size(ram), "dentry_buckets": hashsize.dentry_entries(ram),
                         "negatives": n, "bytes": n * objsize, "pct_ram": 100 * n * objsize / ram})
        return {"kind": "per_bucket", "measured_per_bucket": per, "measured_buckets": buckets,
                "measured_negatives": values["settled_nr_negative"], "measured_ram_bytes": ram_here, "rows": rows,
                "basis": (f"projected from the level this run settled at, {per:.3g} negatives per dentry hash "
                          f"bucket ({values['settled_nr_negative']:,.0f} over {buckets:,} buckets), and Linux 6.1's "
                          "hash table sizing rule: what a bound per hash bucket holds on each machine. A "
                          "projection, not a measurement; a bound that is a share of RAM would stay at "
                          f"{values.get('settled_negative_pct_ram', math.nan):.3g}% of RAM on every size "
                          "(two runs at different bucket densities, like_memory, tell which it is)")}
    rate = values.get("new_names_per_s_per_cpu")
    if values.get("bounded") == 0 and rate and math.isfinite(rate) and rate > 0:
        rows = []
        for ram, cpus in sizes:
            n = LIMIT_PCT_RAM / 100 * ram / objsize
            rows.append({"ram_bytes": ram, "machine": _size(ram), "cpus": cpus, "negatives": n,
                         "bytes": n * objsize, "pct_ram": LIMIT_PCT_RAM,
                         "seconds_to_limit": n / (rate * cpus) if cpus else math.nan})
        return {"kind": "unbounded", "measured_rate_per_cpu": rate, "rows": rows,
                "basis": (f"projected from this run's {rate:,.0f} new names per second per CPU, each one negative "
                          f"dentry of {objsize:.0f} bytes on an unbounded dcache: the time to {LIMIT_PCT_RAM:g}% of "
                          "RAM with that many CPUs at that rate. A projection, not a measurement; an emulated "
                          "CPU is slower than a real one, so a real machine gets there sooner")}
    return None


def bounded(fl: dict, limit_crossed) -> float:
    """1 settled: retention at most plateau_retention_pct (what a plateau stop saw, whatever
    stopped the flood); 0 unbounded: past the limit, on towards the bound, still keeping at
    least UNBOUNDED_RETENTION of the new names; NaN not told (in between, still below the
    limit, stopped at the limit itself or by the host's budget, or no retention measured)."""
    kept = fl.get("retention", -1.0)
    if kept < 0 or fl["stop_reason"] in (STOP_REASONS["ram_limit"], STOP_REASONS["host_budget"]):
        return math.nan
    if kept <= fl["plateau_retention_pct"] / 100.0:
        return 1.0
    return 0.0 if kept >= UNBOUNDED_RETENTION and limit_crossed == 1 else math.nan


def first_crossing(t, y, level):
    idx = np.nonzero(y >= level)[0]
    return float(t[idx[0]]) if len(idx) else None


def last_finite(x, default=math.nan):
    x = x[np.isfinite(x)]
    return float(x[-1]) if len(x) else default


# What the sampled curve gives: the dentry slab and MemAvailable over the flood, and from
# nr_negative the negatives' own curve; the rest comes from negflood's report (flood.txt), the
# console and the first inotify watch.
SLAB_METRICS = ("dentry_objsize_bytes", "peak_dentry_bytes", "end_dentry_bytes", "peak_dentry_pct_ram",
                "dentry_slab_before_bytes", "mem_available_min_pct")
NEGATIVE_METRICS = ("peak_nr_negative", "end_nr_negative", "peak_negative_bytes", "peak_negative_pct_ram",
                    "end_negative_pct_ram", "last_quarter_growth_pct", "last_quarter_growth_pct_of_limit",
                    "time_to_1pct_ram_s", "time_to_5pct_ram_s", "time_to_10pct_ram_s",
                    "settled_nr_negative", "settled_negative_pct_ram", "peak_per_bucket", "settled_per_bucket")


def report_metrics(run, fl: dict) -> dict:
    """The metrics of the flood's own report (why and when it stopped, its rates, whether the
    negatives were bounded), the console's and the first inotify watch's: none needs a sample."""
    ram = run.mem_total_bytes
    ncpu = run.record.manifest.machine_said.cpus or math.nan
    inotify_us = float(run.text("inotify-us.txt").strip() or "nan")
    console = run.text("console.log")
    out = {
        "nr_negative_reported": 1.0 if run.nr_negative_available() else 0.0,
        "generator_ops_per_s": fl["rate"],
        "stop_reason": fl["stop_reason"], "name_cap_hit": float(fl["stop_reason"] == STOP_REASONS["name_cap"]),
        "time_limit_hit": float(fl["stop_reason"] == STOP_REASONS["time_limit"]),
        "host_budget_hit": float(fl["stop_reason"] == STOP_REASONS["host_budget"]),
        "host_budget_mib": (fl["host_budget_bytes"] / (1 << 20) if fl.get("host_budget_bytes", -1) >= 0
                            else math.nan),
        "name_cap": fl["name_cap"], "new_names": fl["new_names"],
        "retention": fl["retention"] if fl["retention"] >= 0 else math.nan,
        "retention_window_names": fl["retention_names"] if fl["retention"] >= 0 else math.nan,
        "flood_seconds": fl["seconds"], "generators": fl["generators"],
        "new_names_per_s": fl["new_names_per_s"] if fl["new_names_per_s"] >= 0 else math.nan,
        "new_names_per_s_per_cpu": (fl["new_names_per_s"] / ncpu if fl["new_names_per_s"] >= 0 else math.nan),
        "unbounded_time_to_limit_s": (fl["limit_bytes"] / (fl["new_names_per_s"] * fl["dentry_objsize"])
                                      if fl["new_names_per_s"] > 0 else math.nan),
        "inotify_add_watch_ms": inotify_us / 1000.0 if not math.isnan(inotify_us) else math.nan,
        "soft_lockups": float(len(re.findall(r"BUG: soft lockup", console))),
        "oom_kill_lines": float(len(re.findall(WARN_PATTERNS["oom_kill"], console))),
        "limit_crossed": fl.get("limit_crossed", math.nan),
        "settle_bound_pct_ram": 100.0 * fl["bound_bytes"] / ram if "bound_bytes" in fl else math.nan,
    }
    out["bounded"] = bounded(fl, out["limit_crossed"])
    # the outer limit in seconds ended a flood that had neither crossed the RAM limit nor settled:
    # the host was too slow for the preset to tell anything about the kernel
    out["out_of_time_untold"] = float(out["time_limit_hit"] == 1 and out["limit_crossed"] != 1
                                      and out["bounded"] != 1)
    # the host's memory (a sparse guest's budget) ended the flood below the RAM limit
    out["host_budget_untold"] = float(out["host_budget_hit"] == 1 and out["limit_crossed"] != 1)
    return out


def metrics(run) -> dict:
    s = run.samples()
    ph = run.phases()
    ram = run.mem_total_bytes
    t0, t1 = ph["flood"], ph.get("flooded", s["time"][-1])
    # the flood, and the first sample after it: the state negflood stopped at
    after = np.nonzero(s["time"] > t1)[0]
    during = (s["time"] >= t0) & (s["time"] <= (s["time"][after[0]] if len(after) else t1))
    fl = flood_report(run)
    out = report_metrics(run, fl)
    if during.sum() < 3:
        if out["host_budget_untold"] == 1 or out["out_of_time_untold"] == 1:
            # the host's budget or the time limit ended the flood below the limit before the
            # sampler saw it (a budget of 0 stops it at once, so does a very short max_duration;
            # a loaded host samples late): no curve, and no verdict on the kernel either way (both
            # are instrument checks: ERROR naming the host's budget or max_duration)
            return {**out, **{n: math.nan for n in SLAB_METRICS + NEGATIVE_METRICS}}
        raise ValueError(f"only {int(during.sum())} samples during the flood; lower sample_interval")
    # (that sample stands for the moment the flood stopped: the generators made nothing after)
    t = np.minimum(s["time"][during], t1) - t0
    before = s["time"] < t0
    objsize = float(np.nanmedian(s["dentry_objsize"])) if np.isfinite(s["dentry_objsize"]).any() else math.nan
    base_slab = last_finite(s["dentry_slab_bytes"][before], float(s["dentry_slab_bytes"][0]))
    slab = s["dentry_slab_bytes"][during]
    out.update({
        "dentry_objsize_bytes": objsize,
        "peak_dentry_bytes": float(np.nanmax(slab)), "end_dentry_bytes": last_finite(slab),
        "peak_dentry_pct_ram": float(100.0 * np.nanmax(slab) / ram),
        "dentry_slab_before_bytes": float(base_slab),
        "mem_available_min_pct": float(100.0 * np.nanmin(s["mem_available_kb"][during]) * 1024 / ram),
    })
    if not out["nr_negative_reported"]:
        return {**out, **{n: math.nan for n in NEGATIVE_METRICS}}
    buckets = run.record.manifest.machine_said.dentry_hash_entries
    base_neg = last_finite(s["nr_negative"][before], float(np.nanmin(s["nr_negative"])))
    neg = s["nr_negative"][during]
    ok = np.isfinite(neg)
    t, neg = t[ok], neg[ok] - base_neg
    neg_pct = 100.0 * neg * objsize / ram
    # growth over the last quarter of the new names made (negflood's retention window);
    # a flood that made no new names (samename generators only): over the last quarter of its time
    growth_q = (fl["retention"] * fl["retention_names"] if fl["retention"] >= 0
                else neg[-1] - neg[t >= 0.75 * t[-1]][0])
    return {**out, **dict(zip(NEGATIVE_METRICS, (
        float(neg.max()), float(neg[-1]), float(neg.max() * objsize), float(neg_pct.max()),
        float(neg_pct[-1]),
        100.0 * growth_q / neg[-1] if neg[-1] > 0 else 0.0,
        # growth over the last quarter as a share of the RAM limit: ~0 for a bounded cache
        # that has levelled off; an unbounded one that levelled off under memory pressure
        # has passed the limit itself
        100.0 * (100.0 * growth_q * objsize / ram) / LIMIT_PCT_RAM,
        first_crossing(t, neg_pct, 1.0), first_crossing(t, neg_pct, 5.0), first_crossing(t, neg_pct, 10.0),
        # where a bounded flood settled: the level it held at the end
        float(neg[-1]) if out["bounded"] == 1 else math.nan,
        float(neg_pct[-1]) if out["bounded"] == 1 else math.nan,
        float(neg.max()) / buckets if buckets else math.nan,
        float(neg[-1]) / buckets if buckets and out["bounded"] == 1 else math.nan)))}
