"""`krig check` and `krig trace stats` on broken inputs: one clear line, no traceback."""
import json
import shutil
import signal

import pytest

from conftest import ROOT
from krig.errors import guarded

TEMPLATE = ROOT / "tests" / "data" / "xfs_template_v7.dat"


def one_line_error(p, code, *needles):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0]


# a trace.dat given on the command line is the user's input: a bad one is exit 2
def test_truncated_trace(krig_cli, tmp_path):
    bad = tmp_path / "trace.dat"
    bad.write_bytes(TEMPLATE.read_bytes()[:3000])
    one_line_error(krig_cli("trace", "stats", str(bad), "--event", "xfs:xfs_ail_insert"), 2, str(bad))


def test_garbage_trace(krig_cli, tmp_path):
    bad = tmp_path / "trace.dat"
    bad.write_bytes(b"\x17\x08\x44tracing" + b"\xff" * 5000)
    one_line_error(krig_cli("trace", "stats", str(bad), "--event", "xfs:xfs_ail_insert"), 2, str(bad))


def test_not_a_trace(krig_cli, tmp_path):
    bad = tmp_path / "trace.dat"
    bad.write_text("hello\n")
    one_line_error(krig_cli("trace", "stats", str(bad), "--event", "xfs:xfs_ail_insert"), 2, str(bad))


def test_unknown_event(krig_cli):
    one_line_error(krig_cli("trace", "stats", str(TEMPLATE), "--event", "xfs:no_such_event"), 2, "no_such_event")


def test_unknown_group_field(krig_cli):
    one_line_error(krig_cli("trace", "stats", str(TEMPLATE), "--event", "xfs:xfs_ail_insert",
                            "--group-by", "nonsense"), 2, "nonsense")


def _fake_run(tmp_path, repro="selftest-fail"):
    d = tmp_path / "run"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({
        "reproducer": repro, "params": {}, "outcome": "completed", "complete": True}))
    return d


def test_check_run_missing_files(krig_cli, tmp_path):
    """A completed run whose workload files are gone: ERROR naming what is missing."""
    d = _fake_run(tmp_path, "neg-dentry-flood")
    p = krig_cli("check", str(d))
    assert p.returncode == 3 and "Traceback" not in p.stderr
    assert "missing samples.tsv" in p.stdout
    v = json.loads((d / "verdict.json").read_text())
    assert v["verdict"] == "ERROR" and "samples.tsv" in v["reason"]
    assert (d / "junit.xml").exists()


def test_check_judges_workload_metrics(krig_cli, tmp_path):
    d = _fake_run(tmp_path)
    (d / "workload-metrics.tsv").write_text("answer\t40\n")
    p = krig_cli("check", str(d))
    assert p.returncode == 0, p.stdout + p.stderr
    (d / "workload-metrics.tsv").write_text("answer\t42\n")
    p = krig_cli("check", str(d))
    assert p.returncode == 1 and "answer = 42" in p.stdout


def test_check_corrupt_manifest(krig_cli, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "manifest.json").write_text("{not json")
    one_line_error(krig_cli("check", str(d)), 2, "manifest.json", "not valid JSON")


@pytest.mark.parametrize("outcome,verdict,code", [("hung", "HUNG", 5), ("crashed", "CRASHED", 6),
                                                  ("interrupted", "INTERRUPTED", 130)])
def test_check_keeps_outcome(krig_cli, tmp_path, outcome, verdict, code):
    d = _fake_run(tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    m.update(outcome=outcome, reason="because", machine={"release": "6.1.0"})   # the kernel had run
    (d / "manifest.json").write_text(json.dumps(m))
    p = krig_cli("check", str(d))
    assert p.returncode == code and p.stdout.startswith(verdict)


def test_crash_in_console_beats_metrics(krig_cli, tmp_path):
    d = _fake_run(tmp_path)
    (d / "workload-metrics.tsv").write_text("answer\t1\n")
    shutil.copy(ROOT / "tests" / "data" / "panic-console.log", d / "console.log")
    p = krig_cli("check", str(d))
    assert p.returncode == 6, p.stdout
    v = json.loads((d / "verdict.json").read_text())
    assert any("Kernel panic" in line for line in v["crash_context"])


def test_guarded_restores_sigint_ignored_by_a_background_shell():
    """A shell starts background jobs with SIGINT ignored; krig must still stop on `kill -INT`."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        seen = []
        assert guarded(lambda: seen.append(signal.getsignal(signal.SIGINT)) or 0) == 0
        assert seen == [signal.default_int_handler]
    finally:
        signal.signal(signal.SIGINT, old)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
