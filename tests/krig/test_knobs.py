"""Knobs (krig/knobs.py): --sysctl and --cmdline checked, carried by the plan to the rig, written
and read back on the machine (here the fake rig's /proc/sys), recorded in the manifest, asked
again by `krig reproduce`'s run-args; a series' new sysctl or boot parameter named in one line.
No guest boots (tests/krig/test_knobs_guest.py boots one)."""
import pathlib
import subprocess
import sys

import pytest

from krig.asked import AskedRun
from krig.errors import UsageError
from krig.knobs import Knobs, applied, from_args, parse, series_knobs, sides
from krig.record import RunRecord
from workflows.compare import compare
from workflows.group import run_group
from workflows.run import run
from workflows.validate import _knob_args, knob_series
from test_fake_rig import fake_rig


def krig(*args):
    return subprocess.run([sys.executable, "-m", "workflows.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("text, says", [
    ("vm.vfs_cache_pressure", "expected NAME=VALUE"),
    ("../etc/passwd=1", "not a sysctl name"),
    ("vm..x=1", "no '..'"),
    ("/vm/x=1", "not a sysctl name"),
    ("VM.x=1", "not a sysctl name"),
    ("vm.x=1;reboot", "no shell characters"),
    ("vm.x=$(id)", "no shell characters"),
    ("vm.x=1\n2", "no newline"),
    ("vm.x=", "the value must be"),
])
def test_bad_sysctls_are_one_line(text, says):
    with pytest.raises(UsageError, match=r"^--sysctl .*") as e:
        parse([text], [])
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("arg", ["console=ttyS1", "init=/bin/sh", "rdinit=/x", "root=/dev/sda", "netconsole=@/,@1/",
                                 "krig.agent=/x", "panic=0", "Console=tty0".lower(), "root-fstype=xfs".replace("-", "")])
def test_boot_parameters_krig_needs_are_refused(arg):
    with pytest.raises(UsageError, match=r"how krig reaches or watches the machine"):
        parse([], [arg])


@pytest.mark.parametrize("arg", ["a b", "x=`id`", "x='1'", "x=1;y", ""])
def test_bad_boot_parameters_are_refused(arg):
    with pytest.raises(UsageError, match=r"one boot parameter"):
        parse([], [arg])


def test_good_knobs_parse():
    k = parse(["vm.vfs_cache_pressure=200", "fs.dentry-negative=1", "kernel.printk=4 4 1 7"],
              ["dhash_entries=65536", "numa=off", "nokaslr"])
    assert k.sysctl[2] == ("kernel.printk", "4 4 1 7")
    assert k.args()[:2] == ["--sysctl", "vm.vfs_cache_pressure=200"]
    assert from_args(k.args(), "here") == k
    with pytest.raises(UsageError, match="given twice"):
        parse(["vm.x=1", "vm.x=2"], [])


def test_validate_sides():
    class A:
        sysctl, cmdline = ["vm.vfs_cache_pressure=200"], None
        series_sysctl, series_cmdline, base_sysctl, base_cmdline = ["fs.dentry-negative=1"], None, None, ["numa=off"]
    s = sides(A)
    assert s["series"].sysctl == (("vm.vfs_cache_pressure", "200"), ("fs.dentry-negative", "1"))
    assert s["base"] == Knobs((("vm.vfs_cache_pressure", "200"),), ("numa=off",))
    assert _knob_args(s) == ["--sysctl", "vm.vfs_cache_pressure=200", "--series-sysctl", "fs.dentry-negative=1",
                             "--base-cmdline", "numa=off"]
    assert knob_series(s)["provenance"]["subject"] == ("knobs: sysctl vm.vfs_cache_pressure=200, sysctl "
                                                      "fs.dentry-negative=1, base sysctl vm.vfs_cache_pressure=200, "
                                                      "base cmdline numa=off")


def test_the_machines_answer():
    k = parse(["vm.a=1", "vm.b=2", "vm.c=x", "vm.d=1"], ["numa=off", "nokaslr"])
    rec, fault = applied(k, "set\tvm.a\t1\nunknown\tvm.b\nrefused\tvm.c\tInvalid argument\nread-only\tvm.d\n",
                         "console=ttyS0 numa=off")
    assert [s["read_back"] for s in rec["sysctl"]] == ["1", None, None, None]
    assert fault == "--sysctl vm.b=2: no such sysctl on this kernel (/proc/sys/vm/b); nothing ran"
    assert "Invalid argument" in rec["sysctl"][2]["fault"] and "read-only" in rec["sysctl"][3]["fault"]
    assert [c["read_back"] for c in rec["cmdline"]] == [True, False]


