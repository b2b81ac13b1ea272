"""krig/schema.py: a TOML table checked against its Fields. Every kind of rule refuses a bad value
with one line naming the file's field and what is allowed; good values come back with defaults.

Covers: krig/config.py."""
import tomllib

import pytest

from krig.config import parse_size, toml_document
from krig.errors import UsageError
from krig.schema import ANY, OMIT, Field, check, check_entries, check_rows, missing, with_defaults

W = "rigs/x.toml"
ROW = (Field("size", (str, int), convert=parse_size), Field("role", str, "scratch", choices=("scratch", "extra")))
FIELDS = (
    Field("name", str),
    Field("cpus", int, 2, min=1),
    Field("load", (int, float), 0.5, max=1),
    Field("ratio", (int, float), 0.5, min=0, max=1),
    Field("port", int, 22, min=1, max=65535, says="{v} is not a port number (1-65535)"),
    Field("accel", str, "auto", choices=("auto", "kvm", "tcg")),
    Field("user", str, "root", pattern=r"[a-z][a-z0-9]*", says="{v!r}: use lower-case letters and digits"),
    Field("even", int, 0, test=lambda v: v % 2 == 0, says="{v} is not even"),
    Field("events", list, [], each=r"[a-z]+:[a-z]+", says="{item!r} is not SYSTEM:EVENT"),
    Field("modules", list, [], each=str, says="expected a list of strings, got {item!r}"),
    Field("memory", (str, int), "4G"),
    Field("memory", (str, int), "4G", convert=parse_size, name="memory_bytes"),
    Field("margin", (str, int), None, convert=parse_size, test=lambda v: v >= 1 << 30, says="{raw!r} is under 1G"),
    Field("privilege", str, "ADMIN", convert=lambda v, _: v.upper(), choices=("USER", "ADMIN")),
    Field("touch", ANY, OMIT, convert=parse_size),
    Field("kexec", dict, {}, table=(Field("syscall", str, "auto", choices=("auto", "kexec_load")),)),
    Field("disks", list, [], rows=ROW, says="expected a table with size and role"),
    Field("metrics", dict, {}, entries=(Field("unit", str),)),
)


def refused(table: dict, fields=FIELDS) -> str:
    with pytest.raises(UsageError) as e:
        check(table, fields, W)
    assert "\n" not in str(e.value), str(e.value)
    return str(e.value)


def test_a_good_table_comes_back_with_its_defaults():
    got = check({"name": "lab", "memory": "2G", "privilege": "user", "disks": [{"size": "1G"}]}, FIELDS, W)
    assert got["name"] == "lab" and got["cpus"] == 2 and got["port"] == 22 and got["accel"] == "auto"
    assert got["memory"] == "2G" and got["memory_bytes"] == 2 << 30          # two fields read one key
    assert got["privilege"] == "USER" and got["margin"] is None
    assert "touch" not in got                                                # OMIT: absent stays absent
    assert got["kexec"] == {"syscall": "auto"}                               # a default table is filled too
    assert got["disks"] == [{"size": 1 << 30, "role": "scratch"}] and got["metrics"] == {}
    assert check({"name": "a", "touch": "1M"}, FIELDS, W)["touch"] == 1 << 20


def test_a_default_list_is_a_copy():
    first = check({"name": "a"}, FIELDS, W)
    first["events"].append("x:y")
    assert check({"name": "a"}, FIELDS, W)["events"] == []


