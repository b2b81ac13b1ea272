"""`krig trace stats --group-by` of a number field in C (analysis/trace/kcount.c: the field of
each record counted by value while the pages are walked) against the Python grouping over
numpy columns and `trace-cmd report -R` on generated traces: every size (1, 2, 4, 8 bytes),
signed and unsigned, aligned and not, values over the whole range of each type, both byte
orders, raw and zstd pages; and what happens when C cannot count: Python counts and says so on
stderr, or the file's fault is the one-line error."""
import json
import re
import subprocess
import sys
from collections import Counter

import pytest

from analysis.trace import native
from analysis.trace.tracecli import GroupCounter
from analysis.trace.tracedat import TraceFile
from conftest import ROOT
from test_tracedat import GUEST, needs_trace_cmd
from tracegen import write_synthetic

EVENT = "krig:krig_numbers"
# a format with a number field of every size and sign, two of them at unaligned offsets
FORMAT = """name: krig_numbers
ID: 3901
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:s8 s8v;\toffset:8;\tsize:1;\tsigned:1;
\tfield:u8 u8v;\toffset:9;\tsize:1;\tsigned:0;
\tfield:s16 s16v;\toffset:10;\tsize:2;\tsigned:1;
\tfield:u16 u16v;\toffset:12;\tsize:2;\tsigned:0;
\tfield:s32 s32v;\toffset:16;\tsize:4;\tsigned:1;
\tfield:u32 u32v;\toffset:20;\tsize:4;\tsigned:0;
\tfield:s64 s64v;\toffset:24;\tsize:8;\tsigned:1;
\tfield:u64 u64v;\toffset:32;\tsize:8;\tsigned:0;
\tfield:u64 packed64;\toffset:42;\tsize:8;\tsigned:0;
\tfield:s32 packed32;\toffset:51;\tsize:4;\tsigned:1;

print fmt: "s8v=%d u64v=%llu", REC->s8v, REC->u64v
"""
FIELDS = ("s8v", "u8v", "s16v", "u16v", "s32v", "u32v", "s64v", "u64v", "packed64", "packed32")
COMMON = ("common_flags", "common_preempt_count", "common_pid", "common_type")
XFS = "xfs:xfs_ail_insert"


def synth(path, n=30_000, **kw):
    args = dict(event=EVENT, extra=[(XFS, 0.3)], formats=[("krig", FORMAT)], wide_numbers=True,
                cpus=3, extend_every=500, abs_every=777, big_every=97, discard_every=301)
    write_synthetic(GUEST, path, n, **{**args, **kw})
    return str(path)


def python_groups(path, event, field):
    g = GroupCounter()
    tf = TraceFile(path)
    tf.NATIVE = False
    for batch in tf.field_batches(event, (field,)):
        g.add(batch[field])
    return g.groups()


def report_raw(path) -> dict:
    """{(event name, field): Counter of values} of `trace-cmd report -R` (every field as name=value)."""
    text = subprocess.run(["trace-cmd", "report", "-R", "-i", str(path)], capture_output=True,
                          text=True, timeout=300, check=True).stdout
    out: dict = {}
    for name, rest in re.findall(r"\s(\w+):\s+(\S+=.*)$", text, re.M):
        for key, val in re.findall(r"(\w+)= *(\S+)", rest):  # "%2d": s16v= 1
            out.setdefault((name, key), Counter())[int(val, 0)] += 1
    return out


def bits(field, groups) -> Counter:
    """Groups as the field's bit patterns: trace-cmd 3.1 prints a signed char without its sign."""
    mask = (1 << 8 * field.size) - 1
    out = Counter()
    for v, c in groups:
        out[v & mask] += c
    return out


@needs_trace_cmd
@pytest.mark.parametrize("version,compression,big_endian,long_size",
                         [(7, "zstd", False, 8), (6, None, False, 8), (7, "zstd", True, 4)])
