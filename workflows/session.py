"""The machine of one workflow across its runs (a group, a validation's two sides).

A single `krig run` takes a fresh object of its plan's rig (workflows/plan.py), boots it, runs,
pulls the results and powers it off. A workflow of several runs holds a Session, passed down
beside its plans: after each run, the run offers its rig to the session (Rig.keep_for_next)
with why the next boot must be cold, if it must; a rig that can skip work between runs (a lab
server: no firmware before a kexec, rigs/ipmi/warm.py) stays up and held, and the next run of
a plan of the same rig (the same loaded rig: a validation's two sides share it) takes it from
the session instead of a fresh one. When the workflow ends the session powers the kept machine
off as a run does (an orderly shutdown); on an error or Ctrl-C it is powered off hard. Nothing
it powered on is left running. The power-off is recorded in the manifest of the run the machine
ran last, as a single run records its own: the rig's facts then (how it shut down), and a
power-off that failed (judged again: a warning in its verdict).
"""
import pathlib
import sys

from krig import progress
from krig.errors import KrigError
from krig.record import Manifest
from rigs.protocol import Rig
from .check import check


def cold_reason(outcome: str, reason: str, pull_error: str | None) -> str | None:
    """Why the next boot must go through the firmware after a run that ended so; None after a
    healthy one (completed: PASS or FAIL, or a reproducer's own skip)."""
    if outcome not in ("completed", "skip"):
        what = {"hung": "a hang", "crashed": "a crash"}.get(outcome, "an error")
        return f"{what} ({reason})"
    return f"a failed pull ({pull_error})" if pull_error else None


def power_down(rig: Rig, orderly: bool) -> str | None:
    """Power the machine off (orderly: a shutdown, else hard): None, or why it failed."""
    try:
        with progress.waiting(f"{rig.name} to power off"):
            rig.shutdown() if orderly else rig.power.off()
    except KrigError as e:
        return str(e)
    return None


class Session:
    def __init__(self, log=print) -> None:
        self.log = log
        self.rig: Rig | None = None        # the machine kept up after the last run
        self.made_from: Rig | None = None  # the plan's rig (as loaded) it is a fresh() object of
        self.last: tuple[pathlib.Path, Manifest] | None = None   # the run it ran last: where, its record

    def take(self, loaded: Rig) -> Rig:
        """The rig of the next run of a plan whose rig is `loaded`: the one kept from the previous
        run, or a fresh one."""
        if self.rig is not None and self.made_from is loaded:
            return self.rig         # still the session's until the run ends: a run that stops early leaves it here
        self.close()
        self.rig, self.made_from = loaded.fresh(), loaded
        return self.rig

    def keep(self, rig: Rig, outcome: str, reason: str, run: tuple[pathlib.Path, Manifest]) -> bool:
        """After a run (run: its directory and manifest): True when the rig stays up for the next
        run (the run must not close it). Never while a Ctrl-C (or SIGTERM) ends the run: the run
        powers the machine off then."""
        interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt)
        kept = not interrupted and rig.keep_for_next(cold_reason(outcome, reason, run[1].pull_error))
        self.rig, self.last = (rig, run) if kept else (None, None)
        return kept

    def close(self, orderly: bool = True):
        """Power the kept machine off (orderly: a shutdown, else hard) and let it go."""
        rig, self.rig, last, self.last = self.rig, None, self.last, None
        if rig is None:
            return
        try:
            failed = power_down(rig, orderly)
            facts = rig.facts()
            how = facts.get("shutdown")
            self.log(f"krig: {rig.name}: " + (f"powering off after the last run: {failed}" if failed else
                                                "powered off after the last run" + (f" ({how})" if how else "")))
            if last is not None:
                self._record(last, facts, failed)
        finally:
            rig.close()

    def _record(self, last: tuple[pathlib.Path, Manifest], facts: dict, failed: str | None):
        """The power-off in the last run's manifest; a failed one judged again (its verdict warns).
        A disk that refuses it costs nothing but this record: one line."""
        run_dir, manifest = last
        manifest.rig_facts, manifest.power_off_error = dict(facts), failed
        try:
            manifest.write(run_dir)
            if failed:
                check(run_dir)
        except (KrigError, OSError) as e:
            self.log(f"krig: {run_dir}: the power-off after the run is not recorded: {e}")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        self.close(orderly=exc_type is None)
