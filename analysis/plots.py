"""Plots a reproducer declares in repro.toml ([[plots]], see krig/reproducer_plots.py).

Data first, drawing second: `plot_data()` turns one plot spec and a run into
plain arrays (series, lines, phase marks, shaded spans), `draw()` puts them
on a matplotlib Axes (so `krig compare` can overlay two runs on one Axes with
the same functions), and `write_plot()` saves the PNG and, beside it, a CSV
of exactly what was drawn.
"""
import csv
import dataclasses
import io
import math
import pathlib

import numpy as np

from krig import safeio

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
# threshold lines: black and greys, dashed, so no line can be taken for a series (COLORS)
LINE_COLORS = ["#000000", "#7f7f7f", "#bcbd22", "#e377c2"]


class PlotError(Exception):
    """A plot cannot be drawn from this run (a missing column, file or event)."""


class Timeline:
    """Seconds since the first sample, for wall-clock times (samples, phases)
    and for trace time stamps. The trace is recorded on CLOCK_MONOTONIC
    (trace-cmd -C mono) and samples.tsv has a `mono` column, which gives the
    offset; without it (older runs) trace times cannot be placed."""

    def __init__(self, samples: dict | None, trace_first_ns: int | None = None):
        self.samples = samples
        self.t0: float | None
        self.mono_offset: float | None
        if samples is not None:
            self.t0 = float(samples["time"][0])
            self.mono_offset = float(np.median(samples["time"] - samples["mono"])) if "mono" in samples else None
        else:
            self.t0, self.mono_offset = None, None
        self.trace_first_ns = trace_first_ns

    @property
    def aligned(self) -> bool:
        return self.mono_offset is not None

    def wall(self, w):
        return None if self.t0 is None else np.asarray(w, dtype=float) - self.t0

    def trace(self, ts_ns):
        ts = np.asarray(ts_ns, dtype=np.float64) / 1e9
        if self.aligned:
            return ts + self.mono_offset - self.t0
        first = (self.trace_first_ns or 0) / 1e9
        return ts - first

    def trace_ns(self, t):
        """Inverse of trace(): seconds on this timeline -> trace time stamp (ns)."""
        if not self.aligned:
            raise PlotError("samples.tsv has no mono column: sample times cannot be placed in the trace")
        return int(round((t + self.t0 - self.mono_offset) * 1e9))


@dataclasses.dataclass
class Series:
    label: str
    axis: str
    kind: str             # "line" or "bars"
    x: np.ndarray
    y: np.ndarray
    width: np.ndarray | None = None
    mark: dict | None = None    # {"x", "y", "text", "y2"}: the largest bar, annotated


@dataclasses.dataclass
class HLine:
    label: str
    axis: str
    y: float


@dataclasses.dataclass
class PlotData:
    name: str
    title: str
    ylabel: str
    y2label: str
    xlabel: str
    series: list
    lines: list
    phases: list          # [(name, x)]
    shades: list          # [(label, x0, x1)]


def _column(samples, name):
    if name not in samples:
        raise PlotError(f"samples.tsv has no column {name!r}")
    return samples[name]


def samples_series(spec: dict, samples: dict, mem_total_bytes: int | None, phases: dict) -> Series:
    t = samples["t"]
    y = _column(samples, spec["column"]).astype(float)
    if spec.get("minus"):
        y = y - _column(samples, spec["minus"])
    if spec.get("times"):
        y = y * _column(samples, spec["times"])
    if spec.get("during"):
        a, b = spec["during"]
        if a not in phases or b not in phases:
            raise PlotError(f"phases.tsv has no {a!r} and {b!r} marks")
        keep = (samples["time"] >= phases[a]) & (samples["time"] <= phases[b])
        t, y = t[keep], y[keep]
    if spec["transform"] in ("rate", "-rate"):
        dt = np.diff(t)
        ok = dt > 0
        y = (np.diff(y)[ok] / dt[ok]) * (-1.0 if spec["transform"] == "-rate" else 1.0)
        t = t[1:][ok]
    elif spec["transform"] == "pct_ram":
        if not mem_total_bytes:
            raise PlotError("the machine's RAM size is unknown (manifest.json machine.mem_total_bytes)")
        y = 100.0 * y / mem_total_bytes
    return Series(spec["label"], spec["axis"], "line", np.asarray(t, float), y * spec["scale"])


def group_series(spec: dict, trace, timeline: Timeline, metrics: dict) -> Series:
    cols = trace.columns(spec["event"], [spec["group_by"]])
    ts, key = cols["ts"].astype(np.int64), cols[spec["group_by"]]
    if not len(ts):
        return Series(spec["label"], spec["axis"], "bars", np.empty(0), np.empty(0), np.empty(0))
    groups, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    first = np.full(len(groups), np.iinfo(np.int64).max)
    last = np.zeros(len(groups), np.int64)
    np.minimum.at(first, inv, ts)
    np.maximum.at(last, inv, ts)
    order = np.argsort(first, kind="stable")
    x = timeline.trace(first[order])
    width = (last[order] - first[order]) / 1e9
    s = Series(spec["label"], spec["axis"], "bars", x, counts[order].astype(float), width)
    if spec.get("mark_max") or spec.get("mark_max_metric"):
        big = int(np.argmax(s.y))
        values = {k: (v.value if v.value is not None else math.nan) for k, v in metrics.items()}
        try:
            text = spec["mark_max"].format(**values) if spec.get("mark_max") else ""
        except (KeyError, ValueError, IndexError) as e:
            raise PlotError(f"mark_max {spec['mark_max']!r}: {e}") from None
        mm = spec.get("mark_max_metric")
        s.mark = {"x": float(x[big] + width[big] / 2), "y": float(s.y[big]), "text": text,
                  "y2": values.get(mm) if mm else None, "y2_label": mm or ""}
    return s


