"""The lab coordinator backend against a real labgrid-coordinator on 127.0.0.1, no guests:
places and tags from rig files, priority order among waiting controllers, a
controller killed with -9 whose lease runs out, Ctrl-C while waiting, servers
chosen by tags, and bad input. The runs on simulated servers are in
tests/rigs/test_lab_ipmi.py.
"""
import os
import signal
import subprocess

import pytest

from conftest import KRIG, ROOT
from krig.errors import UsageError
from workflows.lab import select_rigs
from rigs import lab
from lab_fixture import Coordinator, facts_of, start_holder, wait_for

pytestmark = pytest.mark.labgrid

RIG = """driver = "ipmi"
scratch_dev = "/dev/nvme0n1"
[bmc]
host = "bmc-{name}.example.net"
user = "bmcadmin{name}"
password_env = "KRIG_TEST_LAB_UNSET_PW"
[ssh]
host = "{name}.example.net"
key = "/nonexistent/{name}_key"
known_hosts = "/nonexistent/known_hosts"
[lab]
{lab}
"""
LABS = {"lab1": 'model = "R760"\nmemory = "512G"\ncpus = 64\nnuma = 2',
        "lab2": 'model = "R760"\nmemory = "256G"\ncpus = 32\nnuma = 1',
        "lab3": 'model = "r660"\nmemory = "1T"\ncpus = 16\nnuma = 1\ntags = { rack = "b3" }'}


@pytest.fixture
def coord(tmp_path):
    c = Coordinator(tmp_path / "coordinator").start()
    yield c
    c.kill()
    assert not c.alive()


def _env(tmp_path, coord, **extra):
    rigs = tmp_path / "rigs"
    rigs.mkdir(exist_ok=True)
    for name, lab_name in LABS.items():
        (rigs / f"{name}.toml").write_text(RIG.format(name=name, lab=lab_name))
    return {**os.environ, "KRIG_RIG_PATH": str(rigs), "KRIG_LAB_COORDINATOR": coord.addr, **extra}


