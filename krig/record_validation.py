"""validate.json, a validation's record (`krig validate`, workflows/validate.py; `krig b4-check`
reads it, workflows/b4check.py), as a typed value: what was asked (reproducer, base kernel,
series, rig, preset, the resolved parameters), the runs asked a side (`repeat`), the series
(its provenance, the reply's subject, the patches' subjects), which krig, and once answered: the
answer and its sentence, the metrics it rests on, the kernel each side booted, a lab server's
facts, the facts the sides differ in, the command that reproduces it and the comparison
(krig/record_compare.py). Written and read here only (tests/project/test_layout_records.py); a key this krig
does not know is kept as it was (`extra`), at every level.
"""
import dataclasses
import pathlib
from typing import Any

from .record_compare import Comparison
from .record_machine import KeepsExtra, Machine, RigRecord
from .results import VALIDATE_FILE, read_record, write_json


@dataclasses.dataclass
class SeriesProvenance(KeepsExtra):
    """Where the series came from (kernels/series.py load_series)."""
    message_id: str | None = None       # the cover letter's, else the first patch's; without <>
    subject: str | None = None
    author: str | None = None
    base_commit: str | None = None      # its base-commit: line
    patchset_hash: str | None = None    # KCIDB's
    cc: list[str] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**out, **self.extra}


@dataclasses.dataclass
class SideKernel(KeepsExtra):
    """The kernel a side's first run booted, with the machine, rig and host it ran on, as the
    run's manifest recorded them."""
    name: str | None = None
    release: str | None = None
    git: dict[str, Any] | None = None             # repository, commit, branch: a kernel from a git tree
    machine: Machine | None = None      # None: the machine never answered
    rig: RigRecord = dataclasses.field(default_factory=RigRecord)
    rig_facts: dict[str, Any] | None = None
    host_cpu: dict[str, Any] | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.machine is not None and not isinstance(self.machine, Machine):
            self.machine = Machine.from_json(self.machine)
        if not isinstance(self.rig, RigRecord):
            self.rig = RigRecord.from_json(self.rig)

    @property
    def machine_said(self) -> Machine:
        """What the machine said of itself; an empty Machine when it never answered."""
        return self.machine if self.machine is not None else Machine()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "release": self.release, "git": self.git,
                "machine": self.machine.to_json() if self.machine is not None else None,
                "rig": self.rig.to_json(), "rig_facts": self.rig_facts, "host_cpu": self.host_cpu, **self.extra}


@dataclasses.dataclass
class ServerFacts(KeepsExtra):
    """A lab server's facts (firmware, system, RAM, CPU, BMC), and what a Redfish BMC says of it."""
    rig: str | None = None
    system: str | None = None
    firmware: str | None = None
    ram_bytes: int | None = None
    cpus: int | None = None
    cpu: str | None = None              # the CPU's model
    bmc: str | None = None              # what the BMC says of itself
    bmc_address: str | None = None
    server_model: str | None = None     # the four below: a Redfish BMC's (rigs/redfish/facts.py), as it says them
    memory_gib: float | None = None
    processors: str | None = None       # "COUNT x MODEL"
    firmware_versions: dict[str, Any] | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    REDFISH = ("server_model", "memory_gib", "processors", "firmware_versions")     # written when known

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "extra" and (f.name not in self.REDFISH or getattr(self, f.name) is not None)}
        return {**out, **self.extra}


@dataclasses.dataclass
class ValidationRecord(KeepsExtra):
    kind: str = "krig-validate"
    reproducer: str | None = None
    base: str | None = None             # the base kernel as krig builds it (TREE@ spelled out)
    series: str | None = None           # a Message-ID, or the mbox's full path
    rig: str | None = None
    preset: str | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    repeat: int | None = None
    knobs: dict[str, Any] | None = None           # {"base": [...], "series": [...]}: each side's knobs (krig/knobs.py words)
    series_provenance: SeriesProvenance = dataclasses.field(default_factory=SeriesProvenance)
    reply_subject: str | None = None
    patches: list[str] = dataclasses.field(default_factory=list)        # the patches' subjects
    krig_revision: str | None = None
    krig_version: str | None = None
    updated: str | None = None
    created: str | None = None
    answer: str | None = None           # None: not answered yet
    reason: str | None = None
    judged_metrics: list[str] = dataclasses.field(default_factory=list)
    finished: str | None = None
    base_kernel: SideKernel | None = None    # None: no run of the side could be read
    new_kernel: SideKernel | None = None
    server: ServerFacts | None = None   # None: the rig is no lab server (a QEMU guest)
    differences: list[str] = dataclasses.field(default_factory=list)
    command: list[str] = dataclasses.field(default_factory=list)        # the `krig validate` argv
    comparison: Comparison | None = None    # None: the validation stopped after the first runs
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    ASKED = ("reproducer", "base", "series", "rig", "preset", "params", "knobs")     # what a resumed validation must match
    # what the answer brings: absent from the file until the validation is answered
    WHEN_ANSWERED = ("answer", "reason", "judged_metrics", "finished", "base_kernel", "new_kernel", "server",
                     "differences", "command", "comparison")

    def __post_init__(self) -> None:
        """The nested records typed, whether given as validate.json's objects or as records."""
        if not isinstance(self.series_provenance, SeriesProvenance):
            self.series_provenance = SeriesProvenance.from_json(self.series_provenance)
        for name in ("base_kernel", "new_kernel"):
            value = getattr(self, name)
            if not isinstance(value, SideKernel):       # {}: no run read
                setattr(self, name, SideKernel.from_json(value) if isinstance(value, dict) and value else None)
        if self.server is not None and not isinstance(self.server, ServerFacts):
            self.server = ServerFacts.from_json(self.server) if isinstance(self.server, dict) else None
        if self.comparison is not None and not isinstance(self.comparison, Comparison):
            self.comparison = Comparison.from_json(self.comparison) if isinstance(self.comparison, dict) else None

    @property
    def answered(self) -> bool:
        return self.answer is not None

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (f.name in self.WHEN_ANSWERED and not self.answered) or \
                    (f.name == "knobs" and value is None):     # a validation without knobs: no key
                continue
            if f.name in ("base_kernel", "new_kernel"):
                out[f.name] = value.to_json() if value is not None else {}
            else:
                out[f.name] = value.to_json() if hasattr(value, "to_json") else value
        return {**out, **self.extra}


def read_validation(vdir: pathlib.Path, what: str = "-o") -> ValidationRecord:
    """The validation directory's validate.json; an unreadable one or one that is not a JSON
    object is one line naming `what` (the option that gave the directory)."""
    return ValidationRecord.from_json(read_record(vdir, VALIDATE_FILE, what))


def write_validation(vdir: pathlib.Path, validation: ValidationRecord) -> None:
    write_json(pathlib.Path(vdir) / VALIDATE_FILE, validation.to_json())
