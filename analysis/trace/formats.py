"""trace.dat's vocabulary: its error, magic, option and section ids, and the event formats
(a format file's fields, their offsets, sizes and signs)."""
from __future__ import annotations

import re


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
NAME_RE = re.compile(rb"^name:\s*(\S+)", re.M)
ID_RE = re.compile(rb"^ID:\s*(\d+)", re.M)
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
        self._fields: dict[str, Field] | None = None

    @property
    def fields(self) -> dict[str, Field]:
        if self._fields is None:
            self._fields = {}
            for m in _FIELD_RE.finditer(self.raw):
                f = Field(m.group(1).decode("latin-1"), int(m.group(2)), int(m.group(3)),
                          m.group(4) not in (None, b"0"))
                self._fields[f.name] = f
        return self._fields


def parse_cpustat(text: str) -> dict[str, int | float | str]:
    """'key: value' lines of a CPUSTAT option; numbers as int or float."""
    out: dict[str, int | float | str] = {}
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
