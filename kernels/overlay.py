"""A throwaway layer over a build tree: where a series from outside krig's tree is built.

A build tree is shared by every kernel of one source and config family (kernels/incremental.py),
and `make` runs the tree's own code: a series' Makefile line can append to any source or
object, and undoing the files its patches name does not undo that. So a series from outside
never builds in the tree itself. It builds in an overlay whose lower layer is a copy of the
shared tree (sources and the objects of the last build, timestamps kept, so the build stays
incremental) and whose upper layer, where every write of the build lands, is removed with the
copy once the kernel is copied out:

- the overlay is mounted in a mount namespace of its own, held by a process that only waits
  (`unshare --mount ... cat`, its stdin a pipe krig holds: when krig ends, so does it), and
  mounted over the tree's own path, so the build sees the tree where it always is (objtool
  records absolute paths) and the host's view of the tree never changes;
- the upper layer is a file system of its own, ext4 made fresh in a sparse file of DISK bytes
  (KRIG_BUILD_DISK, kernels/bounds.py) and loop-mounted in that namespace only: a build that
  writes more gets ENOSPC, the host's disk never more than DISK; the mount, and with it the
  loop device (autoclear), go with the namespace;
- every step of the build runs in that namespace (`nsenter --mount`), in the build sandbox
  (kernels/sandbox.py) as before, and in the build's cgroup (kernels/bounds.py); krig reads
  what the build left through /proc/PID/root, as data (kernels/fromtree.py).

A limit the build hit (its processes, its memory, its disk full) is named by breach(). The
loop mount needs root: without it (or without a cgroup), problem() says why, and a series from
outside is refused.
"""
import os
import pathlib
import shutil
import subprocess
import time

from krig.errors import KrigError
from . import bounds

UNSHARE, NSENTER, MKFS = "unshare", "nsenter", "mkfs.ext4"
HOLDER_WAIT_STEPS = 3000        # of 10 ms
LOOP_WAIT_STEPS = 500           # of 10 ms: the loop device is let go as the namespace ends
# no journal (the file system lives as long as one build), no blocks reserved for root, and its
# inode tables left for the kernel to read as zeros (noinit_itable): the sparse file grows only
# by what the build writes
MKFS_ARGS = ("-q", "-F", "-O", "^has_journal", "-m", "0", "-E", "lazy_itable_init=1,nodiscard")
MOUNT_OPTS = "loop,nosuid,nodev,noinit_itable"


def problem() -> str | None:
    """Why a bounded layer cannot be made here (None when it can)."""
    if os.geteuid() != 0:
        return "its disk limit is a loop-mounted file system, which needs root"
    for prog in (MKFS, "losetup", UNSHARE, NSENTER):
        if not _which(prog):
            return f"{prog} is not installed"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices here (/dev/loop-control)"
    return bounds.problem()


