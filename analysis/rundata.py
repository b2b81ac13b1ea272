"""RunData: one run directory as the reproducers' analyze.py sees it."""
import json
import re
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

    @property
    def sample_interval(self) -> float:
        return float(self.params.get("sample_interval", 1.0))

    def sampler_max_gap_intervals(self) -> float:
        """Longest gap between consecutive samples, in sample intervals (1.0 = on time)."""
        t = self.samples()["time"]
        return float(np.diff(t).max() / self.sample_interval) if len(t) > 1 else float("nan")

    def kernel_version(self) -> tuple[int, int]:
        """(major, minor) of the kernel that ran, from the manifest; (0, 0) if unknown."""
        rel = self.manifest.get("machine", {}).get("release") or self.manifest.get("kernel", {}).get("release") or ""
        m = re.match(r"(\d+)\.(\d+)", rel)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    def nr_negative_available(self) -> bool:
        """dentry-state's 5th field is nr_negative only since v5.0 ("fs/dcache: track & report
        number of negative dentries"); before, it is a constant 0 that means nothing."""
        col = self.samples()["nr_negative"]
        return self.kernel_version() >= (5, 0) and bool(np.isfinite(col).any())

    def mono_to_wall(self) -> float:
        """Offset (seconds) from CLOCK_MONOTONIC, the trace's clock (trace-cmd -C mono), to the
        wall clock of samples.tsv and phases.tsv: the sampler writes both on every row."""
        s = self.samples()
        if "mono" not in s or not np.isfinite(s["mono"]).any():
            raise UsageError(f"{self.dir}/samples.tsv: no mono column to put the trace on the samples' clock")
        return float(np.nanmedian(s["time"] - s["mono"]))

    def trace_wall_times(self, ts_ns) -> np.ndarray:
        """Trace timestamps (ns, CLOCK_MONOTONIC) as wall-clock seconds (the phases' clock)."""
        return np.asarray(ts_ns, dtype=np.float64) / 1e9 + self.mono_to_wall()

    def trace(self):
        from .tracedat import TraceFile
        return TraceFile(self.require("trace.dat"))


MISSING = -1


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
    arr[arr == MISSING] = np.nan   # krig-sampler writes -1 for a source it could not read
    cols = {name: arr[:, i] for i, name in enumerate(header)}
    cols["t"] = cols["time"] - cols["time"][0]
    return cols
