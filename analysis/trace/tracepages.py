"""Page data of a trace.dat: every cpu's ring-buffer pages, in batches of whole pages.

Uncompressed data (v6, or v7 without compression) is read straight into a batch
buffer.  Compressed v7 data is a count of chunks, each `csize usize` and a zstd or
zlib frame of whole pages; chunks are decompressed into the batch buffer.

With prefetch, worker threads (DECOMPRESS_THREADS, at most one per core) fill the
next batches while the caller decodes the current one (zstd and zlib release the
GIL while they decompress), each into its own buffer of a ring of threads + 1, so
memory stays at a few batches whatever the length of the trace.  A batch is valid
until the caller asks for the next one after it.
Every batch buffer has 16 zero bytes after its last page (the page decoder reads
one word past a record header).
"""
from __future__ import annotations

import os
import struct
import threading
import zlib

from analysis.trace import native

PAD = 16
DECOMPRESS_THREADS = 2  # measured on 2 cores: see docs/measurements.md, "Benchmarks"
_END = object()


def decompressor(kind):
    """A function (data, uncompressed size) -> bytes for the file's algorithm (python-zstandard or
    zlib; python-zstandard is imported here, not with the module: the count in C does not need it)."""
    if kind == "zstd":
        import zstandard
        dctx = zstandard.ZstdDecompressor()
        return lambda data, n: dctx.decompress(data, max_output_size=n)
    return lambda data, n: zlib.decompress(data)


def zstandard_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("zstandard") is not None


def unpack_section(kind, data: bytes, n: int) -> bytes:
    """A compressed metadata section's payload: one zstd frame in C when the library is built,
    else (or when C finds a fault, so that it is named as before) as decompressor() does."""
    if kind == "zstd" and native.available():
        out = native.zstd_frame(data, n)
        if out is not None:
            return out
    return decompressor(kind)(data, n)


