"""The trace.dat container tests/tracegen.py writes its pages into: the file's header, the
metadata sections (headers, event formats, kallsyms, printk, command lines), the options, the
per-CPU ring-buffer data (v7: in compressed chunks), and v7's strings section; v6 writes the
same metadata in its older, uncompressed order."""
from __future__ import annotations

import struct
import zlib

import numpy as np

from analysis.trace.formats import (MAGIC, OPT_BUFFER, OPT_CMDLINES, OPT_CPUCOUNT, OPT_CPUSTAT, OPT_DONE,
                                     OPT_EVENT_FORMATS, OPT_FTRACE_EVENTS, OPT_HEADER_INFO, OPT_KALLSYMS,
                                     OPT_PRINTK, OPT_STRINGS, OPT_TRACECLOCK, OPT_UNAME, OPT_VERSION)

try:
    import zstandard
except ImportError:  # pragma: no cover
    zstandard = None


class Out:
    """The file being written, with the endianness of the trace (e: '<' or '>')."""

    def __init__(self, path, e):
        self.f = open(path, "wb")
        self.e = e

    def w(self, b: bytes):
        self.f.write(b)

    def pack(self, fmt, *a):
        self.f.write(struct.pack(self.e + fmt, *a))

    def tell(self):
        return self.f.tell()

    def patch(self, off, fmt, *a):
        here = self.f.tell()
        self.f.seek(off)
        self.pack(fmt, *a)
        self.f.seek(here)

    def align(self, n):
        pad = -self.f.tell() % n
        self.f.write(bytes(pad))


def compress(kind, data: bytes, level=3) -> bytes:
    if kind == "zstd":
        return zstandard.ZstdCompressor(level=level).compress(data)
    return zlib.compress(data, 1)


def meta_blobs(meta, e):
    hi = (b"header_page\0" + struct.pack(e + "Q", len(meta.header_page)) + meta.header_page
          + b"header_event\0" + struct.pack(e + "Q", len(meta.header_event)) + meta.header_event)
    ft = struct.pack(e + "I", len(meta.ftrace)) + b"".join(
        struct.pack(e + "Q", len(r)) + r for r in meta.ftrace)
    ev = [struct.pack(e + "I", len(meta.systems))]
    for s, raws in meta.systems.items():
        ev.append(s.encode() + b"\0" + struct.pack(e + "I", len(raws)))
        ev += [struct.pack(e + "Q", len(r)) + r for r in raws]
    ks = struct.pack(e + "I", len(meta.kallsyms)) + meta.kallsyms
    pk = struct.pack(e + "I", len(meta.printk)) + meta.printk
    cl = struct.pack(e + "Q", len(meta.cmdlines)) + meta.cmdlines
    return [(OPT_HEADER_INFO, "headers", hi), (OPT_FTRACE_EVENTS, "ftrace events", ft),
            (OPT_EVENT_FORMATS, "events format", b"".join(ev)), (OPT_KALLSYMS, "kallsyms", ks),
            (OPT_PRINTK, "printk", pk), (OPT_CMDLINES, "command lines", cl)]


def cpustat(cpu, st):
    return (f"CPU: {cpu}\nentries: {st.get('entries', 0)}\noverrun: {st.get('overrun', 0)}\n"
            f"commit overrun: 0\nbytes: 0\noldest event ts: 5.000000\nnow ts: 9.000000\n"
            f"dropped events: {st.get('dropped', 0)}\nread events: {st.get('read', 0)}\n"
            ).encode() + b"\0"


def write_container(meta, path, cpu_pages, *, version=7, compression="zstd",
                    cpustats=None, chunk_pages=10, level=3):
    """Write a trace.dat; cpu_pages is a list (one per cpu) of iterables of page arrays."""
    e, ps = meta.e, meta.page_size
    ncpu = len(cpu_pages)
    cpustats = cpustats or {}
    if compression in ("none", ""):
        compression = None
    if version == 6 and compression:
        raise ValueError("v6 files are not compressed")
    if compression == "zstd" and zstandard is None:
        raise RuntimeError("zstd output needs the 'zstandard' module")
    out = Out(path, e)
    out.w(MAGIC + str(version).encode() + b"\0")
    out.w(bytes([1 if meta.big_endian else 0, meta.long_size]))
    out.pack("I", ps)
    stats_opts = [(OPT_CPUSTAT, cpustat(c, cpustats.get(c, {}))) for c in range(ncpu)]
    common_opts = [(OPT_TRACECLOCK, meta.traceclock), (OPT_UNAME, meta.uname),
                   (OPT_VERSION, meta.version)] + stats_opts + [
                  (OPT_CPUCOUNT, struct.pack(e + "I", ncpu))]
    if version == 6:
        write_v6(out, meta, common_opts, cpu_pages)
    else:
        V7(out, meta, compression, level).write(common_opts, cpu_pages, chunk_pages)
    out.f.close()


