"""A QEMU rig file's fields, checked: one line naming the field and what is allowed, never a
traceback; extra_args only from a short list of options that reach no host file, socket,
network, monitor or device."""
import re

from krig.config import optional, parse_size, reject_unknown, require
from krig.errors import UsageError
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
MODULE_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def validate_spec(name: str, spec: dict, where: str) -> dict:
    reject_unknown(spec, {"driver", "description", "memory", "cpus", "accel", "tcg_thread", "tcg_clocksource",
                          "boot_timeout", "disks", "modules", "extra_args", "keep_disks", "work_dir",
                          "kernel_entry", "memory_backing", "like_memory", "host_margin"},
                  where)
    out = {"driver": "qemu", "description": optional(spec, "description", str, where, "")}
    out["work_dir"] = optional(spec, "work_dir", str, where, None)
    out["memory_bytes"] = parse_size(optional(spec, "memory", (str, int), where, "4G"), f"{where}.memory")
    out["memory"] = optional(spec, "memory", (str, int), where, "4G")
    qemu_memory.validate(spec, out, where)
    out["cpus"] = optional(spec, "cpus", int, where, 2)
    if out["cpus"] < 1:
        raise UsageError(f"{where}.cpus: must be at least 1, got {out['cpus']}")
    out["accel"] = optional(spec, "accel", str, where, "auto")
    if out["accel"] not in ("auto", "kvm", "tcg"):
        raise UsageError(f"{where}.accel: {out['accel']!r} is not one of auto, kvm, tcg")
    out["tcg_thread"] = optional(spec, "tcg_thread", str, where, TCG_THREAD)
    if out["tcg_thread"] not in ("single", "multi"):
        raise UsageError(f"{where}.tcg_thread: {out['tcg_thread']!r} is not one of single, multi")
    out["tcg_clocksource"] = optional(spec, "tcg_clocksource", str, where, TCG_CLOCKSOURCE)
    if out["tcg_clocksource"] not in ("tsc", "kernel"):
        raise UsageError(f"{where}.tcg_clocksource: {out['tcg_clocksource']!r} is not one of tsc, kernel")
    out["boot_timeout"] = optional(spec, "boot_timeout", (int, float), where, 180)
    out["kernel_entry"] = optional(spec, "kernel_entry", str, where, "auto")
    if out["kernel_entry"] not in ("auto", "bzimage"):
        raise UsageError(f"{where}.kernel_entry: {out['kernel_entry']!r} is not one of auto, bzimage")
    out["modules"] = optional(spec, "modules", list, where, [])
    out["extra_args"] = optional(spec, "extra_args", list, where, [])
    for a in out["extra_args"] + out["modules"]:
        if not isinstance(a, str):
            raise UsageError(f"{where}: extra_args and modules must be lists of strings, got {a!r}")
    for m in out["modules"]:
        if not MODULE_RE.match(m):
            raise UsageError(f"{where}.modules: {m!r} is not a module name")
    check_extra_args(out["extra_args"], f"{where}.extra_args")
    out["keep_disks"] = optional(spec, "keep_disks", bool, where, False)
    disks = []
    for i, d in enumerate(optional(spec, "disks", list, where, [])):
        dw = f"{where}.disks[{i}]"
        if not isinstance(d, dict):
            raise UsageError(f"{dw}: expected a table with size and serial")
        reject_unknown(d, {"size", "serial", "role"}, dw)
        size = parse_size(require(d, "size", (str, int), dw), f"{dw}.size")
        serial = require(d, "serial", str, dw)
        if not serial.isascii() or not serial.replace("-", "").isalnum() or len(serial) > 20:
            raise UsageError(f"{dw}.serial: {serial!r}: use up to 20 letters, digits or '-'")
        role = optional(d, "role", str, dw, "scratch" if i == 0 else "extra")
        disks.append({"size": size, "serial": serial, "role": role})
    out["disks"] = disks
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
