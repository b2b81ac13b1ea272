"""`krig report RUN_DIR`: report.html, plot-*.png/.csv, summary.txt and
trace.kshark.json in the run directory. Also run at the end of every
`krig run` and `krig check`; each part that fails is named on the page and
in the returned notes, and never changes the verdict or touches the results.
"""
import html
import sys

from krig import safeio
from krig.rundir import RunDir, is_run_dir
from krig.errors import KrigError, UsageError
from krig.record import Manifest, MetricEntry, RunRecord, Verdict, read_metrics, read_verdict
from krig.knobs import summary as knob_summary
from krig.reproducer import load_analyzer, load_reproducer
from krig.verdict import KERNEL_STOPPED

from . import projection
from .kshark import SESSION_FILE, write_session
from .plots import plot_data, write_plot
from .rundata import RunData
from .summary import build_summary, fmt, threshold_id, threshold_outcomes, threshold_tag

NO_PLOTS = (*KERNEL_STOPPED, "ERROR")
CONSOLE_TAIL = 40
LINKS = ["summary.txt", SESSION_FILE, "trace.dat", "console.log", "metrics.json", "verdict.json", "manifest.json",
         "stdout", "stderr", "analysis.log"]
CSS = """
body{font-family:sans-serif;margin:1.5em;max-width:1000px;color:#222}
h1{font-size:1.4em;margin-bottom:.2em} h2{font-size:1.1em;margin-top:1.4em;border-bottom:1px solid #ccc}
.v{display:inline-block;padding:.15em .6em;border-radius:4px;color:#fff;font-weight:bold}
.PASS{background:#2e7d32}.FAIL{background:#c62828}.ERROR{background:#6a1b9a}.SKIP{background:#757575}
.HUNG{background:#ef6c00}.CRASHED{background:#000}.INTERRUPTED{background:#455a64}
table{border-collapse:collapse;font-size:.9em} td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums} .held{color:#2e7d32} .crossed{color:#c62828;font-weight:bold}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.8em} img{max-width:100%;border:1px solid #eee}
.note{color:#8a4b00}
"""


def esc(x) -> str:
    """A value for the page: HTML-escaped, and no control character but newline and tab (a
    server's release or a console line may hold an escape sequence: shown as \\xNN)."""
    return html.escape(safeio.printable_text("" if x is None else x), quote=True)


def _read(run: RunData, read, default):
    """read(run) (krig.record's read_verdict or read_metrics); default when missing or unreadable
    (the report says what it can)."""
    try:
        return read(run) or default
    except (KrigError, OSError):
        return default


def console_lines(run: RunDir, verdict: Verdict) -> list[str]:
    """The console lines that explain a HUNG/CRASHED/ERROR run: the crash context
    and the console's findings, else its last lines."""
    ctx = verdict.crash_context
    if isinstance(ctx, list) and ctx:
        return [str(x) for x in ctx]
    if isinstance(ctx, str) and ctx:
        return ctx.splitlines()
    found = [line for lines in (verdict.console or {}).values() for line in lines]
    tail = _text(run, "console.log").splitlines()[-CONSOLE_TAIL:]
    return found + (["..."] if found and tail else []) + tail


def _text(run: RunDir, name: str) -> str:
    """A text file of the run for the report ("" when missing; a refusal's line when unsafe)."""
    try:
        return run.text(name, "")
    except UsageError as e:
        return f"krig: {e}"


def html_table(header: list, rows: list, num_cols=()) -> str:
    h = "".join(f"<th>{esc(c)}</th>" for c in header) if any(header) else ""
    body = "".join("<tr>" + "".join(
        f"<td class=\"n\">{cell}</td>" if i in num_cols else f"<td>{cell}</td>" for i, cell in enumerate(r))
        + "</tr>" for r in rows)
    return f"<table>{'<tr>' + h + '</tr>' if h else ''}{body}</table>"


