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


def krig_owned(path) -> pathlib.Path | None:
    """path, if it names a file krig itself keeps: below krig's cache (kernels it built or took
    in) or /boot (the distro's kernels). A path a run's manifest names is data from whoever made
    the run directory; a bundle reads a host file through it only when this says so."""
    if not path:
        return None
    p = pathlib.Path(path)
    if not p.is_absolute() or ".." in p.parts:
        return None
    try:
        real = p.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    roots = [cache_dir().resolve(), pathlib.Path("/boot").resolve(), pathlib.Path("/usr/lib/modules").resolve(),
             pathlib.Path("/lib/modules").resolve()]
    return real if any(r == real or r in real.parents for r in roots) else None
