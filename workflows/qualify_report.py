"""What `krig qualify` leaves in its directory: suite.json (krig/record_qualify.py), junit.xml, qualify.html,
signoff.txt."""
import os
import pathlib

from analysis.summary import threshold_measurements, threshold_properties

from analysis.report import esc as _esc
from krig import junit
from krig.errors import KrigError
from krig.reproducer import load_reproducer
from krig.record_qualify import CaseRecord, SuiteRecord, write_suite
from krig.results import now
from krig.version import git_revision
from krig.record import read_metrics
from krig.verdict import JUDGED


def write_outputs(qdir: pathlib.Path, suite: dict, done: dict[str, CaseRecord], started: str, complete: bool) -> dict:
    """done: case id -> finished record. Returns {"signoff": [lines], "all_as_expected": bool}."""
    cases = [done.get(c["id"]) or CaseRecord(**c) for c in suite["cases"]]      # not run: verdict None
    signoff = signoff_lines(suite["rigs"], cases)
    all_ok = complete and all(c.ok for c in cases)
    write_suite(qdir, SuiteRecord(suite["name"], suite["file"], suite["description"], git_revision(), started, now(),
                                  complete, all_ok, suite["rigs"], signoff, cases))
    write_junit(qdir / "junit.xml", suite, cases)
    (qdir / "signoff.txt").write_text("".join(line + "\n" for line in signoff))
    (qdir / "qualify.html").write_text(build_html(qdir, suite, cases, signoff))
    return {"signoff": signoff, "all_as_expected": all_ok}


def signoff_lines(rigs: list, cases: list[CaseRecord]) -> list[str]:
    """One line per rig: all as expected, or which runs were not (or have not run yet)."""
    out = []
    for rig in rigs:
        mine = [c for c in cases if c.rig == rig]
        missing = [c for c in mine if c.verdict is None]
        wrong = [c for c in mine if c.verdict is not None and not c.ok]
        if not missing and not wrong:
            counts: dict[str | None, int] = {}      # by verdict (none is missing here)
            for c in mine:
                counts[c.verdict] = counts.get(c.verdict, 0) + 1
            tally = ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))
            out.append(f"rig {rig}: SIGNED OFF: all {len(mine)} runs as expected ({tally})")
            continue
        parts = [f"{c.id} gave {c.verdict}, expected {c.expect}" for c in wrong]
        if missing:
            parts.append(f"{len(missing)} not run yet")
        out.append(f"rig {rig}: NOT SIGNED OFF: {len(wrong) + len(missing)} of {len(mine)} runs not as expected: "
                   + "; ".join(parts))
    return out


def write_junit(path: pathlib.Path, suite: dict, cases: list[CaseRecord]) -> None:
    """One test case per run: a failure when the verdict is not the expected one."""
    out = []
    for c in cases:
        props = [(k, getattr(c, k)) for k in ("reproducer", "preset", "kernel", "rig", "repeat", "expect", "verdict",
                                              "run_dir")] + threshold_property_items(c)
        assert c.id is not None, "every planned case has its id"
        result: tuple[str, str, str | None] | None = None
        if c.verdict is None:
            result = ("skipped", "not run yet (interrupted); run the same command again", None)
        elif not c.ok:
            result = ("failure", f"{c.verdict}, expected {c.expect}", c.reason)
        out.append(junit.Case(f"qualify.{suite['name']}.{c.rig}", c.id, props, result, seconds=c.seconds or 0))
    junit.write(path, f"qualify.{suite['name']}", out,
                [("suite_file", suite["file"]), ("krig_revision", git_revision())],
                seconds=sum(c.seconds or 0 for c in cases))