def projection_html(proj: dict | None) -> list[str]:
    if not proj:
        return []
    header, rows = projection.table(proj)
    return ["<h2>Projection to other machines (not a measurement)</h2>", f"<p>{esc(proj['basis'])}.</p>",
            html_table(header, [[esc(c) for c in r] for r in rows], range(1, len(header)))]


def run_info(manifest: Manifest) -> list[list[str]]:
    """The report's table of what ran where: kernel, rig, machine, preset, parameters, times."""
    k, rig, facts = manifest.kernel, manifest.rig, manifest.rig_facts or {}
    info = [["kernel", f"{esc(manifest.release)} ({esc(k.name)}: {esc(k.description)})"],
            ["kernel image", esc(k.image)], ["kernel config sha256", esc(k.config_sha256_16)]]
    if k.extra.get("patches"):
        info.append(["patches", esc(", ".join(map(str, k.extra["patches"])))])
    if k.extra.get("source"):
        info.append(["source", esc(k.extra.get("source"))])
    info += [["rig", f"{esc(rig.name)} ({esc(rig.kind)}, accelerator {esc(facts.get('accel'))})"],
             ["machine", f"{esc(manifest.cpus)} CPUs, {esc(fmt((manifest.mem_total_bytes or 0) / (1 << 20)))} MiB RAM"],
             ["preset", esc(manifest.preset or "(defaults)")],
             ["parameters", esc(" ".join(f"{a}={b}" for a, b in (manifest.params or {}).items()))],
             ["knobs", esc("; ".join(knob_summary(manifest.knobs)) or "none")],
             ["started / ended", f"{esc(manifest.started)} / {esc(manifest.ended)}"],
             ["krig revision", esc(manifest.krig_revision)]]
    return info


