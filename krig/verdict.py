"""Verdicts, their exit codes, the sets of them that count, and the verdict rule (decide)."""
import dataclasses
import re

from .tally import Tally

VERDICTS = {
    # verdict: (exit code, meaning)
    "PASS": (0, "every threshold held: the kernel does not show the regression"),
    "FAIL": (1, "a threshold was crossed: the kernel shows the regression"),
    "ERROR": (3, "the rig or the reproducer itself broke; the kernel was not judged"),
    "SKIP": (4, "the machine cannot run this reproducer (a stated requirement is missing)"),
    "HUNG": (5, "the machine stopped making progress before the timeout; console kept"),
    "CRASHED": (6, "the kernel panicked, oopsed or the machine died; console kept"),
    "INCOMPLETE": (7, "the krig process ended without recording an end (killed?); nothing was judged"),
    "INTERRUPTED": (130, "stopped by SIGINT/SIGTERM; what was collected is kept, run incomplete"),
}
USAGE_EXIT = 2
JUDGED = ("PASS", "FAIL")                    # the thresholds judged the kernel
UNFINISHED = ("INTERRUPTED", "INCOMPLETE")   # nothing judged: a group or suite does not count them
KERNEL_STOPPED = ("HUNG", "CRASHED")         # the kernel under test stopped or died (no thresholds judged)
# mixed verdicts (a group, a suite): the exit code is that of the first of these that occurred
SEVERITY = ("CRASHED", "HUNG", "FAIL", "ERROR", "SKIP", "PASS")
# a FAIL resting only on host_sensitive thresholds is ERROR when the host was contended in more
# than this % of the workload's seconds (host.tsv, workflows/hostload.py)
CONTENDED_LIMIT_PCT = 10.0

CRASH_PATTERNS = [
    r"Kernel panic - not syncing", r"\bOops: ", r"kernel BUG at ", r"BUG: unable to handle",
    r"general protection fault", r"BUG: kernel NULL pointer dereference", r"sysrq: Trigger a crash",
]
WARN_PATTERNS = {
    "soft_lockup": r"BUG: soft lockup",
    "hung_task": r"blocked for more than \d+ seconds",
    "rcu_stall": r"rcu: INFO: rcu_(?:sched|preempt) (?:self-)?detected stall",
    "warning": r"WARNING: CPU: \d+ PID: \d+",
    "oom_kill": r"Out of memory: Killed process|invoked oom-killer",
}
_CRASH_RE = re.compile("|".join(CRASH_PATTERNS))
# The kernel under test has started running once its console shows its banner or a printk timestamp.
_KERNEL_RAN_RE = re.compile(r"Linux version \d|^\[\s*\d+\.\d{6}\]", re.M)
INCOMPLETE_REASON = "the krig process ended without recording an end (killed?)"


# Who a verdict blames, as data beside its sentence (verdict.json "cause"): a reader that
# wants to know whether the kernel was judged asks this, never the reason's words.
CAUSES = ("kernel", "machine", "rig", "host-contention", "host-fault", "krig", "interrupted")


class Decided(tuple[str | None, str]):
    """(verdict, reason) as decide() and judged() return it, with .cause (one of CAUSES)."""
    cause: str

    def __new__(cls, verdict: str | None, reason: str, cause: str) -> "Decided":
        assert cause in CAUSES, cause
        self = super().__new__(cls, (verdict, reason))
        self.cause = cause
        return self


def exit_code(verdict: str) -> int:
    return VERDICTS[verdict][0]


def first_crash(text: str) -> str | None:
    """The first console line showing a crash (panic, oops, BUG), or None."""
    m = _CRASH_RE.search(text)
    if not m:
        return None
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    return text[start:end if end >= 0 else len(text)].strip()


def scan_console(text: str) -> dict[str, list[str]]:
    """Lines that matter for the verdict: crashes, lockups, OOM kills, warnings."""
    lines = text.splitlines()
    out: dict[str, list[str]] = {"crash": [], **{k: [] for k in WARN_PATTERNS}}
    for i, line in enumerate(lines):
        if _CRASH_RE.search(line):
            out["crash"].append(line.strip())
        for k, pat in WARN_PATTERNS.items():
            if re.search(pat, line):
                out[k].append(line.strip())
    if out["crash"]:
        first = next(i for i, line in enumerate(lines) if _CRASH_RE.search(line))
        out["crash_context"] = [line.rstrip() for line in lines[max(0, first - 5): first + 40]]
    return out


