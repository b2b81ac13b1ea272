"""Errors that krig reports as one clear line instead of a traceback."""
import errno
import importlib
import signal
import sys
import traceback
import types
from collections.abc import Callable
from typing import cast


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
    """The machine under test went away: the kernel panicked, or the guest died.

    rig_fault is one line when the rig saw its own side fail as the machine
    went away (QEMU exited with an error status and said why in qemu.log, ...);
    krig.verdict.decide rules from it and the console who is to blame."""

    def __init__(self, message: str, rig_fault: str | None = None):
        super().__init__(message)
        self.rig_fault = rig_fault


def os_fault(e: OSError) -> str:
    """An OSError as one line: what failed, errno name and path."""
    name = errno.errorcode.get(e.errno or 0, "")
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or e}{f' [{name}]' if name else ''}{where}"


def printable_text(text: object) -> str:
    """Text a stranger shaped that may run over lines (a server's stderr, a console line, a
    reason holding them) for a terminal, a mail or a report: newlines and tabs kept, every other
    control character (ESC, CSI, a carriage return, DEL) as \\xNN, so no escape sequence reaches
    the reader's terminal."""
    return "".join(c if c.isprintable() or c in "\n\t" else f"\\x{ord(c) & 0xff:02x}" for c in str(text))


def _sigterm(signum: int, frame: types.FrameType | None) -> None:
    raise KeyboardInterrupt


def guarded(fn: Callable[[], int], error_code: int | None = None) -> int:
    """Run a command-line entry point: SIGTERM acts as Ctrl-C (exit 130), a
    KrigError is one line on stderr and its exit code (or error_code).

    SIGINT is set back to Python's handler: a shell starts background jobs with
    SIGINT ignored, and a `kill -INT` must still end the run cleanly (INTERRUPTED,
    results kept, no QEMU left) instead of being ignored."""
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return fn()
    except KrigError as e:
        print(f"krig: error: {printable_text(e)}", file=sys.stderr)
        return e.exit_code if error_code is None else error_code
    except OSError as e:            # the host (a full or read-only disk, ...): ERROR's code, never FAIL's
        print(f"krig: error: {os_fault(e)}", file=sys.stderr)
        return KrigError.exit_code if error_code is None else error_code
    except KeyboardInterrupt:
        print("krig: interrupted", file=sys.stderr)
        return 130
    except Exception:               # a bug in krig: say so, and never end with FAIL's code (1)
        traceback.print_exc()
        print("krig: internal error (a bug in krig; the traceback above says where)", file=sys.stderr)
        return KrigError.exit_code if error_code is None else error_code


def handler(name: str) -> Callable[..., int]:
    """The function a parser names as "package.module:function", imported now.

    Parsers name each subcommand's handler this way (set_defaults(handler=...)), so that
    building `krig`'s parser imports no workflow: `krig b4-check` loads b4check and what it
    imports, not the runner, the build or the plotting library."""
    module, _, func = name.partition(":")
    return cast("Callable[..., int]", getattr(importlib.import_module(module), func))
