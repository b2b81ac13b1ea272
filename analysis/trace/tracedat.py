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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

import os
import struct
import sys
import zlib

from analysis.trace import native
from krig import safeio
from analysis.trace.tracepages import DECOMPRESS_THREADS, PageSource


from analysis.trace.formats import EventFormat, Field, TraceError
from analysis.trace.header import TraceHeader


class TraceFile(TraceHeader):
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
        self._ts_offset, self._tsc2nsec = 0, None
        self._counts: dict[str, int] | None = None
        self._lost: tuple[list[int], dict[int, int]] | None = None  # (flagged, stored, uncounted), by cpu
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

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"TraceFile({self.path!r}, v{self.version}, {self.compression or 'uncompressed'}, "
                f"cpus={self.cpus}, page_size={self.page_size})")

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
        if self._native_pass() is None:
            self._scan()

    def _native_pass(self, group=None):
        """One pass in C (kcount): sets the counts and loss stats and returns kcount's groups of
        `group` (see native.count; [] without it), or None if C did not read the file (not built,
        zlib, or a fault for the batch walk to name), or a str: why C gave up on a good file."""
        if not (self.NATIVE and native.available() and (not self._data_compressed
                                                          or self.compression == "zstd")):
            return None
        threads = max(1, min(DECOMPRESS_THREADS, os.cpu_count() or 1))
        got = native.count(self._f.fileno(), self._fsize, self._cpu_data, self._data_compressed,
                           self.page_size, self._data_start, self.commit_size, self.big_endian,
                           threads, group)
        if got is None or isinstance(got, str):
            return got
        by_id, by_cpu, groups = got
        lost = [sum(x[k] for x in by_cpu.values()) for k in range(3)]
        self._set_counts(by_id, lost, {cpu: x[1] + x[2] for cpu, x in by_cpu.items()})
        return groups or []

    def native_groups(self, event: str, field: str):
        """[(value, count)] of a number field (1, 2, 4 or 8 bytes) of the `event` records, largest
        count first, ties by value, counted in C in one pass with counts() and lost_events();
        or a str saying why not (the caller then groups field_batches(), which also names a
        fault in the file)."""
        ev = self.event(event)
        (f,) = self._fields(ev, (field,))
        if f.kind != "num":
            return f"{field} is not a number field ({f.type}, {f.size} bytes)"
        if not (self.NATIVE and native.available()):
            return f"the C library is not built or not used ({native.PATH.name}: make helpers)"
        if self._data_compressed and self.compression != "zstd":
            return f"{self.compression}-compressed pages are read by the batch walk"
        got = self._native_pass((ev.id, f.offset, f.size, f.signed))
        return "the C walk gave up on the page data" if got is None else got

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
        assert self._counts is not None  # set by _count()
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
        empty: dict[str, type] = {"ts": np.uint64, "cpu": np.int32}
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
        assert self._lost is not None  # set by _count()
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
