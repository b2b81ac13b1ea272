"""Bad input: one clear line naming the field and what is allowed, exit 2, no traceback.

Covers: kernels/buildargs.py, krig/errors.py, workflows/argcheck.py."""
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


# -- every subcommand: a table of bad input, all run in one process ---------------------------
# Each case: (argv, needles). In argv, {RUN} is a judged run directory (fake rig), {BUNDLE} its
# bundle, {DIR} a directory, {FILE} a regular file, {MISSING} a path that is not there, {RAND}
# random bytes, {LATIN1} a TOML file in Latin-1, {EMPTY} an empty file, {NUL} TOML with a NUL byte,
# {INSTALLED} a lab server's rig file with boot = "installed" (it never boots a kernel krig builds).
# Every answer: exit 2, one line on stderr naming the option (and the value), no traceback.
FW8, FW15 = "\uff18", "\uff11.5"          # full-width digits: Python's int() and float() read them
TABLE = [
    (["run", "selftest-pass", "--rig", "{RAND}"], ("--rig", "not UTF-8")),
    (["run", "selftest-pass", "--rig", "{LATIN1}"], ("--rig", "not UTF-8", "0xe9")),
    (["run", "selftest-pass", "--rig", "{EMPTY}"], ("{EMPTY}", "missing required field 'driver'", "empty")),
    (["run", "selftest-pass", "--rig", "{NUL}"], ("--rig", "malformed TOML")),
    (["run", "selftest-pass", "--rig", "{DIR}"], ("--rig", "a directory")),
    (["run", "selftest-pass", "--group", "{FILE}"], ("--group", "not a directory")),
    (["run", "selftest-pass", "--group", "{FILE}/sub"], ("--group", "not a directory")),
    (["run", "selftest-pass", "--kernel", ""], ("--kernel ''", "empty")),
    (["run", "selftest-pass", "--kernel", "{MISSING}@v6.1"], ("--kernel {MISSING}@v6.1:", "no such directory")),
    (["run", "selftest-pass", "--kernel", "{DIR}@v6.1"], ("--kernel {DIR}@v6.1:", "not a git repository")),
    (["run", "selftest-pass", "--set", f"files={FW8}"], ("--set files", "ASCII")),
    (["run", "selftest-pass", "--set", f"sample_interval={FW15}"], ("--set sample_interval", "ASCII")),
    (["run", "selftest-pass", "--repeat", FW8], ("--repeat", "ASCII")),
    (["run", "selftest-pass", "--repeat", "0"], ("--repeat", "minimum 1")),
    (["run", "selftest-pass", "--set", "timeout=-5"], ("--set timeout", "-5")),
    (["run", "selftest-pass", "--preset", ""], ("--preset", "allowed")),
    (["run", "selftest-pass", "--sysctl", "vm.x=$(reboot)"], ("--sysctl vm.x='$(reboot)'", "no shell characters")),
    (["run", "selftest-pass", "--sysctl", "../../etc/x=1"], ("--sysctl '../../etc/x'", "not a sysctl name")),
    (["run", "selftest-pass", "--cmdline", "console=ttyS1"], ("--cmdline console=ttyS1", "how krig reaches")),
    (["run", "selftest-pass", "--kernel", "distro", "--cmdline", "numa=off", "--rig", "{INSTALLED}"],
     ("--cmdline numa=off: rig installed cannot give a kernel a boot parameter", 'boot = "installed"')),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "tiny-6.1", "--series", "{FILE}",
      "--series-cmdline", "init=/bin/sh"], ("--series-cmdline init=/bin/sh", "how krig reaches")),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "tiny-6.1"],
     ("--series: required, unless the sides differ in their knobs only",)),
    (["run", "selftest-pass", "--kernel", "tiny-6.1", "--rig", "{INSTALLED}"], ("--kernel tiny-6.1: rig installed cannot boot a kernel krig builds", 'boot = "installed"')),
    (["run", "selftest-pass", "--kernel", "tiny-6.1,series={FILE}", "--repeat", "2", "--rig", "{INSTALLED}"], ("--kernel tiny-6.1,series={FILE}: rig installed cannot boot",)),
    (["check", "{RUN}", "--project", "-5G"], ("--project", "-5G")),
    (["check", "{RUN}", "--project", "4G"], ("--project", "selftest-pass", "neg-dentry-flood")),
    (["check", "{RUN}", "--project", f"4G:{FW8}"], ("--project", "CPUs")),
    (["check", "{MISSING}"], ("{MISSING}", "not a run directory")),
    (["check", "{FILE}"], ("{FILE}", "not a run directory")),
    (["report", "{RUN}", "--project", "4G"], ("--project", "neg-dentry-flood")),
    (["report", "{DIR}"], ("{DIR}", "no manifest.json")),
    (["bundle", "{RUN}", "-o", "{MISSING}/x.tar.gz"], ("-o {MISSING}/x.tar.gz", "does not exist")),
    (["bundle", "{RUN}", "-o", "{DIR}"], ("-o {DIR}", "a directory")),
    (["bundle", "{RUN}", "-o", "{FILE}/x.tar.gz"], ("-o {FILE}/x.tar.gz", "not a directory")),
    (["bundle", "{DIR}"], ("{DIR}", "not a run directory")),
    (["reproduce", "{MISSING}.tar.gz"], ("{MISSING}.tar.gz", "no such file")),
    (["reproduce", "{DIR}"], ("{DIR}", "a directory")),
    (["reproduce", "{RAND}"], ("{RAND}", "not a tarball")),
    (["reproduce", "{BUNDLE}", "--rig", "nope"], ("--rig 'nope'", "qemu-default")),
    (["reproduce", "{BUNDLE}", "--rig", "{LATIN1}"], ("--rig", "not UTF-8")),
    (["reproduce", "{BUNDLE}", "--kernel", "nope"], ("--kernel 'nope'", "distro")),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "", "--series", "{FILE}"], ("--base ''", "empty")),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "{MISSING}@", "--series", "{FILE}"], ("--base", "no such directory")),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "tiny-6.1", "--series", "{FILE}", "-o", "{FILE}"], ("-o {FILE}",)),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "tiny-6.1", "--series", "{MISSING}"], ("--series",)),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "tiny-6.1", "--series", "{RAND}"], ("--series", "no patch")),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "tiny-6.1", "--series", "{FILE}", "--repeat", FW8], ("--repeat", "ASCII")),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "tiny-6.1", "--series", "{FILE}", "--rig", "{RAND}"], ("--rig", "UTF-8")),
    (["validate", "selftest-pass", "--from", "A B <a@b.example>", "--base", "tiny-6.1", "--series", "{FILE}", "--rig", "{INSTALLED}"], ("--base tiny-6.1: rig installed cannot boot a kernel krig builds", 'boot = "installed"', "nothing was built")),
    (["b4-check", "--dir", "{MISSING}"], ("--dir {MISSING}", "no such directory")),
    (["b4-check", "--dir", "{FILE}"], ("--dir {FILE}", "not a directory")),
    (["qualify", "{DIR}"], ("{DIR}", "a directory")),
    (["qualify", "{RAND}"], ("{RAND}", "not UTF-8")),
    (["qualify", "{LATIN1}"], ("{LATIN1}", "not UTF-8")),
    (["qualify", "{MISSING}"], ("{MISSING}", "not found")),
    (["qualify", "qualify/smoke.toml", "-o", "{FILE}"], ("-o {FILE}", "not a directory")),
    (["qualify", "qualify/smoke.toml", "-o", "{FILE}/q"], ("-o {FILE}/q", "not a directory")),
    (["qualify", "qualify/smoke.toml", "--prio", FW8], ("--prio", "ASCII")),
    (["qualify", "qualify/seed-scale.toml", "--check", "--rig", "{INSTALLED}"], ("runs[0] on rig {INSTALLED}: kernels tiny-6.1-negative-dentry-per-bucket: rig installed cannot boot",)),
    (["lab", "sim", "up", "x", "--memory", ""], ("--memory: '' is empty", "1G-64T")),
    (["lab", "sim", "up", "x", "--memory", "64T"], ("--memory 64T: a sparse 65536.0 GiB guest would touch", "struct pages", "MemAvailable")),
    (["lab", "sync", "nope"], ("RIG 'nope'", "qemu-default")),
    (["lab", "sync", "{RAND}"], ("RIG {RAND}", "not UTF-8")),
    (["compare", "{MISSING}", "--", "{RUN}"], ("BASE {MISSING}",)),
    (["compare", "{RUN}", "--", "{RUN}", "--out", "{FILE}"], ("--out {FILE}", "not a directory")),
    (["compare", "--format", "xml", "{RUN}", "--", "{RUN}"], ("--format", "xml")),
    (["export", "kcidb", "{RUN}", "--origin", "krigtest", "-o", "{MISSING}/x.json"], ("-o {MISSING}/x.json", "does not exist")),
    (["export", "kcidb", "{RUN}", "--origin", "krigtest", "-o", "{DIR}"], ("-o {DIR}", "a directory")),
    (["export", "kcidb", "{RUN}", "--origin", "Bad Origin"], ("--origin", "lower-case")),
    (["export", "kcidb", "{RUN}", "--origin", "krigtest", "--submit", "http://127.0.0.1:9", "--token-file",
      "{MISSING}"], ("--token-file",)),
    (["export", "kcidb", "{MISSING}", "--origin", "krigtest"], ("{MISSING}", "not a run")),
    (["trace", "stats", "{MISSING}", "--event", "sched:sched_switch"], ("{MISSING}", "no such file")),
    (["trace", "stats", "{RAND}", "--event", "sched:sched_switch"], ("{RAND}", "not a trace-cmd")),
    (["trace", "stats", "{DIR}", "--event", "sched:sched_switch"], ("{DIR}", "a directory")),
    (["kernel", "build", "tiny-6.1", "nope"], ("nope", "unknown kernel")),
    (["kernel", "status", "nope"], ("nope", "unknown kernel")),
    (["bisect", "demo", "--repro", "nope"], ("--repro nope", "unlink-dentry-growth")),
    (["bisect", "demo", "--like", "nope"], ("--like 'nope'", "tiny-6.1")),
    (["bisect", "demo", "--repeat", FW8], ("--repeat", "ASCII")),
    (["bisect", "run", "--tree", "{DIR}", "--good", "a", "--bad", "b", "--repro", "unlink-dentry-growth",
      "--set", "nope=1"], ("--set nope", "files_per_dir")),
    (["bisect", "run", "--tree", "{DIR}", "--good", "a", "--bad", "b", "--repro", "unlink-dentry-growth",
      "--set", f"files_per_dir={FW8}"], ("--set files_per_dir", "ASCII")),
    (["bisect", "run", "--tree", "{DIR}", "--good", "a", "--bad", "b", "--repro", "unlink-dentry-growth",
      "--rig", "nope"], ("--rig 'nope'",)),
    (["bisect", "run", "--tree", "{DIR}", "--good", "a", "--bad", "b", "--repro", "unlink-dentry-growth",
      "--like", "nope"], ("--like 'nope'",)),
    (["bisect", "run", "--tree", "{DIR}", "--good", "a", "--bad", "b", "--repro", "unlink-dentry-growth",
      "--rig", "{INSTALLED}"], ("--tree: rig installed cannot boot a kernel krig builds", 'boot = "installed"')),
    (["rig", "check", "{RAND}"], ("rig check", "not UTF-8")),
    (["rig", "check", "{EMPTY}"], ("{EMPTY}", "missing required field 'driver'")),
    (["rig", "check", "{MISSING}"], ("rig check {MISSING}", "no such file")),
    (["rig", "check", "nosuch-rig"], ("rig check 'nosuch-rig'", "unknown rig")),
    (["history", "--since", "notadate"], ("--since 'notadate'", "YYYY-MM-DD")),
    (["history", "--verdict", "MAYBE"], ("--verdict 'MAYBE'", "PASS, FAIL, ERROR")),
    (["history", "import", "{MISSING}"], ("DIR {MISSING}", "not a directory")),
    (["run", "selftest-pass", "--kernel", "tiny-6.1,drivers=a,drivers=b"], ("drivers= given twice",)),
    (["run", "selftest-pass", "--kernel", "tiny-6.1,drivers={MISSING}"], ("drivers={MISSING}", "no such file")),
]
# words an answer never has: an errno tuple, krig's temporary names, a file the user did not name
NEVER = ("Traceback", "[Errno", "Errno ", ".tmp", ".tree:", "None is not one of", "expected one argument")