def line_value(spec: dict, thresholds: list, metrics: dict, params: dict) -> float:
    if spec["kind"] == "threshold":
        th = next(t for t in thresholds if t.metric == spec["metric"])
        v = th.max if th.max is not None else th.min
    else:
        v = _value(metrics, spec["metric"])
        if v is None:
            raise PlotError(f"metrics.json has no value for {spec['metric']!r}")
    for p in spec["times_params"]:
        v *= float(params[p])
    if spec["times_metric"]:
        m = _value(metrics, spec["times_metric"])
        if m is None:
            raise PlotError(f"metrics.json has no value for {spec['times_metric']!r}")
        v *= m
    return float(v)


def line_missing(spec: dict, metrics: dict) -> bool:
    """A metric line whose metric has no value in this run (an optional line is then left out)."""
    return spec["kind"] == "metric" and _value(metrics, spec["metric"]) is None


def _value(metrics: dict, name: str) -> float | None:
    """A metric's value in metrics ({name: krig.record.MetricEntry}), None when it has none."""
    m = metrics.get(name)
    return None if m is None else m.value


def plot_data(spec: dict, run, repro, metrics: dict) -> PlotData:
    """run: analysis.rundata.RunData; repro: krig.reproducer.Reproducer."""
    samples = run.samples() if run.path("samples.tsv").exists() else None
    trace = run.trace() if run.path("trace.dat").exists() else None
    needs_trace = any(s["kind"] == "groups" for s in spec["series"])
    if needs_trace and trace is None:
        raise PlotError("no trace.dat")
    if samples is None and any(s["kind"] == "samples" for s in spec["series"]):
        raise PlotError("no samples.tsv")
    first = None
    if trace is not None and needs_trace and (samples is None or "mono" not in samples):
        ev = next(s["event"] for s in spec["series"] if s["kind"] == "groups")
        ts = trace.columns(ev)["ts"]
        first = int(ts.min()) if len(ts) else 0
    tl = Timeline(samples, first)
    series = []
    for s in spec["series"]:
        if s["kind"] == "samples":
            assert samples is not None  # refused above when a samples series has no samples.tsv
            series.append(samples_series(s, samples, run.mem_total_bytes, run.phases()))
        else:
            series.append(group_series(s, trace, tl, metrics))
    lines = [HLine(ln["label"] or ln["metric"], ln["axis"], line_value(ln, repro.thresholds, metrics, run.params))
             for ln in spec["lines"] if not (ln.get("optional") and line_missing(ln, metrics))]
    phases, shades = [], []
    ph = run.phases()
    if tl.t0 is not None:
        wanted = list(ph) if spec["phases"] is True else (spec["phases"] or [])
        phases = [(n, float(tl.wall(ph[n]))) for n in wanted if n in ph]
        for sh in spec["shade"]:
            a, b = sh["between"]
            if a in ph and b in ph:
                x0, x1 = float(tl.wall(ph[a])), float(tl.wall(ph[b]))
                shades.append((sh["label"], x0 + sh["from"] * (x1 - x0), x0 + sh["to"] * (x1 - x0)))
    xlabel = "seconds since the first sample" if tl.t0 is not None and (tl.aligned or not needs_trace) \
        else "seconds since the first trace event"
    return PlotData(spec["name"], spec["title"], spec["ylabel"], spec["y2label"], xlabel, series, lines,
                    phases, shades)


