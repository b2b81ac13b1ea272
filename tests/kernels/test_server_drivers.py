"""A kernel built for the server it boots on (`--kernel KERNEL,drivers=RIG|PATH`, kernels/drivers.py):
the module -> config symbol mapping on the real linux-source-6.1 Makefiles and Kconfig files (no
build), the inventory as the rig's script reads it (run here, on this machine's own /proc and
/sys), and bad input, one line each. The real thing end to end (the session's lab server with
an e1000e card, the kernel built like it, kexec'd, back over SSH) is tests/rigs/redfish/test_labsim_redfish.py;
that tiny-6.1 has no e1000e driver is checked here. Which drivers (drivers-scope): test_drivers_scope.py.

Covers: kernels/kbuildmap.py, rigs/ipmi/drivers.py."""
import json
import os
import pathlib
import subprocess

import pytest

from conftest import KRIG, ROOT, build_kernels
from kernels import drivers, kbuildmap
from kernels.catalog import load_kernel
from kernels.kconfig import read_dotconfig
from kernels.spec import resolve_spec, wanted_config
from krig.errors import UsageError
from krig.record_machine import KernelRecord
from rigs.ipmi.drivers import SCRIPT

# The server drivers the brief names: NICs, RAID and HBA controllers a kexec'd QEMU kernel lacks.
SERVER_MODULES = {"e1000e": "CONFIG_E1000E", "ixgbe": "CONFIG_IXGBE", "i40e": "CONFIG_I40E",
                  "mlx5_core": "CONFIG_MLX5_CORE", "bnxt_en": "CONFIG_BNXT", "megaraid_sas": "CONFIG_MEGARAID_SAS",
                  "mpt3sas": "CONFIG_SCSI_MPT3SAS"}


def _inventory(modules, bound=(), config=None, source="test"):
    return {"source": source, "release": None, "modules": list(modules), "bound": list(bound), "config": config}


def test_modules_map_to_their_symbols_in_the_real_makefiles(linux_source):
    index = kbuildmap.modules(linux_source)
    for module, symbol in SERVER_MODULES.items():
        assert symbol in [s for s, _ in index[module]], (module, index.get(module))
        assert all(d.startswith("drivers/") for _, d in index[module]), index[module]
    assert index["ext4"] == [("CONFIG_EXT4_FS", "fs/ext4")]
    assert not [m for m, where in index.items() for _, d in where if d.startswith("arch/") and
                not d.startswith("arch/x86")]


def test_kconfig_says_what_e1000e_depends_on(linux_source):
    kc = kbuildmap.kconfig(linux_source)
    e = kc["CONFIG_E1000E"]
    assert e.type == "tristate" and e.prompt and e.where == "drivers/net/ethernet/intel/Kconfig"
    needs = [a for expr in e.depends for a in kbuildmap.atoms(expr)]
    assert {"ETHERNET", "NET_VENDOR_INTEL", "PCI", "PTP_1588_CLOCK_OPTIONAL"} <= set(needs), e.depends
    assert "SPARC32" not in needs and "BROKEN" not in needs          # `(!SPARC32 || BROKEN)`: no one symbol
    assert not kc["CONFIG_PTP_1588_CLOCK_OPTIONAL"].prompt            # set by Kconfig itself
    assert kc["CONFIG_EFI"].where == "arch/x86/Kconfig"
    assert kbuildmap.atoms("A && (B && C) && (D || E) && !F && G=y") == ["A", "B", "C"]


@pytest.mark.kbuild
def test_tiny_kernel_has_no_e1000e_driver():
    """What the lab server's card needs is not in the kernel krig builds for QEMU."""
    build_kernels("tiny-6.1")             # make test built it first: a no-op then
    config = read_dotconfig(load_kernel("tiny-6.1").config)
    assert config.get("CONFIG_E1000E", "n") == "n"          # NET_VENDOR_INTEL is on by default: no driver
    assert config["CONFIG_VIRTIO_NET"] == "y" and config["CONFIG_PCI"] == "y"


