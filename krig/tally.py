"""The judge's outcomes counted (Tally): what the verdict rule reads (krig/verdict.py judged()) and
verdict.json keeps as "thresholds". A module of its own, importing nothing of krig's at run time:
a command that only decides a verdict (b4-check, the rule's tests) needs no run record."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol


class Outcome(Protocol):
    """One threshold's outcome as the judge records it (krig/record.py ThresholdOutcome), read
    only: a frozen record is one."""
    @property
    def outcome(self) -> str: ...

    @property
    def message(self) -> str: ...

    @property
    def host_sensitive(self) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Tally:
    """The judge's outcomes counted, as the verdict rule reads them (krig/verdict.py judged()) and
    verdict.json keeps them ("thresholds"): how many thresholds held, were crossed (how many of
    those are timing ones), could not be measured, or broke (an instrument check, or the judge
    itself: `errors`), with the sentences of each kind. A timing threshold crossed on a
    contended host is counted as crossed: the rule says what it makes of it."""
    passed: int = 0
    failed: int = 0
    failed_host_sensitive: int = 0
    unmeasured: int = 0
    instrument: int = 0
    instrument_host_sensitive: int = 0
    errors: int = 0
    failures: tuple[str, ...] = ()
    timing_failures: tuple[str, ...] = ()
    not_judged: tuple[str, ...] = ()
    broken: tuple[str, ...] = ()

    @classmethod
    def of(cls, outcomes: Sequence[Outcome]) -> Tally:
        def said(*kinds: str, timing: bool | None = None) -> tuple[str, ...]:
            return tuple(o.message for o in outcomes if o.outcome in kinds
                         and (timing is None or o.host_sensitive == timing))

        def count(*kinds: str, timing: bool | None = None) -> int:
            return len(said(*kinds, timing=timing))
        judge_broke = tuple(o.outcome for o in outcomes
                            if o.outcome not in ("pass", "fail", "unmeasured", "instrument"))
        return cls(passed=count("pass"), failed=count("fail"), failed_host_sensitive=count("fail", timing=True),
                   unmeasured=count("unmeasured"), instrument=count("instrument"),
                   instrument_host_sensitive=count("instrument", timing=True), errors=len(judge_broke),
                   failures=said("fail"), timing_failures=said("fail", timing=True),
                   not_judged=said("unmeasured"),
                   broken=tuple(o.message for o in outcomes if o.outcome not in ("pass", "fail", "unmeasured")))

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
