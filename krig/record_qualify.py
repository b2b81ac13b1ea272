"""A qualification's records (`krig qualify`, workflows/qualify.py), as typed values:

    CaseRecord      one case of the suite: what it asks (reproducer, preset, --set, kernel, rig,
                    which repeat), the verdict expected and its id; once it ran, when it started
                    and ended, its verdict and reason, its run directory, seconds and whether the
                    verdict was the expected one (`ok`). A finished case is QUALIFY_CASES/<id>.json
                    in the qualification's directory (read_case, write_case), so that the same
                    command again runs only the cases without one.
    SuiteRecord     SUITE_FILE (suite.json, workflows/qualify_report.py): the suite's name, file and
                    description, krig's revision, when it started and was written, whether it is
                    complete and all as expected, the rigs and their sign-off lines, every case (a
                    case not run yet has its verdict None). `krig export kcidb` reads it.

Written and read here only (tests/project/test_layout_records.py); a key this krig does not know is kept as it
was (`extra`)."""
import dataclasses
import pathlib
from typing import Any

from .errors import UsageError
from .record_machine import KeepsExtra
from .results import QUALIFY_CASES, SUITE_FILE, read_json, write_json


@dataclasses.dataclass
class CaseRecord(KeepsExtra):
    reproducer: str | None = None
    preset: str | None = None
    set: dict[str, str] = dataclasses.field(default_factory=dict)    # --set NAME: VALUE, as strings
    kernel: str | None = None
    rig: str | None = None
    repeat: int = 1                     # which repeat of the same run (1, 2, ...)
    expect: str = "PASS"
    id: str | None = None
    knobs: dict[str, Any] | None = None           # the run's sysctl and cmdline lists (krig/knobs.py); None: none
    started: str | None = None          # None: the case has not run
    verdict: str | None = None          # None: not run yet
    reason: str | None = None
    run_dir: str | None = None          # None: nothing ran (the rig went away before the run, ...)
    ended: str | None = None
    seconds: float | None = None
    ok: bool = False                    # the verdict is the expected one
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    ASKED = ("reproducer", "preset", "set", "kernel", "rig", "repeat", "expect", "id")
    RAN = ("started", "verdict", "reason", "run_dir", "ended", "seconds", "ok")

    def to_json(self) -> dict[str, Any]:
        """The case's object: what it asks, then what it gave once it ran (a case not run: its verdict None)."""
        ran = self.RAN if self.started is not None else ("verdict",)
        knobs = {"knobs": self.knobs} if self.knobs else {}
        return {**{k: getattr(self, k) for k in self.ASKED}, **knobs, **{k: getattr(self, k) for k in ran},
                **self.extra}


@dataclasses.dataclass
class SuiteRecord(KeepsExtra):
    suite: str | None = None            # the suite's name (its file's stem)
    file: str | None = None
    description: str = ""
    krig_revision: str | None = None
    started: str | None = None
    written: str | None = None
    complete: bool = False              # every case finished
    all_as_expected: bool = False
    rigs: list[str] = dataclasses.field(default_factory=list)
    signoff: list[str] = dataclasses.field(default_factory=list)    # one line per rig
    cases: list[CaseRecord] = dataclasses.field(default_factory=list)      # in the suite's order (JSON objects made records)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cases = [c if isinstance(c, CaseRecord) else CaseRecord.from_json(c) for c in self.cases]

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("extra", "cases")}
        return {**out, "cases": [c.to_json() for c in self.cases], **self.extra}


def case_file(qdir: pathlib.Path, cid: str) -> pathlib.Path:
    """A case's record in the qualification directory: its id made a file name."""
    safe = "".join(ch if ch.isalnum() or ch in "-_.@" else "_" for ch in cid)
    return pathlib.Path(qdir) / QUALIFY_CASES / f"{safe}.json"


def read_case(qdir: pathlib.Path, cid: str) -> CaseRecord:
    """The case's record; a missing or unreadable one, or one that is not a JSON object, is one line naming it."""
    path = case_file(qdir, cid)
    data = read_json(path)
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object (not a qualification's case)")
    return CaseRecord.from_json(data)


def write_case(qdir: pathlib.Path, case: CaseRecord) -> None:
    assert case.id is not None, "a case is written under its id"
    write_json(case_file(qdir, case.id), case.to_json())


def read_suite(qdir: pathlib.Path) -> SuiteRecord:
    """The qualification directory's SUITE_FILE; an unreadable one, one that is not a JSON object or
    whose cases are not a list is one line naming it."""
    path = pathlib.Path(qdir) / SUITE_FILE
    data = read_json(path)
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object")
    if not isinstance(data.get("cases", []), list):
        raise UsageError(f"{path}: cases is not a list")
    return SuiteRecord.from_json(data)


def write_suite(qdir: pathlib.Path, suite: SuiteRecord) -> None:
    write_json(pathlib.Path(qdir) / SUITE_FILE, suite.to_json())
