"""RunData: one run directory as the reproducers' analyze.py sees it."""
import re

import numpy as np

from krig.errors import UsageError
from krig.record import RunRecord
from krig.rundir import RunDir


class RunData(RunDir):
    """RunDir (krig/rundir.py) with what the analysis adds: parameters, the trace, clocks."""

    def __init__(self, run_dir):
        super().__init__(run_dir)
        self.params = self.record.manifest.params or {}

    @property
    def record(self) -> RunRecord:
        """The run's record (krig/record.py), read once through this RunDir."""
        return self._once("record", lambda: RunRecord.read(self))

    @property
    def mem_total_bytes(self) -> int:
        m = self.record.manifest.mem_total_bytes
        if m:
            return int(m)
        s = self.samples()
        return int(s["mem_total_kb"][0]) * 1024

    @property
    def sample_interval(self) -> float:
        return float(self.params.get("sample_interval", 1.0))

    def sampler_max_gap_intervals(self) -> float:
        """Longest gap between consecutive samples, in sample intervals (1.0 = on time)."""
        t = self.samples()["time"]
        return float(np.diff(t).max() / self.sample_interval) if len(t) > 1 else float("nan")

    def kernel_version(self) -> tuple[int, int]:
        """(major, minor) of the kernel that ran, from the manifest; (0, 0) if unknown."""
        rel = self.record.manifest.release or ""
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
        """trace.dat, opened once per RunData (every metric reads the same TraceFile)."""
        from .trace.tracedat import TraceFile
        return self._once("trace", lambda: TraceFile(self.require("trace.dat")))

