"""Child processes that die with krig, started without preexec_fn.

Python documents preexec_fn as unsafe once threads run (the SOL watcher
thread starts ipmitool while the main thread starts ssh and tar), so the
parent-death signal is set by util-linux's `setpriv --pdeathsig KILL`, which
then execs the real program: same pid, same argv in /proc, and a SIGKILL of
krig still takes every rig child with it. As with PR_SET_PDEATHSIG itself,
"parent" is the thread that started the child: start children from threads
that live as long as the children should.
"""
import os
import pathlib
import signal
import subprocess

def stopped_by_host(pid: int) -> str | None:
    """Why the process pid is not running at all, if the host stopped it: a stop signal
    (SIGSTOP, SIGTSTP: process state T) or a frozen cgroup (cgroup v2 cgroup.events)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    if state in ("T", "t"):
        return f"stopped (process state {state}: a stop signal such as SIGSTOP, or a tracer)"
    try:
        cg = pathlib.Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        path = next(ln.split(":", 2)[2] for ln in cg if ln.startswith("0::"))
        events = pathlib.Path("/sys/fs/cgroup", path.lstrip("/"), "cgroup.events").read_text()
    except (OSError, StopIteration, IndexError):
        return None
    return f"frozen with its cgroup {path}" if "frozen 1" in events.splitlines() else None


def stop_group(p: subprocess.Popen | None, grace: float = 3.0) -> None:
    """SIGTERM the child's process group, then SIGKILL, waiting up to `grace` seconds after each;
    the child reaped. Bounded: a child that outlives SIGKILL (uninterruptible sleep) is left."""
    if p is None or p.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        pass
