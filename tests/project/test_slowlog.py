"""tests/slowlog.py: a slow phase and a failure are each a line when they end, from the
controller of an xdist run, so a run stopped from outside still shows them."""
import os
import re
import subprocess
import sys

from conftest import ROOT


def test_a_slow_test_and_a_failure_are_said_as_they_end(tmp_path):
    (tmp_path / "test_x.py").write_text("import time\n"
                                        "def test_slow():\n    time.sleep(1.5)\n"
                                        "def test_quick():\n    pass\n"
                                        "def test_fails():\n    assert 1 == 2, 'the reason'\n")
    env = {**os.environ, "KRIG_TEST_SLOW_S": "1", "PYTHONPATH": str(ROOT / "tests")}
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "slowlog", "-n", "2", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), str(tmp_path / "test_x.py")],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    said = [ln for ln in p.stdout.splitlines() if re.match(r"^[.F]*\[\+\d\d:\d\d\] ", ln)]
    assert any("slow call" in ln and ln.endswith("test_x.py::test_slow") for ln in said), p.stdout
    assert any("FAILED call" in ln and "test_x.py::test_fails: AssertionError: the reason" in ln for ln in said), said
    assert not any("test_quick" in ln for ln in said), said
