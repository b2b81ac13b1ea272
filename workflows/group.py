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
import json
import pathlib

from analysis.stats import describe
from analysis.summary import fmt
from kernels.catalog import load_kernel
from rigs import load_rig

from krig import RESULTS_DIR
from krig.config import parse_set
from .argcheck import output_dir
from krig.errors import KrigError, UsageError
from krig.reproducer import load_reproducer
from krig.results import GROUP_FILE, next_group_run, now, read_json, run_dirs_of, run_state, write_json
from krig.results import group_dir as group_dir_of
from krig.rundir import RunDir
from .preflight import before_build
from .run import run
from .session import Session
from krig.verdict import JUDGED, SEVERITY, UNFINISHED, VERDICTS, exit_code


def _same(group: dict, asked: dict, gdir) -> None:
    for field in ("reproducer", "rig", "kernel", "kernel_id", "preset", "params"):
        if group.get(field) != asked[field]:
            have = group.get(field)
            raise UsageError(f"--group {gdir}: the group was made for {field} {have!r}, not {asked[field]!r}")


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
    values, meta = {}, {}
    for d, v, *_ in runs:
        if v not in JUDGED:
            continue
        try:
            metrics = RunDir(d).metrics()
        except (KrigError, OSError):
            continue
        for name, m in metrics.items():
            values.setdefault(name, []).append(m.get("value"))
            meta.setdefault(name, {"unit": m.get("unit", ""), "better": m.get("better", "info")})
    return values, meta


def verdict_counts(runs: list) -> dict:
    counts = {}
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


def _write(gdir, group, runs):
    group["runs"] = [{"dir": d.name, "verdict": v, "counted": v not in UNFINISHED and v != "RUNNING"}
                     for d, v in runs]
    group.update(summarize(runs))
    group["complete"] = group["counted"] >= group["repeat"]
    group["updated"] = now()
    write_json(gdir / GROUP_FILE, group)


def run_group(repro_name, rig_name, kernel_name, preset, sets, repeat: int, group_dir=None,
              results_root: pathlib.Path = RESULTS_DIR, log=print, session=None) -> tuple[pathlib.Path, dict, int]:
    """Returns (group_dir, group.json content, exit code). The runs share one Session
    (workflows/session.py: a lab server stays up between them); session: a caller's own, which
    it closes (a validation's, over both its groups)."""
    if session is None:
        with Session(log) as own:
            return run_group(repro_name, rig_name, kernel_name, preset, sets, repeat, group_dir, results_root,
                             log, own)
    if repeat < 1:
        raise UsageError(f"--repeat: {repeat} is below the minimum 1")
    if group_dir is not None:       # before a kernel is built for it
        gdir = output_dir(group_dir, "--group")
        if gdir.is_dir() and not (gdir / GROUP_FILE).exists() and any(gdir.iterdir()):
            raise UsageError(f"--group {gdir}: not empty and has no {GROUP_FILE}")
    repro = load_reproducer(repro_name)
    rig = load_rig(rig_name)
    params = repro.resolve_params(preset, sets or {}, cpus=rig.host_needs().get("cpus"))
    before_build(rig, repro, results_root, [("--kernel", kernel_name)], preset=preset, params=params)
    kernel = load_kernel(kernel_name, build=True, log=log)
    asked = {"reproducer": repro.name, "rig": rig.name, "kernel": kernel_name, "kernel_id": kernel.kernel_id,
             "preset": preset, "params": json.loads(json.dumps(params, default=str))}
    if group_dir is None:
        gdir = group_dir_of(results_root, repro.name, kernel.kernel_id, rig.name)
    else:
        gdir = pathlib.Path(group_dir)
    gfile = gdir / GROUP_FILE
    if gfile.exists():
        try:
            group = read_json(gfile)
        except UsageError as e:
            raise UsageError(f"--group {gdir}: {GROUP_FILE}: {str(e).rsplit(': ', 1)[-1]}") from None
        if not isinstance(group, dict):
            raise UsageError(f"--group {gdir}: {GROUP_FILE} is not a JSON object")
        _same(group, asked, gdir)
    elif gdir.exists() and any(gdir.iterdir()):
        raise UsageError(f"--group {gdir}: not empty and has no {GROUP_FILE}")
    else:
        gdir.mkdir(parents=True, exist_ok=True)
        group = {"kind": "krig-group", **asked, "series": kernel.series, "created": now()}
    group["repeat"] = repeat
    runs = group_runs(gdir)
    busy = [d.name for d, v in runs if v == "RUNNING"]
    if busy:
        raise UsageError(f"--group {gdir}: {', '.join(busy)} still running; continue the group when it ends")
    _write(gdir, group, runs)
    log(f"krig: group {gdir}: {group['counted']} of {repeat} runs done")
    try:
        while group["counted"] < repeat:
            run_dir = next_group_run(gdir, [d for d, _ in runs])
            log(f"krig: group run {group['counted'] + 1} of {repeat} -> {run_dir}")
            d, verdict = run(repro_name, rig_name, kernel_name, preset, sets, results_root=results_root,
                             log=log, run_dir=run_dir, session=session)
            log(f"krig: {d.name}: {verdict['verdict']}: {verdict['reason']}")
            runs = group_runs(gdir)
            _write(gdir, group, runs)
            if verdict["verdict"] == "INTERRUPTED":
                raise KeyboardInterrupt
    finally:
        runs = group_runs(gdir)
        _write(gdir, group, runs)
    return gdir, group, group_exit(group["verdicts"])


def format_group(gdir: pathlib.Path, group: dict, width: int = 100) -> str:
    """The group's verdict counts and, per metric, n, median, min-max (text, <= width columns)."""
    lines = [f"group: {verdict_text(group['verdicts'], group['counted'])}"
             + ("" if group["complete"] else f" (incomplete: {group['counted']} of {group['repeat']} runs)"),
             f"{'metric':34s} {'n':>3s} {'median':>12s} {'min':>12s} {'max':>12s}  unit"]
    for name, s in group["metrics"].items():
        if s["n"] == 0:
            lines.append(f"{name[:34]:34s} {0:3d} {'-':>12s}")
            continue
        lines.append(f"{name[:34]:34s} {s['n']:3d} {fmt(s['median']):>12s} {fmt(s['min']):>12s} "
                     f"{fmt(s['max']):>12s}  {s['unit']}"[:width])
    lines.append(f"group: {gdir}")
    return "\n".join(lines)


def cmd_run(a) -> int:
    """`krig run`: one run, or a group with --repeat or --group."""
    if a.repeat is not None or a.group:
        gdir, group, code = run_group(a.reproducer, a.rig, a.kernel, a.preset, parse_set(a.set),
                                      1 if a.repeat is None else a.repeat, a.group)
        print(format_group(gdir, group))
        return code
    run_dir, verdict = run(a.reproducer, a.rig, a.kernel, a.preset, parse_set(a.set))
    print(f"{verdict['verdict']}: {verdict['reason']}")
    print(f"results: {run_dir}")
    return exit_code(verdict["verdict"])
