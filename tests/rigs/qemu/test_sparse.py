"""Sparse guests (RAM backed where the guest touches it), the touch rule of the preflight and the
host watched while one runs (rigs/qemu/memory.py). The guest cases boot the distro kernel.

Covers: rigs/qemu/memory.py, workflows/preflight.py."""
import json
import pathlib
import re
import subprocess
import threading
import time

import pytest

from conftest import krig_run, qemu_pids, run_dir_of
from workflows import run as krun
from krig.errors import UsageError
from krig import hashsize
from workflows.preflight import admission_line, preflight
from krig.reproducer import load_reproducer, touch_bytes
from krig.reproducer_schema import parse_requires
from krig.verdict import Evidence, decide
from rigs import load_rig
from rigs.qemu import memory as qemu_memory

SPARSE_RIG = """driver = "qemu"
memory = "{memory}"
memory_backing = "{backing}"
cpus = 2
accel = "auto"
boot_timeout = 300
work_dir = "{work}"
{extra}
[[disks]]
serial = "krig-scratch"
size = "16G"
role = "scratch"
"""
BANNER = "[    0.000000] Linux version 6.1.0-56-amd64 (debian-kernel@lists.debian.org)\n"


def rig_file(tmp_path, memory="4G", backing="sparse", extra="", name="sparse") -> pathlib.Path:
    d = tmp_path / "rigs"
    d.mkdir(exist_ok=True)
    p = d / f"{name}.toml"
    p.write_text(SPARSE_RIG.format(memory=memory, backing=backing, work=tmp_path / "work", extra=extra))
    return p


def host_total() -> int:
    return qemu_memory.meminfo()["MemTotal"]


# -- the rig file and QEMU's argv ----------------------------------------------------------------

def test_sparse_argv_and_like_memory(tmp_path):
    rig = load_rig(str(rig_file(tmp_path, memory="64G", extra='like_memory = "3T"')))
    assert qemu_memory.machine_args(rig.spec.memory_backing, rig.spec.memory_bytes) == [
        "-object", f"memory-backend-ram,id=m0,size={64 << 30},reserve=off", "-machine", "q35,memory-backend=m0"]
    assert qemu_memory.hash_cmdline(rig.spec) == ["dhash_entries=1048576", "ihash_entries=524288"]
    assert qemu_memory.fixed_cost(64 << 30, 3 << 40)[0] < qemu_memory.fixed_cost(64 << 30)[0]   # its own tables
    plain = load_rig("qemu-default")
    assert qemu_memory.machine_args(plain.spec.memory_backing, plain.spec.memory_bytes) == ["-machine", "q35"]
    assert not qemu_memory.hash_cmdline(plain.spec)
    assert plain.host_needs()["memory"] == 4 << 30 and "sparse_memory" not in plain.host_needs()
    for name in ("qemu-64g-sparse", "qemu-256g-sparse"):
        assert load_rig(name).spec.memory_backing == "sparse"


@pytest.mark.parametrize("extra,needle", [
    ('memory_backing = "swap"', ".memory_backing: 'swap' is not one of ram, sparse"),
    ('like_memory = "lots"', ".like_memory: expected a size like"),
    ('like_memory = "128T"', ".like_memory: '128T' is outside 512M-64T"),
])
def test_bad_rig_keys(krig_cli, tmp_path, extra, needle):
    rig = rig_file(tmp_path, backing="ram", extra=extra.replace('memory_backing = "swap"', "") + "\n")
    if "swap" in extra:
        rig.write_text(rig.read_text().replace('memory_backing = "ram"', extra))
    p = krig_cli("run", "selftest-pass", "--rig", str(rig), env={"KRIG_RESULTS": str(tmp_path / "results")})
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr


@pytest.mark.parametrize("value,needle", [("0%", "more than 0% and at most 100%"),
                                          ("150%", "at most 100%"), ("x%", "at most 100%"),
                                          ("lots", "expected a size like")])
