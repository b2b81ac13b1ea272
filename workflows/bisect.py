"""`krig bisect`: `git bisect run` with krig's verdict as the oracle.

    krig bisect run --tree TREE --good REF --bad REF --repro NAME
                    [--preset P] [--repeat N] [--like KERNEL] [--rig RIG]   (make bisect)
    krig bisect demo            (make bisect-demo; the history is made by kernels/demo_repo.py)

The bisection never touches TREE's working tree (`git bisect start
--no-checkout`): each step reads BISECT_HEAD, builds it through a generated
bisect-<id>.toml in the bisection's own directory (<bisection>/kernels/, found
through kernels.definition.GENERATED_DIRS; never in the checkout; `extends` the --like
kernel: same config, same fragments, no patches, source = git) in krig's own
build tree, and runs
`krig run REPRO --kernel bisect-<id>` REPEAT times. Each run is classified:

    PASS                          -> good
    FAIL                          -> bad
    HUNG / CRASHED after booting  -> bad (the kernel broke under the reproducer)
    ERROR, SKIP, boot failure     -> skip

and the step's answer is the strict majority of REPEAT runs (it stops as soon
as a side has it or neither can reach it); no majority -> skip. A build
failure is a skip. With --metric NAME (make bisect METRIC=NAME) the runs are
judged by that metric's value instead of the verdict: GOOD and BAD are
measured REPEAT times first, and each run votes for the endpoint its value
sits with (workflows/metric_bisect.py). The oracle exits 0 (good), 1 (bad), 125 (skip) for git,
255 to abort on interruption. Every step is a line in bisect.log with the
commit, the verdicts, the reproducer's key metric (its first threshold's
metric) and the answer; the first bad commit is the last line.
"""
import argparse
import dataclasses
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

from krig import DEFAULT_RIG, RESULTS_DIR, ROOT
from . import run as runner
from .preflight import before_build
from .argcheck import like_kernel, run_args
from krig.asked import AskedRun
from .bisectargs import DEMO_LIKE, add_commands
from krig.config import parse_set
from krig.knobs import Knobs, from_args as knobs_from_args, parse as parse_knobs
from krig.errors import KrigError, UsageError, guarded, handler
from krig.reproducer import load_reproducer
from krig.results import BISECT_GIT_LOG, BISECT_KERNELS, BISECT_LOG, bisect_dir, bisect_tag, now
from krig.record_bisect import BisectionRecord, read_bisection, write_bisection
from krig.record import RunRecord
from krig.verdict import JUDGED, KERNEL_STOPPED, host_contended
from .metric_bisect import Zones, attempt_vote, from_state, to_state, zones
from kernels.build import build as build_kernel
from kernels.demo_repo import CULPRIT, existing_demo_repo, make_demo_repo
from kernels.definition import GENERATED_DIRS
from kernels.gitrepo import git
from rigs import load_rig

GOOD, BAD, SKIP, ABORT = 0, 1, 125, 255
CODES = {"good": GOOD, "bad": BAD, "skip": SKIP}


def this_checkout_env() -> dict:
    """The environment for krig's own children (`git bisect run`'s oracle, `krig run`): this
    checkout's packages first on the path, whatever directory they start in and wherever the
    venv's krig was installed from."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (f":{path}" if path else "")}


# -- decisions (pure; unit-tested) --------------------------------------------

def classify(verdict: str, booted: bool) -> str:
    """One run's verdict -> good / bad / skip."""
    if verdict in JUDGED:
        return "good" if verdict == "PASS" else "bad"
    if verdict in KERNEL_STOPPED and booted:
        return "bad"
    return "skip"


def decide(votes: list, repeat: int) -> str | None:
    """Strict majority of `repeat` runs. None = run again."""
    need = repeat // 2 + 1
    good, bad = votes.count("good"), votes.count("bad")
    if good >= need:
        return "good"
    if bad >= need:
        return "bad"
    left = repeat - len(votes)
    if left <= 0 or (good + left < need and bad + left < need):
        return "skip"
    return None


@dataclasses.dataclass
class Attempt:
    verdict: str
    reason: str
    run_dir: str | None = None
    booted: bool = False
    metric: float | None = None
    contended: bool = False     # its metric is a timing one and its host was contended: not used


