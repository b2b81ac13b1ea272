"""`krig history html -o DIR`: the history as a static page that opens offline: per reproducer, each
thresholded metric's trend per SKU (a matplotlib picture beside it), the regressions, the flaky
results and the servers' health. Everything in DIR: index.html and its plots/*.png, nothing fetched."""
import html
import pathlib
import re

import sqlalchemy as sa

from . import query
from .plot import trend_png
from .store import runs, thresholds

MAX_PLOTS = 60          # pictures a page draws at most (the newest reproducers' first)
STYLE = ("body{font-family:sans-serif;margin:1.5em;max-width:1100px}table{border-collapse:collapse;margin:.5em 0}"
         "td,th{border:1px solid #bbb;padding:.2em .5em;font-size:90%;max-width:28em;overflow-wrap:anywhere}th{background:#eee}"
         ".active,.UNHEALTHY{color:#b00;font-weight:bold}.fixed,.ok{color:#070}img{max-width:100%}")


def _e(v) -> str:
    return html.escape("-" if v is None else str(v))


def _table(heads: tuple, rows: list, row_class=None) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in heads) + "</tr>"]
    for r in rows:
        cls = f' class="{_e(row_class(r))}"' if row_class else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>")
    return "\n".join(out + ["</table>"])


def _slug(*parts) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(str(p) for p in parts))[:150]


def trend_sets(eng) -> list:
    """(reproducer, SKU, metric) of every thresholded metric the history has runs of."""
    q = (sa.select(runs.c.reproducer, runs.c.sku, thresholds.c.name).join(thresholds, thresholds.c.run_id == runs.c.id)
         .group_by(runs.c.reproducer, runs.c.sku, thresholds.c.name).order_by(runs.c.reproducer, runs.c.sku))
    with eng.connect() as conn:
        seen = {(r, s, n.partition(" ")[0]) for r, s, n in conn.execute(q) if r and n}
    return sorted(seen)


def _trends(eng, out: pathlib.Path) -> list:
    parts, drawn = [], 0
    by_repro: dict = {}
    for repro, sku, metric in trend_sets(eng):
        by_repro.setdefault(repro, []).append((sku, metric))
    for repro, sets in by_repro.items():
        parts.append(f"<h3>{_e(repro)}</h3>")
        for sku, metric in sets:
            points = query.trend(eng, metric, repro, sku=sku)
            if not points:
                continue
            parts.append(f"<h4>{_e(metric)} on {_e(sku)} (threshold {_e(points[0].limit)})</h4>")
            if drawn < MAX_PLOTS:
                name = f"plots/{_slug(repro, sku, metric)}.png"
                trend_png(points, metric, repro, out / name, title=f"{repro} on {sku}: {metric}")
                parts.append(f'<img src="{_e(name)}" alt="{_e(metric)} of {_e(repro)} on {_e(sku)} by kernel">')
                drawn += 1
            parts.append(_table(("kernel", "runs", "median", "min", "max"),
                                [(p.kernel, len(p.values), f"{p.median:.6g}", f"{p.spread[0]:.6g}",
                                  f"{p.spread[1]:.6g}") for p in points]))
    return parts or ["<p>no thresholded metric in the history yet</p>"]


def write_dashboard(eng, out: pathlib.Path) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    regs, flakes = query.regressions(eng)
    health = query.health(eng)
    with eng.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar()
    body = [f"<h1>krig results history</h1><p>{total} runs</p>", "<h2 id=regressions>Regressions</h2>",
            _table(("reproducer", "SKU", "threshold", "last passing", "first failing", "status", "bisect"),
                   [(g["reproducer"], g["sku"], g["threshold"], g["last_passing"], g["first_failing"],
                     g["status"] + (f" in {g['fixed_in']}" if g["fixed_in"] else ""), g["bisect"]) for g in regs],
                   lambda r: r[5].split()[0]),
            "<h2 id=flaky>Flaky results</h2><p>a verdict that flips on reruns of one kernel, SKU and parameters"
            " (not a regression)</p>",
            _table(("reproducer", "SKU", "kernel", "PASS", "FAIL"),
                   [(f["reproducer"], f["sku"], f["kernel"], f["pass"], f["fail"]) for f in flakes]),
            "<h2 id=health>Server health</h2>",
            _table(("server", "last runs", "rig errors", "health", "last rig error"),
                   [(h["server"], h["runs"], h["rig_errors"], "UNHEALTHY" if h["unhealthy"] else "ok",
                     h["last_error"]) for h in health], lambda r: r[3]),
            "<h2 id=trends>Trends</h2>", *_trends(eng, out)]
    index = out / "index.html"
    index.write_text("<!doctype html><html><head><meta charset=utf-8><title>krig results history</title>"
                     f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
    return index