class PageSource:
    """Reads page batches of one trace.dat.

    fd: the open file; fsize its size; page_size, e ('<' or '>'), compression
    (None, 'zstd', 'zlib') describe it; err(message) makes the exception to raise
    (one line, naming the file); batch_bytes is the size of a batch.
    """

    def __init__(self, fd: int, fsize: int, page_size: int, e: str, compression, err,
                 batch_bytes: int, native: bool = True):
        self.fd, self.fsize, self.page_size, self.e = fd, fsize, page_size, e
        self.compression, self._err, self.batch_bytes = compression, err, batch_bytes
        self.native = native

    def _pread(self, off: int, n: int, what: str) -> bytes:
        if off < 0 or n < 0 or off + n > self.fsize:
            raise self._err(f"truncated file: {what} needs {n} bytes at offset {off}, "
                            f"file has {self.fsize} bytes")
        return os.pread(self.fd, n, off)

    def _buffer(self, bufs, slot: int, nbytes: int):
        """bufs[slot], (re)allocated when it holds fewer than nbytes (+ PAD) bytes."""
        if bufs[slot] is None or bufs[slot].size < nbytes + PAD:
            import numpy as np  # here: the metadata sections need no numpy (`krig trace stats`)
            bufs[slot] = np.empty(max(nbytes, self.batch_bytes) + PAD, np.uint8)
        return bufs[slot]

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
            buf = self._buffer(bufs, k % len(bufs), per * ps)
            n = min(per, size // ps - done)
            if os.preadv(self.fd, [memoryview(buf)[:n * ps]], off + done * ps) != n * ps:
                raise self._err(f"truncated file: page data at offset {off + done * ps}")
            buf[n * ps:n * ps + PAD] = 0
            yield buf, n

    def _zbatches(self, off: int, bufs):
        """Decompressed batches of one cpu's chunks, one after the other."""
        fill = self.filler()
        for k, job in enumerate(self._zjobs(off)):
            buf = self._buffer(bufs, k % len(bufs), job[0])
            yield buf, fill(job, buf)

    def _zjobs(self, off: int):
        """One cpu's compressed chunks grouped into batches: yields (bytes, [(i, file
        offset, compressed data, usize)]); reads the file in 4 MB windows (a batch holds
        views of its windows).  A batch's chunks are back to back in the file."""
        ps, e = self.page_size, self.e
        cap = max(1, self.batch_bytes // ps) * ps
        win, wstart = b"", off

        def get(p, n, what):
            nonlocal win, wstart
            if p < wstart or p + n > wstart + len(win):
                wstart, win = p, self._pread(p, min(max(n, 4 << 20), self.fsize - p), what)
                if len(win) < n:
                    raise self._err(f"truncated file: {what} needs {n} bytes at offset {p}, "
                                    f"file has {self.fsize} bytes")
            return memoryview(win)[p - wstart:p - wstart + n]

        (nchunks,) = struct.unpack(e + "I", get(off, 4, "chunk count"))
        chunks: list[tuple[int, int, memoryview, int]] = []  # (index, offset, compressed, size)
        p, fill = off + 4, 0
        for i in range(nchunks):
            csize, usize = struct.unpack(e + "II", get(p, 8, "compressed chunk header"))
            if usize % ps:
                raise self._err(f"corrupt compressed chunk {i}: {usize} bytes is not a whole "
                                f"number of {ps}-byte pages")
            if chunks and fill + usize > cap:
                yield fill, chunks
                fill, chunks = 0, []
            chunks.append((i, p, get(p + 8, csize, "compressed chunk"), usize))
            fill += usize
            p += 8 + csize
        if chunks:
            yield fill, chunks

    def filler(self):
        """A function (batch from _zjobs, buffer) -> pages that decompresses the batch
        into the buffer: in C (analysis/trace/kwalk.c) for zstd when it is built, else with
        python-zstandard or zlib.  One per thread (it holds a decompression context)."""
        if self.compression == "zstd" and self.native and native.available():
            import numpy as np
            z, err = native.ZstdChunks(), np.zeros(4, np.int64)
            return lambda job, buf: self._zfill_native(job, buf, z, err)
        unpack = decompressor(self.compression)
        return lambda job, buf: self._zfill(job, buf, unpack)

    def _zfill_native(self, job, buf, z, err) -> int:
        """_zfill in C: the batch's chunks are back to back, read in one piece."""
        chunks = job[1]
        (first, start, _, _), (_, at, data, _) = chunks[0], chunks[-1]
        src = self._pread(start, at + 8 + len(data) - start, "compressed chunk")
        n, msg = z.decompress(src, len(chunks), self.e == ">", buf, err)
        if n < 0:
            what = msg if err[2] < 0 else f"{int(err[2])} bytes, expected {int(err[3])}"
            raise self._err(f"corrupt compressed chunk {first + int(err[0])} at offset "
                            f"{start + int(err[1])}: {what}")
        buf[n:n + PAD] = 0
        return n // self.page_size

    def _zfill(self, job, buf, unpack) -> int:
        """Decompress a batch from _zjobs into buf; returns its number of pages."""
        fill = 0
        for i, p, data, usize in job[1]:
            try:
                raw = unpack(data, usize)
            except Exception as ex:
                raise self._err(f"corrupt compressed chunk {i} at offset {p}: {ex}") from None
            if len(raw) != usize:
                raise self._err(f"corrupt compressed chunk {i} at offset {p}: "
                                f"{len(raw)} bytes, expected {usize}")
            memoryview(buf)[fill:fill + usize] = raw  # cheaper than a numpy copy
            fill += usize
        buf[fill:fill + PAD] = 0
        return fill // self.page_size

    # ------------------------------------------------------- every cpu
    def all_batches(self, cpu_data, compressed: bool, prefetch: bool = True):
        """Yield (cpu, buffer, n_pages, page index of the batch in that cpu) for every cpu.

        prefetch: decompress ahead in worker threads, one per core up to
        DECOMPRESS_THREADS (compressed data only).
        """
        if not (prefetch and compressed):
            for cpu, off, size in cpu_data:
                page0 = 0
                for buf, n in self.batches(off, size, compressed):
                    yield cpu, buf, n, page0
                    page0 += n
            return
        yield from _prefetched(self, cpu_data, max(1, min(DECOMPRESS_THREADS, os.cpu_count() or 1)))


def _prefetched(src: PageSource, cpu_data, workers: int):
    """all_batches with `workers` decompressing threads, up to workers + 1 batches ahead
    of the reader (one buffer each), handed to the reader in file order.

    The chunk headers are parsed under the lock (cheap), the chunks decompressed outside
    it (zstd and zlib release the GIL), so the threads overlap each other and the reader.
    An error is raised to the reader at the batch where it happened, after the batches
    before it.
    """
    ahead = workers + 1
    bufs = [None] * ahead
    cond = threading.Condition()
    st = {"next": 0, "reader": 0, "done": False, "stop": False}
    results: dict = {}

    def jobs():
        for cpu, off, size in cpu_data:
            page0 = 0
            for job in src._zjobs(off):
                yield cpu, page0, job
                page0 += job[0] // src.page_size

    source = jobs()

    def work():
        fill = src.filler()
        while True:
            with cond:
                while not (st["stop"] or st["done"]) and st["next"] - st["reader"] >= ahead:
                    cond.wait()
                if st["stop"] or st["done"]:
                    return
                j = st["next"]
                st["next"] += 1
                try:
                    cpu, page0, job = next(source)
                except StopIteration:
                    st["done"], results[j] = True, _END
                    cond.notify_all()
                    return
                except BaseException as ex:  # handed to the reader, raised there
                    st["done"], results[j] = True, ex
                    cond.notify_all()
                    return
            try:
                buf = src._buffer(bufs, j % ahead, job[0])
                item = (cpu, buf, fill(job, buf), page0)
            except BaseException as ex:
                item = ex
            with cond:
                results[j] = item
                cond.notify_all()

    threads = [threading.Thread(target=work, name=f"trace-pages-{i}", daemon=True)
               for i in range(workers)]
    for t in threads:
        t.start()
    try:
        j = 0
        while True:
            with cond:
                st["reader"] = j  # the buffers of batches before j are free again
                cond.notify_all()
                while j not in results:
                    cond.wait()
                item = results.pop(j)
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
            j += 1
    finally:
        with cond:
            st["stop"] = True
            cond.notify_all()
        for t in threads:
            t.join()
