"""What a series' build may take of the host, all its processes together: a cgroup of its own.

`prlimit` bounds each process, and the process count only of a user other than root; a build
run by root, or one that starts many processes each under the per-process bounds, would take the
host. So every step of a series' build (kernels/overlay.py) starts in a cgroup made for that
build, before anything of the series runs (a one-line `sh` wrapper writes its own pid to the
group's cgroup.procs and execs the step), with

- at most PIDS processes (`pids.max`, KRIG_BUILD_PIDS), and
- at most MEMORY bytes of memory (`memory.max` on cgroup v2, `memory.limit_in_bytes` on v1,
  KRIG_BUILD_MEMORY; half the host's RAM by default): beyond it the kernel's OOM killer
  ends a process of the build, never one of the host.

A limit hit is read from the group's own counters (`pids.events` max, `memory.events` or v1's
`memory.oom_control` oom_kill), so the ERROR names it only when the kernel enforced it. The
group is removed after the build, its processes killed first; a group a killed krig left
(named krig-build-<pid namespace>-<pid>-<n>) is removed by the next build. cgroup v2 (/sys/fs/cgroup) and v1
(one hierarchy per controller) are both used: the group is made below krig's own cgroup, or
below the hierarchy's root (root only), or below KRIG_BUILD_CGROUP (a delegated v2 cgroup).
"""
import functools
import itertools
import os
import pathlib
import signal
import time

from krig.config import parse_size
from krig.errors import KrigError, UsageError

PIDS = 4096
DISK = 20 << 30             # a series touching a header recompiles most of a defconfig tree: ~2 GiB
MIN_MEMORY, MIN_DISK, MIN_PIDS = 64 << 20, 32 << 20, 8
PREFIX = "krig-build-"
KILL_STEPS = 500            # of 10 ms: a killed group is empty well within 5 s
# the wrapper: its own pid into each cgroup.procs named before `--`, then the step itself
JOIN = 'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; shift; done; shift; exec "$@"'
_serial = itertools.count()


def size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.4g} {unit}"
    return f"{n} bytes"


def _mem_total() -> int:
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) << 10
    return 8 << 30