def kernel_ran(console: str) -> bool:
    """Did the kernel under test print anything (its banner or a timestamped line)?"""
    return bool(_KERNEL_RAN_RE.search(console))


@dataclasses.dataclass
class Evidence:
    """What a run directory records about how the run ended: everything the rule looks at.

    workflows.check.evidence() reads it from the run directory (manifest.json, console.log,
    samples.tsv, phases.tsv, host.tsv, the judge's thresholds.json), so `krig check` on a
    copy of a run directory decides exactly what `krig run` decided."""
    outcome: str | None                   # how the rig saw the run end: completed, hung, crashed, ...
    reason: str = ""
    console: str = ""
    rig_fault: str | None = None          # the rig's own side failed as the machine went away
    host_fault: str | None = None         # the host failed the run: the emulator stopped, a disk filled
    machine_answered: bool = False        # the kernel under test answered the runner's commands
    pull_error: str | None = None         # the results could not be brought back
    progress: str | None = None           # what still moved before a timeout (workflows/stall.py)
    last_phase: str | None = None
    timeout: float | None = None
    host_load: str | None = None          # the host's load average when the run ended
    thresholds: Tally | None = None       # the judge's tally, once judged
    analysis_error: str | None = None     # metrics could not be computed
    host_contended_pct: float | None = None


def decide(ev: Evidence) -> Decided:
    """The verdict rule, in one place: who is to blame for how a run ended.

    - Nothing recorded as the end (the krig process was killed): INCOMPLETE.
    - A crash in the console (panic, oops, BUG) is CRASHED whatever else happened, except
      the panic krig's own NMI asked for to get a trace of a hang.
    - The host's fault (the emulator stopped by a signal or a frozen cgroup, the work
      directory's filesystem full under a growing disk image), the rig's fault as the
      machine went away (QEMU's own error), results that could not be pulled, or a machine
      that went away before the kernel printed anything: ERROR, one line saying what.
    - A timeout while the samples show the workload still moving and the console shows no
      lockup is the host's slowness: ERROR. Otherwise the kernel stopped: HUNG.
    - A completed workload is judged by its thresholds: returns (None, reason) until
      ev.thresholds is given, then judged(): PASS or FAIL, or ERROR when the
      measurement broke or the host's contention explains a timing failure.
    """
    crash = first_crash(ev.console)
    outcome, reason = ev.outcome, ev.reason
    if outcome in (None, "running"):
        return Decided("INCOMPLETE", INCOMPLETE_REASON, "krig")
    if outcome == "interrupted":
        return Decided("INTERRUPTED", reason, "interrupted")
    if outcome == "hung" and crash and "not syncing: NMI" in crash:
        crash = None            # the panic krig's own NMI caused to get a trace of the hang
    if ev.pull_error and outcome in ("completed", "skip"):
        return Decided("ERROR", ev.pull_error, "rig")
    if ev.pull_error and outcome == "error":
        reason = f"{reason}; {ev.pull_error}"
    if crash and outcome in ("completed", "crashed", "hung"):
        return Decided("CRASHED", (f"kernel crash in the console: {crash}" if outcome == "completed"
                                   else f"{reason}; console: {crash}"), "kernel")
    if ev.host_fault and outcome != "skip":
        return Decided("ERROR", f"host: {ev.host_fault} ({reason}); the kernel was not judged", "host-fault")
    if outcome == "skip":
        return Decided("SKIP", reason, "machine")
    if outcome == "completed":
        if ev.analysis_error:
            return Decided("ERROR", f"analysis failed: {ev.analysis_error}", "krig")
        return judged(ev.thresholds, ev.host_contended_pct) if ev.thresholds is not None else Decided(None, reason, "krig")
    if outcome in ("crashed", "hung"):
        if ev.rig_fault:
            return Decided("ERROR", f"{ev.rig_fault} ({reason})", "rig")
        if not (ev.machine_answered or kernel_ran(ev.console)):
            return Decided("ERROR", f"{reason}, before the kernel under test printed anything (the rig did not "
                           "start it)", "rig")
        if outcome == "hung" and ev.progress and not lockups(ev.console):
            where = f" in phase {ev.last_phase}" if ev.last_phase else ""
            host = f"; host load {ev.host_load}" if ev.host_load else ""
            return Decided("ERROR", (f"timeout, not a hang: the workload was still making progress{where} at "
                                     f"{ev.timeout:.0f}s ({ev.progress}{host}); the machine ran too slowly for "
                                     f"this timeout: rerun with --set timeout=<more seconds> ({reason})"), "host-fault")
        return Decided("CRASHED" if outcome == "crashed" else "HUNG", reason, "kernel")
    return Decided("ERROR", reason or f"run outcome {outcome!r}", "rig")


