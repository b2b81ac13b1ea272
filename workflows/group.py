"""`krig run ... --repeat N`: N runs of one reproducer, kernel, rig and parameters as a group.

A group is a directory holding run-01/, run-02/, ... (ordinary run directories)
and group.json: what was asked (reproducer, rig, kernel, preset, the resolved
parameters), every run with its verdict, the verdict counts and, per metric,
n, median, min and max over the judged runs (PASS or FAIL: an ERROR run's
numbers may come from a broken instrument, so they are listed, not counted).

Resumable: `krig run ... --repeat N --group DIR` on an existing group checks
that it was made for the same reproducer, rig, kernel, preset and parameters
(a mismatch is one line, exit 2), keeps every finished run and only runs what
is missing. A run that was interrupted or killed (INTERRUPTED, INCOMPLETE)
stays in the directory, listed as not counted, and a new run takes its place.
group.json is rewritten after every run, so an interrupted group loses nothing.
"""
import dataclasses
import json
import pathlib

from analysis.stats import describe
from analysis.summary import fmt

from krig import RESULTS_DIR
from krig.config import parse_set
from krig.knobs import Knobs, parse as parse_knobs
from .argcheck import output_dir
from krig.errors import KrigError, UsageError
from krig.safeio import printable_text
from krig.record_group import GroupRecord, read_group, write_group
from krig.results import GROUP_FILE, next_group_run, now, run_dirs_of, run_state
from krig.results import group_dir as group_dir_of
from krig.record import read_metrics
from .plan import RunPlan, plan_run
from .run import execute, run
from .session import Session
from krig.verdict import JUDGED, SEVERITY, UNFINISHED, VERDICTS, exit_code


def _same(group: GroupRecord, asked: GroupRecord, gdir) -> None:
    for field in GroupRecord.ASKED:
        have, want = getattr(group, field), getattr(asked, field)
        if have != want:
            raise UsageError(f"--group {gdir}: the group was made for {field} {have!r}, not {want!r}")


def group_runs(gdir: pathlib.Path, judged_only: bool = False) -> list:
    """The run directories of a group (every run-* directory, so a run missing from group.json counts)."""
    out = []
    for d in run_dirs_of(gdir):
        state = run_state(d)
        if judged_only and state not in JUDGED:
            continue
        out.append((d, state))
    return out


def metric_values(runs: list) -> tuple[dict, dict]:
    """runs: [(run_dir, verdict, ...)] -> ({metric: [values of the judged runs]}, {metric: {unit, better}})."""
    values: dict[str, list] = {}
    meta: dict[str, dict] = {}
    for d, v, *_ in runs:
        if v not in JUDGED:
            continue
        try:
            metrics = read_metrics(d)
        except (KrigError, OSError):
            continue
        for name, m in metrics.items():
            values.setdefault(name, []).append(m.value)
            meta.setdefault(name, {"unit": m.unit, "better": m.better})
    return values, meta


def verdict_counts(runs: list) -> dict:
    counts: dict[str, int] = {}
    for _, v, *_ in runs:
        if v not in UNFINISHED:
            counts[v] = counts.get(v, 0) + 1
    return counts


def summarize(runs: list) -> dict:
    """runs: [(run_dir, verdict)] -> verdict counts and per-metric n/median/min/max of the judged runs."""
    counts = verdict_counts(runs)
    values, meta = metric_values(runs)
    stats = {n: {**describe(vals), **meta[n]} for n, vals in values.items()}
    return {"counted": sum(counts.values()), "verdicts": counts, "metrics": stats}


def verdict_text(counts: dict, total: int) -> str:
    """'FAIL 5/5' or 'PASS 3/5, ERROR 2/5'."""
    order = sorted(counts, key=lambda v: (-counts[v], list(VERDICTS).index(v)))
    return ", ".join(f"{v} {counts[v]}/{total}" for v in order) or "no runs"


def group_exit(counts: dict) -> int:
    for v in SEVERITY:
        if counts.get(v):
            return exit_code(v)
    return exit_code("ERROR")


def _write(gdir, group: GroupRecord, runs):
    group.runs = [{"dir": d.name, "verdict": v, "counted": v not in UNFINISHED and v != "RUNNING"} for d, v in runs]
    s = summarize(runs)
    group.counted, group.verdicts, group.metrics = s["counted"], s["verdicts"], s["metrics"]
    group.complete = group.counted >= group.repeat
    group.updated = now()
    write_group(gdir, group)


def run_group(repro_name, rig_name, kernel_name, preset, sets, repeat: int, group_dir=None,
              results_root: pathlib.Path = RESULTS_DIR, log=print,
              knobs: Knobs = Knobs()) -> tuple[pathlib.Path, GroupRecord, int]:
    """Returns (group_dir, its GroupRecord: group.json, exit code)."""
    _check_group_args(repeat, group_dir)        # before a kernel is built for it
    plan = plan_run(repro_name, rig_name, kernel_name, preset, sets, results_root, log, knobs=knobs)
    return group_planned(plan, repeat, group_dir, results_root, log)


