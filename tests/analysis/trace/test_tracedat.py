"""Tests for the trace.dat reader (analysis.trace.tracedat), writer (tracegen) and `trace stats`.

Two small real traces (trace-cmd 3.1.6, v7 zstd) live in tests/data, trimmed by
    tracegen.trim_trace(REAL, DST, pages_per_cpu=16, spread=True, systems=...)
to their header page, event formats and 16 spread-out ring-buffer pages per cpu:
  xfs_template_v7.dat       krig's QEMU guest (Debian 6.1 kernel): xfs_ail_* events
  host618_sched_xfs_v7.dat  a 6.18 host: xfs_ail_* and sched_switch, with the sched
                            and xfs formats (char[] and __data_loc fields)
Bigger files are synthesised from them into tmp_path.  `trace-cmd report` is the
oracle where it is installed; a plain-Python kbuffer walk is the oracle everywhere.

Covers: analysis/trace/formats.py, analysis/trace/header.py, analysis/trace/tracecli.py.
"""
import io
import json
import pathlib
import re
import struct
import subprocess

import numpy as np
import pytest

from analysis.trace.tracecli import stats_main
from analysis.trace.tracedat import TraceError, TraceFile
from tracegen import trim_trace, write_synthetic
from conftest import require_program

DATA = pathlib.Path(__file__).resolve().parents[2] / "data"
GUEST = DATA / "xfs_template_v7.dat"
TEMPLATE = DATA / "host618_sched_xfs_v7.dat"
XFS = "xfs:xfs_ail_insert"
XFS_FIELDS = ("dev", "lip", "type", "flags", "old_lsn", "new_lsn")
# `trace-cmd report` is the oracle; `make setup` installs it, so a missing one fails the test
needs_trace_cmd = pytest.mark.usefixtures("trace_cmd")
LINE = re.compile(r"^\s*(.*?)-(\d+)\s+\[(\d+)\]\s+(\d+)\.(\d+):\s+(\w+):\s*(.*)$")
# every record kind a kernel writes, densely: time extends, absolute time stamps,
# length-word headers, discarded events, plus a second and third event type
FEATURES = dict(extra=[("sched:sched_switch", 0.2), ("sched:sched_process_exec", 0.05)],
                extend_every=500, abs_every=777, big_every=97, discard_every=301, cpus=3)


@pytest.fixture(scope="module")
def template():
    return TraceFile(TEMPLATE)


@pytest.fixture(scope="module")
def guest():
    return TraceFile(GUEST)


def synth(template, path, n=6000, **kw):
    args = {**FEATURES, **kw}
    write_synthetic(template, path, n, **args)
    return str(path)


def report(path, raw=True):
    """Parse `trace-cmd report -t [-R] -i path` into (cpu, ts, event, {field: text}, pid)."""
    r = subprocess.run(["trace-cmd", "report", "-t"] + (["-R"] if raw else []) + ["-i", str(path)],
                       capture_output=True, text=True, timeout=120, check=True)
    rows = []
    for line in r.stdout.splitlines():
        m = LINE.match(line)
        if m:
            rows.append((int(m[3]), int(m[4]) * 10**9 + int(m[5]), m[6],
                         dict(re.findall(r"(\w+)=(\S*)", m[7])), int(m[2])))
    return rows, r.stdout


def check_against_report(tf, rows, event, fields):
    """Our columns for `event` equal trace-cmd's, row by row (in report order)."""
    name = event.split(":")[1]
    rows = [r for r in rows if r[2] == name]
    c = tf.columns(event, tuple(fields) + ("common_pid",))
    assert len(c["ts"]) == len(rows)
    fmt = tf.event(event).fields
    for i, (cpu, ts, _, kv, pid) in enumerate(rows):
        assert (int(c["cpu"][i]), int(c["ts"][i]), int(c["common_pid"][i])) == (cpu, ts, pid), i
        for f in fields:
            got, want, fl = c[f][i], kv[f], fmt[f]
            if fl.kind in ("str", "dataloc", "relloc"):
                assert got == want, (i, f)
            elif fl.size == 8 and fl.signed:  # report -R prints only the low 32 bits
                assert int(got) & 0xFFFFFFFF == int(want, 0) & 0xFFFFFFFF, (i, f)
            else:
                assert int(got) % (1 << 8 * fl.size) == int(want, 0) % (1 << 8 * fl.size), (i, f)
    return len(rows)


