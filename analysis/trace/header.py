"""trace.dat's metadata: the header, options and sections (v6 and v7), the event formats and
the per-cpu data's place; TraceFile (analysis/trace/tracedat.py) reads the events with it."""
from __future__ import annotations

import os
import re
import struct
from typing import IO

from analysis.trace.tracepages import unpack_section, zstandard_installed


from analysis.trace.formats import (
    EventFormat, MAGIC, OPT_BUFFER, OPT_BUFFER_TEXT, OPT_CMDLINES, OPT_CPUCOUNT, OPT_CPUSTAT, OPT_DATE,
    OPT_DONE, OPT_EVENT_FORMATS, OPT_FTRACE_EVENTS, OPT_HEADER_INFO, OPT_KALLSYMS, OPT_OFFSET, OPT_PRINTK, OPT_TSC2NSEC,
    SECTION_NAMES, SEC_COMPRESSED, TraceError, ID_RE, NAME_RE, parse_cpustat)


class TraceHeader:
    """The metadata of a trace.dat, parsed when TraceFile opens it: TraceFile.__init__ sets the
    attributes below before _parse() reads the file through _pread()."""

    path: str
    _f: IO[bytes]
    _fsize: int
    _buffer_name: str
    compression: str | None
    options: dict[int, list[bytes]]
    buffers: list[str]
    _cpu_data: list[tuple[int, int, int]]  # (cpu, offset, size)
    _sections: dict[int, tuple[int, int]]  # id -> (offset, v6 size)
    _data_compressed: bool
    _cpucount: int | None
    _formats: list[tuple[str, bytes]]  # (system, raw format text)

    def _err(self, what: str) -> TraceError:
        return TraceError(f"{self.path}: {what}")

    def _pread(self, off: int, n: int, what: str = "data") -> bytes:
        if off < 0 or n < 0 or off + n > self._fsize:
            raise self._err(f"truncated file: {what} needs {n} bytes at offset {off}, "
                            f"file has {self._fsize} bytes")
        return os.pread(self._f.fileno(), n, off)

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
            m, i = NAME_RE.search(raw), ID_RE.search(raw)
            if m and i:
                ev = EventFormat(system, m.group(1).decode("latin-1"), int(i.group(1)), raw)
                self._events[ev.full_name] = ev
                self._by_id.setdefault(ev.id, ev)
        cpus = [c for c, _, _ in self._cpu_data]
        self.cpus = self._cpucount or (max(cpus) + 1 if cpus else 0)
        opt = lambda oid: [r.rstrip(b"\0").decode("latin-1") for r in self.options.get(oid, [])]  # noqa: E731
        self.cpustats = [parse_cpustat(t) for t in opt(OPT_CPUSTAT)]
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
