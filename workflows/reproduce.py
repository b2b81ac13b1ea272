"""`krig reproduce BUNDLE.tar.gz [--kernel KERNEL] [--rig RIG]`: rerun a bundle from its data.

A bundle comes from a stranger: its reproduce.sh would run on this host as whoever
runs it. This path executes nothing from the bundle. It reads two data files out
of the tarball without unpacking it (bundle.json and run-args), checks every
argument against what `krig run` takes (the reproducer a name of krig's own
reproducers/, then only --kernel, --preset and --set), runs krig's own reproducer
of that name through krig's own code, says when the bundled sources differ from
krig's, and prints the new verdict next to the bundled one.

The kernel is --kernel if given, else the bundle's --kernel argument, which must be a
kernel name of krig's own kernels/ (or `distro`, or `bundled`): never a path, a git tree,
a series to fetch, or ,config=/,modules= options. `--kernel bundled` boots the image a
`krig bundle --with-kernel` carries, inside the guest only: every file SHA256SUMS lists
(each digest 64 lower-case hex digits) is copied into a new directory of krig's cache and
checked there, all of them before any is moved into place, in a directory named after
the SHA256SUMS it came with (never after a value the bundle chooses).

Exit: 0 the same verdict, 1 a different one, 2 bad input.
"""
import contextlib
import dataclasses
import gzip
import hashlib
import json
import lzma
import os
import pathlib
import re
import shlex
import shutil
import tarfile
import tempfile
import zlib

from krig import DEFAULT_KERNEL, DEFAULT_RIG, REPRO_DIR, RESULTS_DIR
from krig import safeio
from .argcheck import input_file, kernel_arg, run_args
from krig.asked import AskedRun
from krig.config import parse_set
from krig.knobs import from_args as knobs_from_args
from krig.errors import UsageError
from krig.paths import cache_dir
from krig.reproducer import reproducer_names
from .run import run
from kernels.definition import kernel_names
from rigs import load_rig
from krig.tarbound import BoundedHeader, HeaderRefused

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_NAME_RELEASE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
MAX_MEMBER = 64 << 20      # bundle.json, run-args and sources are small; an image is read in chunks
MAX_KERNEL = 4 << 30       # the bundled kernel's files together (image, config, modules)
MAX_MEMBERS = 50000        # entries of a bundle (a distro kernel's modules are ~6,000 files)
KEEP_BUNDLED = 3           # bundled kernels kept in krig's cache (reproduce/kernel-*), the most recently used
# what a truncated or corrupt compressed tarball raises while it is read
_CORRUPT = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError)


def _members(tar: tarfile.TarFile, bundle: str) -> tuple[str, dict]:
    """{name below the top directory: header} of the bundle's regular files, read header by header
    (tarfile keeps none of them): at most MAX_MEMBERS entries, one top directory."""
    files, tops, n = {}, set(), 0
    try:
        while (m := tar.next()) is not None:
            tar.members.clear()  # type: ignore[attr-defined]   # the headers TarFile keeps (typeshed omits it)
            n += 1
            if n > MAX_MEMBERS:
                raise UsageError(f"{bundle}: more than {MAX_MEMBERS} entries; a krig bundle has far fewer")
            if m.isfile():
                files[m.name] = m
                tops.add(m.name.split("/", 1)[0])
                if len(tops) > 1:
                    break
    except HeaderRefused as e:
        raise UsageError(f"{bundle}: refused: {e}") from None
    if len(tops) != 1:
        raise UsageError(f"{bundle}: not a krig bundle (expected one top directory, found {len(tops)})")
    top = tops.pop()
    return top, {n[len(top) + 1:]: m for n, m in files.items() if "/" in n}


def _read(tar, members, name, bundle) -> bytes:
    m = members.get(name)
    if m is None:
        raise UsageError(f"{bundle}: not a krig bundle (no {name})")
    if m.size > MAX_MEMBER:
        raise UsageError(f"{bundle}: {name} is {m.size} bytes, too large for what it should hold")
    return tar.extractfile(m).read()


def parse_run_args(lines: list, bundle: str) -> AskedRun:
    """run-args -> the asked run (no rig: the user's; kernel None if the bundle names none);
    anything else is refused (one line)."""
    if not lines or not _NAME.fullmatch(lines[0]) or lines[0] not in reproducer_names():
        got = lines[0] if lines else "(empty)"
        raise UsageError(f"{bundle}: run-args: reproducer {got!r} is not one of krig's reproducers")
    return AskedRun.from_args(lines, f"{bundle}: run-args", ("--kernel", "--preset", "--set", "--sysctl", "--cmdline"),
                               kernel=None)