def reference_walk(tf):
    """Record-by-record kbuffer walk in plain Python: {type id: [(cpu, ts)]}."""
    e, ps, ds, cs = tf._e, tf.page_size, tf._data_start, tf.commit_size
    out = {}
    for cpu, off, size in tf._cpu_data:
        for buf, n in tf._batches(off, size):
            data = buf.tobytes()
            for p in range(0, n * ps, ps):
                ts = struct.unpack_from(e + "Q", data, p)[0]
                commit = struct.unpack_from(e + ("Q" if cs == 8 else "I"), data, p + 8)[0]
                pos, end = p + ds, p + ds + (commit & ((1 << 27) - 1))
                while pos < end:
                    w, a0 = struct.unpack_from(e + "II", data, pos)
                    tl, delta = (w >> 27, w & 0x7FFFFFF) if e == ">" else (w & 31, w >> 5)
                    if tl == 31:
                        ts = (a0 << 27) | delta
                        pos += 8
                        continue
                    ts += delta
                    if tl == 29:
                        pos += 4 + a0
                    elif tl == 30:
                        ts += a0 << 27
                        pos += 8
                    else:
                        dpos, length = (pos + 8, (a0 - 4 + 3) & ~3) if tl == 0 else (pos + 4, tl * 4)
                        tid = struct.unpack_from(e + "H", data, dpos)[0]
                        out.setdefault(tid, []).append((cpu, ts))
                        pos = dpos + length
    return out


# ------------------------------------------------------------- real data
def test_guest_template_header(guest):
    assert guest.version == 7 and guest.compression == "zstd"
    assert guest.cpus == 2 and guest.page_size == 4096 and guest.long_size == 8
    assert b"6.1." in guest.options[5][0]  # UNAME: the Debian 6.1 guest kernel
    names = guest.event_names()
    assert XFS in names and "ftrace:function" in names
    assert set(guest.counts()) == {XFS, "xfs:xfs_ail_move", "xfs:xfs_log_force"}
    assert guest.lost_events() == {"pages_with_loss": 0, "lost_in_pages": 0, "pages_without_count": 0,
                                   "overrun": 0, "dropped": 0, "total": 0}
    assert [s[0] for s in guest.section_table] == [16, 17, 18, 19, 20, 21, 0, 3, 0, 15]


@needs_trace_cmd
@pytest.mark.parametrize("path", [GUEST, TEMPLATE], ids=["guest", "host"])
def test_real_trace_matches_report(path):
    tf = TraceFile(path)
    rows, _ = report(path)
    want = {}
    for r in rows:
        want[r[2]] = want.get(r[2], 0) + 1
    assert {k.split(":")[1]: v for k, v in tf.counts().items()} == want
    assert check_against_report(tf, rows, XFS, XFS_FIELDS) > 100
    if "sched:sched_switch" in tf.counts():
        assert check_against_report(tf, rows, "sched:sched_switch", (
            "prev_comm", "prev_pid", "prev_state", "next_comm", "next_pid")) > 1000


@pytest.mark.parametrize("path", [GUEST, TEMPLATE], ids=["guest", "host"])
def test_real_trace_matches_reference_walk(path):
    tf = TraceFile(path)
    ref = reference_walk(tf)
    for name, n in tf.counts().items():
        ev = tf.event(name)
        assert len(ref[ev.id]) == n
        c = tf.columns(name)
        cpu_ts = sorted(ref[ev.id], key=lambda x: (x[1], x[0]))
        assert [(int(a), int(b)) for a, b in zip(c["cpu"], c["ts"])] == cpu_ts


