"""The run record: what a run asked, what it measured, how it ended and what the judge decided,
as typed values. manifest.json (the runner's, written as the run goes: workflows/run.py) and
verdict.json (the judge's: workflows/check.py) are written from these values and read back into
them here; thresholds.json (each threshold's outcome) and metrics.json are read with them.

    RunRecord            one run directory, read through krig/rundir.py (safe reads)
      .manifest          Manifest: asked (reproducer, preset, params, kernel, rig, series), the
                         kernel and machine facts, how the run ended (outcome, reason, faults)
      .verdict           Verdict or None (never judged): verdict, reason, cause, tallies, notes
      .thresholds        [ThresholdOutcome]: threshold id, outcome, sentence, host-sensitive
      .metrics           {name: value or None}

A key a newer or an older krig wrote that this one does not know is kept (`extra`) and written
back as it was, so a run directory made by any krig reads and re-judges the same
(tests/test_old_rundir.py keeps one as a fixture).
"""
import dataclasses
import pathlib

from .rundir import MANIFEST, RunDir

# Facts the run adds as it goes: absent from manifest.json until known (a reader asks "did the
# machine answer?" as "is there a machine").
_WHEN_KNOWN = ("machine", "host", "workload", "rig_fault", "rig_facts", "host_fault", "power_off_error",
               "pull_error", "host_load")


@dataclasses.dataclass
class Manifest:
    reproducer: str | None = None
    preset: str | None = None
    params: dict = dataclasses.field(default_factory=dict)
    kernel: dict = dataclasses.field(default_factory=dict)      # kernels.kernel.Kernel.describe()
    series: dict | None = None
    rig: dict = dataclasses.field(default_factory=dict)         # the rig's describe()
    krig_revision: str | None = None
    started: str | None = None
    ended: str | None = None
    status: str = "running"
    complete: bool = False
    outcome: str | None = None      # completed, hung, crashed, error, interrupted (the verdict rule's input)
    reason: str | None = None
    collect: bool = True
    owner: dict | None = None
    preflight: dict | None = None
    host_cpu: dict | None = None
    machine: dict | None = None     # what the machine said of itself once it answered
    host: dict | None = None        # the host sampler's CPUs and interval
    workload: dict | None = None    # argv, exit code, seconds
    rig_fault: str | None = None
    rig_facts: dict | None = None
    host_fault: str | None = None
    power_off_error: str | None = None
    pull_error: str | None = None
    host_load: str | None = None
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict) -> "Manifest":
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def to_json(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (f.name in _WHEN_KNOWN and value is None):
                continue
            out[f.name] = value
        return {**out, **self.extra}

    def write(self, run_dir) -> None:
        RunDir(run_dir).write_json(MANIFEST, self.to_json())

    @property
    def machine_answered(self) -> bool:
        return self.machine is not None

    @property
    def release(self) -> str | None:
        """The release that ran: the machine's own (`uname -r` once it answered), else the
        kernel's as built or packaged; None when neither is known."""
        return (self.machine or {}).get("release") or (self.kernel or {}).get("release") or None


@dataclasses.dataclass
class Verdict:
    verdict: str | None
    reason: str = ""
    cause: str | None = None        # krig.verdict.CAUSES; None in a verdict.json from before causes
    reproducer: str | None = None
    run_dir: str | None = None
    complete: bool = False
    console: dict = dataclasses.field(default_factory=dict)
    oom_kill: list | None = None
    warnings: list | None = None
    thresholds: dict | None = None  # the judge's tally (workflows.check.tally); None when not judged
    notes: list | None = None
    crash_context: list | None = None
    extra: dict = dataclasses.field(default_factory=dict)

    _ORDER = ("reproducer", "run_dir", "complete", "console", "oom_kill", "warnings", "thresholds", "notes",
              "verdict", "reason", "cause", "crash_context")
    _ALWAYS = ("reproducer", "run_dir", "complete", "console", "verdict", "reason", "cause")

    @classmethod
    def from_json(cls, data: dict) -> "Verdict":
        names = set(cls._ORDER)
        return cls(**{k: v for k, v in data.items() if k in names},
                   extra={k: v for k, v in data.items() if k not in names})

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self._ORDER if k in self._ALWAYS or getattr(self, k) is not None}
        return {**out, **self.extra}

    def warn(self, line: str) -> None:
        self.warnings = (self.warnings or []) + [line]


@dataclasses.dataclass(frozen=True)
class ThresholdOutcome:
    threshold: str          # the threshold's id (metric and limit)
    outcome: str            # pass, fail, contended (a timing one on a contended host), unmeasured, instrument, error
    message: str
    host_sensitive: bool = False


@dataclasses.dataclass
class RunRecord:
    dir: pathlib.Path
    manifest: Manifest
    verdict: Verdict | None
    thresholds: list
    metrics: dict

    @classmethod
    def read(cls, run) -> "RunRecord":
        """A run directory (a path or a RunDir); a missing or unreadable manifest is one line."""
        run = run if isinstance(run, RunDir) else RunDir(run)
        v = run.verdict()
        return cls(run.dir, Manifest.from_json(run.manifest), Verdict.from_json(v) if v else None,
                   [ThresholdOutcome(r["threshold"], str(r.get("outcome")), str(r.get("message") or ""),
                                     bool(r.get("host_sensitive"))) for r in run.thresholds().values()],
                   {k: (m.get("value") if isinstance(m, dict) else None) for k, m in run.metrics().items()})
