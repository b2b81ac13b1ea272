"""What the host takes from a kernel build tree after the tree's own code ran in it.

`make` runs the tree's Makefiles, Kconfig scripts and host programs, and a series from a
mail may be hostile: kernels/sandbox.py keeps that code from the host. But krig then
reads what it left, outside the sandbox: the image, `.config`, `System.map`, the release
`make kernelrelease` printed, the modules `make modules_install` wrote. Each is taken
as data, never as a path to follow (docs/security.md, the build tree after the build;
the files a series touched are put back the same way, kernels/incremental.py restore):

- a file is taken only when it is a regular file reached without following a link
  (krig.safeio): a `.config` left as a symlink to a host key is refused in one line;
- a release names a directory (`lib/modules/<release>`), so it must look like a
  release (RELEASE_RE, no `..`, at most the kernel's 64 characters) before it names anything;
- a modules directory keeps only regular files and directories: every symlink (the
  `build` and `source` links modules_install makes, or one the build planted), FIFO,
  socket or device in it is removed without being followed, and noted in the build log. What
  reads it later (the initramfs builder, `tar -h` to a lab server) then finds only the
  kernel's own files.
"""
import contextlib
import os
import pathlib
import re
import stat

from krig import safeio
from krig.errors import KrigError
from .kconfig import parse_dotconfig

RELEASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
RELEASE_MAX = 64            # the kernel's own limit (__NEW_UTS_LEN)
CONFIG_CAP = 16 << 20
EXPECTED_LINKS = ("build", "source")     # what modules_install links into lib/modules/<release>/


def check_release(release: str, what: str, error=KrigError) -> str:
    """release as printed by a tree (or found in an image), refused in one line unless it
    is a plain release name: it names lib/modules/<release>."""
    if not RELEASE_RE.fullmatch(release) or ".." in release or len(release) > RELEASE_MAX:
        raise error(f"{what}: release {release[:100]!r} refused: not a kernel release "
                    f"([A-Za-z0-9][A-Za-z0-9._+-]*, no '..', at most {RELEASE_MAX} characters), "
                    "and it would name a directory")
    return release


@contextlib.contextmanager
def _refused():
    try:
        yield
    except safeio.UnsafeFile as e:
        raise KrigError(f"{e} (left so in the build tree; nothing is taken from it)") from None


def copy(tree: pathlib.Path, rel: str, dest: pathlib.Path) -> None:
    """tree/rel copied to the new file dest: a regular file, no link followed on the way."""
    with _refused():
        safeio.copy_out(tree, rel, dest)


def dotconfig(tree: pathlib.Path) -> dict:
    """The tree's .config as {option: value}, read as a regular file (no link followed)."""
    with _refused():
        return parse_dotconfig(safeio.read_text(tree, ".config", CONFIG_CAP))


def keep_plain(root: pathlib.Path, logf=None) -> list:
    """Remove everything below root that is neither a regular file nor a directory, without
    following a link; returns the removed names (relative to root). Each but the expected
    `build`/`source` links of lib/modules/<release>/ is noted in logf."""
    removed = []
    for top, dirs, files, dfd in os.fwalk(root, follow_symlinks=False):
        for name in list(dirs) + files:
            st = os.lstat(name, dir_fd=dfd)
            if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
                continue
            os.unlink(name, dir_fd=dfd)
            if name in dirs:
                dirs.remove(name)
            rel = os.path.relpath(os.path.join(top, name), root)
            removed.append(rel)
            expected = name in EXPECTED_LINKS and rel.count("/") == 3 and stat.S_ISLNK(st.st_mode)
            if logf is not None and not expected:
                with open(logf, "a") as f:
                    f.write(f"krig: removed {rel!r} from {root}: {safeio.kind(st.st_mode)}; only regular "
                            "files and directories are kept\n")
    return removed
