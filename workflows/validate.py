"""`krig validate REPRO --base KERNEL --series MBOX`: does this series fix it, on this machine?

Builds the base kernel and base + series (kernels/derived.py, kernels/series.py; cached
like every built kernel), runs the reproducer on them alternately, N runs each (two
groups, workflows/group.py: base/ and new/ in the validation directory), compares them
(workflows/compare.py) and answers one of:

    fixed                   0  every base run FAILs, every patched run PASSes, and each metric
                               of a threshold the base crossed changes significantly in the
                               better direction (with fewer than 4 runs a side no test can be
                               significant: the answer then rests on the verdicts and says so)
    not fixed               1  the base FAILs and so does every patched run
    (bad input)             2  one line naming the field; nothing ran
    inconclusive            3  runs that were not judged (ERROR, SKIP, ...), mixed verdicts, or
                               verdicts that flip with metrics that do not move significantly
    base does not reproduce 4  the base must FAIL first; it PASSed (the validation stops after
                               the first run a side when the base PASSed and so did the patched
                               kernel, none having FAILed)
    regressed               5  a threshold the base held is crossed with the series (a base that
                               PASSes included: the series brings the regression), or the
                               patched kernel crashed or hung where the base did not
    (interrupted)         130  Ctrl-C: the same command finishes it

Resumable: the validation directory (default results/validate/<repro>-<patchset>-<key>/,
the key a hash of everything asked) keeps both groups; the same command keeps every
finished run and runs what is missing. validate.json holds the answer, reply.mbox and
reply.txt the mail (workflows/reply.py).
"""
import dataclasses
import hashlib
import json
import pathlib

from kernels.catalog import series_refusal
from kernels.given import parse as parse_kernel
from kernels.series import load_series, series_source

from krig import DEFAULT_RIG
from .argcheck import output_dir
from krig.asked import AskedRun
from .compare import KNOB_FACT, compare
from krig.config import parse_set
from krig.knobs import SIDES, Knobs, series_knobs, sides as knob_sides
from krig.errors import KrigError, UsageError
from krig.safeio import printable_text
from .group import group_planned, group_runs
from .plan import RunPlan, resolve
from .preflight import check_boots, rig_ready
from krig.record_compare import Comparison, MetricRow
from krig.record_group import GroupRecord, read_group
from krig.record_machine import Machine
from krig.record_validation import ServerFacts, SideKernel, ValidationRecord, read_validation, write_validation
from krig.verdict import UNFINISHED as NOT_COUNTED
from .reply import identity, server_line, write_reply
from .session import Session
from krig.reproducer import load_reproducer
from krig.results import VALIDATE_FILE, VALIDATE_SIDES, now, run_dirs_of, validation_dir, validation_side
from krig.record import RunRecord
from krig.version import git_revision, version

ANSWERS = {"fixed": 0, "not fixed": 1, "inconclusive": 3, "base does not reproduce": 4, "regressed": 5}
DEFAULT_REPEAT = 4
NOT_JUDGED = ("ERROR", "SKIP", "INCOMPLETE", "HUNG", "CRASHED")


def contended(gdir: pathlib.Path) -> list:
    """The group's runs that ended ERROR on host contention (the host, not the kernel, moved them)."""
    out = []
    for d, v in group_runs(gdir) if gdir.is_dir() else []:
        if v == "ERROR":
            try:
                verdict = RunRecord.read(d, required=False).verdict
            except (OSError, KrigError):
                continue
            # the verdict's cause, never its sentence (a verdict from before causes were recorded
            # has none: `krig check` on the run records it)
            if verdict is not None and verdict.cause == "host-contention":
                out.append(d)
    return out


def _run_side(plan: RunPlan, want: int, repeat: int, gdir: pathlib.Path, log,
              session: Session) -> GroupRecord:
    """Runs the side's plan until it has `want` runs besides those lost to host contention, which
    are replaced up to `repeat` times (a shared host under TCG; the verdict rule calls them ERROR)."""
    while True:
        runs = [(d, v) for d, v in group_runs(gdir) if v not in NOT_COUNTED] if gdir.is_dir() else []
        lost = len(contended(gdir))
        if len(runs) - lost >= want or lost > repeat:
            return read_group(gdir)
        if lost:
            log(f"krig: {lost} run(s) in {gdir.name} lost to host contention; running another")
        group_planned(plan, len(runs) + 1, gdir, log=log, session=session)


