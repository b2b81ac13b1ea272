"""One krig process per server: an fcntl lock file per BMC (host:port).

This is the reservation backend without a lab coordinator (KRIG_LAB_COORDINATOR
unset); with one, rigs/lab.py holds the server instead.

The lock lives as long as its file descriptor (released by close() or by the
process dying). KRIG_LOCK_DIR puts the files elsewhere (a directory shared by
the users of a lab); KRIG_LOCK_WAIT makes a run wait up to that many seconds
for a busy server instead of failing at once.
"""
import fcntl
import os
import pathlib
import re
import time

from krig.errors import RigError, UsageError
from krig.paths import cache_dir


def lock_dir() -> pathlib.Path:
    d = os.environ.get("KRIG_LOCK_DIR")
    if d:
        p = pathlib.Path(d)
        p.mkdir(parents=True, exist_ok=True)
        return p
    return cache_dir("locks")


def lock_wait() -> float:
    """KRIG_LOCK_WAIT: how long a run waits for a busy server (seconds; 0 = not at all)."""
    try:
        return float(os.environ.get("KRIG_LOCK_WAIT") or 0)
    except ValueError:
        raise UsageError(f"KRIG_LOCK_WAIT: expected seconds, got {os.environ['KRIG_LOCK_WAIT']!r}") from None


def _holder(fd: int) -> str:
    return os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown process"


def take(rig_name: str, host: str, port: int, log=None) -> tuple[int, pathlib.Path]:
    """Lock the server; a wait (KRIG_LOCK_WAIT) is said once to `log`, naming the holder."""
    path = lock_dir() / f"ipmi-{re.sub(r'[^A-Za-z0-9._-]', '_', host)}-{port}.lock"
    wait = lock_wait()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait
    for i in range(int(wait) + 2):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            if i == 0 and log:
                log(f"krig: rig {rig_name}: waiting up to {wait:.0f}s for server {host}:{port} "
                    f"(in use by {_holder(fd)})")
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)     # no-op when held; raises when not
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise RigError(f"rig {rig_name}: server {host}:{port} is in use by another krig process "
                       f"({holder}); lock {path}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()}, rig {rig_name}\n".encode(), 0)
    return fd, path
