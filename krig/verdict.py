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
    "INTERRUPTED": (130, "stopped by SIGINT/SIGTERM; what was collected is kept, run incomplete"),
}
USAGE_EXIT = 2

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
