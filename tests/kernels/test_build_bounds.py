"""A series' build is bounded whoever runs krig, root too (kernels/bounds.py, kernels/overlay.py):
its processes together by a cgroup's pids.max and memory limit, what it writes by the size of its
layer's own file system, and the ERROR names the limit it hit.

The builds are krig's real ones on tests/kernels/test_hostile_build.py's tiny source (a Makefile doing
next to nothing), with small limits set as a user would (KRIG_BUILD_PIDS, KRIG_BUILD_MEMORY,
KRIG_BUILD_DISK), so a limit that does not hold fails the test, never the machine: the series
tries a fixed number of short sleeps, or a fixed number of bytes. Each test then builds a benign
series the same way, and checks nothing is left: no cgroup, no loop device, no layer.

Covers: kernels/bounds.py, kernels/makelog.py."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT
from kernels import bounds, overlay, sandbox
from kernels import incremental as kt
from test_hostile_build import build_fails, host, makefile_series, sleeping, source  # noqa: F401 (host: a fixture)

MARK = "2.0625"             # the series' sleeps: `sleep 2.0625`, counted by their argv
SLEEPS = 60
PIDS = 20


def leftovers(host) -> dict:
    """What a build of this process may have left: its cgroups, loop devices on files in the
    test's directory, layers."""
    loops = subprocess.run(["losetup", "-l", "-n", "-O", "BACK-FILE"], capture_output=True, text=True).stdout
    layers = host / "cache" / "kbuild" / "layers"
    return {"cgroups": bounds.groups_of(os.getpid()),
            "loops": [ln for ln in loops.splitlines() if str(host) in ln],
            "layers": list(layers.iterdir()) if layers.is_dir() else []}


class Sampler:
    """Samples, every 20 ms while a build runs: the series' sleeps alive (by their argv), and
    the bytes the layers' scratch directories take on the host's disk (allocated blocks)."""

    def __init__(self, host):
        self.layers, self.sleeps, self.disk = host / "cache" / "kbuild" / "layers", 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.02):
            self.sleeps = max(self.sleeps, len(sleeping(MARK)))
            used = 0
            for top, _, files in os.walk(self.layers):
                for f in files:
                    try:
                        used += os.lstat(os.path.join(top, f)).st_blocks * 512
                    except OSError:
                        pass
            self.disk = max(self.disk, used)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


def a_normal_series_still_builds(host, layout):
    meta = kt.build_kernel(layout("mailed"), log=lambda m: None)
    assert meta["layer"] is True and meta["sandbox"] is True, meta
    assert leftovers(host) == {"cgroups": [], "loops": [], "layers": []}


def test_a_series_starting_more_processes_than_its_limit_is_an_error_naming_it(host, capsys, monkeypatch):
    monkeypatch.setenv("KRIG_BUILD_PIDS", str(PIDS))
    layout = source(host)
    makefile_series(host, f"for i in $$(seq {SLEEPS}); do sleep {MARK} & sleep 0.05; done; wait")
    kt.build_kernel(layout("base"), log=lambda m: None)
    with Sampler(host) as seen:
        err = build_fails(layout("stranger"), capsys)
    assert "kernel stranger: the series' build hit its process limit (pids.max 20, KRIG_BUILD_PIDS); log: " in err, err
    assert 0 < seen.sleeps < PIDS, f"{seen.sleeps} of the series' {SLEEPS} sleeps ran at once"
    assert leftovers(host) == {"cgroups": [], "loops": [], "layers": []}
    a_normal_series_still_builds(host, layout)


def test_a_series_writing_more_than_its_disk_limit_is_an_error_naming_it(host, capsys, monkeypatch):
    monkeypatch.setenv("KRIG_BUILD_DISK", "64M")
    layout = source(host)
    makefile_series(host, "head -c 134217728 /dev/zero > fs/big.o")          # 128 MiB
    kt.build_kernel(layout("base"), log=lambda m: None)
    with Sampler(host) as seen:
        err = build_fails(layout("stranger"), capsys)
    assert "kernel stranger: the series' build hit its disk limit (64 MiB, KRIG_BUILD_DISK); log: " in err, err
    assert 0 < seen.disk <= 64 << 20, f"the layer took {seen.disk} bytes of the host's disk"
    assert leftovers(host) == {"cgroups": [], "loops": [], "layers": []}
    a_normal_series_still_builds(host, layout)


