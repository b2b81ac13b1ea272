"""Decoding of ring-buffer pages (libtraceevent's kbuffer): in C (analysis/trace/kwalk.c,
record by record, in file order) when it is built, else vectorised with numpy as below.

A batch of pages comes in as one uint8 buffer.  Within a batch every page gets
a cursor and all cursors advance together:
  * fast path: from each cursor, the run of same-size data events, checked
    header by header with a 2-D gather (pages x events);
  * step walker: one record of any kind per page per step.
The walk gives every data event's type id (and, when asked, the offset of its
data and its time stamp); gather() then reads event fields at those offsets.

Semantics follow libtraceevent's kbuffer, which `trace-cmd report` uses:
type_len 1..28 data event of 4*type_len bytes, 0 a length word follows,
29 padding or discarded event (skipped, its delta counts), 30 time extend,
31 absolute time stamp.
"""
from __future__ import annotations

import numpy as np

from analysis.trace import native as native_lib

COMMIT_MASK = (1 << 27) - 1
MISSED_EVENTS = 1 << 31
MISSED_STORED = 1 << 30
TS_MSB = np.uint64(0xF8 << 56)

_SPECIAL = np.zeros(32, bool)
_SPECIAL[[0, 29, 30, 31]] = True


_NATIVE_ERRORS = {2: "event with a negative length",
                  3: "an event runs past the end of the page data"}