def decide(res: Comparison, judged_metrics: list, replaced: dict | None = None) -> tuple[str, str]:
    """A comparison (workflows.compare.compare) -> (answer, the reason in one sentence).

    replaced: {"base": k, "new": k}: ERROR runs lost to host contention that were run again;
    they are left out of the counts (the rest of the side was judged without them)."""
    b, n = dict(res.base.verdicts), dict(res.new.verdicts)
    for side, counts in (("base", b), ("new", n)):
        k = min((replaced or {}).get(side, 0), counts.get("ERROR", 0))
        if k:
            counts["ERROR"] -= k
            if not counts["ERROR"]:
                del counts["ERROR"]
    nb, nn = sum(b.values()), sum(n.values())
    broke = {v: n.get(v, 0) for v in ("CRASHED", "HUNG") if n.get(v) and not b.get(v)}
    if broke:
        what = " and ".join(f"{v} in {k} of {nn}" for v, k in broke.items())
        return "regressed", f"the patched kernel {what} runs, the base in none"
    unjudged = [f"{side} {v} {counts[v]}/{total}" for side, counts, total in (("base", b, nb), ("patched", n, nn))
                for v in NOT_JUDGED if counts.get(v)]
    if unjudged:
        return "inconclusive", f"runs that were not judged: {', '.join(unjudged)}"
    if not nb or not nn:
        return "inconclusive", "too few judged runs (none on one side)"
    only_new = [t for t in res.thresholds if t.kind == "regression" and t.base.state == "held"
                and t.new.judged and t.new.held < t.new.judged]
    if only_new and not (b.get("FAIL") and b.get("PASS")):
        t = only_new[0]
        return "regressed", (f"{t.threshold} is crossed with the series in {t.new.judged - t.new.held}"
                             f" of {t.new.judged} runs and held in every base run")
    if not b.get("FAIL"):
        return "base does not reproduce", (f"the base kernel PASSed {b.get('PASS', 0)} of {nb} runs: there is "
                                           "nothing for the series to fix")
    if b.get("PASS"):
        return "inconclusive", f"mixed verdicts on the base (FAIL {b['FAIL']}/{nb}, PASS {b['PASS']}/{nb})"
    if n.get("PASS") == nn:
        rows = [r for r in res.metrics if r.metric in judged_metrics]
        if rows and not any(r.reachable for r in rows):
            return "fixed", (f"every base run FAILed and every patched run PASSed ({nb} vs {nn} runs: too few "
                             "for any change to be significant, so this rests on the verdicts)")
        weak = [r for r in rows if not (r.significant and _better(r))]
        if weak:
            r = weak[0]
            p = "-" if r.p is None else f"{r.p:.3f}"
            return "inconclusive", (f"the verdicts flip, but {r.metric} does not change significantly "
                                    f"for the better (p = {p})")
        ps = ", ".join(f"{r.metric} p = {r.p:.3f}" for r in rows)
        return "fixed", f"every base run FAILed, every patched run PASSed, and {ps}"
    if n.get("FAIL") == nn:
        return "not fixed", f"the patched kernel FAILs like the base ({nn} of {nn} runs)"
    return "inconclusive", f"mixed verdicts with the series (FAIL {n.get('FAIL', 0)}/{nn}, PASS {n.get('PASS', 0)}/{nn})"


def _better(row: MetricRow) -> bool:
    """The median moved in the metric's better direction (also from a base median of 0)."""
    b, n = row.base.median, row.new.median
    if b is None or n is None or b == n or row.better not in ("lower", "higher"):
        return False
    return (n < b) == (row.better == "lower")


