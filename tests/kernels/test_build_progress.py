"""A kernel build says what it is doing while it runs (kernels/makelog.py run_logged inside
krig/progress.py waits): the phase, the last step make printed, the build's bound. A real make
of a tiny Makefile stands in for the kernel's: it prints a kbuild-like step, then waits for the
test to have seen its progress lines (bounded); nothing asserts a duration."""
import threading
import time

from kernels import sandbox
from kernels.makelog import run_logged
from krig import progress

FAST = 0.02
MAKEFILE = ("all:\n\t@echo '  CC      fs/dcache.o'\n"
            "\t@for i in $$(seq 1 1500); do [ -e stop ] && exit 0; sleep 0.02; done; exit 1\n")


def test_a_build_says_its_phase_and_last_step_while_it_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.INTERVAL_ENV, str(FAST))
    monkeypatch.setenv(progress.QUIET_ENV, "1")
    (tmp_path / "Makefile").write_text(MAKEFILE)
    said = tmp_path / "said.log"
    rc = []

    def build():
        with progress.waiting("kernel tiny-6.1 to build"):
            rc.append(run_logged(["make", "-s"], tmp_path, tmp_path / "build.log", "the build: make bzImage",
                                 limit=sandbox.wall(True)))
    with open(said, "a") as f, progress.run_log(f):
        t = threading.Thread(target=build)
        t.start()
        try:
            for _ in range(1500):
                if "fs/dcache.o" in said.read_text() and said.read_text().count("\n") >= 3:
                    break
                time.sleep(FAST)
        finally:
            (tmp_path / "stop").touch()
            t.join(60)
    assert rc == [0]
    lines = said.read_text().splitlines()
    step = [ln for ln in lines if "fs/dcache.o" in ln]
    assert len(lines) >= 3 and step, lines
    assert step[-1].startswith("krig: waiting for kernel tiny-6.1 to build, "), step[-1]
    assert ": the build: make bzImage, at CC fs/dcache.o, " in step[-1] and step[-1].endswith("(at most 360 min)")
    n = len(said.read_text().splitlines())
    time.sleep(FAST * 5)
    assert len(said.read_text().splitlines()) == n          # the build ended: nothing more is said
    assert not progress._stack