def test_series_knobs_are_named_without_a_value():
    patch = """--- a/fs/dcache.c
+++ b/fs/dcache.c
@@ -1,3 +1,12 @@
+static struct ctl_table fs_dcache_sysctls[] = {
+	{
+		.procname	= "dentry-negative",
+		.data		= &sysctl_dentry_negative,
+	},
+};
+	register_sysctl_init("fs", fs_dcache_sysctls);
+__setup("dcache_cap=", set_cap);
+early_param("nodcachecap", no_cap);
 context
"""
    lines = series_knobs([patch])
    assert lines == [
        "the series adds the sysctl fs.dentry-negative (fs/dcache.c): validate with it on as "
        "--series-sysctl fs.dentry-negative=VALUE",
        "the series adds the boot parameter dcache_cap (fs/dcache.c): validate with it on as "
        "--series-cmdline dcache_cap=VALUE",
        "the series adds the boot parameter nodcachecap (fs/dcache.c): validate with it on as "
        "--series-cmdline nodcachecap[=VALUE]"]
    assert series_knobs(["--- a/mm/x.c\n+++ b/mm/x.c\n-	.procname = \"gone\",\n"]) == []


def test_knobs_on_the_fake_rig(tmp_path):
    """Set, read back, recorded; the group records what it asked; reproduce's run-args ask it again."""
    knobs = parse(["vm.vfs_cache_pressure=200"], ["dhash_entries=4096"])
    d, verdict = run("selftest-pass", fake_rig(tmp_path), "distro", results_root=tmp_path / "r",
                     log=lambda m: None, knobs=knobs)
    assert verdict.verdict == "PASS", verdict.reason
    man = RunRecord.read(d).manifest
    assert man.knobs == {"sysctl": [{"name": "vm.vfs_cache_pressure", "set": "200", "read_back": "200"}],
                         "cmdline": [{"arg": "dhash_entries=4096", "read_back": True}]}
    asked = AskedRun.from_manifest(man, __import__("krig.reproducer", fromlist=["x"]).load_reproducer("selftest-pass"))
    assert asked.knobs == ("--sysctl", "vm.vfs_cache_pressure=200", "--cmdline", "dhash_entries=4096")
    assert AskedRun.from_args(asked.args(), "run-args") == asked
    plain, _ = run("selftest-pass", fake_rig(tmp_path), "distro", results_root=tmp_path / "r", log=lambda m: None)
    res = compare([str(plain)], [str(d)])
    assert "knobs: BASE none, NEW sysctl vm.vfs_cache_pressure=200; cmdline dhash_entries=4096" in res.differences
    gdir, group, _ = run_group("selftest-pass", fake_rig(tmp_path), "distro", None, {}, 1, tmp_path / "g",
                               tmp_path / "r", log=lambda m: None, knobs=knobs)
    assert group.knobs == {"sysctl": ["vm.vfs_cache_pressure=200"], "cmdline": ["dhash_entries=4096"]}
    with pytest.raises(UsageError, match="the group was made for knobs"):
        run_group("selftest-pass", fake_rig(tmp_path), "distro", None, {}, 2, tmp_path / "g", tmp_path / "r",
                  log=lambda m: None)


@pytest.mark.parametrize("sysctl, says", [
    ("vm.nonexistent=1", "--sysctl vm.nonexistent=1: no such sysctl on this kernel (/proc/sys/vm/nonexistent)"),
    ("kernel.osrelease=1", "--sysctl kernel.osrelease=1: read-only on this kernel"),
    ("vm.vfs_cache_pressure=lots", "--sysctl vm.vfs_cache_pressure=lots: the kernel refused the value 'lots'"),
])
def test_a_knob_the_kernel_refuses_is_error_before_the_workload(tmp_path, sysctl, says):
    d, verdict = run("selftest-pass", fake_rig(tmp_path), "distro", results_root=tmp_path / "r",
                     log=lambda m: None, knobs=parse([sysctl], []))
    assert verdict.verdict == "ERROR" and says in verdict.reason
    man = RunRecord.read(d).manifest
    assert man.workload is None and says.split(": ", 1)[1] in man.knobs["sysctl"][0]["fault"]


