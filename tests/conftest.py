"""Fixtures for krig's self-tests."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
KRIG = [sys.executable, "-m", "krig.cli"]


def qemu_pids() -> set:
    out = subprocess.run(["pgrep", "-f", "^qemu-system-x86_64 "], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


@pytest.fixture
def krig_cli(tmp_path):
    """Run the krig CLI as a user would; returns CompletedProcess (text)."""
    def run(*args, timeout=600, env=None):
        e = {**os.environ, **(env or {})}
        return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT,
                              timeout=timeout, env=e)
    return run


@pytest.fixture
def no_leftover_qemu():
    """Fail the test if it leaves a qemu process behind."""
    before = qemu_pids()
    yield
    left = qemu_pids() - before
    assert not left, f"qemu processes left behind: {sorted(left)}"