def setting(name: str) -> int:
    """A limit: KRIG_BUILD_PIDS (processes), KRIG_BUILD_MEMORY or KRIG_BUILD_DISK (sizes like 12G)."""
    var = f"KRIG_BUILD_{name.upper()}"
    raw = os.environ.get(var, "").strip()
    if name == "pids":
        if not raw:
            return PIDS
        if not (raw.isascii() and raw.isdigit()) or int(raw) < MIN_PIDS:
            raise UsageError(f"{var}: expected a number of processes, at least {MIN_PIDS}, got {raw!r}")
        return int(raw)
    default, least = {"memory": (max(MIN_MEMORY, _mem_total() // 2), MIN_MEMORY), "disk": (DISK, MIN_DISK)}[name]
    if not raw:
        return default
    n = parse_size(raw, var)
    if n < least:
        raise UsageError(f"{var}: at least {size_text(least)}, got {raw!r}")
    return n


def settings() -> dict:
    """Every limit of a series' build, each checked (one line naming a bad one)."""
    return {name: setting(name) for name in ("pids", "memory", "disk")}


# -- where groups can be made ---------------------------------------------------

def _mounts() -> list:
    """(mount point, fstype, super options) of the cgroup file systems."""
    out = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fields, rest = pre.split(), post.split()
        if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            out.append((fields[4].replace("\\040", " "), rest[0], set(rest[2].split(","))))
    return out


def _own(controller: str | None) -> str:
    """krig's own cgroup path in a v1 controller's hierarchy (None: the v2 one)."""
    for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if (controller is None and ctrls == "") or (controller and controller in ctrls.split(",")):
            return path
    return "/"


def _below(top: str, path: str) -> pathlib.Path:
    return pathlib.Path(top) / path.lstrip("/")


def layout() -> dict:
    """{"version": 1 or 2, "parents": {controller or "": [candidate parent directories]}}, or a
    {"problem": ...}: where a build's group may be made here."""
    mounts = _mounts()
    v1 = {c: m for c in ("pids", "memory") for m, fs, opts in mounts if fs == "cgroup" and c in opts}
    if len(v1) == 2:
        return {"version": 1, "parents": {c: list(dict.fromkeys([_below(m, _own(c)), pathlib.Path(m)]))
                                          for c, m in v1.items()}}
    delegated = os.environ.get("KRIG_BUILD_CGROUP", "").strip()
    for m, fs, _ in mounts:
        ctrls = (pathlib.Path(m) / "cgroup.controllers")
        if fs == "cgroup2" and ctrls.exists() and {"pids", "memory"} <= set(ctrls.read_text().split()):
            cands = [pathlib.Path(delegated)] if delegated else [_below(m, _own(None)), pathlib.Path(m)]
            return {"version": 2, "parents": {"": list(dict.fromkeys(cands))}}
    return {"problem": "no cgroup hierarchy with the pids and memory controllers "
                       "(neither cgroup v2 at /sys/fs/cgroup nor v1's pids and memory)"}


class Group:
    """A cgroup (one per v1 controller, one on v2) that bounds a build's processes together."""

    def __init__(self, pids: int, memory: int):
        self.pids, self.memory = pids, memory
        self.dirs: dict[str, pathlib.Path] = {}  # controller ("" on v2) -> the group's directory
        self.version = None

    def make(self) -> "Group":
        plan = layout()
        if "problem" in plan:
            raise KrigError(plan["problem"])
        self.version = plan["version"]
        name = f"{PREFIX}{_pidns()}-{os.getpid()}-{next(_serial)}"
        try:
            for ctrl, parents in plan["parents"].items():
                self.dirs[ctrl] = self._make_in(parents, ctrl, name)
        except BaseException:
            self.remove()
            raise
        return self

    def _make_in(self, parents: list, ctrl: str, name: str) -> pathlib.Path:
        why = []
        for parent in parents:
            d = parent / name
            try:
                if self.version == 2:
                    _enable(parent)
                d.mkdir()
            except OSError as e:
                why.append(f"{parent}: {e.strerror or e}")
                continue
            try:
                self._limit(d, ctrl)
                return d
            except OSError as e:
                why.append(f"{d}: {e.strerror or e}")
                _rmdir(d)
        raise KrigError(f"cannot make a cgroup for the build ({'; '.join(why) or 'no place for it'})")

    def _limit(self, d: pathlib.Path, ctrl: str) -> None:
        if ctrl in ("", "pids"):
            (d / "pids.max").write_text(f"{self.pids}\n")
        if ctrl in ("", "memory"):
            (d / ("memory.max" if self.version == 2 else "memory.limit_in_bytes")).write_text(f"{self.memory}\n")

    def wrap(self, argv: list) -> list:
        """argv started in the group: nothing of it runs outside it."""
        return ["sh", "-c", JOIN, "krig-cgroup", *(str(d / "cgroup.procs") for d in self.dirs.values()), "--",
                *map(str, argv)]

    def breach(self) -> str | None:
        """Which limit the kernel enforced on the group, in words, or None."""
        pids = self.dirs.get("pids", self.dirs.get(""))
        mem = self.dirs.get("memory", self.dirs.get(""))
        if pids is not None and _counter(pids / "pids.events", "max"):
            return f"its process limit (pids.max {self.pids}, KRIG_BUILD_PIDS)"
        events = mem / ("memory.events" if self.version == 2 else "memory.oom_control") if mem else None
        if events is not None and _counter(events, "oom_kill"):
            knob = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
            return f"its memory limit ({knob} {size_text(self.memory)}, KRIG_BUILD_MEMORY: the OOM killer ended a process)"
        return None

    def remove(self) -> None:
        """Kill what is left in the group, then remove it."""
        for d in self.dirs.values():
            _empty(d)
            _rmdir(d)
        self.dirs = {}


def _enable(parent: pathlib.Path) -> None:
    """cgroup v2: the pids and memory controllers given to parent's children."""
    have = set((parent / "cgroup.subtree_control").read_text().split())
    if not {"pids", "memory"} <= have:
        (parent / "cgroup.subtree_control").write_text("+pids +memory\n")


def _counter(path: pathlib.Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key and v.strip().isdigit():
                return int(v)
    except OSError:
        pass
    return 0


def _members(d: pathlib.Path) -> list:
    try:
        return [int(x) for x in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _empty(d: pathlib.Path) -> None:
    """Every process of the group killed (cgroup.kill on v2, else each one), until none is left."""
    for _ in range(KILL_STEPS):
        left = _members(d)
        if not left:
            return
        try:
            (d / "cgroup.kill").write_text("1\n")
        except OSError:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.01)


def _rmdir(d: pathlib.Path) -> None:
    for _ in range(KILL_STEPS):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)        # a killed process is still leaving


def _pidns() -> int:
    """krig's PID namespace: a group's pid is looked for only in the namespace that made it."""
    return os.stat("/proc/self/ns/pid").st_ino


def sweep(parent: pathlib.Path) -> None:
    """Groups a killed krig left below parent (krig-build-<pid namespace>-<pid>-<n>, made in this
    PID namespace by a pid that is gone): emptied, removed."""
    try:
        kids = [d for d in parent.glob(f"{PREFIX}{_pidns()}-*") if d.is_dir()]
    except OSError:
        return
    for d in kids:
        pid = d.name[len(PREFIX):].split("-")[1]
        if pid.isdigit() and not pathlib.Path(f"/proc/{pid}").exists():
            _empty(d)
            _rmdir(d)


def sweep_all() -> None:
    """sweep() wherever this host's groups are made."""
    for parents in layout().get("parents", {}).values():
        for parent in parents:
            sweep(parent)


def groups_of(pid: int) -> list:
    """The groups process `pid` made that are still there."""
    return [d for parents in layout().get("parents", {}).values() for parent in parents
            for d in parent.glob(f"{PREFIX}{_pidns()}-{pid}-*")]


@functools.lru_cache(maxsize=1)
def problem() -> str | None:
    """Why a build's group cannot be made here (None when it can): tried once, then removed."""
    try:
        Group(PIDS, MIN_MEMORY << 4).make().remove()
    except KrigError as e:
        return str(e)
    except OSError as e:
        return f"cannot make a cgroup for the build: {e}"
    return None
