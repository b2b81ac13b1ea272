"""Write trace.dat files (v6, or v7 with zstd, zlib or no compression) for tests and benchmarks.

The metadata (header page, event formats, printk, cmdlines, optionally kallsyms)
is copied from a real template trace; the ring-buffer pages are either
synthesised (`write_synthetic`) or copied from the template (`trim_trace`), then
written into the container by tests/tracegen_container.py.
Everything streams page batch by page batch, so a 17M-event trace never holds
more than one batch of events in memory.

Synthetic pages carry what real kernels write: time extends for gaps >= 2^27 ns,
discarded events (padding with a delta), tail padding, and optionally absolute
time stamps, length-word (type_len 0) headers and missed-events flags.
"""
from __future__ import annotations

import re
import struct

import numpy as np

from analysis.trace.kbuffer import MISSED_EVENTS, MISSED_STORED
from analysis.trace.formats import ID_RE, NAME_RE, EventFormat
from analysis.trace.formats import OPT_CMDLINES, OPT_KALLSYMS, OPT_PRINTK, OPT_TRACECLOCK, OPT_UNAME, OPT_VERSION
from analysis.trace.tracedat import TraceFile
from tracegen_container import write_container

TS_SHIFT = 27
DELTA_MASK = (1 << TS_SHIFT) - 1


class _Meta:
    """What a written file copies from the template."""

    def __init__(self, tf: TraceFile, systems=None, kallsyms=True):
        self.e = tf.byte_order
        self.big_endian = tf.big_endian
        self.long_size = tf.long_size
        self.page_size = tf.page_size
        self.data_start = tf.data_start
        self.commit_size = tf.commit_size
        self.header_page, self.header_event = tf.header_page, tf.header_event
        keep = None if systems is None else set(systems) | {"ftrace"}
        self.ftrace = [raw for s, raw in tf.formats() if s == "ftrace"]
        self.systems: dict[str, list[bytes]] = {}
        for s, raw in tf.formats():
            if s != "ftrace" and (keep is None or s in keep):
                self.systems.setdefault(s, []).append(raw)
        self.kallsyms = tf.section_bytes(OPT_KALLSYMS) if kallsyms else b""
        self.printk = tf.section_bytes(OPT_PRINTK)
        self.cmdlines = tf.section_bytes(OPT_CMDLINES)
        first = lambda oid, d: tf.options.get(oid, [d])[0]  # noqa: E731
        self.traceclock = first(OPT_TRACECLOCK, b"[local] global counter uptime perf\n\0")
        self.uname = first(OPT_UNAME, b"Linux krig-synthetic\0")
        self.version = first(OPT_VERSION, b"krig tracegen\0")
        m = re.search(rb"\[([\w-]+)\]", self.traceclock)
        self.clock = m.group(1) if m else b"local"
        self.events = {f"{ev.system}:{ev.name}": ev for ev in tf.event_formats().values()}


