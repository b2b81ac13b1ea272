"""What krig is waiting for, said at least every INTERVAL seconds while it waits.

A long wait (a server's power, its firmware's POST and boot until SSH answers, a kexec, a
guest's boot, the workload, the pull of the results) is a `with waiting(WHAT, LIMIT):`
block. While the outermost one lasts, a thread says one line every interval:

    krig: waiting for kernel tiny-6.1 to boot on lab1, 60 s so far (at most 15 min): the server to
    answer SSH after power on, 30 s so far (at most 15 min)

the waits inside it (a step of a boot) named after the outer one, innermost last. A wait's
"at most" is never less than what the steps inside it may take: the limit it was given (a
boot's: the sum of its steps' limits, rigs/ipmi/kexec.py boot_bound), or, when a step began so
late that its own limit reaches past that, the time until the step's limit; a wait that goes on
past its bound (the last try of a step that began just before its limit) says so. Lines go
to standard output unless krig runs quiet (`krig -q`, or KRIG_QUIET=1 in the environment,
which the worker processes of qualify and bisect inherit), and always to the logs
registered with run_log() (a run's krig.log, workflows/run.py). KRIG_PROGRESS_INTERVAL sets
the interval in seconds (0.01-30; default 30).
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from krig.safeio import printable_text

INTERVAL = 30.0
INTERVAL_MIN = 0.01
QUIET_ENV = "KRIG_QUIET"
INTERVAL_ENV = "KRIG_PROGRESS_INTERVAL"

_lock = threading.Lock()
_stack: list[waiting] = []        # the waits under way, outermost first
_logs: list[IO[str]] = []                    # text files every line is appended to


def quiet() -> bool:
    return os.environ.get(QUIET_ENV, "") not in ("", "0")


def interval() -> float:
    """KRIG_PROGRESS_INTERVAL in seconds, within INTERVAL_MIN-INTERVAL (else INTERVAL)."""
    try:
        v = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return INTERVAL
    return v if INTERVAL_MIN <= v <= INTERVAL else INTERVAL


def say(line: str) -> None:
    """One progress line: to the terminal unless quiet, and to every registered log."""
    line = printable_text(line)        # a server's or a console's words in it: no escape sequence
    with _lock:
        logs = list(_logs)
    if not quiet():
        print(line, flush=True)
    for f in logs:
        try:
            f.write(line + "\n")
            f.flush()
        except (OSError, ValueError):       # a full disk or a closed log never stops the wait
            pass


@contextlib.contextmanager
def run_log(f: IO[str]) -> Iterator[IO[str]]:
    """Every progress line also goes to the open text file f while the block lasts."""
    with _lock:
        _logs.append(f)
    try:
        yield f
    finally:
        with _lock:
            _logs.remove(f)


def _secs(s: float) -> str:
    return f"{s:.0f} s" if s < 600 else f"{s / 60:.0f} min"


class waiting:
    """`with waiting("kernel X to boot on lab1", 900):` says what is waited for, every interval.

    limit: the most the wait may take (said as "at most"), or None; every: the interval (default
    interval()); clock: the monotonic clock; out: where lines go (default say)."""

    def __init__(self, what: str | Callable[[], str], limit: float | None = None, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic, out: Callable[[str], None] | None = None):
        """what: the text, or a function giving it as each line is said (a build's last step)."""
        self.what, self.limit, self.clock = what, limit, clock
        self.floor = 0.0        # the most a step inside may take, counted from this wait's start
        self.every = interval() if every is None else every
        self.out = out or say
        self.t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def bound(self) -> float | None:
        """The most this wait may take: its limit, or more when a step inside it may take longer."""
        return max(self.limit, self.floor) if self.limit else None

    def part(self) -> str:
        """This wait as a line names it: what, for how long so far, and the bound."""
        bound, spent = self.bound(), self.clock() - self.t0
        limit = "" if not bound else f" (at most {_secs(bound)})" if spent <= bound else \
            f" (past its limit of {_secs(bound)})"         # a step's last try may end after its limit
        what = self.what() if callable(self.what) else self.what
        return f"{what}, {_secs(spent)} so far{limit}"

    def __enter__(self) -> waiting:
        self.t0 = self.clock()
        with _lock:
            outermost = not _stack
            if self.limit:
                for outer in _stack:        # each wait this step is inside may take as long as it
                    outer.floor = max(outer.floor, self.t0 - outer.t0 + self.limit)
            _stack.append(self)
        if outermost:           # the outermost wait speaks for every wait inside it
            self._thread = threading.Thread(target=self._loop, name="krig-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        with _lock:
            if self in _stack:
                _stack.remove(self)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.out(self.line())

    def line(self) -> str:
        """The line said now: this wait, then each wait under way inside it."""
        with _lock:
            stack = list(_stack)
        parts = [w.part() for w in stack[stack.index(self):]] if self in stack else [self.part()]
        return "krig: waiting for " + ": ".join(parts)
