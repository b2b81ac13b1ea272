"""Errors that krig reports as one clear line instead of a traceback."""
import signal
import sys


class KrigError(Exception):
    """A problem krig can explain in one line. exit_code tells the CLI how to end."""

    exit_code = 3


class UsageError(KrigError):
    """Bad input: an unknown name, a malformed file, a value of the wrong type."""

    exit_code = 2


class RigError(KrigError):
    """The rig itself broke (could not boot, BMC unreachable, ...)."""

    exit_code = 3


class GuestHung(KrigError):
    """The machine under test stopped making progress."""


class GuestCrashed(KrigError):
    """The kernel under test panicked or the guest died unexpectedly."""


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def guarded(fn, error_code: int | None = None) -> int:
    """Run a command-line entry point: SIGTERM acts as Ctrl-C (exit 130), a
    KrigError is one line on stderr and its exit code (or error_code)."""
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        return fn()
    except KrigError as e:
        print(f"krig: error: {e}", file=sys.stderr)
        return e.exit_code if error_code is None else error_code
    except KeyboardInterrupt:
        print("krig: interrupted", file=sys.stderr)
        return 130