class PageDecoder:
    """Decodes batches of ring-buffer pages of one layout.

    page_size, data_start (offset of the data in a page, from header_page),
    commit_size (4 or 8) and big_endian describe the pages; err(message) makes
    the exception to raise for a corrupt page.  native=True walks the pages with
    analysis/trace/kwalk.c when it is built (events in file order); otherwise numpy walks
    them, with fast=False the step walker only.
    """

    def __init__(self, page_size: int, data_start: int, commit_size: int, big_endian: bool,
                 err, fast: bool = True, native: bool = True):
        self.page_size, self.data_start, self.commit_size = page_size, data_start, commit_size
        self.big_endian, self.e = big_endian, ">" if big_endian else "<"
        self._err, self.fast = err, fast
        self.native = native and native_lib.available()

    def _walk_native(self, buf, npages, cpu, page0, want_pos, want_ts):
        """walk() in C: one pass over the records of every page, in file order."""
        tid, pos, ts, loss, err = native_lib.walk(buf, npages, self.page_size, self.data_start,
                                                  self.commit_size, self.big_endian, want_pos,
                                                  want_ts)
        if err is None:
            return tid, pos, ts, loss
        code, page, size = err[0], page0 + err[1], err[2]
        if code == 1:
            raise self._err(f"corrupt page: cpu {cpu} page {page} claims {size} "
                            f"bytes of data in a {self.page_size}-byte page")
        raise self._corrupt(cpu, page0, _NATIVE_ERRORS.get(code, f"page {page}: walk error {code}"))

    def _corrupt(self, cpu, page0, what):
        return self._err(f"corrupt page: cpu {cpu}, batch starting at page {page0}: {what}")

    def walk(self, buf, npages, cpu, page0, want_pos: bool, want_ts: bool | None = None):
        """Decode npages pages: (type ids, data offsets, ts, [flagged pages, stored lost,
        flagged pages without a stored count]).  Offsets only if want_pos, time stamps
        only if want_ts (default: want_pos); None otherwise."""
        want_ts = want_pos if want_ts is None else want_ts
        if self.native:
            return self._walk_native(buf, npages, cpu, page0, want_pos, want_ts)
        ps, ds, e, cs = self.page_size, self.data_start, self.e, self.commit_size
        words = buf.view(e + "u4")
        q64 = buf[:npages * ps].view(e + "u8")
        base = np.arange(npages, dtype=np.int64) * ps
        ts = q64[base >> 3].astype(np.uint64)
        commit = (q64[(base + 8) >> 3] if cs == 8 else words[(base + 8) >> 2]).astype(np.uint64)
        size = (commit & np.uint64(COMMIT_MASK)).astype(np.int64)
        bad = np.flatnonzero(size > ps - ds)
        if bad.size:
            i = int(bad[0])
            raise self._err(f"corrupt page: cpu {cpu} page {page0 + i} claims {int(size[i])} "
                            f"bytes of data in a {ps}-byte page")
        missed = (commit & np.uint64(MISSED_EVENTS)) != 0
        loss = [int(missed.sum()), 0, 0]
        for i in np.flatnonzero(missed).tolist():
            at = int(base[i] + ds + size[i])
            if commit[i] & np.uint64(MISSED_STORED) and at + cs <= base[i] + ps:  # count after the data
                loss[1] += int.from_bytes(buf[at:at + cs].tobytes(),
                                          "big" if self.big_endian else "little")
            else:  # lost events before this page, but how many is not stored: at least one
                loss[2] += 1
        act = np.flatnonzero(size > 0)
        pos, end, ts = base[act] + ds, base[act] + ds + size[act], ts[act]
        out: tuple[list[np.ndarray], list[np.ndarray] | None, list[np.ndarray] | None] = (
            [], [] if want_pos else None, [] if want_ts else None)
        fast, kcap = self.fast, 64
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
        pos_out = None if poss is None else np.concatenate(poss) if tids else np.empty(0, np.int64)
        ts_out = None if tss is None else np.concatenate(tss) if tids else np.empty(0, np.uint64)
        return tid, pos_out, ts_out, loss

    def _step(self, words, pos, end, ts, cpu, page0, out):
        """Advance every page cursor by one record (any record type)."""
        big = self.big_endian
        tids, poss, tss = out
        wi = pos >> 2
        w, a0 = words[wi], words[wi + 1]
        tl, delta = (w >> 27, w & np.uint32(COMMIT_MASK)) if big else (w & np.uint32(31), w >> 5)
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
            ts[sp[ext]] += sa0[ext].astype(np.uint64) << np.uint64(27)
            nxt[sp[ext]] = spos[ext] + 8
            absm = stl == 31  # absolute time stamp (keeps the top 5 bits)
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
        else:
            if (nxt > end).any():
                raise self._corrupt(cpu, page0, "an event runs past the end of the page data")
            ev, epos, ew = slice(None), pos + 4, a0
        tids.append((ew >> 16) if big else (ew & np.uint32(0xFFFF)))
        if poss is not None:
            poss.append(epos)
        if tss is not None:
            tss.append(ts[ev])
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
            at = gpos[:, None] + off  # column K is past the end of the data or the cap
            wat = np.minimum(at >> 2, nw)
            W = words[wat]
            valid = at < gend[:, None]
            valid[:, K] = False
            match = (((W >> 27) if big else (W & np.uint32(31))) == t) & valid
            run = np.argmin(match, axis=1)  # the first header that breaks the run
            cells += g.size * K
            nev += int(run.sum())
            inrun = off[None, :] < (run * rec)[:, None]
            A = words[wat[inrun] + 1]
            tids.append((A >> 16) if big else (A & np.uint32(0xFFFF)))
            if poss is not None:
                poss.append(at[inrun] + 4)
            if tss is not None:  # time deltas of the run's headers
                D = W & np.uint32(COMMIT_MASK) if big else W >> 5
                D[~inrun] = 0
                T = np.cumsum(D, axis=1, dtype=np.uint64)
                T += gts[:, None]
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
            if left.size:  # (time stamps are only followed when they are asked for)
                lts = gts[left] + D[left].sum(axis=1, dtype=np.uint64) if tss is not None else gts[left]
                rest.append((g[left], stop[left], lts))
        sel = np.concatenate([r[0] for r in rest])
        npos = np.concatenate([pos[rest[0][0]]] + [r[1] for r in rest[1:]])
        nts = np.concatenate([ts[rest[0][0]]] + [r[2] for r in rest[1:]])
        return npos, end[sel], nts, nev / max(1, cells)

    def gather(self, buf, p, f):
        """Values of field f for the events whose data starts at byte offsets p of buf."""
        e = self.e
        if f.kind in ("dataloc", "relloc"):
            loc = buf[(p + f.offset)[:, None] + np.arange(4)].view(e + "u4")[:, 0].astype(np.int64)
            start = p + (loc & 0xFFFF) + (f.offset + f.size if f.kind == "relloc" else 0)
            mv, out = memoryview(buf), np.empty(p.size, dtype=object)
            for i, (s, n) in enumerate(zip(start.tolist(), (loc >> 16).tolist())):
                out[i] = bytes(mv[s:s + n]).split(b"\0", 1)[0].decode("utf-8", "replace")
            return out
        if f.kind == "num" and f.size in (4, 8) and f.offset % 4 == 0:
            return self._gather_words(buf, p, f)
        rows = buf[(p + f.offset)[:, None] + np.arange(f.size)]
        if f.kind in ("num", "array"):
            dt = np.dtype(f"{e}{'i' if f.signed else 'u'}{f.size // max(f.count, 1)}")
            vals = rows.view(dt).astype(dt.newbyteorder("="))
            return vals[:, 0] if f.kind == "num" else vals
        if f.kind == "str":  # decode each distinct value once
            uniq, inv = np.unique(rows.view(f"V{f.size}").ravel(), return_inverse=True)
            names = np.array([bytes(u).split(b"\0", 1)[0].decode("utf-8", "replace")
                              for u in uniq] + [""], dtype=object)
            return names[inv.ravel()]
        return rows

    def _gather_words(self, buf, p, f):
        """A 4- or 8-byte number at a 4-aligned offset (record data starts 4-aligned):
        read as whole 32-bit words instead of byte by byte."""
        words = buf.view(self.e + "u4")
        i = (p + f.offset) >> 2
        if f.size == 4:
            v = words[i].astype(np.uint32)
            return v.view(np.int32) if f.signed else v
        lo, hi = words[i].astype(np.uint64), words[i + 1].astype(np.uint64)
        if self.big_endian:
            lo, hi = hi, lo
        v = (hi << np.uint64(32)) | lo
        return v.view(np.int64) if f.signed else v