def draw(ax, data: PlotData, ax2=None, style: dict | None = None):
    """Draw `data` onto ax (left) and ax2 (right axis, made if needed and None).
    style: {"alpha", "linestyle", "suffix", "colors", "named_phases", "mark_text"} to tell
    overlaid runs apart (colors: the series' colours instead of COLORS; named_phases: a set
    shared by the overlaid runs, so each phase is named once and the names do not pile up;
    mark_text=False: the largest bar keeps its star but not its text, which overlaid runs
    would stack on top of each other).
    Returns (handles, ax2)."""
    style = style or {}
    alpha, ls, suffix = style.get("alpha", 1.0), style.get("linestyle", "-"), style.get("suffix", "")
    colors = style.get("colors") or COLORS
    named = style.get("named_phases", set())
    handles = []

    def axis_of(name):
        nonlocal ax2
        if name == "left":
            return ax
        if ax2 is None:
            ax2 = ax.twinx()
        return ax2

    for i, s in enumerate(data.series):
        a, color = axis_of(s.axis), colors[i % len(colors)]
        if s.kind == "bars":
            h = a.bar(s.x, s.y, width=np.maximum(s.width, _min_width(data)), align="edge", color=color,
                      alpha=0.8 * alpha, label=s.label + suffix)
            if s.mark:
                if style.get("mark_text", True):
                    a.annotate(s.mark["text"], (s.mark["x"], s.mark["y"]), xytext=(0, 8),
                               textcoords="offset points", ha="center", fontsize=8, color="black")
                if s.mark.get("y2") is not None:
                    h2 = axis_of("right").plot([s.mark["x"]], [s.mark["y2"]], marker="*", markersize=12,
                                               color="#ff7f0e", linestyle="none", alpha=alpha,
                                               label=f"{s.mark['y2_label']} of the largest{suffix}")[0]
                    handles.append(h2)
        else:
            h = a.plot(s.x, s.y, color=color, linestyle=ls, alpha=alpha, linewidth=1.4, label=s.label + suffix)[0]
        handles.append(h)
    for i, ln in enumerate(data.lines):
        a = axis_of(ln.axis)
        handles.append(a.axhline(ln.y, color=LINE_COLORS[i % len(LINE_COLORS)], linestyle="--", linewidth=1.2,
                                 alpha=alpha, label=f"{ln.label} ({_num(ln.y)})"))
    for name, x in data.phases:
        ax.axvline(x, color="#555555", linestyle=":", linewidth=1.0, alpha=alpha)
        if name in named:
            continue
        named.add(name)
        ax.annotate(name, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -10),
                    textcoords="offset points", fontsize=7, color="#555555", rotation=90, va="top")
    for label, x0, x1 in data.shades:
        handles.append(ax.axvspan(x0, x1, color="#ffbf00", alpha=0.15 * alpha, label=label))
    _zero_based(ax, data, "left")
    if ax2 is not None:
        _zero_based(ax2, data, "right")
    ax.set_xlabel(data.xlabel)
    ax.set_ylabel(data.ylabel)
    if ax2 is not None and data.y2label:
        ax2.set_ylabel(data.y2label)
    ax.set_title(data.title, fontsize=10)
    return handles, ax2


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 and v == int(v) else f"{v:.4g}"


def _zero_based(ax, data: PlotData, axis: str):
    """Non-negative data starts at 0 and leaves room above the highest point or line."""
    ys = [s.y for s in data.series if s.axis == axis and len(s.y)]
    ys += [np.array([ln.y]) for ln in data.lines if ln.axis == axis]
    ys += [np.array([s.mark["y2"]]) for s in data.series if axis == "right" and s.mark and s.mark.get("y2")]
    if not ys:
        return
    y = np.concatenate(ys)
    y = y[np.isfinite(y)]
    if len(y) and y.min() >= 0 and y.max() > 0:
        ax.set_ylim(0, y.max() * 1.12)


def _min_width(data: PlotData) -> float:
    parts = [s.x for s in data.series if len(s.x)] + [np.array([x for _, x in data.phases])]
    xs = np.concatenate([x for x in parts if len(x)]) if any(len(x) for x in parts) else np.array([0.0, 1.0])
    span = float(xs.max() - xs.min()) or 1.0
    return span / 150.0


def write_csv(path: pathlib.Path, data: PlotData):
    """Exactly what draw() puts on the Axes, one row per point/line/mark/span."""
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["kind", "label", "axis", "x", "y", "x2"])
    for s in data.series:
        for i in range(len(s.x)):
            x2 = repr(float(s.x[i] + s.width[i])) if s.width is not None else ""
            w.writerow(["bar" if s.kind == "bars" else "point", s.label, s.axis, repr(float(s.x[i])),
                        repr(float(s.y[i])), x2])
        if s.mark and s.mark.get("y2") is not None:
            w.writerow(["mark", s.mark["y2_label"], "right", repr(s.mark["x"]), repr(float(s.mark["y2"])), ""])
    for ln in data.lines:
        w.writerow(["hline", ln.label, ln.axis, "", repr(ln.y), ""])
    for name, x in data.phases:
        w.writerow(["phase", name, "left", repr(x), "", ""])
    for label, x0, x1 in data.shades:
        w.writerow(["shade", label, "left", repr(x0), "", repr(x1)])
    safeio.write_text(*safeio.split(path), f.getvalue())


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported where a picture is drawn: the import takes
    0.3-0.6 s, which a command that draws nothing (krig --help, krig b4-check) must not pay."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def write_plot(data: PlotData, out_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    plt = pyplot()
    png, csv_path = out_dir / f"plot-{data.name}.png", out_dir / f"plot-{data.name}.csv"
    fig, ax = plt.subplots(figsize=(9, 5), dpi=100)
    try:
        handles, _ = draw(ax, data)
        ax.grid(True, alpha=0.3)
        if handles:
            ax.legend(handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2,
                      frameon=False)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        safeio.write_bytes(*safeio.split(png), buf.getvalue())
    finally:
        plt.close(fig)
    write_csv(csv_path, data)
    return png, csv_path
