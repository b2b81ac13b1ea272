"""A rig file's extra QEMU options, judged by what QEMU will do with them, not by their shape.

Each value is parsed the way QEMU 7.2 parses it: a `key=value,...` list (",," is a comma
inside a value; the first item without `=` is the option's implied key, such as -device's
driver; a later one is a flag, `x` for x=on and `nox` for x=off), the JSON `{...}` form
of -device, and both forms of -global (`driver.property=value`, whose value runs to the
end, commas and all, and `driver=D,property=P,value=V`). Every key it yields must be on an
allow-list: options, -device drivers and, for each driver, the properties that take a
number, a switch or a name; never one QEMU treats as a host file, a directory, a socket or
a backend (`file`, `romfile`, `rootdir`, `pcap`, `chardev`, `drive`, `memdev`, ...). Every
value must look like a number, a switch or a name, never like a path.
"""
import json
import re

from krig.errors import UsageError

OPTIONS = ("-cpu", "-device", "-global", "-machine", "-numa", "-overcommit", "-rtc", "-smp")
# a value: a number, on/off, a name, a PCI address or a date; never a path
VALUE = re.compile(r"[A-Za-z0-9_.:+-]*\Z")
# -cpu MODEL,+feature,-feature,feature=value: no x86 CPU property names a host file
CPU = re.compile(r"[A-Za-z0-9_.:+=,-]+\Z")

_PCI = ("addr", "multifunction", "acpi-index", "rombar", "x-pcie-lnksta-dllla", "x-pcie-extcap-init")
_VIRTIO = _PCI + ("disable-legacy", "disable-modern", "iommu_platform", "ats", "packed", "event_idx",
                  "indirect_desc", "vectors", "ioeventfd", "page-per-vq", "any_layout", "queue_reset")
_BRIDGE = _PCI + ("bus-reserve", "io-reserve", "mem-reserve", "pref32-reserve", "pref64-reserve")
# -device drivers a rig file may add, and their properties besides id= and bus= (each opens
# no host file: romfile=, pcap=, display=, chardev=, rng=, drive=, ... are on none of them)
DEVICES = {
    "virtio-rng-pci": _VIRTIO + ("max-bytes", "period"),
    "virtio-balloon-pci": _VIRTIO + ("deflate-on-oom", "free-page-hint", "free-page-reporting", "page-poison"),
    "virtio-iommu-pci": _VIRTIO + ("boot-bypass",),
    "pvpanic": ("events", "ioport"),
    "pvpanic-pci": _PCI + ("events",),
    "i6300esb": _PCI,
    "ib700": (),
    "edu": _PCI + ("dma_mask",),
    "pcie-root-port": _BRIDGE + ("chassis", "port", "slot", "hotplug", "x-speed", "x-width"),
    "pci-bridge": _BRIDGE + ("chassis_nr", "shpc", "msi"),
    "pcie-pci-bridge": _PCI + ("msi",),
    "intel-iommu": ("intremap", "caching-mode", "eim", "device-iotlb", "aw-bits", "dma-drain", "pt",
                    "snoop-control", "x-scalable-mode", "version"),
    "vmcoreinfo": (),
    "isa-debug-exit": ("iobase", "iosize"),
    "qemu-xhci": _PCI + ("p2", "p3", "streams"),
    "usb-kbd": ("port",), "usb-mouse": ("port",), "usb-tablet": ("port",),
}
DEVICE_COMMON = ("id", "bus")
# -global DRIVER.PROPERTY: a device above with one of its properties, or one of these
GLOBALS = {"ICH9-LPC": ("disable_s3", "disable_s4"), "PIIX4_PM": ("disable_s3", "disable_s4"),
           "kvm-pit": ("lost_tick_policy",), "mc146818rtc": ("lost_tick_policy",)}
# -machine properties (every other names a host file, a backend or an object: kernel=,
# initrd=, dtb=, dumpdtb=, firmware=, append=, memory-backend=, pflash0=, ...)
MACHINE_PROPS = ("type", "accel", "smm", "vmport", "kernel-irqchip", "hpet", "usb", "nvdimm", "hmat",
                 "dump-guest-core", "mem-merge", "suppress-vmdesc", "pic", "pit", "sata", "smbus", "graphics",
                 "i8042", "acpi", "max-ram-below-4g", "default-bus-bypass-iommu", "x-oem-id", "x-oem-table-id")
# the other options: their implied first key and their keys (-numa's memdev= names an object)
KEYS = {
    "-machine": ("type", MACHINE_PROPS),
    "-smp": ("cpus", ("cpus", "sockets", "dies", "clusters", "cores", "threads", "maxcpus")),
    "-numa": ("type", ("type", "nodeid", "cpus", "initiator", "src", "dst", "val", "node-id", "socket-id",
                       "die-id", "cluster-id", "core-id", "thread-id")),
    "-rtc": (None, ("base", "clock", "driftfix")),
    "-overcommit": (None, ("mem-lock", "cpu-pm")),
}
NUMA_TYPES = ("node", "dist", "cpu")


def split_opts(text: str) -> list:
    """QEMU's `key=value,...` list (util/qemu-option.c): (key, value) in order, key None for an
    item without `=`; ",," inside a value (or an item without `=`) is one comma."""
    out, p = [], 0
    while p < len(text):
        key_m = re.match(r"[^=,]*", text[p:])
        assert key_m is not None        # it matches the empty string at least
        n = len(key_m.group())
        if p + n < len(text) and text[p + n] == "=":
            key, (value, p) = text[p:p + n], _value(text, p + n + 1)
        else:
            key, (value, p) = None, _value(text, p)
        out.append((key, value))
        p += 1                      # the comma after the item
    return out


