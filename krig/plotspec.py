"""The `[[plots]]` and `[session]` tables of repro.toml: what a report draws.

A plot is series against time (seconds since the first sample), with phase
marks, horizontal lines taken from the reproducer's own thresholds or
metrics, and shaded spans. A series comes from a samples.tsv column (or the
difference of two), or from a trace event grouped by a field (one bar per
group, at the group's first event). Every problem is one line naming the
field, like the rest of repro.toml.

    [[plots]]
    name = "negatives"                 # plot-negatives.png and .csv
    title = "..."
    ylabel = "dentries"
    y2label = "unlinks/s"              # optional right axis
    phases = ["unlink", "unlinked"]    # vertical marks (names in phases.tsv); true = all
    [[plots.series]]
    column = "nr_negative"             # or: event = "sys:ev", group_by = "field"
    minus = "..."                      # optional: column - minus
    during = ["unlink", "unlinked"]    # optional: only the samples between two phases
    transform = "value"                # value | rate | -rate | pct_ram
    scale = 1.0
    label = "nr_negative"
    axis = "left"                      # left | right
    mark_max = "{metric:.1f} MiB"      # event series: annotate the largest group (metrics.json values)
    mark_max_metric = "metric"         # event series: a point at the largest group, on the right axis
    [[plots.lines]]
    threshold = "metric"               # its min/max; or metric = "name" (value from metrics.json)
    times_params = ["p1", "p2"]        # multiply by parameters
    times_metric = "name"              # multiply by a metric's value
    label = "..."
    axis = "left"
    [[plots.shade]]
    between = ["flood", "flooded"]     # phases
    from = 0.75                        # fraction of that span
    to = 1.0
    label = "last quarter"

    [session]                          # trace.kshark.json: where KernelShark opens
    window = "largest_group"           # or "steepest_rise"
    event = "xfs:xfs_ail_insert"       # largest_group: the burst of the largest group
    group_by = "new_lsn"
    column = "nr_negative"             # steepest_rise: samples column
    seconds = 4.0                      # steepest_rise: width of the window
"""
import re

from .config import optional, reject_unknown, require
from .errors import UsageError

TRANSFORMS = ("value", "rate", "-rate", "pct_ram")
AXES = ("left", "right")
WINDOWS = ("largest_group", "steepest_rise")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
EVENT_RE = re.compile(r"^[a-z0-9_]+:[a-z0-9_]+$")


def _axis(t: dict, where: str) -> str:
    axis = optional(t, "axis", str, where, "left")
    if axis not in AXES:
        raise UsageError(f"{where}.axis: {axis!r} is not one of {', '.join(AXES)}")
    return axis


def _table_list(data: dict, key: str, where: str) -> list:
    items = optional(data, key, list, where, [])
    for i, t in enumerate(items):
        if not isinstance(t, dict):
            raise UsageError(f"{where}.{key}[{i}]: expected a table")
    return items


def _series(s: dict, where: str, events: list, metrics: dict) -> dict:
    reject_unknown(s, {"column", "minus", "transform", "scale", "label", "axis", "event", "group_by",
                       "mark_max", "mark_max_metric", "during"}, where)
    if ("column" in s) == ("event" in s):
        raise UsageError(f"{where}: needs exactly one of 'column' (samples.tsv) or 'event' (trace)")
    out = {"label": optional(s, "label", str, where, ""), "axis": _axis(s, where),
           "scale": float(optional(s, "scale", (int, float), where, 1.0))}
    if "column" in s:
        if "mark_max" in s or "mark_max_metric" in s or "group_by" in s:
            raise UsageError(f"{where}: 'group_by' and 'mark_max*' apply to an event, not to a column")
        during = optional(s, "during", list, where)
        if during is not None and (len(during) != 2 or not all(isinstance(x, str) for x in during)):
            raise UsageError(f"{where}.during: expected two phase names")
        out.update(kind="samples", column=require(s, "column", str, where),
                   minus=optional(s, "minus", str, where), during=during)
        transform = optional(s, "transform", str, where, "value")
        if transform not in TRANSFORMS:
            raise UsageError(f"{where}.transform: {transform!r} is not one of {', '.join(TRANSFORMS)}")
        out["transform"] = transform
        out["label"] = out["label"] or out["column"]
    else:
        if "minus" in s or "transform" in s or "scale" in s:
            raise UsageError(f"{where}: 'minus', 'transform' and 'scale' apply to a column, not to an event")
        ev = require(s, "event", str, where)
        if not EVENT_RE.match(ev):
            raise UsageError(f"{where}.event: {ev!r} is not SYSTEM:EVENT")
        if ev not in events:
            raise UsageError(f"{where}.event: {ev!r} is not traced; trace.events: {', '.join(events) or '(none)'}")
        mm = optional(s, "mark_max_metric", str, where)
        if mm is not None and mm not in metrics:
            raise UsageError(f"{where}.mark_max_metric: {mm!r} is not a declared metric")
        out.update(kind="groups", event=ev, group_by=require(s, "group_by", str, where),
                   mark_max=optional(s, "mark_max", str, where, ""), mark_max_metric=mm)
        out["label"] = out["label"] or f"{ev} per {out['group_by']}"
    return out


