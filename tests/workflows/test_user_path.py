"""The run directory a user types is theirs: `results/latest` (a link), a link of their own and a
trailing slash reach the run, for every command that reads one and for `make check`. Below it,
nothing is followed: a link planted inside the run directory is still refused.

The run is a real one, made by the fake rig (rigs/fake.py; no guest boots).
"""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from conftest import KRIG, ROOT
from test_fake_rig import fake_run

TRACE = ROOT / "tests" / "data" / "host618_sched_xfs_v7.dat"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A judged run (with a trace.dat copied in) reached three ways: results/latest, a link the
    user made, and the real path with a trailing slash."""
    tmp = tmp_path_factory.mktemp("userpath")
    d, v = fake_run(tmp)
    assert v.verdict == "PASS", v.reason
    shutil.copyfile(TRACE, d / "trace.dat")
    latest = tmp / "results" / "latest"
    assert latest.is_symlink() and latest.resolve() == d.resolve()
    mine = tmp / "my-run"
    mine.symlink_to(d)
    return {"tmp": tmp, "dir": d, "ways": {"latest": str(latest), "own-link": str(mine),
                                             "latest-slash": str(latest) + "/", "slash": str(d) + "/"}}


def krig(*args, cwd=ROOT):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=cwd, timeout=600)


def test_every_reader_follows_the_path_the_user_typed(run, tmp_path):
    """results/latest/ (a link and a trailing slash): every command that reads a run directory."""
    path = run["ways"]["latest-slash"]
    for argv in (["check", path], ["report", path], ["bundle", path, "-o", str(tmp_path / "b.tar.gz")],
                 ["export", "kcidb", path, "--origin", "krigtest", "-o", str(tmp_path / "k.json")],
                 ["trace", "stats", os.path.join(path, "trace.dat"), "--event", "sched:sched_switch"]):
        p = krig(*argv)
        assert p.returncode == 0, (argv, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr
    assert json.loads((tmp_path / "k.json").read_text())["tests"]
    # compare: the same run is refused on both sides, so a copy stands for NEW
    new = tmp_path / "new"
    shutil.copytree(run["dir"], new)
    p = krig("compare", path, "--", str(new) + "/", "--out", str(tmp_path / "cmp"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "cmp" / "compare.html").is_file()


@pytest.mark.parametrize("way", ["latest", "own-link", "slash"])
def test_each_way_of_typing_it(run, way, tmp_path):
    p = krig("export", "kcidb", run["ways"][way], "--origin", "krigtest", "-o", str(tmp_path / "k.json"))
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "k.json").read_text())["tests"]


def test_make_check_on_results_latest(run):
    p = subprocess.run(["make", "-s", "check", f"RUN={run['ways']['latest']}"], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].startswith("PASS:"), p.stdout


@pytest.mark.parametrize("member", ["manifest.json", "trace.dat"])
def test_a_link_inside_the_run_directory_is_still_refused(run, tmp_path, member):
    """Reached through results/latest-style links, the run's own files are still never followed."""
    copy = tmp_path / "copy"
    shutil.copytree(run["dir"], copy)
    secret = tmp_path / "host-file"
    secret.write_bytes((copy / member).read_bytes())        # a readable, well-formed file: only the link is wrong
    (copy / member).unlink()
    (copy / member).symlink_to(secret)
    link = tmp_path / "latest"
    link.symlink_to(copy)
    if member == "manifest.json":
        p = krig("check", str(link) + "/")
    else:
        p = krig("trace", "stats", str(link / member), "--event", "sched:sched_switch")
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "symlink" in lines[0] and member in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_a_missing_path_is_named_as_typed(tmp_path):
    gone = tmp_path / "latest"
    gone.symlink_to(tmp_path / "nowhere")
    p = krig("check", str(gone))
    assert p.returncode == 2 and str(gone) in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_the_reproduce_line_names_the_rig_file_as_given(run):
    """A run on a rig given by its file's path says that path in summary.txt's reproduce line,
    not the file's stem, a rig name nobody else has (the fake rig here is such a file)."""
    rig = json.loads((run["dir"] / "manifest.json").read_text())["rig"]
    assert rig["arg"].endswith(".toml") and rig["name"] == pathlib.Path(rig["arg"]).stem
    text = " ".join((run["dir"] / "summary.txt").read_text().replace("\\\n", " ").split())
    assert f"krig run selftest-pass --rig {rig['arg']} --kernel distro" in text, text
