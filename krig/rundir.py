"""A run directory as every command reads it: manifest, verdict, metrics, console, samples, phases.

Each file is read at most once per RunDir; a file that is missing or unreadable is one
UsageError line naming it (or the caller's default, for the optional ones).
"""
import json
import pathlib

import numpy as np

from .errors import UsageError
from .results import write_json

MANIFEST, VERDICT, METRICS = "manifest.json", "verdict.json", "metrics.json"
MISSING = -1            # krig-sampler writes -1 for a source it could not read


class RunDir:
    def __init__(self, run_dir):
        self.dir = pathlib.Path(run_dir)
        if not self.dir.is_dir():
            raise UsageError(f"{run_dir}: not a run directory")
        self._cache = {}

    def path(self, name: str) -> pathlib.Path:
        return self.dir / name

    def exists(self, name: str) -> bool:
        return (self.dir / name).exists()

    def require(self, name: str) -> pathlib.Path:
        p = self.dir / name
        if not p.exists():
            what = " (not a krig run directory)" if name == MANIFEST else ""
            raise UsageError(f"{self.dir}: missing {name}{what}")
        return p

    def _once(self, key, load):
        if key not in self._cache:
            self._cache[key] = load()
        return self._cache[key]

    def json(self, name: str, default=None):
        """A JSON file of the run; `default` when it is missing (None: missing is an error)."""
        def load():
            if default is not None and not self.exists(name):
                return default
            p = self.require(name)
            try:
                return json.loads(p.read_text())
            except (ValueError, UnicodeDecodeError) as e:
                raise UsageError(f"{p}: not valid JSON ({e})") from None
        return self._once(("json", name), load)

    @property
    def manifest(self) -> dict:
        return self.json(MANIFEST)

    def write_json(self, name: str, data) -> None:
        """Write a JSON file of the run (atomically); later reads through this RunDir see it."""
        write_json(self.path(name), data)
        self._cache[("json", name)] = data

    def verdict(self) -> dict:
        """verdict.json ({} when the run was never judged)."""
        return self.json(VERDICT, {})

    def metrics(self) -> dict:
        """metrics.json ({} when the run has none)."""
        return self.json(METRICS, {})

    def text(self, name: str, default: str | None = "") -> str:
        """A text file of the run (console.log, qemu.log, ...); `default` when missing."""
        def load():
            if default is not None and not self.exists(name):
                return default
            return self.require(name).read_text(errors="replace")
        return self._once(("text", name), load)

    def samples(self) -> dict:
        """samples.tsv as numpy columns; 't' is seconds since the first sample."""
        return self._once("samples", lambda: load_samples(self.require("samples.tsv")))

    def phase_rows(self) -> list[tuple[float, str]]:
        """phases.tsv in order: (wall time, name); see krig_phase."""
        def load():
            out = []
            if self.exists("phases.tsv"):
                for line in self.path("phases.tsv").read_text(errors="replace").splitlines():
                    parts = line.split("\t")
                    try:
                        out.append((float(parts[0]), parts[1])) if len(parts) == 2 else None
                    except ValueError:
                        continue
            return out
        return self._once("phases", load)

    def phases(self) -> dict:
        """name -> wall time of its first occurrence."""
        out = {}
        for t, name in self.phase_rows():
            out.setdefault(name, t)
        return out

    def last_phase(self) -> str | None:
        rows = self.phase_rows()
        return rows[-1][1] if rows else None


def load_samples(path) -> dict:
    path = pathlib.Path(path)
    lines = path.read_text().splitlines()
    if not lines:
        raise UsageError(f"{path}: empty sample file")
    header = lines[0].split("\t")
    rows = [line.split("\t") for line in lines[1:] if line.count("\t") == len(header) - 1]
    if not rows:
        raise UsageError(f"{path}: no complete samples")
    try:
        arr = np.array(rows, dtype=np.float64)
    except ValueError:
        raise UsageError(f"{path}: non-numeric sample values") from None
    arr[arr == MISSING] = np.nan
    cols = {name: arr[:, i] for i, name in enumerate(header)}
    cols["t"] = cols["time"] - cols["time"][0]
    return cols
