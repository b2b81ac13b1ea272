"""The harness records into the guest's ring buffer (KRIG_TRACE_MODE=ring, the default) and
extracts it after the workload: a real guest, the real xfs-ail-storm workload, trace-cmd.

A buffer too small for the run keeps what fit, says so in one line, and the reader counts the
dropped events (which makes a run ERROR through the trace_lost_events instrument check); a
buffer that fits gives a trace that agrees with `trace-cmd report`."""
import subprocess

import pytest

from analysis.trace.tracedat import TraceFile
from conftest import ROOT
from kernels.catalog import load_kernel
from krig.reproducer import load_reproducer
from rigs import load_rig
from rigs.qemu.rig import GUEST_SHARE

pytestmark = pytest.mark.guest

INSERT = "xfs:xfs_ail_insert"


def kernel():
    """Debian's kernel: always there, so the test boots the same kernel on every machine."""
    return load_kernel("distro")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """One guest, two harness runs of a small xfs-ail-storm: 64 KiB per CPU, then 16 MiB."""
    repro = load_reproducer("xfs-ail-storm")
    env = {"WRITERS": "2", "FILES": "6000", "SUBDIRS": "4", "LOG_SIZE": "64m",
           "XFSSYNCD_CENTISECS": "720000", "BACKGROUND_IO": "0",
           "KRIG_TRACE_EVENTS": " ".join(repro.trace_events), "KRIG_COLLECT": "1"}
    rig = load_rig("qemu-default")
    k = kernel()
    out = {}
    with rig:
        rig.prepare(tmp_path_factory.mktemp("ring"), k, {"scratch_size": 1 << 30})
        rig.boot.boot(k, [])
        env.update(rig.scratch_env())
        for kb in (64, 16384):
            res = rig.command.run(["bash", f"{ROOT}/reproducers/lib/harness.sh",
                                   f"{ROOT}/reproducers/xfs-ail-storm", f"{GUEST_SHARE}/out/kb{kb}"],
                                  env={**env, "KRIG_TRACE_BUFFER_KB": str(kb)}, timeout=600)
            out[kb] = (res, rig.share / "out" / f"kb{kb}")
        rig.shutdown()
        yield out


def test_too_small_buffer_keeps_what_fit_and_says_so(two_runs):
    res, d = two_runs[64]
    assert res.returncode == 0, res.stderr.decode()
    lines = [ln for ln in res.stderr.decode().splitlines() if "did not fit" in ln]
    assert len(lines) == 1, res.stderr.decode()
    assert "trace.buffer_kb = 64 KiB per CPU" in lines[0] and "events dropped" in lines[0]
    tf = TraceFile(d / "trace.dat")
    assert 0 < tf.counts().get(INSERT, 0) < 6000
    assert tf.lost_events()["total"] > 0  # the instrument check sees it


def test_buffer_that_fits_agrees_with_trace_cmd(two_runs):
    res, d = two_runs[16384]
    assert res.returncode == 0, res.stderr.decode()
    assert "did not fit" not in res.stderr.decode()
    tf = TraceFile(d / "trace.dat")
    assert tf.lost_events()["total"] == 0
    n = tf.counts().get(INSERT, 0)
    assert n >= 6000  # every created inode is inserted into the AIL at least once
    text = subprocess.run(["trace-cmd", "report", "-i", str(d / "trace.dat")], capture_output=True,
                          text=True, timeout=300, check=True).stdout
    assert text.count(" xfs_ail_insert:") == n
