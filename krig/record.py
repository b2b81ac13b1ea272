"""The run record: what a run asked, what it measured, how it ended and what the judge decided,
as typed values. manifest.json (the runner's, written as the run goes: workflows/run.py),
verdict.json, metrics.json and thresholds.json (the judge's: workflows/check.py) are written
from these values and read back into them here, and nowhere else (tests/project/test_layout_records.py).

    RunRecord            one run directory, read through krig/rundir.py (safe reads); `.run` is
                         its RunDir, which every later read of the run goes through
      .manifest          Manifest: asked (reproducer, preset, params, kernel, rig, series), the
                         kernel and machine facts, how the run ended (outcome, reason, faults);
                         .kernel, .rig, .machine typed (krig/record_machine.py); what is derived
                         from them decided once here: .release, .rig_name, .cpus, .mem_total_bytes
      .verdict           Verdict or None (never judged): verdict, reason, cause, tallies, notes
      .thresholds        [ThresholdOutcome]: threshold id, outcome, sentence, host-sensitive
      .metrics           {name: value or None}
      .metric_entries    {name: MetricEntry}: the value with its unit, better direction, description

A reader that has no manifest to read (a run krig had only begun, a judge's own files) uses the
functions below on the run's RunDir: read_verdict, read_metrics, read_thresholds, and the
judge writes with write_verdict, write_metrics, write_thresholds.

The manifest is read at once (a missing or unreadable one is one line); the rest when asked.
This module is the one place manifest.json's object becomes a Manifest (tests/project/test_layout_records.py).

A key a newer or an older krig wrote that this one does not know is kept (`extra`) and written
back as it was, so a run directory made by any krig reads and re-judges the same
(tests/krig/test_old_rundir.py keeps one as a fixture).
"""
import dataclasses
import os
from typing import Any

from .record_machine import KernelRecord, Machine, RigRecord
from .tally import Tally as Tally      # re-exported: a Verdict's thresholds
from .rundir import MANIFEST, METRICS, THRESHOLDS, VERDICT, Run, RunDir

# Facts the run adds as it goes: absent from manifest.json until known (a reader asks "did the
# machine answer?" as "is there a machine").
_WHEN_KNOWN = ("machine", "host", "workload", "rig_fault", "rig_facts", "host_fault", "power_off_error",
               "pull_error", "host_load", "knobs")


