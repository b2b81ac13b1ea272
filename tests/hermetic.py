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

At the session's end the controller compares the user's real krig directories with their
snapshot from its start (user_dirs(), snapshot(), changes()).
"""
from __future__ import annotations

import json
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


def enter() -> tuple[pathlib.Path, bool, list[pathlib.Path]]:
    """Make os.environ hermetic (once per session: a worker or a subprocess of a pytest that did
    it inherits it). Returns (the session's directory, whether this process made it, the user's
    real directories)."""
    made = SESSION_VAR not in os.environ
    if made:
        user = user_dirs(os.environ)
        base = pathlib.Path(tempfile.mkdtemp(prefix="krig-test-session-"))
        os.environ["KRIG_TEST_USER_DIRS"] = os.pathsep.join(map(str, user))
    else:
        base = pathlib.Path(os.environ[SESSION_VAR])
        user = [pathlib.Path(p) for p in os.environ["KRIG_TEST_USER_DIRS"].split(os.pathsep)]
    for sub in MOVED.values():
        (base / sub).mkdir(exist_ok=True)
    env = hermetic_env(dict(os.environ), base)
    for k in DROPPED:
        os.environ.pop(k, None)
    os.environ.update(env)
    return base, made, user


def leave(base: pathlib.Path, user: list[pathlib.Path], before: dict) -> list[str]:
    """The session's end: its directory removed; what changed in the user's directories since
    the snapshot `before` (a line each, none if nothing)."""
    shutil.rmtree(base, ignore_errors=True)
    return changes(before, snapshot(user))


def _alive_labsim(state: pathlib.Path) -> set[str]:
    """Subdirectories of the user's simulated lab servers that are up (their own processes write
    there whatever the tests do): labsim/NAME whose supervisor (state.json's `supervisor`
    record, or the `pid` of an older state) runs."""
    alive = set()
    for st in (state / "labsim").glob("*/state.json"):
        try:
            rec = json.loads(st.read_text())
            pid = int((rec.get("supervisor") or {}).get("pid") or rec["pid"])
            cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if b"rigs.labsim.sim" in cmd:
            alive.add(str(st.parent))
    return alive


def snapshot(dirs: list[pathlib.Path]) -> dict:
    """{path: (kind, size, mtime_ns)} of everything under dirs (no link followed), but the
    directories of the user's simulated servers that are up."""
    out: dict = {}
    skip = set().union(*(_alive_labsim(d) for d in dirs))
    for d in dirs:
        for top, subdirs, files in os.walk(d):
            subdirs[:] = [s for s in subdirs if os.path.join(top, s) not in skip]
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