def test_c_groups_equal_python_and_trace_cmd(tmp_path, version, compression, big_endian,
                                             long_size):
    path = synth(tmp_path / "n.dat", version=version, compression=compression,
                 big_endian=big_endian, long_size=long_size)
    ref = report_raw(path)
    fields = TraceFile(path).event(EVENT).fields
    for event, field in [(EVENT, f) for f in FIELDS + COMMON] + [(XFS, "lip"), (XFS, "new_lsn")]:
        tf = TraceFile(path)
        got = tf.native_groups(event, field)
        assert not isinstance(got, str), f"{field}: C did not count: {got}"
        assert got == python_groups(path, event, field), field
        assert sum(c for _, c in got) == tf.counts()[event]
        name, f = event.split(":")[1], TraceFile(path).event(event).fields[field]
        if (name, field) in ref and field != "new_lsn":  # -R prints an xfs_lsn_t's low 32 bits
            # (tests/analysis/trace/test_tracegroup.py holds new_lsn to the formatted "new lsn CYCLE/BLOCK")
            want = ref[name, field]
            assert (bits(f, got) if f.signed and f.size == 1 else Counter(dict(got))) == want, field
        else:
            assert field.startswith("common_") or field == "new_lsn", f"trace-cmd printed no {field}"
    # the values cover each type's range: negative ones, and unsigned ones past the top bit
    s64, u64 = (dict(TraceFile(path).native_groups(EVENT, f)) for f in ("s64v", "u64v"))
    assert -(1 << 63) in s64 and -1 in s64 and (1 << 64) - 1 in u64 and (1 << 63) in u64
    assert -128 in dict(TraceFile(path).native_groups(EVENT, "s8v")) and fields["s8v"].signed
    assert len(TraceFile(path).native_groups(XFS, "lip")) > 4096  # the table grew


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_threads_and_order(tmp_path, monkeypatch, threads):
    """Any number of threads sharing the chunks gives the same groups, largest count first and
    ties by value (signed or not as the field), and the same counts and losses as the walk."""
    monkeypatch.setattr("analysis.trace.tracedat.DECOMPRESS_THREADS", threads)
    path = synth(tmp_path / "t.dat", 20_000, lost={0: {1: 12, 3: None}})
    ref = TraceFile(path)
    ref.NATIVE = False
    want = (ref.counts(), ref.lost_events())
    for field in ("s32v", "u64v", "s8v"):
        tf = TraceFile(path)
        got = tf.native_groups(EVENT, field)
        assert got == python_groups(path, EVENT, field)
        assert got == sorted(got, key=lambda vc: (-vc[1], vc[0]))
        assert (tf.counts(), tf.lost_events()) == want


def krig(*args):
    return subprocess.run([sys.executable, "-m", "workflows.cli", "trace", "stats", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_the_command_groups_in_c_and_says_when_python_did(tmp_path):
    """`krig trace stats --group-by`: a number field in C, silently; a zlib trace (C reads raw and
    zstd pages only) and a record too short for its field are counted in Python, said on
    stderr in one line, with the same answer where both can count."""
    assert native.available()
    path = synth(tmp_path / "z.dat", 5000)
    p = krig(path, "--event", EVENT, "--group-by", "s16v", "--json")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    doc = json.loads(p.stdout)
    assert [tuple(g) for g in doc["groups"]] == python_groups(path, EVENT, "s16v")
    zl = synth(tmp_path / "zl.dat", 5000, compression="zlib")
    q = krig(zl, "--event", EVENT, "--group-by", "s16v", "--json")
    assert q.returncode == 0 and json.loads(q.stdout)["groups"] == doc["groups"]
    assert q.stderr.splitlines() == ["krig trace stats: --group-by s16v counted in Python: "
                                     "zlib-compressed pages are read by the batch walk"]
    # the format says packed32 ends 2 bytes past the end of the event's records
    raw = synth(tmp_path / "r.dat", 5000, version=6, compression=None)
    data = open(raw, "rb").read()
    assert data.count(b"packed32;\toffset:51;") == 1
    short = tmp_path / "short.dat"
    short.write_bytes(data.replace(b"packed32;\toffset:51;", b"packed32;\toffset:54;"))
    assert TraceFile(str(short)).native_groups(EVENT, "packed32") == \
        "a record of the event is shorter than the field's end"
    s = krig(str(short), "--event", EVENT, "--group-by", "packed32")
    assert s.returncode == 0 and s.stderr.splitlines() == [
        "krig trace stats: --group-by packed32 counted in Python: a record of the event is "
        "shorter than the field's end"], s.stderr


def test_a_corrupt_file_is_one_line(tmp_path):
    """C gives up on a corrupt chunk, the batch walk names it: one line, no note before it."""
    path = synth(tmp_path / "c.dat", 20_000)
    _, off, _ = TraceFile(path).cpu_data()[1]
    data = bytearray(open(path, "rb").read())
    data[off + 20:off + 60] = b"\xff" * 40  # inside cpu 1's first zstd frame
    bad = tmp_path / "bad.dat"
    bad.write_bytes(bytes(data))
    assert isinstance(TraceFile(str(bad)).native_groups(EVENT, "u32v"), str)
    p = krig(str(bad), "--event", EVENT, "--group-by", "u32v")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert "corrupt compressed chunk 0" in p.stderr and str(bad) in p.stderr