def threshold_property_items(case: CaseRecord) -> list[tuple[str, str]]:
    """A judged run's thresholds as properties of its test case, the run's own junit.xml's
    per-threshold properties prefixed with the metric: <metric>.value, .unit, .better, .limit,
    .limit_min, .limit_max, .outcome. None for a run that was not judged (its numbers, if any,
    are not measurements)."""
    if case.verdict not in JUDGED or not case.run_dir:
        return []
    try:
        repro = load_reproducer(case.reproducer)
    except KrigError:
        return []
    items: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for m in threshold_measurements(pathlib.Path(case.run_dir), repro):
        t = m["threshold"]
        seen[t.metric] = seen.get(t.metric, 0) + 1
        prefix = t.metric if seen[t.metric] == 1 else f"{t.metric}#{seen[t.metric]}"
        props = threshold_properties(t, m["value"], m["unit"], m["better"])
        props.pop("metric")
        items += [(f"{prefix}.{k}", v) for k, v in props.items()]
        items.append((f"{prefix}.outcome", str(m["outcome"])))
    return items


def key_metric(case: CaseRecord) -> str:
    """The reproducer's key metric (its first threshold's) as measured in the run, or ''."""
    if case.run_dir is None:
        return ""
    try:
        metric = load_reproducer(case.reproducer).thresholds[0].metric
        m = read_metrics(case.run_dir)[metric]
    except (KrigError, OSError, KeyError, IndexError, TypeError):
        return ""
    if m.value is None:
        return f"{metric} not measured"
    return f"{metric} {m.value:.4g} {m.unit}".rstrip()


COLOURS = {True: "#d7f5d7", False: "#f8d0d0", None: "#eeeeee"}


def build_html(qdir: pathlib.Path, suite: dict, cases: list[CaseRecord], signoff: list) -> str:
    """The matrix: a row per (reproducer, preset, parameters, kernel), a column per rig,
    each cell the verdicts of its repeats, each linking its run's report."""
    rows = []
    for c in cases:
        key = (c.reproducer, c.preset, tuple(sorted(c.set.items())), c.kernel)
        if key not in rows:
            rows.append(key)
    body = []
    for key in rows:
        repro, preset, sets, kernel = key
        label = f"{repro} <small>{_esc(preset or 'default')}"
        if sets:
            label += " " + _esc(" ".join(f"{k}={v}" for k, v in sets))
        label += f"</small><br>kernel {_esc(kernel)}"
        cells = [f"<th>{label}</th>"]
        for rig in suite["rigs"]:
            mine = [c for c in cases if c.rig == rig and (c.reproducer, c.preset,
                    tuple(sorted(c.set.items())), c.kernel) == key]
            if not mine:
                cells.append("<td></td>")
                continue
            links = []
            for c in mine:
                ok = None if c.verdict is None else bool(c.ok)
                text = _esc(c.verdict or "not run")
                if c.run_dir:
                    rd = pathlib.Path(c.run_dir)
                    target = rd / "report.html" if (rd / "report.html").exists() else rd
                    text = f'<a href="{_esc(os.path.relpath(target, qdir))}">{text}</a>'
                links.append(f'<span style="background:{COLOURS[ok]};padding:2px 6px" '
                             f'title="{_esc(c.reason)}">{text}</span> <small>{_esc(key_metric(c))}</small>')
            cells.append(f"<td>{' '.join(links)}<br><small>expected {_esc(mine[0].expect)}</small></td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    head = "<tr><th></th>" + "".join(f"<th>{_esc(r)}</th>" for r in suite["rigs"]) + "</tr>"
    sign = "".join(f"<li>{_esc(s)}</li>" for s in signoff)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>krig qualify {_esc(suite['name'])}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #999;padding:6px;text-align:left;vertical-align:top}}</style></head>
<body><h1>Qualification: {_esc(suite['name'])}</h1>
<p>{_esc(suite['description'])}</p>
<p>Suite file {_esc(suite['file'])}; written {_esc(now())}; krig {_esc(git_revision())}</p>
<h2>Sign-off</h2><ul>{sign}</ul>
<h2>Verdicts (each links the run's report; hover for the reason)</h2>
<table>{head}{''.join(body)}</table>
</body></html>
"""