@pytest.mark.parametrize("table,line", [
    ({}, "rigs/x.toml: missing required field 'name'"),
    ({"name": "a", "bogus": 1}, "rigs/x.toml: unknown field 'bogus'; allowed: accel, cpus, disks, even, events, "),
    ({"name": 5}, "rigs/x.toml.name: expected string, got 5"),
    ({"name": "a", "cpus": True}, "rigs/x.toml.cpus: expected integer, got True"),
    ({"name": "a", "load": float("nan")}, "rigs/x.toml.load: expected a finite number, got nan"),
    ({"name": "a", "cpus": 0}, "rigs/x.toml.cpus: must be at least 1, got 0"),
    ({"name": "a", "load": 1.5}, "rigs/x.toml.load: must be at most 1, got 1.5"),
    ({"name": "a", "ratio": 2}, "rigs/x.toml.ratio: 2 is outside 0-1"),
    ({"name": "a", "port": 70000}, "rigs/x.toml.port: 70000 is not a port number (1-65535)"),
    ({"name": "a", "accel": "warp"}, "rigs/x.toml.accel: 'warp' is not one of auto, kvm, tcg"),
    ({"name": "a", "privilege": "root"}, "rigs/x.toml.privilege: 'ROOT' is not one of USER, ADMIN"),
    ({"name": "a", "user": "-oProxy"}, "rigs/x.toml.user: '-oProxy': use lower-case letters and digits"),
    ({"name": "a", "even": 3}, "rigs/x.toml.even: 3 is not even"),
    ({"name": "a", "events": ["xfs:ok", "xfs_ail"]}, "rigs/x.toml.events: 'xfs_ail' is not SYSTEM:EVENT"),
    ({"name": "a", "events": [["x:y"]]}, "rigs/x.toml.events: ['x:y'] is not SYSTEM:EVENT"),
    ({"name": "a", "modules": ["xfs", 5]}, "rigs/x.toml.modules: expected a list of strings, got 5"),
    ({"name": "a", "memory": "12 parsecs"}, "rigs/x.toml.memory: expected a size like 512M, 16G or 1T, got '12 parsecs'"),
    ({"name": "a", "margin": "512M"}, "rigs/x.toml.margin: '512M' is under 1G"),
    ({"name": "a", "touch": [1]}, "rigs/x.toml.touch: expected a size like 512M, 16G or 1T, got [1]"),
    ({"name": "a", "kexec": {"syscall": "exec"}}, "rigs/x.toml.kexec.syscall: 'exec' is not one of auto, kexec_load"),
    ({"name": "a", "kexec": {"other": 1}}, "rigs/x.toml.kexec: unknown field 'other'; allowed: syscall"),
    ({"name": "a", "kexec": []}, "rigs/x.toml.kexec: expected table, got []"),
    ({"name": "a", "disks": [{"size": "1G"}, "2G"]}, "rigs/x.toml.disks[1]: expected a table with size and role"),
    ({"name": "a", "disks": [{"size": "1G", "role": "boot"}]}, "rigs/x.toml.disks[0].role: 'boot' is not one of "),
    ({"name": "a", "disks": [{}]}, "rigs/x.toml.disks[0]: missing required field 'size'"),
    ({"name": "a", "metrics": {"m": {"unit": 1}}}, "rigs/x.toml.metrics.m.unit: expected string, got 1"),
    ({"name": "a", "metrics": {"m": 1}}, "rigs/x.toml.metrics.m: expected a table"),
])
def test_each_kind_of_rule_refuses_with_one_line(table, line):
    assert refused(table).startswith(line)


def test_rows_entries_and_missing_alone():
    assert check_rows([{"size": 4096}], ROW, "w.disks") == [{"size": 4096, "role": "scratch"}]
    assert check_entries({"m": {"unit": "s"}}, (Field("unit", str),), "w.metrics") == {"m": {"unit": "s"}}
    with pytest.raises(UsageError, match=r"^w\.disks\[0\]: expected a table$"):
        check_rows([1], ROW, "w.disks")
    assert missing({"event": "a:b"}, "event", "w.session") == "a:b"
    with pytest.raises(UsageError, match=r"^w\.session: missing required field 'event'$"):
        missing({"event": None}, "event", "w.session")


def test_with_defaults_changes_only_the_defaults_named():
    req = (Field("programs", list, OMIT), Field("min_cpus", int, OMIT, min=1))
    assert check({}, req, "w") == {}
    top = with_defaults(req, programs=[])
    assert check({}, top, "w") == {"programs": []}
    with pytest.raises(UsageError, match=r"^w\.min_cpus: must be at least 1, got 0$"):
        check({"min_cpus": 0}, top, "w")


def test_a_rule_without_its_words_is_refused_where_it_is_declared():
    """A pattern, test or each rule must say what is allowed: the error line is written with it."""
    with pytest.raises(TypeError, match="says"):
        Field("user", str, pattern=r"[a-z]+")


def test_a_written_rig_file_reads_back_as_written(tmp_path):
    """krig/config.py toml_document (what `krig lab sim up` and the test servers write): top keys,
    then the named tables, then a dict among the top keys as its own table; None left out."""
    top = {"driver": "ipmi", "boot_timeout": 900, "skip": None, "shutdown_command": ["systemctl", "poweroff"],
           "kexec": {"append": ["loglevel=6"]}, "cold_boot": False}
    text = toml_document(top, bmc={"host": "127.0.0.1", "port": 623, "fingerprint": None}, ssh={"user": "krig"})
    assert tomllib.loads(text) == {"driver": "ipmi", "boot_timeout": 900, "shutdown_command": ["systemctl", "poweroff"],
                                   "cold_boot": False, "bmc": {"host": "127.0.0.1", "port": 623},
                                   "ssh": {"user": "krig"}, "kexec": {"append": ["loglevel=6"]}}
    assert [ln for ln in text.splitlines() if ln.startswith("[")] == ["[bmc]", "[ssh]", "[kexec]"]
    assert "kexec" in top          # the caller's dict is not changed
