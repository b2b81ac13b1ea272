"""trace.kshark.json: a KernelShark 2 session opening trace.dat at the worst moment.

The format is what KernelShark 2.x itself saves (File > Save session, or
~/.cache/kernelshark/lastsession.json): a "kshark.config.session" document
with the data stream (file path + its mtime, which KernelShark checks), the
visible range ("Model": [first ns, last ns] on the trace clock) and a show-event
filter with the reproducer's events. Which window is "worst" is declared in
repro.toml ([session], see krig/reproducer_plots.py).
"""
import json
import os
import pathlib

import numpy as np

from krig import safeio

from .plots import PlotError, Timeline
from .trace.tracedat import TraceError

SESSION_FILE = "trace.kshark.json"
BINS = 1000
PAD = 0.05   # of the window, on each side
PLUGINS = ["kvm_combo", "missed_events", "sched_events"]   # what KernelShark 2.2 registers by default


def largest_group_window(trace, event: str, group_by: str) -> tuple[int, int, str]:
    cols = trace.columns(event, [group_by])
    if not len(cols["ts"]):
        raise PlotError(f"no {event} events in trace.dat")
    keys, inv, counts = np.unique(cols[group_by], return_inverse=True, return_counts=True)
    big = int(np.argmax(counts))
    ts = cols["ts"][inv == big].astype(np.int64)
    return int(ts.min()), int(ts.max()), (f"the largest {event} group ({group_by}={keys[big]}): "
                                          f"{int(counts[big])} events")


def steepest_rise_window(samples: dict, timeline: Timeline, column: str, seconds: float) -> tuple[int, int, str]:
    if column not in samples:
        raise PlotError(f"samples.tsv has no column {column!r}")
    t, y = samples["t"], samples[column].astype(float)
    if len(t) < 2:
        raise PlotError("fewer than two samples")
    dt = np.diff(t)
    rate = np.where(dt > 0, np.diff(y) / np.where(dt > 0, dt, 1.0), -np.inf)
    i = int(np.argmax(rate))
    mid = (t[i] + t[i + 1]) / 2
    a, b = timeline.trace_ns(mid - seconds / 2), timeline.trace_ns(mid + seconds / 2)
    return a, b, f"the steepest rise of {column}: {rate[i]:,.0f}/s at {mid:.1f} s"


def session_window(run, spec: dict) -> tuple[int, int, str]:
    trace = run.trace()
    if spec["window"] == "largest_group":
        a, b, why = largest_group_window(trace, spec["event"], spec["group_by"])
    else:
        samples = run.samples()
        a, b, why = steepest_rise_window(samples, Timeline(samples), spec["column"], spec["seconds"])
    pad = max(int((b - a) * PAD), 1_000_000)
    return a - pad, b + pad, why


def rows_before(trace, ts_ns: int) -> int:
    """Table row of the first event at or after ts_ns (all events are shown)."""
    n = 0
    for ev in trace.counts():
        try:
            ts = trace.columns(ev)["ts"].astype(np.int64)
        except TraceError:   # an event the reader cannot decode: KernelShark still counts it
            continue
        n += int(np.searchsorted(np.sort(ts), ts_ns))
    return n


def session_doc(trace_path: pathlib.Path, start_ns: int, end_ns: int, events: list, cpus: int,
                view_top: int = 0) -> dict:
    trace_path = trace_path.resolve()
    return {
        "type": "kshark.config.session",
        "MainWindow": [1200, 760],
        "Splitter": [420, 300],
        "Model": {"type": "kshark.config.model", "range": [int(start_ns), int(end_ns)], "bins": BINS},
        "data streams": [{
            "type": "kshark.config.stream",
            "stream id": 0,
            "data": {"type": "kshark.config.data", "file": str(trace_path), "name": "top buffer",
                     "time": int(os.stat(trace_path).st_mtime)},
            "filters": {"type": "kshark.config.filter", "filter mask": 7,
                        "show event filter": [e.replace(":", "/") for e in events]},
            # KernelShark refuses a stream without its plugin list
            "plugins": {"type": "kshark.config.plugins", "registered": [[p, True] for p in PLUGINS]},
            "CPUPlots": list(range(cpus)),
            "TaskPlots": [],
        }],
        "ComboPlots": [],
        "Markers": {"type": "kshark.config.markers", "markA": {"isSet": False}, "markB": {"isSet": False},
                    "Active": "A"},
        "ViewTop": int(view_top),
        "ColorScheme": 0.75,
        "User Plugins": {"type": "kshark.config.plugins", "obj. files": []},
    }


def write_session(run, repro) -> dict | None:
    """Writes trace.kshark.json; returns {"file", "start_ns", "end_ns", "why"} or None (nothing traced)."""
    path = run.path("trace.dat")
    if not path.exists():
        return None
    trace = run.trace()
    if repro.session:
        a, b, why = session_window(run, repro.session)
    else:
        parts = [trace.columns(ev)["ts"] for ev in repro.trace_events if ev in trace.counts()]
        ts = np.concatenate(parts) if parts else np.empty(0)
        if not len(ts):
            raise PlotError("trace.dat has no events of the reproducer")
        a, b, why = int(ts.min()), int(ts.max()), "the whole trace (no [session] in repro.toml)"
    cpus = int(run.record.manifest.machine_said.cpus or len(trace.cpustats) or 1)
    doc = session_doc(path, a, b, repro.trace_events, cpus, rows_before(trace, a))
    out = run.path(SESSION_FILE)
    safeio.write_text(out.parent, out.name, json.dumps(doc, indent=2) + "\n")
    return {"file": out, "start_ns": a, "end_ns": b, "why": why}
