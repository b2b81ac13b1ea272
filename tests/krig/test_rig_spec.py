"""A rig file's checked value is a frozen record (krig/schema.py Record): read by attribute, each
attribute declared with its type and checked against the table when the class is made, its
sub-tables records of their own, an omitted field None, its lists tuples; a bad field is still
one line; describe() (the manifest's rig section) is check()'s dict as before.

Covers: rigs/ipmi/spec.py."""
import dataclasses
import json

import pytest

from krig.errors import UsageError
from krig.schema import OMIT, Field, Record, check
from rigs import fake
from rigs.ipmi import spec as ipmi_spec
from rigs.qemu import spec as qemu_spec
from rigs.redfish import spec as redfish_spec
from rigs.ipmi.rig import IpmiRig
from rigs.qemu.rig import QemuRig

PW = "s3cret-Pw"
W = "rigs/x.toml"
ROW = (Field("size", int), Field("role", str, "scratch"))
KEXEC = (Field("syscall", str, "auto"),)
FIELDS = (
    Field("name", str),
    Field("memory", (str, int), "4G"),
    Field("memory", (str, int), "4G", convert=lambda v, _: 4 << 30 if v == "4G" else 2 << 30, name="memory_bytes"),
    Field("touch", int, OMIT),
    Field("work_dir", str, None),
    Field("modules", list, []),
    Field("kexec", dict, {}, table=KEXEC),
    Field("disks", list, [], rows=ROW),
    Field("tags", dict, {}),
)


class SpecKexec(Record, fields=KEXEC):
    syscall: str


class SpecDisks(Record, fields=ROW):
    size: int
    role: str


class Spec(Record, fields=FIELDS):
    name: str
    memory: str | int
    memory_bytes: int
    touch: int | None
    work_dir: str | None
    modules: tuple[str, ...]
    kexec: SpecKexec
    disks: tuple[SpecDisks, ...]
    tags: dict[str, str]


@pytest.fixture
def files(tmp_path, monkeypatch):
    for f in ("key", "known_hosts", "pw"):
        (tmp_path / f).write_text(PW + "\nbmc = bmc1\n")
        (tmp_path / f).chmod(0o600)
    monkeypatch.setenv("KRIG_TEST_PW", PW)
    return tmp_path


def ipmi_file(files, **over) -> dict:
    return {"driver": "ipmi", "scratch_dev": "/dev/nvme0n1",
            "bmc": {"host": "10.0.0.5", "user": "krig", "password_env": "KRIG_TEST_PW"},
            "ssh": {"host": "10.0.0.6", "key": str(files / "key"), "known_hosts": str(files / "known_hosts")},
            **over}


def redfish_file(files, **over) -> dict:
    return {"driver": "redfish", "console": "telnet://ts1:7001",
            "bmc": {"host": "bmc1", "user": "krig", "password_file": str(files / "pw")},
            "ssh": {"host": "s1", "key": str(files / "key"), "known_hosts": str(files / "known_hosts")}, **over}


def test_a_record_reads_by_attribute_and_gives_back_the_dict():
    table = check({"name": "a", "modules": ["xfs"], "disks": [{"size": 1}], "tags": {"rack": "b3"}}, FIELDS, W)
    v = Spec.of(table)
    assert (v.name, v.memory, v.memory_bytes, v.work_dir) == ("a", "4G", 4 << 30, None)
    assert v.touch is None and "touch" not in v.to_json()       # omitted: None, and absent from the dict
    assert v.modules == ("xfs",) and v.kexec.syscall == "auto" and v.disks[0].role == "scratch"
    assert isinstance(v.kexec, Record) and type(v.disks[0]).__name__ == "SpecDisks"
    assert v.to_json() == table and list(v.to_json()) == list(table)          # the same keys, in order
    assert json.dumps(v.to_json()) == json.dumps(table)
    assert Spec.of(check({"name": "a", "touch": 3}, FIELDS, W)).to_json()["touch"] == 3


def test_a_record_is_frozen():
    v = Spec.of(check({"name": "a"}, FIELDS, W))
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.name = "b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.kexec.syscall = "kexec_load"
    w = dataclasses.replace(v, name="b")
    assert (v.name, w.name) == ("a", "b")
    v.to_json()["modules"].append("x")              # to_json() is a copy
    assert v.modules == ()