def test_plan_for_tiny_adds_the_nic_with_its_driver_options(linux_source):
    spec = resolve_spec("tiny-6.1")
    inv = _inventory(["e1000e", "ptp", "ext4", "virtio_net", "efi_pstore", "not_a_module_here"],
                     bound=[("pci", "0000:00:02.0", "e1000e", "e1000e"), ("pci", "0000:00:1f.2", "ahci", "ahci")])
    p = drivers.plan(inv, linux_source, wanted_config(spec)[0])
    for sym in ("CONFIG_E1000E", "CONFIG_ETHERNET", "CONFIG_NET_VENDOR_INTEL", "CONFIG_SATA_AHCI", "CONFIG_ATA"):
        assert p["config"].get(sym) == "y", (sym, p["config"])
    e = next(a for a in p["added"] if a["symbol"] == "CONFIG_E1000E")
    assert e == {"module": "e1000e", "symbol": "CONFIG_E1000E", "from": "test",
                 "makefile": "drivers/net/ethernet/intel/e1000e/Makefile"}
    dep = next(a for a in p["added"] if a["symbol"] == "CONFIG_NET_VENDOR_INTEL")
    assert dep["for"] == "CONFIG_E1000E" and "drivers/net/ethernet/intel/Kconfig" in dep["from"]
    ahci = next(a for a in p["added"] if a["symbol"] == "CONFIG_SATA_AHCI")
    assert ahci["from"] == "sysfs: pci 0000:00:1f.2 bound to ahci"
    skipped = {s["module"]: s["why"] for s in p["skipped"]}
    assert skipped["ext4"].startswith("not a device driver (fs/ext4/)")
    assert "no obj-$(CONFIG_...) += not_a_module_here.o" in skipped["not_a_module_here"]
    assert "CONFIG_VIRTIO_NET" not in p["config"]           # tiny-6.1's own fragment has it
    assert "arch/x86/Kconfig" in p["held"]["CONFIG_EFI"]     # the core is left as the kernel has it
    assert "CONFIG_EFI" not in p["config"]
    # what did not end up built in, and why: the final .config as olddefconfig would leave it
    final = {**{k: "y" for k in p["config"]}, "CONFIG_EFI_VARS_PSTORE": "n"}
    rec = drivers.record(p, final, linux_source)
    (miss,) = rec["not_built_in"]
    assert miss["symbol"] == "CONFIG_EFI_VARS_PSTORE" and miss["module"] == "efi_pstore", miss
    assert miss["why"].startswith("needs CONFIG_EFI (not a driver option (arch/x86/Kconfig)"), miss


def test_the_server_config_picks_among_symbols(linux_source):
    """localmodconfig's rule: an object several options build is taken with the ones the server set."""
    index = kbuildmap.modules(linux_source)
    multi = next(m for m, w in sorted(index.items()) if len({s for s, _ in w}) > 1 and
                 all(d.startswith("drivers/") for _, d in w))
    first, second = list(dict.fromkeys(s for s, _ in index[multi]))[:2]
    p = drivers.plan(_inventory([multi], config={second: "m", first: "n"}), linux_source, {})
    assert second in p["config"] and first not in [a["symbol"] for a in p["added"] if a.get("module")], p["added"]


def test_the_rig_script_reads_this_machine(linux_source):
    """The script the rig runs over SSH, run here: this machine's real /proc/modules and sysfs."""
    p = subprocess.run(["sh", "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    inv = drivers.parse_inventory(p.stdout, "this machine")
    release = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    assert inv["release"] == release
    modules = pathlib.Path("/proc/modules")           # none on a kernel without modules
    loaded = [ln.split()[0] for ln in modules.read_text().splitlines()] if modules.exists() else []
    assert inv["modules"] == [m.replace("-", "_") for m in dict.fromkeys(loaded)]
    pci = [b for b in inv["bound"] if b[0] == "pci"]
    assert pci and all(b[2] for b in pci), inv["bound"]
    plan = drivers.plan(inv, linux_source, {})
    assert plan["added"] or plan["skipped"]


def test_kernel_record_keeps_the_drivers():
    rec = {"source": "rig lab1", "hash": "0123abcd", "added": [{"module": "e1000e", "symbol": "CONFIG_E1000E",
                                                                "from": "/proc/modules"}], "not_built_in": []}
    k = KernelRecord.from_json({"name": "tiny-6.1+d0123abcd", "drivers": rec})
    assert k.drivers == rec and k.to_json()["drivers"] == rec and "drivers" not in k.extra
    assert "drivers" not in KernelRecord.from_json({"name": "tiny-6.1"}).to_json()


@pytest.mark.parametrize("text,want", [
    ("nope\n", "not a driver inventory"),
    ("krig-drivers 1\n== modules\ne1000e 1 0\n== disks\n", "unknown section 'disks'"),
    ("krig-drivers 1\n== modules\ne1000e; rm -rf / 1 0\n", ":3: 'e1000e;' is not a module name"),
    ("krig-drivers 1\n== bound\npci 0000:00:02.0\n", ":3: want `bus device driver [module]`"),
    ("krig-drivers 1\n== modules\n", "no module, no bound driver and no boot device"),
    ("krig-drivers 1\n== modules\ne1000e 1 0\n== config\nnot a config\n", "no CONFIG_ line"),
])
def test_a_bad_inventory_is_one_line(text, want):
    with pytest.raises(UsageError, match=want.replace("[", r"\[").replace("]", r"\]")) as e:
        drivers.parse_inventory(text, "inv")
    assert "\n" not in str(e.value) and str(e.value).startswith("inv")


def _krig(tmp_path, *args):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "KRIG_RESULTS": str(tmp_path / "results")})


