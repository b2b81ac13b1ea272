"""A kernel built from linux-source-6.1 with a patch series, booted and judged.

`make test` builds kernels/tiny-6.1.toml (tinyconfig + the krig guest +
unlink-dentry-growth) and tiny-6.1-rmdir-keeps-children.toml (the same plus
the 3.0-rc1 rmdir bug) through `make kernel` (python -m kernels.build), then
runs unlink-dentry-growth's smoke preset on both: the patched kernel must
FAIL with every unlinked file left as a negative dentry, the unpatched one
must PASS. A reproducer that measures nothing cannot give both verdicts.
The builds are cached ($KRIG_CACHE/kernels), so a second `make test` only runs.

Covers: kernels/ccache.py.
"""
import json
import math
import os
import pathlib
import shutil
import sqlite3
import subprocess

import pytest

from conftest import KRIG, ROOT, build_kernels, judged_as, krig_run, qemu_pids, run_dir_of, tree_ready
from workflows.bisect import read_attempt
from kernels import sandbox
from kernels.build import status
from workflows.metric_bisect import attempt_vote, zones
from krig.errors import UsageError
from kernels.kconfig import read_dotconfig

pytestmark = [pytest.mark.kbuild, pytest.mark.long(3)]     # minutes on 2 cores (measured 2.2 with its kernels cached)

GOOD, BAD = "tiny-6.1", "tiny-6.1-rmdir-keeps-children"
REPRO = "unlink-dentry-growth"


@pytest.fixture(scope="module")
def built():
    """Both kernels, built as `make kernel KERNEL=...` builds them (a no-op when cached), GOOD
    first; with each, how this run got it ("how": cached, incremental or full build) and whether
    the build tree GOOD was built in was there, built, when BAD's build started ("tree_ready")."""
    how = build_kernels(GOOD)
    ready = tree_ready(GOOD)
    how.update(build_kernels(BAD))
    return {n: {**status(n), "how": how[n], "tree_ready": ready} for n in (GOOD, BAD)}


def test_tiny_kernels_built(built):
    for name, st in built.items():
        assert st["built"], name
        assert st["release"].startswith("6.1.") and st["release"].endswith(f"-krig-{name}")
        out = pathlib.Path(st["dir"])
        assert (out / "bzImage").stat().st_size > 500_000
        cfg = read_dotconfig(out / "config")
        for opt in ("CONFIG_XFS_FS", "CONFIG_BLK_DEV_NVME", "CONFIG_9P_FS", "CONFIG_EVENT_TRACING", "CONFIG_SLUB"):
            assert cfg.get(opt) == "y", f"{name}: {opt}"
        assert cfg.get("CONFIG_SLOB", "n") == "n", "tinyconfig's SLOB has no /proc/slabinfo"
    # how a kernel was built is asserted only of a build this run made (a cached build.json tells
    # the history of the cache, whoever built it and however): make ran boxed (kernels/sandbox.py,
    # bubblewrap from `make setup`), and in the tree GOOD's build left built, BAD's was incremental
    meta = {n: json.loads((pathlib.Path(st["dir"]) / "build.json").read_text()) for n, st in built.items()}
    for name, st in built.items():
        if st["how"] != "cached":
            assert meta[name]["sandbox"] is True, f"{name}: built unboxed"
    if built[BAD]["how"] != "cached" and built[BAD]["tree_ready"]:
        assert built[BAD]["how"] == "incremental", built[BAD]
    assert sandbox.usable(), f"the build sandbox cannot run here: {sandbox.problem() or 'KRIG_BUILD_SANDBOX=off'}"
    assert [p["series"] for p in meta[BAD]["inputs"]["patches"]] == ["rmdir-keeps-children"]
    # both are built in one tree, whenever and by whichever run: the variant reuses its objects
    assert meta[BAD]["tree"] == meta[GOOD]["tree"] and not meta[BAD].get("layer")


@pytest.fixture(scope="module")
def flip(built, tmp_path_factory):
    """The unpatched kernel's run, then the patched one's (the order a lab meets them in)."""
    runs = {}
    for name in (GOOD, BAD):
        tmp = tmp_path_factory.mktemp(name)
        p = krig_run(tmp, REPRO, "--kernel", name, "--preset", "smoke", timeout=1200)
        assert not qemu_pids(str(tmp)), "qemu left behind"
        d = run_dir_of(p)
        verdict = json.loads((d / "verdict.json").read_text())
        # judged by its thresholds, or (for the unpatched kernel, whose only way to miss PASS on a
        # working kernel is a timing threshold) ERROR host contention that its host.tsv bears out
        assert verdict["verdict"] in ("PASS", "FAIL") or (name == GOOD and judged_as(verdict, "PASS", d)), \
            f"{name}: {verdict['verdict']}: {verdict['reason']}"
        metrics = json.loads((d / "metrics.json").read_text())
        runs[name] = (p, d, verdict, {k: v["value"] for k, v in metrics.items()})
    return runs


def _finite(metrics, *names):
    for n in names:
        v = metrics.get(n)
        assert isinstance(v, (int, float)) and math.isfinite(v), f"{n} = {v!r}"


def test_booted_the_built_kernel(flip, built):
    for name, (_, d, _, _) in flip.items():
        man = json.loads((d / "manifest.json").read_text())
        assert man["kernel"]["release"] == built[name]["release"]
        assert man["kernel"]["image"].startswith(built[name]["dir"])