DRIVER = """
import contextlib, io, json, sys
from workflows.cli import main
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        except BaseException as e:
            import traceback
            traceback.print_exc(file=err)
            code = -1
    print(json.dumps({"code": code, "stderr": err.getvalue()}), flush=True)
"""


def installed_rig(d: pathlib.Path) -> pathlib.Path:
    """A lab server's rig file that loads here (its key, known_hosts and password file exist) and
    boots the kernel installed on the server (boot = "installed"); its BMC is never asked."""
    d.mkdir()
    for name, text in (("key", "not really a key\n"), ("pw", "s3cret-Pw\nbmc = 192.0.2.5\n"), ("known_hosts", "")):
        (d / name).write_text(text)
        (d / name).chmod(0o600)
    rig = d / "installed.toml"
    rig.write_text(f'driver = "ipmi"\nboot = "installed"\nscratch_dev = "/dev/nvme0n1"\n'
                   f'[bmc]\nhost = "192.0.2.5"\nuser = "krig"\npassword_file = "{d / "pw"}"\n'
                   f'[ssh]\nhost = "192.0.2.6"\nkey = "{d / "key"}"\nknown_hosts = "{d / "known_hosts"}"\n')
    return rig


@pytest.fixture(scope="module")
def table_answers(tmp_path_factory):
    """Every case of TABLE, answered by workflows.cli.main in one process (with its own results and
    cache directories: a case that started work would leave something there)."""
    import json
    import os
    import subprocess
    import sys
    from conftest import ROOT
    from workflows.bundle import bundle
    from test_fake_rig import fake_run
    tmp = tmp_path_factory.mktemp("badtable")
    (tmp / "made").mkdir()
    run, verdict = fake_run(tmp / "made")
    assert verdict.verdict == "PASS", verdict.reason
    paths = {"RUN": run, "BUNDLE": tmp / "b.tar.gz", "DIR": tmp / "a-dir", "FILE": tmp / "a-file",
             "MISSING": tmp / "missing", "RAND": tmp / "random.toml", "LATIN1": tmp / "latin1.toml",
             "EMPTY": tmp / "empty.toml", "NUL": tmp / "nul.toml"}
    bundle(run, paths["BUNDLE"], log=lambda m: None)
    paths["DIR"].mkdir()
    paths["FILE"].write_text("not what was asked for\n")
    paths["RAND"].write_bytes(b"\xff" + bytes(range(256)) * 3)
    paths["LATIN1"].write_bytes('driver = "qemu"\ndescription = "caf\u00e9"\n'.encode("latin-1"))
    paths["EMPTY"].write_bytes(b"")
    paths["NUL"].write_bytes(b'driver = "qemu"\x00\n')
    paths["INSTALLED"] = installed_rig(tmp / "installed")
    fill = {k: str(v) for k, v in paths.items()}
    argvs = [[a.format(**fill) for a in argv] for argv, _ in TABLE]
    env = {k: v for k, v in os.environ.items() if k not in ("KRIG_LAB_COORDINATOR", "KRIG_RIG_PATH")}
    env.update(KRIG_RESULTS=str(tmp / "results"), KRIG_CACHE=str(tmp / "cache"))
    p = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argvs)], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=120 + 20 * len(argvs))
    assert p.returncode == 0, p.stderr[-2000:]
    answers = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == len(TABLE), p.stdout[-2000:]
    return {"fill": fill, "answers": answers, "tmp": tmp}


