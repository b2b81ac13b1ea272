"""Declarative schemas for krig's TOML tables: a table is a tuple of Fields, and check() reads it.

A Field is one key of a table: the types TOML may give it, whether it is required or its
default, and the rules its value follows (one of some choices, a range, a pattern, a test,
a rule for each item of a list, or a table of its own), the way labgrid declares attrs
fields with validators. Every refused value is one UsageError line naming the file and the
field and saying what is allowed (exit 2), like every other bad input:

    PORT = Field("port", int, 623, min=1, max=65535, says="{v} is not a port number (1-65535)")
    check({"port": 70000}, (PORT,), "rigs/lab.toml.bmc")
    -> UsageError: rigs/lab.toml.bmc.port: 70000 is not a port number (1-65535)

What one field cannot say alone (exactly one of two keys, a name that must be declared in
another table) stays a few lines of code after check(), next to the table. check() is made of
require() (one key, its types) and reject_unknown() (no key outside the table's), which a table
read key by key (a lab's [select]) uses alone; this module imports nothing of krig but its errors.

A Record declares a table's checked value as a frozen dataclass, its attributes typed, the
table (`fields=`) the rules and the class the types, checked against each other when the class
is made: a field by its name as an attribute, a sub-table (table=) a record of its own, a list
of tables (rows=) a tuple of records, any other list a tuple; a field the file may omit (OMIT)
is None when it was. to_json() gives back check()'s dict:

    class Bmc(Record, fields=(PORT,)):
        port: int

    Bmc.of(check({"port": 624}, (PORT,), "rigs/lab.toml.bmc")).port  -> 624
"""
import copy
import dataclasses
import math
import re
import typing
from collections.abc import Callable, Collection
from types import UnionType
from typing import Any, ClassVar, Self, dataclass_transform

from .errors import UsageError

REQUIRED = object()     # a field's default: the key must be there ("missing required field")
OMIT = object()         # a field's default: an absent key stays absent from check()'s result
ANY = None              # a field's types: any TOML value, left to `convert` to judge

# A TOML value as a table holds it (a str, int, float, bool, datetime, list or table): what
# the Field's types and rules say it is is checked at run time, hence Any.
Types = type | tuple[type, ...] | None           # a Field's types: a type, a tuple of them, or ANY
Rule = type | tuple[type, ...] | str | Callable[[Any], bool]      # a Field's `each`


