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


def test_longest_groups_are_collected_first(tmp_path):
    """`pytest.mark.long(MINUTES)` puts a file's group ahead of shorter ones (xdist then hands groups
    out in collection order under --no-loadscope-reorder); unmarked files keep their order, and a
    group's tests stay together."""
    long_module = "import pytest\npytestmark = pytest.mark.long({minutes})\n" + MODULE
    for name, text in (("alpha", MODULE), ("beta", long_module.replace("{minutes}", "3")),
                       ("gamma", MODULE), ("delta", long_module.replace("{minutes}", "9")),
                       ("smoke_a", MODULE.replace("{extra}", ", smoke_run")),
                       ("smoke_b", long_module.replace("{minutes}", "5").replace("{extra}", ", smoke_run"))):
        (tmp_path / f"test_{name}.py").write_text(text.format(name=name, extra=""))
    (tmp_path / "conftest.py").write_text("from xdist_groups import pytest_collection_modifyitems  # noqa\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    long: minutes\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:labgrid",
                        "-p", "no:cacheprovider", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "tests")}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    files = [ln.split("::")[0].removeprefix("test_").removesuffix(".py") for ln in p.stdout.splitlines() if "::" in ln]
    assert len(files) == 24, p.stdout
    order = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    assert order == ["delta", "smoke_a", "smoke_b", "beta", "alpha", "gamma"], order