# ------------------------------------------------------------------ pages
class _Packer:
    """Packs a stream of ring-buffer records into pages (kernel-like layout)."""

    def __init__(self, meta: _Meta, lost: dict | None = None):
        self.m = meta
        self.cap = meta.page_size - meta.data_start
        self.flat = np.zeros(0, np.uint8)
        self.sizes = np.zeros(0, np.int64)
        self.prev_ts = np.zeros(0, np.uint64)
        self.page_no = 0
        self.lost = lost or {}  # page number -> missed count (None: count not stored)

    def add(self, flat, sizes, prev_ts):
        self.flat = np.concatenate([self.flat, flat])
        self.sizes = np.concatenate([self.sizes, sizes])
        self.prev_ts = np.concatenate([self.prev_ts, prev_ts])
        return self._pack(final=False)

    def finish(self):
        return self._pack(final=True)

    def _pack(self, final):
        cum = np.cumsum(self.sizes)
        starts, ends = [], []
        i, n, base = 0, self.sizes.size, 0
        while i < n:
            cap = self.cap
            if self.lost.get(self.page_no + len(starts)) is not None:
                cap -= self.m.commit_size  # room for the stored missed-events count
            j = int(np.searchsorted(cum, base + cap, side="right"))
            if j == n and not final:
                break
            if j == i:
                raise ValueError("record larger than a page")
            starts.append(i)
            ends.append(j)
            base = int(cum[j - 1])
            i = j
        if not starts:
            return np.zeros((0, self.m.page_size), np.uint8)
        boff = np.concatenate([[0], cum])
        pages = np.zeros((len(starts), self.m.page_size), np.uint8)
        ds, e = self.m.data_start, self.m.e
        commit = np.zeros(len(starts), np.uint64)
        for k, (a, b) in enumerate(zip(starts, ends)):
            lo, hi = int(boff[a]), int(boff[b])
            used = hi - lo
            pages[k, ds:ds + used] = self.flat[lo:hi]
            rem = self.cap - used
            lost = self.lost.get(self.page_no + k, False)
            if lost is not False:
                c = used | MISSED_EVENTS
                if lost is not None and rem >= self.m.commit_size:
                    pages[k, ds + used:ds + used + self.m.commit_size] = np.frombuffer(
                        int(lost).to_bytes(self.m.commit_size, "big" if e == ">" else "little"),
                        np.uint8)
                    c |= MISSED_STORED
                commit[k] = c
            elif rem >= 8 and (b < n or not final):  # tail padding, counted in commit
                pages[k, ds + used:ds + used + 8] = np.frombuffer(
                    struct.pack(e + "II", _hdr_word(e, 29, 1), rem - 4), np.uint8)
                commit[k] = self.cap
            else:
                commit[k] = used
        pages[:, :8] = np.asarray(self.prev_ts[starts], dtype=e + "u8").view(np.uint8).reshape(-1, 8)
        cw = e + ("u8" if self.m.commit_size == 8 else "u4")
        pages[:, 8:8 + self.m.commit_size] = commit.astype(cw).view(np.uint8).reshape(
            -1, self.m.commit_size)
        last = ends[-1]
        cut = int(boff[last])
        self.flat, self.sizes, self.prev_ts = self.flat[cut:], self.sizes[last:], self.prev_ts[last:]
        self.page_no += len(starts)
        return pages


def _hdr_word(e, tl, delta):
    if e == ">":
        return (int(tl) << 27) | int(delta)
    return int(tl) | (int(delta) << 5)


def _hdr_words(e, tl, delta):
    tl, delta = tl.astype(np.uint32), delta.astype(np.uint32)
    return (tl << 27) | delta if e == ">" else tl | (delta << 5)