@dataclasses.dataclass(frozen=True)
class Field:
    """One key of a TOML table and what its value may be.

    types: a type or a tuple of them (bool is never an int, a number is finite), or ANY.
    default: the value when the key is absent (converted, never held to the rules: the file's
      author did not write it), or REQUIRED, or OMIT (an absent key stays absent).
    convert: (value, field) -> the value kept (parse_size: '4G' -> bytes); refuses with its own line.
    choices / min / max / pattern (a regular expression a string matches whole) / test (a
      predicate) / each (the rule for every item of a list: a type, a pattern or a predicate):
      the rules, checked on the converted value in that order.
    table: the Fields of a sub-table (a dict value is checked against them); rows: the Fields
      of every table of a list of tables; entries: the Fields of every table of a table of
      named tables ([metrics.<name>]).
    says: what the error says after "file.field: " when a rule refuses the value, a str.format
      template of v (the value), raw (as written), item (each: the item refused), min and max;
      without it the line is the usual "'x' is not one of a, b" or "must be at least 1, got 0".
    name: the key of the result (default: the key), so two fields may read one key.
    """
    key: str
    types: Types = str
    default: Any = REQUIRED
    convert: Callable[[Any, str], Any] | None = None
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None
    pattern: str | None = None
    test: Callable[[Any], bool] | None = None
    each: Rule | None = None
    table: tuple["Field", ...] | None = None
    rows: tuple["Field", ...] | None = None
    entries: tuple["Field", ...] | None = None
    says: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if (self.pattern or self.test or self.each is not None) and not self.says:
            raise TypeError(f"Field {self.key!r}: a pattern, test or each rule needs `says`")

    def value(self, table: dict[str, Any], where: str) -> Any:
        """The field's value in `table` (a table of the file at `where`), checked; OMIT if absent and omitted."""
        field = f"{where}.{self.key}"
        if self.key not in table:
            if self.default is REQUIRED:
                raise UsageError(f"{where}: missing required field '{self.key}'")
            if self.default is OMIT or self.default is None:
                return self.default
            v = _fresh(self.default)
            v = self.convert(v, field) if self.convert else v
            return check(v, self.table, field) if self.table is not None else v
        raw = table[self.key] if self.types is ANY else require(table, self.key, self.types, where)
        v = self.convert(raw, field) if self.convert else raw
        self.refuse_unless_allowed(v, raw, field)
        if self.table is not None:
            return check(v, self.table, field)
        if self.rows is not None:
            return check_rows(v, self.rows, field, self.says)
        if self.entries is not None:
            return check_entries(v, self.entries, field, self.says)
        return v

    def refuse_unless_allowed(self, v: Any, raw: Any, field: str) -> None:
        """One UsageError line naming `field` when v breaks a rule."""
        def refuse(default: str, **more: Any) -> typing.NoReturn:
            said = self.says or default
            raise UsageError(f"{field}: " + said.format(v=v, raw=raw, min=_num(self.min), max=_num(self.max), **more))
        if self.choices is not None and v not in self.choices:
            refuse("{v!r} is not one of " + ", ".join(map(str, self.choices)))
        if self.min is not None and v < self.min or self.max is not None and v > self.max:
            if self.min is not None and self.max is not None:
                refuse("{v!r} is outside {min}-{max}")
            refuse("must be at least {min}, got {v!r}" if self.min is not None else "must be at most {max}, got {v!r}")
        if self.pattern is not None and not (isinstance(v, str) and re.fullmatch(self.pattern, v)):
            refuse("")
        if self.test is not None and not self.test(v):
            refuse("")
        if self.each is not None:
            for item in v:
                if not _item_ok(self.each, item):
                    refuse("", item=item)


def check(table: dict[str, Any], fields: tuple[Field, ...], where: str) -> dict[str, Any]:
    """`table` (a TOML table of the file at `where`) against its Fields: no key outside them,
    every field's checked value (defaults filled) by its name, OMIT fields absent."""
    reject_unknown(table, {f.key for f in fields}, where)
    out = {}
    for f in fields:
        v = f.value(table, where)
        if v is not OMIT:
            out[f.name or f.key] = v
    return out


def check_rows(rows: list[Any], fields: tuple[Field, ...], where: str, says: str | None = None) -> list[dict[str, Any]]:
    """A list of tables ([[thresholds]]), each against `fields`; an item that is no table is
    refused with `says` ("expected a table" without it)."""
    return [check(a_table(t, f"{where}[{i}]", says), fields, f"{where}[{i}]") for i, t in enumerate(rows)]


def check_entries(tables: dict[str, Any], fields: tuple[Field, ...], where: str,
                  says: str | None = None) -> dict[str, dict[str, Any]]:
    """A table of named tables ([metrics.<name>]), each against `fields`."""
    return {k: check(a_table(t, f"{where}.{k}", says), fields, f"{where}.{k}") for k, t in tables.items()}


def with_defaults(fields: tuple[Field, ...], **defaults: Any) -> tuple[Field, ...]:
    """The same fields, some with another default (a table that fills what another leaves out)."""
    return tuple(dataclasses.replace(f, default=defaults[f.key]) if f.key in defaults else f for f in fields)


def a_table(t: Any, where: str, says: str | None = None) -> dict[str, Any]:
    """t, when it is a table; else one line: `says` ("expected a table" without it)."""
    if not isinstance(t, dict):
        raise UsageError(f"{where}: {says or 'expected a table'}")
    return t


