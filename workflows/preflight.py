"""Preflight: what a run will take from this host, checked before anything starts.

Guest memory and CPUs against what the host can give, free space of the
results filesystem and of the rig's work directory (scratch images, the
results share) against what the reproducer will write (its output, and what
its preset declares it writes to the scratch disk: requires.scratch_write, as
a sparse scratch image grows by that much), and the programs the rig runs. A guest whose RAM
is backed only where it touches (a sparse QEMU guest) is judged by what it will touch: the
rig's fixed cost of a boot plus the reproducer's requires.touch and trace buffers, against
MemAvailable less the rig's margin; a reproducer that stops itself at the host's budget
(requires.host_budget_guard) by the fixed cost plus what it touches outside that guard. A
shortfall is bad input (exit 2): one line, nothing started.

Every workflow that boots kernels on a rig (run, a group, validate, bisect, qualify) checks
before it builds any of them (before_build): the rig can boot the kernels asked (a rig that boots
only the machine's installed kernel never boots one krig builds: check_boots), the preflight, and
a lab server's BMC login (rigs/check.py).
"""
import os
import pathlib
import shutil

from kernels.catalog import krig_builds
from krig.errors import UsageError
from krig.reproducer import touch_bytes
from rigs import memory_refusal as refusal
from rigs.check import before_build as rig_ready

LOG_ALLOWANCE = 1 << 20      # console.log, manifest, verdict, junit, samples of a short run


def mem_available() -> int:
    """MemAvailable of /proc/meminfo in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _existing(path: pathlib.Path) -> pathlib.Path:
    """path, or its nearest existing parent (the results root may not exist yet)."""
    path = pathlib.Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _free(path: pathlib.Path) -> tuple[int, int]:
    """(device, bytes free to an unprivileged writer) of the filesystem holding path."""
    p = _existing(path)
    st = os.statvfs(p)
    return os.stat(p).st_dev, st.f_bavail * st.f_frsize


def _mib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 \
        else f"{n >> 10} KiB"


def output_estimate(repro, cpus: int, collect: bool = True, preset: str | None = None) -> tuple[int, str]:
    """Bytes a run writes at least into its results, and how that figure is made up."""
    parts = [(repro.requires_for(preset).get("output_size", 0), "declared output (requires.output_size)"),
             (LOG_ALLOWANCE, "logs")]
    if repro.trace_events and collect:
        parts.insert(0, (repro.trace_buffer_kb * 1024 * cpus,
                         f"trace buffers {repro.trace_buffer_kb} KiB x {cpus} CPUs"))
    return sum(n for n, _ in parts), " + ".join(f"{what} {_mib(n)}" for n, what in parts)


def preflight(rig, repro, results_root: pathlib.Path, collect: bool = True, preset: str | None = None,
              params: dict | None = None) -> dict:
    """Raise UsageError naming the first thing this host cannot give; return what was checked.
    params: the run's resolved parameters (what requires.touch may scale with)."""
    needs = rig.host_needs()
    where = rig.where
    for prog in needs.get("programs", []):
        if shutil.which(prog) is None:
            raise UsageError(f"{where}: the rig needs the program {prog}, which is not on PATH; run `make setup`")
    mem = needs.get("memory")
    avail = mem_available()
    said = refusal(mem, avail) if mem else None     # a sparse guest: by its touch, below
    if said:
        raise UsageError(f"{where}.memory: {said}")
    touched = sparse_touch(needs.get("sparse_memory"), repro, preset, collect, needs.get("cpus") or 1, avail, params,
                           where)
    cpus = needs.get("cpus")
    ncpu = os.cpu_count() or 1
    if cpus and cpus > ncpu:
        raise UsageError(f"{where}.cpus: {cpus} is more than this host's {ncpu} CPUs")
    need, how = output_estimate(repro, cpus or 1, collect, preset)
    places = [(pathlib.Path(results_root), "the results directory (KRIG_RESULTS)", need, how)]
    scratch = repro.requires_for(preset).get("scratch_write", 0)
    if needs.get("work_dir"):       # the results share, and the scratch image as it grows
        places.append((pathlib.Path(needs["work_dir"]), f"{where} work directory (scratch images, results share)",
                       need + scratch, how + (f" + scratch disk writes {_mib(scratch)} (requires.scratch_write)"
                                              if scratch else "")))
    seen: dict[int, int] = {}      # st_dev -> the most space asked of it
    for path, what, want, how in places:
        dev, free = _free(path)
        if seen.get(dev, -1) >= want:   # same filesystem: the results are moved, not copied
            continue
        seen[dev] = want
        if free < want:
            raise UsageError(f"{path}: {_mib(free)} free for {what}, the run needs at least {_mib(want)} "
                             f"({how})")
    return {"mem_available": avail, "host_cpus": ncpu, "output_estimate": need, "scratch_write": scratch,
            **touched}


