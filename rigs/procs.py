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
import select
import signal
import subprocess
import time

from krig.errors import RigError

CHUNK = 1 << 16
TAIL = 4096                 # the end of a stderr written to a file, kept for the caller's message


def log_line(path: pathlib.Path | None, line: str) -> None:
    """`HH:MM:SS line` appended to a rig's log (bmc.log, ssh.log, sol.log, netconsole.log),
    best effort: a log that cannot be written never ends what it logs."""
    if path is None:
        return
    try:
        with open(path, "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line.rstrip()}\n")
    except OSError:
        pass


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


class Overflow(RigError):
    """A child's stdout or stderr went past what krig reads of it; the child was killed."""


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def drain(p: subprocess.Popen, timeout: float, caps: tuple, label: str, sinks: tuple = (None, None)):
    """Read the stdout and stderr of p (started with both as pipes, in its own session) as they
    come, each bounded while it streams: (stdout, stderr, the end of stderr) once p exits.

    A channel goes to memory, or to its sink (an open binary file; then b"" comes back for it).
    Past its cap (caps: (stdout, stderr) in bytes) krig stops reading, kills p's process group
    and raises Overflow, one line: `<label>: its stdout went past ...`. Past timeout seconds, p's
    group is killed and subprocess.TimeoutExpired raised. Never leaves p running."""
    assert p.stdout is not None and p.stderr is not None, "started with both as pipes"
    deadline = time.monotonic() + timeout
    fds = {p.stdout.fileno(): 0, p.stderr.fileno(): 1}
    kept, seen, tail = (bytearray(), bytearray()), [0, 0], b""
    try:
        while fds:
            left = deadline - time.monotonic()
            ready = select.select(list(fds), [], [], left)[0] if left > 0 else []
            if not ready:
                raise subprocess.TimeoutExpired(label, timeout)
            for fd in ready:
                i, b = fds[fd], os.read(fd, CHUNK)
                if not b:
                    del fds[fd]
                    continue
                seen[i] += len(b)
                if seen[i] > caps[i]:
                    raise Overflow(f"{label}: its {('stdout', 'stderr')[i]} went past {_size(caps[i])}, the most "
                                   "krig reads of it; krig stopped reading and ended it")
                if i == 1:
                    tail = (tail + b)[-TAIL:]
                if sinks[i] is None:
                    kept[i].extend(b)
                else:
                    _write_all(sinks[i].fileno(), b)
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(label, timeout) from None
    except BaseException:
        stop_group(p, 2)
        raise
    finally:
        p.stdout.close()
        p.stderr.close()
    return bytes(kept[0]), bytes(kept[1]), tail


def _write_all(fd: int, b: bytes) -> None:
    view = memoryview(b)
    while view:
        view = view[os.write(fd, view):]


def kill_until_gone(find, tries: int) -> list[int]:
    """SIGKILL every pid find() returns, and again every 0.1 s until it returns none (at most
    `tries` rounds: a process may still be starting its children); the pids signalled."""
    killed: list[int] = []
    for _ in range(tries):
        left = find()
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    return sorted(set(killed))