def judged_metrics(res: Comparison) -> list:
    """The metrics that must move for "fixed": those of the regression thresholds the base
    crossed (else of every regression threshold), without the timing ones a busy host moves
    (host_sensitive in repro.toml) when a threshold the host cannot move was crossed too."""
    timing = load_reproducer(res.reproducer).timing_metrics
    rows = [t for t in res.thresholds if t.kind == "regression"]
    crossed = [t.metric for t in rows if t.base.state in ("crossed", "mixed")]
    solid = [m for m in crossed if m not in timing]
    return list(dict.fromkeys(solid or crossed or [t.metric for t in rows]))


def _check_base(base: str):
    """--base as krig can build it with a series (checked before the series is read or fetched)."""
    g = parse_kernel(base, "--base")
    why = series_refusal(g)
    if why:
        raise UsageError(f"--base {base}: {why}")
    if "series" in g.opts:
        raise UsageError(f"--base {base}: series= goes in --series, not in the base")
    return g


def _base_text(base: str, series: dict) -> str:
    """TREE@ (no ref) is the series' base-commit: spelled out, so both sides name one commit."""
    g = _check_base(base)
    if g.unpinned():
        commit = series["provenance"]["base_commit"]
        if not commit:
            raise UsageError(f"--base {base}: TREE@ takes the series' base-commit, and the series has no "
                             "base-commit: line (give TREE@REF)")
        return g.pinned(commit)
    return base


def validate(repro_name: str, base: str, series_path: str | None, repeat: int = DEFAULT_REPEAT, rig_name=DEFAULT_RIG,
             preset=None, sets=(), out=None, sender=None,
             log=print, knobs: dict | None = None) -> tuple[pathlib.Path, ValidationRecord, int]:
    """knobs: {"base": Knobs, "series": Knobs} (krig/knobs.py sides); without a series, a knob-only
    A/B: the base kernel on both sides, the sides differing in their knobs only."""
    knobs = knobs or {side: Knobs() for side in SIDES}
    if repeat < 1:
        raise UsageError(f"--repeat: {repeat} is below the minimum 1")
    if series_path is None and knobs["base"] == knobs["series"]:
        raise UsageError("--series: required, unless the sides differ in their knobs only (a knob-only A/B: "
                         "--series-sysctl NAME=VALUE or --series-cmdline ARG on --base's kernel)")
    if out is not None:
        output_dir(out, "-o")
    plan = resolve(repro_name, rig_name, preset, parse_set(list(sets)))
    repro, rig, params = plan.repro, plan.rig, plan.params
    if series_path is not None:
        _check_base(base)
    check_boots(rig, [("--base", base)])         # a rig that cannot boot what is built: before the series is read
    rig_ready(rig)                               # a lab server's host key pinned (rigs/check.py)
    for side in SIDES:
        plan.with_knobs(knobs[side])         # a boot parameter on a rig that boots its installed kernel
    who = identity(sender)
    said: list[str] = []                          # the series' line, said once (the build reads it again)
    source, series, base_text, new_text = _the_series(series_path, base, knobs, said, log)
    asked = {"reproducer": repro.name, "base": base_text, "series": source, "rig": rig.name,
             "preset": preset, "params": json.loads(json.dumps(params, default=str))}
    if any(knobs.values()):                      # a validation without knobs keeps its key
        asked["knobs"] = {side: knobs[side].words() for side in SIDES}
    phash = series["provenance"]["patchset_hash"]
    key = hashlib.sha256(json.dumps({**asked, "patchset": phash}, sort_keys=True).encode()).hexdigest()[:8]
    vdir = pathlib.Path(out) if out else validation_dir(repro.name, phash or "knobs", key)
    made = _made(vdir, asked)
    log(f"krig: validating {len(series['patches'])} patch(es) {series['provenance']['subject']!r} on {base_text}"
        f" with {repro.name}, {repeat} run(s) a side -> {vdir}")
    plan = plan.checked(vdir, [("--base", base_text), ("--series", new_text)])
    # the patched kernel first: a series that does not apply stops here, before any long build
    def quiet(m, *a, **k):          # the series' line was said already
        if m not in said:
            log(m, *a, **k)
    sides = {"new": plan.with_kernel(new_text, quiet).with_knobs(knobs["series"])}
    sides["base"] = plan.with_kernel(base_text, quiet).with_knobs(knobs["base"])
    vdir.mkdir(parents=True, exist_ok=True)      # the kernels exist: the validation starts
    state = _started(made, asked, repeat, series)
    write_validation(vdir, state)
    stopped = None
    with Session(log) as session:       # the server stays up from one side's run to the other's
        for i in range(1, repeat + 1):
            bgroup = _run_side(sides["base"], i, repeat, validation_side(vdir, "base"), log, session)
            ngroup = _run_side(sides["new"], i, repeat, validation_side(vdir, "new"), log, session)
            if i == 1 and not bgroup.verdicts.get("FAIL") and bgroup.verdicts.get("PASS") \
                    and not ngroup.verdicts.get("FAIL"):
                stopped = bgroup
                log("krig: the base kernel PASSed, and so did the patched one: the base does not reproduce the "
                    "regression; stopping")
                break
    if stopped:
        res = None
        answer, reason = "base does not reproduce", ("the base kernel PASSed its first run: there is nothing "
                                                     "for the series to fix (the base must FAIL first)")
        judged, differences = [], []
    else:
        res = compare(*([str(validation_side(vdir, side))] for side in VALIDATE_SIDES))
        judged = judged_metrics(res)
        lost = {side: len(contended(validation_side(vdir, side))) for side in VALIDATE_SIDES}
        answer, reason = decide(res, judged, {k: v if v <= repeat else 0 for k, v in lost.items()})
        # the knobs each side was asked for are what it tests, not what makes it incomparable
        differences = [d for d in res.differences if not d.startswith(KNOB_FACT)]
    base_kernel = _kernel_of(validation_side(vdir, "base"))
    state = dataclasses.replace(
        state, answer=answer, reason=reason, judged_metrics=judged, finished=now(),
        base_kernel=base_kernel, new_kernel=_kernel_of(validation_side(vdir, "new")),
        server=server_facts(base_kernel), differences=differences,
        command=AskedRun(repro.name, rig.name, base, preset, tuple(sets)).validate_argv(
            series_path, repeat if repeat != DEFAULT_REPEAT else None, sides=_knob_args(knobs)),
        comparison=res)
    write_validation(vdir, state)
    write_reply(vdir, state, res, who)
    return vdir, state, ANSWERS[answer]


