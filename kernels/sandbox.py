"""Kernel builds in a sandbox (bubblewrap).

`make` runs code from the tree it builds: Makefiles, Kconfig scripts, and host
programs compiled from the tree's own C (scripts/, tools/, lib/gen_crc32table...).
A series given to `krig validate` or `,series=` is a mail, often from someone else;
built on the host it could read the host's files (SSH keys, tokens), write outside
the tree or reach the network, and what it builds could leak them into a run's
results. So every step of a krig kernel build that runs the tree's code
(`patch`, `make`, `merge_config.sh`) runs under bwrap:

- it sees the toolchain (/usr read-only, /etc/alternatives, /etc/ld.so.cache) and
  nothing else of the host: no /root, /home, /work, /etc/passwd, /etc/ssh;
- it writes only the build tree (and, for `modules_install`, the `mod/` directory of
  the kernel it installs; kernels/fromtree.py takes what it left); /tmp is its own tmpfs;
- it has no network, its own PID, IPC and UTS namespaces, no capabilities, and an
  environment of PATH, LC_ALL, LOCALVERSION and the KBUILD_* settings only
  (no inherited variables: a BMC password in the environment stays out);
- it dies with krig, and it is bounded: at most WALL_SECONDS of wall time (`timeout`), per
  process at most MEMORY bytes of address space, FILE_SIZE bytes per file written and no
  core dumps, at most NPROC processes of its user (`prlimit`; the kernel exempts root from
  that last one), and its /tmp is a tmpfs of TMP_SIZE bytes; a series from outside is also
  bounded as a whole, root or not: its processes and memory by a cgroup, its writes by the
  size of its layer (kernels/bounds.py, kernels/overlay.py);
- the compiler cache (ccache, kernels/ccache.py) is the one other directory it reaches: written
  by builds of krig's own kernels, read-only for a series from outside.

A build tree is shared by the kernels of one source and config family, and code
that ran in it can leave programs behind for the next build to run. So a tree is
always built in the sandbox when bwrap works here, and a series from outside is
built only in a throwaway overlay over a copy of the tree (kernels/overlay.py), never in it.
Where the sandbox does not work (no user namespaces), or a series' bounds cannot be set,
kernels from krig's own tree and the developer's tree still build (without the sandbox,
or bounded per process), and a series from outside is refused with one line (without the
sandbox, its trial apply too).
"""
import functools
import os
import pathlib
import shutil
import subprocess
import tempfile

from krig.errors import UsageError

BWRAP = "bwrap"
ENV_KEEP = ("PATH", "LC_ALL", "LOCALVERSION", "KBUILD_BUILD_USER", "KBUILD_BUILD_HOST", "KBUILD_BUILD_TIMESTAMP",
            "CCACHE_DIR", "CCACHE_READONLY", "CCACHE_TEMPDIR", "CCACHE_BASEDIR", "CCACHE_NOSTATS", "CCACHE_NOHASHDIR")
# what of the host's root the toolchain needs, read-only (the rest of the host is not there)
RO_PATHS = ("/usr", "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
WALL_SECONDS = 6 * 3600         # a full defconfig build on 2 busy cores takes about one hour
MEMORY = 8 << 30                # per process (RLIMIT_AS): ld of vmlinux needs well under 2 GiB
FILE_SIZE = 8 << 30
NPROC = 4096
TMP_SIZE = 1 << 30
CACHE_MOUNT = "/ccache"


def limits() -> list:
    """The argv prefix that bounds a sandboxed command."""
    return ["timeout", "--kill-after=60", str(WALL_SECONDS), "prlimit", f"--as={MEMORY}", f"--fsize={FILE_SIZE}",
            f"--nproc={NPROC}", "--core=0", "--"]


def wall(box) -> float | None:
    """The most a command of a build may take: WALL_SECONDS in the sandbox (`box`), else unbounded."""
    return float(WALL_SECONDS) if box else None


def wall_text() -> str:
    return f"{WALL_SECONDS / 3600:g} hours" if WALL_SECONDS >= 3600 else f"{WALL_SECONDS} s"


def disabled() -> bool:
    """KRIG_BUILD_SANDBOX=off builds without the sandbox (then a series from outside is refused)."""
    v = os.environ.get("KRIG_BUILD_SANDBOX", "").strip().lower()
    if v not in ("", "on", "off"):
        raise UsageError(f"KRIG_BUILD_SANDBOX: expected on or off, got {v!r}")
    return v == "off"


def argv(cmd: list, tree: pathlib.Path, writable: tuple = (), readable: tuple = (), env: dict | None = None,
         cache: tuple | None = None) -> list:
    """cmd as it runs in the sandbox: cwd = tree; the tree and `writable` read-write but the tree's
    .git (what git runs on the host later: hooks, config); `readable` (patches, fragments, a
    read-only compiler cache) read-only; `cache` = (directory, writable) is the compiler cache,
    seen at CACHE_MOUNT. Within limits()."""
    env = env or {}
    out = [*limits(), BWRAP, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
           "--uid", "65534", "--gid", "65534", "--clearenv"]
    for k in ENV_KEEP:
        if env.get(k) is not None:
            out += ["--setenv", k, env[k]]
    out += ["--setenv", "HOME", "/tmp"]
    for p in ROOT_LINKS:
        if os.path.islink(p):
            out += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            out += ["--ro-bind", p, p]
    for p in RO_PATHS:
        if os.path.exists(p):
            out += ["--ro-bind", p, p]
    out += ["--dev", "/dev", "--proc", "/proc", "--size", str(TMP_SIZE), "--tmpfs", "/tmp"]
    for p in (tree, *writable):
        p = str(pathlib.Path(p).resolve())
        out += ["--bind", p, p]
    dotgit = pathlib.Path(tree).resolve() / ".git"
    if dotgit.exists():
        out += ["--ro-bind", str(dotgit), str(dotgit)]
    for p in readable:
        p = str(pathlib.Path(p).resolve())
        out += ["--ro-bind", p, p]
    if cache is not None:
        out += ["--bind" if cache[1] else "--ro-bind", str(cache[0]), CACHE_MOUNT]
    return out + ["--chdir", str(pathlib.Path(tree).resolve()), "--", *map(str, cmd)]


@functools.lru_cache(maxsize=1)
def problem() -> str | None:
    """Why the sandbox cannot run here (None when it can): bwrap missing, or it cannot make
    its namespaces (a container without user namespaces)."""
    if not shutil.which(BWRAP):
        return "bwrap is not installed (Debian package bubblewrap; `make setup` installs it)"
    try:
        with tempfile.TemporaryDirectory(prefix="krig-sandbox-probe-") as td:
            p = subprocess.run(argv(["true"], pathlib.Path(td)), capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not run: {e}"
    if p.returncode != 0:
        return f"bwrap cannot make its namespaces here: {(p.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


def usable() -> bool:
    return not disabled() and problem() is None


def refuse_outside_series(what: str, bounds: str | None = None) -> None:
    """A series from outside krig's tree needs the sandbox and its bounds (kernels/overlay.py
    problem()): one line when they cannot be had here."""
    if bounds is not None and usable():
        raise UsageError(f"{what}: a series from outside krig's tree is built only within its limits "
                         f"(a cgroup, a bounded disk), and they cannot be set here ({bounds}); see docs/security.md")
    why = "KRIG_BUILD_SANDBOX=off" if disabled() else problem()
    raise UsageError(f"{what}: a series from outside krig's tree is built only in the build sandbox, "
                     f"and it cannot run here ({why}); see docs/security.md")
