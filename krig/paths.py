"""Where krig keeps caches and per-run scratch state (never in git)."""
import os
import pathlib
import re
import shutil
from collections.abc import Iterable
from typing import Any


SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


def dies_with_parent(argv: Iterable[object]) -> list[str]:
    """argv prefixed so the process gets SIGKILL when krig (the starting thread) dies."""
    return [SETPRIV, "--pdeathsig", "KILL", "--", *[str(a) for a in argv]]


def cache_dir(*parts: str | os.PathLike[str]) -> pathlib.Path:
    base = os.environ.get("KRIG_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "krig")
    p = pathlib.Path(base, *parts)
    p.mkdir(parents=True, exist_ok=True)
    return p


def _start_ticks(pid: int) -> str | None:
    """When process pid started (clock ticks since boot), or None if there is no such process or it
    has ended (a zombie waiting for its parent, or init, to reap it runs no more)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def process_record(pid: int) -> dict[str, Any] | None:
    """Process pid as owner_alive() knows it again (pid + start time, so a reused pid is not it),
    None if there is no such process."""
    start = _start_ticks(pid) if pid > 0 else None
    return None if start is None else {"pid": pid, "start": start, "host": os.uname().nodename}


def owner_record() -> dict[str, Any]:
    """Who owns a run or a work directory: this process."""
    me = process_record(os.getpid())
    assert me is not None, "this process has no /proc entry"
    return me


def owner_alive(rec: dict[str, Any] | None) -> bool:
    """Is the process an owner_record() describes still running? Another host's owner counts as alive."""
    if not rec or "pid" not in rec:
        return False
    if rec.get("host") not in (None, os.uname().nodename):
        return True
    return _start_ticks(int(rec["pid"])) == rec.get("start")


KERNEL_FILES = {"image": ("bzImage",), "config": ("config",)}
_HEX16, _HEX32 = re.compile(r"^[0-9a-f]{16}$"), re.compile(r"^kernel-[0-9a-f]{32}$")
_RELEASE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def kernel_file(path: object, what: str) -> pathlib.Path | None:
    """path, resolved, if it is the `what` (image, config or modules) of a kernel krig itself keeps,
    else None. A path a run's manifest names is data from whoever made the run directory; a bundle
    reads a host file through it only when this says so, and never an arbitrary file of the cache
    (it holds the lab server's client_key):
        <cache>/kernels/<key>/{bzImage,config,mod/lib/modules/<release>}   built by krig (build.json)
        <cache>/reproduce/kernel-<key>/{bzImage,config,mod/lib/modules/<release>}   unpacked from a bundle
        <cache>/given/<key>/{mod,empty}/lib/modules/<release>              a built tree's modules
        /boot/vmlinuz-<release>, /boot/config-<release>, /lib/modules/<release>   the distro's"""
    if not path or not isinstance(path, (str, os.PathLike)):
        return None
    p = pathlib.Path(path)
    if not p.is_absolute() or ".." in p.parts:
        return None
    try:
        real = p.resolve(strict=True)
        cache = cache_dir().resolve()
    except (OSError, RuntimeError):
        return None
    if cache in real.parents:
        parts = real.relative_to(cache).parts
        if len(parts) < 3 or not (parts[0] == "kernels" and _HEX16.fullmatch(parts[1])
                                  and (cache / parts[0] / parts[1] / "build.json").is_file()
                                  or parts[0] == "reproduce" and _HEX32.fullmatch(parts[1])
                                  or parts[0] == "given" and _HEX16.fullmatch(parts[1]) and what == "modules"):
            return None
        rest = parts[2:]
        if what == "modules":
            ok = rest[:3] in (("mod", "lib", "modules"), ("empty", "lib", "modules")) and len(rest) == 4 \
                and _RELEASE.fullmatch(rest[3]) and (parts[0] == "given" or rest[0] == "mod")
        else:
            ok = rest == KERNEL_FILES.get(what)
        return real if ok else None
    if what in ("image", "config") and real.parent == pathlib.Path("/boot") and \
            re.fullmatch(rf"{'vmlinuz' if what == 'image' else 'config'}-[A-Za-z0-9][A-Za-z0-9._+-]*", real.name):
        return real
    if what == "modules" and str(real.parent) in ("/lib/modules", "/usr/lib/modules") and _RELEASE.fullmatch(real.name):
        return real
    return None