def lockups(console: str) -> list[str]:
    """Console lines saying the kernel was stuck or crashed (a timeout with these is HUNG)."""
    seen = scan_console(console)
    return seen["soft_lockup"] + seen["hung_task"] + seen["rcu_stall"] + seen["crash"]


def host_contended(host_contended_pct: float | None) -> bool:
    """The host's other load took the CPUs in more of the workload's seconds than a timing
    (host_sensitive) threshold can be judged through (host.tsv's share, workflows/hostload.py)."""
    return host_contended_pct is not None and host_contended_pct > CONTENDED_LIMIT_PCT


def judged(res: Tally, host_contended_pct: float | None = None) -> Decided:
    """The thresholds' verdict: an instrument check that failed (or a judge that broke) makes the
    run ERROR whatever else happened (host contention when every one is a host_sensitive instrument
    and the host was contended, else krig's); so does a FAIL that rests only on host_sensitive thresholds
    while the host was contended (host_contended_pct over CONTENDED_LIMIT_PCT); otherwise
    FAIL only if a measured regression threshold failed (metrics that could not be computed
    are named alongside); otherwise a metric that could not be computed is ERROR naming it;
    otherwise PASS."""
    if res.broken and len(res.broken) == res.instrument_host_sensitive \
            and host_contended(host_contended_pct):      # a starved guest's instrument (its sampler's gaps)
        return Decided("ERROR", (f"host contention: other processes kept the host's CPUs saturated in "
                                 f"{host_contended_pct:.0f}% of the workload's seconds (limit "
                                 f"{CONTENDED_LIMIT_PCT:g}%, host.tsv), and the guest's instrument it starved "
                                 f"broke: " + "; ".join(res.broken)), "host-contention")
    if res.broken:
        return Decided("ERROR", ("instrument: " if res.instrument else "judge error: ") + "; ".join(res.broken),
                       "krig")
    if res.failed and res.failed_host_sensitive == res.failed and host_contended(host_contended_pct):
        return Decided("ERROR", (f"host contention: other processes kept the host's CPUs saturated in "
                                 f"{host_contended_pct:.0f}% of the workload's seconds (limit "
                                 f"{CONTENDED_LIMIT_PCT:g}%, host.tsv), so these timing thresholds are not "
                                 f"blamed on the kernel: " + "; ".join(res.failures)), "host-contention")
    if res.failed:
        extra = [f"not measured: {m}" for m in res.not_judged]
        # the kernel FAILed on thresholds the host cannot move; timing ones it crossed on a
        # contended host are said apart, not blamed on it (krig compare does not count them)
        timing = res.timing_failures if host_contended(host_contended_pct) else []
        said = "; ".join([f for f in res.failures if f not in timing] + extra)
        if timing:
            said += (f"; not blamed on the kernel, its host contended in {host_contended_pct:.0f}% of the "
                     f"workload's seconds: " + "; ".join(timing))
        return Decided("FAIL", said, "kernel")
    if res.unmeasured:
        return Decided("ERROR", "metric not measured: " + "; ".join(res.not_judged), "krig")
    return Decided("PASS", f"{res.passed} thresholds held", "kernel")