@dataclasses.dataclass
class Manifest:
    reproducer: str | None = None
    preset: str | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    kernel: KernelRecord = dataclasses.field(default_factory=KernelRecord)  # kernels.kernel.Kernel.describe()
    series: dict[str, Any] | None = None
    rig: RigRecord = dataclasses.field(default_factory=RigRecord)           # the rig's describe()
    krig_revision: str | None = None
    started: str | None = None
    ended: str | None = None
    status: str = "running"
    complete: bool = False
    outcome: str | None = None      # completed, hung, crashed, error, interrupted (the verdict rule's input)
    reason: str | None = None
    collect: bool = True
    owner: dict[str, Any] | None = None
    preflight: dict[str, Any] | None = None
    host_cpu: dict[str, Any] | None = None
    machine: Machine | None = None  # what the machine said of itself once it answered
    host: dict[str, Any] | None = None        # the host sampler's CPUs and interval
    workload: dict[str, Any] | None = None    # argv, exit code, seconds
    rig_fault: str | None = None
    rig_facts: dict[str, Any] | None = None
    host_fault: str | None = None
    power_off_error: str | None = None
    pull_error: str | None = None
    host_load: str | None = None
    knobs: dict[str, Any] | None = None       # --sysctl/--cmdline, each as set and as read back (krig/knobs.py applied)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        """The nested records typed, whether given as manifest.json's objects or as records."""
        if not isinstance(self.kernel, KernelRecord):
            self.kernel = KernelRecord.from_json(self.kernel)
        if not isinstance(self.rig, RigRecord):
            self.rig = RigRecord.from_json(self.rig)
        if self.machine is not None and not isinstance(self.machine, Machine):
            self.machine = Machine.from_json(self.machine)

    @classmethod
    def begun(cls, reproducer: str, preset: str | None, params: dict[str, Any], kernel: dict[str, Any],
              series: dict[str, Any] | None, rig: dict[str, Any], **rest: Any) -> "Manifest":
        """A new run's manifest from its kernel's and its rig's describe()."""
        return cls(reproducer, preset, params, KernelRecord.from_json(kernel), series, RigRecord.from_json(rig),
                   **rest)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Manifest":
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (f.name in _WHEN_KNOWN and value is None):
                continue
            out[f.name] = value.to_json() if isinstance(value, (KernelRecord, RigRecord, Machine)) else value
        return {**out, **self.extra}

    def write(self, run_dir: str | os.PathLike[str]) -> None:
        RunDir(run_dir).write_json(MANIFEST, self.to_json())

    @property
    def machine_answered(self) -> bool:
        return self.machine is not None and bool(self.machine.to_json())

    @property
    def machine_said(self) -> Machine:
        """What the machine said of itself; an empty Machine (every fact None) when it never answered."""
        return self.machine if self.machine is not None else Machine()

    @property
    def release(self) -> str | None:
        """The release that ran: the machine's own (`uname -r` once it answered), else the
        kernel's as built or packaged; None when neither is known."""
        return self.machine_said.release or self.kernel.release or None

    @property
    def rig_name(self) -> str | None:
        return self.rig.name

    @property
    def cpus(self) -> int | None:
        """The machine's CPUs as it counted them once it answered, else the rig file's."""
        return self.machine_said.cpus or self.rig.cpus or None

    @property
    def mem_total_bytes(self) -> int | None:
        """The machine's RAM (MemTotal) once it answered; None before."""
        return self.machine_said.mem_total_bytes or None


@dataclasses.dataclass(frozen=True)
class ThresholdOutcome:
    threshold: str          # the threshold's id (metric and limit)
    outcome: str            # pass, fail, contended (a timing one on a contended host), unmeasured, instrument, error
    message: str
    host_sensitive: bool = False


