"""RunData: one run directory as the reproducers' analyze.py sees it."""
import json
import pathlib

import numpy as np

from krig.errors import UsageError


class RunData:
    def __init__(self, run_dir):
        self.dir = pathlib.Path(run_dir)
        self.manifest = self.json("manifest.json")
        self.params = self.manifest.get("params", {})
        self._samples = None

    def path(self, name: str) -> pathlib.Path:
        return self.dir / name

    def require(self, name: str) -> pathlib.Path:
        p = self.dir / name
        if not p.exists():
            raise UsageError(f"{self.dir}: missing {name}")
        return p

    def json(self, name: str):
        p = self.require(name)
        try:
            return json.loads(p.read_text())
        except ValueError as e:
            raise UsageError(f"{p}: not valid JSON ({e})") from None

    def text(self, name: str) -> str:
        return self.require(name).read_text(errors="replace")

    @property
    def mem_total_bytes(self) -> int:
        m = self.manifest.get("machine", {}).get("mem_total_bytes")
        if m:
            return int(m)
        s = self.samples()
        return int(s["mem_total_kb"][0]) * 1024

    def samples(self) -> dict:
        """samples.tsv as numpy columns; 't' is seconds since the first sample."""
        if self._samples is None:
            self._samples = load_samples(self.require("samples.tsv"))
        return self._samples

    def phases(self) -> dict:
        """phases.tsv: name -> wall time (first occurrence); see krig_phase."""
        out = {}
        p = self.dir / "phases.tsv"
        if p.exists():
            for line in p.read_text().splitlines():
                parts = line.split("\t")
                if len(parts) == 2:
                    out.setdefault(parts[1], float(parts[0]))
        return out

    def trace(self):
        from .tracedat import TraceFile
        return TraceFile(self.require("trace.dat"))


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
    cols = {name: arr[:, i] for i, name in enumerate(header)}
    cols["t"] = cols["time"] - cols["time"][0]
    return cols