# --------------------------------------------------------------- payloads
class _EventSpec:
    """How to build the payload of one synthetic event type."""

    def __init__(self, meta: _Meta, name: str):
        if name not in meta.events:
            raise ValueError(f"template has no event {name!r}")
        self.ev = meta.events[name]
        self.e = meta.e
        f = self.ev.fields
        self.fixed = max(x.offset + x.size for x in f.values())
        self.dataloc = [x for x in f.values() if x.kind in ("dataloc", "relloc")]
        self.strlen = 8  # "synthNN\0"
        size = self.fixed + len(self.dataloc) * self.strlen
        self.plen = (size + 3) & ~3

    wide_numbers = False  # number fields over their whole range, not 0..999 (see wide())

    @staticmethod
    def wide(f, n, rng) -> np.ndarray:
        """n values of number field f from a pool of 40 spanning its type: its least and
        greatest values, -1 (or the top bit alone), 0, 1 and random ones (the same pool for
        every batch: a field of the event always has the same few dozen values)."""
        bits = 8 * f.size
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if f.signed else (0, (1 << bits) - 1)
        edge = [lo, hi, 0, 1, -1 if f.signed else 1 << (bits - 1), lo + 1, hi - 1]
        pick = np.random.default_rng([f.offset, f.size, f.signed])
        pool = edge + [lo + int(x * (hi - lo)) for x in pick.random(40 - len(edge))]
        dt = np.int64 if f.signed else np.uint64
        return np.array(pool, dtype=object).astype(dt)[rng.integers(0, len(pool), n)]

    def build(self, n: int, rng, idx0: int, state: dict) -> np.ndarray:
        pay = np.zeros((n, self.plen), np.uint8)
        vals = _xfs_values(n, rng, state) if self.ev.name.startswith("xfs_ail") else {}
        for f in self.ev.fields.values():
            if f.name == "common_type":
                v = np.full(n, self.ev.id)
            elif f.name == "common_flags":
                v = np.ones(n)
            elif f.name == "common_preempt_count":
                v = rng.integers(0, 3, n)
            elif f.name == "common_pid":
                v = rng.integers(100, 140, n)
            elif f.name in vals:
                v = vals[f.name]
            elif f.kind == "str":
                names = np.array([b"synth%d" % k for k in range(50)], dtype=f"S{f.size}")
                pay[:, f.offset:f.offset + f.size] = names[(np.arange(n) + idx0) % 50].view(
                    np.uint8).reshape(n, f.size)
                continue
            elif f.kind in ("dataloc", "relloc"):
                k = self.dataloc.index(f)
                start = self.fixed + k * self.strlen
                rel = start - (f.offset + f.size) if f.kind == "relloc" else start
                loc = np.full(n, (self.strlen << 16) | rel, dtype=self.e + "u4")
                pay[:, f.offset:f.offset + 4] = loc.view(np.uint8).reshape(n, 4)
                s = (np.arange(n) + idx0) % 100
                txt = np.array([b"synth%02d" % k for k in range(100)], dtype=f"S{self.strlen}")
                pay[:, start:start + self.strlen] = txt[s].view(np.uint8).reshape(n, self.strlen)
                continue
            elif f.kind == "num":
                v = self.wide(f, n, rng) if self.wide_numbers else rng.integers(0, 1000, n)
            else:
                continue
            dt = np.dtype(f"{self.e}{'i' if f.signed else 'u'}{f.size}")
            pay[:, f.offset:f.offset + f.size] = np.asarray(v).astype(dt).view(np.uint8).reshape(
                n, f.size)
        return pay


def _xfs_values(n, rng, state):
    """Plausible xfs_ail_* fields: one device, new_lsn in checkpoint-sized runs."""
    dev = np.full(n, (7 << 20) | 0)
    lip = np.uint64(0xFFFF888100000000) + (rng.integers(0, 1 << 24, n).astype(np.uint64) << np.uint64(4))
    type_ = rng.choice(np.array([0x123B, 0x123C, 0x1236, 0x1237]), n, p=[0.45, 0.45, 0.05, 0.05])
    flags = np.ones(n, np.uint64)
    # runs of equal new_lsn, as one checkpoint inserts many items with one lsn
    lsn = np.empty(n, np.int64)
    i = 0
    cyc, blk, left = state.get("lsn", (1, 100, 0))
    while i < n:
        if left == 0:
            left = int(rng.integers(20, 800))
            blk += int(rng.integers(8, 65))
            if blk > 100000:
                cyc, blk = cyc + 1, 100
        k = min(left, n - i)
        lsn[i:i + k] = (cyc << 32) | blk
        left -= k
        i += k
    state["lsn"] = (cyc, blk, left)
    old = np.where(rng.random(n) < 0.2, lsn - 16, 0)
    return {"dev": dev, "lip": lip, "type": type_, "flags": flags, "old_lsn": old, "new_lsn": lsn}


