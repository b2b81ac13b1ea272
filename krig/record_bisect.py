"""state.json, a bisection's state (`krig bisect run`, workflows/bisect.py), as a typed value: the
tree and the ref each step builds (BISECT_HEAD), the step's kernel and the directory of its
generated kernel tomls, the `krig run` every step makes (reproducer, preset, --set, rig, how many
runs, its --sysctl and --cmdline knobs), where bisect.log is, the metric (the one bisected on, or the reproducer's key metric) and
the mode (verdict or metric); in metric mode, once the endpoints are measured, their zones
(workflows/metric_bisect.py). bisect.py writes it before `git bisect run` starts, and each step's
oracle (`python -m workflows.bisect oracle STATE`) reads it. Written and read here only
(tests/project/test_layout_records.py); a key this krig does not know is kept as it was (`extra`)."""
import dataclasses
import pathlib
from typing import Any

from .errors import UsageError
from .record_machine import KeepsExtra
from .results import BISECT_STATE, read_json, write_json


@dataclasses.dataclass
class ZonesRecord(KeepsExtra):
    """A metric bisection's zones: the endpoints' values and the two edges cutting the gap in thirds."""
    metric: str | None = None
    good: list[float] = dataclasses.field(default_factory=list)
    bad: list[float] = dataclasses.field(default_factory=list)
    good_low: bool = True           # GOOD's values are the lower ones
    good_edge: float | None = None
    bad_edge: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**out, **self.extra}


@dataclasses.dataclass
class BisectionRecord(KeepsExtra):
    tree: str | None = None
    ref: str = "BISECT_HEAD"            # the commit each step builds (git bisect's, --no-checkout)
    kernel: str | None = None           # the step's kernel: bisect-<id>, its toml in `kernels`
    kernels: str | None = None          # the bisection's own kernel tomls (kernels.definition.GENERATED_DIRS)
    repro: str | None = None
    preset: str | None = None
    repeat: int = 1                     # runs a step makes at most (the strict majority answers)
    rig: str | None = None
    sets: list[str] = dataclasses.field(default_factory=list)    # --set NAME=VALUE, as given
    knobs: list[str] = dataclasses.field(default_factory=list)   # --sysctl N=V / --cmdline A options (krig/knobs.py)
    log: str | None = None              # bisect.log
    metric: str | None = None           # bisected on (mode metric), else the key metric logged
    mode: str = "verdict"               # verdict or metric
    zones: ZonesRecord | None = None    # mode metric, once GOOD and BAD are measured
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    REQUIRED = ("tree", "ref", "kernel", "repro", "rig", "repeat", "log")   # what no step can do without

    def __post_init__(self) -> None:
        if self.zones is not None and not isinstance(self.zones, ZonesRecord):
            self.zones = ZonesRecord.from_json(self.zones)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("extra", "zones")
               and (f.name != "knobs" or self.knobs)}         # a bisection without knobs: no key
        return {**out, **({"zones": self.zones.to_json()} if self.zones is not None else {}), **self.extra}


def read_bisection(path: pathlib.Path) -> BisectionRecord:
    """A bisection's state file (its directory's BISECT_STATE, or the path the oracle is given); an
    unreadable one, one that is not a JSON object or one without a key every step needs is one
    line naming it."""
    data = read_json(pathlib.Path(path))
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object (not a bisection's {BISECT_STATE})")
    missing = [k for k in BisectionRecord.REQUIRED if k not in data]
    if missing:
        raise UsageError(f"{path}: no {', '.join(missing)} (not a bisection's {BISECT_STATE})")
    return BisectionRecord.from_json(data)


def write_bisection(bdir: pathlib.Path, state: BisectionRecord) -> pathlib.Path:
    """The bisection directory's BISECT_STATE written from `state`; returns its path (the oracle's argument)."""
    path = pathlib.Path(bdir) / BISECT_STATE
    write_json(path, state.to_json())
    return path
