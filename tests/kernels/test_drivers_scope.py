"""Which of a server's drivers a kernel built like it gets (`--kernel KERNEL,drivers=RIG|PATH`,
`,drivers-scope=boot|all`, kernels/drivers.py): by default only the drivers of the network cards
and disks (the inventory's boot section, read from sysfs), what a kexec'd kernel needs to come
back over SSH; with drivers-scope=all every loaded module and bound driver. Planned on the real
linux-source-6.1 Makefiles and Kconfig files against tiny-6.1's own config (no build).

The inventory is one captured from a Debian 12 server with an e1000e card, a virtio-blk root
disk and an NVMe disk, a display (bochs DRM), USB (xHCI, a HID tablet) and input devices."""
import pytest

from conftest import build_kernels
from kernels import drivers, given
from kernels.catalog import load_kernel
from kernels.kconfig import read_dotconfig
from kernels.spec import resolve_spec, wanted_config
from krig.errors import UsageError

SERVER = """krig-drivers 1
release 6.1.0-28-amd64
== modules
e1000e 344064 0 - Live 0x0000000000000000
ptp 45056 1 e1000e, Live 0x0000000000000000
pps_core 28672 1 ptp, Live 0x0000000000000000
nvme 57344 0 - Live 0x0000000000000000
nvme_core 192512 1 nvme, Live 0x0000000000000000
virtio_blk 24576 2 - Live 0x0000000000000000
virtio_pci 24576 0 - Live 0x0000000000000000
bochs 20480 0 - Live 0x0000000000000000
drm_vram_helper 24576 1 bochs, Live 0x0000000000000000
drm_kms_helper 212992 3 bochs, Live 0x0000000000000000
drm 614400 4 bochs, Live 0x0000000000000000
usbhid 65536 0 - Live 0x0000000000000000
hid 159744 1 usbhid, Live 0x0000000000000000
xhci_pci 24576 0 - Live 0x0000000000000000
xhci_hcd 315392 1 xhci_pci, Live 0x0000000000000000
usbcore 348160 3 usbhid,xhci_pci,xhci_hcd, Live 0x0000000000000000
evdev 28672 2 - Live 0x0000000000000000
psmouse 188416 0 - Live 0x0000000000000000
ext4 991232 1 - Live 0x0000000000000000
== bound
pci 0000:00:01.0 bochs-drm bochs
pci 0000:00:10.0 e1000e e1000e
pci 0000:00:11.0 nvme nvme
pci 0000:02:00.0 xhci_hcd xhci_pci
pci 0000:03:00.0 virtio-pci virtio_pci
pci 0000:00:02.0 pcieport
usb 1-1 usb usbcore
hid 0003:0627:0001.0001 hid-generic hid_generic
serio serio1 psmouse psmouse
virtio virtio2 virtio_blk virtio_blk
== boot
net enp0s16 pci 0000:00:10.0 e1000e e1000e
block vda virtio virtio2 virtio_blk virtio_blk
block vda pci 0000:03:00.0 virtio-pci virtio_pci
block vda pci 0000:00:02.0 pcieport
block nvme0n1 pci 0000:00:11.0 nvme nvme
== config
CONFIG_E1000E=m
CONFIG_BLK_DEV_NVME=m
CONFIG_DRM_BOCHS=m
"""
OFF_BOOT = ("drivers/gpu/", "drivers/usb/", "drivers/input/", "drivers/hid/")


def _makefiles(p: dict) -> list:
    return [a["makefile"] for a in p["added"] if "makefile" in a] + \
        [a["from"].split(":")[0] for a in p["added"] if "for" in a]


def test_boot_scope_adds_the_nic_and_disks_only(linux_source):
    """tiny-6.1 lacks the card's driver (what makes the card a real test); the boot plan adds it,
    with the driver options it needs, and nothing of the display, USB or input devices."""
    own = wanted_config(resolve_spec("tiny-6.1"))[0]
    assert own.get("CONFIG_E1000E", "n") == "n" and own.get("CONFIG_NET_VENDOR_INTEL", "n") == "n"
    p = drivers.plan(drivers.parse_inventory(SERVER, "rig lab"), linux_source, own)
    assert p["scope"] == "boot"
    assert p["config"]["CONFIG_E1000E"] == "y" and p["config"]["CONFIG_NET_VENDOR_INTEL"] == "y", p["config"]
    e = next(a for a in p["added"] if a["symbol"] == "CONFIG_E1000E")
    assert e["from"] == "sysfs: net enp0s16 -> pci 0000:00:10.0 e1000e", e
    assert not [m for m in _makefiles(p) if m.startswith(OFF_BOOT)], p["added"]
    assert not [s for s in p["config"] if "DRM" in s or "USB" in s or s.startswith(("CONFIG_HID", "CONFIG_INPUT"))]
    assert {"bochs", "drm", "usbhid", "xhci_pci", "evdev", "psmouse"} <= set(p["available"]), p["available"]
    assert "e1000e" not in p["available"]
    nvme = [a for a in p["added"] + p["skipped"] if a.get("module") == "nvme"]
    assert nvme and nvme[0]["from"] == "sysfs: block nvme0n1 -> pci 0000:00:11.0 nvme", nvme
    assert {s["module"] for s in p["skipped"]} >= {"pcieport"}        # built into the PCI core: no module
    rec = drivers.record(p, {k: "y" for k in p["config"]}, linux_source)
    assert rec["scope"] == "boot" and rec["available"] == p["available"] and not rec["not_built_in"]