def declare(fields: tuple, **attrs) -> type:
    """A record class of `fields` whose attributes are `attrs` (name: type), made as a class
    statement makes it."""
    return type("R", (Record,), {"__annotations__": attrs, "__module__": __name__}, fields=fields)


def test_a_record_refuses_a_name_used_twice():
    with pytest.raises(TypeError, match="used twice or taken: a"):
        declare((Field("a", str), Field("b", str, name="a")), a=str)
    with pytest.raises(TypeError, match="taken: to_json"):
        declare((Field("to_json", str),), to_json=str)


@pytest.mark.parametrize("attrs,said", [
    ({"name": str}, r"its attributes \(name\) are not its table's fields \(name, touch\)"),
    ({"touch": int | None, "name": str}, "are not its table's fields .* in that order"),
    ({"name": str, "touch": int}, "R.touch: the file may omit it: its type must admit None"),
    ({"name": int, "touch": int | None}, "R.name: its type int does not admit str"),
    ({"name": str | int, "touch": str | None}, "R.touch: its type str | None does not admit int"),
])
def test_a_record_declared_otherwise_than_its_table_is_refused(attrs, said):
    with pytest.raises(TypeError, match=said):
        declare((Field("name", str), Field("touch", int, OMIT)), **attrs)


def test_a_sub_table_is_declared_as_its_record():
    rows = (Field("disks", list, [], rows=ROW),)
    assert declare(rows, disks=tuple[SpecDisks, ...]).NESTED == {"disks": SpecDisks}
    for wrong in (tuple[SpecKexec, ...], list[SpecDisks], SpecDisks, tuple[str, ...]):
        with pytest.raises(TypeError, match="R.disks: its type .* is not the record of its rows"):
            declare(rows, disks=wrong)
    with pytest.raises(TypeError, match="R.tags: its type .* is not the record of its table"):
        declare((Field("tags", dict, {}),), tags=SpecKexec)


def test_qemu_spec_by_attribute_and_describe_unchanged():
    raw = {"driver": "qemu", "memory": "2G", "memory_backing": "sparse", "like_memory": "3T", "modules": ["xfs"],
           "disks": [{"size": "1G", "serial": "a"}, {"size": "2G", "serial": "b"}]}
    rig = QemuRig("q", dict(raw))
    s = rig.spec
    assert isinstance(s, qemu_spec.QemuSpec) and s.memory_bytes == 2 << 30 and s.like_memory_bytes == 3 << 40
    assert s.host_margin_bytes is None and s.modules == ("xfs",) and s.extra_args == ()
    assert [(d.serial, d.role, d.size) for d in s.disks] == [("a", "scratch", 1 << 30), ("b", "extra", 2 << 30)]
    want = qemu_spec.check(raw, qemu_spec.FIELDS, W)
    want["disks"][0]["role"], want["disks"][1]["role"] = "scratch", "extra"
    assert json.dumps(rig.describe()) == json.dumps({"name": "q", "kind": "qemu", **want})
    rig.respec(accel="tcg")
    assert rig.spec.accel == rig.boot.spec.accel == "tcg" and s.accel == "auto"
    assert rig.boot_timeout() == 180 and rig.bmc_address() is None and rig.spec.description == ""


def test_fake_spec_by_attribute():
    s = fake.validate_spec({"driver": "fake", "fault": "pull-fails", "metrics": {"answer": 42}}, W)
    assert (s.fault, s.samples, s.output_bytes, s.work_dir, s.metrics) == ("pull-fails", "none", 0, None,
                                                                          {"answer": 42})
    rig = fake.FakeRig("f", {"driver": "fake"})
    assert rig.boot_timeout() is None and rig.bmc_address() is None and rig.spec.description == "a fake machine"


