"""What the user typed, checked before any work starts (nothing unpacked, built, booted or
written yet): paths to read and to write, numbers in ASCII digits. Each refusal is one
UsageError line naming the option and what is allowed (exit 2)."""
import argparse
import os
import pathlib

from krig.errors import UsageError


def _nearest(p: pathlib.Path) -> pathlib.Path:
    """p, or its nearest ancestor that exists."""
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _where(option: str, path) -> str:
    return f"{option} {path}" if option else str(path)


def _writable_dir(d: pathlib.Path, option: str, path) -> None:
    if not d.is_dir():
        raise UsageError(f"{option} {path}: {d} is not a directory")
    if not os.access(d, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: cannot write in {d} (permission denied)")


def output_file(path, option: str) -> pathlib.Path:
    """A file krig will write (replacing it): its directory exists and is writable, and it is not
    itself a directory."""
    p = pathlib.Path(path).expanduser()
    if not str(path):
        raise UsageError(f"{option}: empty; give a file to write")
    if p.is_dir():
        raise UsageError(f"{option} {path}: a directory; give a file name (e.g. {p / 'out'})")
    if not p.parent.exists():
        there = _nearest(p.parent)
        if there.is_dir():
            raise UsageError(f"{option} {path}: the directory {p.parent} does not exist; "
                             "krig makes the file, not its directory")
        raise UsageError(f"{option} {path}: {there} is not a directory")
    _writable_dir(p.parent, option, path)
    if p.exists() and not os.access(p, os.W_OK):
        raise UsageError(f"{option} {path}: not writable (permission denied)")
    return p


def output_dir(path, option: str) -> pathlib.Path:
    """A directory krig will make (with its parents) or add to: it is a directory if it exists,
    and the nearest existing one on its way is a writable directory."""
    p = pathlib.Path(path).expanduser()
    if not str(path):
        raise UsageError(f"{option}: empty; give a directory")
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {path}: not a directory (a file is there); give a directory")
    _writable_dir(_nearest(p), option, path)
    return p


def input_file(path, option: str, what: str = "file") -> pathlib.Path:
    """A file krig will read: it exists, is a file (not a directory) and is readable."""
    p, where = pathlib.Path(path).expanduser(), _where(option, path)
    if not str(path):
        raise UsageError(f"{option or what}: empty; give a {what}")
    if not p.exists():
        raise UsageError(f"{where}: no such file (a {what})")
    if p.is_dir():
        raise UsageError(f"{where}: a directory, not a {what}")
    if not os.access(p, os.R_OK):
        raise UsageError(f"{where}: not readable (permission denied)")
    return p


def ascii_int(text: str) -> int:
    """argparse type: an integer in ASCII digits (int() would read '８' as 8)."""
    if not text.isascii() or not text.strip().lstrip("+-").isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number in ASCII digits 0-9, got {text!r}")
    return int(text)


def ascii_float(text: str) -> float:
    """argparse type: a number in ASCII digits (whether it may be nan or inf is the option's to say)."""
    try:
        if text.isascii():
            return float(text)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected a number in ASCII digits 0-9, got {text!r}")


def run_args(reproducer: str, rig: str, preset=None, sets=(), kernel: str | None = None) -> dict:
    """The arguments of a run (`krig run`'s, a bundle's, each bisection step's) checked as `krig run`
    checks them, without building, unpacking or booting anything: the reproducer, its preset and
    --set values, the rig, and the form of --kernel (a name krig has, or a path/TREE@REF that is
    there). Returns the parameters the run will have."""
    from krig.config import parse_set
    from krig.reproducer import load_reproducer
    from rigs import load_rig
    repro = load_reproducer(reproducer)
    params = repro.resolve_params(preset, parse_set(list(sets)),
                                  cpus=load_rig(rig).host_needs().get("cpus"))
    if kernel is not None:
        kernel_arg(kernel)
    return params


def kernel_arg(text: str) -> None:
    """--kernel's form: a kernel name of kernels/, or a path, TREE@REF, ... that kernels/given.py
    reads (its files there); nothing is built."""
    from kernels.definition import kernel_names
    from kernels.given import is_given, parse
    if is_given(text):
        g = parse(text)
        if "drivers" in g.opts:         # the server it names, or its files: there (nothing read yet)
            from .serverdrivers import check_named
            check_named(g.opts["drivers"], f"--kernel {text}: ")
    elif text not in kernel_names():
        raise UsageError(f"--kernel {text!r}: unknown kernel; allowed: {', '.join(kernel_names()) or '(none)'}")


def like_kernel(name: str, option: str = "--like") -> None:
    """A kernel whose config and fragments a generated kernel takes (bisect --like): one krig builds."""
    from kernels.build import buildable_kernels
    from kernels.spec import resolve_spec
    allowed = buildable_kernels()
    if name not in allowed:
        raise UsageError(f"{option} {name!r}: not a kernel krig builds from kernels/; allowed: {', '.join(allowed)}")
    try:
        resolve_spec(name)
    except UsageError as e:
        raise UsageError(f"{option} {name}: {e}") from None


def add_knobs(p, prefix: str = "", side: str = "") -> None:
    """--sysctl NAME=VALUE and --cmdline ARG (repeatable; krig/knobs.py), with --PREFIX-... for one side."""
    if prefix:
        p.add_argument(f"--{prefix}sysctl", action="append", metavar="NAME=VALUE",
                       help=f"like --sysctl,{side} (repeatable; default none)")
        p.add_argument(f"--{prefix}cmdline", action="append", metavar="ARG",
                       help=f"like --cmdline,{side} (repeatable; default none)")
        return
    p.add_argument(f"--{prefix}sysctl", action="append", metavar="NAME=VALUE",
                   help=f"write this sysctl (/proc/sys/NAME, dots as slashes) on the booted machine{side} before the "
                   "workload, and read it back; unknown, read-only or refused: ERROR before the workload "
                   "(repeatable; default none)")
    p.add_argument(f"--{prefix}cmdline", action="append", metavar="ARG",
                   help=f"add this boot parameter to the kernel's command line{side} (a guest's, or the kexec'd "
                   "kernel's on a lab server; console=, init=, root=, netconsole= and krig's own are refused; "
                   "repeatable; default none)")
