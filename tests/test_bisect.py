"""The bisect driver's decisions, without building or booting anything."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from kernels import bisect as kb
from krig.errors import KrigError
from kernels.bisect import Attempt


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


ORACLE = textwrap.dedent("""
    import pathlib, subprocess, sys
    sys.path.insert(0, {root!r})
    from kernels import bisect as kb
    state = pathlib.Path(sys.argv[1])
    tree = {tree!r}
    def has(path):
        return subprocess.run(["git", "-C", tree, "cat-file", "-e", "BISECT_HEAD:" + path],
                              stderr=subprocess.DEVNULL).returncode == 0
    def build():
        if has("nobuild"):
            raise kb.KrigError("build failed: nobuild")
    verdicts = iter(["FAIL", "PASS", "FAIL"] if has("bug") else ["PASS", "ERROR", "PASS"])
    run_once = lambda: kb.Attempt(next(verdicts), "", None, True, 1.0)
    sys.exit(kb.oracle(state, build=build, run_once=run_once))
""")


def test_git_bisect_run_with_the_oracle_finds_the_first_bad_commit(tmp_path, repo):
    """git bisect run + oracle exit codes: a skip (c5 does not build) and 2-of-3 majorities."""
    r, shas = repo
    st = json.loads(state_file(tmp_path, r, repeat=3).read_text())
    st["ref"] = "BISECT_HEAD"
    (tmp_path / "state.json").write_text(json.dumps(st))
    script = tmp_path / "oracle.py"
    script.write_text(ORACLE.format(root=str(pathlib.Path(kb.__file__).parent.parent), tree=str(r)))
    g = lambda *a: subprocess.run(["git", "-C", str(r), *a], capture_output=True, text=True)  # noqa: E731
    assert g("bisect", "start", "--no-checkout", shas[5], shas[0]).returncode == 0
    out = g("bisect", "run", sys.executable, str(script), str(tmp_path / "state.json"))
    g("bisect", "reset")
    assert kb.first_bad_from_output(out.stdout) == shas[3], out.stdout + out.stderr
    log = (tmp_path / "bisect.log").read_text()
    assert "bad  [FAIL,PASS,FAIL]" in log
    assert g("status", "--porcelain").stdout == "", "--no-checkout leaves the work tree alone"
    assert "skip [-]" in log and "build failed: nobuild" in log