def build_html(rec: RunRecord, verdict: Verdict, metrics: dict[str, MetricEntry], repro, plots, session, notes,
               proj=None) -> str:
    v = verdict.verdict or "?"
    run, manifest = rec.run, rec.manifest
    parts = [f"<h1>{esc(repro.name)} <span class=\"v {esc(v)}\">{esc(v)}</span></h1>",
             f"<p><b>Reason:</b> {esc(verdict.reason)}</p>"]
    for w in verdict.warnings or []:
        parts.append(f"<p class=\"note\">warning: {esc(w)}</p>")
    judged = threshold_outcomes(run, repro)
    rows = []
    for t in repro.thresholds:
        m = metrics.get(t.metric) or MetricEntry(None)
        outcome = judged.get(threshold_id(t))
        tag = threshold_tag(outcome)
        # a contended timing crossing is not the kernel's: not in the crossed colour
        cell = esc(tag) if outcome not in ("pass", "fail") else (
            f"<span class=\"{'held' if outcome == 'pass' else 'crossed'}\">{esc(tag)}</span>")
        rows.append([esc(t.metric), esc(fmt(m.value)), esc(t.describe()), esc(m.unit), cell,
                     esc(t.rationale)])
    parts += ["<h2>Thresholds</h2>",
              html_table(["metric", "measured", "limit", "unit", "held", "rationale"], rows, (1,)) if rows
              else "<p>none</p>"]
    if plots or v not in NO_PLOTS:
        parts.append("<h2>Plots</h2>")
        for png, csv_path, title in plots:
            parts.append(f"<figure><img src=\"{esc(png.name)}\" alt=\"{esc(title)}\">"
                         f"<figcaption>{esc(title)} (<a href=\"{esc(csv_path.name)}\">data</a>)</figcaption></figure>")
        if not plots:
            parts.append("<p>no plots declared for this reproducer</p>")
    parts += projection_html(proj)
    if v in NO_PLOTS:
        parts += ["<h2>Console</h2>", f"<pre>{esc(chr(10).join(console_lines(run, verdict)))}</pre>"]
        tail = _text(run, "stderr").splitlines()[-CONSOLE_TAIL:]
        if tail:
            parts += ["<h2>Workload stderr (last lines)</h2>", f"<pre>{esc(chr(10).join(tail))}</pre>"]
    if session:
        parts += ["<h2>KernelShark</h2>",
                  f"<p><code>kernelshark -s {esc(session['file'])}</code> opens trace.dat on "
                  f"{esc(session['why'])}: {(session['end_ns'] - session['start_ns']) / 1e9:.3f} s from "
                  f"{session['start_ns'] / 1e9:.6f} s on the trace clock.</p>"]
    parts += ["<h2>Run</h2>", html_table(["", ""], run_info(manifest))]
    mrows = [[esc(n), esc(fmt(m.value)), esc(m.unit), esc(m.better), esc(m.description)]
             for n, m in metrics.items()]
    parts += ["<h2>Metrics</h2>", html_table(["metric", "value", "unit", "better", "description"], mrows, (1,))
              if mrows else "<p>no metrics (the run did not complete)</p>"]
    for n in notes:
        parts.append(f"<p class=\"note\">report: {esc(n)}</p>")
    links = [f"<a href=\"{esc(n)}\">{esc(n)}</a>" for n in LINKS if (rec.dir / n).exists()]
    parts += ["<h2>Files</h2>", "<p>" + " &middot; ".join(links) + "</p>"]
    title = f"krig {repro.name}: {v}"
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def write_report(run, repro=None, project: tuple = ()) -> dict:
    """Writes everything it can; returns {"files": [...], "notes": [problems, one line each]}.

    run: a run directory or its RunData; repro: its reproducer, if the caller has loaded it;
    project: more (RAM, CPUs) to project the run to (analysis/projection.py)."""
    if not isinstance(run, RunData):
        run = safeio.given(run)                 # the user's own path: results/latest is followed
        if not is_run_dir(run):
            raise UsageError(f"{run}: not a krig run directory (no manifest.json)")
        run = RunData(run)
    run_dir, manifest = run.dir, run.record.manifest
    repro = repro or load_reproducer(manifest.reproducer or "?")
    projection.require_model(repro, load_analyzer(repro) if project else None, project)
    verdict, metrics = _read(run, read_verdict, Verdict(None)), _read(run, read_metrics, {})
    files, notes, plots, session = [], [], [], None
    # plots whenever the thresholds judged the run's numbers: also an ERROR that only moved
    # the blame (a contended host) or flagged the instrument, whose numbers are still drawn
    if verdict.verdict not in NO_PLOTS or verdict.thresholds:
        for spec in repro.plots:
            try:
                png, csv_path = write_plot(plot_data(spec, run, repro, metrics), run_dir)
                plots.append((png, csv_path, spec["title"]))
                files += [png, csv_path]
            except Exception as e:   # one plot failing never stops the rest of the report
                notes.append(f"plot {spec['name']}: {type(e).__name__}: {e}")
    try:
        session = write_session(run, repro)
        if session:
            files.append(session["file"])
    except Exception as e:
        notes.append(f"{SESSION_FILE}: {type(e).__name__}: {e}")
    proj = None
    try:
        values = {k: e.value for k, e in metrics.items()}
        proj = projection.project(manifest, load_analyzer(repro), values, project) if verdict.thresholds else None
        projection.write(run_dir, proj)
        if proj:
            files.append(run_dir / projection.PROJECTION)
    except Exception as e:
        notes.append(f"{projection.PROJECTION}: {type(e).__name__}: {e}")
    try:
        run.write_text("summary.txt", safeio.printable_text(build_summary(run.record, verdict, metrics, repro, proj)))
        files.append(run_dir / "summary.txt")
    except Exception as e:
        notes.append(f"summary.txt: {type(e).__name__}: {e}")
    run.write_text("report.html", build_html(run.record, verdict, metrics, repro, plots, session, notes, proj))
    files.append(run_dir / "report.html")
    return {"files": files, "notes": notes}


def cmd_report(a) -> int:
    """`krig report RUN_DIR`: the files written, one a line; notes on standard error."""
    res = write_report(a.run_dir, project=projection.parse_projects(a.project))
    for note in res["notes"]:
        print(f"krig: report: {note}", file=sys.stderr)
    for f in res["files"]:
        print(f)
    return 0