def test_bad_drivers_option_is_one_line(tmp_path):
    (tmp_path / "mods").write_text("Module Size Used by\ne1000e 1 0\nbad$name 1 0\n")
    (tmp_path / "dir").mkdir()
    cases = [
        (("--kernel", "tiny-6.1,drivers=/nonexistent/mods"), "drivers=/nonexistent/mods: no such file or directory"),
        (("--kernel", f"tiny-6.1,drivers={tmp_path / 'mods'}"), f"{tmp_path / 'mods'}:3: 'bad$name' is not a module"),
        (("--kernel", f"tiny-6.1,drivers={tmp_path / 'dir'}"), "the directory has no file `modules`"),
        (("--kernel", "tiny-6.1,drivers=qemu-default"), "rig qemu-default is a qemu rig, not a lab server"),
        (("--kernel", f"{tmp_path},drivers=x"), "drivers= does not go with a tree kernel"),
    ]
    for args, want in cases:
        p = _krig(tmp_path, "run", "selftest-pass", *args)
        out = p.stdout + p.stderr
        assert p.returncode == 2 and want in out and "Traceback" not in out, (args, out)
        assert len([ln for ln in out.splitlines() if "error" in ln]) == 1, out
    p = _krig(tmp_path, "lab", "sim", "up", "server-kernel-x", "--nic", "rtl8139")
    assert p.returncode == 2 and "--nic: 'rtl8139' is not a network card the server can have; allowed: " \
        "virtio-net, e1000e, e1000" in p.stderr, p.stdout + p.stderr


def test_a_module_list_file_reads_like_lsmod(tmp_path, linux_source):
    f = tmp_path / "lsmod.txt"
    f.write_text("Module                  Size  Used by\ne1000e                315392  0\nmegaraid_sas 1 0\n")
    inv = drivers.read_inventory(f, "drivers=lsmod.txt")
    assert inv["modules"] == ["e1000e", "megaraid_sas"] and inv["source"] == str(f)
    d = tmp_path / "server"
    d.mkdir()
    (d / "modules").write_text("mpt3sas 1 0\n")
    (d / "bound").write_text("pci 0000:03:00.0 mpt3sas mpt3sas\n")
    (d / "config").write_text("CONFIG_SCSI_MPT3SAS=m\n")
    inv = drivers.read_inventory(d, "drivers=server")
    p = drivers.plan(inv, linux_source, wanted_config(resolve_spec("tiny-6.1"))[0])
    assert p["config"]["CONFIG_SCSI_MPT3SAS"] == "y" and p["config"]["CONFIG_SCSI"] == "y", p["config"]
    assert json.loads(json.dumps(p)) == p


def test_olddefconfig_keeps_the_drivers_and_the_kernels_own_options(linux_source, tmp_path):
    """The config step as a build makes it (tinyconfig, tiny-6.1's fragments, the drivers' options,
    `make olddefconfig`; kconfig only, out of the source in tmp_path): e1000e and mpt3sas end up
    built in, efi_pstore does not, for the reason the record gives, and none of tiny-6.1's own
    options changed."""
    spec = resolve_spec("tiny-6.1")
    own = wanted_config(spec)[0]
    p = drivers.plan(_inventory(["e1000e", "mpt3sas", "efi_pstore"]), linux_source, own)
    (tmp_path / "drivers.config").write_text("".join(f"{k}={v}\n" for k, v in p["config"].items()))
    # run from tmp_path: merge_config.sh makes its temporary file in the current directory, and
    # the extracted source is shared by every build
    steps = [["make", "-C", str(linux_source), f"O={tmp_path}", "ARCH=x86_64", "tinyconfig"],
             ["bash", str(linux_source / "scripts/kconfig/merge_config.sh"), "-m", "-O", str(tmp_path),
              str(tmp_path / ".config"), *(str(f) for _, f in spec.fragments), str(tmp_path / "drivers.config")],
             ["make", "-C", str(linux_source), f"O={tmp_path}", "ARCH=x86_64", "olddefconfig"]]
    before = linux_source.stat().st_mtime_ns
    for argv in steps:
        r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
    assert linux_source.stat().st_mtime_ns == before          # nothing made or removed in the source
    final = read_dotconfig(tmp_path / ".config")
    assert final["CONFIG_E1000E"] == "y" and final["CONFIG_SCSI_MPT3SAS"] == "y", p["config"]
    changed = [k for k, v in own.items() if not k.startswith("CONFIG_LOCALVERSION") and
               final.get(k, "n") != v and not (v == "m" and final.get(k) == "y")]
    assert not changed, changed
    (miss,) = drivers.record(p, final, linux_source)["not_built_in"]
    assert miss["symbol"] == "CONFIG_EFI_VARS_PSTORE" and "CONFIG_EFI (not a driver option" in miss["why"], miss
