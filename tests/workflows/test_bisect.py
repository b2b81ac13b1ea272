"""The bisect driver's decisions, without building or booting anything.

Covers: workflows/metric_bisect.py."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from workflows import bisect as kb
from krig.errors import KrigError
from workflows.bisect import Attempt
from conftest import ROOT
from kernels.definition import GENERATED_DIRS
from kernels.spec import resolve_spec


@pytest.mark.parametrize("verdict, booted, vote", [
    ("PASS", True, "good"), ("FAIL", True, "bad"),
    ("HUNG", True, "bad"), ("CRASHED", True, "bad"),       # broke under the reproducer
    ("HUNG", False, "skip"), ("CRASHED", False, "skip"),   # never booted: not this kernel's answer
    ("ERROR", True, "skip"), ("SKIP", True, "skip"), ("INTERRUPTED", True, "skip"),
])
def test_classify(verdict, booted, vote):
    assert kb.classify(verdict, booted) == vote


@pytest.mark.parametrize("votes, repeat, answer", [
    (["good"], 1, "good"), (["bad"], 1, "bad"), (["skip"], 1, "skip"),
    (["good"], 3, None), (["good", "good"], 3, "good"), (["bad", "bad"], 3, "bad"),
    (["good", "bad"], 3, None), (["good", "bad", "good"], 3, "good"),
    (["good", "bad", "skip"], 3, "skip"),        # no strict majority
    (["skip", "skip"], 3, "skip"),               # a majority can no longer be reached
    (["skip", "good", "good"], 3, "good"),
    (["good", "bad"], 2, "skip"),                # a tie is no answer
    (["good", "good", "bad"], 5, None), (["good", "good", "bad", "good"], 5, "good"),
])
def test_decide_majority(votes, repeat, answer):
    assert kb.decide(votes, repeat) == answer


def runs(*verdicts, booted=True):
    it = iter(verdicts)
    calls = []

    def run_once():
        v = next(it)
        calls.append(v)
        return Attempt(v, "", f"/r/{len(calls)}", booted, metric=float(len(calls)))
    return run_once, calls


def test_step_stops_at_majority():
    run_once, calls = runs("PASS", "PASS", "FAIL")
    answer, attempts = kb.step(run_once, 3)
    assert answer == "good" and calls == ["PASS", "PASS"]


def test_step_runs_all_when_split():
    run_once, calls = runs("FAIL", "PASS", "FAIL")
    assert kb.step(run_once, 3)[0] == "bad" and len(calls) == 3


def test_step_errors_are_skips():
    run_once, calls = runs("ERROR", "ERROR", "PASS")
    assert kb.step(run_once, 3)[0] == "skip" and len(calls) == 2


def test_log_line_has_commit_verdicts_metric():
    line = kb.log_line("a" * 40, "vfs: a subject", "bad", [Attempt("FAIL", "", metric=40002.0),
                                                          Attempt("FAIL", "", metric=39990.0)], "peak_nr_negative")
    assert " aaaaaaaaaaaa bad  [FAIL,FAIL] peak_nr_negative=40002/39990 vfs: a subject" in line


def test_first_bad_from_output():
    out = "Bisecting: 0 revisions left\nrunning x\n" + "f" * 40 + " is the first bad commit\ncommit ..."
    assert kb.first_bad_from_output(out) == "f" * 40
    assert kb.first_bad_from_output("There are only 'skip'ped commits left to test.") is None


@pytest.fixture
def repo(tmp_path):
    """c1..c6; the file `bug` appears in c4 (the first bad commit); c5 does not build."""
    r = tmp_path / "repo"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    g = lambda *a: subprocess.run(["git", "-C", str(r), *a], check=True, capture_output=True,  # noqa: E731
                                  text=True, env=env).stdout.strip()
    r.mkdir()
    g("init", "-q")
    shas = []
    for i in range(1, 7):
        (r / "n").write_text(f"{i}\n")
        if i == 5:
            (r / "nobuild").write_text("")
        elif (r / "nobuild").exists():
            (r / "nobuild").unlink()
        if i == 4:
            (r / "bug").write_text("")
        g("add", "-A")
        g("commit", "-qm", f"commit {i}")
        shas.append(g("rev-parse", "HEAD"))
    return r, shas


def state_file(tmp_path, repo_path, repeat=1):
    st = {"tree": str(repo_path), "ref": "HEAD", "kernel": "k", "repro": "r", "preset": None, "repeat": repeat,
          "rig": "qemu-default", "sets": [], "log": str(tmp_path / "bisect.log"), "metric": "m"}
    p = tmp_path / "state.json"
    p.write_text(json.dumps(st))
    return p


def test_oracle_build_failure_is_skip(tmp_path, repo):
    r, _ = repo
    def broken():
        raise KrigError("kernel k: build failed: fs/namei.c:1: error: boom")
    code = kb.oracle(state_file(tmp_path, r), build=broken, run_once=lambda: pytest.fail("must not run"))
    assert code == kb.SKIP
    assert "skip [-]" in (tmp_path / "bisect.log").read_text()
    assert "build failed" in (tmp_path / "bisect.log").read_text()


def test_oracle_maps_majority_to_exit_code(tmp_path, repo):
    r, _ = repo
    run_once, _ = runs("FAIL", "PASS", "FAIL")
    assert kb.oracle(state_file(tmp_path, r, repeat=3), build=lambda: None, run_once=run_once) == kb.BAD
    line = (tmp_path / "bisect.log").read_text().splitlines()[-1]
    assert "bad  [FAIL,PASS,FAIL] m=1/2/3 commit 6" in line


ORACLE_HEAD = textwrap.dedent("""
    import pathlib, subprocess, sys
    sys.path.insert(0, {root!r})
    from workflows import bisect as kb
    state = pathlib.Path(sys.argv[1])
    tree = {tree!r}
    def has(path):
        return subprocess.run(["git", "-C", tree, "cat-file", "-e", "BISECT_HEAD:" + path],
                              stderr=subprocess.DEVNULL).returncode == 0
