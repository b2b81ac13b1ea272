"""A QEMU rig file's fields, checked: one line naming the field and what is allowed, never a
traceback; extra_args by what QEMU would open with them (rigs/qemu/args.py). The checked file
is a QemuSpec (FIELDS as a frozen record, krig/schema.py), its [[disks]] QemuSpecDisks."""

from krig.config import parse_size
from krig.schema import Field, Record, check
from rigs.protocol import RigSpec
from rigs.qemu import args as qemu_args

# How TCG runs the vCPUs: "multi" (one host thread per vCPU, QEMU's default) or
from rigs.qemu import memory as qemu_memory
# "single" (all vCPUs round-robin on one thread). See docs/rigs.md, "The TCG boot flake".
TCG_THREAD = "single"
# The guest clocksource under TCG: "kernel" (default) leaves the kernel's choice, which under
# TCG is the HPET, an emulated MMIO device read on every clock read (one per trace event,
# -C mono); "tsc" boots with clocksource=tsc tsc=reliable. Measured side by side, the two
# cost the traced workload the same within the noise, so the default stays the kernel's.
# See docs/rigs.md, "The clock under TCG".
TCG_CLOCKSOURCE = "kernel"
TCG_TSC_CMDLINE = ["clocksource=tsc", "tsc=reliable"]


MODULE_RE = r"[A-Za-z0-9_-]+"


DISK = (
    Field("size", (str, int), convert=parse_size),
    Field("serial", str, test=lambda s: s.isascii() and s.replace("-", "").isalnum() and len(s) <= 20,
          says="{v!r}: use up to 20 letters, digits or '-'"),
    Field("role", str, None),                   # default: "scratch" for the first disk, "extra" after it
)
FIELDS = (
    Field("driver", str, "qemu", choices=("qemu",)),
    Field("description", str, ""),
    Field("work_dir", str, None),
    Field("memory", (str, int), "4G"),
    Field("memory", (str, int), "4G", convert=parse_size, name="memory_bytes"),
    *qemu_memory.FIELDS,
    Field("cpus", int, 2, min=1),
    Field("accel", str, "auto", choices=("auto", "kvm", "tcg")),
    Field("tcg_thread", str, TCG_THREAD, choices=("single", "multi")),
    Field("tcg_clocksource", str, TCG_CLOCKSOURCE, choices=("tsc", "kernel")),
    Field("boot_timeout", (int, float), 180),
    Field("kernel_entry", str, "auto", choices=("auto", "bzimage")),
    Field("modules", list, [], each=MODULE_RE, says="{item!r} is not a module name"),
    Field("extra_args", list, [], each=str, says="expected a list of strings, got {item!r}"),
    Field("keep_disks", bool, False),
    Field("disks", list, [], rows=DISK, says="expected a table with size and serial"),
)


class QemuSpecDisks(Record, fields=DISK):
    size: int
    serial: str
    role: str | None


class QemuSpec(RigSpec, fields=FIELDS):
    work_dir: str | None
    memory: str | int
    memory_bytes: int
    memory_backing: str
    like_memory: str | int | None
    like_memory_bytes: int | None
    host_margin_bytes: int | None
    cpus: int
    accel: str
    tcg_thread: str
    tcg_clocksource: str
    boot_timeout: float
    kernel_entry: str
    modules: tuple[str, ...]
    extra_args: tuple[str, ...]
    keep_disks: bool
    disks: tuple[QemuSpecDisks, ...]


def validate_spec(name: str, spec: dict, where: str) -> QemuSpec:
    """A QEMU rig file (FIELDS), checked."""
    out = check(spec, FIELDS, where)
    qemu_args.check(out["extra_args"], f"{where}.extra_args")
    for i, d in enumerate(out["disks"]):
        if d["role"] is None:
            d["role"] = "scratch" if i == 0 else "extra"
    return QemuSpec.of(out)

