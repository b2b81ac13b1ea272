"""Bisection on a metric (`make bisect ... METRIC=<name> REPEAT=n`): the decisions.

First GOOD and BAD are each measured REPEAT times. If the two ranges of values
overlap, no bisection can tell the endpoints apart and it is refused with one
line. Otherwise the gap between them is cut in thirds:

    GOOD's values ... | good edge | undecidable | bad edge | ... BAD's values
                      gap/3 from GOOD's extreme   gap/3 from BAD's extreme

A step's value on GOOD's side of the good edge sits with GOOD (a "good"
vote), on BAD's side of the bad edge with BAD ("bad"), in the middle third it
is undecidable ("skip"). A run without a value, or not judged (only PASS and
FAIL runs have trustworthy numbers: an ERROR may be a broken instrument), is
a skip vote. The step's answer is the strict majority of the REPEAT votes
(workflows.bisect.decide), else skip. Which side is lower comes from the data,
not from the metric's declared direction.
"""
import dataclasses

from krig.errors import UsageError
from krig.record_bisect import ZonesRecord
from krig.verdict import JUDGED



@dataclasses.dataclass
class Zones:
    metric: str
    good: list
    bad: list
    good_low: bool          # GOOD's values are the lower ones
    good_edge: float
    bad_edge: float

    def vote(self, value) -> str:
        if value is None:
            return "skip"
        if self.good_low:
            return "good" if value <= self.good_edge else "bad" if value >= self.bad_edge else "skip"
        return "good" if value >= self.good_edge else "bad" if value <= self.bad_edge else "skip"

    def describe(self) -> str:
        lo, hi = ("good", "bad") if self.good_low else ("bad", "good")
        edges = sorted([self.good_edge, self.bad_edge])
        return (f"{self.metric}: GOOD {_vals(self.good)}, BAD {_vals(self.bad)}; "
                f"{lo} <= {edges[0]:g} < undecidable < {edges[1]:g} <= {hi}")


def _vals(vs) -> str:
    return "/".join(f"{v:g}" for v in vs) if vs else "-"


def zones(metric: str, good: list, bad: list) -> Zones:
    """The zones from the endpoints' values; UsageError (one line) when they cannot be told apart."""
    g = [v for v in good if v is not None]
    b = [v for v in bad if v is not None]
    if not g or not b:
        side = "GOOD" if not g else "BAD"
        raise UsageError(f"--metric {metric}: {side} gave no judged value of {metric} "
                         f"(GOOD {_vals(g)}, BAD {_vals(b)}); nothing to bisect on")
    if max(g) < min(b):
        gap = min(b) - max(g)
        return Zones(metric, g, b, True, max(g) + gap / 3, min(b) - gap / 3)
    if max(b) < min(g):
        gap = min(g) - max(b)
        return Zones(metric, g, b, False, min(g) - gap / 3, max(b) + gap / 3)
    raise UsageError(f"--metric {metric}: GOOD ({min(g):g} to {max(g):g}) and BAD ({min(b):g} to {max(b):g}) "
                     f"overlap: no bisection can tell them apart (try a larger --repeat or another --metric)")


def attempt_vote(z: Zones, verdict: str, value) -> str:
    """One run of a step -> good / bad / skip."""
    if verdict not in JUDGED:
        return "skip"
    return z.vote(value)


def to_state(z: Zones) -> ZonesRecord:
    """The zones as the bisection's state keeps them (krig/record_bisect.py), for every step's oracle."""
    return ZonesRecord(z.metric, list(z.good), list(z.bad), z.good_low, z.good_edge, z.bad_edge)


def from_state(r: ZonesRecord) -> Zones:
    assert r.metric is not None and r.good_edge is not None and r.bad_edge is not None, "to_state wrote them"
    return Zones(r.metric, list(r.good), list(r.bad), r.good_low, r.good_edge, r.bad_edge)
