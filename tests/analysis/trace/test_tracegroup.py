"""`krig trace stats --group-by` streams: groups counted batch by batch (analysis.trace.tracecli
GroupCounter over TraceFile.field_batches), with compressed pages decompressed ahead in a
worker threads (analysis.trace.tracepages).  The oracle is `trace-cmd report` on the same file.

Covers: analysis/trace/tracepages.py."""
import io
import json
import os
import re
import subprocess
import threading
from collections import Counter

import numpy as np
import pytest

from analysis.trace import tracepages
from analysis.trace.tracecli import GroupCounter, group_counts, stats_main
from analysis.trace.tracedat import TraceError, TraceFile
from tracegen import write_synthetic
from test_tracedat import FEATURES, GUEST, TEMPLATE, XFS, needs_trace_cmd



def synth(path, n, **kw):
    args = {**FEATURES, "extra": [("xfs:xfs_ail_move", 0.1)], "cpus": 3, **kw}
    write_synthetic(GUEST, path, n, **args)
    return str(path)


def report_lsn_groups(path) -> Counter:
    """new lsn of every xfs_ail_insert line of `trace-cmd report`, counted."""
    text = subprocess.run(["trace-cmd", "report", "-i", str(path)], capture_output=True,
                          text=True, timeout=120, check=True).stdout
    return Counter(int(c) << 32 | int(b) for c, b in
                   re.findall(r" xfs_ail_insert: .*?new lsn (\d+)/(\d+)", text))


@needs_trace_cmd
@pytest.mark.parametrize("version,compression", [(7, "zstd"), (6, None)])
def test_group_by_matches_trace_cmd(tmp_path, monkeypatch, version, compression):
    """Every group and its count equal trace-cmd's, across many small batches (so the
    prefetch ring of buffers turns over many times, within and across cpus)."""
    path = synth(tmp_path / "g.dat", 30_000, version=version, compression=compression)
    monkeypatch.setattr(TraceFile, "BATCH_BYTES", 16 << 10)
    out = io.StringIO()
    assert stats_main(path, XFS, "new_lsn", True, out=out) == 0
    doc = json.loads(out.getvalue())
    want = report_lsn_groups(path)
    assert doc["count"] == sum(want.values()) > 20_000
    assert dict((v, c) for v, c in doc["groups"]) == dict(want)
    counts = [c for _, c in doc["groups"]]
    assert counts == sorted(counts, reverse=True) and len(counts) > 30


def test_streamed_groups_equal_whole_array(tmp_path):
    """The streamed counter gives what grouping the whole column at once gives, for a
    number with many distinct values (compaction), a char[] field and a __data_loc one."""
    path = synth(tmp_path / "s.dat", 20_000)
    tf = TraceFile(path)
    for event, field in ((XFS, "lip"), (XFS, "new_lsn"), (XFS, "type")):
        g = GroupCounter()
        for batch in TraceFile(path).field_batches(event, (field,)):
            g.add(batch[field])
        assert g.groups() == group_counts(tf.columns(event, (field,), with_ts=False)[field])
    sched = TraceFile(TEMPLATE)
    for event, field in (("sched:sched_switch", "next_comm"),
                         ("sched:sched_process_exec", "filename")):
        g = GroupCounter()
        for batch in sched.field_batches(event, (field,)):
            g.add(batch[field])
        assert g.groups() == group_counts(sched.columns(event, (field,), with_ts=False)[field])


def test_compaction_keeps_counts():
    rng = np.random.default_rng(3)
    vals = rng.integers(0, 400_000, 1_200_000)
    g = GroupCounter()
    for part in np.array_split(vals, 37):
        g.add(part)
    assert g.total == vals.size
    assert g.groups() == group_counts(vals)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_prefetch_equals_plain_reads_and_counts_after(tmp_path, monkeypatch, threads):
    """Decompressing threads hand the batches over in file order, whatever their number
    (3 on a 2-core machine: more threads than cores), across many small batches."""
    monkeypatch.setattr(tracepages, "DECOMPRESS_THREADS", threads)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(TraceFile, "BATCH_BYTES", 16 << 10)
    path = synth(tmp_path / "p.dat", 20_000)
    a, b = TraceFile(path), TraceFile(path)
    ev = a.event(XFS)
    fa = [c for _, c in a._walk(ev.id, a._fields(ev, ("lip",)), False, False, prefetch=True)]
    fb = [c for _, c in b._walk(ev.id, b._fields(ev, ("lip",)), False, False, prefetch=False)]
    assert all((x["lip"] == y["lip"]).all() for x, y in zip(fa, fb)) and len(fa) == len(fb)
    assert a.counts() == b.counts() and a.lost_events() == b.lost_events()


def test_error_in_worker_is_one_line_and_no_thread_is_left(tmp_path):
    """A corrupt compressed chunk found by the decompressing thread is the reader's
    TraceError; abandoning a half-read trace stops the thread too."""
    path = synth(tmp_path / "c.dat", 20_000)
    tf = TraceFile(path)
    _, off, _ = tf._cpu_data[1]
    data = bytearray(open(path, "rb").read())
    data[off + 20:off + 60] = b"\xff" * 40  # inside cpu 1's first zstd frame
    bad = tmp_path / "bad.dat"
    bad.write_bytes(bytes(data))
    before = threading.active_count()
    with pytest.raises(TraceError, match="corrupt compressed chunk 0") as ei:
        stats_main(str(bad), XFS, "new_lsn", True, out=io.StringIO())
    assert "\n" not in str(ei.value) and str(bad) in str(ei.value)
    it = TraceFile(path).field_batches(XFS, ("new_lsn",))
    next(it)
    it.close()
    assert threading.active_count() == before