@needs_trace_cmd
def test_v6_converted_by_trace_cmd_reads_the_same(guest, tmp_path):
    v6 = tmp_path / "v6.dat"
    subprocess.run(["trace-cmd", "convert", "-i", str(GUEST), "-o", str(v6),
                    "--file-version", "6"], check=True, capture_output=True, timeout=60)
    tf = TraceFile(v6)
    assert tf.version == 6 and tf.compression is None and tf.cpus == 2
    assert tf.counts() == guest.counts()
    a, b = tf.columns(XFS, XFS_FIELDS), guest.columns(XFS, XFS_FIELDS)
    for k in a:
        assert (a[k] == b[k]).all(), k


# ------------------------------------------------------- synthesised data
@pytest.mark.parametrize("version,compression", [(6, None), (7, "zstd"), (7, None)])
def test_synthetic_matches_reference_walk(template, tmp_path, version, compression):
    path = synth(template, tmp_path / "s.dat", version=version, compression=compression)
    tf = TraceFile(path)
    assert tf.version == version and tf.compression == compression
    ref = reference_walk(tf)
    counts = tf.counts()
    assert sum(counts.values()) == 6000 and counts[XFS] > 4000
    for name, n in counts.items():
        ev = tf.event(name)
        c = tf.columns(name)
        assert sorted(zip(c["cpu"].tolist(), c["ts"].tolist()), key=lambda x: (x[1], x[0])) == \
            sorted(ref[ev.id], key=lambda x: (x[1], x[0]))
        assert (np.diff(c["ts"].astype(np.int64)) >= 0).all()


@needs_trace_cmd
@pytest.mark.parametrize("version,compression,big_endian,long_size",
                         [(6, None, False, 8), (7, "zstd", False, 8), (7, None, False, 8),
                          (6, None, True, 8), (7, "zstd", False, 4), (7, "zstd", True, 4)])
def test_synthetic_matches_report(template, tmp_path, version, compression, big_endian,
                                  long_size):
    path = synth(template, tmp_path / "s.dat", version=version, compression=compression,
                 big_endian=big_endian, long_size=long_size)
    tf = TraceFile(path)
    assert (tf.big_endian, tf.long_size) == (big_endian, long_size)
    rows, _ = report(path)
    assert len(rows) == 6000
    assert check_against_report(tf, rows, XFS, XFS_FIELDS) == tf.counts()[XFS]
    check_against_report(tf, rows, "sched:sched_switch", ("prev_comm", "prev_pid", "next_comm"))
    check_against_report(tf, rows, "sched:sched_process_exec", ("filename", "pid", "old_pid"))
    # the full 64-bit lsn, from the formatted output ("new lsn CYCLE/BLOCK")
    _, text = report(path, raw=False)
    lsn = [int(a) << 32 | int(b) for a, b in re.findall(r"new lsn (\d+)/(\d+)", text)]
    assert lsn == tf.columns(XFS, ("new_lsn",))["new_lsn"].tolist()


@needs_trace_cmd
@pytest.mark.parametrize("version,compression", [(6, None), (7, "zstd")])
def test_synthetic_from_guest_matches_report(guest, tmp_path, version, compression):
    path = synth(guest, tmp_path / "g.dat", n=8000, version=version, compression=compression,
                 extra=[("xfs:xfs_ail_move", 0.1)], cpus=2)
    tf = TraceFile(path)
    rows, _ = report(path)
    assert len(rows) == 8000
    n = check_against_report(tf, rows, XFS, XFS_FIELDS)
    assert n + check_against_report(tf, rows, "xfs:xfs_ail_move", XFS_FIELDS) == 8000


def test_fast_path_equals_step_walker(template, tmp_path):
    path = synth(template, tmp_path / "s.dat", n=20000, cpus=2)
    fast, slow = TraceFile(path), TraceFile(path)
    slow.FAST_RUNS = False
    assert fast.counts() == slow.counts()
    for name in fast.counts():
        a, b = fast.columns(name, ("common_pid",)), slow.columns(name, ("common_pid",))
        assert all((a[k] == b[k]).all() for k in a)


