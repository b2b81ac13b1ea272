"""Page data of a trace.dat: every cpu's ring-buffer pages, in batches of whole pages.

Uncompressed data (v6, or v7 without compression) is read straight into a batch
buffer.  Compressed v7 data is a count of chunks, each `csize usize` and a zstd or
zlib frame of whole pages; chunks are decompressed into the batch buffer.

With prefetch, a worker thread fills the next batch while the caller decodes the
current one (zstd and zlib release the GIL while they decompress), through a ring
of three buffers, so memory stays at three batches whatever the length of the
trace.  A batch is valid until the caller asks for the next one after it.
Every batch buffer has 16 zero bytes after its last page (the page decoder reads
one word past a record header).
"""
from __future__ import annotations

import os
import queue
import struct
import threading
import zlib

import numpy as np

try:
    import zstandard
except ImportError:  # pragma: no cover
    zstandard = None

PAD = 16
_END = object()


def decompressor(kind):
    """A function (data, uncompressed size) -> bytes for the file's algorithm."""
    if kind == "zstd":
        dctx = zstandard.ZstdDecompressor()
        return lambda data, n: dctx.decompress(data, max_output_size=n)
    return lambda data, n: zlib.decompress(data)


class PageSource:
    """Reads page batches of one trace.dat.

    fd: the open file; fsize its size; page_size, e ('<' or '>'), compression
    (None, 'zstd', 'zlib') describe it; err(message) makes the exception to raise
    (one line, naming the file); batch_bytes is the size of a batch.
    """

    def __init__(self, fd: int, fsize: int, page_size: int, e: str, compression, err,
                 batch_bytes: int):
        self.fd, self.fsize, self.page_size, self.e = fd, fsize, page_size, e
        self.compression, self._err, self.batch_bytes = compression, err, batch_bytes

    def _pread(self, off: int, n: int, what: str) -> bytes:
        if off < 0 or n < 0 or off + n > self.fsize:
            raise self._err(f"truncated file: {what} needs {n} bytes at offset {off}, "
                            f"file has {self.fsize} bytes")
        return os.pread(self.fd, n, off)

    def _new_buffer(self, cap: int):
        return np.empty(cap + PAD, np.uint8)

    # ------------------------------------------------------- one cpu
    def batches(self, off: int, size: int, compressed: bool, bufs=None):
        """Yield (uint8 buffer, n_pages) for one cpu's data.

        bufs: a list of buffers to use in turn (reallocated here when too small);
        default one buffer, reused for every batch.
        """
        bufs = bufs if bufs is not None else [None]
        if compressed:
            yield from self._zbatches(off, bufs)
            return
        ps = self.page_size
        per = max(1, self.batch_bytes // ps)
        for k, done in enumerate(range(0, size // ps, per)):
            slot = k % len(bufs)
            if bufs[slot] is None or bufs[slot].size < per * ps + PAD:
                bufs[slot] = self._new_buffer(per * ps)
            buf = bufs[slot]
            n = min(per, size // ps - done)
            if os.preadv(self.fd, [memoryview(buf)[:n * ps]], off + done * ps) != n * ps:
                raise self._err(f"truncated file: page data at offset {off + done * ps}")
            buf[n * ps:n * ps + PAD] = 0
            yield buf, n

    def _zbatches(self, off: int, bufs):
        """Decompressed batches of one cpu's chunks (compressed data read in 4 MB windows)."""
        ps, e = self.page_size, self.e
        cap = max(1, self.batch_bytes // ps) * ps
        unpack = decompressor(self.compression)
        win, wstart = b"", off

        def get(p, n, what):
            nonlocal win, wstart
            if p < wstart or p + n > wstart + len(win):
                wstart, win = p, self._pread(p, min(max(n, 4 << 20), self.fsize - p), what)
                if len(win) < n:
                    raise self._err(f"truncated file: {what} needs {n} bytes at offset {p}, "
                                    f"file has {self.fsize} bytes")
            return memoryview(win)[p - wstart:p - wstart + n]

        def take(k):
            slot = k % len(bufs)
            if bufs[slot] is None or bufs[slot].size < cap + PAD:
                bufs[slot] = self._new_buffer(cap)
            return bufs[slot]

        (nchunks,) = struct.unpack(e + "I", get(off, 4, "chunk count"))
        p, fill, k = off + 4, 0, 0
        buf = take(k)
        for i in range(nchunks):
            csize, usize = struct.unpack(e + "II", get(p, 8, "compressed chunk header"))
            if usize % ps:
                raise self._err(f"corrupt compressed chunk {i}: {usize} bytes is not a whole "
                                f"number of {ps}-byte pages")
            try:
                raw = unpack(get(p + 8, csize, "compressed chunk"), usize)
            except Exception as ex:
                raise self._err(f"corrupt compressed chunk {i} at offset {p}: {ex}") from None
            if len(raw) != usize:
                raise self._err(f"corrupt compressed chunk {i} at offset {p}: "
                                f"{len(raw)} bytes, expected {usize}")
            p += 8 + csize
            if fill + usize > cap:
                if fill:
                    buf[fill:fill + PAD] = 0
                    yield buf, fill // ps
                    k += 1
                cap, fill = max(cap, usize), 0
                buf = take(k)
            memoryview(buf)[fill:fill + usize] = raw  # cheaper than a numpy copy
            fill += usize
        if fill:
            buf[fill:fill + PAD] = 0
            yield buf, fill // ps

    # ------------------------------------------------------- every cpu
    def all_batches(self, cpu_data, compressed: bool, prefetch: bool = True):
        """Yield (cpu, buffer, n_pages, page index of the batch in that cpu) for every cpu.

        prefetch: decompress in a worker thread one batch ahead (compressed data only).
        """
        if not (prefetch and compressed):
            for cpu, off, size in cpu_data:
                page0 = 0
                for buf, n in self.batches(off, size, compressed):
                    yield cpu, buf, n, page0
                    page0 += n
            return
        yield from _prefetched(self, cpu_data)


def _prefetched(src: PageSource, cpu_data):
    """all_batches with a worker thread: a ring of three buffers, a queue of one."""
    q: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()
    bufs = [None, None, None]

    def put(item):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work():
        try:
            k = 0
            for cpu, off, size in cpu_data:
                page0 = 0
                for buf, n in src.batches(off, size, True, bufs=_Ring(bufs, k)):
                    if not put((cpu, buf, n, page0)):
                        return
                    page0 += n
                    k += 1
            put(_END)
        except BaseException as ex:  # handed to the reader, raised there
            put(ex)

    t = threading.Thread(target=work, name="trace-pages", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        t.join()


class _Ring(list):
    """The ring of buffers seen from one cpu's batches: slot k of that cpu is slot
    start + k of the shared ring, so consecutive batches never share a buffer across cpus."""

    def __init__(self, shared, start):
        super().__init__()
        self.shared, self.start = shared, start

    def __len__(self):
        return len(self.shared)

    def __getitem__(self, k):
        return self.shared[(self.start + k) % len(self.shared)]

    def __setitem__(self, k, v):
        self.shared[(self.start + k) % len(self.shared)] = v