def test_bad_touch(value, needle):
    with pytest.raises(UsageError, match=re.escape(needle)) as e:
        parse_requires({"touch": value}, "reproducers/x/repro.toml.requires")
    assert str(e.value).startswith("reproducers/x/repro.toml.requires.touch: ")


def test_touch_declared_or_all_of_ram():
    assert touch_bytes({"touch": {"pct": 17.0}}, 64 << 30) == (int((64 << 30) * 0.17), "requires.touch 17% of RAM")
    assert touch_bytes({"touch": {"bytes": 8 << 30}}, 4 << 30)[0] == 4 << 30    # never more than the RAM
    assert touch_bytes({}, 4 << 30) == (4 << 30, "all of its RAM: no requires.touch declared")
    flood = load_reproducer("neg-dentry-flood")
    for x in (1, 2, 3, 5):      # its bound (settle_limit_x times the 5% limit) fits in what it declares
        params = flood.resolve_params("smoke", {"settle_limit_x": str(x)})
        touch, how = touch_bytes(flood.requires_for("smoke"), 1 << 30, params)
        assert (1 << 30) * 0.05 * x < touch <= 1 << 30 and f"settle_limit_x={x}" in how, how


def test_touch_scaled_by_a_parameter():
    req = parse_requires({"touch": "5% x settle_limit_x + 2% + 64M * n"}, "w")
    assert req["touch"] == {"terms": [{"pct": 5.0, "param": "settle_limit_x"}, {"pct": 2.0},
                                      {"bytes": 64 << 20, "param": "n"}]}
    got, how = touch_bytes(req, 100 << 30, {"settle_limit_x": 1.0, "n": 2})
    assert got == int((100 << 30) * 0.07) + (128 << 20)
    assert how == "requires.touch 5% x settle_limit_x=1 + 2% + 64M x n=2 of RAM"
    assert touch_bytes(req, 1 << 30, {"settle_limit_x": 100.0, "n": 1})[0] == 1 << 30    # never more than RAM


def test_touch_naming_an_unknown_parameter_is_one_line(tmp_path):
    from krig.reproducer import parse_reproducer
    data = {"description": "x", "requires": {"touch": "5% x nosuch + 1%"},
            "params": {"n": {"type": "int", "default": 1}}}
    with pytest.raises(UsageError, match=r"^reproducers/x/repro\.toml\.requires\.touch: 'nosuch' is not a "
                                         r"numeric parameter of the reproducer \(known: .*\bn\b"):
        parse_reproducer("x", tmp_path, data)


# -- the preflight ------------------------------------------------------------------------------

def test_sparse_guest_beyond_the_host_is_judged_by_its_touch(tmp_path):
    """A sparse guest larger than the host starts when its fixed cost and declared touch fit."""
    ram = 1 << max(35, (host_total() * 2).bit_length())     # at least twice the host
    rig = load_rig(str(rig_file(tmp_path, memory=f"{ram >> 30}G")))
    got = preflight(rig, load_reproducer("selftest-pass"), tmp_path / "results")
    assert got["sparse_touch"] == 256 << 20 and got["sparse_fixed"] == qemu_memory.fixed_cost(ram)[0]
    assert got["sparse_fixed"] + got["sparse_touch"] < got["mem_available"]


def test_touch_beyond_the_host_is_refused(krig_cli, tmp_path):
    """The flood's touch at the smoke preset (its bound at settle_limit_x 2 times the 5% limit, plus
    2%: 12%) of a guest 64 times the host's RAM, whose fixed cost and the 2% the flood touches
    outside its host-budget guard do not fit either: one line naming the fixed cost, the touch,
    the guarded touch and MemAvailable; nothing starts."""
    ram = 1 << (host_total() * 64).bit_length()
    rig = rig_file(tmp_path, memory=f"{ram >> 30}G")
    p = krig_cli("run", "neg-dentry-flood", "--preset", "smoke", "--rig", str(rig),
                 env={"KRIG_RESULTS": str(tmp_path / "results")})
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    line = lines[0]
    assert line.startswith(f"krig: error: {rig}: a sparse {ram >> 30}.0 GiB guest would touch "), line
    assert re.search(r"touch [\d.]+ GiB fixed \(struct pages \(RAM/64\) ", line), line
    assert re.search(r"\+ [\d.]+ GiB for neg-dentry-flood \(requires\.touch 5% x settle_limit_x=2 \+ 2% of RAM\)",
                     line), line
    assert re.search(r", and [\d.]+ GiB before its host-budget guard stops it \(requires\.host_budget_guard 2% of "
                     r"RAM\): more than this host's MemAvailable [\d.]+ GiB less a [\d.]+ GiB margin$", line), line
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("manifest.json"))
    assert not qemu_pids(str(tmp_path))