def _value(text: str, p: int) -> tuple[str, int]:
    """A value from p to the first single comma (",," is a comma): the value and where it ends."""
    parts: list[str] = []
    while True:
        end = text.find(",", p)
        if end < 0:
            return "".join(parts) + text[p:], len(text)
        if text[end + 1:end + 2] != ",":
            return "".join(parts) + text[p:end], end
        parts.append(text[p:end + 1])
        p = end + 2


def join_opts(pairs: list) -> str:
    """split_opts() undone: each comma of a value doubled."""
    return ",".join((f"{k}=" if k is not None else "") + v.replace(",", ",,") for k, v in pairs)


def keyed(text: str, implied: str | None) -> list:
    """split_opts() with every item named as QEMU names it: the first item without `=` is the
    implied key's value, a later one a flag (`x` is x=on, `nox` x=off)."""
    out = []
    for i, (key, value) in enumerate(split_opts(text)):
        if key is None and i == 0 and implied:
            key = implied
        elif key is None:
            key, value = (value[2:], "off") if value.startswith("no") else (value, "on")
        out.append((key, value))
    return out


def check(args: list, where: str) -> None:
    """A rig file's extra_args, option/value pairs: one line naming the first refused one."""
    if len(args) % 2:
        raise UsageError(f"{where}: {args[-1]!r} has no value; write each option and its value as two items")
    for opt, value in zip(args[::2], args[1::2]):
        if opt not in OPTIONS:
            raise UsageError(f"{where}: {opt} is not allowed; allowed: {', '.join(OPTIONS)}")
        said = f"{where}: {opt} {value!r}"
        if opt == "-cpu":
            if not CPU.match(value):
                raise UsageError(f"{said}: a CPU model and its features are letters, digits and '_.:+=,-'")
        elif opt == "-device":
            _device(_device_pairs(value, said), said)
        elif opt == "-global":
            _global(value, said)
        else:
            implied, allowed = KEYS[opt]
            pairs = keyed(value, implied)
            _keys(pairs, allowed, said, opt)
            if opt == "-numa" and dict(pairs).get("type") not in NUMA_TYPES:
                raise UsageError(f"{said}: the -numa types allowed are {', '.join(NUMA_TYPES)}")


def _name(s: str) -> str:
    """A name as the one-line error shows it: as it is, or quoted when it has a newline or the like."""
    return s if s.isprintable() else repr(s)


def _keys(pairs: list, allowed, said: str, what: str) -> None:
    for key, value in pairs:
        if key not in allowed:
            raise UsageError(f"{said}: {_name(key)}= is not allowed (no host files, sockets, backends or objects "
                             f"from a rig file); allowed for {what}: {', '.join(allowed)}")
        if not VALUE.match(value):
            raise UsageError(f"{said}: {key}={value!r} is not allowed: a value is a number, on/off or a "
                             "name (letters, digits and '_.:+-'), never a path")


def _device_pairs(value: str, said: str) -> list:
    """-device's items, from its JSON form or its key=value form (implied key: driver)."""
    if not value.startswith("{"):          # QEMU takes JSON when the first character is "{"
        return keyed(value, "driver")
    try:
        pairs = json.loads(value, object_pairs_hook=lambda kv: kv)
    except ValueError as e:
        raise UsageError(f"{said}: not valid JSON ({e})") from None
    if not isinstance(pairs, list):
        raise UsageError(f"{said}: the JSON form of -device is one object")
    out = []
    for key, v in pairs:
        if isinstance(v, bool):
            v = "on" if v else "off"
        elif isinstance(v, int):
            v = str(v)
        elif not isinstance(v, str):
            raise UsageError(f"{said}: {_name(key)}: a property is a string, an integer or a boolean here")
        out.append((key, v))
    return out


def _device(pairs: list, said: str) -> None:
    drivers = [v for k, v in pairs if k == "driver"]
    driver = drivers[0] if len(drivers) == 1 else None
    if driver not in DEVICES:
        shown = _name(driver) if driver is not None else "without exactly one driver"
        raise UsageError(f"{said}: -device {shown} is not allowed (host devices, files, sockets and "
                         f"networks are krig's to set); allowed drivers: {', '.join(DEVICES)}")
    _keys(pairs, ("driver", *DEVICE_COMMON, *DEVICES[driver]), said, driver)


def _global(value: str, said: str) -> None:
    short = re.match(r"([^.=]{1,63})\.([^=]{1,63})=", value)     # QEMU's "%63[^.=].%63[^=]" then '='
    if short:
        driver, prop, v = short.group(1), short.group(2), value[short.end():]
    else:
        got = dict(keyed(value, None))
        if set(got) != {"driver", "property", "value"} or len(split_opts(value)) != 3:
            raise UsageError(f"{said}: write DRIVER.PROPERTY=VALUE or driver=D,property=P,value=V")
        driver, prop, v = got["driver"], got["property"], got["value"]
    allowed = GLOBALS.get(driver) or (DEVICES[driver] if driver in DEVICES else ())
    if prop not in allowed:
        known = [f"{d}.{p}" for d, props in GLOBALS.items() for p in props]
        raise UsageError(f"{said}: {_name(driver)}.{_name(prop)}= is not allowed (no host files, backends or objects from "
                         f"a rig file); allowed: a property of an allowed -device driver, {', '.join(known)}")
    _keys([(prop, v)], allowed, said, driver)
