"""analysis/trace/_kwalk.so (analysis/trace/kwalk.c, built by `make helpers`) through ctypes.

ctypes lets go of the GIL for the length of each call, so the decompressing threads
and the page walk run at once.  `lib` is None when the library is not built: the
reader then walks pages with numpy and decompresses with python-zstandard, the
references tests/analysis/trace/test_kwalk.py holds the C code against.

count() imports no numpy: `krig trace stats` counts a trace without it (numpy's import
alone is a large share of the command's time).
"""
from __future__ import annotations

import ctypes
import pathlib

PATH = pathlib.Path(__file__).resolve().parent / "_kwalk.so"
KWALK_ABI = 4  # kwalk_abi() in analysis/trace/kwalk.c
NIDS = 1 << 16  # event type ids are 16 bits


def _load():
    try:
        lib = ctypes.CDLL(str(PATH))
        if lib.kwalk_abi() != KWALK_ABI:  # a stale build: `make helpers` rebuilds it
            return None
    except (OSError, AttributeError):
        return None
    ptr, long_, int_ = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    lib.kwalk.restype = long_
    lib.kwalk.argtypes = [ptr, long_, long_, long_, long_, int_, int_, long_, ptr, ptr, ptr, ptr,
                          ptr]
    lib.kz_new.restype = ptr
    lib.kz_new.argtypes = []
    lib.kz_free.restype = None
    lib.kz_free.argtypes = [ptr]
    lib.kz_chunks.restype = long_
    lib.kz_chunks.argtypes = [ptr, ctypes.c_char_p, long_, long_, int_, ptr, long_, ptr,
                              ctypes.c_char_p, long_]
    lib.kz_one.restype = long_
    lib.kz_one.argtypes = [ptr, long_, ctypes.c_char_p, long_]
    lib.kcount.restype = long_
    lib.kcount.argtypes = [int_, long_, long_, ptr, int_, long_, long_, int_, int_, int_, ptr, ptr,
                           ptr, ptr, ptr]
    lib.kfree.restype = None
    lib.kfree.argtypes = [ptr]
    return lib


lib = _load()


def available() -> bool:
    return lib is not None


def _addr(a):
    return None if a is None else a.ctypes.data


def walk(buf, npages, page_size, data_start, commit_size, big_endian, want_pos, want_ts):
    """Every data event of npages pages of buf (uint8), in file order: (type ids, data
    offsets or None, time stamps or None, [flagged pages, stored lost count, flagged
    pages without a count], error) where error is None or (code, page, size) as
    analysis/trace/kwalk.c's kwalk() sets them."""
    import numpy as np
    cap = npages * ((page_size - data_start) // 8 + 1)  # 8 bytes: the smallest event
    tid = np.empty(cap, np.uint32)
    pos = np.empty(cap, np.int64) if want_pos else None
    ts = np.empty(cap, np.uint64) if want_ts else None
    loss, err = np.zeros(3, np.int64), np.zeros(3, np.int64)
    n = lib.kwalk(buf.ctypes.data, buf.size, npages, page_size, data_start, commit_size,
                  int(big_endian), cap, tid.ctypes.data, _addr(pos), _addr(ts),
                  loss.ctypes.data, err.ctypes.data)
    if n < 0:
        return None, None, None, None, tuple(int(x) for x in err)
    return (tid[:n], pos[:n] if want_pos else None, ts[:n] if want_ts else None,
            [int(x) for x in loss], None)


class ZstdChunks:
    """One decompression context (one per thread): decompresses a batch of v7 chunks."""

    def __init__(self):
        self._free = lib.kz_free        # its own reference: the module's `lib` may be gone when it is collected
        self._dctx = lib.kz_new()
        if not self._dctx:
            raise MemoryError("ZSTD_createDCtx failed")

    def __del__(self):
        if getattr(self, "_dctx", None):
            self._free(self._dctx)
            self._dctx = None

    def decompress(self, src: bytes, nchunks: int, big_endian: bool, dst, err):
        """Into dst (a numpy uint8 array): bytes written, or -1 with err (int64[4]: chunk,
        its offset in src, the bytes it gave or -1, its usize) and the zstd error text."""
        msg = ctypes.create_string_buffer(200)
        n = lib.kz_chunks(self._dctx, src, len(src), nchunks, int(big_endian), dst.ctypes.data,
                          dst.size, err.ctypes.data, msg, len(msg))
        return n, msg.value.decode(errors="replace")


def zstd_frame(data: bytes, size: int) -> bytes | None:
    """One zstd frame (a metadata section) decompressed, at most size bytes; None if it is not
    exactly one good frame (python-zstandard then names the fault)."""
    out = ctypes.create_string_buffer(size or 1)
    got = lib.kz_one(out, size, data, len(data))
    return None if got < 0 else ctypes.string_at(out, got)


# kcount's answers when it gives up (analysis/trace/kwalk.h): why, said to the user
GAVE_UP = {-5: "a record of the event is shorter than the field's end",
           -6: "no memory for the C count"}


def count(fd: int, fsize: int, cpu_data, compressed: bool, page_size: int, data_start: int,
          commit_size: int, big_endian: bool, threads: int, group=None):
    """Events by type id of every cpu's pages of the open trace.dat fd (cpu_data: (cpu, offset,
    size)), read, decompressed (zstd) and walked in C by `threads` threads, a chunk at a time:
    ({type id: count}, {cpu: (flagged pages, stored lost count, flagged pages without a
    count)}, groups), or None when anything in the data is unexpected (the numpy reader then
    reads it and names the fault).

    group: None (groups is None), or (type id, field offset, size 1/2/4/8, signed): groups is
    [(value, count)] of that field in that event's records, largest count first, ties by value;
    a str instead of the whole answer says why C gave up on a good file (GAVE_UP)."""
    i64 = ctypes.c_int64
    ncpu = len(cpu_data)
    cpus = (i64 * (2 * ncpu or 1))(*[x for _, off, size in cpu_data for x in (off, size)])
    out, loss = (i64 * (2 * NIDS))(), (i64 * (3 * ncpu or 1))()
    spec = None if group is None else (i64 * 4)(*(int(x) for x in group))
    gout, gn = ctypes.POINTER(i64)(), ctypes.c_long(0)
    n = lib.kcount(fd, fsize, ncpu, cpus, int(compressed), page_size, data_start, commit_size,
                   int(big_endian), threads, out, loss, spec, ctypes.byref(gout), ctypes.byref(gn))
    groups = None
    if gout:
        try:
            groups = _pairs(gout[:2 * gn.value], group[2], group[3])
        finally:
            lib.kfree(gout)
    if n < 0:
        return GAVE_UP.get(n) if group is not None else None
    pairs = out[:2 * n]
    return (dict(zip(pairs[::2], pairs[1::2])),
            {cpu: tuple(loss[3 * i:3 * i + 3]) for i, (cpu, _, _) in enumerate(cpu_data)}, groups)


def _pairs(flat: list, size: int, signed: bool) -> list[tuple[int, int]]:
    """kcount's (value, count) pairs as Python ints: values come as int64 (sign-extended when
    the field is signed), so an unsigned 8-byte value past 2**63 is made positive again."""
    vals = flat[::2]
    if not signed and size == 8:
        vals = [v & 0xFFFF_FFFF_FFFF_FFFF for v in vals]
    return list(zip(vals, flat[1::2]))