def _preflight_with(monkeypatch, tmp_path, rig, repro, avail, sets=None, preset="smoke"):
    import workflows.preflight as kp
    monkeypatch.setattr(kp, "mem_available", lambda: avail)
    r = load_reproducer(repro)
    return preflight(rig, r, tmp_path / "results", True, preset, r.resolve_params(preset, sets or {}))


def test_a_flood_stopped_by_its_host_budget_guard_is_admitted_by_what_it_touches_outside_it(monkeypatch, tmp_path):
    """neg-dentry-flood declares host_budget_guard (negflood -H stops it when the host's budget
    falls to 0): a host short of its whole touch admits it when the fixed cost and the 2% it
    touches outside the guard fit, and says so; a host short of that too refuses it; a workload
    without a guard is refused at its whole touch as before."""
    ram = 256 << 30
    rig = load_rig(str(rig_file(tmp_path, memory="256G", extra='host_margin = "8G"')))
    fixed, margin = qemu_memory.fixed_cost(ram)[0], 8 << 30
    assert rig.host_needs()["sparse_memory"]["margin"] == margin
    whole, guarded = int(ram * 0.07), int(ram * 0.02)          # settle_limit_x=1: 5% x 1 + 2%
    got = _preflight_with(monkeypatch, tmp_path, rig, "neg-dentry-flood", margin + fixed + whole,
                          {"settle_limit_x": "1"})
    assert got["sparse_touch"] == whole and "sparse_admitted_by" not in got, got
    short = margin + fixed + guarded + (1 << 30)
    got = _preflight_with(monkeypatch, tmp_path, rig, "neg-dentry-flood", short, {"settle_limit_x": "1"})
    assert got["sparse_admitted_by"] == "host_budget_guard" and got["sparse_guarded_touch"] == guarded, got
    assert got["sparse_touch"] == whole and got["sparse_room"] == short - margin
    assert got["sparse_guarded_touch_how"] == "requires.host_budget_guard 2% of RAM"
    line = admission_line(got)      # what the run's log says: the sum that does not fit, and what does
    assert f"{fixed >> 20} MiB fixed + {whole >> 20} MiB of touch do not fit in {(short - margin) >> 20} MiB" in line, line
    assert f"the fixed cost + {guarded >> 20} MiB outside the guard do" in line and line.endswith("the run is ERROR")
    with pytest.raises(UsageError, match=r"before its host-budget guard stops it \(requires\.host_budget_guard 2% "
                                         r"of RAM\): more than this host's MemAvailable"):
        _preflight_with(monkeypatch, tmp_path, rig, "neg-dentry-flood", margin + fixed + guarded - (1 << 20))
    assert "host_budget_guard" not in load_reproducer("selftest-pass").requires_for(None)
    with pytest.raises(UsageError, match=r"= [\d.]+ GiB, more than this host's MemAvailable"):
        _preflight_with(monkeypatch, tmp_path, rig, "selftest-pass", margin + fixed + (128 << 20), preset=None)


@pytest.mark.parametrize("value,needle", [('"512M"', ".host_margin: '512M' is outside 1G-64T"),
                                          ('"much"', ".host_margin: expected a size like")])
