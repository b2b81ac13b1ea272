"""A hermetic test session: nothing the suite runs reads or writes the user's own krig files.

krig finds the user's things through the environment: rig files in $XDG_CONFIG_HOME/krig/rigs
(rigs/__init__.py user_rig_dir), secrets in $XDG_CONFIG_HOME/krig/secrets and simulated lab
servers in $XDG_STATE_HOME/krig/labsim (rigs/labsim/sim.py), runs under $KRIG_RESULTS (default the
checkout's results/, krig/__init__.py), and the user's own lab through KRIG_RIG_PATH,
KRIG_LAB_COORDINATOR and KRIG_LOCK_DIR. tests/conftest.py calls enter() before it imports
krig: those point into one directory of the session (made by the first pytest process, shared
by its xdist workers and every subprocess through the environment they inherit), the user's
lab variables are dropped, and the shared kernel and image cache (KRIG_CACHE, XDG_CACHE_HOME)
stays where it is, since CI builds the kernels there before the suite.

So the suite cannot write the user's directories unless a test hands a process the user's own
paths; what it does not do is compare them before and after, since the user's own krig (a simulated
server they started, a run into results/) may write there while the suite runs, and that is not the
suite's doing. What proves the redirection is tests/project/test_hermetic.py: krig run as the suite runs it
(hermetic_env) against a fake user's home with their rigs and a server's state planted in it, and
nothing of that home read or written (user_dirs(), snapshot(), changes()). At the session's end
the process that made the session's directory removes it (leave()).
"""
from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SESSION_VAR = "KRIG_TEST_SESSION_HOME"  # the session's directory, set by the first process
# pointed into the session's directory: {variable: its subdirectory}
MOVED = {"XDG_CONFIG_HOME": "config", "XDG_STATE_HOME": "state", "KRIG_RESULTS": "results",
         "KRIG_LOCK_DIR": "locks"}
DROPPED = ("KRIG_RIG_PATH", "KRIG_LAB_COORDINATOR", "KRIG_HISTORY_URL")  # the user's own lab


def hermetic_env(env: dict, base: pathlib.Path) -> dict:
    """env as the suite runs krig: the user's krig directories moved under base, their lab
    variables dropped, everything else (the cache included) as it was."""
    out = {k: v for k, v in env.items() if k not in DROPPED}
    out.update({k: str(base / sub) for k, sub in MOVED.items()})
    out[SESSION_VAR] = str(base)
    return out


def user_dirs(env: dict) -> list[pathlib.Path]:
    """The user's krig directories env would have krig use: config, state and the checkout's
    results (read before enter() moves them)."""
    home = pathlib.Path(env.get("HOME") or os.path.expanduser("~"))
    config = pathlib.Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    state = pathlib.Path(env.get("XDG_STATE_HOME") or home / ".local" / "state")
    return [config / "krig", state / "krig", pathlib.Path(env.get("KRIG_RESULTS") or ROOT / "results")]


def enter() -> tuple[pathlib.Path, bool]:
    """Make os.environ hermetic (once per session: a worker or a subprocess of a pytest that did
    it inherits it). Returns (the session's directory, whether this process made it)."""
    made = SESSION_VAR not in os.environ
    base = pathlib.Path(tempfile.mkdtemp(prefix="krig-test-session-") if made else os.environ[SESSION_VAR])
    for sub in MOVED.values():
        (base / sub).mkdir(exist_ok=True)
    env = hermetic_env(dict(os.environ), base)
    for k in DROPPED:
        os.environ.pop(k, None)
    os.environ.update(env)
    return base, made


def leave(base: pathlib.Path) -> None:
    """The session's end: its directory removed (nothing else looked at)."""
    shutil.rmtree(base, ignore_errors=True)


def snapshot(dirs: list[pathlib.Path]) -> dict:
    """{path: (kind, size, mtime_ns)} of everything under dirs (no link followed)."""
    out: dict = {}
    for d in dirs:
        for top, _, files in os.walk(d):
            for name in [top] + [os.path.join(top, f) for f in files]:
                try:
                    st = os.lstat(name)
                except OSError:
                    continue
                kind = "dir" if name == top else "link" if os.path.islink(name) else "file"
                out[name] = (kind, 0 if kind == "dir" else st.st_size, st.st_mtime_ns)
    return out


def changes(before: dict, after: dict) -> list[str]:
    """What differs between two snapshots, a line each (added, removed, changed)."""
    out = [f"added {p}" for p in sorted(after.keys() - before.keys())]
    out += [f"removed {p}" for p in sorted(before.keys() - after.keys())]
    out += [f"changed {p}" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]]
    return out
