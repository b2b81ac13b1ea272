"""Verdicts, their exit codes, and what the console says about the kernel."""
import re

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
# the verdicts whose numbers are measurements of the kernel: the thresholds judged them (an
# ERROR run's numbers may come from a broken instrument; the others have none)
JUDGED = ("PASS", "FAIL")

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


def scan_console(text: str) -> dict:
    """Lines that matter for the verdict: crashes, lockups, OOM kills, warnings."""
    lines = text.splitlines()
    out = {"crash": [], **{k: [] for k in WARN_PATTERNS}}
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


def outcome_verdict(outcome: str | None, reason: str, console: str, rig_fault: str | None = None,
                    machine_answered: bool = False) -> tuple[str | None, str]:
    """The verdict rule, in one place: who is to blame for how a run ended.

    - PASS/FAIL come only from thresholds: "completed" returns (None, reason) and the
      caller judges the metrics (a crash in the console still wins: CRASHED).
    - CRASHED/HUNG only when the kernel under test crashed or hung after it started
      running: its console shows a crash, or it ran (console banner, or it answered
      the runner's commands) and the machine then died or stopped answering.
    - Everything the rig, emulator, host or krig did wrong is ERROR: a rig fault seen
      as the machine went away (QEMU's own error and exit status, ...), or a machine
      that went away before the kernel printed anything.
    - No recorded end at all (the krig process was killed) is INCOMPLETE.
    """
    crash = first_crash(console)
    if outcome in (None, "running"):
        return "INCOMPLETE", INCOMPLETE_REASON
    if outcome == "interrupted":
        return "INTERRUPTED", reason
    if outcome == "skip":
        return "SKIP", reason
    if outcome == "completed":
        return ("CRASHED", f"kernel crash in the console: {crash}") if crash else (None, reason)
    if outcome == "hung" and crash and "not syncing: NMI" in crash:
        crash = None            # the panic krig's own NMI caused to get a trace of the hang
    if outcome in ("crashed", "hung"):
        if crash:
            return "CRASHED", f"{reason}; console: {crash}"
        if rig_fault:
            return "ERROR", f"{rig_fault} ({reason})"
        if not (machine_answered or kernel_ran(console)):
            return "ERROR", f"{reason}, before the kernel under test printed anything (the rig did not start it)"
        return ("CRASHED" if outcome == "crashed" else "HUNG"), reason
    return "ERROR", reason or f"run outcome {outcome!r}"