def test_bad_host_margin(krig_cli, tmp_path, value, needle):
    rig = rig_file(tmp_path, extra=f"host_margin = {value}")
    p = krig_cli("run", "selftest-pass", "--rig", str(rig), env={"KRIG_RESULTS": str(tmp_path / "results")})
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr


# -- the host's OOM kill -------------------------------------------------------------------------

class _Gone:
    """A QEMU process that has exited with `returncode`."""
    pid = 2 ** 22 + 7           # above pid_max's default: no kernel log line names it
    def __init__(self, returncode):
        self.returncode = returncode
    def poll(self):
        return self.returncode


def _watch(tmp_path, avail: int) -> qemu_memory.MemoryWatch:
    w = qemu_memory.MemoryWatch(_Gone(-9), tmp_path / "host-memory.tsv", None)
    w.last = (avail, 3 << 30)
    return w


def test_sigkill_with_the_host_out_of_memory_is_error_naming_it(tmp_path):
    w = _watch(tmp_path, 40 << 20)
    fault = qemu_memory.host_oom(w.proc, w)
    assert fault and "killed by SIGKILL with the host out of memory" in fault and "OOM killer" in fault, fault
    assert "MemAvailable 40 MiB" in fault and "host-memory.tsv" in fault
    verdict, reason = decide(Evidence("crashed", "guest died while running bash (qemu exit -9); see console.log",
                                      BANNER, rig_fault="rig sparse: QEMU was killed by signal 9", host_fault=fault,
                                      machine_answered=True))
    assert verdict == "ERROR" and reason.startswith("host: ") and "OOM killer" in reason, reason
    # memory to spare, or another way out: not the OOM killer
    assert qemu_memory.host_oom(w.proc, _watch(tmp_path, host_total() // 2)) is None
    assert qemu_memory.host_oom(_Gone(-15), w) is None and qemu_memory.host_oom(_Gone(0), w) is None


def test_host_budget_for_the_guest(tmp_path):
    w = _watch(tmp_path, 10 << 30)
    env = qemu_memory.guest_env(w, "/run/krig/share")
    assert int(env["KRIG_HOST_BUDGET_BYTES"]) == (10 << 30) - w.margin
    assert env["KRIG_HOST_BUDGET_FILE"] == "/run/krig/share/host-budget"
    assert qemu_memory.guest_env(None, "/run/krig/share") == {}


# -- real guests ---------------------------------------------------------------------------------

@pytest.mark.guest
def test_sparse_guest_larger_than_the_host(tmp_path, no_leftover_qemu):
    """rigs/qemu-64g-sparse.toml on a host with less RAM than 64 GB: it runs, its kernel's
    hash tables (machine facts) are the rule's for 64 GB, and QEMU's RSS is what the fixed cost
    says, not 64 GB."""
    ram = 64 << 30
    p = krig_run(tmp_path, "selftest-pass", "--rig", "qemu-64g-sparse")
    assert p.returncode == 0, p.stdout + p.stderr
    m = json.loads((run_dir_of(p) / "manifest.json").read_text())
    assert m["preflight"]["sparse_touch"] == 256 << 20
    assert m["machine"]["dentry_hash_entries"] == hashsize.dentry_entries(ram) == 8388608
    assert m["machine"]["inode_hash_entries"] == hashsize.inode_entries(ram)
    f = m["rig_facts"]
    assert f["memory_backing"] == "sparse" and "reserve=off" in " ".join(f["qemu_argv"])
    assert f["qemu_rss_after_boot"] <= f["fixed_cost_estimate"] < 4 << 30, f
    assert f["qemu_rss_peak"] < f["fixed_cost_estimate"] + (256 << 20), f
    rows = (run_dir_of(p) / "host-memory.tsv").read_text().splitlines()
    assert rows[0].split("\t")[:3] == ["mono", "mem_available_bytes", "emulator_rss_bytes"] and len(rows) > 2


def run_with_host_lowered(tmp_path, monkeypatch, repro, rig, mem_available_kib, then=None, wait=600, **kw):
    """workflows.run.run of repro on rig in a thread while the host watch reads a copy of /proc/meminfo;
    once the workload has started, the copy says MemAvailable is mem_available_kib, then
    then() runs. Returns (run_dir, verdict)."""
    fake = tmp_path / "meminfo"
    real = pathlib.Path("/proc/meminfo").read_text()
    fake.write_text(real)
    monkeypatch.setattr(qemu_memory, "MEMINFO", str(fake))
    (tmp_path / "results").mkdir()
    out = {}

    def go():
        out["run"] = krun.run(repro, str(rig), "distro", results_root=tmp_path / "results", log=lambda *a: None, **kw)
    t = threading.Thread(target=go)
    t.start()
    try:
        deadline = time.monotonic() + wait
        while not list((tmp_path / "work").glob("*/share/ctl/*.out")) and time.monotonic() < deadline:
            time.sleep(0.5)
        fake.write_text(re.sub(r"MemAvailable:\s+\d+", f"MemAvailable:   {mem_available_kib}", real))
        if then:
            then()
    finally:
        t.join(1500)
    return out["run"]


@pytest.mark.guest
def test_host_oom_kill_of_a_sparse_guest_is_error(tmp_path, monkeypatch, no_leftover_qemu):
    """QEMU killed by SIGKILL while the host's sampled MemAvailable was near 0 (the sampler reads a
    copy of /proc/meminfo the test lowers): ERROR naming the host's OOM killer, never CRASHED."""
    def kill():
        time.sleep(2.5)                     # two samples of the low host
        for pid in qemu_pids(str(tmp_path)):
            subprocess.run(["kill", "-KILL", str(pid)], check=False)
    run_dir, verdict = run_with_host_lowered(tmp_path, monkeypatch, "selftest-hang", rig_file(tmp_path), 51200,
                                             kill, wait=240, sets={"timeout": "300"})
    assert verdict.verdict == "ERROR", verdict
    assert verdict.reason.startswith("host: the emulator (QEMU pid ") and "OOM killer" in verdict.reason, \
        verdict.reason
    assert "MemAvailable 50 MiB" in verdict.reason


@pytest.mark.guest
def test_flood_stops_at_the_host_budget_not_the_oom_killer(tmp_path, monkeypatch, no_leftover_qemu):
    """neg-dentry-flood's smoke preset on a 1 GB sparse guest whose host has no memory to spare
    once the workload starts (the watch reads a copy of /proc/meminfo the test lowers to the
    margin: a budget of 0): the flood stops at the host budget, a named stop, and the run is
    ERROR naming it; QEMU is never killed and the kernel is not judged. The preflight saw a host
    with room for the fixed cost and the 2% the flood touches outside its guard, not for its
    whole touch: it was admitted by the guard (requires.host_budget_guard)."""
    import workflows.preflight as kp
    fixed = qemu_memory.fixed_cost(1 << 30)[0]
    monkeypatch.setattr(kp, "mem_available", lambda: qemu_memory.margin() + fixed + (64 << 20))
    run_dir, verdict = run_with_host_lowered(tmp_path, monkeypatch, "neg-dentry-flood",
                                             rig_file(tmp_path, memory="1G"), qemu_memory.margin() // 1024,
                                             preset="smoke")
    flood = dict(t.partition("=")[::2] for t in (run_dir / "flood.txt").read_text().split())
    assert flood["stop_reason"] == "host_budget" and flood["host_budget_end_bytes"] == "0", flood
    assert verdict.verdict == "ERROR" and verdict.reason.startswith("instrument: host_budget_untold = 1"), verdict
    assert "the host's memory ended the flood before the RAM limit" in verdict.reason
    assert verdict.cause != "kernel"
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["rig_facts"]["host_budget_at_workload"] is not None and m["outcome"] == "completed", m["outcome"]
    pre = m["preflight"]
    assert pre["sparse_admitted_by"] == "host_budget_guard", pre
    assert pre["sparse_fixed"] + pre["sparse_guarded_touch"] <= pre["sparse_room"] < pre["sparse_fixed"] + \
        pre["sparse_touch"], pre
