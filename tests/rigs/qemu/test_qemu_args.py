"""A QEMU rig file's extra_args, parsed as QEMU parses them (rigs/qemu/args.py): every syntax
that names a host file, a directory or a backend is refused, one line naming the field.

Covers: rigs/qemu/args.py."""
import pytest

from krig.errors import UsageError
from rigs.qemu import args as qemu_args
from rigs.qemu.spec import validate_spec

WHERE = "/tmp/rigs/q.toml"


def refused(extra: list) -> str:
    with pytest.raises(UsageError) as e:
        validate_spec("q", {"driver": "qemu", "extra_args": extra}, WHERE)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{WHERE}.extra_args: "), msg
    return msg


@pytest.mark.parametrize("extra,says", [
    # the JSON form of -device
    (["-device", '{"driver":"loader","file":"/etc/shadow","addr":"0x1000"}'], "-device loader is not allowed"),
    (["-device", '{"driver":"edu","romfile":"/etc/shadow"}'], "romfile= is not allowed"),
    (["-device", '{"driver":"edu","driver":"loader"}'], "without exactly one driver"),
    (["-device", '{"driver":"edu","addr":{"file":"/etc/shadow"}}'], "a property is a string, an integer or a boolean"),
    (["-device", "{'driver':'loader','file':'/etc/shadow'}"], "not valid JSON"),
    # -global, long and short
    (["-global", "driver=pcie-root-port,property=romfile,value=/etc/shadow"], "pcie-root-port.romfile= is not allowed"),
    (["-global", "driver=loader,property=file,value=/etc/shadow"], "loader.file= is not allowed"),
    (["-global", "pcie-root-port.romfile=/etc/shadow"], "pcie-root-port.romfile= is not allowed"),
    (["-global", "pci-device.romfile=/root/x"], "pci-device.romfile= is not allowed"),
    (["-global", "edu.addr=/etc/shadow"], "addr='/etc/shadow' is not allowed"),
    (["-global", "driver=edu,property=addr,value=3,id=x"], "write DRIVER.PROPERTY=VALUE"),
    # a property no list named, and drivers that open host files or directories
    (["-device", "usb-mtp,rootdir=/root"], "-device usb-mtp is not allowed"),
    (["-device", "usb-kbd,pcap=/tmp/keys"], "pcap= is not allowed"),
    (["-device", "loader,file=/etc/shadow,addr=0x1000"], "-device loader is not allowed"),
    (["-device", "driver=edu,romfile=/etc/shadow"], "romfile= is not allowed"),
    (["-device", "edu,nofile"], "file= is not allowed"),
    # ",," is a comma inside a value, not the start of another property
    (["-device", "edu,addr=0x5,,romfile=/etc/shadow"], "is not allowed: a value is a number"),
    (["-device", "loader,,file=/etc/shadow"], "-device loader,file=/etc/shadow is not allowed"),
    # -machine, -numa, -smp, -cpu
    (["-machine", "q35,kernel=/etc/shadow"], "kernel= is not allowed"),
    (["-machine", "q35,,dumpdtb=/tmp/x"], "type='q35,dumpdtb=/tmp/x' is not allowed"),
    (["-machine", "type=q35,memory-backend=m0"], "memory-backend= is not allowed"),
    (["-numa", "node,memdev=m0"], "memdev= is not allowed"),
    (["-numa", "hmat-lb,initiator=0"], "the -numa types allowed are"),
    (["-smp", "2,maxcpus=4,foo=/x"], "foo= is not allowed"),
    (["-cpu", "max,model-id=/etc/shadow"], "a CPU model and its features"),
    # options off the list, a newline in a name, a missing value
    (["-object", "memory-backend-file,id=m,mem-path=/dev/shm/x"], "-object is not allowed"),
    (["-drive", "file=/etc/shadow"], "-drive is not allowed"),
    (["-device", "edu,a\nb=1"], "'a\\nb'= is not allowed"),
    (["-device"], "has no value"),
])
def test_every_syntax_naming_a_host_file_is_refused(extra, says):
    assert says in refused(extra)


@pytest.mark.parametrize("extra", [
    ["-device", "edu,addr=0x5,multifunction=on"],
    ["-device", "driver=pcie-root-port,id=rp1,chassis=1,bus=pcie.0"],
    ["-device", '{"driver":"virtio-rng-pci","max-bytes":1024,"ats":true}'],
    ["-device", "pci-bridge,chassis_nr=2,noshpc"],
    ["-global", "ICH9-LPC.disable_s3=1"],
    ["-global", "driver=pcie-root-port,property=hotplug,value=off"],
    ["-machine", "q35,hpet=off,smm=off"],
    ["-smp", "4,sockets=2,cores=2"],
    ["-numa", "node,nodeid=0,cpus=0-1,cpus=2-3"],
    ["-cpu", "max,+sse4.2,-avx,pmu=off"],
    ["-rtc", "base=2006-06-17T16:01:21,clock=vm"],
    ["-overcommit", "mem-lock=off"],
])
def test_options_that_open_nothing_pass(extra):
    out = validate_spec("q", {"driver": "qemu", "extra_args": extra}, WHERE)
    assert out.extra_args == tuple(extra)


@pytest.mark.parametrize("text,pairs", [
    ("a=b,,c,d,e=f,,,,g", [("a", "b,c"), (None, "d"), ("e", "f,,g")]),
    ("file,id=con,path=/x,,y", [(None, "file"), ("id", "con"), ("path", "/x,y")]),
    ("x=", [("x", "")]),
    ("", []),
])
def test_key_value_lists_split_as_qemu_splits_them(text, pairs):
    assert qemu_args.split_opts(text) == pairs
    assert qemu_args.split_opts(qemu_args.join_opts(pairs)) == pairs


def test_flags_and_the_implied_key():
    assert qemu_args.keyed("edu,nomultifunction,ats", "driver") == [
        ("driver", "edu"), ("multifunction", "off"), ("ats", "on")]
    assert qemu_args.keyed("hotplug", None) == [("hotplug", "on")]