""")
ORACLE = ORACLE_HEAD + textwrap.dedent("""
    def build():
        if has("nobuild"):
            raise kb.KrigError("build failed: nobuild")
    verdicts = iter(["FAIL", "PASS", "FAIL"] if has("bug") else ["PASS", "ERROR", "PASS"])
    run_once = lambda: kb.Attempt(next(verdicts), "", None, True, 1.0)
    sys.exit(kb.oracle(state, build=build, run_once=run_once))
""")


def bisect_run(tmp_path, r, shas, oracle_src, repeat, **state):
    """git bisect run c1..c6 with oracle_src as the step; asserts c4 is named; returns (bisect.log, git)."""
    st = json.loads(state_file(tmp_path, r, repeat=repeat).read_text())
    st.update(ref="BISECT_HEAD", **state)
    (tmp_path / "state.json").write_text(json.dumps(st))
    script = tmp_path / "oracle.py"
    script.write_text(oracle_src.format(root=str(pathlib.Path(kb.__file__).parent.parent), tree=str(r)))
    g = lambda *a: subprocess.run(["git", "-C", str(r), *a], capture_output=True, text=True)  # noqa: E731
    assert g("bisect", "start", "--no-checkout", shas[5], shas[0]).returncode == 0
    out = g("bisect", "run", sys.executable, str(script), str(tmp_path / "state.json"))
    g("bisect", "reset")
    assert kb.first_bad_from_output(out.stdout) == shas[3], out.stdout + out.stderr
    return (tmp_path / "bisect.log").read_text(), g


def test_git_bisect_run_with_the_oracle_finds_the_first_bad_commit(tmp_path, repo):
    """git bisect run + oracle exit codes: a skip (c5 does not build) and 2-of-3 majorities."""
    r, shas = repo
    log, g = bisect_run(tmp_path, r, shas, ORACLE, repeat=3)
    assert "bad  [FAIL,PASS,FAIL]" in log
    assert g("status", "--porcelain").stdout == "", "--no-checkout leaves the work tree alone"
    assert "skip [-]" in log and "build failed: nobuild" in log


# -- bisection on a metric (workflows/metric_bisect.py) ------------------------------

from workflows import metric_bisect as mb  # noqa: E402
from krig.errors import UsageError  # noqa: E402
from krig.record_bisect import ZonesRecord, read_bisection  # noqa: E402


def test_zones_cut_the_gap_in_thirds():
    z = mb.zones("m", [1.0, 1.2, 0.9], [50.0, 48.0, 51.0])
    assert z.good_low and z.good_edge == pytest.approx(1.2 + 46.8 / 3) and z.bad_edge == pytest.approx(48 - 46.8 / 3)
    assert [z.vote(v) for v in (0.5, 1.1, 16.0, 24.0, 33.0, 49.0, 80.0, None)] == \
        ["good", "good", "good", "skip", "bad", "bad", "bad", "skip"]
    hi = mb.zones("rate", [1000, 1100], [300, 350])          # GOOD is the higher side
    assert not hi.good_low and hi.vote(1050) == "good" and hi.vote(320) == "bad" and hi.vote(675) == "skip"


def test_overlapping_endpoints_are_refused_in_one_line():
    with pytest.raises(UsageError) as e:
        mb.zones("unlink_rate_mean", [700, 800, 900], [850, 950, 1000])
    msg = str(e.value)
    assert "\n" not in msg and "overlap" in msg and "700 to 900" in msg and "850 to 1000" in msg
    with pytest.raises(UsageError, match="BAD gave no judged value"):
        mb.zones("m", [1.0], [None])


def test_unjudged_runs_vote_skip():
    z = mb.zones("m", [1.0], [50.0])
    assert mb.attempt_vote(z, "FAIL", 50.0) == "bad" and mb.attempt_vote(z, "PASS", 1.0) == "good"
    assert mb.attempt_vote(z, "ERROR", 50.0) == "skip" and mb.attempt_vote(z, "CRASHED", None) == "skip"
    assert mb.from_state(ZonesRecord.from_json(json.loads(json.dumps(mb.to_state(z).to_json())))) == z


def metric_runs(*values):
    it = iter(values)

    def run_once():
        v = next(it)
        return Attempt("FAIL" if v > 10 else "PASS", "", None, True, metric=v)
    return run_once


def test_oracle_in_metric_mode_logs_values_with_votes(tmp_path, repo):
    r, _ = repo
    st = json.loads(state_file(tmp_path, r, repeat=3).read_text())
    st["zones"] = mb.to_state(mb.zones("m", [1.0, 1.1, 0.9], [50.0, 49.0, 51.0])).to_json()
    (tmp_path / "state.json").write_text(json.dumps(st))
    code = kb.oracle(tmp_path / "state.json", build=lambda: None, run_once=metric_runs(49.5, 25.0, 48.0))
    assert code == kb.BAD
    line = (tmp_path / "bisect.log").read_text().splitlines()[-1]
    assert "m=49.5(bad)/25(skip)/48(bad)" in line
    code = kb.oracle(tmp_path / "state.json", build=lambda: None, run_once=metric_runs(25.0, 26.0))
    assert code == kb.SKIP, "two undecidable values: no majority can be reached"


def test_measure_endpoints_refuses_overlap_and_logs_it(tmp_path, repo):
    r, shas = repo
    st = read_bisection(state_file(tmp_path, r, repeat=2))
    ends = {"GOOD": shas[0], "BAD": shas[5]}
    vals = {"k-good": iter([1.0, 5.0]), "k-bad": iter([4.0, 9.0])}
    build = lambda label, commit: f"k-{label.lower()}"  # noqa: E731
    run_for = lambda k: Attempt("PASS", "", f"/r/{k}", True, next(vals[k]))  # noqa: E731
    with pytest.raises(UsageError, match="overlap"):
        kb.measure_endpoints(st, ends, build, run_for)
    log = (tmp_path / "bisect.log").read_text()
    assert "good [PASS,PASS] m=1/5" in log and "bad  [PASS,PASS] m=4/9" in log and "refused: --metric m" in log
    vals = {"k-good": iter([1.0, 1.5]), "k-bad": iter([40.0, 42.0])}
    z = kb.measure_endpoints(st, ends, build, run_for)
    assert z.good == [1.0, 1.5] and z.bad == [40.0, 42.0] and "# zones: m: GOOD 1/1.5" in \
        (tmp_path / "bisect.log").read_text()



def test_endpoint_runs_on_a_contended_host_are_named_in_the_refusal(tmp_path, repo):
    """GOOD's runs had their timing metric left out (a contended host): the refusal says so."""
    r, shas = repo
    st = read_bisection(state_file(tmp_path, r, repeat=2))
    ends = {"GOOD": shas[0], "BAD": shas[5]}
    build = lambda label, commit: f"k-{label.lower()}"  # noqa: E731
    run_for = lambda k: (Attempt("PASS", "", "/r/g", True, None, contended=True) if k == "k-good"  # noqa: E731
                         else Attempt("FAIL", "", "/r/b", True, 40.0))
    with pytest.raises(UsageError, match=r"GOOD gave no judged value .*\(GOOD 2 of 2 runs on a contended host: m is a "
                                         r"timing metric"):
        kb.measure_endpoints(st, ends, build, run_for)
    log = (tmp_path / "bisect.log").read_text()
    assert "good [PASS,PASS] m=host-contended/host-contended" in log and "GOOD 2 of 2 runs" in log, log


