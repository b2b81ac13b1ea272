"""One run, one command line: summary.txt's "reproduce", a bundle's run-args and `krig reproduce`'s
run, a bisection step's log line and a validation reply's `krig validate` are all made by
krig.asked.AskedRun and read back by it.
The fake rig (no guest): `krig run`, `krig bundle` and `krig reproduce` as a user runs them."""
import json
import os
import shlex
import subprocess

import pytest

from conftest import KRIG, ROOT
from workflows import bisect
from workflows.cli import build_parser
from krig.asked import AskedRun
from krig.errors import UsageError
from krig.knobs import parse as parse_knobs
from krig.record import Manifest
from krig.record_bisect import BisectionRecord
from krig.reproducer import load_reproducer

FAKE = """driver = "fake"
work_dir = "{work}"

[metrics]
answer = 42
files_seen = 100
"""


def test_round_trips():
    repro = load_reproducer("neg-dentry-flood")
    man = {"rig": {"name": "qemu-2g"}, "kernel": {"name": "tiny-6.1", "arg": "~/linux@v6.1,like=tiny-6.1"},
           "preset": "smoke", "params": {**repro.resolve_params("smoke", {}), "fs": "ext4", "min_duration": 30}}
    asked = AskedRun.from_manifest(Manifest.from_json(man), repro)
    assert asked.argv() == ["krig", "run", "neg-dentry-flood", "--rig", "qemu-2g", "--kernel",
                            "~/linux@v6.1,like=tiny-6.1", "--preset", "smoke", "--set", "fs=ext4",
                            "--set", "min_duration=30"]
    assert AskedRun.from_args(asked.argv()[2:], "x") == asked
    assert AskedRun.from_args(asked.args(rig=False), "x", ("--kernel", "--preset", "--set")).rig == "qemu-default"
    for bad in (["--rig", "x"], ["r", "--timeout", "3"], ["r", "--set"], []):
        with pytest.raises(UsageError) as e:
            AskedRun.from_args(bad, "run-args")
        assert str(e.value).startswith("run-args: ") and "\n" not in str(e.value)


def test_summary_bundle_reproduce_and_bisect_say_the_same_command(tmp_path):
    rigs = tmp_path / "rigs"
    rigs.mkdir()
    (tmp_path / "work").mkdir()
    (rigs / "fake-asked.toml").write_text(FAKE.format(work=tmp_path / "work"))
    env = {**os.environ, "KRIG_RIG_PATH": str(rigs), "KRIG_RESULTS": str(tmp_path / "results")}

    def krig(*args):
        return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=tmp_path, timeout=600,
                              env={**env, "PYTHONPATH": str(ROOT)})
    knobs = ["--sysctl", "vm.vfs_cache_pressure=200", "--cmdline", "numa=off"]
    p = krig("run", "selftest-pass", "--rig", "fake-asked", "--set", "timeout=121", *knobs)
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = next(ln[len("results: "):] for ln in p.stdout.splitlines() if ln.startswith("results: "))
    summary = open(os.path.join(run_dir, "summary.txt")).read().split("reproduce (from a krig checkout")[1]
    said = " ".join(summary.split("\n", 1)[1].replace("\\\n", " ").split())
    want = ["krig", "run", "selftest-pass", "--rig", "fake-asked", "--kernel", "distro", "--set", "timeout=121", *knobs]
    assert said == shlex.join(want), said
    # the bundle's run-args, read back by krig reproduce, which says the run it makes
    b = krig("bundle", run_dir, "-o", str(tmp_path / "b.tar.gz"))
    assert b.returncode == 0, b.stderr
    r = krig("reproduce", str(tmp_path / "b.tar.gz"), "--rig", "fake-asked")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"krig: the run: {shlex.join(want)}" in r.stderr + r.stdout
    rerun = next(ln[len("results: "):] for ln in r.stdout.splitlines() if ln.startswith("results: "))
    assert json.loads(open(os.path.join(rerun, "manifest.json")).read())["knobs"]["sysctl"][0]["read_back"] == "200"
    # a bisection step with the same reproducer, rig, kernel and settings
    man = json.loads(open(os.path.join(run_dir, "manifest.json")).read())
    state = BisectionRecord(repro=man["reproducer"], rig="fake-asked", kernel="distro", preset=None,
                            sets=["timeout=121"], knobs=knobs)
    assert bisect.asked_of(state).argv() == want
    # the reply's command (krig validate with this run's kernel as the base), read back by krig's
    # own parser, asks for the same reproducer, rig, kernel and settings
    asked = AskedRun.from_args(want[2:], "summary.txt")
    for repeat in (None, 2):
        line = asked.validate_argv("fix.mbox", repeat)
        a = build_parser().parse_args(line[1:])
        again = parse_knobs(a.sysctl, a.cmdline).args()
        assert AskedRun(a.reproducer, a.rig, a.base, a.preset, tuple(a.set or ()), tuple(again)) == asked, line
        assert a.series == "fix.mbox" and a.repeat == (repeat or 4)
