"""The C hot loops (analysis/trace/kwalk.c) against the Python code they stand in for.

The numpy walker (analysis/trace/kbuffer.py) is itself checked against `trace-cmd report`
and a plain-Python walk in tests/analysis/trace/test_tracedat.py; here the C walk must give the same
events (type id, data offset, time stamp), the same loss counts and the same one-line
errors, on every record kind a kernel writes, both byte orders and both commit sizes;
and the C decompression of zstd chunks the same pages and errors as python-zstandard.

Covers: analysis/trace/kbuffer.py, analysis/trace/native.py.
"""
import pathlib
import struct

import numpy as np
import pytest

from analysis.trace import kbuffer, native, tracepages
from analysis.trace.tracedat import TraceError, TraceFile
from tracegen import write_synthetic

DATA = pathlib.Path(__file__).resolve().parents[2] / "data"
TEMPLATE = DATA / "host618_sched_xfs_v7.dat"
XFS = "xfs:xfs_ail_insert"
FEATURES = dict(extra=[("sched:sched_switch", 0.2), ("sched:sched_process_exec", 0.05)],
                extend_every=500, abs_every=777, big_every=97, discard_every=301, cpus=3)


def test_native_walker_is_built():
    """`make helpers` (a prerequisite of make test) builds the library; a silent
    fallback to numpy here would leave the C walk untested."""
    assert native.available(), f"{native.PATH} is missing or stale: run make helpers"


def walks(path):
    """(native, numpy) walk of every batch of the file: [(tid, pos, ts, loss)] each."""
    tf = TraceFile(path)
    tf.BATCH_BYTES = 64 << 10  # several batches per cpu
    out = {True: [], False: []}
    for in_c in (True, False):
        kb = kbuffer.PageDecoder(tf.page_size, tf._data_start, tf.commit_size, tf.big_endian,
                                 tf._err, native=in_c)
        assert kb.native == in_c
        for cpu, buf, n, page0 in tf._pages().all_batches(tf._cpu_data, tf._data_compressed,
                                                         prefetch=False):
            out[in_c].append(kb.walk(buf, n, cpu, page0, True, True))
    return out[True], out[False]


def same_events(a, b):
    """The same events, whatever order each walker gives them in."""
    (ta, pa, sa, la), (tb, pb, sb, lb) = a, b
    assert la == lb
    assert (np.diff(pa) > 0).all()  # the C walk is in file order
    ob = np.argsort(pb, kind="stable")
    assert pa.tolist() == pb[ob].tolist()
    assert ta.tolist() == tb[ob].tolist()
    assert sa.tolist() == sb[ob].tolist()


@pytest.mark.parametrize("big_endian,long_size", [(False, 8), (True, 8), (False, 4), (True, 4)])
def test_every_record_kind(tmp_path, big_endian, long_size):
    path = tmp_path / "s.dat"
    write_synthetic(TEMPLATE, path, 30_000, big_endian=big_endian, long_size=long_size,
                    **FEATURES)
    native, ref = walks(path)
    assert len(native) == len(ref) > 3
    for a, b in zip(native, ref):
        same_events(a, b)
    assert sum(a[0].size for a in native) == 30_000


def test_uniform_pages_and_loss(tmp_path):
    path = tmp_path / "u.dat"
    write_synthetic(TEMPLATE, path, 40_000, extend_every=0, abs_every=0, big_every=0,
                    discard_every=0, cpus=2, version=6, compression=None,
                    lost={0: {1: 1234, 3: None}, 1: {0: 7}})
    native, ref = walks(path)
    for a, b in zip(native, ref):
        same_events(a, b)
    assert [sum(w[3][i] for w in native) for i in range(3)] == [3, 1241, 1]


def test_trace_file_results_agree(tmp_path):
    """What users see (counts, columns, loss) is the same with either walker."""
    path = tmp_path / "c.dat"
    write_synthetic(TEMPLATE, path, 20_000, **FEATURES)
    fast, ref = TraceFile(path), TraceFile(path)
    ref.NATIVE = False
    assert fast.counts() == ref.counts()
    for name in fast.counts():
        a, b = fast.columns(name, ("common_pid",)), ref.columns(name, ("common_pid",))
        assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a), name
    assert fast.lost_events() == ref.lost_events()