def _which(prog: str) -> str | None:
    """prog on PATH, or in /usr/sbin and /sbin (a user's PATH may not have them)."""
    return shutil.which(prog, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


class Layer:
    """The overlay over `tree` (its lower layer `lower`, the tree itself by default; the
    disk image, its mount point, the upper and work directories in `scratch`, which is removed
    on exit). `view` is the merged tree as krig reads it; `wrap(argv)` runs argv in it."""

    def __init__(self, tree: pathlib.Path, scratch: pathlib.Path, lower: pathlib.Path | None = None):
        self.tree = pathlib.Path(tree).resolve()
        self.lower = pathlib.Path(lower).resolve() if lower is not None else self.tree
        self.scratch = pathlib.Path(scratch)
        self.disk = bounds.setting("disk")
        self.holder: subprocess.Popen[bytes] | None = None     # the namespace's process, once made
        self.group: bounds.Group | None = None

    @property
    def _pid(self) -> int:
        assert self.holder is not None, "the layer is made (_make) before it is used"
        return self.holder.pid

    @property
    def view(self) -> pathlib.Path:
        return pathlib.Path(f"/proc/{self._pid}/root{self.tree}")

    @property
    def image(self) -> pathlib.Path:
        return self.scratch / "disk.img"

    def _enter(self, argv: list) -> list:
        return [NSENTER, f"--target={self._pid}", "--mount", "--", *map(str, argv)]

    def wrap(self, argv: list) -> list:
        """argv as a step of the build: in the layer's namespace and the build's cgroup."""
        assert self.group is not None, "the layer is made (_make) before it is used"
        return self.group.wrap(self._enter(argv))

    def _run(self, argv: list, what: str) -> None:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if p.returncode != 0 or (self.holder is not None and self.holder.poll() is not None):
            why = (p.stderr.strip().splitlines() or ["?"])[-1]
            raise KrigError(f"cannot {what} for a series from outside krig's tree (it is built only there; "
                            f"see docs/security.md): {why}")

    def __enter__(self):
        try:
            self._make()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _make(self) -> None:
        mnt = self.scratch / "mnt"
        mnt.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.image, "wb") as f:
                f.truncate(self.disk)
        except OSError as e:
            raise KrigError(f"cannot make the {bounds.size_text(self.disk)} disk of a series' layer (KRIG_BUILD_DISK) "
                            f"in {self.scratch}: {e.strerror or e}") from None
        self._run([_which(MKFS) or MKFS, *MKFS_ARGS, str(self.image)],
                  f"make the {bounds.size_text(self.disk)} file system of a layer")
        self.group = bounds.Group(bounds.setting("pids"), bounds.setting("memory")).make()
        self.holder = subprocess.Popen([UNSHARE, "--mount", "--propagation", "private", "cat"],
                                       stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_apart()
        self._run(self._enter(["mount", "-t", "ext4", "-o", MOUNT_OPTS, self.image, mnt]),
                  "loop-mount the file system of a layer")
        upper, work = mnt.resolve() / "upper", mnt.resolve() / "work"
        self._run(self._enter(["mkdir", upper, work]), "make the upper layer")
        opts = f"lowerdir={self.lower},upperdir={upper},workdir={work}"
        self._run(self._enter(["mount", "-t", "overlay", "overlay", "-o", opts, self.tree]),
                  f"mount an overlay over {self.tree}")

    def _wait_apart(self) -> None:
        """Until the holder runs `cat`: unshare has then made its namespace and made it private.
        Entering it any sooner would enter krig's own, and mount the overlay over the host's tree."""
        mine = os.readlink("/proc/self/ns/mnt")
        holder = self.holder
        assert holder is not None and holder.stderr is not None, "started by _make with stderr piped"
        for _ in range(HOLDER_WAIT_STEPS):
            ns: str | None
            comm: str | None
            try:
                ns, comm = os.readlink(f"/proc/{holder.pid}/ns/mnt"), \
                    pathlib.Path(f"/proc/{holder.pid}/comm").read_text().strip()
            except OSError:
                ns = comm = None
            if holder.poll() is not None:
                err = holder.stderr.read().decode(errors="replace").strip()
                raise KrigError(f"cannot make a mount namespace for a series' overlay: {err[-200:] or 'unshare failed'}")
            if comm == "cat" and ns != mine:
                return
            time.sleep(0.01)
        raise KrigError("cannot make a mount namespace for a series' overlay: unshare did not start in 30 s")

    def breach(self) -> str | None:
        """The limit the build hit, in words ("its disk limit (20 GiB)"), or None: read from the
        cgroup's counters and from the upper layer's file system (full: the build got ENOSPC)."""
        hit = self.group.breach() if self.group is not None else None
        if hit or self.holder is None or self.holder.poll() is not None:
            return hit
        try:
            st = os.statvfs(f"/proc/{self.holder.pid}/root{(self.scratch / 'mnt').resolve()}")
        except OSError:
            return None
        if st.f_bavail * st.f_frsize < max(1 << 20, self.disk // 100) or st.f_favail == 0:
            return f"its disk limit ({bounds.size_text(self.disk)}, KRIG_BUILD_DISK)"
        return None

    def __exit__(self, *exc):
        if self.group is not None:
            self.group.remove()             # nothing of the build is left to hold the namespace
        if self.holder is not None:
            self.holder.stdin.close()       # cat ends, the namespace and its mounts with it
            try:
                self.holder.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait()
            self.holder.stderr.close()
        _let_go(self.image)
        _remove(self.scratch)
        return False


def _let_go(image: pathlib.Path) -> None:
    """No loop device left on image: the one its mount made goes with the namespace (autoclear)."""
    if not image.exists():
        return
    for step in range(LOOP_WAIT_STEPS):
        p = subprocess.run([_which("losetup") or "losetup", "-n", "-O", "NAME", "-j", str(image)],
                           capture_output=True, text=True, timeout=60)
        devs = p.stdout.split()
        if not devs:
            return
        if step == LOOP_WAIT_STEPS - 1:
            for dev in devs:
                subprocess.run([_which("losetup") or "losetup", "-d", dev], capture_output=True, timeout=60)
        time.sleep(0.01)


def sweep(layers: pathlib.Path) -> None:
    """Remove what a killed krig left of its layers (scratch directories named ...-<pid>), its
    build's cgroups first (what is left running there holds the layer's namespace)."""
    bounds.sweep_all()
    for d in layers.iterdir():
        pid = d.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not pathlib.Path(f"/proc/{pid}").exists():
            _let_go(d / "disk.img")
            _remove(d)


def _remove(d: pathlib.Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