# -- one key at a time: what check() and Field.value are made of, for the few tables (a lab's
# [select], a preset's values) read key by key

def require(table: dict[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    """table[key], of `types` (a type or a tuple of them; bool is never an int, a number is finite)."""
    if key not in table:
        raise UsageError(f"{where}: missing required field '{key}'")
    v = table[key]
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in _as_tuple(types)):
        raise UsageError(f"{where}.{key}: expected {_type_names(types)}, got {v!r}")
    if isinstance(v, float) and not math.isfinite(v):       # TOML's nan, inf and 1e400
        raise UsageError(f"{where}.{key}: expected a finite number, got {v!r}")
    return v


def optional(table: dict[str, Any], key: str, types: type | tuple[type, ...], where: str,
             default: Any = None) -> Any:
    """table[key] as require() takes it, or default when the key is absent."""
    if key not in table:
        return default
    return require(table, key, types, where)


def reject_unknown(table: dict[str, Any], allowed: Collection[str], where: str) -> None:
    """One line naming the first key of `table` that is not in `allowed`."""
    for k in table:
        if k not in allowed:
            raise UsageError(f"{where}: unknown field '{k}'; allowed: {', '.join(sorted(allowed))}")


def missing(table: dict[str, Any], key: str, where: str) -> Any:
    """table[key], a field required only in some cases: absent (or None) is the usual line."""
    if table.get(key) is None:
        raise UsageError(f"{where}: missing required field '{key}'")
    return table[key]


def _item_ok(rule: Rule, item: Any) -> bool:
    if isinstance(rule, str):
        return isinstance(item, str) and re.fullmatch(rule, item) is not None
    if isinstance(rule, (type, tuple)):
        return isinstance(item, rule) and not (isinstance(item, bool) and bool not in _as_tuple(rule))
    return rule(item)


def _as_tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


def _type_names(types: type | tuple[type, ...]) -> str:
    names = {int: "integer", float: "number", str: "string", bool: "boolean", list: "list", dict: "table"}
    return " or ".join(names.get(t, t.__name__) for t in _as_tuple(types))


def _fresh(default: Any) -> Any:
    """A default list or table, a copy: a caller may change its result."""
    return type(default)(default) if isinstance(default, (list, dict)) else default


def _num(x: float | None) -> float | None:
    """A bound as the error says it: 1, not 1.0."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


@dataclass_transform(frozen_default=True)
@dataclasses.dataclass(frozen=True)
class Record:
    """A checked table as a frozen value: a frozen dataclass whose attributes, in the table's
    order and with their types, are the fields of the table it is declared for (`fields=`), so
    a type checker sees each one. A sub-table (table=) is a record class of its own, a list of
    tables (rows=) tuple[ThatRecord, ...], a table of named tables (entries=) dict[str,
    ThatRecord]; any other list a tuple; a field the file may omit (OMIT or None) admits None.
    The declaration is checked against the table when the class is made (TypeError): the same
    names in the same order, and the types the table lets through. A class declared without
    `fields=` is a part that records of several tables share (a BMC's login).
    """
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    NESTED: ClassVar[dict[str, type["Record"]]] = {}      # field name -> the record class of its sub-table or rows

    def __init_subclass__(cls, fields: tuple[Field, ...] | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        dataclasses.dataclass(frozen=True)(cls)
        if fields is not None:
            cls.FIELDS, cls.NESTED = fields, _declared(cls, fields)

    @classmethod
    def of(cls, table: dict[str, Any]) -> Self:
        """The value of a table check() returned (an OMIT field absent is None)."""
        return cls(**{_name(f): _held(table.get(_name(f)), f, cls.NESTED.get(_name(f))) for f in cls.FIELDS})

    def to_json(self) -> dict[str, Any]:
        """The table as check() returned it: an omitted field absent, lists and tables plain."""
        return {_name(f): _plain(getattr(self, _name(f))) for f in self.FIELDS
                if not (f.default is OMIT and getattr(self, _name(f)) is None)}


def _declared(cls: type[Record], fields: tuple[Field, ...]) -> dict[str, type[Record]]:
    """The record classes of `cls`'s sub-tables and rows, by field name, once its attributes
    are found to be `fields`: the same names in the same order, each of a type the field's
    value may have (TypeError naming the first that is not)."""
    names = [_name(f) for f in fields]
    clash = sorted({n for n in names if names.count(n) > 1 or hasattr(Record, n)})
    if clash:
        raise TypeError(f"record {cls.__name__}: field names used twice or taken: {', '.join(clash)}")
    attrs = [a.name for a in dataclasses.fields(cls)]
    if attrs != names:
        raise TypeError(f"record {cls.__name__}: its attributes ({', '.join(attrs)}) are not its table's fields "
                        f"({', '.join(names)}), in that order")
    hints = typing.get_type_hints(cls)
    nested = {}
    for f in fields:
        said = _declared_type(f, hints[_name(f)])
        if said is not None:
            raise TypeError(f"record {cls.__name__}.{_name(f)}: {said}")
        sub = _record_in(hints[_name(f)])
        if sub is not None:
            nested[_name(f)] = sub
    return nested


def _declared_type(f: Field, hint: Any) -> str | None:
    """What is wrong with `hint` as the type of field `f`'s value, or None: a sub-table's, rows'
    or entries' record of the same table, None admitted where the field may be absent, and
    (unless `convert` makes the value) every type the table lets through."""
    if hint is Any:
        return None
    union = isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union
    members = typing.get_args(hint) if union else (hint,)
    if (f.default is OMIT or f.default is None) and type(None) not in members:
        return "the file may omit it: its type must admit None"
    sub, rec = _sub(f), _record_in(hint)
    if sub is not None or rec is not None:
        shape = tuple if f.rows is not None else dict if f.entries is not None else None
        if sub is None or rec is None or rec.FIELDS is not sub or typing.get_origin(hint) is not shape:
            return f"its type {_shown(hint)} is not the record of its {'rows' if f.rows else 'entries' if f.entries else 'table'}"
        return None
    if f.convert is not None or f.types is ANY:
        return None
    held = {typing.get_origin(m) or m for m in members}
    for t in _as_tuple(f.types):
        if (tuple if t is list else t) not in held and not (t is int and float in held):
            return f"its type {_shown(hint)} does not admit {t.__name__}, which the table lets through"
    return None


def _shown(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint)


def _record_in(hint: Any) -> type[Record] | None:
    """The record class a type names (itself, of a tuple, of a dict's values, or beside None)."""
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint
    return next((r for a in typing.get_args(hint) if (r := _record_in(a)) is not None), None)


def _name(f: Field) -> str:
    return f.name or f.key


def _sub(f: Field) -> tuple[Field, ...] | None:
    """The Fields of a field's sub-table, of its rows or of its entries, if it has them."""
    return next((t for t in (f.table, f.rows, f.entries) if t is not None), None)


def _held(v: Any, f: Field, sub: type[Record] | None) -> Any:
    """A checked value as a record holds it: sub-tables as records, lists as tuples."""
    if sub is not None and f.table is not None and isinstance(v, dict):
        return sub.of(v)
    if sub is not None and f.rows is not None and isinstance(v, list):
        return tuple(sub.of(t) for t in v)
    if sub is not None and f.entries is not None and isinstance(v, dict):
        return {k: sub.of(t) for k, t in v.items()}
    return tuple(v) if isinstance(v, list) else v


def _plain(v: Any) -> Any:
    """A held value as check() gave it: records as dicts, tuples as lists, a copy."""
    if isinstance(v, Record):
        return v.to_json()
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return copy.copy(v)
