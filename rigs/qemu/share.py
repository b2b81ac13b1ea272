"""The guest's writable 9p share, as the host sees it: never a link, a FIFO or a device.

The kernel under test runs as root in the guest and writes this share. With 9p's
`security_model=none` a symlink, FIFO or device node the guest makes is a real one on
the host, and the host would follow or block on it. So the share uses a *mapped*
model: the guest's files are created on the host as regular files and directories,
with the guest's idea of owner, mode and file type kept aside (`mapped-xattr`: in
`user.virtfs.*` extended attributes; `mapped-file` where the work directory's
filesystem has no user xattrs: in `.virtfs_metadata/` files). A guest "symlink" is a
regular file holding its target's name, a guest FIFO an empty regular file.

The pull (QEMU _Files.pull) walks the share without following links (krig/safeio.py),
moves regular files and directories into the run directory, and refuses, by name,
what the guest made as a link, FIFO, device or socket, what is not a regular file or
directory on the host, and what would take the name of a file krig writes itself.
What was refused is one line; everything else is still collected.
"""
import contextlib
import errno
import os
import pathlib
import stat

from krig import safeio
from krig.rundir import KRIG_FILES

XATTR_MODE = "user.virtfs.mode"
METADATA_DIR = ".virtfs_metadata"       # mapped-file's per-directory metadata
PULL_CAP = 64 << 30                     # one file copied across filesystems (a trace may be GBs)


def security_model(work_dir) -> str:
    """`mapped-xattr` where the work directory's filesystem keeps user xattrs, else `mapped-file`."""
    probe = pathlib.Path(work_dir) / f".krig-xattr-probe.{os.getpid()}"
    try:
        probe.touch()
        os.setxattr(probe, "user.krig.probe", b"1")
        return "mapped-xattr"
    except OSError:
        return "mapped-file"
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def _guest_mode(dir_fd: int, name: str) -> int | None:
    """The file type and mode the guest gave name (None: the host made it, or nothing recorded)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        fd = None
    if fd is not None:
        try:
            raw = os.getxattr(fd, XATTR_MODE)
            return int.from_bytes(raw[:4], "little")
        except OSError:
            pass
        finally:
            os.close(fd)
    try:    # mapped-file: .virtfs_metadata/<name> holds "virtfs.mode=NNN" lines
        text = safeio.read_text(dir_fd, f"{METADATA_DIR}/{name}", cap=4096)
    except safeio.UsageError:
        return None
    for line in text.splitlines():
        key, _, val = line.partition("=")
        if key.strip() == "virtfs.mode" and val.strip().isdigit():
            return int(val.strip())
    return None


def _kind(mode: int) -> str | None:
    """What a guest mode is, when it is not a regular file or directory."""
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None


def pull_tree(src, dest, label: str = "out") -> list:
    """Move the files below src into dest (both directories krig made), refusing what the guest
    made as anything but a regular file or directory. Returns the refusals, one string each."""
    refused: list[str] = []
    with safeio.open_dir(src) as sfd, safeio.open_dir(dest) as dfd:
        _pull_dir(sfd, dfd, label, refused, top=True)
    return refused


def _pull_dir(sfd: int, dfd: int, label: str, refused: list, top: bool = False) -> None:
    for name in sorted(os.listdir(sfd)):
        if name == METADATA_DIR:
            continue
        where = f"{label}/{name}"
        st = os.lstat(name, dir_fd=sfd)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            refused.append(f"{where} is {safeio.kind(st.st_mode)} on the host")
            continue
        gmode = _guest_mode(sfd, name)
        gkind = _kind(gmode) if gmode is not None else None
        if gkind:
            target = ""
            if gkind == "a symlink":
                with contextlib.suppress(safeio.UsageError):
                    target = " -> " + safeio.read_text(sfd, name, cap=4096)[:200]
            refused.append(f"{where} is {gkind} the guest made{target}")
            continue
        if stat.S_ISDIR(st.st_mode):
            if top and name in KRIG_FILES:
                refused.append(f"{where} takes the name of krig's own {name}")
                continue
            try:
                os.mkdir(name, 0o755, dir_fd=dfd)
            except FileExistsError:
                pass
            try:
                with safeio.open_dir(sfd, name) as s2, safeio.open_dir(dfd, name) as d2:
                    _pull_dir(s2, d2, where, refused)
            except safeio.UsageError as e:
                refused.append(f"{where}: {e}")
            continue
        if (top and name in KRIG_FILES) or safeio.lstat(dfd, name) is not None:
            refused.append(f"{where} takes the name of krig's own {name}")
            continue
        _move(sfd, dfd, name)


def _move(sfd: int, dfd: int, name: str) -> None:
    try:
        os.rename(name, name, src_dir_fd=sfd, dst_dir_fd=dfd)      # rename never follows a link
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        try:
            os.fchmod(fd, 0o644)
            if os.geteuid() == 0:   # written by QEMU's unprivileged user (rigs/qemu/confine.py): krig's now
                os.fchown(fd, 0, os.getegid())
        finally:
            os.close(fd)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        safeio.copy_out(sfd, name, name, cap=PULL_CAP, dest_dir_fd=dfd)
        os.unlink(name, dir_fd=sfd)