def errors(path):
    msgs = []
    for in_c in (True, False):
        tf = TraceFile(path)
        tf.NATIVE = in_c
        with pytest.raises(TraceError) as ei:
            tf.columns(XFS)
        msgs.append(str(ei.value))
    return msgs


def test_corrupt_pages_give_the_same_error(tmp_path):
    path = tmp_path / "g.dat"
    write_synthetic(TEMPLATE, path, 6000, version=6, compression=None, **FEATURES)
    tf = TraceFile(path)
    _, off, _ = tf._cpu_data[1]
    good = path.read_bytes()
    bad = tmp_path / "bad.dat"
    cases = {  # (offset in the file, bytes): what the error says
        "claims": (off + 4096, struct.pack("<QQ", 1000, 5000)),
        "runs past the end": (off, struct.pack("<QQI", 1000, 40, 28 | (1 << 5))),
        "negative length": (off, struct.pack("<QQII", 1000, 40, 0, 2)),
    }
    for what, (at, patch) in cases.items():
        page = bytearray(good)
        page[at:at + len(patch)] = patch
        bad.write_bytes(bytes(page))
        native, ref = errors(bad)
        assert native == ref and what in native and "cpu 1" in native and "\n" not in native


def test_zstd_chunks_decompress_as_python_zstandard(tmp_path):
    path = tmp_path / "z.dat"
    write_synthetic(TEMPLATE, path, 20_000, **FEATURES)
    pages = {}
    for nat in (True, False):
        tf = TraceFile(path)
        tf.BATCH_BYTES = 64 << 10
        src = tf._pages()
        src.native = nat
        pages[nat] = [(cpu, page0, buf[:n * tf.page_size].tobytes()) for cpu, buf, n, page0
                      in src.all_batches(tf._cpu_data, True, prefetch=False)]
    assert len(pages[True]) > 4 and pages[True] == pages[False]


def test_corrupt_chunks_give_the_same_error(tmp_path):
    path = tmp_path / "z.dat"
    write_synthetic(TEMPLATE, path, 20_000, **FEATURES)
    tf = TraceFile(path)
    _, off, _ = tf._cpu_data[1]
    good = path.read_bytes()
    (_csize, usize), second = struct.unpack_from("<II", good, off + 4), off + 4 + 8 + \
        struct.unpack_from("<I", good, off + 4)[0]
    bad = tmp_path / "bad.dat"
    cases = {  # what the error says: the bytes changed
        "corrupt compressed chunk 0 at offset": (off + 20, b"\xff" * 40),  # inside the frame
        "bytes, expected": (second + 4, struct.pack("<I", 2 * 4096 + usize)),  # usize too big
    }
    for what, (at, patch) in cases.items():
        data = bytearray(good)
        data[at:at + len(patch)] = patch
        bad.write_bytes(bytes(data))
        msgs = []
        for nat in (True, False):
            t = TraceFile(bad)
            t.NATIVE = nat
            with pytest.raises(TraceError) as ei:
                t.counts()
            msgs.append(str(ei.value))
        assert all(what in m and "\n" not in m and str(bad) in m for m in msgs), msgs
        assert msgs[0].split(":")[:2] == msgs[1].split(":")[:2]  # same chunk and offset


COUNT_CASES = {  # name: write_synthetic's arguments
    "v7 zstd": dict(FEATURES),
    "v7 zstd, big-endian 32-bit": dict(FEATURES, big_endian=True, long_size=4),
    "v7 uncompressed": dict(FEATURES, compression=None),
    "v6 with lost pages": dict(FEATURES, version=6, compression=None,
                               lost={0: {1: 1234, 3: None}, 1: {0: 7}}),
    "v7 zstd with lost pages": dict(FEATURES, lost={2: {0: 5, 2: None}}),
}