def test_many_batches_and_uniform_pages(template, tmp_path):
    """Plain single-event pages (the fast path) across several read batches."""
    path = synth(template, tmp_path / "u.dat", n=150_000, extra=(), extend_every=0,
                 abs_every=0, big_every=0, discard_every=0, cpus=2)
    tf = TraceFile(path)
    tf.BATCH_BYTES = 64 << 10
    assert tf.counts() == {XFS: 150_000}
    c = tf.columns(XFS, ("new_lsn",))
    assert len(c["ts"]) == 150_000 and (np.diff(c["ts"].astype(np.int64)) >= 0).all()
    runs = np.flatnonzero(np.diff(c["new_lsn"][c["cpu"] == 0]))  # lsn comes in runs
    assert 50 < runs.size < 5000


def test_zlib_round_trip(template, tmp_path):
    a = TraceFile(synth(template, tmp_path / "z.dat", compression="zlib"))
    b = TraceFile(synth(template, tmp_path / "n.dat", compression=None))
    assert a.compression == "zlib" and a.counts() == b.counts()
    assert (a.columns(XFS, ("lip",))["lip"] == b.columns(XFS, ("lip",))["lip"]).all()


def test_lost_events(template, tmp_path):
    path = synth(template, tmp_path / "l.dat", n=5000, version=6, compression=None, cpus=2,
                 lost={0: {1: 1234, 3: None}, 1: {0: 7}},
                 cpustats={0: {"overrun": 2000, "dropped": 5}, 1: {"overrun": 3}})
    tf = TraceFile(path)
    assert tf.lost_events() == {"pages_with_loss": 3, "lost_in_pages": 1241, "pages_without_count": 1,
                                "overrun": 2003, "dropped": 5, "total": 2000 + 5 + 7}
    assert tf.cpustats[0]["overrun"] == 2000 and tf.cpustats[0]["dropped events"] == 5
    assert sum(tf.counts().values()) == 5000
    require_program("trace-cmd", "trace-cmd")
    _, text = report(path)
    assert "CPU:0 [1234 EVENTS DROPPED]" in text and "CPU:1 [7 EVENTS DROPPED]" in text
    assert "CPU:0 [EVENTS DROPPED]" in text


def test_lost_pages_without_count_are_lost_events(template, tmp_path):
    """A page flagged "events missed" without a stored count and no CPUSTAT overrun still
    means the trace is incomplete: each such page counts as at least one lost event."""
    path = synth(template, tmp_path / "n.dat", n=3000, version=6, compression=None, cpus=2,
                 lost={0: {1: None, 2: None}}, cpustats={})
    lost = TraceFile(path).lost_events()
    assert lost["pages_with_loss"] == 2 and lost["pages_without_count"] == 2
    assert lost["lost_in_pages"] == 0 and lost["overrun"] == 0 and lost["total"] == 2


# ------------------------------------------------------------------ errors
def one_line(e: TraceError, path) -> str:
    msg = str(e)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_bad_magic_and_version(tmp_path):
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"not a trace at all" * 10)
    with pytest.raises(TraceError) as ei:
        TraceFile(bad)
    assert "bad magic" in one_line(ei.value, bad)
    data = bytearray(GUEST.read_bytes())
    data[10:11] = b"9"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceError) as ei:
        TraceFile(bad)
    assert "unsupported trace.dat version 9" in one_line(ei.value, bad)
    with pytest.raises(TraceError, match="cannot open"):
        TraceFile(tmp_path / "missing.dat")
    (tmp_path / "empty.dat").write_bytes(b"")
    with pytest.raises(TraceError, match="truncated"):
        TraceFile(tmp_path / "empty.dat")


@pytest.mark.parametrize("version,compression", [(6, None), (7, "zstd")])
def test_truncated(template, tmp_path, version, compression):
    full = pathlib.Path(synth(template, tmp_path / "f.dat", version=version,
                              compression=compression)).read_bytes()
    tf = TraceFile(tmp_path / "f.dat")
    data_off = min(off for _, off, size in tf._cpu_data if size)
    cuts = [20, 200, 3000, data_off + 5000, len(full) - 100 if version == 6 else len(full) - 30]
    for cut in cuts:
        p = tmp_path / f"cut{cut}.dat"
        p.write_bytes(full[:cut])
        with pytest.raises(TraceError) as ei:
            TraceFile(p).counts()
        msg = one_line(ei.value, p)
        assert "truncated" in msg or "corrupt" in msg, msg