def _check_group_args(repeat: int, group_dir) -> None:
    if repeat < 1:
        raise UsageError(f"--repeat: {repeat} is below the minimum 1")
    if group_dir is not None:
        gdir = output_dir(group_dir, "--group")
        if gdir.is_dir() and not (gdir / GROUP_FILE).exists() and any(gdir.iterdir()):
            raise UsageError(f"--group {gdir}: not empty and has no {GROUP_FILE}")


def group_planned(plan: RunPlan, repeat: int, group_dir=None, results_root: pathlib.Path = RESULTS_DIR,
                  log=print, session: Session | None = None) -> tuple[pathlib.Path, GroupRecord, int]:
    """The group of a plan (workflows/plan.py: its kernel built once): runs until `repeat` are
    counted, the host checked again before each. Returns (group_dir, its GroupRecord, exit code).
    The runs share one Session (workflows/session.py: a lab server stays up between them);
    session: a caller's own, which it closes (a validation's, over both its sides)."""
    if session is None:
        with Session(log) as own:
            return group_planned(plan, repeat, group_dir, results_root, log, own)
    _check_group_args(repeat, group_dir)
    repro, rig, kernel = plan.repro, plan.rig, plan.kernel
    assert kernel is not None, "a group runs a plan whose kernel is built (RunPlan.with_kernel)"
    asked = GroupRecord(repro.name, rig.name, plan.kernel_arg, kernel.kernel_id, plan.preset,
                        json.loads(json.dumps(plan.params, default=str)), kernel.series,
                        plan.knobs.to_json() if plan.knobs else None)
    if group_dir is None:
        gdir = group_dir_of(results_root, repro.name, kernel.kernel_id, rig.name)
    else:
        gdir = pathlib.Path(group_dir)
    if (gdir / GROUP_FILE).exists():
        group = read_group(gdir)
        _same(group, asked, gdir)
    elif gdir.exists() and any(gdir.iterdir()):
        raise UsageError(f"--group {gdir}: not empty and has no {GROUP_FILE}")
    else:
        gdir.mkdir(parents=True, exist_ok=True)
        group = dataclasses.replace(asked, created=now())
    group.repeat = repeat
    runs = group_runs(gdir)
    busy = [d.name for d, v in runs if v == "RUNNING"]
    if busy:
        raise UsageError(f"--group {gdir}: {', '.join(busy)} still running; continue the group when it ends")
    _write(gdir, group, runs)
    log(f"krig: group {gdir}: {group.counted} of {repeat} runs done")
    try:
        while group.counted < repeat:
            run_dir = next_group_run(gdir, [d for d, _ in runs])
            log(f"krig: group run {group.counted + 1} of {repeat} -> {run_dir}")
            d, verdict = execute(plan.rechecked(results_root), results_root, log, run_dir, session)
            log(printable_text(f"krig: {d.name}: {verdict.verdict}: {verdict.reason}"))
            runs = group_runs(gdir)
            _write(gdir, group, runs)
            if verdict.verdict == "INTERRUPTED":
                raise KeyboardInterrupt
    finally:
        runs = group_runs(gdir)
        _write(gdir, group, runs)
    return gdir, group, group_exit(group.verdicts)


def format_group(gdir: pathlib.Path, group: GroupRecord, width: int = 100) -> str:
    """The group's verdict counts and, per metric, n, median, min-max (text, <= width columns)."""
    lines = [f"group: {verdict_text(group.verdicts, group.counted)}"
             + ("" if group.complete else f" (incomplete: {group.counted} of {group.repeat} runs)"),
             f"{'metric':34s} {'n':>3s} {'median':>12s} {'min':>12s} {'max':>12s}  unit"]
    for name, s in group.metrics.items():
        if s["n"] == 0:
            lines.append(f"{name[:34]:34s} {0:3d} {'-':>12s}")
            continue
        lines.append(f"{name[:34]:34s} {s['n']:3d} {fmt(s['median']):>12s} {fmt(s['min']):>12s} "
                     f"{fmt(s['max']):>12s}  {s['unit']}"[:width])
    lines.append(f"group: {gdir}")
    return "\n".join(lines)


def cmd_run(a) -> int:
    """`krig run`: one run, or a group with --repeat or --group."""
    knobs = parse_knobs(a.sysctl, a.cmdline)
    if a.repeat is not None or a.group:
        gdir, group, code = run_group(a.reproducer, a.rig, a.kernel, a.preset, parse_set(a.set),
                                      1 if a.repeat is None else a.repeat, a.group, knobs=knobs)
        print(format_group(gdir, group))
        return code
    run_dir, verdict = run(a.reproducer, a.rig, a.kernel, a.preset, parse_set(a.set), knobs=knobs)
    print(printable_text(f"{verdict.verdict}: {verdict.reason}"))
    print(f"results: {run_dir}")
    assert verdict.verdict is not None      # run() judged it
    return exit_code(verdict.verdict)