def step(run_once, repeat: int, vote=None) -> tuple[str, list]:
    """Run until decide() answers. run_once() -> Attempt; vote(Attempt) -> good/bad/skip
    (default: classify() of the verdict)."""
    attempts, votes = [], []
    while True:
        a = run_once()
        attempts.append(a)
        votes.append(vote(a) if vote else classify(a.verdict, a.booted))
        answer = decide(votes, repeat)
        if answer is not None:
            return answer, attempts


def log_line(commit: str, subject: str, answer: str, attempts: list, metric_name: str | None,
             note: str = "", vote=None) -> str:
    """vote: with a metric bisection, each value is followed by its vote: 0.98(good)/50(bad)."""
    verdicts = ",".join(a.verdict for a in attempts) or "-"
    vals = [(f"{a.metric:g}" if a.metric is not None else "host-contended", f"({vote(a)})" if vote else "")
            for a in attempts if a.metric is not None or a.contended]
    metric = f" {metric_name}=" + "/".join(f"{v}{w}" for v, w in vals) if metric_name and vals else ""
    note = f" ({note})" if note else ""
    return f"{now()} {commit[:12]} {answer:4s} [{verdicts}]{metric} {subject[:60]}{note}"


def first_bad_from_output(text: str) -> str | None:
    m = re.search(r"^([0-9a-f]{40}) is the first bad commit", text, re.M)
    return m.group(1) if m else None


# -- the oracle (one bisect step) ----------------------------------------------

def read_attempt(run_dir: pathlib.Path, metric_name: str | None) -> Attempt:
    """One judged run as a bisection reads it. A timing metric (one of the reproducer's
    host_sensitive thresholds') measured while the run's host was contended is the host's number,
    not the kernel's: it is left out (a skip vote, "host-contended" in bisect.log)."""
    rec = RunRecord.read(run_dir)
    if rec.verdict is None or rec.verdict.verdict is None:
        raise UsageError(f"{run_dir}: the run was never judged (no verdict.json)")
    value = rec.metrics.get(metric_name) if metric_name else None
    contended = False
    if value is not None and host_contended(rec.metrics.get("host_contended_pct")):
        try:
            contended = metric_name in load_reproducer(rec.manifest.reproducer or "").timing_metrics
        except KrigError:
            contended = False       # an unknown reproducer has no thresholds to say so
    return Attempt(rec.verdict.verdict, rec.verdict.reason or "", str(run_dir),
                   booted=rec.manifest.machine_answered, metric=None if contended else value, contended=contended)


def asked_of(state: BisectionRecord) -> AskedRun:
    """The `krig run` of one bisection step (the step's kernel, the bisection's reproducer)."""
    assert state.repro and state.rig and state.kernel, "start() writes them into the state"
    return AskedRun(state.repro, state.rig, state.kernel, state.preset, tuple(state.sets), tuple(state.knobs))


