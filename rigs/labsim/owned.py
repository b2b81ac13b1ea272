"""The files `krig lab sim up` writes where the user keeps their own (the rig file, the BMC
password), and only those, removed by `down`.

`write_new` makes a file that was not there: a temporary file (O_CREAT|O_EXCL|O_NOFOLLOW)
linked to the name, which fails when anything (a file, a link) is there already: a rig
file or a secret of the user's is never written over, not even one that appeared after
`up` looked. It returns the file's record (device, inode, SHA-256 of what was written),
which the server's state keeps. `remove` unlinks a file only while it is that record's:
the same inode, a regular file, the same bytes; a file the user put there or edited
since is left as it is. `in_the_way` is `up`'s check before it starts anything.
"""
import contextlib
import hashlib
import os
import pathlib
import secrets
import stat

from krig.errors import KrigError, UsageError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CAP = 1 << 20               # a rig file or a password: far smaller


def header(name: str) -> str:
    """The first line of a rig file `up` writes (for a reader: the record is what counts)."""
    return (f"# written by `krig lab sim up {name}`; `krig lab sim down {name}` removes it "
            "(edited, it is kept)\n")


def write_new(path: pathlib.Path, data: bytes, mode: int = 0o644) -> dict:
    """Create `path` (it must not exist, a link there counts) with `data`; its record."""
    path = pathlib.Path(path)
    d = os.open(path.parent, _DIR)
    try:
        tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.link(tmp, path.name, src_dir_fd=d, dst_dir_fd=d, follow_symlinks=False)
        except FileExistsError:
            raise KrigError(f"{path}: refused: a file krig lab sim did not write is there; "
                            "it is left as it is") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=d)
        st = os.stat(path.name, dir_fd=d, follow_symlinks=False)
    finally:
        os.close(d)
    return {"path": str(path), "dev": st.st_dev, "ino": st.st_ino, "sha256": hashlib.sha256(data).hexdigest()}


def record_of(path: pathlib.Path) -> dict | None:
    """The record of the regular file at `path` as it is now (a file krig just wrote another
    way), None when there is none."""
    data, st = _read(pathlib.Path(path))
    if st is None:
        return None
    return {"path": str(path), "dev": st.st_dev, "ino": st.st_ino, "sha256": hashlib.sha256(data).hexdigest()}


def _read(path: pathlib.Path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b"", None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > CAP:
            return b"", None
        return os.read(fd, CAP + 1), st
    finally:
        os.close(fd)


def is_ours(rec: dict | None) -> bool:
    """The file at rec's path is still the one rec records."""
    if not rec or not rec.get("path"):
        return False
    data, st = _read(pathlib.Path(rec["path"]))
    return (st is not None and (st.st_dev, st.st_ino) == (rec.get("dev"), rec.get("ino"))
            and hashlib.sha256(data).hexdigest() == rec.get("sha256"))


def remove(records) -> list[str]:
    """Unlink each recorded file that is still the record's; the paths left alone."""
    kept = []
    for rec in records or ():
        if is_ours(rec):
            pathlib.Path(rec["path"]).unlink(missing_ok=True)
        elif rec and rec.get("path") and os.path.lexists(rec["path"]):
            kept.append(rec["path"])
    return kept


def in_the_way(name: str, paths, records) -> None:
    """`up NAME`'s check: a file at one of `paths` that no record of the server's state is of
    (the user's own rig file or secret) is one line naming it, exit 2."""
    ours = {r.get("path") for r in records or () if is_ours(r)}
    for p in paths:
        if os.path.lexists(p) and str(p) not in ours:
            raise UsageError(f"NAME: {p} is there and krig lab sim did not write it; lab sim {name} "
                             "neither writes over nor removes it: choose another NAME or move the file")
