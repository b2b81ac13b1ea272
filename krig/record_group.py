"""group.json, a group of runs' record (`krig run --repeat`, workflows/group.py), as a typed value:
what was asked (reproducer, rig, kernel as asked and its id, preset, the resolved parameters,
the series), how many runs were asked (`repeat`), every run with its verdict, the verdict counts
and per metric n, median, min and max over the judged runs. Written and read here only
(tests/project/test_layout_records.py); a key this krig does not know is kept as it was (`extra`)."""
import dataclasses
import pathlib
from typing import Any

from .record_machine import KeepsExtra
from .results import GROUP_FILE, read_record, write_json


@dataclasses.dataclass
class GroupRecord(KeepsExtra):
    reproducer: str | None = None
    rig: str | None = None
    kernel: str | None = None           # as asked (--kernel's text)
    kernel_id: str | None = None
    preset: str | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    series: dict[str, Any] | None = None
    knobs: dict[str, Any] | None = None           # --sysctl and --cmdline asked (krig/knobs.py Knobs.to_json); None: none
    created: str | None = None
    repeat: int = 1
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)        # [{dir, verdict, counted}]
    counted: int = 0
    verdicts: dict[str, int] = dataclasses.field(default_factory=dict)    # verdict -> runs
    metrics: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)     # metric -> {n, median, min, max, unit, better}
    complete: bool = False
    updated: str | None = None
    kind: str = "krig-group"
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    ASKED = ("reproducer", "rig", "kernel", "kernel_id", "preset", "params", "knobs")     # what a resumed group must match

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {"kind": out.pop("kind"), **out, **self.extra}


def read_group(gdir: pathlib.Path, what: str = "--group") -> GroupRecord:
    """The group directory's group.json; an unreadable one or one that is not a JSON object is one
    line naming `what` (the option or argument that gave the directory)."""
    return GroupRecord.from_json(read_record(gdir, GROUP_FILE, what))


def write_group(gdir: pathlib.Path, group: GroupRecord) -> None:
    write_json(pathlib.Path(gdir) / GROUP_FILE, group.to_json())