@pytest.mark.parametrize("module,raw,line", [
    (qemu_spec, {"driver": "qemu", "cpus": 0}, "rigs/x.toml.cpus: must be at least 1, got 0"),
    (qemu_spec, {"driver": "qemu", "disks": [{"size": "1G", "serial": "a b"}]},
     "rigs/x.toml.disks[0].serial: 'a b': use up to 20 letters, digits or '-'"),
    (qemu_spec, {"driver": "qemu", "memory_backing": "swap"}, "rigs/x.toml.memory_backing: 'swap' is not one of ram, "
     "sparse"),
    (fake, {"driver": "fake", "metrics": {"a": "x"}}, "rigs/x.toml.metrics.a: expected a number, got 'x'"),
])
def test_a_bad_field_is_still_one_line(module, raw, line):
    with pytest.raises(UsageError) as e:
        module.validate_spec("x", raw, W) if module is qemu_spec else module.validate_spec(raw, W)
    assert str(e.value) == line


def test_ipmi_spec_by_attribute(files):
    s, pw = ipmi_spec.validate_spec("x", ipmi_file(files, kexec={"append": ["quiet"]},
                                                   lab={"model": "R760", "tags": {"rack": "b3"}}), W)
    assert pw == PW and isinstance(s, ipmi_spec.IpmiSpec)
    assert (s.bmc.host, s.bmc.port, s.bmc.password_env, s.bmc.password_file) == ("10.0.0.5", 623, "KRIG_TEST_PW", None)
    assert (s.ssh.user, s.ssh.options, s.kexec.append, s.kexec.initrd) == ("root", (), ("quiet",), "auto")
    assert s.shutdown_command == ("systemctl", "poweroff") and s.emulator_pidfile is None and s.console == "sol"
    assert s.lab == {"driver": "ipmi", "scratch": "yes", "model": "r760", "rack": "b3"}
    d = s.to_json()
    assert "password_file" not in d["bmc"] and "emulator_pidfile" not in d and d["shutdown_command"] == [
        "systemctl", "poweroff"]
    assert PW not in json.dumps(d)


@pytest.mark.parametrize("bmc,line", [
    ({"password_env": None}, "rigs/x.toml.bmc: set exactly one of password_env"),
    ({"password_file": "/nonexistent/pw"}, "rigs/x.toml.bmc: set exactly one of password_env"),
    ({"port": 70000}, "rigs/x.toml.bmc.port: 70000 is not a port number (1-65535)"),
])
def test_ipmi_bad_bmc_is_one_line(files, bmc, line):
    raw = ipmi_file(files)
    raw["bmc"] = {k: v for k, v in {**raw["bmc"], **bmc}.items() if v is not None}
    with pytest.raises(UsageError) as e:
        ipmi_spec.validate_spec("x", raw, W)
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


def test_ipmi_describe_is_the_checked_file(files):
    raw = ipmi_file(files, emulator_pidfile="/run/x.pid")
    rig = IpmiRig("lab", dict(raw), path=W)
    want = check(raw, ipmi_spec.TOP, W)
    want["lab"] = ipmi_spec.lab_tags(raw, W)
    assert json.dumps(rig.describe()) == json.dumps({"name": "lab", "kind": "ipmi", **want})
    assert rig.spec.emulator_pidfile == "/run/x.pid" and rig.emulator_pid() is None
    assert rig.scratch_env() == {"KRIG_SCRATCH_DEV": "/dev/nvme0n1"} and rig.boots_installed_only()
    assert rig.bmc.cfg is rig.spec.bmc and rig.ssh.cfg is rig.spec.ssh
    assert rig.boot_timeout() == 600 and rig.bmc_address() == ("10.0.0.5", 623)


def test_redfish_spec_by_attribute(files):
    s, pw = redfish_spec.validate_spec("x", redfish_file(files, bmc={
        "host": "bmc1", "user": "krig", "password_env": "KRIG_TEST_PW", "fingerprint": "AB" * 32,
        "clear_log": False}), W)
    assert isinstance(s, redfish_spec.RedfishSpec) and type(s.bmc).__name__ == "RedfishSpecBmc"
    assert (s.bmc.port, s.bmc.fingerprint, s.bmc.ca_file, s.bmc.clear_sel, s.bmc.auth) == (
        443, "ab" * 32, None, False, "session")
    assert s.console == "telnet://ts1:7001" and s.lab["driver"] == "redfish" and pw == PW
    assert "ca_file" not in s.to_json()["bmc"] and s.to_json()["bmc"]["clear_sel"] is False
