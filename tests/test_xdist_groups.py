"""make test's worker groups hold (tests/xdist_groups.py): under `-n 2 --dist loadgroup` every test of a
file runs on one worker, and the files that take the smoke runs share one. A pytest or pytest-xdist
that stops honouring the groups fails here, not as smoke guests booted twice."""
import collections
import os
import subprocess
import sys

from conftest import ROOT

MODULE = """import os
import pytest

@pytest.fixture(scope="session")
def smoke_run():
    return 1

@pytest.mark.parametrize("i", range(4))
def test_x(i{extra}):
    with open(os.environ["GROUPS_LOG"], "a") as f:
        f.write("{name} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_a_files_tests_stay_on_one_worker(tmp_path):
    for name, extra in (("alpha", ""), ("beta", ""), ("gamma", ""), ("smoke_a", ", smoke_run"),
                        ("smoke_b", ", smoke_run")):
        (tmp_path / f"test_{name}.py").write_text(MODULE.format(name=name, extra=extra))
    (tmp_path / "conftest.py").write_text("from xdist_groups import pytest_collection_modifyitems  # noqa\n")
    log = tmp_path / "groups.log"
    env = {**os.environ, "GROUPS_LOG": str(log), "PYTHONPATH": str(ROOT / "tests")}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:labgrid",
                        "-p", "no:cacheprovider", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    workers = collections.defaultdict(set)
    for line in log.read_text().splitlines():
        name, worker = line.split()
        workers[name].add(worker)
    assert sum(1 for _ in log.read_text().splitlines()) == 20
    assert all(len(w) == 1 for w in workers.values()), dict(workers)
    assert workers["smoke_a"] == workers["smoke_b"], dict(workers)
    assert len(set().union(*workers.values())) == 2, "both workers had work"
