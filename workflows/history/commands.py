"""`krig history ...`: the handlers (workflows/cli.py declares the arguments: historyargs.py)."""
import pathlib
import re

import functools

import sqlalchemy as sa

from krig.errors import KrigError, UsageError
from . import query, store
from .remember import said

VERDICT_WORDS = ("PASS", "FAIL", "ERROR", "SKIP", "INCOMPLETE", "INTERRUPTED")


def answers(cmd):
    """A command whose store fails (does not answer, is locked, is full): one line, exit 3."""
    @functools.wraps(cmd)
    def run(a) -> int:
        try:
            return cmd(a)
        except sa.exc.SQLAlchemyError as e:
            raise KrigError(f"history store {store.public(store.store_url() or '')}: {said(e)}") from None
    return run


def open_store():
    url = store.store_url()
    if url is None:
        raise UsageError(f"{store.URL_ENV}=off: the history is turned off; unset it or give a database URL")
    return store.engine(url)


def table(rows: list, heads: tuple) -> str:
    """Rows as columns under their heads, the last column unpadded."""
    cells = [tuple(heads)] + [tuple("-" if c is None else str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(heads) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in cells)


def _since(text):
    if text and not re.fullmatch(r"\d{4}-\d{2}-\d{2}(T[\d:]+)?", text):
        raise UsageError(f"--since {text!r}: use a date, YYYY-MM-DD (or YYYY-MM-DDTHH:MM:SS, UTC)")
    return text


@answers
def cmd_list(a) -> int:
    """`krig history [--repro R] [--kernel K] [--rig R] [--server S] [--verdict V] [--since DATE]`."""
    if a.verdict and a.verdict.upper() not in VERDICT_WORDS:
        raise UsageError(f"--verdict {a.verdict!r}: one of {', '.join(VERDICT_WORDS)}")
    since = _since(a.since)          # the arguments checked before the store is opened (or made)
    rows = query.list_runs(open_store(), a.repro, a.kernel, a.rig, a.server, a.verdict, since, a.limit)
    if not rows:
        print("no runs in the history match (krig history import DIR adds runs made before it)")
        return 0
    print(table([((r["started"] or "")[:19], r["reproducer"], query.kernel_label(r), r["rig"], r["sku"],
                  r["workflow"], r["verdict"], r["run_dir"]) for r in rows],
                ("STARTED", "REPRODUCER", "KERNEL", "RIG", "SKU", "WORKFLOW", "VERDICT", "RUN")))
    return 0


@answers
def cmd_import(a) -> int:
    """`krig history import DIR...`: every run directory under DIR written to the history."""
    from .remember import import_dirs
    for d in a.dirs:
        if not pathlib.Path(d).is_dir():
            raise UsageError(f"DIR {d}: not a directory")
    done, refused = import_dirs(a.dirs, open_store())
    url = store.store_url()
    assert url is not None      # open_store() refused a history turned off
    for line in refused:
        print(f"history: refused {line}")
    print(f"history: {done} runs written to {store.public(url)}"
          + (f"; {len(refused)} refused" if refused else ""))
    return 2 if refused else 0


def _fmt(v) -> str:
    return f"{v:.6g}"


@answers
def cmd_trend(a) -> int:
    """`krig history trend METRIC --repro R [--rig R | --server S | --sku S] [-o PNG]`."""
    points = query.trend(open_store(), a.metric, a.repro, a.rig, a.server, a.sku)
    if not points:
        raise UsageError(f"METRIC {a.metric}: no values of it for --repro {a.repro} in the history"
                         + (" on the machines asked" if a.rig or a.server or a.sku else ""))
    print(f"{a.metric} of {a.repro} ({points[0].unit or 'no unit'}); threshold: {points[0].limit or 'none'}")
    print(table([(p.kernel, p.first[:19], len(p.values), _fmt(p.median), _fmt(p.spread[0]), _fmt(p.spread[1]))
                 for p in points], ("KERNEL", "FIRST RUN", "RUNS", "MEDIAN", "MIN", "MAX")))
    if a.output != "-":
        from .plot import trend_png
        out = pathlib.Path(a.output or f"trend-{a.repro}-{a.metric}.png")
        trend_png(points, a.metric, a.repro, out)
        print(f"history: {out}")
    return 0


@answers
def cmd_regressions(a) -> int:
    """`krig history regressions`: PASS -> FAIL between kernels, and the flaky results apart."""
    regs, flakes = query.regressions(open_store())
    if a.active:
        regs = [g for g in regs if g["status"] == "active"]
    print(f"regressions: {len(regs)}")
    if regs:
        print(table([(g["reproducer"], g["sku"], g["threshold"], g["last_passing"], g["first_failing"],
                      g["status"] + (f" in {g['fixed_in']}" if g["fixed_in"] else "")) for g in regs],
                    ("REPRODUCER", "SKU", "THRESHOLD", "LAST PASSING", "FIRST FAILING", "STATUS")))
        for g in regs:
            if g["status"] == "active":
                print(f"  {g['bisect']}")
    print(f"flaky (a verdict that flips on reruns of one kernel, SKU and parameters; not a regression): {len(flakes)}")
    if flakes:
        print(table([(f["reproducer"], f["sku"], f["kernel"], f["pass"], f["fail"]) for f in flakes],
                    ("REPRODUCER", "SKU", "KERNEL", "PASS", "FAIL")))
    return 0


@answers
def cmd_health(a) -> int:
    """`krig history health [-k K] [-m M]`: each server's last runs; unhealthy ones said why."""
    rows = query.health(open_store(), a.k, a.m)
    if not rows:
        print("no runs in the history")
        return 0
    print(table([(h["server"], h["runs"], h["rig_errors"], "UNHEALTHY" if h["unhealthy"] else "ok",
                  (h["last_error"] or "")[:100]) for h in rows],
                ("SERVER", "LAST RUNS", "RIG ERRORS", "HEALTH", "LAST RIG ERROR")))
    return 0


@answers
def cmd_html(a) -> int:
    """`krig history html -o DIR`: the dashboard."""
    from .html import write_dashboard
    index = write_dashboard(open_store(), pathlib.Path(a.output))
    print(f"history: {index}")
    return 0