def sparse_touch(sparse: dict | None, repro, preset, collect: bool, cpus: int, avail: int, params: dict | None,
                 where: str) -> dict:
    """A sparse guest: fixed cost + the workload's touch (requires.touch, trace buffers) must fit
    in MemAvailable less the margin. A workload that stops itself at the host's budget
    (requires.host_budget_guard) is admitted when the fixed cost + what it touches outside that
    guard fits: the guard stops it before the host runs short (a run it stops below the
    reproducer's limit ends ERROR, not a verdict on the kernel). What was counted, or one line
    naming the numbers."""
    if not sparse:
        return {}
    req = repro.requires_for(preset)
    touch, how = touch_bytes(req, sparse["ram"], params)
    trace, with_trace = 0, ""
    if repro.trace_events and collect:
        trace = repro.buffer_kb_for(preset) * 1024 * cpus
        with_trace = f" + trace buffers {_mib(trace)}"
    touch, how = touch + trace, how + with_trace
    fixed, total, room = sparse["fixed"], sparse["fixed"] + touch, avail - sparse["margin"]
    out = {"sparse_fixed": fixed, "sparse_touch": touch, "sparse_touch_how": how, "sparse_margin": sparse["margin"]}
    if total <= room:
        return out
    said = (f"{where}: a sparse {_mib(sparse['ram'])} guest would touch {_mib(fixed)} fixed "
            f"({sparse['fixed_how']}) + {_mib(touch)} for {repro.name} ({how}) = {_mib(total)}")
    host = f"this host's MemAvailable {_mib(avail)} less a {_mib(sparse['margin'])} margin"
    if "host_budget_guard" not in req:
        raise UsageError(f"{said}, more than {host}")
    guarded, ghow = touch_bytes(req, sparse["ram"], params, "host_budget_guard")
    guarded, ghow = min(guarded + trace, touch), ghow + with_trace
    if fixed + guarded > room:
        raise UsageError(f"{said}, and {_mib(fixed + guarded)} before its host-budget guard stops it "
                         f"({ghow}): more than {host}")
    return {**out, "sparse_admitted_by": "host_budget_guard", "sparse_guarded_touch": guarded,
            "sparse_guarded_touch_how": ghow, "sparse_room": room}


def admission_line(host: dict) -> str:
    """What the log says of a sparse run admitted by its host-budget guard (host: preflight's facts)."""
    mib = {k: host[k] >> 20 for k in ("sparse_fixed", "sparse_touch", "sparse_room", "sparse_guarded_touch")}
    return (f"krig: admitted by its host-budget guard: {mib['sparse_fixed']} MiB fixed + {mib['sparse_touch']} MiB "
            f"of touch do not fit in {mib['sparse_room']} MiB (MemAvailable less the margin), the fixed cost + "
            f"{mib['sparse_guarded_touch']} MiB outside the guard do; if the guard stops it below its limit, "
            f"the run is ERROR")


def check_boots(rig, asked: list) -> None:
    """Kernels the rig cannot boot, refused before any is built: a rig that boots only the
    machine's installed kernel (Rig.boots_installed_only) never boots one krig builds.
    asked: (option, kernel text) pairs; a text of None is a kernel krig builds whatever it is
    (a bisection's commits)."""
    only = rig.boots_installed_only()
    if not only:
        return
    for option, text in asked:
        if text is None or krig_builds(text):
            said = option if text is None else f"{option} {text}"
            raise UsageError(f"{said}: rig {rig.name} cannot boot a kernel krig builds: {only}; nothing was built")


def before_build(rig, repro, results_root: pathlib.Path, asked: list, collect: bool = True,
                 preset: str | None = None, params: dict | None = None) -> dict:
    """What a workflow checks before it builds a kernel for a run on `rig`: the kernels asked
    (check_boots), then the host (preflight: memory, a sparse guest's budget, CPUs, free space,
    programs), then a lab server's rig as `krig rig check` checks it (rigs/check.py before_build:
    its secrets and host key, its BMC's login and privileges once a process, nothing powered).
    Returns the preflight's facts."""
    check_boots(rig, asked)
    facts = preflight(rig, repro, results_root, collect, preset, params)
    rig_ready(rig)
    return facts