def _the_series(series_path: str | None, base: str, knobs: dict, said: list, log) -> tuple:
    """(the series' source, the series, the base and the patched kernel as krig builds them); the
    knobs a series adds said in one line each. No series: a knob-only A/B, one kernel."""
    if series_path is None:
        return None, knob_series(knobs), base, base
    source = series_source(series_path)          # a Message-ID, or the mbox's full path
    def tell(m: str, *a, **k) -> None:
        said.append(m)
        log(m, *a, **k)
    series = load_series(source, "--series", tell)
    for line in series_knobs(_texts(series["patches"])):
        log(f"krig: {line}")
    base_text = _base_text(base, series)
    return source, series, base_text, f"{base_text},series={source}"


def _made(vdir: pathlib.Path, asked: dict) -> ValidationRecord | None:
    """The validation already in vdir (None: a new one); one made for anything else is refused."""
    made = read_validation(vdir, "-o") if (vdir / VALIDATE_FILE).exists() else None
    for field, value in {"knobs": None, **asked}.items():
        if made is not None and getattr(made, field) != value:
            raise UsageError(f"-o {vdir}: the validation was made for {field} {getattr(made, field)!r}, not {value!r}")
    return made


def _texts(paths) -> list:
    """The patches' text (a patch that cannot be read adds no knob line)."""
    out = []
    for p in paths:
        try:
            out.append(pathlib.Path(p).read_text(errors="replace"))
        except OSError:
            pass
    return out


