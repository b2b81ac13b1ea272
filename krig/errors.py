"""Errors that krig reports as one clear line instead of a traceback."""


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
