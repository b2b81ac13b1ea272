"""Fast reader for trace-cmd's trace.dat (file versions 6 and 7), pure Python + numpy.

The ring-buffer pages are decoded in batches: for a batch of pages (a few MB,
one decompressed v7 chunk group at a time) every page gets a cursor, and the
event headers are walked for all pages at once with numpy, one event per page
per step.  No per-event Python object is ever made for counting, so memory
stays bounded by the batch size whatever the length of the trace.

Semantics follow libtraceevent's kbuffer (what `trace-cmd report` uses):
type_len 1..28 data events, 0 = length word follows, 29 padding (skipped,
its delta still counts), 30 time extend, 31 absolute time stamp.
"""
from __future__ import annotations

import difflib
import os
import queue
import re
import struct
import threading
import zlib

import numpy as np

try:  # one-line errors that the krig CLI already knows how to print
    from krig.errors import UsageError as _Base
except Exception:  # pragma: no cover - used standalone
    _Base = Exception

try:
    import zstandard
except ImportError:  # pragma: no cover
    zstandard = None


class TraceError(_Base):
    """A trace.dat problem; str(e) is one line naming the file and the fault."""


MAGIC = b"\x17\x08\x44tracing"
COMMIT_MASK = (1 << 27) - 1
MISSED_EVENTS = 1 << 31
MISSED_STORED = 1 << 30
TS_MSB = np.uint64(0xF8 << 56)

# option ids, also v7 section ids (trace-cmd.h)
OPT_DONE, OPT_DATE, OPT_CPUSTAT, OPT_BUFFER, OPT_TRACECLOCK, OPT_UNAME = 0, 1, 2, 3, 4, 5
OPT_OFFSET, OPT_CPUCOUNT, OPT_VERSION, OPT_TSC2NSEC, OPT_STRINGS = 7, 8, 9, 14, 15
OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS = 16, 17, 18
OPT_KALLSYMS, OPT_PRINTK, OPT_CMDLINES, OPT_BUFFER_TEXT = 19, 20, 21, 22
SEC_COMPRESSED = 1

_SECTION_NAMES = {0: "options", 3: "flyrecord", 15: "strings", 16: "header info",
                  17: "ftrace formats", 18: "event formats", 19: "kallsyms", 20: "printk",
                  21: "cmdlines"}
_SPECIAL = np.zeros(32, bool)
_SPECIAL[[0, 29, 30, 31]] = True
_FIELD_RE = re.compile(rb"field:(.*?);\s*offset:(\d+);\s*size:(\d+);\s*(?:signed:(-?\d+);)?")
_NAME_RE = re.compile(rb"^name:\s*(\S+)", re.M)
_ID_RE = re.compile(rb"^ID:\s*(\d+)", re.M)
_DECL_RE = re.compile(r"^(.*?)([A-Za-z_]\w*)\s*(?:\[([^\]]*)\])?\s*$")


def _prefetched(gen, depth: int):
    """Run generator `gen` in a thread, `depth` items ahead; errors re-raised here."""
    if depth <= 0:
        yield from gen
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def run():
        try:
            for item in gen:
                if not put(item):
                    return
            put(done)
        except BaseException as e:  # handed to the consumer
            put(e)

    threading.Thread(target=run, daemon=True, name="tracedat-prefetch").start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


class Field:
    """One field of an event format."""

    __slots__ = ("name", "type", "offset", "size", "signed", "kind", "count")

    def __init__(self, decl: str, offset: int, size: int, signed: bool):
        self.offset, self.size, self.signed = offset, size, signed
        self.count = 1
        decl = decl.strip()
        if decl.startswith(("__data_loc", "__rel_loc")):
            self.kind = "dataloc" if decl.startswith("__data_loc") else "relloc"
            self.name = decl.split()[-1]
            self.type = decl.rsplit(None, 1)[0]
            return
        m = _DECL_RE.match(decl)
        if not m:
            self.kind, self.name, self.type = "bytes", decl, decl
            return
        self.type, self.name, dim = m.group(1).strip(), m.group(2), m.group(3)
        base = self.type.replace("const", "").replace("signed", "").split()
        if dim is not None:
            if base == ["char"]:
                self.kind = "str"
                return
            self.count = int(dim) if dim.strip().isdigit() else 0
            elem = size // self.count if self.count else 0
            self.kind = "array" if elem in (1, 2, 4, 8) and elem * self.count == size else "bytes"
            return
        self.kind = "num" if size in (1, 2, 4, 8) else "bytes"

    def __repr__(self):
        return f"Field({self.name!r}, off={self.offset}, size={self.size}, {self.kind})"


class EventFormat:
    """An event's format file; fields are parsed on first use."""

    def __init__(self, system: str, name: str, ev_id: int, raw: bytes):
        self.system, self.name, self.id, self.raw = system, name, ev_id, raw
        self._fields = None

    @property
    def full_name(self):
        return f"{self.system}:{self.name}"

    @property
    def fields(self) -> dict[str, Field]:
        if self._fields is None:
            out = {}
            for m in _FIELD_RE.finditer(self.raw):
                f = Field(m.group(1).decode("latin-1"), int(m.group(2)), int(m.group(3)),
                          m.group(4) not in (None, b"0"))
                out[f.name] = f
            self._fields = out
        return self._fields


