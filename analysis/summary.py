"""summary.txt: a run for a mailing list. ASCII, at most 72 columns, numbers
as in metrics.json (6 significant digits), and the one command that
reproduces the run."""
import math
import textwrap
from typing import TypeGuard

from krig.asked import AskedRun
from krig.knobs import summary as knob_summary
from krig.errors import UsageError
from krig.record import Manifest, MetricEntry, RunRecord, Verdict, read_metrics, read_thresholds
from krig.rundir import RunDir
from krig.verdict import host_contended

from .projection import text_lines

WIDTH = 72


def fmt(v) -> str:
    """A metric value as summary.txt and report.html print it."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    v = float(v)
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.6g}"


def gib(n) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n else "?"


def threshold_outcomes(run, repro) -> dict:
    """threshold id -> the judge's outcome as the run's thresholds.json records it: "pass",
    "fail", "unmeasured", "instrument", or "error" (the judge itself broke); "contended" for a
    timing (host_sensitive) threshold crossed while the run's host was contended (the verdict
    rule's host_contended_pct limit): the host moved it, so no reader counts it as the kernel's.
    The judge records "contended" itself; a run judged by an older krig has "fail" there, read
    the same way. {} if not judged. run: a RunDir (or a run directory's path)."""
    run = RunDir.of(run)
    try:
        judged = read_thresholds(run)
    except UsageError:
        return {}
    ids = {threshold_id(t): t for t in repro.thresholds}
    out = {k: v.outcome for k, v in judged.items() if k in ids}
    timing = [k for k, o in out.items() if o == "fail" and ids[k].host_sensitive]
    if timing:
        try:
            pct = read_metrics(run).get("host_contended_pct", MetricEntry(None)).value
        except (UsageError, OSError):
            pct = None
        if isinstance(pct, (int, float)) and host_contended(float(pct)):
            out.update({k: "contended" for k in timing})
    return out


def threshold_results(run, repro) -> dict:
    """threshold id -> True (held) / False (crossed or not judged), as the judge recorded it
    (thresholds.json), without the timing crossings the host's contention made; {} if not judged."""
    return {k: o == "pass" for k, o in threshold_outcomes(run, repro).items() if o != "contended"}


def threshold_tag(outcome: str | None) -> str:
    """How summary.txt and report.html name a threshold's outcome."""
    tags: dict[str | None, str] = {"pass": "held", "fail": "CROSSED", "contended": "crossed, host contended"}
    return tags.get(outcome, "not judged")


def threshold_measurements(run, repro) -> list[dict]:
    """Per threshold of the reproducer: the threshold, its metric's value, unit and better
    direction (metrics.json) and the judge's outcome (thresholds.json; None if not judged). Only a
    judged run's (PASS or FAIL) numbers are measurements; the caller checks the verdict. run: a
    RunDir (or a run directory's path)."""
    run = RunDir.of(run)
    try:
        metrics = read_metrics(run)
    except UsageError:
        metrics = {}
    outcomes = threshold_outcomes(run, repro)
    out = []
    for t in repro.thresholds:
        m = metrics.get(t.metric) or MetricEntry(None)
        value = m.value
        out.append({"threshold": t, "value": None if not _finite(value) else float(value),
                    "unit": m.unit, "better": m.better,
                    "outcome": outcomes.get(threshold_id(t))})
    return out


def threshold_properties(t, value, unit: str, better: str) -> dict:
    """A threshold's measurement as JUnit <properties> (what a CI dashboard plots): the value
    (left out when it was not measured), unit, better direction and the limit, as text
    (">= 0.5") and as numbers (limit_min, limit_max)."""
    props = {"metric": t.metric}
    if _finite(value):
        props["value"] = repr(float(value))
    props.update(unit=unit, better=better, limit=t.describe())
    if t.min is not None:
        props["limit_min"] = repr(float(t.min))
    if t.max is not None:
        props["limit_max"] = repr(float(t.max))
    return props


def _finite(v) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def threshold_id(t) -> str:
    return f"{t.metric} {t.describe()}"


def reproduce_argv(manifest: Manifest, repro) -> list[str]:
    """`krig run ...` with the rig, kernel, preset and every parameter the preset does not give."""
    return AskedRun.from_manifest(manifest, repro).argv()


def wrap_command(argv: list[str], indent: str = "  ") -> list[str]:
    lines, cur = [], indent
    for a in argv:
        add = a if cur.strip() == "" else " " + a
        if len(cur) + len(add) > WIDTH - 2 and cur.strip():
            lines.append(cur + " \\")
            cur = indent + "    " + a
        else:
            cur += add
    lines.append(cur)
    return lines


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=True, break_on_hyphens=False) or [indent.rstrip()]