def test_garbage_pages(template, tmp_path):
    path = synth(template, tmp_path / "g.dat", version=6, compression=None)
    tf = TraceFile(path)
    _, off, _ = tf._cpu_data[1]
    good = pathlib.Path(path).read_bytes()
    rng = np.random.default_rng(5)
    page = bytearray(good)
    page[off + 4096:off + 8192] = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    bad = tmp_path / "garbage.dat"
    bad.write_bytes(bytes(page))
    with pytest.raises(TraceError) as ei:
        TraceFile(bad).counts()
    assert "corrupt page: cpu 1" in one_line(ei.value, bad)
    # a plausible commit but an event that runs off the end of the data
    page = bytearray(good)
    struct.pack_into("<QQI", page, off, 1000, 40, 28 | (1 << 5))
    bad.write_bytes(bytes(page))
    with pytest.raises(TraceError, match="runs past the end"):
        TraceFile(bad).columns(XFS)


def test_unknown_event_and_field(template):
    with pytest.raises(TraceError) as ei:
        template.columns("xfs:xfs_ail_insrt")
    msg = one_line(ei.value, TEMPLATE)
    assert "unknown event 'xfs:xfs_ail_insrt'" in msg and XFS in msg
    with pytest.raises(TraceError) as ei:
        template.columns(XFS, ("new_lns",))
    msg = one_line(ei.value, TEMPLATE)
    assert "no field 'new_lns'" in msg and "new_lsn" in msg and "lip" in msg


def test_columns_types(template):
    c = template.columns("sched:sched_switch", ("prev_comm", "prev_pid", "prev_state"))
    assert c["ts"].dtype == np.uint64 and c["prev_pid"].dtype == np.int32
    assert c["prev_state"].dtype == np.int64 and c["prev_comm"].dtype == object
    assert isinstance(c["prev_comm"][0], str) and "swapper/0" in set(c["prev_comm"])
    assert template.columns("xfs:xfs_log_force")["ts"].size == 0  # format known, no records


# ---------------------------------------------------------------- stats CLI
def test_stats_main_json(template, tmp_path):
    path = synth(template, tmp_path / "s.dat", n=8000, cpus=2)
    out = io.StringIO()
    assert stats_main(path, XFS, "new_lsn", True, out=out) == 0
    doc = json.loads(out.getvalue())
    lsn = TraceFile(path).columns(XFS, ("new_lsn",))["new_lsn"]
    assert doc["event"] == XFS and doc["count"] == lsn.size == sum(c for _, c in doc["groups"])
    counts = [c for _, c in doc["groups"]]
    assert counts == sorted(counts, reverse=True)
    v, c = doc["groups"][0]
    assert (lsn == v).sum() == c
    assert doc["lost_events"]["total"] == 0
    out = io.StringIO()
    stats_main(path, XFS, None, True, out=out)
    assert json.loads(out.getvalue())["count"] == lsn.size


def test_stats_main_text_and_errors(template):
    out = io.StringIO()
    stats_main(str(TEMPLATE), "sched:sched_switch", "next_comm", False, out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "sched:sched_switch: 1267 events"
    assert lines[1].split() == ["next_comm", "count"]
    with pytest.raises(TraceError):
        stats_main(str(TEMPLATE), "sched:nope", None, False)
    with pytest.raises(TraceError, match="no field"):
        stats_main(str(TEMPLATE), XFS, "nope", True)


def test_trim_keeps_real_pages(template, tmp_path):
    small = tmp_path / "small.dat"
    trim_trace(template, small, pages_per_cpu=2, version=6, compression=None)
    tf = TraceFile(small)
    assert tf.version == 6 and 0 < sum(tf.counts().values()) < sum(template.counts().values())
