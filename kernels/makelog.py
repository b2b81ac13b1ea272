"""Running make and its helpers with a log: the environment a build starts from (nothing of the
caller's make or kernel variables), a progress line while it runs (krig/progress.py: the phase,
the last step its log shows, its bound), the first error it printed."""
import os
import pathlib
import re
import subprocess

from krig import progress
from krig.paths import dies_with_parent
from krig.results import now
from . import ccache


STRIP_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "GNUMAKEFLAGS", "O", "KBUILD_OUTPUT",
             "ARCH", "SRCARCH", "CROSS_COMPILE", "LOCALVERSION", "KERNELRELEASE", "KCONFIG_CONFIG", "CC")
TIMED_OUT = 124         # timeout(1)'s status when the sandbox's wall time ran out
# the build date in the kernel's version string: fixed, so init/version.o is a ccache hit too
BUILD_TIMESTAMP = "Thu Jan  1 00:00:00 UTC 2015"


def clean_env() -> dict:
    """The environment for the kernel's make: nothing inherited from an outer make."""
    env = {k: v for k, v in os.environ.items() if k not in STRIP_ENV and not k.startswith("GIT_")}
    path = env.get("PATH", "/usr/bin:/bin")
    for extra in ("/usr/sbin", "/sbin"):
        if extra not in path.split(":"):
            path += ":" + extra
    # LOCALVERSION set but empty: no "+" appended to the release in git trees.
    env.update(PATH=ccache.path(path), KBUILD_BUILD_USER="krig", KBUILD_BUILD_HOST="krig", LC_ALL="C",
               LOCALVERSION="", KBUILD_BUILD_TIMESTAMP=BUILD_TIMESTAMP)
    if ccache.available():
        env["CCACHE_DIR"] = str(ccache.directory())
    return env


def run_logged(argv, cwd, logf, what="", env=None, limit: float | None = None) -> int:
    """Run argv with output appended to logf, inside a progress wait naming `what` (the phase:
    the configuration, the build, the modules) and the last step of its log, at most `limit`
    seconds (the sandbox's wall time; None: unbounded). The command dies with krig (SIGKILL when
    the thread that started it ends, krig killed included): a sandboxed build's timeout(1), then
    bwrap (--die-with-parent) and everything in it."""
    phase = what or " ".join(map(str, argv[:2]))
    with open(logf, "ab") as f:
        f.write(f"\n$ {' '.join(map(str, argv))}    (cwd {cwd}, {now()})\n".encode())
        f.flush()
        p = subprocess.Popen(dies_with_parent(argv), cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env or clean_env())
        try:
            with progress.waiting(lambda: f"{phase}, at {_last_step(logf)}", limit):   # its lines: the wait's thread
                p.wait()
        except BaseException:
            p.terminate()
            p.wait()
            raise
    return p.returncode


def _last_step(logf) -> str:
    """The last step make printed (`  CC      fs/dcache.o`), "..." before the first."""
    try:
        with open(logf, "rb") as f:
            f.seek(max(0, os.path.getsize(logf) - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.startswith("  ")]
    except OSError:
        return "..."
    return " ".join(lines[-1].split()) if lines else "..."


def first_error(logf, start: int = 0) -> str:
    text = pathlib.Path(logf).read_text(errors="replace")[start:]
    for pat in (r"^.*\berror:.*$", r"^.*\*\*\*.*$", r"^.*Error \d+.*$"):
        m = re.search(pat, text, re.M)
        if m:
            return m.group(0).strip()[:300]
    tail = text.strip().splitlines()[-1:] or ["no output"]
    return tail[0][:300]