@pytest.mark.kbuild
def test_tiny_kernel_lacks_the_card():
    build_kernels("tiny-6.1")             # cached: a no-op
    assert read_dotconfig(load_kernel("tiny-6.1").config).get("CONFIG_E1000E", "n") == "n"


def test_scope_all_takes_every_driver(linux_source):
    own = wanted_config(resolve_spec("tiny-6.1"))[0]
    inv = drivers.parse_inventory(SERVER, "rig lab")
    p = drivers.plan(inv, linux_source, own, "all")
    assert p["scope"] == "all" and not p["available"]
    for sym in ("CONFIG_E1000E", "CONFIG_DRM_BOCHS", "CONFIG_USB_XHCI_PCI", "CONFIG_USB_HID", "CONFIG_MOUSE_PS2"):
        assert p["config"].get(sym) == "y", (sym, sorted(p["config"]))
    assert [m for m in _makefiles(p) if m.startswith(OFF_BOOT)]
    boot = drivers.plan(inv, linux_source, own)
    assert set(boot["config"]) < set(p["config"]) and boot["hash"] != p["hash"]


def test_a_list_without_boot_section_is_taken_whole(tmp_path, linux_source):
    f = tmp_path / "lsmod.txt"
    f.write_text("Module Size Used by\ne1000e 1 0\nusbhid 1 0\n")
    inv = drivers.read_inventory(f, "drivers=lsmod.txt")
    p = drivers.plan(inv, linux_source, {})
    assert p["scope"] == "all" and "CONFIG_USB_HID" in p["config"] and "CONFIG_E1000E" in p["config"]
    with pytest.raises(UsageError, match="drivers-scope=boot but .* has no boot section") as e:
        drivers.plan(inv, linux_source, {}, "boot", "--kernel x: drivers=lsmod.txt")
    assert "\n" not in str(e.value)
    d = tmp_path / "server"          # a directory's `boot` file is a boot section
    d.mkdir()
    (d / "modules").write_text("usbhid 1 0\n")
    (d / "boot").write_text("net eno1 pci 0000:01:00.0 ixgbe ixgbe\n")
    p = drivers.plan(drivers.read_inventory(d, "drivers=server"), linux_source, {})
    assert p["scope"] == "boot" and "CONFIG_IXGBE" in p["config"] and "CONFIG_USB_HID" not in p["config"]


@pytest.mark.parametrize("line,want", [
    ("net enp0s16 pci 0000:00:10.0", "want `net|block name bus device driver [module]`"),
    ("disk vda virtio virtio2 virtio_blk virtio_blk", "want `net|block name bus device driver [module]`"),
    ("net enp0s16 pci 0000:00:10.0 e1000e e1000e extra", "want `net|block"),
    ("net enp0s16 pci 0000:00:10.0 e1000e;reboot", "want `net|block"),
])
def test_a_bad_boot_line_is_one_line_naming_it(line, want):
    text = "krig-drivers 1\n== modules\ne1000e 1 0\n== boot\n" + line + "\n"
    with pytest.raises(UsageError) as e:
        drivers.parse_inventory(text, "inv")
    msg = str(e.value)
    assert msg.startswith("inv:5: ") and want in msg and "\n" not in msg, msg


@pytest.mark.parametrize("text,want", [
    ("tiny-6.1,drivers=lab,drivers-scope=some", "drivers-scope=some: allowed: boot, all"),
    ("tiny-6.1,drivers-scope=all", "drivers-scope=all: goes with drivers=RIG|PATH"),
    ("/,drivers-scope=all", "drivers-scope= does not go with a tree kernel"),
])
def test_a_bad_scope_is_one_line(text, want):
    with pytest.raises(UsageError) as e:
        given.parse(text)
    assert want in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_scope_option_parses():
    g = given.parse("tiny-6.1,drivers=lab,drivers-scope=all")
    assert g.opts == {"drivers": "lab", "drivers-scope": "all"}


def test_the_rig_script_walks_this_machines_sysfs():
    """The boot section the rig's script prints, run here: every network card and disk with a
    device, the driver its device is bound to first."""
    import pathlib
    import subprocess
    from rigs.ipmi.drivers import SCRIPT
    p = subprocess.run(["sh", "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    boot = drivers.parse_inventory(p.stdout, "this machine")["boot"]
    for role, cls in (("net", "/sys/class/net"), ("block", "/sys/block")):
        for dev in sorted(pathlib.Path(cls).glob("*/device")):
            if not (dev / "driver").exists():
                continue
            want = (dev / "driver").resolve().name
            got = [b for b in boot if b[:2] == (role, dev.parent.name)]
            assert got and got[0][3] == dev.resolve().name and got[0][4] == want, (dev, got)
    assert all(b[2] != "none" for b in boot), boot