def knob_series(knobs: dict) -> dict:
    """What stands for the series in a knob-only A/B: no patch; the knobs of the patched side."""
    words = knobs["series"].words() + [f"base {w}" for w in knobs["base"].words()]
    subject = "knobs: " + ", ".join(words)
    return {"provenance": {"subject": subject, "patchset_hash": None, "base_commit": None, "message_id": None},
            "patches": [], "reply_subject": subject, "patch_subjects": []}


def _knob_args(knobs: dict) -> list:
    """The options that ask for each side's knobs again (the validation's command)."""
    both = Knobs(tuple(p for p in knobs["base"].sysctl if p in knobs["series"].sysctl),
                 tuple(a for a in knobs["base"].cmdline if a in knobs["series"].cmdline))
    own = {side: Knobs(tuple(p for p in k.sysctl if p not in both.sysctl),
                       tuple(a for a in k.cmdline if a not in both.cmdline)) for side, k in knobs.items()}
    return both.args() + own["series"].args("series-") + own["base"].args("base-")


def _started(made: ValidationRecord | None, asked: dict, repeat: int, series: dict) -> ValidationRecord:
    """validate.json as the validation starts or resumes: what was asked, the series and which krig
    (a resumed one keeps its answer until the new one is known, and when it was created)."""
    state = dataclasses.replace(made or ValidationRecord(), **asked, repeat=repeat,
                                series_provenance=series["provenance"], reply_subject=series["reply_subject"],
                                patches=series["patch_subjects"], krig_revision=git_revision(),
                                krig_version=version(), updated=now())
    if state.created is None:
        state.created = now()
    return state


def _kernel_of(gdir: pathlib.Path) -> SideKernel | None:
    """The kernel the group's first run booted (manifest.json: release, git origin, debug options),
    with the machine, rig and host it ran on; None when no run of the group can be read."""
    for d in run_dirs_of(gdir):
        try:
            man = RunRecord.read(d).manifest
        except (OSError, KrigError):
            continue
        return SideKernel(man.kernel.name, man.release, man.kernel.git, man.machine, man.rig, man.rig_facts,
                          man.host_cpu)
    return None


def server_facts(k: SideKernel | None) -> ServerFacts | None:
    """A lab server's facts (firmware, system, RAM, CPU, BMC), from the base's first run; None for a
    rig that is no server (a QEMU guest has its facts in base_kernel.machine)."""
    f, m = (k.rig_facts if k else None) or {}, k.machine_said if k else Machine()
    if not (f.get("bmc_info") or f.get("firmware")):
        return None
    # what a Redfish BMC says of the server (rigs/redfish/facts.py), as it says it
    redfish = {x: f[x] for x in ServerFacts.REDFISH if f.get(x)}
    assert k is not None, "facts were found, so the side ran on a kernel"
    return ServerFacts(rig=k.rig.name, system=f.get("system"), firmware=f.get("firmware"),
                       ram_bytes=m.mem_total_bytes, cpus=m.cpus, cpu=(m.cpu or {}).get("model"),
                       bmc=f.get("bmc_info"), bmc_address=f.get("bmc"), **redfish)


def format_answer(vdir: pathlib.Path, state: ValidationRecord) -> str:
    res = state.comparison
    lines = [f"{state.answer}: {state.reason}"]
    if res:
        lines += [f"base:    {res.base.verdict_text} ({', '.join(res.base.releases)})",
                  f"patched: {res.new.verdict_text} ({', '.join(res.new.releases)})"]
    if state.server:
        lines.append(f"server:  {state.server.rig}: {server_line(state.server)}")
    lines += [f"differs (numbers may not be comparable): {d}" for d in state.differences]
    lines += [f"reply: {vdir / 'reply.mbox'} (and reply.txt)", f"validation: {vdir}"]
    return "\n".join(lines)


def cmd_validate(a) -> int:
    """`krig validate REPRODUCER --base KERNEL --series MBOX`: the answer, and its exit code."""
    vdir, state, code = validate(a.reproducer, a.base, a.series, a.repeat, a.rig, a.preset, a.set or [],
                                 a.output, a.sender, knobs=knob_sides(a))
    print(printable_text(format_answer(vdir, state)))      # a server's model, firmware: no escape sequence
    return code
