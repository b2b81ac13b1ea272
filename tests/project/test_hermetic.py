"""The suite is hermetic (tests/hermetic.py, entered by tests/conftest.py): the user's own rig
files, simulated servers and results are neither read nor written by what the tests run, in
this process, in xdist workers and in subprocesses; the shared kernel cache is left where it is.

Covers: krig/paths.py."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import hermetic
from conftest import HERMETIC_BASE, KRIG, ROOT
from lab_fixture import Coordinator

# a user's simulated lab server (the rig `krig lab sim up` writes) and a rig of theirs named as
# the suite's fake rig, which would win over KRIG_RIG_PATH's if krig found it
STRAY_SIM = """driver = "ipmi"
scratch_dev = "/dev/nvme0n1"
[bmc]
host = "127.0.0.1"
port = 6230
user = "admin"
password_env = "KRIG_TEST_STRAY_UNSET"
[ssh]
host = "127.0.0.1"
key = "/nonexistent/stray_key"
known_hosts = "/nonexistent/known_hosts"
[lab]
model = "stray"
"""
FAKE = """driver = "fake"
work_dir = "{work}"
{extra}
[metrics]
answer = 42
files_seen = 100
"""
LAB = """driver = "ipmi"
scratch_dev = "/dev/nvme0n1"
[bmc]
host = "bmc.example.net"
user = "bmcadmin"
password_env = "KRIG_TEST_LAB_UNSET_PW"
[ssh]
host = "lab.example.net"
key = "/nonexistent/key"
known_hosts = "/nonexistent/known_hosts"
[lab]
model = "R760"
"""


def test_the_session_points_krig_away_from_the_user():
    """This process (maybe an xdist worker) and a krig subprocess see the session's directories;
    the cache is not among them."""
    assert os.environ[hermetic.SESSION_VAR] == str(HERMETIC_BASE) and HERMETIC_BASE.is_dir()
    for var, sub in hermetic.MOVED.items():
        assert os.environ[var] == str(HERMETIC_BASE / sub)
    assert not any(v in os.environ for v in hermetic.DROPPED)
    code = ("import json, krig, rigs, rigs.labsim.sim, krig.paths; print(json.dumps([str(krig.RESULTS_DIR), "
            "str(rigs.user_rig_dir()), str(rigs.labsim.sim.state_dir('x')), str(krig.paths.cache_dir())]))")
    got = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    cwd=ROOT, check=True, timeout=60).stdout)
    results, rigs_dir, state, cache = map(pathlib.Path, got)
    assert results == HERMETIC_BASE / "results"
    assert rigs_dir == HERMETIC_BASE / "config" / "krig" / "rigs"
    assert state.is_relative_to(HERMETIC_BASE / "state")
    assert not cache.is_relative_to(HERMETIC_BASE)   # CI's pre-built kernels stay found
    import krig
    assert krig.RESULTS_DIR == HERMETIC_BASE / "results"


def fake_user(tmp_path) -> tuple[pathlib.Path, dict]:
    """A user's home with a stray rig file, a rig named as the suite's fake rig (one that fails
    to boot) and a simulated server's state; and the environment of that user's shell."""
    home = tmp_path / "home"
    rigs = home / ".config" / "krig" / "rigs"
    rigs.mkdir(parents=True)
    (rigs / "stray-sim.toml").write_text(STRAY_SIM)
    (rigs / "fake-asked.toml").write_text(FAKE.format(work=tmp_path, extra='fault = "boot-fails"'))
    state = home / ".local" / "state" / "krig" / "labsim" / "stray-sim"
    state.mkdir(parents=True)
    (state / "state.json").write_text(json.dumps({"name": "stray-sim", "pid": 1, "memory_mb": 2048,
                                                  "rig": str(rigs / "stray-sim.toml")}))
    env = {k: v for k, v in os.environ.items()
           if k not in hermetic.MOVED and k != hermetic.SESSION_VAR}
    from krig.paths import cache_dir  # the kernels it built stay found, as the suite's are
    return home, {**env, "HOME": str(home), "KRIG_RESULTS": str(home / "krig" / "results"),
                  "KRIG_CACHE": str(cache_dir())}


def _krig(env, *args):
    return subprocess.run(KRIG + list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _our_rigs(tmp_path) -> pathlib.Path:
    """A test's own rig directory (KRIG_RIG_PATH): a lab server and the fake rig the user's shadows."""
    ours = tmp_path / "rigs"
    ours.mkdir()
    (ours / "lab1.toml").write_text(LAB)
    (ours / "fake-asked.toml").write_text(FAKE.format(work=tmp_path / "work", extra=""))
    (tmp_path / "work").mkdir()
    return ours


def test_a_users_rigs_and_servers_are_neither_used_nor_touched(tmp_path):
    """`krig list`, `krig lab sim down` and `krig run` with a fake rig, run as the suite runs them
    (hermetic_env of the user's environment, plus a test's own KRIG_RIG_PATH): nothing of the
    user's is listed or run, and their home is as it was: what every process of the suite gets,
    so a test that forgot the redirection, or a krig that ignored it, fails here. The same
    commands with the user's own environment do see their things (the plant works)."""
    home, user_env = fake_user(tmp_path)
    assert hermetic.user_dirs(user_env) == [home / ".config" / "krig", home / ".local" / "state" / "krig",
                                            home / "krig" / "results"]
    before = hermetic.snapshot([home])
    test_env = {**hermetic.hermetic_env(user_env, HERMETIC_BASE), "KRIG_RIG_PATH": str(_our_rigs(tmp_path))}
    mine = _krig(user_env, "list")
    assert "stray-sim" in mine.stdout, mine.stdout + mine.stderr
    listed = _krig(test_env, "list")
    assert listed.returncode == 0 and "stray" not in listed.stdout, listed.stdout
    down = _krig(test_env, "lab", "sim", "down", "stray-sim")
    assert "not up" in down.stdout + down.stderr, down.stdout + down.stderr
    run = _krig(test_env, "run", "selftest-pass", "--rig", "fake-asked")
    assert run.returncode == 0, run.stdout + run.stderr   # the test's fake rig, not the user's
    res = [ln for ln in run.stdout.splitlines() if ln.startswith("results: ")]
    assert res and pathlib.Path(res[0][9:]).is_relative_to(HERMETIC_BASE / "results"), run.stdout
    assert hermetic.changes(before, hermetic.snapshot([home])) == []
    assert not (home / "krig").exists()


