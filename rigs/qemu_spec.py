"""A QEMU rig file's fields, checked: one line naming the field and what is allowed, never a
traceback; extra_args only from a short list of options that reach no host file, socket,
network, monitor or device."""
import re

from krig.config import parse_size
from krig.errors import UsageError
from krig.schema import Field, check
from . import qemu_memory

# How TCG runs the vCPUs: "multi" (one host thread per vCPU, QEMU's default) or
# "single" (all vCPUs round-robin on one thread). See docs/rigs.md, "The TCG boot flake".
TCG_THREAD = "single"
# The guest clocksource under TCG: "kernel" (default) leaves the kernel's choice, which under
# TCG is the HPET, an emulated MMIO device read on every clock read (one per trace event,
# -C mono); "tsc" boots with clocksource=tsc tsc=reliable. Measured side by side, the two
# cost the traced workload the same within the noise, so the default stays the kernel's.
# See docs/rigs.md, "The clock under TCG".
TCG_CLOCKSOURCE = "kernel"
TCG_TSC_CMDLINE = ["clocksource=tsc", "tsc=reliable"]


# extra_args a rig file may add: each takes one value. Nothing that reaches host
# files, sockets, the network, the monitor or host devices (-drive, -virtfs,
# -chardev, -netdev, -monitor, -object, -plugin, ... are refused).
EXTRA_ARGS_ALLOWED = ("-cpu", "-device", "-global", "-machine", "-numa", "-overcommit", "-rtc", "-smp")
# -device drivers that pass host hardware or host files through, or need a refused backend.
DEVICE_REFUSED = re.compile(r"^(vfio|usb-host|u2f-passthru|virtio-9p|vhost|ivshmem|vhost-user|"
                            r"vfio-user|xen|pci-assign|virtio-net|e1000|rtl8139|ne2k|virtio-serial|"
                            r"virtserialport|virtconsole|isa-serial|pci-serial|usb-redir|usb-serial|loader)")
BACKEND_REF = re.compile(r"(?:^|[,.])((?:file|path|chardev|drive|netdev|fsdev|memdev|memory-backend|"
                         r"romfile|bootindex|kernel|initrd|dtb|dumpdtb|firmware|bios|pflash\d*|sysfsdev|"
                         r"audiodev|memory-encryption|confidential-guest-support|sgx-epc|x-igd-opregion)\b=?)")
# -machine properties a rig file may set (every other names a host file, a backend or an object:
# kernel=, initrd=, dtb=, dumpdtb=, firmware=, append=, memory-backend=, pflash0=, ...)
MACHINE_PROPS = ("type", "accel", "smm", "vmport", "kernel-irqchip", "hpet", "usb", "nvdimm", "hmat",
                 "dump-guest-core", "mem-merge", "suppress-vmdesc", "pic", "pit", "sata", "smbus", "graphics",
                 "i8042", "acpi", "max-ram-below-4g", "default-bus-bypass-iommu", "x-oem-id", "x-oem-table-id")
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


def validate_spec(name: str, spec: dict, where: str) -> dict:
    """A QEMU rig file (FIELDS), checked."""
    out = check(spec, FIELDS, where)
    check_extra_args(out["extra_args"], f"{where}.extra_args")
    for i, d in enumerate(out["disks"]):
        if d["role"] is None:
            d["role"] = "scratch" if i == 0 else "extra"
    return out


def check_extra_args(args: list, where: str) -> None:
    """Option/value pairs from EXTRA_ARGS_ALLOWED only; one line naming the first refused one."""
    if len(args) % 2:
        raise UsageError(f"{where}: {args[-1]!r} has no value; write each option and its value as two items")
    for opt, value in zip(args[::2], args[1::2]):
        if opt not in EXTRA_ARGS_ALLOWED:
            raise UsageError(f"{where}: {opt} is not allowed; allowed: {', '.join(EXTRA_ARGS_ALLOWED)}")
        driver = value.split(",", 1)[0]
        if opt == "-device" and DEVICE_REFUSED.match(driver):
            raise UsageError(f"{where}: -device {driver} is not allowed (host devices, files, "
                             "sockets and networks are krig's to set)")
        if opt == "-machine":
            for i, item in enumerate(value.split(",")):
                key, eq, _ = item.partition("=")
                if (eq or i) and key not in MACHINE_PROPS:
                    raise UsageError(f"{where}: -machine {value}: {key}= is not allowed (no host files, "
                                     f"backends or objects from a rig file); allowed: {', '.join(MACHINE_PROPS)}")
        ref = BACKEND_REF.search(value)
        if ref:
            raise UsageError(f"{where}: {opt} {value}: {ref.group(1)} is not allowed (no host files, "
                             "sockets, drives or networks from a rig file)")
