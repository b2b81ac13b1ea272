"""A QEMU guest's memory: how it is backed, what it costs the host, and the host watched.

`memory_backing = "sparse"` backs the guest's RAM with `memory-backend-ram,...,reserve=off`:
QEMU reserves no swap or commit for it, and a page of guest RAM takes host memory only once
the guest touches it. A guest may then declare more RAM than the host has; what the host
must hold is what the guest will *touch*: the fixed cost of any boot (fixed_cost(): the
guest's struct pages, its hash tables, page tables, QEMU itself) plus what the reproducer
declares it may touch (requires.touch), checked by workflows/preflight.py against MemAvailable
less the host's margin (margin(): the rig's host_margin, else 1 GiB or 5% of MemTotal).

While a sparse guest runs, MemoryWatch samples the host's MemAvailable and QEMU's RSS into
host-memory.tsv and writes the host budget (MemAvailable less the margin: the bytes of guest
memory the guest may still touch) into the share, where the guest reads it at
/run/krig/share/host-budget (KRIG_HOST_BUDGET_FILE; KRIG_HOST_BUDGET_BYTES holds its value
when the workload started). host_oom() names the host's OOM kill of QEMU.

A `spec` below is the checked QEMU rig file (rigs/qemu/spec.py: QemuSpec).
"""
import pathlib
import re
import subprocess
import threading
import time

from krig import safeio
from krig.config import parse_size
from krig import hashsize
from krig.errors import KrigError
from krig.schema import Field
from rigs.hashsize import like_cmdline

BACKINGS = ("ram", "sparse")
BACKEND_ID = "m0"
GIB = 1 << 30
# QEMU itself and what any boot touches besides struct pages and hash tables (TCG's translated
# code, the kernel image, the initramfs, early allocations): 370-420 MiB in the RSS after boot
# of 4-256 GB sparse guests (docs/measurements.md), rounded up.
QEMU_BASE = 512 << 20
HOST_MARGIN_MIN = 1 << 30          # never plan the host's last GiB
HOST_MARGIN_PCT = 5                # or this % of its MemTotal, whichever is more
LOW_PCT = 3                        # MemAvailable under this % of MemTotal (or 256 MiB) is "near 0"
LOW_MIN = 256 << 20
MEMINFO = "/proc/meminfo"
BUDGET_FILE = "host-budget"        # in the share
TSV = "host-memory.tsv"
TSV_HEADER = "mono\tmem_available_bytes\temulator_rss_bytes\thost_budget_bytes\n"
LIKE_MIN, LIKE_MAX = 512 << 20, 64 << 40
MARGIN_MAX = 64 << 40


# a QEMU rig file's memory fields (krig/schema.py): the backing, the density of hash tables, the host's margin
FIELDS = (
    Field("memory_backing", str, "ram", choices=BACKINGS),
    Field("like_memory", (str, int), None),
    Field("like_memory", (str, int), None, convert=parse_size, test=lambda v: LIKE_MIN <= v <= LIKE_MAX,
          says="{raw!r} is outside 512M-64T", name="like_memory_bytes"),
    Field("host_margin", (str, int), None, convert=parse_size, test=lambda v: HOST_MARGIN_MIN <= v <= MARGIN_MAX,
          says="{raw!r} is outside 1G-64T", name="host_margin_bytes"),
)


def machine_args(backing: str, ram: int) -> list:
    """-machine (and, for a guest of `ram` bytes whose memory_backing is sparse, the -object
    backing its RAM)."""
    if backing != "sparse":
        return ["-machine", "q35"]
    return ["-object", f"memory-backend-ram,id={BACKEND_ID},size={ram},reserve=off",
            "-machine", f"q35,memory-backend={BACKEND_ID}"]


def hash_cmdline(spec) -> list:
    """dhash_entries=/ihash_entries= giving the guest the density of a like_memory machine
    (spec: the checked rig file, rigs/qemu/spec.py QemuSpec)."""
    if spec.like_memory_bytes is None:
        return []
    return like_cmdline(spec.memory_bytes, spec.like_memory_bytes)