def test_cli_refuses_bad_knobs_in_one_line(tmp_path):
    for args, says in ((["run", "selftest-pass", "--cmdline", "console=tty0"], "--cmdline console=tty0: console="),
                       (["run", "selftest-pass", "--sysctl", "../x=1"], "--sysctl '../x': not a sysctl name"),
                       (["validate", "selftest-pass", "--base", "tiny-6.1", "--series-cmdline", "init=/bin/sh"],
                        "--series-cmdline init=/bin/sh: init="),
                       (["validate", "selftest-pass", "--base", "tiny-6.1"], "--series: required, unless")):
        p = krig(*args)
        assert p.returncode == 2, p.stderr
        assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_the_run_carries_its_knobs_everywhere(tmp_path):
    """summary.txt (reproduce line and knobs), report.html, a bundle's run-args and manifest, KCIDB's test."""
    import tarfile
    from workflows.bundle import bundle
    from workflows.kcidb import build_report
    knobs = parse(["vm.vfs_cache_pressure=200"], ["dhash_entries=4096"])
    d, _ = run("selftest-pass", fake_rig(tmp_path), "distro", results_root=tmp_path / "r", log=lambda m: None,
               knobs=knobs)
    p = krig("report", str(d))
    assert p.returncode == 0, p.stderr
    summary = (d / "summary.txt").read_text()
    assert "knobs: sysctl vm.vfs_cache_pressure=200; cmdline dhash_entries=4096" in summary
    assert "--sysctl vm.vfs_cache_pressure=200 --cmdline dhash_entries=4096" in " ".join(summary.replace("\\\n", " ").split())
    assert "sysctl vm.vfs_cache_pressure=200; cmdline dhash_entries=4096" in (d / "report.html").read_text()
    tgz = bundle(d, tmp_path / "b.tar.gz", log=lambda m: None)
    with tarfile.open(tgz) as t:
        args = next(t.extractfile(m).read().decode() for m in t.getmembers() if m.name.endswith("/run-args"))
    assert "--sysctl\nvm.vfs_cache_pressure=200\n--cmdline\ndhash_entries=4096\n" in args
    test = build_report([str(d)], "krig_test")["tests"][0]
    assert test["misc"]["knobs"]["sysctl"][0] == {"name": "vm.vfs_cache_pressure", "set": "200", "read_back": "200"}


def test_a_suite_run_and_the_command_line_add_knobs(tmp_path):
    from workflows.qualify import load_suite
    f = tmp_path / "s.toml"
    f.write_text('kernels = ["distro"]\n[[runs]]\nreproducer = "selftest-pass"\nsysctl = ["vm.vfs_cache_pressure=200"]\n'
                 '[[runs]]\nreproducer = "selftest-pass"\n')
    s = load_suite(f, knobs=parse([], ["numa=off"]))
    assert [c["knobs"] for c in s["cases"]] == [{"sysctl": ["vm.vfs_cache_pressure=200"], "cmdline": ["numa=off"]},
                                                {"sysctl": [], "cmdline": ["numa=off"]}]
    assert len({c["id"] for c in s["cases"]}) == 2
    plain = load_suite(f.with_name("p.toml") if f.with_name("p.toml").write_text(
        '[[runs]]\nreproducer = "selftest-pass"\n') else None)
    assert "knobs" not in plain["cases"][0] and plain["cases"][0]["id"] == "selftest-pass-default@distro@qemu-default#1"
    f.write_text('[[runs]]\nreproducer = "selftest-pass"\ncmdline = ["root=/dev/vda"]\n')
    with pytest.raises(UsageError, match=r"runs\[0\].cmdline root=/dev/vda: root= is how krig"):
        load_suite(f)
    f.write_text('[[runs]]\nreproducer = "selftest-pass"\nsysctl = ["vm.x=1"]\n')
    with pytest.raises(UsageError, match="given twice"):
        load_suite(f, knobs=parse(["vm.x=2"], []))