def _parse_cpustat(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        if not sep:
            continue
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

    Attributes: version, compression (None, 'zstd', 'zlib'), cpus, page_size,
    long_size, big_endian, cpustats (list of dicts from the CPUSTAT options),
    buffers (names of the trace instances in the file), options (raw bytes by id).
    """

    BATCH_BYTES = 8 << 20  # pages walked at once
    FAST_RUNS = True  # vectorised same-size-run fast path (False: step walker only)
    PREFETCH = 2  # decompressed batches prepared ahead by a thread (0: no thread)

    def __init__(self, path, buffer: str = ""):
        self.path = os.fspath(path)
        try:
            self._f = open(self.path, "rb")
        except OSError as e:
            raise TraceError(f"{self.path}: cannot open: {e.strerror or e}") from None
        self._fsize = os.fstat(self._f.fileno()).st_size
        self.compression = None
        self.cpustats: list[dict] = []
        self.options: dict[int, list[bytes]] = {}
        self.buffers: list[str] = []
        self._buffer_name = buffer
        self._cpu_data: list[tuple[int, int, int]] = []  # (cpu, offset, size)
        self._data_compressed = False
        self._ts_offset = 0
        self._tsc2nsec = None
        self._counts = None
        self._lost = None
        self._sections: dict[int, tuple[int, int, int]] = {}  # id -> (data offset, size, flags)
        try:
            self._parse()
        except TraceError:
            self._f.close()
            raise
        except (struct.error, ValueError, IndexError, UnicodeDecodeError, zlib.error) as e:
            self._f.close()
            raise TraceError(f"{self.path}: corrupt header data ({e})") from None
        except Exception as e:
            self._f.close()
            if zstandard is not None and isinstance(e, zstandard.ZstdError):
                raise TraceError(f"{self.path}: corrupt compressed data ({e})") from None
            raise

    # ------------------------------------------------------------------ io
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

    def _decompress(self, data: bytes, usize: int) -> bytes:
        if self.compression == "zstd":
            if zstandard is None:
                raise self._err("zstd-compressed trace but the 'zstandard' module is missing")
            out = self._zstd.decompress(data, max_output_size=usize)
        elif self.compression == "zlib":
            out = zlib.decompress(data)
        else:
            raise self._err(f"unsupported compression {self.compression!r}")
        if len(out) != usize:
            raise self._err(f"corrupt compressed block: {len(out)} bytes, expected {usize}")
        return out

    # -------------------------------------------------------------- header
    def _parse(self):
        head = self._pread(0, min(self._fsize, 64), "file header") if self._fsize else b""
        if len(head) < 10 or head[:10] != MAGIC:
            if len(head) < 10 and MAGIC.startswith(head):
                raise self._err(f"truncated file: only {self._fsize} bytes, no trace.dat header")
            raise self._err("bad magic: not a trace-cmd trace.dat file")
        nul = head.find(b"\0", 10)
        if nul < 0:
            raise self._err("truncated file: header ends inside the version string")
        ver = head[10:nul]
        if not ver.isdigit():
            raise self._err(f"corrupt header: version {ver[:16]!r} is not a number")
        self.version = int(ver)
        if self.version not in (6, 7):
            raise self._err(f"unsupported trace.dat version {self.version} (supported: 6, 7)")
        p = nul + 1
        if len(head) < p + 6:
            raise self._err("truncated file: header ends before the page size")
        self.big_endian = bool(head[p])
        self._e = ">" if self.big_endian else "<"
        self.long_size = head[p + 1]
        if self.long_size not in (4, 8):
            raise self._err(f"corrupt header: long size {self.long_size}")
        (self.page_size,) = struct.unpack_from(self._e + "I", head, p + 2)
        p += 6
        if self.page_size < 64 or self.page_size & 3 or self.page_size > (1 << 24):
            raise self._err(f"corrupt header: page size {self.page_size}")
        self._cpucount = None
        if self.version == 6:
            self._parse_v6(p)
        else:
            self._parse_v7(p)
        self._finish_header()

    def _finish_header(self):
        hp = self.header_page.decode("latin-1", "replace")
        fields = {m.group(2): (int(m.group(3)), int(m.group(4))) for m in re.finditer(
            r"field:\s*(.*?)\s+(\w+)(?:\[\d*\])?;\s*offset:(\d+);\s*size:(\d+);", hp)}
        if "timestamp" not in fields or "commit" not in fields:
            raise self._err("corrupt header_page format: no timestamp/commit fields")
        self.commit_size = fields["commit"][1]
        if self.commit_size not in (4, 8):
            raise self._err(f"corrupt header_page: commit size {self.commit_size}")
        self.long_size = self.commit_size  # the kernel's long, as trace-cmd does
        self._data_start = fields.get("data", (8 + self.commit_size, 0))[0]
        if self._data_start & 3 or self._data_start >= self.page_size:
            raise self._err(f"corrupt header_page: data offset {self._data_start}")
        self._events = {}
        self._by_id = {}
        for system, raw in self._formats:
            m, i = _NAME_RE.search(raw), _ID_RE.search(raw)
            if not m or not i:
                continue
            ev = EventFormat(system, m.group(1).decode("latin-1"), int(i.group(1)), raw)
            self._events[ev.full_name] = ev
            self._by_id.setdefault(ev.id, ev)
        cpus = [c for c, _, _ in self._cpu_data]
        self.cpus = self._cpucount or (max(cpus) + 1 if cpus else 0)
        for text in self.options.get(OPT_CPUSTAT, []):
            self.cpustats.append(_parse_cpustat(text.rstrip(b"\0").decode("latin-1")))
        for raw in self.options.get(OPT_OFFSET, []):
            self._ts_offset += int(raw.rstrip(b"\0").decode() or 0, 0)
        for raw in self.options.get(OPT_DATE, []):
            self._ts_offset += int(raw.rstrip(b"\0").decode() or 0, 0) * 1000
        for raw in self.options.get(OPT_TSC2NSEC, []):
            if len(raw) >= 16:
                mult, shift, _off = struct.unpack_from(self._e + "IIQ", raw)
                if mult:
                    self._tsc2nsec = (mult, shift)

    def _read_header_info(self, buf: bytes, p: int) -> int:
        e = self._e
        if len(buf) < p + 20:
            raise self._err(f"truncated file: ends at offset {len(buf)} inside the header_page")
        if buf[p:p + 12] != b"header_page\0":
            raise self._err(f"corrupt header: expected 'header_page' at offset {p}")
        (n,) = struct.unpack_from(e + "Q", buf, p + 12)
        self.header_page = buf[p + 20:p + 20 + n]
        p += 20 + n
        if len(buf) < p + 21:
            raise self._err(f"truncated file: ends at offset {len(buf)} inside the header_event")
        if buf[p:p + 13] != b"header_event\0":
            raise self._err(f"corrupt header: expected 'header_event' at offset {p}")
        (n,) = struct.unpack_from(e + "Q", buf, p + 13)
        self.header_event = buf[p + 21:p + 21 + n]
        if len(self.header_event) != n:
            raise self._err("truncated file inside header_event")
        return p + 21 + n

    def _read_ftrace(self, buf: bytes, p: int) -> int:
        (count,) = struct.unpack_from(self._e + "I", buf, p)
        p += 4
        for _ in range(count):
            (n,) = struct.unpack_from(self._e + "Q", buf, p)
            self._formats.append(("ftrace", buf[p + 8:p + 8 + n]))
            p += 8 + n
        return p

    def _read_systems(self, buf: bytes, p: int) -> int:
        (nsys,) = struct.unpack_from(self._e + "I", buf, p)
        p += 4
        for _ in range(nsys):
            z = buf.index(b"\0", p)
            system = buf[p:z].decode("latin-1")
            (count,) = struct.unpack_from(self._e + "I", buf, z + 1)
            p = z + 5
            for _ in range(count):
                (n,) = struct.unpack_from(self._e + "Q", buf, p)
                self._formats.append((system, buf[p + 8:p + 8 + n]))
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
                p = self._read_ftrace(buf, p)
                p = self._read_systems(buf, p)
                if p <= len(buf):
                    break
            except (struct.error, ValueError, TraceError) as e:
                last = e
            if len(buf) >= self._fsize:
                if isinstance(last, TraceError):
                    raise last
                raise self._err("truncated or corrupt file inside the v6 header and event formats")
            win *= 4
        e = self._e
        for sid, width in ((OPT_KALLSYMS, 4), (OPT_PRINTK, 4), (OPT_CMDLINES, 8)):
            (n,) = struct.unpack(e + ("I" if width == 4 else "Q"), self._pread(p, width, "v6 header"))
            self._sections[sid] = (p + width, n, 0)
            p += width + n
        (ncpus,) = struct.unpack(e + "I", self._pread(p, 4, "cpu count"))
        p += 4
        kind = self._pread(p, 10, "data type")
        p += 10
        if kind.startswith(b"options"):
            while True:
                (oid,) = struct.unpack(e + "H", self._pread(p, 2, "options"))
                p += 2
                if oid == OPT_DONE:
                    break
                (n,) = struct.unpack(e + "I", self._pread(p, 4, "options"))
                self._add_option(oid, self._pread(p + 4, n, "option"))
                p += 4 + n
            kind = self._pread(p, 10, "data type")
            p += 10
        if self._cpucount:
            ncpus = self._cpucount
        self._cpucount = ncpus
        if kind.startswith(b"latency"):
            return
        if not kind.startswith(b"flyrecord"):
            raise self._err(f"corrupt header: unknown data type {kind.rstrip(bytes(1))!r}")
        if self._buffer_name:
            raise self._err("reading trace instances of v6 files is not supported")
        table = self._pread(p, 16 * ncpus, "cpu table")
        for cpu in range(ncpus):
            off, size = struct.unpack_from(e + "QQ", table, 16 * cpu)
            self._cpu_data.append((cpu, off, size))
        self._check_cpu_data()

    def _check_cpu_data(self):
        for cpu, off, size in self._cpu_data:
            if size and off + size > self._fsize:
                raise self._err(f"truncated file: cpu {cpu} data needs {off + size} bytes, "
                                f"file has {self._fsize}")

    def _add_option(self, oid: int, data: bytes):
        self.options.setdefault(oid, []).append(data)
        if oid == OPT_CPUCOUNT and len(data) >= 4:
            (self._cpucount,) = struct.unpack_from(self._e + "I", data)

    # ------------------------------------------------------------------ v7
    def _section_header(self, off: int):
        sid, flags, desc, size = struct.unpack(self._e + "HHIQ", self._pread(off, 16, "section header"))
        return sid, flags, size

    def _section_payload(self, off: int, expect: int | None = None) -> tuple[int, bytes]:
        sid, flags, size = self._section_header(off)
        if expect is not None and sid != expect:
            raise self._err(f"corrupt file: expected section {expect} at offset {off}, found {sid}")
        data = self._pread(off + 16, size, f"the {_SECTION_NAMES.get(sid, sid)} section")
        if flags & SEC_COMPRESSED:
            if size < 8:
                raise self._err(f"corrupt compressed section {sid} at offset {off}")
            csize, usize = struct.unpack_from(self._e + "II", data)
            data = self._decompress(data[8:8 + csize], usize)
        return sid, data

    def _parse_v7(self, p: int):
        head = self._pread(p, min(256, self._fsize - p), "compression header")
        z1 = head.find(b"\0")
        z2 = head.find(b"\0", z1 + 1)
        if z1 < 0 or z2 < 0 or z2 + 9 > len(head):
            raise self._err("truncated file: header ends inside the compression header")
        name = head[:z1].decode("latin-1")
        self.compression = None if name in ("none", "") else name
        if self.compression not in (None, "zstd", "zlib"):
            raise self._err(f"unsupported compression algorithm {name!r}")
        if self.compression == "zstd":
            if zstandard is None:
                raise self._err("zstd-compressed trace but the 'zstandard' module is missing")
            self._zstd = zstandard.ZstdDecompressor()
        (opt_off,) = struct.unpack_from(self._e + "Q", head, z2 + 1)
        first = p + z2 + 9
        # metadata strings sections (found by walking the sections from the start)
        self.strings = b""
        off = first
        while off + 16 <= self._fsize:
            sid, flags, size = self._section_header(off)
            if sid == OPT_STRINGS:
                self.strings += self._section_payload(off)[1]
            if off + 16 + size > self._fsize:
                break
            off += 16 + size
        # options sections, chained through DONE
        self._formats = []
        seen = set()
        while opt_off:
            if opt_off in seen:
                raise self._err("corrupt file: options sections form a loop")
            seen.add(opt_off)
            _, data = self._section_payload(opt_off, OPT_DONE)
            opt_off = 0
            q = 0
            while q + 6 <= len(data):
                oid, n = struct.unpack_from(self._e + "HI", data, q)
                body = data[q + 6:q + 6 + n]
                q += 6 + n
                if oid == OPT_DONE:
                    (opt_off,) = struct.unpack_from(self._e + "Q", body)
                    break
                if OPT_HEADER_INFO <= oid <= OPT_CMDLINES:
                    self._sections[oid] = (struct.unpack_from(self._e + "Q", body)[0], 0, 0)
                elif oid == OPT_BUFFER:
                    self._buffer_option(body)
                else:
                    self._add_option(oid, body)
        if OPT_HEADER_INFO not in self._sections:
            raise self._err("corrupt file: no header info section")
        for sid in (OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS):
            if sid in self._sections:
                _, data = self._section_payload(self._sections[sid][0], sid)
                try:
                    if sid == OPT_HEADER_INFO:
                        self._read_header_info(data, 0)
                    elif sid == OPT_FTRACE_EVENTS:
                        self._read_ftrace(data, 0)
                    else:
                        self._read_systems(data, 0)
                except (struct.error, ValueError):
                    raise self._err(f"corrupt metadata section {sid}") from None
        if self._buffer_name not in self.buffers and self.buffers:
            raise self._err(f"no trace instance {self._buffer_name!r} (have: "
                            + ", ".join(repr(b) for b in self.buffers) + ")")
        self._check_cpu_data()

    def _buffer_option(self, body: bytes):
        (off,) = struct.unpack_from(self._e + "Q", body)
        z = body.index(b"\0", 8)
        name = body[8:z].decode("latin-1")
        z2 = body.index(b"\0", z + 1)
        self.buffers.append(name)
        if name != self._buffer_name:
            return
        page_size, ncpu = struct.unpack_from(self._e + "II", body, z2 + 1)
        if page_size:
            self.page_size = page_size
        q = z2 + 9
        for _ in range(ncpu):
            cpu, coff, csize = struct.unpack_from(self._e + "IQQ", body, q)
            q += 20
            self._cpu_data.append((cpu, coff, csize))
        _sid, flags, _size = self._section_header(off)
        self._data_compressed = bool(flags & SEC_COMPRESSED)

    # ------------------------------------------------------- metadata API
    def section_bytes(self, sid: int) -> bytes:
        """Raw payload of kallsyms (19), printk (20) or cmdlines (21); b'' if absent."""
        if sid not in self._sections:
            return b""
        if self.version == 6:
            off, n, _ = self._sections[sid]
            return self._pread(off, n, "section")
        _, data = self._section_payload(self._sections[sid][0], sid)
        width = 8 if sid == OPT_CMDLINES else 4
        (n,) = struct.unpack_from(self._e + ("Q" if width == 8 else "I"), data)
        return data[width:width + n]

    def formats(self) -> list[tuple[str, bytes]]:
        """(system, raw format text) for every event format, in file order."""
        return list(self._formats)

    def event(self, name: str) -> EventFormat:
        ev = self._events.get(name)
        if ev is None and ":" not in name:
            hits = [e for e in self._events.values() if e.name == name]
            ev = hits[0] if len(hits) == 1 else None
        if ev is None:
            names = sorted(self._events)
            known = difflib.get_close_matches(name, names, n=6, cutoff=0.6)
            if not known:
                known = sorted(self._counts) if self._counts else names
            raise self._err(f"unknown event {name!r}; known events include: "
                            + ", ".join(known[:6]) + (" ..." if len(known) > 6 else ""))
        return ev

    def event_names(self) -> list[str]:
        return list(self._events)

    # ---------------------------------------------------------- page data
    def _batches(self, off: int, size: int):
        """Yield (uint8 buffer, n_pages) for one cpu's data (uncompressed: buffer reused)."""
        ps = self.page_size
        per = max(1, self.BATCH_BYTES // ps)
        buf = np.empty(per * ps + 16, np.uint8)
        if not self._data_compressed:
            npages = size // ps
            done = 0
            while done < npages:
                n = min(per, npages - done)
                got = os.preadv(self._f.fileno(), [memoryview(buf)[:n * ps]], off + done * ps)
                if got != n * ps:
                    raise self._err(f"truncated file: page data at offset {off + done * ps}")
                buf[n * ps:n * ps + 16] = 0
                yield buf, n
                done += n
            return
        yield from _prefetched(self._zbatches(off), self.PREFETCH)

    def _zbatches(self, off: int):
        """Decompressed batches of one cpu's chunks; a fresh buffer per batch.

        Runs in a prefetch thread (zstd and zlib release the GIL), so it keeps
        its own decompressor and reads the compressed stream in big windows.
        """
        ps, e, fd = self.page_size, self._e, self._f.fileno()
        cap = max(1, self.BATCH_BYTES // ps) * ps
        if self.compression == "zstd":
            dctx = zstandard.ZstdDecompressor()
            unpack = lambda data, n: dctx.decompress(data, max_output_size=n)  # noqa: E731
        else:
            unpack = lambda data, n: zlib.decompress(data)  # noqa: E731
        win, wstart = b"", off

        def get(p, n, what):
            nonlocal win, wstart
            if p < wstart or p + n > wstart + len(win):
                wstart, win = p, self._pread(p, min(max(n, 4 << 20), self._fsize - p), what)
                if len(win) < n:
                    raise self._err(f"truncated file: {what} needs {n} bytes at offset {p}, "
                                    f"file has {self._fsize} bytes")
            return memoryview(win)[p - wstart:p - wstart + n]

        (nchunks,) = struct.unpack(e + "I", get(off, 4, "chunk count"))
        hdr = struct.Struct(e + "II")
        p, fill = off + 4, 0
        buf = np.empty(cap + 16, np.uint8)
        for i in range(nchunks):
            csize, usize = hdr.unpack(get(p, 8, "compressed chunk header"))
            if usize % ps:
                raise self._err(f"corrupt compressed chunk {i}: {usize} bytes is not a whole "
                                f"number of {ps}-byte pages")
            try:
                raw = unpack(get(p + 8, csize, "compressed chunk"), usize)
            except TraceError:
                raise
            except Exception as ex:
                raise self._err(f"corrupt compressed chunk {i} at offset {p}: {ex}") from None
            if len(raw) != usize:
                raise self._err(f"corrupt compressed chunk {i} at offset {p}: "
                                f"{len(raw)} bytes, expected {usize}")
            p += 8 + csize
            if fill + usize > cap:
                if fill:
                    buf[fill:fill + 16] = 0
                    yield buf, fill // ps
                    buf = np.empty(cap + 16, np.uint8)
                fill = 0
                if usize > cap:
                    cap = usize
                    buf = np.empty(cap + 16, np.uint8)
            buf[fill:fill + usize] = np.frombuffer(raw, np.uint8)
            fill += usize
        if fill:
            buf[fill:fill + 16] = 0
            yield buf, fill // ps

    def _walk(self, buf, npages, cpu, page0, want_pos: bool):
        """Decode npages pages; returns (type ids, data byte offsets, ts, loss stats)."""
        ps, ds, e = self.page_size, self._data_start, self._e
        words = buf.view(e + "u4")
        q64 = buf[:npages * ps].view(e + "u8")
        base = np.arange(npages, dtype=np.int64) * ps
        ts = q64[base >> 3].astype(np.uint64)
        if self.commit_size == 8:
            commit = q64[(base + 8) >> 3].astype(np.uint64)
        else:
            commit = words[(base + 8) >> 2].astype(np.uint64)
        size = (commit & np.uint64(COMMIT_MASK)).astype(np.int64)
        bad = np.flatnonzero(size > ps - ds)
        if bad.size:
            i = int(bad[0])
            raise self._err(f"corrupt page: cpu {cpu} page {page0 + i} claims {int(size[i])} "
                            f"bytes of data in a {ps}-byte page")
        missed = (commit & np.uint64(MISSED_EVENTS)) != 0
        stored = missed & ((commit & np.uint64(MISSED_STORED)) != 0)
        loss = [int(missed.sum()), 0]
        if stored.any():
            at = base[stored] + ds + size[stored]
            ok = at + self.commit_size <= base[stored] + ps
            if self.commit_size == 8 and ok.all() and not (at & 7).any():
                loss[1] = int(q64[at >> 3].sum())
            else:
                for a, good in zip(at.tolist(), ok.tolist()):
                    if good:
                        loss[1] += int.from_bytes(bytes(buf[a:a + self.commit_size]),
                                                  "big" if self.big_endian else "little")
        act = np.flatnonzero(size > 0)
        pos, end, ts = base[act] + ds, base[act] + ds + size[act], ts[act]
        out = ([], [] if want_pos else None, [] if want_pos else None)
        fast, kcap = self.FAST_RUNS, 64
        while pos.size:
            if fast:  # runs while they pay: efficiency = events / matrix cells
                pos, end, ts, eff = self._runs(words, pos, end, ts, cpu, page0, out, kcap)
                if eff > 0.75:
                    kcap = min(2 * kcap, 1024)
                elif eff < 0.35:
                    fast = False  # mixed record sizes: the step walker is cheaper
                if not pos.size:
                    break
            pos, end, ts = self._step(words, pos, end, ts, cpu, page0, out)
        tids, poss, tss = out
        tid = np.concatenate(tids) if tids else np.empty(0, np.uint32)
        if not want_pos:
            return tid, None, None, loss
        if not tids:
            return tid, np.empty(0, np.int64), np.empty(0, np.uint64), loss
        return tid, np.concatenate(poss), np.concatenate(tss), loss

    def _corrupt(self, cpu, page0, what):
        return self._err(f"corrupt page: cpu {cpu}, batch starting at page {page0}: {what}")

    def _step(self, words, pos, end, ts, cpu, page0, out):
        """Advance every page cursor by one record (any record type)."""
        big = self.big_endian
        tids, poss, tss = out
        wi = pos >> 2
        w = words[wi]
        a0 = words[wi + 1]
        if big:
            tl, delta = w >> 27, w & np.uint32(COMMIT_MASK)
        else:
            tl, delta = w & np.uint32(31), w >> 5
        ts = ts + delta
        nxt = pos + 4 + (tl.astype(np.int64) << 2)
        special = _SPECIAL[tl]
        if special.any():
            sp = np.flatnonzero(special)
            stl, sa0, spos = tl[sp], a0[sp].astype(np.int64), pos[sp]
            is0 = stl == 0
            if is0.any():  # a length word follows the header; data at +8
                ln = sa0[is0] - 4
                if (ln < 0).any():
                    raise self._corrupt(cpu, page0, "event with a negative length")
                nxt[sp[is0]] = spos[is0] + 8 + ((ln + 3) & ~3)
            pad = stl == 29  # padding / discarded event: skipped, its delta counts
            nxt[sp[pad]] = spos[pad] + 4 + sa0[pad]
            ext = stl == 30  # time extend
            if ext.any():
                ts[sp[ext]] += sa0[ext].astype(np.uint64) << np.uint64(27)
                nxt[sp[ext]] = spos[ext] + 8
            absm = stl == 31  # absolute time stamp
            if absm.any():
                i = sp[absm]
                old = ts[i] - delta[i]
                ts[i] = ((sa0[absm].astype(np.uint64) << np.uint64(27)) | delta[i]) | (old & TS_MSB)
                nxt[i] = spos[absm] + 8
            ev = np.flatnonzero(~special | (tl == 0))
            if (nxt[ev] > end[ev]).any():
                raise self._corrupt(cpu, page0, "an event runs past the end of the page data")
            isbig = tl[ev] == 0
            epos = pos[ev] + np.where(isbig, 8, 4)
            ew = a0[ev]
            if isbig.any():
                ew[isbig] = words[np.minimum(epos[isbig] >> 2, words.size - 1)]
            tids.append((ew >> 16) if big else (ew & np.uint32(0xFFFF)))
            if poss is not None:
                poss.append(epos)
                tss.append(ts[ev])
        else:
            if (nxt > end).any():
                raise self._corrupt(cpu, page0, "an event runs past the end of the page data")
            tids.append((a0 >> 16) if big else (a0 & np.uint32(0xFFFF)))
            if poss is not None:
                poss.append(pos + 4)
                tss.append(ts)
        keep = nxt < end
        if keep.all():
            return nxt, end, ts
        k = np.flatnonzero(keep)
        return nxt[k], end[k], ts[k]

    def _runs(self, words, pos, end, ts, cpu, page0, out, kcap):
        """Fast path: from each cursor, the run of same-size data events (at most kcap).

        Every header of a run is checked (same type_len), so a run is exactly what
        the record-by-record walk would visit.  A page is done when its run reaches
        the end of the data or ends in tail padding; the others come back with the
        cursor and time stamp after their run.  Returns (pos, end, ts, events/cells).
        """
        big = self.big_endian
        tids, poss, tss = out
        nw = words.size - 2
        w0 = words[pos >> 2]
        tl0 = (w0 >> 27) if big else (w0 & np.uint32(31))
        ok = (tl0 >= 1) & (tl0 <= 28)
        rest = [(np.flatnonzero(~ok), None, None)]
        nev = cells = 0
        for t in np.unique(tl0[ok]).tolist():
            g = np.flatnonzero(tl0 == t)
            rec = 4 + 4 * t
            gpos, gend, gts = pos[g], end[g], ts[g]
            K = min(int(((gend - gpos + rec - 1) // rec).max()), kcap)
            off = np.arange(K + 1, dtype=np.int64) * rec
            at = gpos[:, None] + off  # column K is past the end or the cap
            wat = np.minimum(at >> 2, nw)
            W = words[wat]
            valid = at < gend[:, None]
            valid[:, K] = False
            if big:
                match = ((W >> 27) == t) & valid
                D = W & np.uint32(COMMIT_MASK)
            else:
                match = ((W & np.uint32(31)) == t) & valid
                D = W >> 5
            run = np.argmin(match, axis=1)
            cells += g.size * K
            inrun = off[None, :] < (run * rec)[:, None]
            nev += int(run.sum())
            A = words[wat[inrun] + 1]
            tids.append((A >> 16) if big else (A & np.uint32(0xFFFF)))
            D[~inrun] = 0
            if poss is not None:
                T = np.cumsum(D, axis=1, dtype=np.uint64)
                T += gts[:, None]
                poss.append(at[inrun] + 4)
                tss.append(T[inrun])
            stop = gpos + run * rec  # the first record after the run
            full = stop >= gend
            if (stop[full] > gend[full]).any():
                raise self._corrupt(cpu, page0, "an event runs past the end of the page data")
            left = np.flatnonzero(~full)
            if left.size:
                sp = stop[left]
                lw = words[sp >> 2]
                ltl = (lw >> 27) if big else (lw & np.uint32(31))
                tail = (ltl == 29) & (sp + 4 + words[(sp >> 2) + 1].astype(np.int64) >= gend[left])
                left = left[~tail]
            if left.size:
                lts = gts[left] + D[left].sum(axis=1, dtype=np.uint64)
                rest.append((g[left], stop[left], lts))
        sel = np.concatenate([r[0] for r in rest])
        npos = np.concatenate([pos[rest[0][0]]] + [r[1] for r in rest[1:]])
        nts = np.concatenate([ts[rest[0][0]]] + [r[2] for r in rest[1:]])
        return npos, end[sel], nts, nev / max(1, cells)

    def _scan(self, ev_id=None, fields=(), with_ts=True):
        """One pass over all pages: counts by id, loss stats, and columns of ev_id."""
        counts = np.zeros(1 << 16, np.int64)
        lost = {"pages_with_loss": 0, "lost_in_pages": 0}
        per_cpu_lost = {}
        cols = {"ts": [], "cpu": []}
        for f in fields:
            cols[f.name] = []
        for cpu, off, size in self._cpu_data:
            if not size:
                continue
            page0 = 0
            for buf, n in self._batches(off, size):
                tid, pos, ts, loss = self._walk(buf, n, cpu, page0, ev_id is not None)
                page0 += n
                lost["pages_with_loss"] += loss[0]
                lost["lost_in_pages"] += loss[1]
                per_cpu_lost[cpu] = per_cpu_lost.get(cpu, 0) + loss[1]
                counts += np.bincount(tid, minlength=1 << 16)[: 1 << 16]
                if ev_id is None:
                    continue
                sel = np.flatnonzero(tid == ev_id)
                if not sel.size:
                    continue
                p = pos[sel]
                order = np.argsort(p, kind="stable")
                p = p[order]
                if with_ts:
                    cols["ts"].append(ts[sel][order])
                    cols["cpu"].append(np.full(p.size, cpu, np.int32))
                for f in fields:
                    cols[f.name].append(self._gather(buf, p, f))
        self._counts = {}
        for i in np.flatnonzero(counts).tolist():
            ev = self._by_id.get(i)
            self._counts[ev.full_name if ev else f"unknown:id{i}"] = int(counts[i])
        self._lost = (lost, per_cpu_lost)
        return cols

    def _gather(self, buf, p, f: Field):
        """Values of field f for events whose data starts at byte offsets p of buf."""
        e = self._e
        if f.kind in ("num", "array"):
            elem = f.size // max(f.count, 1)
            dt = np.dtype(f"{e}{'i' if f.signed else 'u'}{elem}")
            idx = (p + f.offset)[:, None] + np.arange(f.size)
            vals = buf[idx].view(dt)
            vals = vals.astype(dt.newbyteorder("="))
            return vals[:, 0] if f.kind == "num" else vals
        if f.kind == "str":
            idx = (p + f.offset)[:, None] + np.arange(f.size)
            rows = np.ascontiguousarray(buf[idx])
            uniq, inv = np.unique(rows.view(f"V{f.size}").ravel(), return_inverse=True)
            names = np.array([bytes(u).split(b"\0", 1)[0].decode("utf-8", "replace") for u in uniq]
                             + [""], dtype=object)
            return names[inv.ravel()]
        if f.kind in ("dataloc", "relloc"):
            idx = (p + f.offset)[:, None] + np.arange(4)
            loc = buf[idx].view(e + "u4")[:, 0].astype(np.int64)
            start = p + (loc & 0xFFFF)
            if f.kind == "relloc":
                start += f.offset + f.size
            length = loc >> 16
            mv = memoryview(buf)
            out = np.empty(p.size, dtype=object)
            for i, (s, n) in enumerate(zip(start.tolist(), length.tolist())):
                out[i] = bytes(mv[s:s + n]).split(b"\0", 1)[0].decode("utf-8", "replace")
            return out
        idx = (p + f.offset)[:, None] + np.arange(f.size)
        return buf[idx].copy()

    # ----------------------------------------------------------------- API
    def counts(self) -> dict[str, int]:
        """Events recorded, by 'system:event' (only events present)."""
        if self._counts is None:
            self._scan()
        return dict(self._counts)

    def columns(self, event: str, fields=(), *, with_ts: bool = True) -> dict[str, np.ndarray]:
        """Arrays for every `event` record: 'ts' (uint64 ns), 'cpu' and each field.

        Rows are in timestamp order (ties: lower cpu first, like trace-cmd report).
        With with_ts=False only the fields are returned, in file order (cheaper).
        """
        ev = self.event(event)
        if isinstance(fields, str):
            fields = (fields,)
        fl = []
        for name in fields:
            f = ev.fields.get(name)
            if f is None:
                raise self._err(f"event {ev.full_name} has no field {name!r}; fields: "
                                + ", ".join(ev.fields))
            fl.append(f)
        cols = self._scan(ev.id, fl, with_ts)
        out = {}
        for k, parts in cols.items():
            if k in ("ts", "cpu") and not with_ts:
                continue
            if parts:
                out[k] = np.concatenate(parts)
            elif k == "ts":
                out[k] = np.empty(0, np.uint64)
            elif k == "cpu":
                out[k] = np.empty(0, np.int32)
            else:
                out[k] = np.empty(0, object if ev.fields[k].kind in ("str", "dataloc", "relloc")
                                  else np.int64)
        if with_ts:
            ts = out["ts"]
            if self._tsc2nsec:
                mult, shift = self._tsc2nsec
                lo, hi = ts & np.uint64(0xFFFFFFFF), ts >> np.uint64(32)
                ts = ((lo * np.uint64(mult)) >> np.uint64(shift)) + \
                     ((hi * np.uint64(mult)) << np.uint64(32 - shift))
            if self._ts_offset:
                ts = (ts.astype(np.int64) + self._ts_offset).astype(np.uint64)
            out["ts"] = ts
            if len(self._cpu_data) > 1 and ts.size:
                order = np.argsort(ts, kind="stable")
                if (np.diff(order) != 1).any():
                    out = {k: v[order] for k, v in out.items()}
        return out

    def lost_events(self) -> dict:
        """Lost-event accounting: page flags plus the CPUSTAT overrun/dropped counters.

        total = sum over cpus of max(overrun, counts stored on pages) + dropped: the
        counts stored on pages come from the kernel's overrun counter, so they are
        not added twice.
        """
        if self._lost is None:
            self._scan()
        lost, per_cpu = self._lost
        overrun = dropped = total = 0
        stats = {}
        for i, st in enumerate(self.cpustats):
            stats[int(st.get("CPU", i))] = st
        for cpu in set(stats) | set(per_cpu):
            st = stats.get(cpu, {})
            o = int(st.get("overrun", 0) or 0)
            d = int(st.get("dropped events", 0) or 0)
            overrun += o
            dropped += d
            total += max(o, per_cpu.get(cpu, 0)) + d
        return {"pages_with_loss": lost["pages_with_loss"], "lost_in_pages": lost["lost_in_pages"],
                "overrun": overrun, "dropped": dropped, "total": total}
