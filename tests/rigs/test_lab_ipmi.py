"""Lab servers shared through a real labgrid-coordinator on 127.0.0.1: two simulated IPMI
servers (ipmi_sim, as tests/workflows/test_qualify_ipmi.py) as places, three `krig qualify`
controllers, one of them killed with -9 while it holds both servers; and the
coordinator itself killed while a run holds its server.

Every run is selftest-pass (the cheapest: boot, one command, power off) on a
1 GiB one-vCPU guest, as in test_qualify_ipmi.
"""
import json
import os
import pathlib
import signal
import socket
import subprocess

import pytest

from conftest import KRIG, ROOT
from ipmi_fixture import two_sims
from lab_fixture import Coordinator, wait_for

pytestmark = pytest.mark.ipmi

LAB = {"model": "ipmisim", "memory": "1G", "cpus": 1}
LEASE = 10


@pytest.fixture
def lab(tmp_path):
    coord = Coordinator(tmp_path / "coordinator").start()
    try:
        with two_sims(tmp_path, "the lab IPMI tests", "lab", lab=LAB) as sims:
            env = {**os.environ, "KRIG_RIG_PATH": ":".join(str(s.rigs) for s in sims),
                   "KRIG_LAB_COORDINATOR": coord.addr, "KRIG_LAB_LEASE": str(LEASE), "KRIG_LOCK_WAIT": "900",
                   "KRIG_RESULTS": str(tmp_path / "results")}
            p = subprocess.run(KRIG + ["lab", "sync"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
            assert p.returncode == 0 and p.stdout.count(": created: ") == 2, p.stdout + p.stderr
            yield coord, sims, env
    finally:
        coord.kill()
    assert not coord.alive()


def _suite(path: pathlib.Path, head: str) -> pathlib.Path:
    path.write_text(f'description = "{path.stem}"\n{head}\n[[runs]]\nreproducer = "selftest-pass"\n')
    return path


def _qualify(tmp_path, env, name, head, prio) -> subprocess.Popen:
    suite = _suite(tmp_path / f"{name}.toml", head)
    log = open(tmp_path / f"{name}.log", "wb")
    return subprocess.Popen(KRIG + ["qualify", str(suite), "-o", str(tmp_path / name), "--prio", str(prio)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def _children(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    return {int(a) for a, b in (ln.split() for ln in out.splitlines()) if int(b) == pid}


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if os.path.exists(f"/proc/{p}") and
            "Z" not in open(f"/proc/{p}/stat").read().rpartition(")")[2].split()[0]}


def _holds(qdir: pathlib.Path) -> list[dict]:
    """Per run: rig, verdict and the lab facts (when the server was held) from its manifest."""
    out = []
    for c in json.loads((qdir / "suite.json").read_text())["cases"]:
        m = json.loads((pathlib.Path(c["run_dir"]) / "manifest.json").read_text())
        out.append({"rig": c["rig"], "verdict": c["verdict"], **m["rig_facts"]["lab"]})
    return out


def test_two_qualifies_share_the_lab_by_priority_after_a_controller_is_killed(tmp_path, lab):
    coord, sims, env = lab
    # X holds both servers; LOW (by name, prio 0) and HIGH (by tags, prio 10) queue behind it
    x = _qualify(tmp_path, env, "x", 'rigs = ["lab-a", "lab-b"]', 0)
    wait_for(lambda: len(coord.who()) == 2, 120, "X to lock both servers")
    low = _qualify(tmp_path, env, "low", 'rigs = ["lab-a"]', 0)
    wait_for(lambda: coord.waiting() == 1, 120, "LOW's reservation")
    high = _qualify(tmp_path, env, "high", '[lab]\ntags = { model = "ipmisim" }', 10)
    wait_for(lambda: coord.waiting() == 3, 120, "HIGH's two reservations")
    workers = _children(x.pid)
    assert len(workers) >= 2, workers              # one xdist worker per server
    os.kill(x.pid, signal.SIGKILL)                 # the controller only: its workers must go with it
    x.wait(10)
    wait_for(lambda: not _alive(workers), 30, "X's workers to die with it")
    for p, name in ((high, "high"), (low, "low")):
        try:
            p.wait(900)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        assert p.returncode == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    hi, lo = _holds(tmp_path / "high"), _holds(tmp_path / "low")
    assert sorted(h["rig"] for h in hi) == ["lab-a", "lab-b"] and [h["rig"] for h in lo] == ["lab-a"]
    assert all(h["verdict"] == "PASS" for h in hi + lo)
    # HIGH asked later but went first on lab-a; no two runs held a server at once
    ha = next(h for h in hi if h["rig"] == "lab-a")
    assert ha["released_at"] <= lo[0]["acquired_at"], (ha, lo)
    assert all(h["prio"] == 10 for h in hi) and lo[0]["prio"] == 0
    # X's locks were given back when their lease ran out, by whichever waiting controller looked
    # first (two that looked at once may both have given the same lock back)
    kicked = [k for h in hi + lo for k in h.get("stale_released", [])]
    assert all(k["released"] >= k["lease_ended"] for k in kicked), kicked
    assert len({(k["holder"], k["lease_ended"]) for k in kicked}) == 2, kicked     # X's two workers
    assert {k["holder"] for k in kicked} <= {f"{socket.gethostname()}_{w}" for w in workers}, (kicked, workers)
    assert coord.who() == [] and coord.reservations() == ""
    assert "SIGNED OFF" in (tmp_path / "high" / "signoff.txt").read_text()
    seen = coord.client("-v", "places").stdout + coord.log.read_text()
    for s in sims:
        for secret in (s.password, s.USER, str(s.base)):
            assert secret not in seen, f"{secret!r} reached the coordinator"


def test_coordinator_killed_mid_run_the_run_finishes(tmp_path, lab):
    coord, sims, env = lab
    log = open(tmp_path / "run.log", "wb")
    p = subprocess.Popen(KRIG + ["run", "selftest-pass", "--rig", "lab-b"], cwd=ROOT, env=env, stdout=log,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: len(coord.who()) == 1, 120, "the run to lock lab-b")
        coord.kill()
        p.wait(600)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    out = (tmp_path / "run.log").read_text()
    assert p.returncode == 0 and out.startswith("krig: selftest-pass on lab-b") and "Traceback" not in out, out
    run_dir = pathlib.Path(next(ln for ln in out.splitlines() if ln.startswith("results: "))[9:])
    facts = json.loads((run_dir / "manifest.json").read_text())["rig_facts"]["lab"]
    # the lease could not be refreshed nor the lock given back: said, and never the kernel's fault
    assert f"lab coordinator {coord.addr}" in facts["release_error"], facts
    assert facts["acquired_at"] < facts["released_at"]
    assert sims[1].power_status() == "off"
