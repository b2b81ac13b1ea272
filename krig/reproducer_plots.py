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
    times = "..."                      # optional: (column - minus) x another column
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
    optional = true                    # metric lines: drawn only when the metric has a value
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
from collections.abc import Sequence
from typing import Any, Protocol

from .errors import UsageError
from .schema import ANY, OMIT, Field, a_table, check, check_rows, missing


class OnMetric(Protocol):
    """What a plot line reads of a reproducer's threshold (krig/reproducer.py Threshold): its metric."""
    metric: str


PLOTS_DOC = __doc__
TRANSFORMS = ("value", "rate", "-rate", "pct_ram")
AXES = ("left", "right")
WINDOWS = ("largest_group", "steepest_rise")
PLOT_NAME_RE = r"[a-z0-9][a-z0-9_-]*"
EVENT_RE = r"[a-z0-9_]+:[a-z0-9_]+"
TWO_PHASES = "expected two phase names"


def _names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _two_names(v: Any) -> bool:
    return _names(v) and len(v) == 2


AXIS = Field("axis", str, "left", choices=AXES)
# a series: a samples.tsv column (column, minus, times, during, transform, scale) or a trace
# event grouped by a field (event, group_by, mark_max, mark_max_metric); the keys of one kind
# are refused on the other (_series)
SERIES = (
    Field("column", str, OMIT), Field("minus", str, OMIT), Field("times", str, OMIT),
    Field("during", list, OMIT, test=_two_names, says=TWO_PHASES),
    Field("transform", str, OMIT, choices=TRANSFORMS), Field("scale", (int, float), OMIT),
    Field("event", str, OMIT, pattern=EVENT_RE, says="{v!r} is not SYSTEM:EVENT"),
    Field("group_by", str, OMIT), Field("mark_max", str, OMIT), Field("mark_max_metric", str, OMIT),
    Field("label", str, ""), AXIS,
)
COLUMN_ONLY, EVENT_ONLY = ("minus", "times", "transform", "scale"), ("group_by", "mark_max", "mark_max_metric")
LINE = (
    Field("threshold", str, OMIT), Field("metric", str, OMIT), Field("times_params", list, []),
    Field("times_metric", str, None), Field("label", str, ""), AXIS, Field("optional", bool, False),
)
SHADE = (
    Field("between", list, test=_two_names, says=TWO_PHASES),
    Field("from", (int, float), 0.0, convert=lambda v, _: float(v)),
    Field("to", (int, float), 1.0, convert=lambda v, _: float(v)),
    Field("label", str, ""),
)
PLOT = (
    Field("name", str, pattern=PLOT_NAME_RE, says="{v!r} must be a unique lower-case name (a-z, 0-9, _ and -)"),
    Field("title", str, OMIT), Field("ylabel", str, ""), Field("y2label", str, ""),
    Field("phases", ANY, [], test=lambda v: isinstance(v, bool) or _names(v),
          says="expected true or a list of phase names"),
    Field("series", list, []), Field("lines", list, []), Field("shade", list, [], rows=SHADE),
)
SESSION = (
    Field("window", str, choices=WINDOWS),
    Field("event", str, OMIT), Field("group_by", str, OMIT), Field("column", str, OMIT),
    Field("seconds", (int, float), 4.0, convert=lambda v, _: float(v), test=lambda v: v > 0, says="must be positive"),
)


def parse_plots(data: dict[str, Any], w: str, events: list[str], metrics: dict[str, Any], thresholds: Sequence[OnMetric],
                params: dict[str, Any]) -> list[dict[str, Any]]:
    """repro.toml's [[plots]] (PLOT), each series and line checked against what the reproducer
    traces and declares."""
    plots, names = [], set()
    for i, p in enumerate(check_rows(data.get("plots", []), PLOT, f"{w}.plots")):
        pw = f"{w}.plots[{i}]"
        if p["name"] in names:
            raise UsageError(f"{pw}.name: {p['name']!r} must be a unique lower-case name (a-z, 0-9, _ and -)")
        names.add(p["name"])
        series = [_series(s, f"{pw}.series[{j}]", events, metrics)
                  for j, s in enumerate(check_rows(p["series"], SERIES, f"{pw}.series"))]
        if not series:
            raise UsageError(f"{pw}.series: a plot needs at least one series")
        lines = [_line(t, f"{pw}.lines[{j}]", metrics, thresholds, params)
                 for j, t in enumerate(check_rows(p["lines"], LINE, f"{pw}.lines"))]
        for j, t in enumerate(p["shade"]):
            if not 0.0 <= t["from"] < t["to"] <= 1.0:
                raise UsageError(f"{pw}.shade[{j}]: need 0 <= from < to <= 1, got from={t['from']} to={t['to']}")
        plots.append({**p, "title": p.get("title", p["name"]), "series": series, "lines": lines})
    return plots