def _sources_differ(tar, members, name: str) -> list:
    """Bundled reproducer files that differ from (or are missing in) krig's reproducers/<name>/."""
    prefix = f"reproducer/{name}/"
    differ = []
    for rel, m in members.items():
        if not rel.startswith(prefix):
            continue
        try:
            mine = safeio.read_bytes(REPRO_DIR / name, rel[len(prefix):], MAX_MEMBER)
        except UsageError:          # missing, or a name that is no file of krig's reproducer
            mine = None
        if mine is None or m.size > MAX_MEMBER or mine != tar.extractfile(m).read():
            differ.append(rel[len(prefix):])
    return sorted(differ)


def _sums(tar, members, bundle: str) -> tuple[bytes, dict]:
    """kernel/SHA256SUMS: its bytes and {name: digest}, every line checked (one line if not)."""
    raw = _read(tar, members, "kernel/SHA256SUMS", bundle)
    sums = {}
    for line in raw.decode(errors="replace").splitlines():
        if not line.strip():
            continue
        digest, _, name = line.partition("  ")
        digest, name = digest.strip(), name.strip()
        if not _DIGEST.fullmatch(digest):
            raise UsageError(f"--kernel bundled: kernel/SHA256SUMS: {digest[:80]!r} is not a sha256 "
                             "(64 lower-case hex digits); bundle refused")
        parts = pathlib.PurePosixPath(name).parts
        if f"kernel/{name}" not in members or not parts or any(ord(c) < 32 for c in name) or ".." in parts or name.startswith("/") or \
                not (name in ("image", "config") or (parts[0] == "modules" and len(parts) > 1)) or name in sums:
            raise UsageError(f"--kernel bundled: kernel/SHA256SUMS names {name[:80]!r}, not a file of the "
                             "bundle's kernel (image, config, modules/...), or twice")
        sums[name] = digest
    if "image" not in sums:
        raise UsageError("--kernel bundled: kernel/SHA256SUMS has no line for the image")
    return raw, sums


