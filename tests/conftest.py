"""Fixtures for krig's self-tests."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from kernels.incremental import ensure_pristine
from kernels.spec import DEFAULT_TARBALL, tarball_sha256

ROOT = pathlib.Path(__file__).resolve().parent.parent
KRIG = [sys.executable, "-m", "krig.cli"]


def qemu_pids(mark: str = "") -> set:
    """qemu processes, only those whose argv mentions `mark` (a test's tmp dir) if given.

    Filtering by the test's own paths keeps concurrent, unrelated guests on the
    machine from failing (or hiding) a test's leftover check."""
    out = subprocess.run(["pgrep", "-af", "^qemu-system-x86_64 "], capture_output=True, text=True).stdout
    return {int(line.split()[0]) for line in out.splitlines() if mark in line}


def run_dir_of(p) -> pathlib.Path:
    """The run directory `krig run` printed."""
    for line in p.stdout.splitlines():
        if line.startswith("results: "):
            return pathlib.Path(line[len("results: "):])
    raise AssertionError(f"no results line in:\n{p.stdout}\n{p.stderr}")


def krig_run(tmp_path, *args, timeout=600):
    """`krig run ARGS` with results under tmp_path/results."""
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    return subprocess.run(KRIG + ["run", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)


def build_kernels(*names: str) -> None:
    """Build kernels as `make kernel KERNEL=...` builds them (a no-op when cached)."""
    p = subprocess.run([sys.executable, "-m", "kernels.build", "build", *names], cwd=ROOT,
                       capture_output=True, text=True, timeout=3600)
    last = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["no output"])[-1]
    assert p.returncode == 0, f"kernel build failed: {last}"


def rig_with_memory(directory: pathlib.Path, memory: str) -> pathlib.Path:
    """rigs/qemu-default.toml with another `memory`, written into directory (for `--rig PATH`)."""
    text = (ROOT / "rigs" / "qemu-default.toml").read_text()
    path = directory / f"qemu-{memory.lower()}.toml"
    path.write_text(re.sub(r"(?m)^memory = .*$", f'memory = "{memory}"', text))
    return path


def judged_as(verdict: dict, expected: str) -> bool:
    """The run got `expected`, or the judge said the host was too busy to blame the kernel.

    A TCG guest runs as fast as the host lets it; on a busy (shared CI) host a timing
    threshold marked host_sensitive can be crossed by the host alone, and krig then gives
    ERROR naming host contention instead of FAIL (docs/verdicts.md). That is what the code
    must decide given the load it saw, so a test expecting PASS accepts it; any other
    ERROR, and any FAIL, still fails the test."""
    if verdict["verdict"] == expected:
        return True
    return (expected == "PASS" and verdict["verdict"] == "ERROR"
            and verdict["reason"].startswith("host contention: "))


@pytest.fixture(scope="session")
def linux_source() -> pathlib.Path:
    """Debian's linux-source-6.1 extracted once into the real kernel cache (~20 s the first
    time; `make test` has already done it when building the CI kernels). Session-scoped,
    so it is made before any test points $KRIG_CACHE elsewhere."""
    tarball = pathlib.Path(DEFAULT_TARBALL)
    return ensure_pristine(tarball, tarball_sha256(tarball), log=lambda m: None)


@pytest.fixture
def krig_cli(tmp_path):
    """Run the krig CLI as a user would; returns CompletedProcess (text)."""
    def run(*args, timeout=600, env=None):
        e = {**os.environ, **(env or {})}
        return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT,
                              timeout=timeout, env=e)
    return run


@pytest.fixture
def no_leftover_qemu(tmp_path):
    """Fail the test if it leaves a qemu process behind (its run dirs live in tmp_path)."""
    yield
    left = qemu_pids(str(tmp_path))
    assert not left, f"qemu processes left behind: {sorted(left)}"