def _krig(env, *args):
    return subprocess.run(KRIG + list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_sync_makes_places_with_tags_and_nothing_secret(tmp_path, coord):
    env = _env(tmp_path, coord)
    p = _krig(env, "lab", "sync")
    assert p.returncode == 0, p.stdout + p.stderr
    assert [ln.split(":")[1].split()[-1] for ln in p.stdout.splitlines()] == ["lab1", "lab2", "lab3"]
    assert all(": created: " in ln for ln in p.stdout.splitlines())
    show = coord.client("-p", "lab1", "show")
    assert "tags: cpus=64, driver=ipmi, memory_gib=512, model=r760, numa=2, scratch=yes" in show.stdout, show.stdout
    assert "rack=b3" in coord.client("-p", "lab3", "show").stdout
    # the same again changes nothing; a changed rig file updates its place
    assert _krig(env, "lab", "sync").stdout.count(": unchanged: ") == 3
    (tmp_path / "rigs" / "lab2.toml").write_text(RIG.format(name="lab2", lab='model = "R760"\nmemory = "384G"'))
    p = _krig(env, "lab", "sync", "lab2")
    assert p.returncode == 0 and "lab: place lab2: updated:" in p.stdout and "memory_gib=384" in p.stdout, p.stdout
    st = _krig(env, "lab", "status")
    assert st.returncode == 0 and "lab1: free;" in st.stdout and "3 places, 0 reservations" in st.stdout, st.stdout
    # what the coordinator knows and logged: no address, user, path or variable of a rig
    stored = coord.client("-v", "places").stdout + coord.log.read_text()
    assert "lab1" in stored and "memory_gib" in stored
    for secret in ("example.net", "bmcadmin", "KRIG_TEST_LAB_UNSET_PW", "nonexistent"):
        assert secret not in stored, f"{secret!r} reached the coordinator"


def test_waiting_controllers_go_by_priority_after_a_kill9_lease_runs_out(tmp_path, coord):
    env = _env(tmp_path, coord)
    assert _krig(env, "lab", "sync", "lab1").returncode == 0
    x = start_holder(tmp_path / "x.out", "lab1", 0, 600, lease=6, env=env)
    held = wait_for(lambda: facts_of(tmp_path / "x.out", "HELD"), 60, "the first controller to hold lab1")
    low = start_holder(tmp_path / "low.out", "lab1", 0, 1, lease=6, env=env)
    wait_for(lambda: coord.waiting() == 1, 60, "the low-priority reservation")
    high = start_holder(tmp_path / "high.out", "lab1", 10, 1, lease=6, env=env)
    wait_for(lambda: coord.waiting() == 2, 60, "the high-priority reservation")
    st = _krig(env, "lab", "status").stdout
    assert st.index("prio 10") < st.index("prio 0"), st
    os.killpg(x.pid, signal.SIGKILL)            # the holder dies without unlocking anything
    x.wait(10)
    for p in (high, low):
        p.wait(120)
    hi, lo = facts_of(tmp_path / "high.out"), facts_of(tmp_path / "low.out")
    assert hi and lo, (tmp_path / "high.out").read_text() + (tmp_path / "low.out").read_text()
    for name in ("high", "low"):         # each waiter said once that it waits, and for whom
        said = [ln for ln in (tmp_path / f"{name}.out").read_text().splitlines() if "waiting for" in ln]
        assert len(said) == 1 and said[0].startswith("krig: rig lab1: waiting for the lab server (held by "), said
    # the higher priority went first, though it asked later; the two never held lab1 together
    assert hi["acquired_at"] < lo["acquired_at"] and hi["released_at"] <= lo["acquired_at"]
    # the dead controller's one lock, given back by a waiter (two that looked at once may both
    # have given it back): released only after the lease the coordinator recorded had ended,
    # and no waiter held lab1 before that
    kicked = hi.get("stale_released", []) + lo.get("stale_released", [])
    assert kicked and {(k["holder"], k["lease_ended"]) for k in kicked} == {(held["holder"], kicked[0]["lease_ended"])}
    assert all(k["released"] >= k["lease_ended"] for k in kicked), kicked
    assert hi["acquired_at"] >= kicked[0]["lease_ended"]
    assert coord.who() == [] and coord.reservations() == ""


def test_a_late_give_back_leaves_the_next_holders_lock_alone(tmp_path, coord):
    """A waiter that saw the dead controller's expired lease, but whose give-back comes after
    another waiter already gave the place back and a new run locked it, must not release that
    run's lock or remove its lease, though both controllers run as the same host and user."""
    env = _env(tmp_path, coord)
    assert _krig(env, "lab", "sync", "lab1").returncode == 0
    rl = lab.Coordinator(coord.addr)
    x = start_holder(tmp_path / "x.out", "lab1", 0, 600, lease=6, env=env)
    x_facts = wait_for(lambda: facts_of(tmp_path / "x.out", "HELD"), 60, "the first controller to hold lab1")
    stale = rl.places()["lab1"]                 # what the late waiter saw: X's lock and lease
    os.killpg(x.pid, signal.SIGKILL)
    x.wait(10)
    h = start_holder(tmp_path / "h.out", "lab1", 0, 600, lease=30, env=env)
    try:
        h_facts = wait_for(lambda: facts_of(tmp_path / "h.out", "HELD"), 90, "the next run to hold lab1")
        assert [k["holder"] for k in h_facts["stale_released"]] == [x_facts["holder"]]
        now = rl.places()["lab1"]
        assert now["acquired"] and now["acquired"] != stale["acquired"], (now, stale)
        rl._call(lambda s: lab._give_back(s, "lab1", stale["reservation"], stale["acquired"],
                                          stale["tags"][lab.HOLDER]))
        after = rl.places()["lab1"]
        assert after["acquired"] == now["acquired"] and len(coord.who()) == 1, (after, coord.who())
        assert after["tags"][lab.HOLDER] == h_facts["holder"] and lab.LEASE in after["tags"], after
    finally:
        os.killpg(h.pid, signal.SIGINT)
        h.wait(60)
    assert facts_of(tmp_path / "h.out")["released_at"]
    assert coord.who() == [] and coord.reservations() == ""


def test_ctrl_c_while_waiting_and_while_holding_leaves_nothing(tmp_path, coord):
    env = _env(tmp_path, coord)
    assert _krig(env, "lab", "sync", "lab2").returncode == 0
    x = start_holder(tmp_path / "x.out", "lab2", 0, 600, lease=30, env=env)
    wait_for(lambda: facts_of(tmp_path / "x.out", "HELD"), 60, "the holder")
    w = start_holder(tmp_path / "w.out", "lab2", 0, 1, lease=30, env=env)
    wait_for(lambda: coord.waiting() == 1, 60, "the waiting reservation")
    os.killpg(w.pid, signal.SIGINT)
    assert w.wait(60) != 0 and facts_of(tmp_path / "w.out", "HELD") is None
    assert coord.waiting() == 0 and len(coord.who()) == 1
    os.killpg(x.pid, signal.SIGINT)
    x.wait(60)
    assert facts_of(tmp_path / "x.out")["released_at"]
    assert coord.who() == [] and coord.reservations() == ""


def test_a_suite_chooses_servers_by_tags(tmp_path, coord, monkeypatch):
    env = _env(tmp_path, coord)
    assert _krig(env, "lab", "sync").returncode == 0
    monkeypatch.setenv("KRIG_RIG_PATH", env["KRIG_RIG_PATH"])
    monkeypatch.setenv("KRIG_LAB_COORDINATOR", coord.addr)
    assert select_rigs({"tags": {"model": "R760"}}, "s.lab") == ["lab1", "lab2"]
    assert select_rigs({"min": {"memory_gib": 300}}, "s.lab") == ["lab1", "lab3"]
    assert select_rigs({"tags": {"rack": "b3"}, "min": {"cpus": 8}}, "s.lab") == ["lab3"]
    x = start_holder(tmp_path / "x.out", "lab1", 0, 600, lease=30, env=env)
    try:
        wait_for(lambda: facts_of(tmp_path / "x.out", "HELD"), 60, "the holder")
        assert select_rigs({"tags": {"model": "r760"}, "count": 1}, "s.lab") == ["lab2"]   # free ones first
    finally:
        os.killpg(x.pid, signal.SIGINT)
        x.wait(60)
    with pytest.raises(UsageError, match=r"^s\.lab\.count: 3 servers asked, 2 match: lab1, lab2$"):
        select_rigs({"tags": {"model": "r760"}, "count": 3}, "s.lab")
    with pytest.raises(UsageError, match=r"^s\.lab: no lab server matches model=r960 "):
        select_rigs({"tags": {"model": "r960"}}, "s.lab")
    with pytest.raises(UsageError, match=r"^s\.lab: unknown field 'size'"):
        select_rigs({"size": 3}, "s.lab")


def test_bad_input_is_one_line(tmp_path, coord):
    env = _env(tmp_path, coord)
    p = _krig({**env, "KRIG_LAB_COORDINATOR": "nohostport"}, "lab", "status")
    assert p.returncode == 2 and p.stderr.strip() == \
        "krig: error: KRIG_LAB_COORDINATOR: 'nohostport' is not HOST:PORT (e.g. 127.0.0.1:20408)", p.stderr
    (tmp_path / "rigs" / "lab3.toml").write_text(RIG.format(name="lab3", lab='tags = { name = "x" }'))
    p = _krig(env, "lab", "sync", "lab3")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and ".lab.tags.name: " in p.stderr, p.stderr
    (tmp_path / "rigs" / "lab3.toml").write_text(RIG.format(name="lab3", lab='memory = "lots"'))
    p = _krig(env, "lab", "sync", "lab3")
    assert p.returncode == 2 and p.stderr.strip().endswith(
        "lab3.toml.lab.memory: expected a size like 512M, 16G or 1T, got 'lots'"), p.stderr
    suite = tmp_path / "s.toml"
    suite.write_text('rigs = ["lab1"]\n[lab]\ntags = { model = "r760" }\n[[runs]]\nreproducer = "selftest-pass"\n')
    p = _krig(env, "qualify", str(suite), "-o", str(tmp_path / "q"))
    assert p.returncode == 2 and p.stderr.strip() == \
        f"krig: error: {suite}: set rigs (names) or [lab] (tags), not both", p.stderr
    coord.kill()                        # a coordinator that is gone: one line, exit 3, no traceback
    p = _krig(env, "lab", "status")
    assert p.returncode == 3 and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"krig: error: lab coordinator {coord.addr}: "), p.stderr