def _bundled_kernel(tar, members, bundle: str, meta: dict) -> str:
    """The bundled image (and config, modules) in krig's cache, every file checked against
    SHA256SUMS before any is moved into place; an image kernel argument."""
    if "kernel/image" not in members or "kernel/SHA256SUMS" not in members:
        raise UsageError(f"--kernel bundled: {bundle} carries no kernel image (made without --with-kernel)")
    release = meta["kernel"].get("release") or ""
    if not isinstance(release, str) or not _NAME_RELEASE.fullmatch(release):
        raise UsageError(f"--kernel bundled: bundle.json's kernel release {str(release)[:80]!r} is not a release")
    raw, sums = _sums(tar, members, bundle)
    size = sum(members[f"kernel/{n}"].size for n in sums)
    if size > MAX_KERNEL:
        raise UsageError(f"--kernel bundled: the kernel's files are {size} bytes, more than the {MAX_KERNEL} "
                         "krig unpacks")
    # krig names the directory: the SHA256SUMS (and the release the modules go under) it holds
    key = hashlib.sha256(raw + b"\0" + release.encode()).hexdigest()[:32]
    cache = cache_dir("reproduce")
    dest = cache / f"kernel-{key}"
    moddir = pathlib.PurePosixPath("mod", "lib", "modules", release)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache))
    try:
        for name, digest in sums.items():
            parts = pathlib.PurePosixPath(name).parts
            rel = "bzImage" if name == "image" else "config" if name == "config" else moddir.joinpath(*parts[1:])
            target = tmp / rel
            h = hashlib.sha256()
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(members[f"kernel/{name}"]) as src, open(target, "xb") as f:
                    for chunk in iter(lambda: src.read(1 << 20), b""):
                        h.update(chunk)
                        f.write(chunk)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                raise UsageError(f"--kernel bundled: kernel/{name[:80]} clashes with another file of "
                                 "kernel/SHA256SUMS") from None
            if h.hexdigest() != digest:
                raise UsageError(f"--kernel bundled: kernel/{name[:80]}'s sha256 does not match kernel/SHA256SUMS")
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, dest)
        except OSError:             # unpacked before (the same SHA256SUMS and release): that copy stands
            if not dest.is_dir():
                raise
            os.utime(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(cache, dest)
    arg = str(dest / "bzImage")
    if "config" in sums:
        arg += f",config={dest / 'config'}"
    if (dest / moddir / "modules.builtin").exists():
        arg += f",modules={dest / moddir}"
    return arg


def _prune(cache: pathlib.Path, keep: pathlib.Path) -> None:
    """Bundled kernels do not pile up: the KEEP_BUNDLED most recently used stay (`keep`, the one
    in use, always); older ones are deleted."""
    kernels = sorted((d for d in cache.glob("kernel-*") if d != keep and d.is_dir() and not d.is_symlink()),
                     key=lambda d: d.stat().st_mtime, reverse=True)
    for d in kernels[KEEP_BUNDLED - 1:]:
        shutil.rmtree(d, ignore_errors=True)


def _kernel_arg(given: str | None, bundled: str | None, bundle: str) -> str:
    """The kernel to run: the one given on the command line, else run-args' if it is a kernel name
    of krig's own (a path, a tree, a series or ,config= from a bundle is refused), else distro."""
    if given:
        return given
    if bundled is None:
        return DEFAULT_KERNEL
    names = kernel_names()
    if bundled != "bundled" and bundled not in names:
        raise UsageError(f"{bundle}: run-args: --kernel {bundled[:120]!r} refused: a bundle may name only a kernel "
                         f"of krig's kernels/ ({', '.join(names)}) or bundled, no path, tree, series= or "
                         "config=/modules= (give --kernel yourself to run another)")
    return bundled


@contextlib.contextmanager
def _readable(bundle: str):
    """A truncated or corrupt tarball read midway is one line, not the compressor's traceback."""
    try:
        yield
    except _CORRUPT as e:
        why = " ".join(str(e).split())[:120] or type(e).__name__
        raise UsageError(f"{bundle}: a truncated or corrupt tarball ({why})") from None


def _meta(tar, members, bundle: str) -> dict:
    try:
        meta = json.loads(_read(tar, members, "bundle.json", bundle))
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{bundle}: bundle.json is not JSON ({' '.join(str(e).split())[:120]})") from None
    if not isinstance(meta, dict):
        raise UsageError(f"{bundle}: bundle.json is a JSON {type(meta).__name__}, not an object")
    meta["kernel"] = meta.get("kernel") or {}
    if not isinstance(meta["kernel"], dict):
        raise UsageError(f"{bundle}: bundle.json's kernel is not an object")
    return meta


def reproduce(bundle: str, kernel: str | None = None, rig: str = DEFAULT_RIG, log=print) -> int:
    path = input_file(bundle, "", "bundle written by krig bundle")
    load_rig(rig)                                   # the command line first: a bad --rig before any line
    if kernel not in (None, "bundled"):
        kernel_arg(kernel)
    with _readable(bundle):
        try:
            tar = tarfile.open(path, "r:*", tarinfo=BoundedHeader)
        except tarfile.ReadError:
            raise UsageError(f"{bundle}: not a tarball (gzip, bzip2, xz or plain tar)") from None
        except OSError as e:
            raise UsageError(f"{bundle}: not a readable tarball ({e.strerror or type(e).__name__})") from None
    with tar, _readable(bundle):
        _, members = _members(tar, bundle)
        meta = _meta(tar, members, bundle)
        lines = _read(tar, members, "run-args", bundle).decode(errors="replace").splitlines()
        asked = parse_run_args([ln for ln in lines if ln != ""], bundle)
        kernel = _kernel_arg(kernel, asked.kernel, bundle)
        try:                                        # before a bundled kernel is unpacked
            run_args(asked.reproducer, rig, asked.preset, asked.sets)
        except UsageError as e:
            raise UsageError(f"{bundle}: run-args: {e}") from None
        knobs = knobs_from_args(asked.knobs, f"{bundle}: run-args")
        differ = _sources_differ(tar, members, asked.reproducer)
        if kernel == "bundled":
            kernel = _bundled_kernel(tar, members, bundle, meta)
    asked = dataclasses.replace(asked, rig=rig, kernel=kernel)
    if differ:
        log(f"krig: note: krig's reproducers/{asked.reproducer} differs from the bundled sources "
            f"({', '.join(map(safeio.printable, differ[:5]))}{' ...' if len(differ) > 5 else ''}); krig's own runs")
    log(f"krig: rerunning {asked.reproducer} from {path.name} with krig's own code (nothing from the bundle "
        f"is executed) on rig {rig}, kernel {kernel}")
    log(f"krig: the run: {safeio.printable(shlex.join(asked.argv()), limit=2000)}")
    run_dir, verdict = run(asked.reproducer, rig, kernel, asked.preset, parse_set(list(asked.sets)),
                           results_root=RESULTS_DIR, log=log, knobs=knobs)
    bundled = meta.get("verdict")
    print(safeio.printable_text(f"{verdict.verdict}: {verdict.reason}"))
    print(f"results: {run_dir}")
    print(f"bundled: {safeio.printable(bundled)}")          # the bundle's text, never an escape sequence
    print(f"rerun:   {verdict.verdict} (rig {rig})")
    return 0 if verdict.verdict == bundled else 1


def cmd_reproduce(a) -> int:
    """`krig reproduce BUNDLE`."""
    return reproduce(a.bundle, a.kernel, a.rig)