def fixed_cost(ram: int, like_ram: int | None = None) -> tuple[int, str]:
    """Host memory any boot of a sparse guest of `ram` bytes touches (its hash tables sized like
    a machine of like_ram bytes, if given), and how it is made up."""
    tables = hashsize.table_bytes(ram) if like_ram is None else \
        sum(hashsize.like(ram, like_ram).values()) * hashsize.BUCKET_BYTES
    struct_pages = ram * hashsize.STRUCT_PAGE >> hashsize.PAGE_SHIFT
    parts = [(struct_pages, "struct pages (RAM/64)"), (tables, "hash tables"),
             ((struct_pages + tables) >> 9, "page tables"), (QEMU_BASE, "QEMU and boot")]
    return sum(n for n, _ in parts), " + ".join(f"{what} {mib(n)}" for n, what in parts)


def mib(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"


def meminfo() -> dict:
    """MemTotal and MemAvailable of the host in bytes."""
    out = {}
    with open(MEMINFO) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def margin(mem_total: int | None = None, spec=None) -> int:
    """The host memory a sparse guest never plans on: the rig's host_margin (what the host keeps
    for everything else, e.g. other guests and builds on a shared machine), else the larger of
    1 GiB and 5% of MemTotal."""
    if spec is not None and spec.host_margin_bytes:
        return spec.host_margin_bytes
    total = meminfo().get("MemTotal", 0) if mem_total is None else mem_total
    return max(HOST_MARGIN_MIN, total * HOST_MARGIN_PCT // 100)


def rss(pid: int) -> int | None:
    """Resident memory of a process in bytes (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class MemoryWatch:
    """Samples the host's MemAvailable and QEMU's RSS every `interval` s into `path` and writes
    the host budget into share/BUDGET_FILE, until QEMU is gone or stop()."""

    def __init__(self, proc, path: pathlib.Path, share: pathlib.Path | None, interval: float = 1.0,
                 spec=None):
        self.proc, self.path, self.share, self.interval = proc, pathlib.Path(path), share, interval
        self.total = meminfo().get("MemTotal", 0)
        self.margin = margin(self.total, spec)
        self.last: tuple | None = None          # (mem_available, rss) of the latest sample
        self.min_available: int | None = None
        self.peak_rss: int | None = None
        self.budget_given: int | None = None    # what the workload was told when it started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="krig-memory-watch", daemon=True)

    def start(self) -> "MemoryWatch":
        self.path.write_text(TSV_HEADER)
        self.sample()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def budget(self) -> int:
        """Bytes of guest memory the guest may still touch: MemAvailable less the margin."""
        avail = self.last[0] if self.last else meminfo().get("MemAvailable", 0)
        return max(0, avail - self.margin)

    def sample(self, out=None):
        try:
            avail = meminfo().get("MemAvailable", 0)
        except OSError:
            return
        used = rss(self.proc.pid) if self.proc.poll() is None else None
        self.last = (avail, used if used is not None else (self.last[1] if self.last else None))
        self.min_available = avail if self.min_available is None else min(self.min_available, avail)
        if used is not None:
            self.peak_rss = max(self.peak_rss or 0, used)
        budget = max(0, avail - self.margin)
        if out is not None:
            out.write(f"{time.monotonic():.3f}\t{avail}\t{'' if used is None else used}\t{budget}\n")
            out.flush()
        if self.share is not None and used is not None:
            try:
                safeio.write_bytes(self.share, BUDGET_FILE, f"{budget}\n".encode())
            except (OSError, KrigError):
                pass                        # the guest spoilt its share: it goes without a budget

    def _loop(self):
        with open(self.path, "a") as out:
            while not self._stop.wait(self.interval):
                self.sample(out)
                if self.proc.poll() is not None:
                    return

    def low(self) -> bool:
        """Was the host's MemAvailable near 0 at the last sample?"""
        return bool(self.last and self.last[0] < max(LOW_MIN, self.total * LOW_PCT // 100))

    def facts(self) -> dict:
        return {"host_mem_total": self.total, "host_margin": self.margin, "host_budget_at_workload": self.budget_given,
                "host_mem_available_min": self.min_available, "qemu_rss_peak": self.peak_rss}


def kernel_log_oom(pid: int) -> str | None:
    """The host kernel's line saying its OOM killer killed pid, if the log can be read."""
    pat = re.compile(rf"Killed process {pid} \(|[,:]pid={pid},")
    for argv in (["dmesg"], ["journalctl", "-k", "-q", "--no-pager", "-n", "2000"]):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        hits = [ln.strip() for ln in p.stdout.splitlines() if pat.search(ln)]
        if hits:
            return next((h for h in hits if "Killed process" in h), hits[0])
        if p.returncode == 0:
            return None
    return None


def host_oom(proc, watch: MemoryWatch | None) -> str | None:
    """One line when the host killed QEMU for memory: SIGKILL, and the host kernel's log names
    the OOM kill, or MemAvailable was near 0 at the last sample. None otherwise."""
    if proc is None or proc.returncode != -9:
        return None
    said = kernel_log_oom(proc.pid)
    seen = ""
    if watch and watch.last:
        avail = watch.last[0]
        seen = f"MemAvailable {mib(avail)} of {mib(watch.total)} at the last sample ({TSV})"
    if said:
        return f"the host's OOM killer killed the emulator (QEMU pid {proc.pid}): \"{said}\"" + \
            (f"; {seen}" if seen else "")
    if watch and watch.low():
        return (f"the emulator (QEMU pid {proc.pid}) was killed by SIGKILL with the host out of memory "
                f"({seen}): the host's OOM killer")
    return None


def guest_env(watch: MemoryWatch | None, guest_share: str) -> dict:
    """What the workload is told of the host's memory: the budget now, and where to read it live."""
    if watch is None:
        return {}
    watch.budget_given = watch.budget()
    return {"KRIG_HOST_BUDGET_BYTES": str(watch.budget_given), "KRIG_HOST_BUDGET_FILE": f"{guest_share}/{BUDGET_FILE}"}


def sparse(spec) -> bool:
    return spec.memory_backing == "sparse"


def host_needs(spec) -> dict:
    """A sparse guest is judged by what it will touch, not by its RAM (workflows/preflight.py)."""
    if not sparse(spec):
        return {}
    return {"memory": None, "sparse_memory": sparse_needs(spec.memory_bytes, margin(spec=spec),
                                                          spec.like_memory_bytes)}


def sparse_needs(ram: int, margin_bytes: int, like_ram: int | None = None) -> dict:
    """What a sparse guest of `ram` bytes takes from the host before its workload: host_needs()'
    sparse_memory (its RAM, the fixed cost of a boot and how it is made up, the host's margin)."""
    fixed, how = fixed_cost(ram, like_ram)
    return {"ram": ram, "fixed": fixed, "fixed_how": how, "margin": margin_bytes}


def refusal(ram: int, avail: int, sparse_memory: dict | None = None) -> str | None:
    """The host-budget rule of a guest before any workload is counted (workflows/preflight.py for
    the QEMU rig, `krig lab sim up` for a simulated lab server): backed by RAM, its RAM must fit
    in MemAvailable; sparse (sparse_needs()), what any boot of it touches must fit in MemAvailable
    less the host's margin. None when it fits, else what does not, in one line."""
    if sparse_memory is None:
        return None if ram <= avail else f"{mib(ram)} is more than this host can give now (MemAvailable {mib(avail)})"
    fixed, room = sparse_memory["fixed"], avail - sparse_memory["margin"]
    if fixed <= room:
        return None
    return (f"a sparse {mib(ram)} guest would touch {mib(fixed)} at boot alone ({sparse_memory['fixed_how']}), "
            f"more than this host's MemAvailable {mib(avail)} less a {mib(sparse_memory['margin'])} margin")


def watch(spec, proc, run_dir: pathlib.Path, share: pathlib.Path) -> MemoryWatch | None:
    """A started MemoryWatch for a sparse guest's QEMU, else None."""
    return MemoryWatch(proc, run_dir / TSV, share, spec=spec).start() if sparse(spec) else None


def booted(spec, pid: int) -> dict:
    """Facts once the guest is up: its backing and, for a sparse guest, QEMU's RSS next to what
    fixed_cost() expects of it."""
    out = {"memory_backing": spec.memory_backing}
    if sparse(spec):
        fixed, how = fixed_cost(spec.memory_bytes, spec.like_memory_bytes)
        out.update({"qemu_rss_after_boot": rss(pid), "fixed_cost_estimate": fixed, "fixed_cost_how": how})
    return out