def _series(s: dict[str, Any], where: str, events: list[str], metrics: dict[str, Any]) -> dict[str, Any]:
    """A checked [[plots.series]]: a column's or an event's, with what the report needs of it."""
    if ("column" in s) == ("event" in s):
        raise UsageError(f"{where}: needs exactly one of 'column' (samples.tsv) or 'event' (trace)")
    out = {"label": s["label"], "axis": s["axis"], "scale": float(s.get("scale", 1.0))}
    if "column" in s:
        if any(k in s for k in EVENT_ONLY):
            raise UsageError(f"{where}: 'group_by' and 'mark_max*' apply to an event, not to a column")
        out.update(kind="samples", column=s["column"], minus=s.get("minus"), times=s.get("times"),
                   during=s.get("during"), transform=s.get("transform", "value"))
        out["label"] = out["label"] or out["column"]
        return out
    if any(k in s for k in COLUMN_ONLY):
        raise UsageError(f"{where}: 'minus', 'times', 'transform' and 'scale' apply to a column, not to an event")
    ev = s["event"]
    if ev not in events:
        raise UsageError(f"{where}.event: {ev!r} is not traced; trace.events: {', '.join(events) or '(none)'}")
    mm = s.get("mark_max_metric")
    if mm is not None and mm not in metrics:
        raise UsageError(f"{where}.mark_max_metric: {mm!r} is not a declared metric")
    out.update(kind="groups", event=ev, group_by=missing(s, "group_by", where), mark_max=s.get("mark_max", ""),
               mark_max_metric=mm)
    out["label"] = out["label"] or f"{ev} per {out['group_by']}"
    return out


def _line(t: dict[str, Any], where: str, metrics: dict[str, Any], thresholds: Sequence[OnMetric],
          params: dict[str, Any]) -> dict[str, Any]:
    """A checked [[plots.lines]]: a threshold's limit or a metric's value, times parameters or a metric."""
    if ("threshold" in t) == ("metric" in t):
        raise UsageError(f"{where}: needs exactly one of 'threshold' or 'metric'")
    name = t.get("threshold", t.get("metric"))
    if name not in metrics:
        raise UsageError(f"{where}: {name!r} is not a declared metric; allowed: {', '.join(sorted(metrics))}")
    if "threshold" in t and not any(th.metric == name for th in thresholds):
        raise UsageError(f"{where}.threshold: no threshold on metric {name!r}")
    for p in t["times_params"]:
        if not isinstance(p, str) or p not in params or params[p]["type"] not in ("int", "float", "size"):
            raise UsageError(f"{where}.times_params: {p!r} is not a numeric parameter")
    if t["times_metric"] is not None and t["times_metric"] not in metrics:
        raise UsageError(f"{where}.times_metric: {t['times_metric']!r} is not a declared metric")
    if t["optional"] and "threshold" in t:
        raise UsageError(f"{where}.optional: only for a metric line (a threshold always has its limit)")
    return {"kind": "threshold" if "threshold" in t else "metric", "metric": name,
            **{k: t[k] for k in ("times_params", "times_metric", "label", "axis", "optional")}}


def parse_session(data: dict[str, Any], w: str, events: list[str]) -> dict[str, Any] | None:
    """repro.toml's [session] (SESSION): where KernelShark opens, or None."""
    if data.get("session") is None:
        return None
    sw = f"{w}.session"
    s = check(a_table(data["session"], sw), SESSION, sw)
    if not events:
        raise UsageError(f"{sw}: a session needs trace.events (KernelShark opens trace.dat)")
    out = {"window": s["window"], "seconds": s["seconds"]}
    if s["window"] == "largest_group":
        ev = missing(s, "event", sw)
        if ev not in events:
            raise UsageError(f"{sw}.event: {ev!r} is not traced; trace.events: {', '.join(events)}")
        out.update(event=ev, group_by=missing(s, "group_by", sw))
    else:
        out["column"] = missing(s, "column", sw)
    return out