@pytest.mark.parametrize("case", sorted(COUNT_CASES))
def test_the_c_count_agrees_with_the_walk(tmp_path, case, monkeypatch):
    """counts() and lost_events() in one C call (kcount: what `krig trace stats` runs) give what
    the batch walk gives, with any number of threads sharing the chunks, and what the reader
    gives without the library."""
    path = tmp_path / "k.dat"
    write_synthetic(TEMPLATE, path, 25_000, **COUNT_CASES[case])
    ref = TraceFile(path)
    ref.NATIVE = False
    want = (ref.counts(), ref.lost_events())
    assert sum(want[0].values()) == 25_000
    for threads in (1, 2, 5):
        tf = TraceFile(path)
        got = native.count(tf._f.fileno(), tf._fsize, tf._cpu_data, tf._data_compressed,
                           tf.page_size, tf._data_start, tf.commit_size, tf.big_endian, threads)
        assert got is not None, "the C count gave up on a good file"
        assert {tf._by_id[i].full_name: n for i, n in got[0].items()} == want[0]
        monkeypatch.setattr("analysis.trace.tracedat.DECOMPRESS_THREADS", threads)
        assert (tf.counts(), tf.lost_events()) == want
    monkeypatch.setattr(native, "lib", None)  # not built: the walk, with the same answer
    tf = TraceFile(path)
    assert (tf.counts(), tf.lost_events()) == want


def test_the_c_count_of_an_empty_cpu(tmp_path):
    for comp in ("zstd", None):
        path = tmp_path / f"e{comp}.dat"
        write_synthetic(TEMPLATE, path, 2, cpus=3, compression=comp)  # cpu 2 has no page
        ref, tf = TraceFile(path), TraceFile(path)
        ref.NATIVE = False
        assert tf._cpu_data[2][2] == 0
        assert (tf.counts(), tf.lost_events()) == (ref.counts(), ref.lost_events())
        assert sum(tf.counts().values()) == 2


def test_the_c_count_leaves_a_corrupt_file_to_the_reader(tmp_path):
    """On a fault the C count answers nothing, and counts() raises the reader's one-line error."""
    path = tmp_path / "z.dat"
    write_synthetic(TEMPLATE, path, 20_000, **FEATURES)
    tf = TraceFile(path)
    _, off, _ = tf._cpu_data[1]
    data = bytearray(path.read_bytes())
    data[off + 20:off + 60] = b"\xff" * 40  # inside cpu 1's first zstd frame
    bad = tmp_path / "bad.dat"
    bad.write_bytes(bytes(data))
    tf, ref = TraceFile(bad), TraceFile(bad)
    assert native.count(tf._f.fileno(), tf._fsize, tf._cpu_data, True, tf.page_size,
                        tf._data_start, tf.commit_size, tf.big_endian, 2) is None
    msgs = []
    for count in (tf.counts, ref._scan):  # the count, and the batch walk alone
        with pytest.raises(TraceError) as ei:
            count()
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1] and "corrupt compressed chunk 0 at offset" in msgs[0]


def test_sections_decompress_as_python_zstandard(tmp_path, monkeypatch):
    """A v7 file's compressed metadata sections: one zstd frame each, in C as python-zstandard
    gives it; anything but one good frame is left to python-zstandard (which names the fault)."""
    path = tmp_path / "m.dat"
    write_synthetic(TEMPLATE, path, 2000, **FEATURES)
    fast = TraceFile(path)
    frames = []
    for sid, off, flags, size in fast.section_table:
        if flags & 1 and sid != 3:  # 3: the page data, in chunks
            data = path.read_bytes()[off + 16:off + 16 + size]
            csize, usize = struct.unpack_from("<II", data)
            frames.append((data[8:8 + csize], usize))
    assert len(frames) >= 3
    for frame, usize in frames:
        want = tracepages.decompressor("zstd")(frame, usize)
        assert native.zstd_frame(frame, usize) == want == tracepages.unpack_section("zstd", frame, usize)
        assert native.zstd_frame(frame + frame, 2 * usize) is None  # two frames
        assert native.zstd_frame(frame[:-3], usize) is None  # cut short
    monkeypatch.setattr(native, "lib", None)
    ref = TraceFile(path)
    assert ref.formats() == fast.formats() and ref.header_page == fast.header_page
    assert ref.section_bytes(21) == fast.section_bytes(21)  # cmdlines
