"""Where krig keeps caches and per-run scratch state (never in git)."""
import os
import pathlib


def cache_dir(*parts) -> pathlib.Path:
    base = os.environ.get("KRIG_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "krig")
    p = pathlib.Path(base, *parts)
    p.mkdir(parents=True, exist_ok=True)
    return p


def _start_ticks(pid: int) -> str | None:
    """When process pid started (clock ticks since boot), or None if there is no such process."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def owner_record() -> dict:
    """Who owns a run or a work directory: this process (pid + start time, so a reused pid is not it)."""
    return {"pid": os.getpid(), "start": _start_ticks(os.getpid()), "host": os.uname().nodename}


def owner_alive(rec: dict | None) -> bool:
    """Is the process an owner_record() describes still running? Another host's owner counts as alive."""
    if not rec or "pid" not in rec:
        return False
    if rec.get("host") not in (None, os.uname().nodename):
        return True
    return _start_ticks(int(rec["pid"])) == rec.get("start")
