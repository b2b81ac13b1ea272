"""Bad input: one clear line naming the field and what is allowed, exit 2, no traceback."""
import pathlib

import pytest

from krig.config import coerce, parse_size
from krig.errors import UsageError
from krig.reproducer import parse_reproducer


def assert_one_line(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_unknown_reproducer(krig_cli):
    assert_one_line(krig_cli("run", "no-such-repro"), "no-such-repro", "allowed:", "selftest-pass")


def test_unknown_preset(krig_cli):
    assert_one_line(krig_cli("run", "selftest-pass", "--preset", "huge"), "--preset", "huge", "allowed:")


def test_unknown_rig(krig_cli):
    assert_one_line(krig_cli("run", "selftest-pass", "--rig", "nope"), "--rig", "nope", "qemu-default")


def test_unknown_kernel(krig_cli):
    assert_one_line(krig_cli("run", "selftest-pass", "--kernel", "nope"), "--kernel", "nope", "distro")


def test_set_unknown_key(krig_cli):
    assert_one_line(krig_cli("run", "selftest-pass", "--set", "bogus=1"), "--set bogus", "files")


def test_set_wrong_type(krig_cli):
    assert_one_line(krig_cli("run", "selftest-pass", "--set", "files=many"), "--set files", "int", "many")


def test_set_without_equals(krig_cli):
    assert_one_line(krig_cli("run", "selftest-pass", "--set", "files"), "--set", "key=value")


def test_unknown_subcommand(krig_cli):
    p = krig_cli("frobnicate")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_check_missing_dir(krig_cli, tmp_path):
    assert_one_line(krig_cli("check", str(tmp_path / "nope")), "not a run directory")


def test_check_missing_manifest(krig_cli, tmp_path):
    assert_one_line(krig_cli("check", str(tmp_path)), "missing manifest.json")


def rig_path_env(tmp_path, name: str, body: str) -> dict:
    """A rig file `name` in a directory of tmp_path, found by name through KRIG_RIG_PATH
    (nothing is written into the checkout)."""
    d = tmp_path / "rigs"
    d.mkdir(exist_ok=True)
    (d / f"{name}.toml").write_text(body)
    return {"KRIG_RIG_PATH": str(d), "KRIG_RESULTS": str(tmp_path / "results")}


def test_malformed_rig_toml(krig_cli, tmp_path):
    env = rig_path_env(tmp_path, "zz-test-malformed", "driver = 'qemu'\nmemory = \n")
    assert_one_line(krig_cli("run", "selftest-pass", "--rig", "zz-test-malformed", env=env), "malformed TOML")


@pytest.mark.parametrize("body,needle", [
    ("driver = 'qemu'\n[[disks]]\nsize = '12 parsecs'\nserial = 'x'\n", "disks[0].size"),
    ("driver = 'qemu'\naccel = 'warp'\n", "accel"),
    ("driver = 'qemu'\nmemroy = '4G'\n", "unknown field 'memroy'"),
    ("driver = 'vmware'\n", "driver"),
    ("driver = 'qemu'\nkernel_entry = 'elf'\n", "kernel_entry"),
])
def test_bad_rig_fields(krig_cli, tmp_path, body, needle):
    env = rig_path_env(tmp_path, "zz-test-bad", body)
    assert_one_line(krig_cli("run", "selftest-pass", "--rig", "zz-test-bad", env=env), needle)


@pytest.mark.parametrize("text,expect", [("16G", 16 << 30), ("512m", 512 << 20), ("2038MiB", 2038 << 20),
                                         ("1.5G", 3 << 29), (4096, 4096), ("1T", 1 << 40)])
def test_parse_size(text, expect):
    assert parse_size(text, "f") == expect


@pytest.mark.parametrize("bad", ["", "G", "-1G", "12 parsecs", "0", True])
def test_parse_size_rejects(bad):
    with pytest.raises(UsageError) as e:
        parse_size(bad, "disks[0].size")
    assert "disks[0].size" in str(e.value)


def test_coerce_types():
    assert coerce("0x10", "int", "f") == 16
    assert coerce("yes", "bool", "f") is True
    assert coerce("2G", "size", "f") == 2 << 30
    with pytest.raises(UsageError, match="expected int"):
        coerce(True, "int", "f")
    with pytest.raises(UsageError, match="not one of"):
        coerce("c", "str", "f", ["a", "b"])


@pytest.mark.parametrize("data,needle", [
    ({}, "missing required field 'description'"),
    ({"description": "x", "thresholds": [{"metric": "nope", "max": 1, "rationale": "r"}]}, "not a declared metric"),
    ({"description": "x", "metrics": {"m": {"unit": "s", "better": "sideways"}}}, "better"),
    ({"description": "x", "params": {"path": {"type": "str", "default": "a"}}}, "parameter names"),
    ({"description": "x", "params": {"n": {"type": "int", "default": "x"}}}, "expected int"),
    ({"description": "x", "presets": {"smoke": {"nope": 1}}}, "presets.smoke.nope"),
    ({"description": "x", "trace": {"events": ["xfs_ail_insert"]}}, "SYSTEM:EVENT"),
    ({"description": "x", "trace": {"mode": "stream"}}, "trace.mode: 'stream' is not one of ring, record"),
    ({"description": "x", "presets": {"s": {"trace": {"mode": "tmpfs"}}}}, "presets.s.trace.mode"),
])
def test_repro_toml_validation(data, needle):
    with pytest.raises(UsageError) as e:
        parse_reproducer("t", pathlib.Path("."), data)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e400"])
def test_set_a_number_that_is_not_finite(krig_cli, value):
    """nan passes every range comparison and inf every maximum: refused like any bad value."""
    assert_one_line(krig_cli("run", "selftest-pass", "--set", f"sample_interval={value}"),
                    "--set sample_interval", "finite")
    assert_one_line(krig_cli("run", "selftest-pass", "--set", f"timeout={value}"), "--set timeout", "int")


@pytest.mark.parametrize("text,needle", [
    ("[params.n]\ntype = 'int'\ndefault = 1e400\n", "params.n.default: expected int, got inf"),
    ("[params.n]\ntype = 'int'\ndefault = nan\n", "params.n.default: expected int"),
    ("[params.x]\ntype = 'float'\ndefault = inf\n", "params.x.default: expected a finite float"),
    ("[params.x]\ntype = 'float'\ndefault = 1.0\nmax = nan\n", "params.x.max: expected a finite float"),
    ("[params.s]\ntype = 'size'\ndefault = '" + "9" * 400 + "G'\n", "params.s.default: '999"),
    ("[metrics.m]\nunit = 's'\nbetter = 'lower'\n[[thresholds]]\nmetric = 'm'\nmax = nan\nrationale = 'r'\n",
     "thresholds[0].max: expected a finite number"),
    ("[metrics.m]\nunit = 's'\nbetter = 'lower'\nmin_change_pct = nan\n", "min_change_pct: expected a finite number"),
])
def test_repro_toml_numbers_must_be_finite(text, needle):
    import tomllib
    with pytest.raises(UsageError) as e:
        parse_reproducer("t", pathlib.Path("."), tomllib.loads("description = 'x'\n" + text))
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("value,ptype", [(float("nan"), "float"), ("inf", "float"), (1e400, "int"), ("nan", "int")])
def test_coerce_refuses_what_is_not_finite(value, ptype):
    with pytest.raises(UsageError):
        coerce(value, ptype, "f")
