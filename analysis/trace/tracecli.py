"""`krig trace stats`: count one event in a trace.dat, optionally grouped by a field.

numpy is imported where a grouping needs it: the plain count and the grouping by a number
field are C code called through ctypes (analysis/trace/native.py), and numpy's import would be
a large share of their time; strings and arrays are grouped over numpy columns."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

import json
import sys
from collections import Counter

from analysis.trace.tracedat import TraceError, TraceFile
from krig.errors import UsageError
from krig import safeio


def _plain(v):
    """A JSON/print friendly Python value."""
    import numpy as np
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def group_counts(values: np.ndarray) -> list[tuple[object, int]]:
    """[(value, count)] largest count first; ties by value."""
    import numpy as np
    if values.size == 0:
        return []
    uniq: np.ndarray | list[tuple]
    if values.dtype == object:
        uniq, counts = np.unique(values.astype(str), return_counts=True)
    elif values.ndim > 1:  # array fields: group by the whole row
        rows = [tuple(r) for r in values.tolist()]
        uniq_rows, counts = np.unique(np.array(rows), axis=0, return_counts=True)
        uniq = [tuple(r) for r in uniq_rows.tolist()]
    else:
        uniq, counts = np.unique(values, return_counts=True)
    order = np.argsort(-counts, kind="stable")  # np.unique sorted by value already
    return [(_plain(uniq[i]), int(counts[i])) for i in order.tolist()]


class GroupCounter:
    """Counts of each distinct value, fed a batch at a time: memory grows with the
    number of distinct values, not with the number of records."""

    def __init__(self) -> None:
        self.total = 0
        self._parts: list[tuple[np.ndarray, np.ndarray]] = []  # numbers: (values, counts)
        self._held = self._compacted = 0
        self._other: Counter = Counter()  # strings and array rows

    def add(self, values: np.ndarray):
        import numpy as np
        if values.size == 0:
            return
        self.total += int(values.shape[0])
        if values.dtype == object or values.ndim > 1:
            self._other.update(dict(group_counts(values)))
            return
        # records of one page come together: count runs of one value first
        starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
        runs = np.diff(np.append(starts, values.size))
        uniq, inv = np.unique(values[starts], return_inverse=True)
        self._parts.append((uniq, np.bincount(inv.ravel(), weights=runs).astype(np.int64)))
        self._held += uniq.size
        if self._held > max(1 << 18, 2 * self._compacted):
            self._compact()

    def _compact(self):
        import numpy as np
        if len(self._parts) > 1:
            vals = np.concatenate([v for v, _ in self._parts])
            uniq, inv = np.unique(vals, return_inverse=True)
            counts = np.bincount(inv.ravel(), weights=np.concatenate([c for _, c in self._parts]))
            self._parts = [(uniq, counts.astype(np.int64))]
        self._held = self._compacted = self._parts[0][0].size if self._parts else 0

    def groups(self) -> list[tuple[object, int]]:
        """[(value, count)] largest count first; ties by value (as group_counts)."""
        if self._other:
            items = sorted(self._other.items())
            by_count = sorted(range(len(items)), key=lambda i: -items[i][1])  # stable
            return [items[i] for i in by_count]
        import numpy as np
        self._compact()
        if not self._parts:
            return []
        uniq, counts = self._parts[0]
        order = np.argsort(-counts, kind="stable")
        return [(_plain(uniq[i]), int(counts[i])) for i in order.tolist()]


def _groups(tf: TraceFile, path: str, ev, field: str):
    """([(value, count)] of `field` in ev's records, why C did not count them or None): a number
    field in C (TraceFile.native_groups, no numpy), strings and arrays (or a trace C cannot
    read) with GroupCounter over the page batches."""
    if field not in ev.fields:
        raise TraceError(f"{path}: event {ev.full_name} has no field {field!r}; "
                         f"fields: " + ", ".join(ev.fields))
    got = tf.native_groups(ev.full_name, field)
    if not isinstance(got, str):
        return got, None
    counter = GroupCounter()
    for batch in tf.field_batches(ev.full_name, (field,)):
        counter.add(batch[field])
    return counter.groups(), got if ev.fields[field].kind == "num" else None


def stats_main(path: str, event: str, group_by: str | None, as_json: bool,
               out=None) -> int:
    """Print the count of `event` in the trace at `path` (and groups of `group_by`).

    Raises TraceError (one line) for unreadable files, unknown events or fields.
    Returns 0.
    """
    out = out or sys.stdout
    tf = TraceFile(safeio.given_file(path))     # RUN/trace.dat: the user's RUN followed, not trace.dat
    try:
        ev = tf.event(event)  # validates the name, lists known ones if unknown
        groups = fallback = None
        if group_by:
            groups, fallback = _groups(tf, path, ev, group_by)
            count = sum(c for _, c in groups)
        else:
            count = tf.counts().get(ev.full_name, 0)
        lost = tf.lost_events()
    finally:
        tf.close()
    if fallback:  # said once the answer is known: a fault in the file is the one line instead
        print(f"krig trace stats: --group-by {group_by} counted in Python: {fallback}",
              file=sys.stderr)
    if as_json:
        doc = {"event": ev.full_name, "count": count}
        if groups is not None:
            doc["group_by"] = group_by
            doc["groups"] = [[v, c] for v, c in groups]
        doc["lost_events"] = lost
        out.write(json.dumps(doc) + "\n")
        return 0
    out.write(f"{ev.full_name}: {count} events\n")
    if groups is not None:
        width = max((len(str(v)) for v, _ in groups), default=5)
        width = max(width, len(group_by or ""))
        out.write(f"  {group_by:<{width}}  count\n")
        for v, c in groups:
            out.write(f"  {str(v):<{width}}  {c}\n")
    if lost["total"] or lost["pages_with_loss"]:
        out.write(f"warning: events were lost: {lost['total']} counted "
                  f"({lost['pages_with_loss']} pages flagged, overrun {lost['overrun']}, "
                  f"dropped {lost['dropped']})\n")
    return 0


def cmd_stats(a) -> int:
    """`krig trace stats TRACE.DAT --event SYSTEM:EVENT`: a file or an event that is not there is
    bad input (exit 2, one line)."""
    try:
        return stats_main(a.trace, a.event, a.group_by, a.json)
    except TraceError as e:
        raise UsageError(str(e)) from None