def write_v6(out: Out, meta, common_opts: list, cpu_pages) -> None:
    """v6: the metadata in order, the options, then each CPU's pages uncompressed."""
    ncpu, ps = len(cpu_pages), meta.page_size
    for _sid, _desc, blob in meta_blobs(meta, meta.e):
        out.w(blob)
    out.pack("I", ncpu)
    out.w(b"options  \0")
    for oid, data in common_opts:
        out.pack("HI", oid, len(data))
        out.w(data)
    out.pack("H", OPT_DONE)
    out.w(b"flyrecord\0")
    table = out.tell()
    out.w(bytes(16 * ncpu))
    clock = b"[" + meta.clock + b"]"
    out.pack("Q", len(clock))
    out.w(clock)
    for cpu, pages in enumerate(cpu_pages):
        out.align(ps)
        start = out.tell()
        for arr in pages:
            out.w(arr.tobytes())
        out.patch(table + 16 * cpu, "QQ", start, out.tell() - start)


class V7:
    """v7: sections (each maybe compressed) named through a strings table written last."""

    def __init__(self, out: Out, meta, compression, level):
        self.out, self.meta, self.compression, self.level = out, meta, compression, level
        self.strings = bytearray()

    def sid_str(self, s):
        self.strings.extend(s.encode() + b"\0")
        return len(self.strings) - len(s) - 1

    def body(self, payload: bytes) -> tuple[bytes, int]:
        """(the section's body, its flags): compressed when the file is."""
        if self.compression:
            c = compress(self.compression, payload, self.level)
            return struct.pack(self.meta.e + "II", len(c), len(payload)) + c, 1
        return payload, 0

    def section(self, sid, desc, payload):
        start = self.out.tell()
        body, flags = self.body(payload)
        self.out.pack("HHIQ", sid, flags, self.sid_str(desc), len(body))
        self.out.w(body)
        return start

    def options(self, opts: list) -> int:
        """An options section; returns where its next-options pointer is, to patch later."""
        e, out = self.meta.e, self.out
        body = b"".join(struct.pack(e + "HI", i, len(d)) + d for i, d in opts)
        out.pack("HHIQ", OPT_DONE, 0, self.sid_str("options"), len(body) + 14)
        out.w(body)
        done = out.tell()
        out.pack("HIQ", OPT_DONE, 8, 0)
        return done

    def write(self, common_opts: list, cpu_pages, chunk_pages: int) -> None:
        out, meta, compression = self.out, self.meta, self.compression
        e = meta.e
        comp = compression.encode() if compression else b"none"
        cver = ""
        if compression:
            cver = ".".join(map(str, zstandard.ZSTD_VERSION)) if compression == "zstd" else zlib.ZLIB_VERSION
        out.w(comp + b"\0" + cver.encode() + b"\0")
        opt_ptr = out.tell()
        out.pack("Q", 0)
        offs = {sid: self.section(sid, desc, blob) for sid, desc, blob in meta_blobs(meta, e)}
        out.patch(opt_ptr, "Q", out.tell())
        done1 = self.options([(sid, struct.pack(e + "Q", off)) for sid, off in offs.items()] + common_opts)
        buf = self.flyrecord(cpu_pages, chunk_pages)
        out.patch(done1 + 6, "Q", out.tell())
        self.options([(OPT_BUFFER, buf)])
        self.sid_str("strings")
        payload = bytes(self.strings)
        body, flags = self.body(payload)
        out.pack("HHIQ", OPT_STRINGS, flags, len(self.strings) - 8, len(body))
        out.w(body)

    def flyrecord(self, cpu_pages, chunk_pages: int) -> bytes:
        """The buffer section of each CPU's pages; returns the buffer option that points at it."""
        out, meta = self.out, self.meta
        e, ps = meta.e, meta.page_size
        fly = out.tell()
        out.pack("HHIQ", OPT_BUFFER, 1 if self.compression else 0, self.sid_str("buffer flyrecord "), 0)
        cpu_tab = []
        for cpu, pages in enumerate(cpu_pages):
            out.align(ps)
            start = out.tell()
            if self.compression:
                out.pack("I", 0)
                out.patch(start, "I", self.chunks(pages, chunk_pages))
                cpu_tab.append((cpu, start, out.tell() - start - 4))
            else:
                for arr in pages:
                    out.w(arr.tobytes())
                cpu_tab.append((cpu, start, out.tell() - start))
        out.patch(fly + 8, "Q", out.tell() - fly - 16)
        buf = struct.pack(e + "Q", fly) + b"\0" + meta.clock + b"\0" + struct.pack(e + "II", ps, len(cpu_pages))
        return buf + b"".join(struct.pack(e + "IQQ", c, o, s) for c, o, s in cpu_tab)

    def chunks(self, pages, chunk_pages: int) -> int:
        """One CPU's pages as compressed chunks of chunk_pages pages; returns how many."""
        out = self.out
        nch, pend, npend = 0, [], 0

        def flush(data):
            c = compress(self.compression, data, self.level)
            out.pack("II", len(c), len(data))
            out.w(c)

        for arr in pages:
            pend.append(arr)
            npend += arr.shape[0]
            while npend >= chunk_pages:
                allp = np.concatenate(pend) if len(pend) > 1 else pend[0]
                nfull = (npend // chunk_pages) * chunk_pages
                for k in range(0, nfull, chunk_pages):
                    flush(allp[k:k + chunk_pages].tobytes())
                    nch += 1
                pend = [allp[nfull:]] if nfull < npend else []
                npend -= nfull
        if npend:
            flush(np.concatenate(pend).tobytes())
            nch += 1
        return nch
