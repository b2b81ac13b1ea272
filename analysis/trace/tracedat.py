"""Fast reader for trace-cmd's trace.dat (file versions 6 and 7): Python + numpy, with
the page walk and zstd decompression in C (analysis/trace/kwalk.c) when it is built.
counts() and lost_events() alone are one call into that C code, and numpy is not even
imported for them (`krig trace stats` without --group-by).

This module reads the file format: header, sections, options, event formats and
the per-cpu page data.  Pages go to analysis.trace.kbuffer a batch at a time (2 MB of
pages; v7 chunks are decompressed into the batch by analysis.trace.tracepages).  No per-event
Python object is made for counting, so memory is bounded by the batch size
whatever the length of the trace.
"""
from __future__ import annotations

import os
import re
import struct
import sys
import zlib

from analysis.trace import native
from krig import safeio
from analysis.trace.tracepages import (DECOMPRESS_THREADS, PageSource, unpack_section,
                                       zstandard_installed)


class TraceError(Exception):
    """A trace.dat problem; str(e) is one line naming the file and the fault."""


MAGIC = b"\x17\x08\x44tracing"
# option ids, which are also the v7 section ids (trace-cmd.h)
OPT_DONE, OPT_DATE, OPT_CPUSTAT, OPT_BUFFER, OPT_TRACECLOCK, OPT_UNAME = 0, 1, 2, 3, 4, 5
OPT_OFFSET, OPT_CPUCOUNT, OPT_VERSION, OPT_TSC2NSEC, OPT_STRINGS = 7, 8, 9, 14, 15
OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS = 16, 17, 18
OPT_KALLSYMS, OPT_PRINTK, OPT_CMDLINES, OPT_BUFFER_TEXT = 19, 20, 21, 22
SEC_COMPRESSED = 1
SECTION_NAMES = {0: "options", 3: "flyrecord", 15: "strings", 16: "header info",
                 17: "ftrace formats", 18: "event formats", 19: "kallsyms", 20: "printk",
                 21: "cmdlines"}

_FIELD_RE = re.compile(rb"field:(.*?);\s*offset:(\d+);\s*size:(\d+);\s*(?:signed:(-?\d+);)?")
_NAME_RE = re.compile(rb"^name:\s*(\S+)", re.M)
_ID_RE = re.compile(rb"^ID:\s*(\d+)", re.M)
_DECL_RE = re.compile(r"^(.*?)([A-Za-z_]\w*)\s*(?:\[([^\]]*)\])?\s*$")


class Field:
    """One field of an event format; kind is num, array, str (char[]), dataloc, relloc, bytes."""

    __slots__ = ("name", "type", "offset", "size", "signed", "kind", "count")

    def __init__(self, decl: str, offset: int, size: int, signed: bool):
        self.offset, self.size, self.signed, self.count = offset, size, signed, 1
        decl = decl.strip()
        if decl.startswith(("__data_loc", "__rel_loc")):
            self.kind = "dataloc" if decl.startswith("__data_loc") else "relloc"
            self.type, self.name = decl.rsplit(None, 1)
            return
        m = _DECL_RE.match(decl)
        if not m:
            self.kind, self.name, self.type = "bytes", decl, decl
            return
        self.type, self.name, dim = m.group(1).strip(), m.group(2), m.group(3)
        if dim is None:
            self.kind = "num" if size in (1, 2, 4, 8) else "bytes"
        elif self.type.replace("const", "").split() in (["char"], ["signed", "char"]):
            self.kind = "str"
        else:
            self.count = int(dim) if dim.strip().isdigit() else 0
            elem = size // self.count if self.count else 0
            self.kind = "array" if elem in (1, 2, 4, 8) and elem * self.count == size else "bytes"

    def __repr__(self):
        return f"Field({self.name!r}, off={self.offset}, size={self.size}, {self.kind})"


class EventFormat:
    """An event's format file; fields are parsed on first use."""

    def __init__(self, system: str, name: str, ev_id: int, raw: bytes):
        self.system, self.name, self.id, self.raw = system, name, ev_id, raw
        self.full_name = f"{system}:{name}"
        self._fields = None

    @property
    def fields(self) -> dict[str, Field]:
        if self._fields is None:
            self._fields = {}
            for m in _FIELD_RE.finditer(self.raw):
                f = Field(m.group(1).decode("latin-1"), int(m.group(2)), int(m.group(3)),
                          m.group(4) not in (None, b"0"))
                self._fields[f.name] = f
        return self._fields