def test_patched_kernel_fails_with_every_file_negative(flip):
    p, _, v, m = flip[BAD]
    assert v["verdict"] == "FAIL", f"{v['verdict']}: {v['reason']}"
    assert p.returncode == 1
    assert "peak_negative_vs_inflight" in v["reason"]
    _finite(m, "files", "peak_nr_negative", "peak_negative_vs_inflight", "unlink_seconds")
    # rmdir no longer prunes: (almost) every unlinked file stays a negative dentry.
    assert 0.9 * m["files"] <= m["peak_nr_negative"] <= 1.2 * m["files"], m
    assert m["peak_negative_vs_inflight"] > 20


def test_unpatched_kernel_passes_with_plausible_metrics(flip):
    p, d, v, m = flip[GOOD]
    assert judged_as(v, "PASS", d), f"{v['verdict']}: {v['reason']}"
    assert p.returncode == (0 if v["verdict"] == "PASS" else 3)
    _finite(m, "files", "peak_nr_negative", "end_nr_negative", "peak_negative_vs_inflight",
            "unlink_rate_mean", "unlink_seconds", "peak_dentry_slab_bytes")
    assert m["files"] == 40_000, "the smoke preset: 8 x 50 x 100 files"
    # One directory in flight per rm -rf: a few hundred negatives, not tens of thousands.
    assert 0 < m["peak_nr_negative"] <= 4 * 8 * 100
    assert 50 <= m["unlink_rate_mean"] <= 1_000_000
    assert 0 < m["unlink_seconds"] < 900
    assert 0 < m["peak_dentry_slab_bytes"] < 4 << 30


def test_metric_bisection_decides_the_real_runs(flip):
    """`make bisect METRIC=peak_negative_vs_inflight` decisions on these two real runs, read as the
    bisection reads a step (read_attempt on the run directory): the zones from the patched (BAD) and
    unpatched (GOOD) runs put each run with its own side, the middle of the gap is undecidable, and
    GOOD against itself is refused as overlapping."""
    metric = "peak_negative_vs_inflight"
    good, bad = read_attempt(flip[GOOD][1], metric), read_attempt(flip[BAD][1], metric)
    z = zones(metric, [good.metric], [bad.metric])
    assert z.good_low
    # A run the host's contention took (ERROR, host-contention) is no vote: the bisection runs the
    # step again. Its metric is still the kernel's, and judged it is on the good side.
    assert attempt_vote(z, good.verdict, good.metric) == ("good" if good.verdict == "PASS" else "skip")
    assert attempt_vote(z, "PASS", good.metric) == "good"
    assert attempt_vote(z, bad.verdict, bad.metric) == "bad"
    assert attempt_vote(z, "PASS", (good.metric + bad.metric) / 2) == "skip"
    with pytest.raises(UsageError, match="overlap"):
        zones(metric, [good.metric], [good.metric])


def test_the_history_names_the_regression_and_tells_a_flaky_rerun(flip, tmp_path):
    """Each real run is in the history of its results root as soon as it ended (nothing asked for
    it). Imported together into one store, in the order they ran, `krig history regressions` names
    the unpatched kernel as the last passing and the patched one as the first failing, with the
    bisect line between them. A rerun that flips: a copy of the patched kernel's run with its
    verdict changed to PASS (a real flip is not to be had on demand) makes that kernel flaky,
    listed as such, and the regression is gone. An unpatched run the host's contention made ERROR
    (test_unpatched_kernel_passes_with_plausible_metrics accepts it) is imported as a copy with
    its thresholds' verdict, PASS."""
    dirs = {}
    for name, (_, d, v, _) in flip.items():
        with sqlite3.connect(d.parents[3] / "history.sqlite") as db:       # the run's own results root
            row = db.execute("SELECT kernel, verdict, workflow FROM runs WHERE run_dir = ?", (str(d.resolve()),)).fetchone()
        assert row == (name, v["verdict"], "run"), row
        dirs[name] = d
        if v["verdict"] != "PASS" and name == GOOD:
            dirs[name] = shutil.copytree(d, tmp_path / "good-judged")
            (dirs[name] / "verdict.json").write_text(json.dumps({**v, "verdict": "PASS"}))
    env = {**os.environ, "KRIG_HISTORY_URL": f"sqlite:///{tmp_path / 'h.sqlite'}"}

    def history(*args):
        p = subprocess.run(KRIG + ["history", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout
    history("import", str(dirs[GOOD]), str(dirs[BAD]))
    out = history("regressions")
    row = next((ln for ln in out.splitlines() if ln.startswith(REPRO) and "peak_negative_vs_inflight" in ln), "")
    assert not out.startswith("regressions: 0") and f"{GOOD} (" in row and f"{BAD} (" in row, out
    assert row.endswith("active"), row
    assert row.index(f"{GOOD} (") < row.index(f"{BAD} ("), row          # last passing, then first failing
    assert f"--repro {REPRO} --preset smoke" in out and "krig bisect run --good 6.1.192-krig-tiny-6.1 " in out, out
    rerun = shutil.copytree(dirs[BAD], tmp_path / "rerun")
    (rerun / "verdict.json").write_text(json.dumps({**flip[BAD][2], "verdict": "PASS"}))
    history("import", str(rerun))
    out = history("regressions")
    assert "regressions: 0" in out, out
    flaky = out.split("\nflaky (")[1]
    assert any(ln.startswith(REPRO) and f"{BAD} (" in ln and ln.split()[-2:] == ["1", "1"]
               for ln in flaky.splitlines()), out