def tally_of_json(data: dict[str, Any]) -> Tally:
    """verdict.json's "thresholds" as a Tally (a key an older krig did not write is 0 or empty)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Tally):
        v = data.get(f.name, f.default)
        out[f.name] = tuple(str(x) for x in v or ()) if isinstance(f.default, tuple) else int(v or 0)
    return Tally(**out)


@dataclasses.dataclass
class Verdict:
    verdict: str | None
    reason: str = ""
    cause: str | None = None        # krig.verdict.CAUSES; None in a verdict.json from before causes
    reproducer: str | None = None
    run_dir: str | None = None
    complete: bool = False
    console: dict[str, Any] = dataclasses.field(default_factory=dict)
    oom_kill: list[str] | None = None
    warnings: list[str] | None = None
    thresholds: Tally | None = None  # the judge's tally; None when not judged
    notes: list[str] | None = None
    crash_context: list[str] | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    _ORDER = ("reproducer", "run_dir", "complete", "console", "oom_kill", "warnings", "thresholds", "notes",
              "verdict", "reason", "cause", "crash_context")
    _ALWAYS = ("reproducer", "run_dir", "complete", "console", "verdict", "reason", "cause")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Verdict":
        names = set(cls._ORDER)
        known = {k: v for k, v in data.items() if k in names}
        if isinstance(known.get("thresholds"), dict):
            known["thresholds"] = tally_of_json(known["thresholds"])
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self._ORDER if k in self._ALWAYS or getattr(self, k) is not None}
        if self.thresholds is not None:
            out["thresholds"] = self.thresholds.to_json()
        return {**out, **self.extra}

    def warn(self, line: str) -> None:
        self.warnings = (self.warnings or []) + [line]


@dataclasses.dataclass(frozen=True)
class MetricEntry:
    """One metric of metrics.json: its value (None: not measured) and how to read it."""
    value: float | None
    unit: str = ""
    better: str = "info"            # higher, lower, info
    description: str = ""
    min_change_pct: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    _KNOWN = ("value", "better", "min_change_pct", "unit", "description")

    @classmethod
    def from_json(cls, data: object) -> "MetricEntry":
        """An entry as written; anything but a JSON object is an entry without a value."""
        if not isinstance(data, dict):
            return cls(None)
        value = data.get("value")
        return cls(value if isinstance(value, (int, float)) and not isinstance(value, bool) else None,
                   unit=str(data.get("unit") or ""), better=str(data.get("better") or "info"),
                   description=str(data.get("description") or ""), min_change_pct=data.get("min_change_pct"),
                   extra={k: v for k, v in data.items() if k not in cls._KNOWN})

    def to_json(self) -> dict[str, Any]:
        out = {"value": self.value, "better": self.better}
        if self.min_change_pct is not None:
            out["min_change_pct"] = self.min_change_pct
        return {**out, "unit": self.unit, "description": self.description, **self.extra}


def read_verdict(run: Run) -> Verdict | None:
    """verdict.json of a run directory (a path or its RunDir); None when the run was never judged."""
    v = RunDir.of(run).json(VERDICT, {})
    return Verdict.from_json(v) if v else None


def write_verdict(run: Run, verdict: Verdict) -> None:
    RunDir.of(run).write_json(VERDICT, verdict.to_json())


def read_metrics(run: Run) -> dict[str, MetricEntry]:
    """metrics.json of a run directory: {name: MetricEntry}; {} when the run has none."""
    return {str(k): MetricEntry.from_json(m) for k, m in RunDir.of(run).json(METRICS, {}).items()}


def write_metrics(run: Run, entries: dict[str, MetricEntry]) -> None:
    RunDir.of(run).write_json(METRICS, {k: e.to_json() for k, e in entries.items()})


def read_thresholds(run: Run) -> dict[str, ThresholdOutcome]:
    """threshold id -> the judge's outcome (thresholds.json); {} when the run was not judged."""
    rows = RunDir.of(run).json(THRESHOLDS, [])
    return {r["threshold"]: ThresholdOutcome(r["threshold"], str(r.get("outcome")), str(r.get("message") or ""),
                                             bool(r.get("host_sensitive")))
            for r in rows if isinstance(r, dict) and isinstance(r.get("threshold"), str)}


def write_thresholds(run: Run, outcomes: list[ThresholdOutcome]) -> None:
    RunDir.of(run).write_json(THRESHOLDS, [dataclasses.asdict(o) for o in outcomes])


class RunRecord:
    """One run directory read as a record: the manifest at once (a missing or unreadable one is one
    line), the verdict, thresholds and metrics when first asked, through the same RunDir (each
    file read once, whoever asks)."""

    def __init__(self, run: RunDir, manifest: Manifest):
        self.run, self.dir, self.manifest = run, run.dir, manifest

    @classmethod
    def read(cls, run: Run, required: bool = True) -> "RunRecord":
        """A run directory (a path or a RunDir); required=False reads a missing manifest.json as an
        empty one (a run directory krig had only begun)."""
        run = RunDir.of(run)
        if not required and not run.exists(MANIFEST):
            return cls(run, Manifest())
        return cls(run, Manifest.from_json(run.manifest_json()))

    @property
    def verdict(self) -> Verdict | None:
        """verdict.json, or None when the run was never judged."""
        return read_verdict(self.run)

    @property
    def thresholds(self) -> list[ThresholdOutcome]:
        return list(read_thresholds(self.run).values())

    @property
    def metric_entries(self) -> dict[str, MetricEntry]:
        return read_metrics(self.run)

    @property
    def metrics(self) -> dict[str, Any]:
        """{name: value or None} of metrics.json."""
        return {k: e.value for k, e in read_metrics(self.run).items()}
