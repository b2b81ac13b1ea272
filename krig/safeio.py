"""Reading and writing files a stranger may have shaped: a run directory, a guest's share, a build tree.

The rule (docs/security.md): what crosses a trust boundary is data, never a path to
follow. Every read here
- walks the path one component at a time below a directory the caller trusts
  (`base`), each directory opened with O_NOFOLLOW|O_DIRECTORY, so no symlink on the
  way (a symlinked `ctl/` or run directory member) is followed;
- opens the file itself with O_NOFOLLOW|O_NONBLOCK and accepts only a regular file
  (fstat after open: a FIFO or a device is refused without blocking or reading);
- reads at most a size cap, refusing a larger file.
Every write creates its temporary file with O_CREAT|O_EXCL|O_NOFOLLOW in the target's
directory (opened the same way) and renames it over the target: a planted symlink is
replaced, never written through.

The path the user typed (a run directory, results/latest) is theirs: given() follows the links
in it, once, where a command opens its argument; only what lies below it is read as above.

A refusal is an UnsafeFile (a UsageError: one line naming the file and what it was).
"""
import contextlib
import errno
import json
import os
import pathlib
import stat
from collections.abc import Iterator
from typing import IO, Any

from .errors import UsageError as UsageError      # re-exported: what a refusal is (callers catch safeio.UsageError)
from .errors import printable_text as printable_text      # re-exported: text a stranger shaped, shown

DEFAULT_CAP = 64 << 20          # run files krig reads whole (manifest, verdict, samples, logs)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


Base = int | str | os.PathLike[str]     # a directory trusted: its path, or an open directory's fd
Rel = str | os.PathLike[str]            # a name below it, read without following a link


class UnsafeFile(UsageError):
    """A file that is not a regular file below its directory (a link, a FIFO, a device) or too large."""


def kind(mode: int) -> str:
    """What a file of this st_mode is, for a message: "a symlink", "a FIFO", ..."""
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _parts(rel: Rel) -> list[str]:
    rel = pathlib.PurePosixPath(rel)
    if rel.is_absolute() or any(p in ("..", "") for p in rel.parts):
        raise UnsafeFile(f"{rel}: not a name below its directory")
    return list(rel.parts) or ["."]


def _path(base: Base, rel: Rel = ".") -> pathlib.Path:
    """base/rel for messages (base may be a directory's file descriptor)."""
    return pathlib.Path(f"(dir fd {base})" if isinstance(base, int) else base) / rel


@contextlib.contextmanager
def open_dir(base: Base, rel: Rel = ".", create: bool = False) -> Iterator[int]:
    """A file descriptor of base/rel, every component below base opened without following a link.
    base is a trusted directory: a path, or a directory's file descriptor (not closed here).
    `create` makes missing directories (mode 0755)."""
    try:
        fd = os.dup(base) if isinstance(base, int) else os.open(pathlib.Path(base), _DIR_FLAGS)
    except OSError as e:
        raise _refusal(_path(base), e) from None
    try:
        for name in ([] if str(rel) in (".", "") else _parts(rel)):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                raise _refusal(_path(base, rel), e, dir_fd=fd, name=name) from None
            os.close(fd)
            fd = nfd
        yield fd
    finally:
        os.close(fd)


def _refusal(path: pathlib.Path, e: OSError, dir_fd: int | None = None, name: str | None = None) -> UsageError:
    if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO) and name is not None:
        try:
            st = os.lstat(name, dir_fd=dir_fd)
            return UnsafeFile(f"{path}: refused: {name} is {kind(st.st_mode)}, not a "
                              f"{'directory' if e.errno == errno.ENOTDIR else 'regular file'}")
        except OSError:
            pass
    if e.errno == errno.ELOOP:
        return UnsafeFile(f"{path}: refused: a symlink")
    if e.errno == errno.ENOENT:
        return MissingFile(f"{path}: missing")
    return UsageError(f"{path}: cannot read: {e.strerror}")


class MissingFile(UsageError):
    """The file is not there (a caller with a default catches this one)."""


def lstat(base: Base, rel: Rel) -> os.stat_result | None:
    """lstat of base/rel without following a link on the way; None when it is missing."""
    rel = name_below(rel)
    try:
        with open_dir(base, rel.parent) as d:
            return os.lstat(rel.name, dir_fd=d)
    except (MissingFile, FileNotFoundError):
        return None


def is_file(base: Base, rel: Rel) -> bool:
    st = lstat(base, rel)
    return st is not None and stat.S_ISREG(st.st_mode)


def read_bytes(base: Base, rel: Rel, cap: int = DEFAULT_CAP) -> bytes:
    """The bytes of base/rel: a regular file, no link followed, at most `cap` bytes."""
    rel = pathlib.PurePosixPath(rel)
    path = _path(base, rel)
    fd = _open_regular(base, rel, cap, "read")
    try:
        chunks, left = [], cap + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > cap:
            raise UnsafeFile(f"{path}: refused: grew past the {cap} bytes read")
        return data
    finally:
        os.close(fd)