def _cpu_pages(meta: _Meta, specs, weights, n, cpu, seed, batch, opts):
    """Generator of page arrays for one cpu holding n synthetic events."""
    rng = np.random.default_rng([seed, cpu])
    e = meta.e
    packer = _Packer(meta, opts.get("lost", {}).get(cpu))
    last_ts = np.uint64(opts.get("start_ns", 5_000_000_000) + cpu * 1379)
    first = True
    state: dict = {}
    done = 0
    ext_every, abs_every = opts.get("extend_every", 5000), opts.get("abs_every", 0)
    disc_every, big_every = opts.get("discard_every", 3001), opts.get("big_every", 997)
    while done < n:
        b = min(batch, n - done)
        idx = np.arange(done, done + b)
        gaps = rng.integers(50, opts.get("max_gap", 20000), b).astype(np.uint64)
        if ext_every:  # a long idle gap now and then -> time extend
            gaps[idx % ext_every == ext_every - 1] += np.uint64(200_000_000)
        if first:
            gaps[0] = 0
        ts = last_ts + np.cumsum(gaps, dtype=np.uint64)
        kind = rng.choice(len(specs), b, p=weights) if len(specs) > 1 else np.zeros(b, np.int64)
        opts["written"] += np.bincount(kind, minlength=len(specs))
        big = (idx % big_every == big_every - 1) if big_every else np.zeros(b, bool)
        ext = gaps > DELTA_MASK
        absf = (idx % abs_every == abs_every - 1) if abs_every else np.zeros(b, bool)
        ext &= ~absf
        disc = (idx % disc_every == disc_every // 2) if disc_every else np.zeros(b, bool)
        plen = np.array([s.plen for s in specs])[kind]
        esize = plen + np.where(big, 8, 4)
        pre = (ext | absf).astype(np.int64)
        nrec = 1 + pre + disc
        r0 = np.cumsum(nrec) - nrec  # first record index of each event
        evr = r0 + pre  # the event record
        R = int(nrec.sum())
        size = np.zeros(R, np.int64)
        rts = np.zeros(R, np.uint64)
        tl = np.zeros(R, np.uint32)
        a0 = np.zeros(R, np.int64)
        has_a0 = np.zeros(R, bool)
        size[evr], rts[evr] = esize, ts
        tl[evr] = np.where(big, 0, plen // 4)
        a0[evr], has_a0[evr] = plen + 4, big
        p = r0[ext | absf]
        size[p], rts[p], has_a0[p] = 8, ts[ext | absf], True
        tl[r0[ext]], tl[r0[absf]] = 30, 31
        dr = evr[disc] + 1
        size[dr], rts[dr], tl[dr] = esize[disc], ts[disc] + np.uint64(1), 29
        a0[dr], has_a0[dr] = esize[disc] - 4, True
        prev = np.concatenate([[last_ts], rts[:-1]]).astype(np.uint64)
        delta = (rts - prev).astype(np.uint64)
        a0[r0[ext]] = (delta[r0[ext]] >> np.uint64(TS_SHIFT)).astype(np.int64)
        delta[r0[ext]] &= np.uint64(DELTA_MASK)
        ta = ts[absf]
        a0[r0[absf]] = (ta >> np.uint64(TS_SHIFT)).astype(np.int64)
        delta[r0[absf]] = ta & np.uint64(DELTA_MASK)
        delta[evr[pre.astype(bool)]] = 0
        if (delta > DELTA_MASK).any():
            raise AssertionError("delta overflow in synthetic stream")
        roff = np.cumsum(size) - size
        flat = np.zeros(int(size.sum()), np.uint8)
        words = flat.view(e + "u4")
        words[roff >> 2] = _hdr_words(e, tl, delta)
        words[(roff[has_a0] >> 2) + 1] = a0[has_a0].astype(np.uint32)
        for k, spec in enumerate(specs):
            sel = np.flatnonzero(kind == k)
            if not sel.size:
                continue
            pay = spec.build(sel.size, rng, done, state)
            dpos = roff[evr[sel]] + np.where(big[sel], 8, 4)
            flat[dpos[:, None] + np.arange(spec.plen)] = pay
        last_ts = rts[-1]
        first = False
        done += b
        pages = packer.add(flat, size, prev)
        if pages.shape[0]:
            yield pages
    pages = packer.finish()
    if pages.shape[0]:
        yield pages


# --------------------------------------------------------------- public API
def write_synthetic(template, path, n_events, *, event="xfs:xfs_ail_insert", extra=(),
                    version=7, compression="zstd", cpus=2, seed=1, systems=None,
                    kallsyms=True, batch=200_000, lost=None, cpustats=None,
                    big_endian=None, long_size=None, formats=(), wide_numbers=False, **opts):
    """Write `n_events` synthetic records (event plus `extra` [(name, weight)]) to path.

    opts: extend_every, abs_every, discard_every, big_every (0 disables each),
    max_gap (ns), start_ns; lost={cpu: {page_no: count or None}} sets the
    missed-events flag on those pages; big_endian / long_size=4 write the page
    data as a big-endian / 32-bit kernel would; formats [(system, format file text)] adds
    event formats to the template's; wide_numbers fills number fields over their whole range
    (negative ones too), not with 0..999.  Returns {'system:event': count}.
    """
    tf = template if isinstance(template, TraceFile) else TraceFile(template)
    meta = _Meta(tf, systems, kallsyms)
    for system, raw in formats:
        raw = raw.encode() if isinstance(raw, str) else raw
        meta.systems.setdefault(system, []).append(raw)
        ev = EventFormat(system, NAME_RE.search(raw).group(1).decode(),
                         int(ID_RE.search(raw).group(1)), raw)
        meta.events[ev.full_name] = ev
    if big_endian is not None:
        meta.big_endian, meta.e = big_endian, (">" if big_endian else "<")
    if long_size == 4 and meta.commit_size == 8:  # as a 32-bit kernel writes it
        hp = meta.header_page.decode()
        hp = re.sub(r"(commit;\s*offset:\d+;\s*size:)8", r"\g<1>4", hp)
        hp = re.sub(r"(char data;\s*offset:)(\d+)(;\s*size:)(\d+)",
                    lambda m: f"{m[1]}{int(m[2]) - 4}{m[3]}{int(m[4]) + 4}", hp)
        meta.header_page = hp.encode()
        meta.long_size = meta.commit_size = 4
        meta.data_start -= 4
    names = [event] + [n for n, _ in extra]
    w = np.array([1.0 - sum(x for _, x in extra)] + [x for _, x in extra])
    specs = [_EventSpec(meta, n) for n in names]
    for spec in specs:
        spec.wide_numbers = wide_numbers
    per = [n_events // cpus + (1 if c < n_events % cpus else 0) for c in range(cpus)]
    opts["lost"] = lost or {}
    opts["written"] = np.zeros(len(specs), np.int64)
    gens = [_cpu_pages(meta, specs, w / w.sum(), per[c], c, seed, batch, opts) for c in range(cpus)]
    write_container(meta, path, gens, version=version, compression=compression,
                    cpustats=cpustats)
    out = {}
    for name, k in zip(names, opts["written"].tolist()):
        if k:
            out[name] = out.get(name, 0) + k
    return out


def trim_trace(src, dst, *, pages_per_cpu=4, spread=False, systems=None, kallsyms=False,
               version=7, compression="zstd"):
    """Copy src's metadata and a few pages of each cpu to dst (a small real trace).

    spread=False keeps the first pages of each cpu, spread=True pages evenly
    spaced over the whole recording (each page carries its own time stamp).
    """
    tf = src if isinstance(src, TraceFile) else TraceFile(src)
    meta = _Meta(tf, systems, kallsyms)
    gens = []
    ps = tf.page_size
    for cpu, off, size in tf.cpu_data():
        total = sum(n for _, n in tf.page_batches(off, size)) if spread else pages_per_cpu
        want = set(np.linspace(0, max(total - 1, 0), min(pages_per_cpu, total)).astype(int).tolist())
        pages, seen = [], 0
        for buf, n in tf.page_batches(off, size):
            pick = [i - seen for i in sorted(want) if seen <= i < seen + n]
            if pick:
                pages.append(buf[:n * ps].reshape(n, ps)[pick].copy())
            seen += n
            if seen > max(want):
                break
        gens.append(pages)
    stats = {}
    for i, st in enumerate(tf.cpustats):
        stats[int(st.get("CPU", i))] = {"overrun": st.get("overrun", 0),
                                        "dropped": st.get("dropped events", 0)}
    write_container(meta, dst, gens, version=version, compression=compression, cpustats=stats)


def used_systems(tf: TraceFile) -> set[str]:
    """Systems of the events present in tf."""
    return {name.split(":")[0] for name in tf.counts()}


__all__ = ["write_synthetic", "trim_trace", "write_container", "used_systems"]