def _line(t: dict, where: str, metrics: dict, thresholds: list, params: dict) -> dict:
    reject_unknown(t, {"threshold", "metric", "times_params", "times_metric", "label", "axis"}, where)
    if ("threshold" in t) == ("metric" in t):
        raise UsageError(f"{where}: needs exactly one of 'threshold' or 'metric'")
    name = t.get("threshold") or t.get("metric")
    if not isinstance(name, str) or name not in metrics:
        raise UsageError(f"{where}: {name!r} is not a declared metric; allowed: {', '.join(sorted(metrics))}")
    if "threshold" in t and not any(th.metric == name for th in thresholds):
        raise UsageError(f"{where}.threshold: no threshold on metric {name!r}")
    times = optional(t, "times_params", list, where, [])
    for p in times:
        if p not in params or params[p]["type"] not in ("int", "float", "size"):
            raise UsageError(f"{where}.times_params: {p!r} is not a numeric parameter")
    tm = optional(t, "times_metric", str, where)
    if tm is not None and tm not in metrics:
        raise UsageError(f"{where}.times_metric: {tm!r} is not a declared metric")
    return {"kind": "threshold" if "threshold" in t else "metric", "metric": name, "times_params": times,
            "times_metric": tm, "label": optional(t, "label", str, where, ""), "axis": _axis(t, where)}


def _shade(t: dict, where: str) -> dict:
    reject_unknown(t, {"between", "from", "to", "label"}, where)
    between = require(t, "between", list, where)
    if len(between) != 2 or not all(isinstance(p, str) for p in between):
        raise UsageError(f"{where}.between: expected two phase names")
    lo = float(optional(t, "from", (int, float), where, 0.0))
    hi = float(optional(t, "to", (int, float), where, 1.0))
    if not 0.0 <= lo < hi <= 1.0:
        raise UsageError(f"{where}: need 0 <= from < to <= 1, got from={lo} to={hi}")
    return {"between": between, "from": lo, "to": hi, "label": optional(t, "label", str, where, "")}


def parse_plots(data: dict, w: str, events: list, metrics: dict, thresholds: list, params: dict) -> list:
    plots, names = [], set()
    for i, p in enumerate(_table_list(data, "plots", w)):
        pw = f"{w}.plots[{i}]"
        reject_unknown(p, {"name", "title", "ylabel", "y2label", "phases", "series", "lines", "shade"}, pw)
        name = require(p, "name", str, pw)
        if not NAME_RE.match(name) or name in names:
            raise UsageError(f"{pw}.name: {name!r} must be a unique lower-case name (a-z, 0-9, _ and -)")
        names.add(name)
        phases = p.get("phases", [])
        if not isinstance(phases, bool) and not (isinstance(phases, list) and all(isinstance(x, str) for x in phases)):
            raise UsageError(f"{pw}.phases: expected true or a list of phase names")
        series = [_series(s, f"{pw}.series[{j}]", events, metrics) for j, s in enumerate(_table_list(p, "series", pw))]
        if not series:
            raise UsageError(f"{pw}.series: a plot needs at least one series")
        plots.append({
            "name": name, "title": optional(p, "title", str, pw, name), "ylabel": optional(p, "ylabel", str, pw, ""),
            "y2label": optional(p, "y2label", str, pw, ""), "phases": phases, "series": series,
            "lines": [_line(t, f"{pw}.lines[{j}]", metrics, thresholds, params)
                      for j, t in enumerate(_table_list(p, "lines", pw))],
            "shade": [_shade(t, f"{pw}.shade[{j}]") for j, t in enumerate(_table_list(p, "shade", pw))],
        })
    return plots


def parse_session(data: dict, w: str, events: list) -> dict | None:
    s = optional(data, "session", dict, w)
    if s is None:
        return None
    sw = f"{w}.session"
    reject_unknown(s, {"window", "event", "group_by", "column", "seconds"}, sw)
    window = require(s, "window", str, sw)
    if window not in WINDOWS:
        raise UsageError(f"{sw}.window: {window!r} is not one of {', '.join(WINDOWS)}")
    if not events:
        raise UsageError(f"{sw}: a session needs trace.events (KernelShark opens trace.dat)")
    out = {"window": window, "seconds": float(optional(s, "seconds", (int, float), sw, 4.0))}
    if out["seconds"] <= 0:
        raise UsageError(f"{sw}.seconds: must be positive")
    if window == "largest_group":
        ev = require(s, "event", str, sw)
        if ev not in events:
            raise UsageError(f"{sw}.event: {ev!r} is not traced; trace.events: {', '.join(events)}")
        out.update(event=ev, group_by=require(s, "group_by", str, sw))
    else:
        out["column"] = require(s, "column", str, sw)
    return out
