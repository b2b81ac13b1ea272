"""A run directory as every command reads it: its files (the JSON records through krig/record.py),
console, samples, phases.

Each file is read at most once per RunDir; a file that is missing or unreadable is one
UsageError line naming it (or the caller's default, for the optional ones).

A run directory may come from someone else, and its files from the guest: every read and
write goes through krig/safeio.py (no link followed, regular files only, size-capped,
nothing that blocks), so nothing here opens a run file by path.
"""
import os
import pathlib
from collections.abc import Callable, Hashable
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

from . import safeio
from .errors import UsageError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

T = TypeVar("T")
Samples = dict[str, "NDArray[np.float64]"]     # samples.tsv's columns by name

MANIFEST, VERDICT, METRICS = "manifest.json", "verdict.json", "metrics.json"
THRESHOLDS = "thresholds.json"      # the judge's outcome per threshold (krig check writes it)
MISSING = -1            # krig-sampler writes -1 for a source it could not read
# Files krig itself writes into a run directory: the guest's results never take these names.
KRIG_FILES = frozenset({MANIFEST, VERDICT, METRICS, THRESHOLDS, "console.log", "qemu.log", "host.tsv", "stdout", "stderr",
                        "exit_code", "analysis.log", "junit.xml", "report.html", "summary.txt", "sel.txt",
                        "sel-before.txt", "sol-notes.log", "ssh.log", "plots", "krig.log"})


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a run directory: it has a manifest.json, a regular file (no link followed)."""
    path = pathlib.Path(path)
    return path.is_dir() and safeio.is_file(path, MANIFEST)


class RunDir:
    def __init__(self, run_dir: str | os.PathLike[str]):
        self.dir = pathlib.Path(run_dir)
        if not self.dir.is_dir():
            raise UsageError(f"{run_dir}: not a run directory")
        self._cache: dict[Hashable, Any] = {}

    @classmethod
    def of(cls, run: "Run") -> "RunDir":
        """`run` itself when it is a RunDir already (its reads cached), else a RunDir of the path."""
        return run if isinstance(run, RunDir) else cls(run)

    def path(self, name: str) -> pathlib.Path:
        return self.dir / name

    def exists(self, name: str) -> bool:
        """Whether the run has `name` at all (a link or a FIFO counts: reading it is refused)."""
        return safeio.lstat(self.dir, name) is not None

    def is_file(self, name: str) -> bool:
        """Whether `name` is a regular file of the run (a link or a FIFO is not)."""
        return safeio.is_file(self.dir, name)

    def open(self, name: str, cap: int = safeio.DEFAULT_CAP) -> IO[bytes]:
        """A binary file object of the run's regular file `name`, for reading it in pieces."""
        self.require(name)
        return safeio.open_file(self.dir, name, cap)

    def size(self, name: str) -> int:
        st = safeio.lstat(self.dir, name)
        return st.st_size if st is not None else 0

    def require(self, name: str) -> pathlib.Path:
        p = self.dir / name
        if not self.exists(name):
            what = " (not a krig run directory)" if name == MANIFEST else ""
            raise UsageError(f"{self.dir}: missing {name}{what}")
        return p

    def read_bytes(self, name: str, cap: int = safeio.DEFAULT_CAP) -> bytes:
        """A file of the run, read safely (krig/safeio.py); a missing one is one line."""
        self.require(name)
        return safeio.read_bytes(self.dir, name, cap)

    def _once(self, key: Hashable, load: Callable[[], T]) -> T:
        if key not in self._cache:
            self._cache[key] = load()
        return cast(T, self._cache[key])     # what load() gave for this key

    def json(self, name: str, default: Any = None) -> Any:
        """A JSON file of the run; `default` when it is missing (None: missing is an error)."""
        def load() -> Any:
            if default is not None and not self.exists(name):
                return default
            self.require(name)
            got = safeio.read_json(self.dir, name)
            if default is not None and not isinstance(got, type(default)):
                raise UsageError(f"{self.path(name)}: not a JSON {type(default).__name__.replace('dict', 'object')}")
            return got
        return self._once(("json", name), load)

    def manifest_json(self) -> dict[str, Any]:
        """manifest.json's object as written; a run is read through krig/record.py's RunRecord."""
        man = self.json(MANIFEST)
        if not isinstance(man, dict):
            raise UsageError(f"{self.path(MANIFEST)}: not a JSON object (not a krig run directory)")
        return man

    def write_json(self, name: str, data: Any) -> None:
        """Write a JSON file of the run (atomically); later reads through this RunDir see it."""
        safeio.write_json(self.dir, name, data)
        self._cache[("json", name)] = data

    def write_bytes(self, name: str, data: bytes) -> None:
        safeio.write_bytes(self.dir, name, data)
        self._cache.pop(("text", name), None)

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode())

    def text(self, name: str, default: str | None = "") -> str:
        """A text file of the run (console.log, qemu.log, ...); `default` when missing."""
        def load() -> str:
            if default is not None and not self.exists(name):
                return default
            return self.read_bytes(name).decode(errors="replace")
        return self._once(("text", name), load)

    def samples(self) -> Samples:
        """samples.tsv as numpy columns; 't' is seconds since the first sample."""
        return self._once("samples", lambda: parse_samples(self.text("samples.tsv", None), self.path("samples.tsv")))

    def phase_rows(self) -> list[tuple[float, str]]:
        """phases.tsv in order: (wall time, name); see krig_phase."""
        def load() -> list[tuple[float, str]]:
            out = []
            if self.exists("phases.tsv"):
                for line in self.text("phases.tsv").splitlines():
                    parts = line.split("\t")
                    try:
                        out.append((float(parts[0]), parts[1])) if len(parts) == 2 else None
                    except ValueError:
                        continue
            return out
        return self._once("phases", load)

    def phases(self) -> dict[str, float]:
        """name -> wall time of its first occurrence."""
        out: dict[str, float] = {}
        for t, name in self.phase_rows():
            out.setdefault(name, t)
        return out

    def last_phase(self) -> str | None:
        rows = self.phase_rows()
        return rows[-1][1] if rows else None


Run = RunDir | str | os.PathLike[str]        # a run directory: its RunDir, or its path


def load_samples(path: str | os.PathLike[str]) -> Samples:
    """samples.tsv given by path (its directory trusted, the file read safely)."""
    path = pathlib.Path(path)
    return parse_samples(safeio.read_text(*safeio.split(path)), path)


def parse_samples(text: str, path: str | os.PathLike[str]) -> Samples:
    import numpy as np      # only where samples are read: `krig b4-check` and `krig --help` never do
    lines = text.splitlines()
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
