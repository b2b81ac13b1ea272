"""Two real kernel builds started at the same moment on one host, from tiny-6.1's built tree:
a bisection step (a commit of the bisect demo's history with tiny-6.1's config, in a git tree
krig has never built) and a series from outside krig's tree on tiny-6.1. Both are incremental:
the step's new build tree is seeded from a built one (waiting for its lock if the other build
holds it, never building from nothing), the series builds in a layer over tiny-6.1's tree.

bench/bench_build_pair.py makes both kernels new for this run (so what is asserted is what this
run built, never a cached kernel's history), builds them in two processes at once and removes
them, and the step's build tree, afterwards. The orders the two can take the locks in, one at a
time, are tests/kernels/test_kernels_build.py's and tests/kernels/test_hostile_build.py's (a stand-in tree).
"""
import json
import pathlib
import subprocess
import sys

import pytest

from conftest import ROOT, build_kernels
from kernels.build import status

# 5-7.5 min on 2 busy cores, ~3 of them removing the step's tree (docs/measurements.md)
pytestmark = [pytest.mark.kbuild, pytest.mark.long(8)]


def test_a_bisection_step_and_a_series_started_at_once_are_both_incremental():
    build_kernels("tiny-6.1")
    tiny = json.loads((pathlib.Path(status("tiny-6.1")["dir"]) / "build.json").read_text())["tree"]
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_build_pair.py")], capture_output=True,
                       text=True, cwd=ROOT, timeout=3600)
    rows = {r["build"]: r for r in map(json.loads, p.stdout.splitlines()) if "build" in r}
    assert set(rows) == {"bisection step", "series"}, p.stdout + p.stderr[-3000:]
    step, series = rows["bisection step"], rows["series"]
    assert step["incremental"] and step["seeded_from"] and not step["layer"], step
    assert step["tree"] != tiny and step["said"] and "(incremental)" in step["said"][0], step
    assert series["incremental"] and series["layer"] and series["tree"] == tiny, series
    # the series compiled what it changes (fs/dcache.c) and the version objects, in its layer
    assert 0 < series["compiled"]["layer"] < 100, series
    assert p.returncode == 0, p.stderr[-3000:]
