"""A comparison of two sides of runs (`krig compare`, workflows/compare.py) as a typed value: what
was compared (reproducer, preset, parameters), the test and its significance level, each side
(its runs, verdicts, kernels, releases, rigs, what the reproducer says of it, its projection),
the facts the sides differ in, one row a metric (each side's spread, the change, the test's p)
and one row a threshold (how many runs held it on each side).

`krig compare --json` prints its to_json() (with the page's path added), and validate.json
keeps it as its "comparison" (krig/record_validation.py). The judged runs' directories
(`judged_runs`, what compare.html plots) are never written. A key this krig does not know is
kept as it was (`extra`), at every level.
"""
import dataclasses
import pathlib
from typing import TYPE_CHECKING, Any, ClassVar

from .record_machine import KeepsExtra


def _plain(value: Any) -> Any:
    """A record, or a list of them, as its JSON value."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.to_json() if hasattr(value, "to_json") else value


class Nested(KeepsExtra):
    """A record whose fields named in NESTED (one record) and LISTS (a list of records) are typed
    whether given as JSON objects or as records, and written back in the fields' order."""
    NESTED: ClassVar[dict[str, type[KeepsExtra]]] = {}
    LISTS: ClassVar[dict[str, type[KeepsExtra]]] = {}
    UNWRITTEN: ClassVar[tuple[str, ...]] = ()
    if TYPE_CHECKING:       # each subclass is a dataclass
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __post_init__(self) -> None:
        for name, cls in self.NESTED.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
                setattr(self, name, cls.from_json(value))
        for name, cls in self.LISTS.items():
            setattr(self, name, [v if isinstance(v, cls) else cls.from_json(v) for v in getattr(self, name) or []])

    def to_json(self) -> dict[str, Any]:
        out = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)
               if f.name != "extra" and f.name not in self.UNWRITTEN}
        return {**out, **self.extra}


@dataclasses.dataclass
class Spread(Nested):
    """One side's values of a metric (analysis/stats.py describe()): n, median, min, max."""
    n: int = 0
    median: float | None = None
    min: float | None = None
    max: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class MetricRow(Nested):
    """One metric compared: each side's spread, the change of the median, the test's result
    (p, u, floor, reachable, significant: analysis/stats.py compare_samples()) and what the change
    is called (verdict: better/worse, small, or "")."""
    metric: str = ""
    unit: str = ""
    better: str = "info"                # higher, lower, info
    base: Spread = dataclasses.field(default_factory=Spread)
    new: Spread = dataclasses.field(default_factory=Spread)
    change_pct: float | None = None
    direction: str = ""
    p: float | None = None
    u: float | None = None
    floor: float | None = None
    reachable: bool = False
    significant: bool = False
    min_change_pct: float | None = None
    material: bool = False
    values: dict[str, list[float]] = dataclasses.field(default_factory=dict)     # side -> [the judged runs' values]
    verdict: str = ""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    NESTED = {"base": Spread, "new": Spread}


@dataclasses.dataclass
class ThresholdSide(Nested):
    """How one side's judged runs did against a threshold."""
    held: int = 0
    judged: int = 0
    contended: int = 0                  # timing crossings on a contended host, not counted
    state: str = "-"                    # held, crossed, mixed, - (no run counted)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ThresholdRow(Nested):
    threshold: str = ""                 # its id (metric and limit)
    metric: str = ""
    kind: str = ""                      # regression, sanity, ...
    base: ThresholdSide = dataclasses.field(default_factory=ThresholdSide)
    new: ThresholdSide = dataclasses.field(default_factory=ThresholdSide)
    flips: bool = False
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    NESTED = {"base": ThresholdSide, "new": ThresholdSide}


@dataclasses.dataclass
class Side(Nested):
    """One side of a comparison: its runs, their verdict counts, kernels, releases and rigs."""
    runs: list[str] = dataclasses.field(default_factory=list)            # run directories, as text
    verdicts: dict[str, int] = dataclasses.field(default_factory=dict)        # verdict -> runs
    verdict_text: str = ""
    judged: int = 0
    kernels: list[str] = dataclasses.field(default_factory=list)
    releases: list[str] = dataclasses.field(default_factory=list)
    rigs: list[str] = dataclasses.field(default_factory=list)
    outcome: str | None = None          # the reproducer's own line about the side
    projection: dict[str, Any] | None = None      # analysis/projection.py, of the side's median run
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Comparison(Nested):
    reproducer: str | None = None
    preset: str | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    test: str = ""
    alpha: float | None = None
    min_n_per_side: int | None = None
    base: Side = dataclasses.field(default_factory=Side)
    new: Side = dataclasses.field(default_factory=Side)
    warnings: list[str] = dataclasses.field(default_factory=list)
    differences: list[str] = dataclasses.field(default_factory=list)    # 'fact: BASE x, NEW y'
    metrics: list[MetricRow] = dataclasses.field(default_factory=list)
    thresholds: list[ThresholdRow] = dataclasses.field(default_factory=list)
    judged_runs: dict[str, list[pathlib.Path]] = dataclasses.field(default_factory=dict)    # side -> [judged run directories]; not written
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    NESTED = {"base": Side, "new": Side}
    LISTS = {"metrics": MetricRow, "thresholds": ThresholdRow}
    UNWRITTEN = ("judged_runs",)

    def side(self, name: str) -> Side:
        """The side named "base" or "new"."""
        return {"base": self.base, "new": self.new}[name]