def run_krig(state: BisectionRecord) -> Attempt:
    """One step's run, in this process: the pipeline `krig run` drives (workflows.run.run), its
    progress lines not shown (the step's log line names its run directory). A run krig cannot
    make (bad input, a rig or host fault before the run directory) is an ERROR attempt; a run
    stopped by Ctrl-C stops the bisection."""
    asked = asked_of(state)
    assert asked.kernel is not None, "a bisection step names its kernel (asked_of)"
    try:
        run_dir, verdict = runner.run(asked.reproducer, asked.rig, asked.kernel, asked.preset,
                                      parse_set(asked.sets), log=lambda line: None,
                                      workflow="bisect-step",
                                      knobs=knobs_from_args(asked.knobs, f"{state.log}: knobs"))
    except KrigError as e:
        return Attempt("ERROR", f"krig run: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    if verdict.verdict == "INTERRUPTED":
        raise KeyboardInterrupt
    return read_attempt(run_dir, state.metric)


def append(path, line: str, echo=True):
    with open(path, "a") as f:
        f.write(line + "\n")
    if echo:
        print(f"bisect: {line}", flush=True)


def oracle(state: "pathlib.Path | BisectionRecord", build=None, run_once=None) -> int:
    """One step: state is the bisection's state file (the path git bisect run passes) or its record."""
    if not isinstance(state, BisectionRecord):
        state = read_bisection(state)
    if state.kernels:                 # the bisection's kernel tomls, in its own directory
        GENERATED_DIRS.append(pathlib.Path(state.kernels))
    tree, logp = state.tree, state.log
    commit = git(tree, "rev-parse", "--verify", f"{state.ref}^{{commit}}")
    subject = git(tree, "log", "-1", "--format=%s", commit)
    if build is None:
        kernel = state.kernel
        assert kernel is not None, "start() writes it into the state"
        build = lambda: build_kernel(kernel, log=lambda m: print(m, flush=True))  # noqa: E731
    t0 = time.monotonic()
    try:
        build()
    except KrigError as e:
        append(logp, log_line(commit, subject, "skip", [], None, f"build failed: {e}"))
        return SKIP
    tb = time.monotonic() - t0
    vote = None
    if state.zones is not None:
        z = from_state(state.zones)
        vote = lambda a: attempt_vote(z, a.verdict, a.metric)  # noqa: E731
    append(logp, f"# {commit[:12]} runs: {shlex.join(asked_of(state).argv())}", echo=False)
    answer, attempts = step(run_once or (lambda: run_krig(state)), state.repeat, vote)
    dirs = " ".join(a.run_dir or a.reason for a in attempts)
    append(logp, log_line(commit, subject, answer, attempts, state.metric,
                          f"build {tb:.0f}s, run {time.monotonic() - t0 - tb:.0f}s; {dirs}", vote))
    return CODES[answer]


def measure_endpoints(state: BisectionRecord, ends: dict, build, run_for) -> Zones:
    """METRIC mode: GOOD and BAD measured state.repeat times each, logged, turned into zones.

    build(label, commit) -> kernel name (built); run_for(kernel name) -> Attempt.
    An endpoint that does not build is an error; overlapping values a one-line refusal."""
    tree, logp, metric = state.tree, state.log, state.metric
    assert metric is not None, "METRIC mode has its metric"
    values, contended = {}, {}
    for label in ("GOOD", "BAD"):
        commit = ends[label]
        subject = git(tree, "log", "-1", "--format=%s", commit)
        t0 = time.monotonic()
        try:
            name = build(label, commit)
        except KrigError as e:
            append(logp, f"# {label} {commit[:12]} does not build: {e}")
            raise KrigError(f"{label}={commit[:12]}: the endpoint does not build: {e}") from None
        tb = time.monotonic() - t0
        attempts = [run_for(name) for _ in range(state.repeat)]
        dirs = " ".join(a.run_dir or a.reason for a in attempts)
        append(logp, log_line(commit, subject, label.lower(), attempts, metric,
                              f"endpoint {label}; build {tb:.0f}s, run {time.monotonic() - t0 - tb:.0f}s; {dirs}"))
        values[label] = [a.metric if a.verdict in JUDGED else None for a in attempts]
        contended[label] = sum(a.contended for a in attempts)
    try:
        z = zones(metric, values["GOOD"], values["BAD"])
    except UsageError as e:
        busy = [f"{label} {n} of {state.repeat}" for label, n in contended.items() if n]
        if busy:
            e = UsageError(f"{e} ({', '.join(busy)} runs on a contended host: {metric} is a timing "
                           f"metric, the host's number then, not the kernel's)")
        append(logp, f"refused: {e}")
        raise e from None
    append(logp, f"# zones: {z.describe()}")
    return z


# -- driving git bisect ----------------------------------------------------------

def _kernel_toml(name: str, tree_p, ref: str, like: str, logp) -> pathlib.Path:
    """The bisection's own kernel toml (<bisection>/kernels/<name>.toml, beside its log; never in
    the checkout): commit `ref` of tree_p with the --like kernel's config."""
    ktoml = pathlib.Path(logp).parent / BISECT_KERNELS / f"{name}.toml"
    ktoml.write_text(f'# generated by workflows.bisect for {logp}\n'
                     f'description = "git bisect of {pathlib.Path(tree_p).name} ({ref}), config of {like}"\n'
                     f'extends = "{like}"\nsource = "git"\ntree = "{tree_p}"\nref = "{ref}"\n'
                     f'patches = []\nlocalversion = "-krig-bisect"\n')
    return ktoml


def _bisect_in_progress(tree) -> bool:
    gitdir = pathlib.Path(git(tree, "rev-parse", "--path-format=absolute", "--git-dir"))
    return (gitdir / "BISECT_START").exists()


def check_args(repro: str, preset: str | None, repeat: int, like: str, rig: str, sets, metric: str | None):
    """Every argument of a bisection but the tree and its commits, checked before anything is
    made, unpacked, built or started: the reproducer, --preset, --set, --rig (and that it boots a kernel
    krig builds), --like, --metric, and the preflight of a run on that rig."""
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: must be at least 1")
    try:
        load_reproducer(repro)
    except UsageError as e:
        raise UsageError(f"--repro {repro}: {e}") from None
    params = run_args(repro, rig, preset, sets)
    like_kernel(like)
    r = load_reproducer(repro)
    # every step builds its commit: a rig that cannot boot it, or a host that cannot run it, before any
    before_build(load_rig(rig), r, RESULTS_DIR, [("--tree", None)], preset=preset, params=params)
    known = sorted(set(r.metrics) | {"trace_lost_events", "sampler_max_gap_intervals"})
    if metric is not None and metric not in known:
        raise UsageError(f"--metric {metric}: not a metric of {repro} (one of: {', '.join(known)})")
    return r


def bisect(tree: str, good: str, bad: str, repro: str, preset: str | None = None, repeat: int = 1,
           like: str = "linux-6.1", rig: str = DEFAULT_RIG, sets=(), log_dir=None,
           metric: str | None = None, knobs: Knobs = Knobs()) -> dict:
    t_start = time.monotonic()
    r = check_args(repro, preset, repeat, like, rig, sets, metric)
    tree_p = pathlib.Path(os.path.expanduser(tree)).resolve()
    if not tree_p.is_dir():
        raise UsageError(f"--tree {tree}: not a directory")
    if git(tree_p, "rev-parse", "--git-dir", check=False) == "":
        raise UsageError(f"--tree {tree}: not a git repository")
    ends = {}
    for label, ref in (("GOOD", good), ("BAD", bad)):
        p = subprocess.run(["git", "-C", str(tree_p), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise UsageError(f"--{label.lower()} {ref}: not a commit in {tree_p}")
        ends[label] = p.stdout.strip()
    mode = "metric" if metric else "verdict"
    if _bisect_in_progress(tree_p):
        raise UsageError(f"--tree {tree_p}: a git bisect is already in progress (`git -C {tree_p} bisect reset`)")

    tag = bisect_tag()
    name = f"bisect-{tag}"
    out = pathlib.Path(log_dir) if log_dir else bisect_dir(repro, tag)
    kernels = out / BISECT_KERNELS
    kernels.mkdir(parents=True, exist_ok=True)
    logp = out / BISECT_LOG
    _kernel_toml(name, tree_p, "BISECT_HEAD", like, logp)
    state = BisectionRecord(tree=str(tree_p), ref="BISECT_HEAD", kernel=name, kernels=str(kernels), repro=repro,
                            preset=preset, repeat=repeat, rig=rig, sets=list(sets), knobs=knobs.args(), log=str(logp),
                            metric=metric or (r.thresholds[0].metric if r.thresholds else None), mode=mode)
    state_path = write_bisection(out, state)
    write_log_header(logp, state, ends, good, bad, like)
    print(f"bisect: log {logp}", flush=True)
    first, text = None, ""

    def build_endpoint(label, commit):
        ename = f"{name}-{label.lower()}"
        _kernel_toml(ename, tree_p, commit, like, logp)
        build_kernel(ename, log=lambda m: print(m, flush=True))
        return ename
    GENERATED_DIRS.append(kernels)
    try:
        if metric:
            run_for = lambda k: run_krig(dataclasses.replace(state, kernel=k))  # noqa: E731
            z = measure_endpoints(state, ends, build_endpoint, run_for)
            state.zones = to_state(z)
            write_bisection(out, state)
        git(tree_p, "bisect", "start", "--no-checkout", ends["BAD"], ends["GOOD"])
        text = git_bisect_run(tree_p, state_path)
        first = first_bad_from_output(text)
        (out / BISECT_GIT_LOG).write_text(git(tree_p, "bisect", "log", check=False) + "\n")
    finally:
        subprocess.run(["git", "-C", str(tree_p), "bisect", "reset"], capture_output=True)
        GENERATED_DIRS.remove(kernels)
    took = time.monotonic() - t_start
    if first:
        subject = git(tree_p, "log", "-1", "--format=%s", first)
        append(logp, f"first bad commit: {first} {subject}")
    else:
        why = next((ln for ln in text.splitlines() if re.match(r"^(error: |There are only|We cannot)", ln)),
                   "git bisect run did not name a commit")
        append(logp, f"no first bad commit: {why.strip()}")
    append(logp, f"# took {took / 60:.1f} min")
    return {"first_bad": first, "log": str(logp), "seconds": round(took, 1)}


def write_log_header(logp: pathlib.Path, state: BisectionRecord, ends: dict, good: str, bad: str, like: str) -> None:
    """bisect.log's first lines: what is bisected, between which commits, how each step is judged."""
    metric = state.mode == "metric"
    with open(logp, "w") as f:
        f.write(f"# krig bisect {now()}\n# tree {state.tree}\n# good {good} = {ends['GOOD']}\n"
                f"# bad  {bad} = {ends['BAD']}\n# reproducer {state.repro} preset {state.preset or '(defaults)'} "
                f"repeat {state.repeat} rig {state.rig}; kernel config of {like}\n"
                f"# {'bisecting on the metric' if metric else 'bisecting on the verdict; key metric'}: "
                f"{state.metric}\n# columns: time commit answer [verdicts] metric"
                f"{'=value(vote)/...' if metric else ''} subject (notes)\n")


def git_bisect_run(tree_p: pathlib.Path, state_path: pathlib.Path) -> str:
    """`git bisect run` with the oracle, its output shown as it comes; returns that output."""
    p = subprocess.Popen(["git", "-C", str(tree_p), "bisect", "run", sys.executable, "-m", "workflows.bisect",
                         "oracle", str(state_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=this_checkout_env())
    lines = []
    assert p.stdout is not None     # piped
    try:
        for line in p.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
    finally:
        if p.poll() is None:
            p.terminate()
        p.wait()
    if lines and not lines[-1].endswith("\n"):
        print(flush=True)
    return "".join(lines)


# -- make bisect-demo ------------------------------------------------------------


def demo(repro: str = "unlink-dentry-growth", preset: str | None = "smoke", repeat: int = 1,
         like: str = DEMO_LIKE, metric: str | None = None) -> int:
    t0 = time.monotonic()
    say = lambda m: print(m, flush=True)  # noqa: E731
    check_args(repro, preset, repeat, like, DEFAULT_RIG, (), metric)     # before the source is unpacked
    repo, info = make_demo_repo(say)
    say(f"bisect-demo: bisecting {repo} {info['good']}..{info['bad']} with {repro} "
        f"preset {preset}{f', metric {metric}' if metric else ''}, config of {like}; "
        f"expecting {info['culprit'][:12]} ({CULPRIT})")
    res = bisect(str(repo), info["good"], info["bad"], repro, preset, repeat, like=like, metric=metric)
    took = (time.monotonic() - t0) / 60
    if res["first_bad"] == info["culprit"]:
        say(f"bisect-demo: OK: first bad commit {res['first_bad'][:12]} ({CULPRIT}) in {took:.1f} min; "
            f"log {res['log']}")
        return 0
    say(f"bisect-demo: WRONG: bisect named {res['first_bad'] or 'nothing'}, expected {info['culprit']} "
        f"({took:.1f} min); log {res['log']}")
    return 1



def cmd_run(a) -> int:
    if not a.tree:
        a.tree = existing_demo_repo()
        if not a.tree:
            raise UsageError("--tree is required (a git tree of the kernel); `krig bisect demo` makes one")
    knobs = parse_knobs(a.sysctl, a.cmdline)
    res = bisect(a.tree, a.good, a.bad, a.repro, a.preset, a.repeat, a.like, a.rig, a.set, metric=a.metric, knobs=knobs)
    return 0 if res["first_bad"] else 1


def cmd_demo(a) -> int:
    return demo(a.repro, a.preset, a.repeat, a.like, a.metric)


def cmd_oracle(a) -> int:
    for k in [k for k in os.environ if k.startswith("GIT_")]:
        del os.environ[k]             # set by `git bisect run`; they would redirect every git call
    try:
        state = read_bisection(pathlib.Path(a.state))
    except UsageError as e:           # no step can be judged without it: stop the bisection
        print(f"krig: error: {e}", file=sys.stderr)
        return ABORT
    try:
        return oracle(state)
    except KeyboardInterrupt:
        return ABORT
    except KrigError:
        raise
    except Exception:                 # a bug must stop the bisection, not vote "bad"
        import traceback
        traceback.print_exc()
        return ABORT


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workflows.bisect", description=__doc__.split("\n\n")[0])
    add_commands(ap.add_subparsers(dest="cmd", required=True), oracle_step=True)
    a = ap.parse_args(argv)
    # an oracle step that cannot be judged is a skip (125), not a failure
    return guarded(lambda: handler(a.handler)(a), error_code=SKIP if a.cmd == "oracle" else None)

if __name__ == "__main__":
    sys.exit(main())
