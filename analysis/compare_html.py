"""compare.html for `krig compare`: the comparison tables and the reproducer's plots
with every run of both sides overlaid, drawn by the per-run plotting code
(analysis/plots.py: plot_data() then draw() once per run on the same Axes).

BASE is drawn dashed in cool colours, NEW solid in warm ones. Self-contained:
PNGs beside the page, everything taken from files HTML-escaped.
"""
import pathlib

from krig.errors import KrigError
from krig.record import read_metrics
from krig.record_compare import Comparison
from krig.reproducer import load_reproducer
from krig.rundir import RunDir

from .plots import draw, plot_data, pyplot
from .report import CSS, esc, html_table
from .rundata import RunData
from .summary import fmt

SIDES = {"base": {"label": "BASE", "linestyle": "--", "alpha": 0.75, "colors": ["#1f77b4", "#17becf", "#2ca02c"]},
         "new": {"label": "NEW", "linestyle": "-", "alpha": 0.75, "colors": ["#d62728", "#ff7f0e", "#9467bd"]}}


def _metrics_of(run: RunDir) -> dict:
    try:
        return read_metrics(run)
    except (KrigError, OSError):
        return {}


def overlay_plot(spec: dict, repro, runs: dict, out: pathlib.Path) -> pathlib.Path:
    """One PNG: spec drawn for every run of both sides. runs: {"base": [dirs], "new": [dirs]}."""
    png = out / f"compare-{spec['name']}.png"
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5), dpi=100)
    ax2, lims, lims2, title = None, [], [], spec["title"]
    handles: dict[str, object] = {}
    named: set[str] = set()     # each phase named once over all the runs
    try:
        for side, dirs in runs.items():
            st = SIDES[side]
            for d in dirs:
                run = RunData(d)
                data = plot_data(spec, run, repro, _metrics_of(run))
                title = data.title
                hs, ax2 = draw(ax, data, ax2, style={"alpha": st["alpha"], "linestyle": st["linestyle"],
                                                     "suffix": f" ({st['label']})", "colors": st["colors"],
                                                     "named_phases": named, "mark_text": False})
                lims.append(ax.get_ylim())
                if ax2 is not None:
                    lims2.append(ax2.get_ylim())
                for h in hs:
                    handles.setdefault(h.get_label(), h)      # one legend entry per series and side
        for a, lim in ((ax, lims), (ax2, lims2)):
            if a is not None and lim:
                a.set_ylim(min(x[0] for x in lim), max(x[1] for x in lim))
        ax.set_title(f"{title}: BASE dashed, NEW solid", fontsize=10)
        ax.grid(True, alpha=0.3)
        if handles:
            ax.legend(handles=list(handles.values()), fontsize=7, loc="upper center",
                      bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
        fig.tight_layout()
        fig.savefig(png)
    finally:
        plt.close(fig)
    return png


def _side_rows(res: Comparison) -> list:
    rows = []
    for side in ("base", "new"):
        s = res.side(side)
        rows.append([SIDES[side]["label"], esc(", ".join(s.kernels)), esc(", ".join(s.releases)),
                     esc(", ".join(s.rigs)),
                     esc(s.verdict_text) + (f"<br>{esc(s.outcome)}" if s.outcome else ""),
                     "<br>".join(esc(r) for r in s.runs)])
    return rows


def _metric_rows(res: Comparison) -> list:
    rows = []
    for r in res.metrics:
        b, n = r.base, r.new
        p = "-" if r.p is None else f"{r.p:.4f}"
        sig = ("yes" if r.material else f"yes, but under {r.min_change_pct:g}%") \
            if r.significant else ("no" if r.reachable else "no (too few runs)")
        way = r.verdict or (f"({r.direction})" if r.direction else "")
        rows.append([esc(r.metric), esc(r.unit), b.n, esc(fmt(b.median)),
                     esc(f"{fmt(b.min)} - {fmt(b.max)}"), n.n, esc(fmt(n.median)),
                     esc(f"{fmt(n.min)} - {fmt(n.max)}"),
                     "-" if r.change_pct is None else f"{r.change_pct:+.1f}%", esc(way), p, sig])
    return rows


def write_compare_html(res: Comparison, out: pathlib.Path) -> list:
    """Writes out/compare.html and its PNGs; returns notes (one line per plot that failed)."""
    out.mkdir(parents=True, exist_ok=True)
    repro = load_reproducer(res.reproducer)
    notes, figs = [], []
    runs = {"base": res.judged_runs.get("base", []), "new": res.judged_runs.get("new", [])}
    if runs["base"] or runs["new"]:
        for spec in repro.plots:
            try:
                figs.append((overlay_plot(spec, repro, runs, out), spec["title"]))
            except Exception as e:      # one plot failing never stops the page
                notes.append(f"plot {spec['name']}: {type(e).__name__}: {e}")
    parts = [f"<h1>krig compare: {esc(res.reproducer)}</h1>",
             f"<p>preset {esc(res.preset or '(defaults)')}; "
             f"{esc(' '.join(f'{k}={v}' for k, v in (res.params or {}).items()))}</p>"]
    parts += [f"<p class=\"note\">warning: {esc(w)}</p>" for w in res.warnings]
    parts += ["<h2>Sides</h2>", html_table(["side", "kernel", "release", "rig", "verdicts", "runs"],
                                           _side_rows(res))]
    parts += ["<h2>Metrics</h2>",
              f"<p>Judged runs (PASS/FAIL) only. p: {esc(res.test)}; significant only at p &lt; "
              f"{res.alpha} with at least {res.min_n_per_side} runs a side (with 3 vs 3 the smallest "
              f"possible p is 0.10). Change: NEW median against BASE median; better/worse when significant and "
              f"at least the metric's min_change_pct (default 1%), \"small\" when significant but "
              f"smaller, in brackets when not significant.</p>",
              html_table(["metric", "unit", "n", "BASE median", "BASE min - max", "n", "NEW median",
                          "NEW min - max", "change", "", "p", "significant"], _metric_rows(res),
                         (2, 3, 4, 5, 6, 7, 8, 10))]
    trows = [[esc(t.threshold), esc(t.kind), f"{t.base.held}/{t.base.judged}",
              f"{t.new.held}/{t.new.judged}", "FLIPS" if t.flips else "-"]
             for t in res.thresholds]
    parts += ["<h2>Thresholds</h2>", html_table(["threshold", "kind", "BASE held", "NEW held", "flips"], trows)
              if trows else "<p>none</p>"]
    parts.append("<h2>Plots</h2>")
    for png, title in figs:
        parts.append(f"<figure><img src=\"{esc(png.name)}\" alt=\"{esc(title)}\">"
                     f"<figcaption>{esc(title)}</figcaption></figure>")
    if not figs:
        parts.append("<p>no plots (no judged runs, or none declared)</p>")
    for n in notes:
        parts.append(f"<p class=\"note\">compare: {esc(n)}</p>")
    title = f"krig compare {res.reproducer}"
    (out / "compare.html").write_text(
        f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
        f"<style>{CSS}td.n{{white-space:nowrap}} body{{max-width:1300px}}</style></head><body>\n"
        + "\n".join(parts) + "\n</body></html>\n")
    return notes