def test_the_table_covers_every_subcommand():
    from workflows.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    asked = {argv[0] for argv, _ in TABLE}
    assert set(sub.choices) - asked == {"list"}, set(sub.choices) - asked      # list takes no input
    assert len(TABLE) >= 60


@pytest.mark.parametrize("i", range(len(TABLE)), ids=[" ".join(a for a in argv[:3]) + f"-{i}"
                                                      for i, (argv, _) in enumerate(TABLE)])
def test_bad_input_table(table_answers, i):
    a, fill = table_answers["answers"][i], table_answers["fill"]
    needles = [n.format(**fill) for n in TABLE[i][1]]
    assert a["code"] == 2, a
    lines = [ln for ln in a["stderr"].splitlines() if ln.strip()]
    assert len(lines) == 1, a["stderr"]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    for n in NEVER:
        assert n not in lines[0], (n, lines[0])


def test_the_table_started_nothing(table_answers):
    """No case got as far as a run, a build or an unpacked source: the results and cache
    directories it was given hold no file."""
    tmp = table_answers["tmp"]
    made = [p for d in ("results", "cache") for p in (tmp / d).rglob("*") if not p.is_dir()]
    assert made == [], made


def test_bisect_demo_checks_its_arguments_before_unpacking(krig_cli, tmp_path):
    """A wrong --repro is said before the kernel source is unpacked or the demo history made."""
    cache = tmp_path / "cache"
    p = krig_cli("bisect", "demo", "--repro", "nope", env={"KRIG_CACHE": str(cache)})
    assert_one_line(p, "--repro nope", "allowed:")
    assert not (cache / "bisect-demo").exists() or not any((cache / "bisect-demo").iterdir())
    assert not (cache / "kbuild").exists() or not any((cache / "kbuild").rglob("*.c"))


def test_a_rig_that_boots_only_the_installed_kernel_still_runs_one_krig_does_not_build(tmp_path):
    """boot = "installed" refuses what krig builds, never the distro's kernel or an image built
    elsewhere (the server may have it installed: `uname -r` decides); boot = "kexec" takes both."""
    from rigs import load_rig
    from workflows.preflight import check_boots
    path = installed_rig(tmp_path / "lab")
    rig = load_rig(str(path))
    check_boots(rig, [("--kernel", "distro"), ("--kernel", str(path))])      # (a file given as an image)
    for text in ("tiny-6.1", f"tiny-6.1,series={path}", None):
        with pytest.raises(UsageError, match=r"rig installed cannot boot a kernel krig builds"):
            check_boots(rig, [("--kernel", text)])
    path.write_text(path.read_text().replace('boot = "installed"', 'boot = "kexec"'))
    check_boots(load_rig(str(path)), [("--kernel", "tiny-6.1"), ("--tree", None)])
