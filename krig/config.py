"""Loading krig's TOML files (reproducers, rigs, kernels) and reading the values in them: sizes,
typed parameters, secrets, --set NAME=VALUE. A table's fields are checked by krig/schema.py.

Every refusal raises UsageError with one line naming the file, the field and
what is allowed.
"""
import json
import math
import os
import pathlib
import re
import stat
import tomllib
from collections.abc import Collection, Iterable
from typing import Any

from .errors import UsageError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB])?\s*$", re.ASCII)
_SIZE_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


TOML_CAP = 4 << 20          # no krig TOML file comes near it; a larger one is not one of them


def load_toml(path: pathlib.Path, what: str = "") -> dict[str, Any]:
    """A TOML file as a dict; anything else (missing, a directory, unreadable, not UTF-8, binary,
    malformed) is one UsageError line naming the file (after `what`, the option that named it)."""
    where = f"{what} {path}" if what else str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(TOML_CAP + 1)
    except FileNotFoundError:
        raise UsageError(f"{where}: file not found") from None
    except IsADirectoryError:
        raise UsageError(f"{where}: a directory, not a TOML file") from None
    except OSError as e:
        raise UsageError(f"{where}: cannot read: {e.strerror}") from None
    if len(data) > TOML_CAP:
        raise UsageError(f"{where}: more than {TOML_CAP >> 20} MiB, not a krig TOML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                         "TOML files are UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: malformed TOML: {e}") from None


def read_secret_file(path: str | pathlib.Path, field: str) -> str:
    """A secret (a password, a token) from the first line of a file only its owner can
    read (mode 0600 or stricter, owned by the user running krig). Errors name the field
    and the file, never what is in it."""
    return read_secret_lines(path, field)[0]


def read_secret_lines(path: str | pathlib.Path, field: str) -> list[str]:
    """The lines of a secret file (read_secret_file), the secret first; at most 64 KiB read."""
    p = pathlib.Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise UsageError(f"{field}: cannot read {p}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{field}: {p} is not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise UsageError(f"{field}: {p} has mode {mode:04o}, readable by others; run `chmod 600 {p}`")
    if st.st_uid != os.geteuid():
        raise UsageError(f"{field}: {p} is not owned by the user running krig (uid {os.geteuid()})")
    try:
        with open(p, "rb") as f:
            lines = f.read(64 << 10).decode().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{field}: cannot read {p}: {type(e).__name__}") from None
    if not lines or not lines[0]:
        raise UsageError(f"{field}: {p} is empty; put the secret on its first line")
    return lines


def parse_size(value: Any, field: str) -> int:
    """'16G', '512m', '2038MiB', 4096 -> bytes (binary units)."""
    if isinstance(value, bool):
        raise UsageError(f"{field}: expected a size like 512M, 16G or 1T, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise UsageError(f"{field}: size must be positive, got {value}")
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise UsageError(f"{field}: expected a size like 512M, 16G or 1T, got {value!r}")
    n = float(m.group(1)) * _SIZE_MULT[m.group(2).lower()]
    if not math.isfinite(n):
        raise UsageError(f"{field}: {value!r} is not a finite size")
    if n <= 0:
        raise UsageError(f"{field}: size must be positive, got {value!r}")
    return int(n)


PARAM_TYPES = ("int", "float", "str", "bool", "size")


def coerce(value: Any, ptype: str, field: str, choices: Collection[Any] | None = None) -> Any:
    """Convert a TOML value or a --set string to the parameter's type. A number is written
    with ASCII digits: Python would read a full-width or Arabic-Indic digit as one."""
    if ptype in ("int", "float", "size") and isinstance(value, str) and not value.isascii():
        raise UsageError(f"{field}: expected {ptype} written with ASCII digits 0-9, got {value!r}")
    v: Any
    try:
        if ptype == "int":
            if isinstance(value, bool):
                raise ValueError
            v = int(value, 0) if isinstance(value, str) else int(value)
            if isinstance(value, float) and value != v:
                raise ValueError
        elif ptype == "float":
            if isinstance(value, bool):
                raise ValueError
            v = float(value)
            if not math.isfinite(v):
                raise UsageError(f"{field}: expected a finite float, got {value!r}")
        elif ptype == "bool":
            if isinstance(value, bool):
                v = value
            elif str(value).lower() in ("1", "true", "yes", "on"):
                v = True
            elif str(value).lower() in ("0", "false", "no", "off"):
                v = False
            else:
                raise ValueError
        elif ptype == "size":
            v = parse_size(value, field)
        elif ptype == "str":
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError
            v = str(value)
        else:
            raise UsageError(f"{field}: unknown type {ptype!r}; allowed: {', '.join(PARAM_TYPES)}")
    except (ValueError, TypeError, OverflowError):     # int(inf) overflows, int(nan) is a ValueError
        raise UsageError(f"{field}: expected {ptype}, got {value!r}") from None
    if choices is not None and v not in choices:
        raise UsageError(f"{field}: {v!r} is not one of {', '.join(map(str, choices))}")
    return v


def toml_document(top: dict[str, Any], **tables: dict[str, Any]) -> str:
    """A TOML file: top's keys (a dict among them becomes a table after the others), then each
    table of `tables` in order; None values are left out."""
    top = dict(top)
    tables = {**tables, **{k: top.pop(k) for k in list(top) if isinstance(top[k], dict)}}
    text = "".join(f"{k} = {toml_value(v)}\n" for k, v in top.items() if v is not None)
    for table, d in tables.items():
        text += f"\n[{table}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in d.items() if v is not None)
    return text


def toml_value(v: Any) -> str:
    """A value as TOML (strings, numbers, booleans, lists, inline tables)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, str):
        return json.dumps(v)
    raise TypeError(f"no TOML form for {v!r}")


def parse_set(items: Iterable[str] | None) -> dict[str, str]:
    """['key=value', ...] -> {key: 'value'}; the reproducer coerces types."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--set {item!r}: expected key=value")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:
            raise UsageError(f"--set {item!r}: empty key")
        out[k] = v
    return out