def test_a_bisection_step_asks_its_knobs():
    from krig.record_bisect import BisectionRecord
    from workflows.bisect import asked_of
    state = BisectionRecord(tree="/t", kernel="bisect-x", repro="selftest-pass", rig="qemu-default",
                            knobs=parse(["vm.vfs_cache_pressure=200"], []).args())
    assert asked_of(state).argv()[-2:] == ["--sysctl", "vm.vfs_cache_pressure=200"]
    assert BisectionRecord.from_json(state.to_json()).knobs == ["--sysctl", "vm.vfs_cache_pressure=200"]
    assert "knobs" not in BisectionRecord(tree="/t").to_json()


def test_the_knob_gated_variant_is_named_by_its_patch():
    """kernels/patches/negative-dentry-knob (tiny-6.1-negative-dentry-knob, tests/krig/test_knobs_series.py)
    adds fs.negative-dentry-limit, off by default."""
    from krig import KERNEL_DIR
    patch = next((KERNEL_DIR / "patches" / "negative-dentry-knob").glob("*.patch")).read_text()
    assert series_knobs([patch]) == ["the series adds the sysctl fs.negative-dentry-limit (fs/dcache.c): validate "
                                     "with it on as --series-sysctl fs.negative-dentry-limit=VALUE"]
    assert "+static int sysctl_negative_dentry_limit __read_mostly;\n" in patch      # 0: the cap is off


def test_a_knob_only_ab_on_the_fake_rig(tmp_path):
    """No series: one kernel on both sides, the patched side with the knob; validate.json, the
    runs' manifests and the reply carry it (the fake rig PASSes both: the base does not reproduce)."""
    from workflows.validate import validate
    knobs = {"base": Knobs(), "series": parse(["vm.vfs_cache_pressure=200"], [])}
    vdir, state, code = validate("selftest-pass", "distro", None, 1, fake_rig(tmp_path), out=str(tmp_path / "v"),
                                 sender="A Tester <a@example.org>", log=lambda *a, **k: None, knobs=knobs)
    assert state.answer == "base does not reproduce" and code == 4
    assert state.series is None and state.knobs == {"base": [], "series": ["sysctl vm.vfs_cache_pressure=200"]}
    new = RunRecord.read(next((vdir / "new").glob("run-*"))).manifest
    base = RunRecord.read(next((vdir / "base").glob("run-*"))).manifest
    assert new.knobs["sysctl"][0]["read_back"] == "200" and base.knobs is None
    assert new.kernel.name == base.kernel.name == "distro"
    assert state.command[-2:] == ["--series-sysctl", "vm.vfs_cache_pressure=200"] and "--series" not in state.command
    reply = (vdir / "reply.txt").read_text()
    assert "  patched knob    sysctl vm.vfs_cache_pressure=200" in reply
    assert "Re: knobs: sysctl vm.vfs_cache_pressure=200" in (vdir / "reply.mbox").read_text()
    with pytest.raises(UsageError, match="the validation was made for knobs"):
        validate("selftest-pass", "distro", None, 1, fake_rig(tmp_path), out=str(tmp_path / "v"),
                 sender="A Tester <a@example.org>", log=lambda *a, **k: None,
                 knobs={"base": Knobs(), "series": parse(["vm.vfs_cache_pressure=300"], [])})



def test_a_validation_does_not_call_its_own_knobs_incomparable(tmp_path):
    """Both sides FAIL on a fake rig whose answer is wrong: a comparison is made; `krig compare` of
    its sides names the knobs among what differs, the validation (whose question they are) does not."""
    from workflows.validate import validate
    rig = pathlib.Path(fake_rig(tmp_path))
    rig.write_text(rig.read_text().replace("answer = 42", "answer = 41"))
    knobs = {"base": Knobs(), "series": parse(["vm.vfs_cache_pressure=200"], [])}
    vdir, state, code = validate("selftest-pass", "distro", None, 1, str(rig), out=str(tmp_path / "v"),
                                 sender="A Tester <a@example.org>", log=lambda *a, **k: None, knobs=knobs)
    assert state.answer == "not fixed" and code == 1
    assert not [d for d in state.differences if d.startswith("knobs")]
    res = compare([str(vdir / "base")], [str(vdir / "new")])
    assert "knobs: BASE none, NEW sysctl vm.vfs_cache_pressure=200" in res.differences