METRIC_ORACLE = ORACLE_HEAD + textwrap.dedent("""
    n = int(subprocess.run(["git", "-C", tree, "cat-file", "-p", "BISECT_HEAD:n"], capture_output=True,
                           text=True).stdout)
    # commit 2 sits in the middle (undecidable), the bug (commit 4 on) gives ~50, the rest ~1
    values = iter([50.0, 47.0] if has("bug") else [25.0, 26.0] if n == 2 else [1.0, 1.2])
    run_once = lambda: kb.Attempt("PASS", "", None, True, next(values))
    sys.exit(kb.oracle(state, build=lambda: None, run_once=run_once))
""")


def test_git_bisect_run_on_a_metric_finds_the_first_bad_commit(tmp_path, repo):
    r, shas = repo
    zones = mb.to_state(mb.zones("m", [1.0, 1.1], [49.0, 51.0])).to_json()
    log, _ = bisect_run(tmp_path, r, shas, METRIC_ORACLE, repeat=2, zones=zones)
    assert "m=50(bad)/47(bad)" in log


def test_unknown_metric_is_one_line(tmp_path, repo):
    r, shas = repo
    with pytest.raises(UsageError, match="--metric nope: not a metric of unlink-dentry-growth"):
        kb.bisect(str(r), shas[0], shas[5], "unlink-dentry-growth", "smoke", 1, like="tiny-6.1",
                  log_dir=tmp_path / "b", metric="nope")


