"""Where krig keeps caches and per-run scratch state (never in git)."""
import os
import pathlib


def cache_dir(*parts) -> pathlib.Path:
    base = os.environ.get("KRIG_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "krig")
    p = pathlib.Path(base, *parts)
    p.mkdir(parents=True, exist_ok=True)
    return p