def _parse_cpustat(text: str) -> dict:
    """'key: value' lines of a CPUSTAT option; numbers as int or float."""
    out = {}
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        if sep:
            val = val.strip()
            try:
                out[key.strip()] = int(val)
            except ValueError:
                try:
                    out[key.strip()] = float(val)
                except ValueError:
                    out[key.strip()] = val
    return out


class TraceFile:
    """A trace-cmd trace.dat file (versions 6 and 7).

    Attributes: version, compression (None, 'zstd' or 'zlib'), cpus, page_size,
    long_size (the kernel's, from header_page), big_endian, header_page,
    header_event, cpustats (a dict per CPUSTAT option), buffers (instance names;
    `buffer` picks which one to read in v7 files), options ({id: [raw bytes]}),
    section_table (v7: [(id, offset, flags, size)]).
    """

    BATCH_BYTES = 2 << 20  # pages walked at once (2 MB: measured, see docs/measurements.md "Benchmarks")
    FAST_RUNS = True  # vectorised same-size-run fast path (False: step walker only)
    NATIVE = True  # walk pages and decompress zstd with analysis/trace/kwalk.c when it is built
    #                (False: numpy and python-zstandard)

    def __init__(self, path, buffer: str = ""):
        self.path = os.fspath(path)
        try:     # a trace may come from a guest: a regular file only, no link followed (krig/safeio.py)
            self._f = safeio.open_file(*safeio.split(self.path), cap=1 << 50)
        except safeio.MissingFile:
            raise TraceError(f"{self.path}: cannot open: no such file") from None
        except safeio.UsageError as e:
            raise TraceError(str(e)) from None
        except OSError as e:
            raise TraceError(f"{self.path}: cannot open: {e.strerror or e}") from None
        self._fsize = os.fstat(self._f.fileno()).st_size
        self.compression, self._buffer_name = None, buffer
        self.cpustats: list[dict] = []
        self.options: dict[int, list[bytes]] = {}
        self.buffers: list[str] = []
        self._cpu_data: list[tuple[int, int, int]] = []  # (cpu, offset, size)
        self._sections: dict[int, tuple[int, int]] = {}  # id -> (offset, v6 size)
        self._data_compressed, self._cpucount = False, None
        self._ts_offset, self._tsc2nsec, self._counts, self._lost = 0, None, None, None
        try:
            self._parse()
        except Exception as e:
            self._f.close()
            if isinstance(e, TraceError):
                raise
            zstandard = sys.modules.get("zstandard")  # a ZstdError comes only once it is imported
            if isinstance(e, (struct.error, ValueError, IndexError, zlib.error)) or (
                    zstandard is not None and isinstance(e, zstandard.ZstdError)):
                raise self._err(f"corrupt header data ({e})") from None
            raise

    def _err(self, what: str) -> TraceError:
        return TraceError(f"{self.path}: {what}")

    def _pread(self, off: int, n: int, what: str = "data") -> bytes:
        if off < 0 or n < 0 or off + n > self._fsize:
            raise self._err(f"truncated file: {what} needs {n} bytes at offset {off}, "
                            f"file has {self._fsize} bytes")
        return os.pread(self._f.fileno(), n, off)

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"TraceFile({self.path!r}, v{self.version}, {self.compression or 'uncompressed'}, "
                f"cpus={self.cpus}, page_size={self.page_size})")

    # -------------------------------------------------------------- header
    def _parse(self):
        head = self._pread(0, min(self._fsize, 64), "file header")
        if head[:10] != MAGIC:
            if len(head) < 10 and MAGIC.startswith(head):
                raise self._err(f"truncated file: only {self._fsize} bytes, no trace.dat header")
            raise self._err("bad magic: not a trace-cmd trace.dat file")
        nul = head.find(b"\0", 10)
        if nul < 0:
            raise self._err("truncated file: header ends inside the version string")
        if not head[10:nul].isdigit():
            raise self._err(f"corrupt header: version {head[10:nul][:16]!r} is not a number")
        self.version = int(head[10:nul])
        if self.version not in (6, 7):
            raise self._err(f"unsupported trace.dat version {self.version} (supported: 6, 7)")
        p = nul + 1
        if len(head) < p + 6:
            raise self._err("truncated file: header ends before the page size")
        self.big_endian, self.long_size = bool(head[p]), head[p + 1]
        self._e = e = ">" if self.big_endian else "<"
        (self.page_size,) = struct.unpack_from(e + "I", head, p + 2)
        if self.long_size not in (4, 8) or not 64 <= self.page_size <= 1 << 24 or self.page_size & 3:
            raise self._err(f"corrupt header: long size {self.long_size}, page size {self.page_size}")
        (self._parse_v6 if self.version == 6 else self._parse_v7)(p + 6)
        for cpu, off, size in self._cpu_data:
            if size and off + size > self._fsize:
                raise self._err(f"truncated file: cpu {cpu} data needs {off + size} bytes, "
                                f"file has {self._fsize}")
        fields = {m[2]: (int(m[3]), int(m[4])) for m in re.finditer(
            r"field:\s*(.*?)\s+(\w+)(?:\[\d*\])?;\s*offset:(\d+);\s*size:(\d+);",
            self.header_page.decode("latin-1"))}
        if "timestamp" not in fields or fields.get("commit", (0, 0))[1] not in (4, 8):
            raise self._err("corrupt header_page format: no timestamp or commit field")
        self.commit_size = self.long_size = fields["commit"][1]  # the kernel's long
        self._data_start = fields.get("data", (8 + self.commit_size, 0))[0]
        if self._data_start & 3 or self._data_start >= self.page_size:
            raise self._err(f"corrupt header_page: data offset {self._data_start}")
        self._events, self._by_id = {}, {}
        for system, raw in self._formats:
            m, i = _NAME_RE.search(raw), _ID_RE.search(raw)
            if m and i:
                ev = EventFormat(system, m.group(1).decode("latin-1"), int(i.group(1)), raw)
                self._events[ev.full_name] = ev
                self._by_id.setdefault(ev.id, ev)
        cpus = [c for c, _, _ in self._cpu_data]
        self.cpus = self._cpucount or (max(cpus) + 1 if cpus else 0)
        opt = lambda oid: [r.rstrip(b"\0").decode("latin-1") for r in self.options.get(oid, [])]  # noqa: E731
        self.cpustats = [_parse_cpustat(t) for t in opt(OPT_CPUSTAT)]
        self._ts_offset = sum(int(t or 0, 0) for t in opt(OPT_OFFSET)) + \
            sum(int(t or 0, 0) * 1000 for t in opt(OPT_DATE))
        for raw in self.options.get(OPT_TSC2NSEC, []):
            if len(raw) >= 16 and struct.unpack_from(e + "I", raw)[0]:
                self._tsc2nsec = struct.unpack_from(e + "II", raw)

    def _read_header_info(self, buf: bytes, p: int) -> int:
        for name in ("header_page", "header_event"):
            tag = name.encode() + b"\0"
            if len(buf) < p + len(tag) + 8:
                raise self._err(f"truncated file: ends at offset {len(buf)} inside the {name}")
            if buf[p:p + len(tag)] != tag:
                raise self._err(f"corrupt header: expected {name!r} at offset {p}")
            (n,) = struct.unpack_from(self._e + "Q", buf, p + len(tag))
            p += len(tag) + 8
            setattr(self, name, buf[p:p + n])
            p += n
        if p > len(buf):
            raise self._err("truncated file inside the header_event")
        return p

    def _read_formats(self, buf: bytes, p: int, system: str | None) -> int:
        """ftrace formats (system='ftrace') or the systems list (system=None)."""
        e = self._e
        (nsys,) = (1,) if system else struct.unpack_from(e + "I", buf, p)
        p += 0 if system else 4
        for _ in range(nsys):
            if not system:
                z = buf.index(b"\0", p)
                name, p = buf[p:z].decode("latin-1"), z + 1
            (count,) = struct.unpack_from(e + "I", buf, p)
            p += 4
            for _ in range(count):
                (n,) = struct.unpack_from(e + "Q", buf, p)
                self._formats.append((system or name, buf[p + 8:p + 8 + n]))
                p += 8 + n
        if p > len(buf):
            raise self._err("truncated file inside the event formats")
        return p

    def _parse_v6(self, p: int):
        # the v6 metadata is sequential: parse a window, grow it if it was too short
        start, win, last = p, 1 << 20, None
        while True:
            self._formats = []
            buf = self._pread(0, min(self._fsize, win), "header")
            try:
                p = self._read_header_info(buf, start)
                p = self._read_formats(buf, p, "ftrace")
                p = self._read_formats(buf, p, None)
                break
            except (struct.error, ValueError, TraceError) as ex:
                last = ex
            if len(buf) >= self._fsize:
                if isinstance(last, TraceError):
                    raise last
                raise self._err("truncated or corrupt file inside the v6 header and event formats")
            win *= 4
        e = self._e
        for sid, fmt in ((OPT_KALLSYMS, "I"), (OPT_PRINTK, "I"), (OPT_CMDLINES, "Q")):
            (n,) = struct.unpack(e + fmt, self._pread(p, struct.calcsize(fmt), "v6 header"))
            self._sections[sid] = (p + struct.calcsize(fmt), n)
            p += struct.calcsize(fmt) + n
        (ncpus,) = struct.unpack(e + "I", self._pread(p, 4, "cpu count"))
        kind = self._pread(p + 4, 10, "data type")
        p += 14
        if kind.startswith(b"options"):
            while (oid := struct.unpack(e + "H", self._pread(p, 2, "options"))[0]) != OPT_DONE:
                (n,) = struct.unpack(e + "I", self._pread(p + 2, 4, "options"))
                self._add_option(oid, self._pread(p + 6, n, "option"))
                p += 6 + n
            kind = self._pread(p + 2, 10, "data type")
            p += 12
        ncpus = self._cpucount = self._cpucount or ncpus
        if kind.startswith(b"latency"):
            return
        if not kind.startswith(b"flyrecord"):
            raise self._err(f"corrupt header: unknown data type {kind.rstrip(bytes(1))!r}")
        if self._buffer_name:
            raise self._err("reading trace instances of v6 files is not supported")
        table = self._pread(p, 16 * ncpus, "cpu table")
        self._cpu_data = [(c, *struct.unpack_from(e + "QQ", table, 16 * c)) for c in range(ncpus)]

    def _add_option(self, oid: int, data: bytes):
        self.options.setdefault(oid, []).append(data)
        if oid == OPT_CPUCOUNT and len(data) >= 4:
            (self._cpucount,) = struct.unpack_from(self._e + "I", data)

    def _section(self, off: int, expect: int | None = None, header_only=False):
        """(id, flags, payload) of the v7 section at off; payload decompressed."""
        sid, flags, _desc, size = struct.unpack(self._e + "HHIQ",
                                                self._pread(off, 16, "section header"))
        if expect is not None and sid != expect:
            raise self._err(f"corrupt file: expected section {expect} at offset {off}, found {sid}")
        if header_only:
            return sid, flags, b""
        data = self._pread(off + 16, size, f"the {SECTION_NAMES.get(sid, sid)} section")
        if flags & SEC_COMPRESSED:
            if size < 8:
                raise self._err(f"corrupt compressed section {sid} at offset {off}")
            csize, usize = struct.unpack_from(self._e + "II", data)
            data = unpack_section(self.compression, data[8:8 + csize], usize)
            if len(data) != usize:
                raise self._err(f"corrupt compressed section {sid} at offset {off}")
        return sid, flags, data

    def _parse_v7(self, p: int):
        e = self._e
        head = self._pread(p, min(256, self._fsize - p), "compression header")
        z1 = head.find(b"\0")
        z2 = head.find(b"\0", z1 + 1)
        if z1 < 0 or z2 < 0 or z2 + 9 > len(head):
            raise self._err("truncated file: header ends inside the compression header")
        name = head[:z1].decode("latin-1")
        self.compression = None if name in ("none", "") else name
        if self.compression not in (None, "zstd", "zlib"):
            raise self._err(f"unsupported compression algorithm {name!r}")
        if self.compression == "zstd" and not zstandard_installed():
            raise self._err("zstd-compressed trace but the 'zstandard' module is missing")
        (opt_off,) = struct.unpack_from(e + "Q", head, z2 + 1)
        # the section table: sections follow each other from here (trace-cmd finds
        # the strings this way); one that runs past the end means truncation
        self.section_table, off = [], p + z2 + 9
        while off + 16 <= self._fsize:
            sid, flags, _desc, size = struct.unpack(e + "HHIQ", self._pread(off, 16))
            if sid > OPT_BUFFER_TEXT or flags > SEC_COMPRESSED:
                break  # not a section header: stop, as trace-cmd does
            if off + 16 + size > self._fsize:
                raise self._err(f"truncated file: the {SECTION_NAMES.get(sid, sid)} section at "
                                f"offset {off} needs {size} bytes, file has {self._fsize}")
            self.section_table.append((sid, off, flags, size))
            off += 16 + size
        self._formats, seen = [], set()
        while opt_off:  # options sections, chained through their DONE option
            if opt_off in seen:
                raise self._err("corrupt file: options sections form a loop")
            seen.add(opt_off)
            _, _, data = self._section(opt_off, OPT_DONE)
            opt_off = q = 0
            while q + 6 <= len(data):
                oid, n = struct.unpack_from(e + "HI", data, q)
                body = data[q + 6:q + 6 + n]
                q += 6 + n
                if oid == OPT_DONE:
                    (opt_off,) = struct.unpack_from(e + "Q", body)
                    break
                if OPT_HEADER_INFO <= oid <= OPT_CMDLINES:  # the section table
                    self._sections[oid] = (struct.unpack_from(e + "Q", body)[0], 0)
                elif oid == OPT_BUFFER:
                    self._buffer_option(body)
                else:
                    self._add_option(oid, body)
        if OPT_HEADER_INFO not in self._sections:
            raise self._err("corrupt file: no header info section")
        for sid, read in ((OPT_HEADER_INFO, lambda d: self._read_header_info(d, 0)),
                          (OPT_FTRACE_EVENTS, lambda d: self._read_formats(d, 0, "ftrace")),
                          (OPT_EVENT_FORMATS, lambda d: self._read_formats(d, 0, None))):
            if sid in self._sections:
                try:
                    read(self._section(self._sections[sid][0], sid)[2])
                except (struct.error, ValueError):
                    raise self._err(f"corrupt {SECTION_NAMES[sid]} section") from None
        if self.buffers and self._buffer_name not in self.buffers:
            raise self._err(f"no trace instance {self._buffer_name!r} (have: "
                            + ", ".join(repr(b) for b in self.buffers) + ")")

    def _buffer_option(self, body: bytes):
        (off,) = struct.unpack_from(self._e + "Q", body)
        z = body.index(b"\0", 8)
        z2 = body.index(b"\0", z + 1)  # then the clock name
        self.buffers.append(body[8:z].decode("latin-1"))
        if self.buffers[-1] != self._buffer_name:
            return
        page_size, ncpu = struct.unpack_from(self._e + "II", body, z2 + 1)
        self.page_size = page_size or self.page_size
        self._cpu_data = [struct.unpack_from(self._e + "IQQ", body, z2 + 9 + 20 * i)
                          for i in range(ncpu)]
        self._data_compressed = bool(self._section(off, header_only=True)[1] & SEC_COMPRESSED)

    # ------------------------------------------------------- metadata API
    def section_bytes(self, sid: int) -> bytes:
        """Raw payload of kallsyms (19), printk (20) or cmdlines (21); b'' if absent."""
        if sid not in self._sections:
            return b""
        if self.version == 6:
            return self._pread(*self._sections[sid], "section")
        data = self._section(self._sections[sid][0], sid)[2]
        fmt = self._e + ("Q" if sid == OPT_CMDLINES else "I")
        (n,) = struct.unpack_from(fmt, data)
        return data[struct.calcsize(fmt):struct.calcsize(fmt) + n]

    def formats(self) -> list[tuple[str, bytes]]:
        """(system, raw format text) for every event format, in file order."""
        return list(self._formats)

    def event(self, name: str) -> EventFormat:
        """The format of 'system:event' (or a unique bare event name)."""
        ev = self._events.get(name)
        if ev is None and ":" not in name:
            hits = [e for e in self._events.values() if e.name == name]
            ev = hits[0] if len(hits) == 1 else None
        if ev is None:
            names = sorted(self._events)
            system = name.partition(":")[0] if ":" in name else None
            import difflib
            close = difflib.get_close_matches(name, names, n=6, cutoff=0.6)
            same = [n for n in names if system and n.startswith(system + ":")]
            if close or same:
                known = close or same
                what = "did you mean" if close else f"events of {system} in this trace"
                raise self._err(f"unknown event {name!r}; {what}: " + ", ".join(known[:6])
                                + (f" ... ({len(known)} in all)" if len(known) > 6 else ""))
            systems = sorted({n.partition(":")[0] for n in names})
            raise self._err(f"unknown event {name!r}; the trace has no such event, nor a close one "
                            f"(give SYSTEM:EVENT; its systems: {', '.join(systems)})")
        return ev

    def event_names(self) -> list[str]:
        return list(self._events)

    # ---------------------------------------------------------- page data
    def _pages(self) -> PageSource:
        return PageSource(self._f.fileno(), self._fsize, self.page_size, self._e, self.compression,
                          self._err, self.BATCH_BYTES, self.NATIVE)

    # -- the file's layout, for a tool that writes trace.dat files like this one (tests/tracegen.py)

    @property
    def byte_order(self) -> str:
        """The struct module's prefix for the file's byte order: "<" or ">"."""
        return self._e

    @property
    def data_start(self) -> int:
        """Where a ring-buffer page's records start (the header_page's data offset)."""
        return self._data_start

    def event_formats(self) -> dict:
        """Every event format the file describes, by "system:name"."""
        return dict(self._events)

    def cpu_data(self) -> list[tuple[int, int, int]]:
        """(cpu, offset, size) of each CPU's ring-buffer pages in the file."""
        return list(self._cpu_data)

    def page_batches(self, off: int, size: int):
        """(uint8 buffer, n_pages) for one CPU's pages, decompressed, a batch at a time (the
        buffer is reused: copy what you keep)."""
        return self._batches(off, size)

    def _batches(self, off: int, size: int):
        """Yield (uint8 buffer, n_pages) for one cpu's data (the buffer is reused)."""
        yield from self._pages().batches(off, size, self._data_compressed)

    def _walk(self, ev_id=None, fields=(), with_ts=True, ordered=True, prefetch=True):
        """One pass over all pages, a batch at a time: yields (cpu, {column: array}) with the
        records of ev_id in that batch ('ts' and 'cpu' only with_ts; file order only if
        ordered); when the pass is complete, sets the counts by id and the loss stats."""
        import numpy as np

        from analysis.trace.kbuffer import PageDecoder
        kb = PageDecoder(self.page_size, self._data_start, self.commit_size, self.big_endian,
                         self._err, fast=self.FAST_RUNS, native=self.NATIVE)
        counts = np.zeros(1 << 16, np.int64)
        lost, per_cpu = [0, 0, 0], {}
        want_pos = ev_id is not None
        for cpu, buf, n, page0 in self._pages().all_batches(self._cpu_data, self._data_compressed,
                                                             prefetch):
            tid, pos, ts, loss = kb.walk(buf, n, cpu, page0, want_pos, want_pos and with_ts)
            lost = [a + b for a, b in zip(lost, loss)]
            # a flagged page without a stored count lost at least one event
            per_cpu[cpu] = per_cpu.get(cpu, 0) + loss[1] + loss[2]
            counts += np.bincount(tid, minlength=1 << 16)
            if not want_pos:
                continue
            sel = np.flatnonzero(tid == ev_id)
            if not sel.size:
                continue
            p = pos[sel]
            if ordered:
                order = np.argsort(p, kind="stable")  # file order
                p, sel = p[order], sel[order]
            cols = {f.name: kb.gather(buf, p, f) for f in fields}
            if with_ts:
                cols["ts"], cols["cpu"] = ts[sel], np.full(p.size, cpu, np.int32)
            yield cpu, cols
        self._set_counts({i: int(counts[i]) for i in np.flatnonzero(counts).tolist()}, lost, per_cpu)

    def _set_counts(self, by_id: dict, lost: list, per_cpu: dict):
        """The result of a pass: counts by id (in id order), loss stats of all cpus and by cpu."""
        self._counts = {}
        for i, n in by_id.items():
            ev = self._by_id.get(i)
            self._counts[ev.full_name if ev else f"unknown:id{i}"] = n
        self._lost = (lost, per_cpu)

    def _count(self):
        """counts() and lost_events()'s pass: in C in one call (analysis/trace/kwalk.c's kcount)
        when it is built and the data is raw or zstd, else (or when the C code finds anything
        amiss, so that the fault is named as the reader names it) with _scan()."""
        if self.NATIVE and native.available() and (not self._data_compressed
                                                     or self.compression == "zstd"):
            threads = max(1, min(DECOMPRESS_THREADS, os.cpu_count() or 1))
            got = native.count(self._f.fileno(), self._fsize, self._cpu_data, self._data_compressed,
                               self.page_size, self._data_start, self.commit_size, self.big_endian,
                               threads)
            if got is not None:
                by_id, by_cpu = got
                lost = [sum(x[k] for x in by_cpu.values()) for k in range(3)]
                self._set_counts(by_id, lost, {cpu: x[1] + x[2] for cpu, x in by_cpu.items()})
                return
        self._scan()

    def _scan(self, ev_id=None, fields=(), with_ts=True):
        """One pass over all pages: counts by id, loss stats, and the columns of ev_id."""
        cols = {k: [] for k in (["ts", "cpu"] if with_ts else []) + [f.name for f in fields]}
        for _, batch in self._walk(ev_id, fields, with_ts):
            for k, v in batch.items():
                cols[k].append(v)
        return cols

    def _fields(self, ev: EventFormat, fields) -> list[Field]:
        fl = []
        for name in (fields,) if isinstance(fields, str) else fields:
            if name not in ev.fields:
                raise self._err(f"event {ev.full_name} has no field {name!r}; fields: "
                                + ", ".join(ev.fields))
            fl.append(ev.fields[name])
        return fl

    def field_batches(self, event: str, fields):
        """Yield {field: array} for the `event` records of each batch of pages, in no
        particular order within a batch (records that follow each other on a page stay
        together), without time stamps.

        For aggregates over long traces: memory is one batch of pages (three while the
        next ones are decompressed ahead) and the arrays of that batch, whatever the
        length of the trace.  After the last batch, counts() and lost_events() are known.
        """
        ev = self.event(event)
        fl = self._fields(ev, fields)
        for _, cols in self._walk(ev.id, fl, with_ts=False, ordered=False):
            yield cols

    # ----------------------------------------------------------------- API
    def counts(self) -> dict[str, int]:
        """Events recorded, by 'system:event' (only events present)."""
        if self._counts is None:
            self._count()
        return dict(self._counts)

    def columns(self, event: str, fields=(), *, with_ts: bool = True) -> dict[str, np.ndarray]:
        """Arrays for every `event` record: 'ts' (uint64 ns), 'cpu' and each field.

        Numbers come as numpy int arrays, char[] and __data_loc strings as object
        arrays of str.  Rows are in time stamp order (ties: lower cpu first, like
        trace-cmd report).  with_ts=False returns only the fields, in file order.
        """
        ev = self.event(event)
        fl = self._fields(ev, fields)
        cols = self._scan(ev.id, fl, with_ts)
        import numpy as np
        empty = {"ts": np.uint64, "cpu": np.int32}
        empty.update({f.name: object if f.kind in ("str", "dataloc", "relloc") else np.int64
                      for f in fl})
        out = {k: np.concatenate(v) if v else np.empty(0, empty[k])
               for k, v in cols.items() if with_ts or k not in ("ts", "cpu")}
        if not with_ts:
            return out
        ts = out["ts"]
        if self._tsc2nsec:
            mult, shift = (np.uint64(x) for x in self._tsc2nsec)
            lo, hi = ts & np.uint64(0xFFFFFFFF), ts >> np.uint64(32)
            ts = ((lo * mult) >> shift) + ((hi * mult) << (np.uint64(32) - shift))
        if self._ts_offset:
            ts = (ts.astype(np.int64) + self._ts_offset).astype(np.uint64)
        out["ts"] = ts
        if len(self._cpu_data) > 1 and ts.size and (np.diff(ts.astype(np.int64)) < 0).any():
            order = np.argsort(ts, kind="stable")
            out = {k: v[order] for k, v in out.items()}
        return out

    def lost_events(self) -> dict:
        """Lost events: pages flagged by the kernel plus the CPUSTAT counters.

        total = sum over cpus of max(overrun, counts stored on pages + flagged pages without a
        count) + dropped (the counts stored on pages come from the kernel's overrun counter; a
        page flagged without a count lost at least one event).
        """
        if self._lost is None:
            self._count()
        (flagged, stored, uncounted), per_cpu = self._lost
        stats = {int(st.get("CPU", i)): st for i, st in enumerate(self.cpustats)}
        overrun = dropped = total = 0
        for cpu in set(stats) | set(per_cpu):
            o = int(stats.get(cpu, {}).get("overrun", 0) or 0)
            d = int(stats.get(cpu, {}).get("dropped events", 0) or 0)
            overrun, dropped = overrun + o, dropped + d
            total += max(o, per_cpu.get(cpu, 0)) + d
        return {"pages_with_loss": flagged, "lost_in_pages": stored, "pages_without_count": uncounted,
                "overrun": overrun,
                "dropped": dropped, "total": total}