def test_coordinator_gone_a_holder_keeps_its_server_a_waiter_ends_with_one_line(tmp_path, coord):
    env = _env(tmp_path, coord)
    assert _krig(env, "lab", "sync", "lab2").returncode == 0
    x = start_holder(tmp_path / "x.out", "lab2", 0, 600, lease=6, env=env)
    wait_for(lambda: facts_of(tmp_path / "x.out", "HELD"), 60, "the holder")
    w = start_holder(tmp_path / "w.out", "lab2", 0, 1, lease=6, env=env)
    wait_for(lambda: coord.waiting() == 1, 60, "the waiting reservation")
    coord.kill()
    assert w.wait(120) != 0
    last = (tmp_path / "w.out").read_text().strip().splitlines()[-1]
    assert last.startswith(f"krig.errors.RigError: rig lab2: lab coordinator {coord.addr}: "), last
    assert x.poll() is None             # the holder goes on; its lease refreshes (every 2 s) have failed meanwhile
    os.killpg(x.pid, signal.SIGINT)
    x.wait(60)
    done = facts_of(tmp_path / "x.out")
    assert done["refresh_error"].startswith(f"lab coordinator {coord.addr}: ") and done["release_error"], done


def test_status_marks_a_server_the_history_calls_unhealthy(tmp_path, coord):
    """`krig lab status` reads the results history: a place whose server's last runs ended ERROR
    for a rig cause three times is marked UNHEALTHY with why; the others are not."""
    from history_runs import make_run
    env = _env(tmp_path, coord, KRIG_HISTORY_URL=f"sqlite:///{tmp_path / 'h.sqlite'}")
    assert _krig(env, "lab", "sync").returncode == 0
    for i in range(3):
        make_run(tmp_path / "results", "k1", "ERROR", 1.0, rig="lab2", cause="rig", reason="BMC did not answer",
                 started=f"2026-03-0{i + 1}T00:00:00+00:00")
        make_run(tmp_path / "results", "k1", "PASS", 1.0, rig="lab1", started=f"2026-03-0{i + 1}T00:00:00+00:00")
    assert _krig(env, "history", "import", str(tmp_path / "results")).returncode == 0
    st = _krig(env, "lab", "status")
    assert st.returncode == 0, st.stderr
    lines = {ln.split(":")[0].strip(): ln for ln in st.stdout.splitlines()[1:]}
    assert "UNHEALTHY: 3 of its last 3 runs ended ERROR for a rig cause (last: BMC did not answer)" in lines["lab2"]
    assert "UNHEALTHY" not in lines["lab1"] and "UNHEALTHY" not in lines["lab3"], st.stdout