def test_bisect_on_a_metric_refuses_overlapping_endpoints_and_cleans_up(tmp_path, repo, monkeypatch):
    """bisect() wired end to end up to the endpoints (builds and runs faked): both endpoints are
    built from their own commits (their tomls, in the bisection's directory, found by name),
    measured REPEAT times, refused on overlap before any git bisect; nothing is written into
    the checkout (`git status` as before)."""
    r, shas = repo
    built, values = [], {"good": iter([1.0, 3.0]), "bad": iter([2.0, 4.0])}
    monkeypatch.setattr(kb, "build_kernel", lambda name, log=None: built.append((name, resolve_spec(name))))
    monkeypatch.setattr(kb, "run_krig", lambda st: Attempt("PASS", "", "/r", True,
                                                           next(values[st.kernel.rsplit("-", 1)[1]])))
    before = checkout_status()
    with pytest.raises(UsageError, match="overlap"):
        kb.bisect(str(r), shas[0], shas[5], "unlink-dentry-growth", "smoke", 2, like="tiny-6.1",
                  log_dir=tmp_path / "b", metric="peak_negative_vs_inflight")
    assert [n.rsplit("-", 1)[1] for n, _ in built] == ["good", "bad"]
    tiny = resolve_spec("tiny-6.1").base_config
    assert [(s.source, s.ref, s.base_config) for _, s in built] == [("git", shas[0], tiny), ("git", shas[5], tiny)]
    log = (tmp_path / "b" / "bisect.log").read_text()
    assert "bisecting on the metric: peak_negative_vs_inflight" in log
    assert "peak_negative_vs_inflight=1(skip)" not in log and "=1/3" in log and "=2/4" in log
    assert "refused: --metric peak_negative_vs_inflight: GOOD (1 to 3) and BAD (2 to 4) overlap" in log
    assert checkout_status() == before
    steps = built[0][0].rsplit("-", 1)[0]          # the steps' kernel, beside the endpoints'
    assert {p.stem for p in (tmp_path / "b" / "kernels").iterdir()} == {steps} | {n for n, _ in built}
    assert not GENERATED_DIRS and not kb._bisect_in_progress(r)


def checkout_status() -> str:
    """What git sees changed in krig's own checkout (a run must add nothing there)."""
    return subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout


def test_a_rig_that_boots_only_the_installed_kernel_is_refused_before_any_build(tmp_path, monkeypatch):
    """Every bisection step builds its commit: a lab server with boot = "installed" never boots
    one, so the bisection stops before a step or an endpoint is built (one line)."""
    from krig.errors import UsageError
    from test_bad_input import installed_rig
    built = []
    monkeypatch.setattr(kb, "build_kernel", lambda *a, **k: built.append(a))
    with pytest.raises(UsageError, match=r'^--tree: rig installed cannot boot a kernel krig builds: .*"installed"'):
        kb.bisect(str(tmp_path), "v1", "v2", "selftest-pass", rig=str(installed_rig(tmp_path / "lab")),
                  log_dir=tmp_path / "b")
    assert built == [] and not (tmp_path / "b").exists()
