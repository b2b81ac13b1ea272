"""A run directory an earlier krig made still reads the same.

tests/data/run-neg-dentry-flood-1g-distro is a real neg-dentry-flood smoke run (a 1 GB guest,
Debian's kernel, FAIL: unbounded) exactly as krig wrote it on 2026-11-25, before thresholds.json
existed (host paths shortened to /srv/krig; the trace and pictures left out). `krig check` on a
copy must give the same verdict, the same crossed thresholds with the same sentences, the same
notes and the same value of every metric it had; what later krig adds (new metrics, the cause,
thresholds.json) only comes on top. Its command line reads back the same way too.
"""
import json
import shlex
import shutil

from conftest import ROOT
from krig.asked import AskedRun
from krig.record import RunRecord
from krig.reproducer import load_reproducer
from krig.rundir import RunDir

FIXTURE = ROOT / "tests" / "data" / "run-neg-dentry-flood-1g-distro"


def test_check_on_an_old_run_directory_gives_the_same_verdict_and_metrics(tmp_path, krig_cli):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    old_verdict = json.loads((FIXTURE / "verdict.json").read_text())
    old_metrics = json.loads((FIXTURE / "metrics.json").read_text())
    assert not (FIXTURE / "thresholds.json").exists(), "the fixture predates thresholds.json"

    p = krig_cli("check", str(run))
    assert p.returncode == 1, p.stdout + p.stderr          # FAIL, as it was judged then
    new = RunDir(run)
    verdict, metrics = (json.loads((run / f).read_text()) for f in ("verdict.json", "metrics.json"))
    assert verdict["verdict"] == old_verdict["verdict"] == "FAIL"
    assert verdict["cause"] == "kernel"
    for key in ("failed", "failed_host_sensitive", "unmeasured", "instrument", "errors", "failures",
                "not_judged", "broken"):
        assert verdict["thresholds"][key] == old_verdict["thresholds"][key], key
    assert verdict["thresholds"]["passed"] >= old_verdict["thresholds"]["passed"]
    assert verdict["notes"] == old_verdict["notes"]
    assert verdict["console"] == old_verdict["console"]
    for name, m in old_metrics.items():
        assert name in metrics, f"metric {name} is gone"
        assert metrics[name]["value"] == m["value"], (name, m["value"], metrics[name]["value"])
        assert metrics[name]["unit"] == m["unit"], name
    # thresholds.json now holds each threshold's outcome, the crossed ones those the verdict names
    judged = RunRecord.read(new).thresholds
    crossed = {t.threshold for t in judged if t.outcome == "fail"}
    assert len(crossed) == old_verdict["thresholds"]["failed"] == 2, judged

    # the run's command, as the summary (and a bundle, bisect and reproduce) say it
    asked = AskedRun.from_manifest(RunRecord.read(new).manifest, load_reproducer("neg-dentry-flood"))
    assert asked == AskedRun("neg-dentry-flood", "qemu-1g", "distro", "smoke", ())
    assert shlex.join(asked.argv()) == "krig run neg-dentry-flood --rig qemu-1g --kernel distro --preset smoke"
    assert AskedRun.from_args(asked.args(), "summary.txt") == asked