@pytest.mark.labgrid
def test_lab_sync_as_the_suite_runs_it_sees_only_the_tests_rigs(tmp_path):
    """`krig lab sync` against a real coordinator, run as the suite runs it: the test's own lab
    server synced, none of the user's; their home as it was."""
    home, user_env = fake_user(tmp_path)
    before = hermetic.snapshot([home])
    coord = Coordinator(tmp_path / "coordinator").start()
    try:
        test_env = {**hermetic.hermetic_env(user_env, HERMETIC_BASE), "KRIG_RIG_PATH": str(_our_rigs(tmp_path)),
                    "KRIG_LAB_COORDINATOR": coord.addr}
        synced = _krig(test_env, "lab", "sync")
        assert synced.returncode == 0, synced.stdout + synced.stderr
        assert [ln.split(":")[1].split()[-1] for ln in synced.stdout.splitlines()] == ["lab1"]
    finally:
        coord.kill()
    assert hermetic.changes(before, hermetic.snapshot([home])) == []


def test_the_snapshot_sees_what_a_test_could_do(tmp_path):
    """The guard's comparison: a file added, removed or rewritten, a directory made."""
    d = tmp_path / "config"
    (d / "rigs").mkdir(parents=True)
    (d / "rigs" / "a.toml").write_text("x")
    (d / "gone").write_text("y")
    before = hermetic.snapshot([d, tmp_path / "none"])
    assert hermetic.changes(before, hermetic.snapshot([d])) == []
    (d / "rigs" / "b.toml").write_text("z")
    (d / "gone").unlink()
    os.utime(d / "rigs" / "a.toml", ns=(1, 1))
    (d / "new").mkdir()
    got = hermetic.changes(before, hermetic.snapshot([d]))
    assert {ln.split()[0] + " " + pathlib.Path(ln.split()[1]).name for ln in got} == {
        "added b.toml", "added new", "removed gone", "changed a.toml", "changed rigs", "changed config"}


def test_the_sessions_end_removes_its_own_directory_only(tmp_path):
    """leave(): the session's directory removed; what the user's own krig wrote into their
    directories meanwhile (a server's rig, a run) is theirs: kept, and no failure of the session."""
    user = hermetic.user_dirs({"HOME": str(tmp_path / "home"), "KRIG_RESULTS": str(tmp_path / "res")})
    base = tmp_path / "session"
    (base / "results").mkdir(parents=True)
    (user[0] / "rigs").mkdir(parents=True)
    (user[0] / "rigs" / "sim.toml").write_text("driver = 'ipmi'\n")
    (user[2] / "latest").mkdir(parents=True)
    assert hermetic.leave(base) is None and not base.exists()
    assert (user[0] / "rigs" / "sim.toml").is_file() and (user[2] / "latest").is_dir()