def _or(value, default):
    """A recorded fact, or `default` when the manifest has none (as summary.txt says it)."""
    return default if value is None else value


def ascii_only(s: str) -> str:
    return s.encode("ascii", "replace").decode("ascii")


def build_summary(rec: RunRecord, verdict: Verdict, metrics: dict[str, MetricEntry], repro, proj=None) -> str:
    m, run = rec.manifest, rec.run
    k, rig, facts = m.kernel, m.rig, m.rig_facts or {}
    out = [f"krig {repro.name}: {verdict.verdict or '?'}"]
    out += _wrap(f"reason: {verdict.reason}")
    out.append("")
    out += _wrap(f"kernel: {m.release or '?'} ({_or(k.name, '?')}: {_or(k.description, '')})")
    out += _wrap(f"machine: {_or(m.cpus, '?')} CPUs, {gib(m.mem_total_bytes)} "
                 f"RAM (MemTotal), rig {_or(rig.name, '?')} ({_or(rig.kind, '?')}"
                 f"{', ' + facts['accel'] if facts.get('accel') else ''})")
    params = " ".join(f"{a}={b}" for a, b in (m.params or {}).items())
    out += _wrap(f"preset: {m.preset or '(defaults)'}; params: {params}")
    if m.knobs:
        out += _wrap(f"knobs: {'; '.join(knob_summary(m.knobs))}")
    if repro.fixed_by:
        out += _wrap(f"fixed by: {repro.fixed_by}")
    if metrics:
        out += ["", "metrics:"]
        for name, v in metrics.items():
            line = f"  {name} = {fmt(v.value)} {v.unit}".rstrip()
            out += [line] if len(line) <= WIDTH else [f"  {name} =", f"    {fmt(v.value)} {v.unit}"]
    judged = threshold_outcomes(run, repro)
    if repro.thresholds:
        out += ["", "thresholds:"]
        for t in repro.thresholds:
            outcome = judged.get(threshold_id(t))
            v = metrics.get(t.metric) or MetricEntry(None)
            out += _wrap(f"{threshold_tag(outcome)}: {t.metric} = {fmt(v.value)} {v.unit}, "
                         f"limit {t.describe()}", "  ")
            if outcome not in (None, "pass"):
                out += _wrap(t.rationale, "    ")
    if proj:
        out += ["", "projection to other machines (not a measurement):"]
        out += _wrap(proj["basis"] + ".", "  ")
        out += ["  " + line for line in text_lines(proj)]
    times = sorted(p.name for p in rec.dir.glob("*.time"))
    if run.exists("time.txt"):
        times.insert(0, "time.txt")
    if times:
        out += ["", "/usr/bin/time:"]
        for name in times:
            try:
                body = " ".join(run.read_bytes(name, cap=1 << 20).decode(errors="replace").split())
            except UsageError as e:
                body = str(e)
            out += _wrap(f"{name}: {body}", "  ")
    out += ["", "reproduce (from a krig checkout, after `make setup`):"]
    text = [ascii_only(line)[:WIDTH] for line in out]
    # a command is never cut: an argument longer than the width (a rig file's path) stays whole
    text += [ascii_only(line) for line in wrap_command(reproduce_argv(m, repro))]
    return "\n".join(text) + "\n"
