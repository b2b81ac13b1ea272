"""Every feature tests/README.md lists under "Features end to end" keeps its end-to-end test in
`make test`: each test its `make test` column names is collected in that tier (`--tier test`: so
it exists and is not marked testlab) and is not skipped by a mark; each test its `make test-lab`
column names is collected in that tier. The table is the one place a test's tier is listed;
pytest's own collection of the named files is the judge (a subprocess: the files as `make test`
collects them)."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

README = ROOT / "tests" / "README.md"
SECTION = "## Features end to end"
NODE = re.compile(r"`(tests/[\w/]*test_\w+\.py::[^`]+)`")

# a pytest plugin (-p) that writes each collected test, whether it is marked testlab, and whether
# a skip or skipif mark skips it, as pytest would decide it
PLUGIN = """import json, os
import pytest
from _pytest.skipping import evaluate_skip_marks

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    with open(os.environ["KRIG_TIERS_OUT"], "a") as f:
        for item in items:
            lab = item.get_closest_marker("testlab") is not None
            f.write(json.dumps([item.nodeid, lab, evaluate_skip_marks(item) is not None]) + "\\n")
"""


def feature_rows(text: str) -> list[tuple[str, list[str], list[str]]]:
    """(feature, make test's node ids, make test-lab's node ids) of each row of the section's table."""
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not line.startswith("|") or set(cells[1]) <= set("-: ") or cells[0] == "feature":
            continue
        rows.append((cells[0], NODE.findall(cells[1]), NODE.findall(cells[2])))
    return rows


def collected(files: set[str], where) -> tuple[dict[str, bool], dict[str, bool]]:
    """What pytest collects of files in `make test`'s tier and in `make test-lab`'s (as tests/tiers.py
    tells them apart: the testlab mark), each {node id: skipped by a mark}."""
    out = where / "collected.jsonl"
    (where / "krig_tiers_plugin.py").write_text(PLUGIN)
    env = {**os.environ, "KRIG_TIERS_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "krig_tiers_plugin",
                        "--tier", "all", *sorted(files)], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    tiers = ({}, {})
    for line in out.read_text().splitlines():
        node, lab, skipped = json.loads(line)
        tiers[lab][node] = skipped
    return tiers


def _matches(node: str, ids: dict) -> list[str]:
    """The collected ids a table's node id names: itself, or each of its parametrizations."""
    return [i for i in ids if i == node or (i.startswith(node + "[") and "[" not in node)]


def problems(rows, in_test: dict, in_lab: dict) -> list[str]:
    """What the table says that the collection does not hold, a line each."""
    out = []
    for feature, tests, lab in rows:
        if not tests:
            out.append(f"{feature}: no end-to-end test in make test")
        for node in tests:
            found = _matches(node, in_test)
            if not found:
                why = "marked testlab (make test-lab only)" if _matches(node, in_lab) else "no such test"
                out.append(f"{feature}: {node} is not in make test: {why}")
            elif all(in_test[i] for i in found):
                out.append(f"{feature}: {node} is skipped")
        out += [f"{feature}: {node} is not in make test-lab" for node in lab if not _matches(node, in_lab)]
    return out


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    rows = feature_rows(README.read_text())
    files = {n.split("::")[0] for _, tests, lab in rows for n in tests + lab}
    files.add("tests/workflows/test_validate_e2e.py")        # a testlab file, for the injected rows below
    where = tmp_path_factory.mktemp("tiers")
    return (rows, *collected(files, where))


def test_every_listed_feature_has_its_end_to_end_test_in_make_test(table):
    rows, in_test, in_lab = table
    assert len(rows) >= 15, rows
    found = problems(rows, in_test, in_lab)
    assert not found, "tests/README.md's features without their test in make test:\n" + "\n".join(found)


def test_a_removed_or_moved_test_is_reported(table):
    """The table with a test that does not exist, one moved to testlab, a feature left with none,
    and a test-lab entry that make test runs: each named."""
    rows, in_test, in_lab = table
    lab_test = "tests/workflows/test_validate_e2e.py::test_validate_and_reproduce_on_a_lab_server"
    assert _matches(lab_test, in_lab) and not _matches(lab_test, in_test)
    kept = rows[0][1][0]
    injected = [("gone", ["tests/kernels/test_kbuild.py::test_no_such_test"], []),
                       ("moved", [lab_test], []),
                       ("none", [], []),
                       ("wrong tier", [kept], [kept])]
    assert problems(injected, in_test, in_lab) == [
        "gone: tests/kernels/test_kbuild.py::test_no_such_test is not in make test: no such test",
        f"moved: {lab_test} is not in make test: marked testlab (make test-lab only)",
        "none: no end-to-end test in make test",
        f"wrong tier: {kept} is not in make test-lab"]
    skipped = {**in_test, **{i: True for i in _matches(kept, in_test)}}
    assert problems(rows[:1], skipped, in_lab) == [f"{rows[0][0]}: {kept} is skipped"]
