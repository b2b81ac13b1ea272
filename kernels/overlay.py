"""A throwaway layer over a build tree: where a series from outside krig's tree is built.

A build tree is shared by every kernel of one source and config family (kernels/incremental.py),
and `make` runs the tree's own code: a series' Makefile line can append to any source or
object, and undoing the files its patches name does not undo that. So a series from outside
never builds in the tree itself. It builds in an overlay whose lower layer is the shared tree
(sources and the objects of the last build, so the build stays incremental) and whose upper
layer, where every write of the build lands, is removed once the kernel is copied out:

- the overlay is mounted in a mount namespace of its own, held by a process that only waits
  (`unshare --mount ... cat`, its stdin a pipe krig holds: when krig ends, so does it), and
  mounted over the tree's own path, so the build sees the tree where it always is (objtool
  records absolute paths) and the host's view of the tree never changes;
- every step of the build runs in that namespace (`nsenter --mount`), in the build sandbox
  (kernels/sandbox.py) as before; krig reads what the build left through /proc/PID/root,
  as data (kernels/fromtree.py);
- while a layer is up, the tree is under a shared lock: builds of other series share the
  same lower layer at once, and a build in the tree itself (krig's own kernels) waits.

Without root the holder makes a user namespace too (overlayfs is mountable there).
"""
import os
import pathlib
import shutil
import subprocess
import time

from krig.errors import KrigError

UNSHARE, NSENTER = "unshare", "nsenter"
HOLDER_WAIT_STEPS = 3000        # of 10 ms


def _userns() -> list:
    return [] if os.geteuid() == 0 else ["--user", "--map-root-user"]


class Layer:
    """The overlay over `tree` (upper and work directories in `scratch`, which is removed
    on exit). `view` is the merged tree as krig reads it; `wrap(argv)` runs argv in it."""

    def __init__(self, tree: pathlib.Path, scratch: pathlib.Path):
        self.tree = pathlib.Path(tree).resolve()
        self.scratch = pathlib.Path(scratch)
        self.holder = None

    @property
    def view(self) -> pathlib.Path:
        return pathlib.Path(f"/proc/{self.holder.pid}/root{self.tree}")

    def wrap(self, argv: list) -> list:
        enter = ["--user", "--preserve-credentials"] if _userns() else []
        return [NSENTER, f"--target={self.holder.pid}", *enter, "--mount", "--", *map(str, argv)]

    def __enter__(self):
        _remove(self.scratch)
        upper, work = self.scratch / "upper", self.scratch / "work"
        upper.mkdir(parents=True)
        work.mkdir()
        self.holder = subprocess.Popen([UNSHARE, *_userns(), "--mount", "--propagation", "private", "cat"],
                                       stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            self._wait_apart()
            opts = f"lowerdir={self.tree},upperdir={upper.resolve()},workdir={work.resolve()}"
            p = subprocess.run(self.wrap(["mount", "-t", "overlay", "overlay", "-o", opts, str(self.tree)]),
                               capture_output=True, text=True, timeout=60)
            if p.returncode != 0 or self.holder.poll() is not None:
                why = (p.stderr.strip().splitlines() or ["?"])[-1]
                raise KrigError(f"cannot mount an overlay over {self.tree} for a series from outside krig's "
                                f"tree (it is built only there; see docs/security.md): {why}")
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_apart(self) -> None:
        """Until the holder runs `cat`: unshare has then made its namespace and made it private.
        Entering it any sooner would enter krig's own, and mount the overlay over the host's tree."""
        mine = os.readlink("/proc/self/ns/mnt")
        for _ in range(HOLDER_WAIT_STEPS):
            try:
                ns, comm = os.readlink(f"/proc/{self.holder.pid}/ns/mnt"), \
                    pathlib.Path(f"/proc/{self.holder.pid}/comm").read_text().strip()
            except OSError:
                ns = comm = None
            if self.holder.poll() is not None:
                err = self.holder.stderr.read().decode(errors="replace").strip()
                raise KrigError(f"cannot make a mount namespace for a series' overlay: {err[-200:] or 'unshare failed'}")
            if comm == "cat" and ns != mine:
                return
            time.sleep(0.01)
        raise KrigError("cannot make a mount namespace for a series' overlay: unshare did not start in 30 s")

    def __exit__(self, *exc):
        if self.holder is not None:
            self.holder.stdin.close()       # cat ends, the namespace and its overlay with it
            try:
                self.holder.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait()
            self.holder.stderr.close()
        _remove(self.scratch)
        return False


def sweep(layers: pathlib.Path) -> None:
    """Remove what a killed krig left of its layers (scratch directories named ...-<pid>)."""
    for d in layers.iterdir():
        pid = d.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not pathlib.Path(f"/proc/{pid}").exists():
            _remove(d)


def _remove(d: pathlib.Path) -> None:
    """rmtree, after making each directory searchable: overlayfs leaves its work/work at mode 0,
    which stops a user other than root."""
    if os.geteuid() != 0 and d.is_dir():
        for top, dirs, _, fd in os.fwalk(d, topdown=True, follow_symlinks=False):
            for name in dirs:
                os.chmod(name, 0o700, dir_fd=fd, follow_symlinks=False)
    shutil.rmtree(d, ignore_errors=True)