def test_a_series_taking_more_memory_than_its_limit_is_an_error_naming_it(host, capsys, monkeypatch):
    monkeypatch.setenv("KRIG_BUILD_MEMORY", "96M")
    layout = source(host)
    makefile_series(host, "python3 -c 'b = bytearray(256 << 20)'")
    kt.build_kernel(layout("base"), log=lambda m: None)
    err = build_fails(layout("stranger"), capsys)
    assert "the series' build hit its memory limit (" in err and "96 MiB, KRIG_BUILD_MEMORY" in err, err
    assert "OOM killer" in err and leftovers(host) == {"cgroups": [], "loops": [], "layers": []}
    a_normal_series_still_builds(host, layout)


def test_a_series_running_longer_than_its_time_limit_is_an_error_naming_it(host, capsys, monkeypatch):
    monkeypatch.setattr(sandbox, "WALL_SECONDS", 3)
    layout = source(host)
    makefile_series(host, "sleep 60.1875")
    kt.build_kernel(layout("base"), log=lambda m: None)
    err = build_fails(layout("stranger"), capsys)
    assert "kernel stranger: the build hit its time limit (3 s of wall time, the sandbox's timeout); log: " in err, err
    assert sleeping("60.1875") == [] and leftovers(host) == {"cgroups": [], "loops": [], "layers": []}
    a_normal_series_still_builds(host, layout)


@pytest.mark.parametrize("var, value, said", [
    ("KRIG_BUILD_PIDS", "lots", "KRIG_BUILD_PIDS: expected a number of processes, at least 8, got 'lots'"),
    ("KRIG_BUILD_PIDS", "2", "KRIG_BUILD_PIDS: expected a number of processes, at least 8, got '2'"),
    ("KRIG_BUILD_DISK", "1M", "KRIG_BUILD_DISK: at least 32 MiB, got '1M'"),
    ("KRIG_BUILD_MEMORY", "much", "KRIG_BUILD_MEMORY: expected a size like 512M, 16G or 1T, got 'much'"),
])
def test_a_bad_limit_is_one_line_before_anything_is_built(host, capsys, monkeypatch, var, value, said):
    monkeypatch.setenv(var, value)
    layout = source(host)
    err = build_fails(layout("mailed"), capsys)
    assert err == f"krig: error: {said}\n"
    assert not (host / "cache" / "kbuild" / "trees").exists() or not any((host / "cache" / "kbuild" / "trees").iterdir())


def test_where_the_limits_cannot_be_set_a_series_is_refused_and_krigs_own_kernel_builds(host, capsys, monkeypatch):
    monkeypatch.setattr(overlay, "problem", lambda: "its disk limit is a loop-mounted file system, which needs root")
    layout = source(host)
    err = build_fails(layout("mailed"), capsys)
    assert "kernel mailed: " in err and "is built only within its limits" in err and "needs root" in err, err
    assert kt.build_kernel(layout("base"), log=lambda m: None)["layer"] is False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_an_interrupted_series_build_leaves_nothing_behind(host, sig):
    """Ctrl-C in the middle of the series' make: the build ends, its group, loop device and layer
    go. A krig killed there takes the build with it (its processes die with krig); its group,
    loop device and layer are left to the next series' build, which removes them."""
    layout = source(host)
    makefile_series(host, "sleep 60.0625")
    kt.build_kernel(layout("base"), log=lambda m: None)
    code = ("import pathlib, sys; sys.path.insert(0, sys.argv[1]); from kernels import incremental, spec; "
            "incremental.build_kernel(spec.resolve_spec('stranger', kernel_dir=pathlib.Path(sys.argv[2]), "
            "repro_dir=pathlib.Path(sys.argv[3])), log=print)")
    p = subprocess.Popen([sys.executable, "-c", code, str(ROOT), str(host / "kernels"), str(host / "reproducers")],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(600):                # until the series' make sleeps, in its layer
            if sleeping("60.0625"):
                break
            assert p.poll() is None, p.stdout.read()
            time.sleep(0.1)
        else:
            raise AssertionError("the series' build did not start in 60 s")
        assert bounds.groups_of(p.pid) and leftovers(host)["loops"] and leftovers(host)["layers"]
        p.send_signal(sig)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if sig == signal.SIGINT:
        assert p.returncode != 0 and "KeyboardInterrupt" in out, out
    else:
        for _ in range(300):                # SIGKILL to timeout(1), then bwrap's namespace: bounded
            if not sleeping("60.0625"):
                break
            time.sleep(0.1)
        assert not sleeping("60.0625"), "a killed krig's build is left running"
        assert bounds.groups_of(p.pid) and leftovers(host)["layers"], "the killed build's group and layer stay"
        a_normal_series_still_builds(host, layout)
    assert bounds.groups_of(p.pid) == [] and sleeping("60.0625") == []
    assert leftovers(host) == {"cgroups": [], "loops": [], "layers": []}


def test_the_limits_can_be_set_here():
    """make setup runs krig as root on a host with cgroups and loop devices: a series can be built."""
    assert overlay.problem() is None