def _open_regular(base: Base, rel: pathlib.PurePosixPath, cap: int, what: str) -> int:
    """An fd of the regular file base/rel (blocking mode), no link followed, at most cap bytes."""
    path = _path(base, rel)
    with open_dir(base, rel.parent) as d:
        try:
            fd = os.open(rel.name, _FILE_FLAGS, dir_fd=d)
        except OSError as e:
            raise _refusal(path, e, dir_fd=d, name=rel.name) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path}: refused: {kind(st.st_mode)}, not a regular file")
        if st.st_size > cap:
            raise UnsafeFile(f"{path}: refused: {st.st_size} bytes, more than the {cap} {what}")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(base: Base, rel: Rel, cap: int = DEFAULT_CAP) -> IO[bytes]:
    """A binary file object of the regular file base/rel (no link followed, at most cap bytes),
    for reading a large file in pieces (a trace, an image)."""
    return os.fdopen(_open_regular(base, pathlib.PurePosixPath(rel), cap, "read"), "rb")


def read_text(base: Base, rel: Rel, cap: int = DEFAULT_CAP) -> str:
    return read_bytes(base, rel, cap).decode(errors="replace")


def read_json(base: Base, rel: Rel, cap: int = DEFAULT_CAP) -> Any:
    path = _path(base, rel)
    try:
        return json.loads(read_bytes(base, rel, cap))
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{path}: not valid JSON ({str(e)[:120]})") from None


def given(path: str | os.PathLike[str]) -> pathlib.Path:
    """A directory the user typed, as the command opens it: the links in the path followed
    (results/latest, a link of their own), a trailing slash dropped. What lies below it is still
    read with the functions here, no link followed. A path that is not there is returned as
    typed, so that its error names what was typed."""
    p = pathlib.Path(path)
    try:
        return p.resolve(strict=True)
    except (OSError, RuntimeError):     # missing, a loop of links: the reader says so
        return p


def given_file(path: str | os.PathLike[str]) -> pathlib.Path:
    """A file the user typed below a directory (RUN/trace.dat): the directory as given() opens
    it, the file's own name read without following a link."""
    p = pathlib.Path(path)
    return given(p.parent) / p.name


def split(path: str | os.PathLike[str]) -> tuple[pathlib.Path, str]:
    """(directory, name) of a path given whole: the directory is trusted, the name is read safely."""
    path = pathlib.Path(path)
    return path.parent, path.name


def write_bytes(base: Base, rel: Rel, data: bytes, mode: int = 0o644) -> None:
    """Write base/rel atomically: a new temporary file (O_EXCL|O_NOFOLLOW) renamed over it."""
    rel = pathlib.PurePosixPath(rel)
    with open_dir(base, rel.parent, create=True) as d:
        import secrets  # here: `krig trace stats` reads files and writes none
        tmp = f".{rel.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.rename(tmp, rel.name, src_dir_fd=d, dst_dir_fd=d)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=d)
            raise


def write_text(base: Base, rel: Rel, text: str, mode: int = 0o644) -> None:
    write_bytes(base, rel, text.encode(), mode)


def write_json(base: Base, rel: Rel, data: Any) -> None:
    write_text(base, rel, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def copy_out(base: Base, rel: Rel, dest: str | os.PathLike[str], cap: int = 8 << 30,
             dest_dir_fd: int | None = None) -> None:
    """Copy the regular file base/rel (no link followed, at most `cap` bytes) to a new file dest
    (a name in dest_dir_fd if given), created with O_EXCL|O_NOFOLLOW: dest must not exist."""
    rel = pathlib.PurePosixPath(rel)
    path = _path(base, rel)
    fd = _open_regular(base, rel, cap, "copied")
    try:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                      dir_fd=dest_dir_fd)
        try:
            n = 0
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                n += len(b)
                if n > cap:
                    raise UnsafeFile(f"{path}: refused: grew past the {cap} bytes copied")
                os.write(out, b)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def printable(text: object, limit: int = 160) -> str:
    """Text a stranger shaped (a name in a tarball, a bundle's verdict) as one printable line for a
    terminal: every control character (an escape sequence's ESC, CSI, a newline) as \\xNN."""
    s = printable_text(text).replace("\n", "\\x0a").replace("\t", "\\x09")
    return s if len(s) <= limit else s[:limit] + "..."


def name_below(rel: Rel) -> pathlib.PurePosixPath:
    """rel checked as the name of something below a directory, before anything is looked up:
    relative, no `..` component, not empty (UnsafeFile otherwise)."""
    parts = _parts(rel)
    if parts == ["."]:
        raise UnsafeFile(f"{rel!r}: not a name below its directory")
    return pathlib.PurePosixPath(*parts)
