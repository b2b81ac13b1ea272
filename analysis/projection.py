"""A run projected to machines of other sizes: what its reproducer's model says the kernel
would do there, labelled as a projection and never mixed with what was measured.

The model is the reproducer's (analyze.py `projection(values, machine, extra)`: values are
the run's metric values, machine its manifest's machine facts (krig.record_machine.Machine), extra more (RAM, CPUs) to
project to); a reproducer without one is not projected (docs/reproducers.md says what
scales and what does not). `krig check`/`krig report --project 512G[:CPUS]` add a size.
"""
import math
import pathlib

from krig import safeio
from krig.config import parse_size
from krig.errors import UsageError

PROJECTION = "projection.json"
MAX_RAM = 64 << 40


def parse_projects(specs) -> tuple:
    """Every --project option given (None: none)."""
    return tuple(parse_project(s) for s in specs or ())


def parse_project(spec: str) -> tuple[int, int | None]:
    """'512G' or '512G:64' (RAM, and CPUs if given) of a --project option."""
    size, _, cpus = str(spec).partition(":")
    ram = parse_size(size, "--project")
    if not 1 << 30 <= ram <= MAX_RAM:
        raise UsageError(f"--project: {spec!r}: the RAM must be 1G-64T (e.g. 512G, or 512G:64 with CPUs)")
    if cpus and not (cpus.isascii() and cpus.isdigit() and 1 <= int(cpus) <= 65536):
        raise UsageError(f"--project: {spec!r}: CPUs after ':' must be a whole number 1-65536")
    return ram, int(cpus) if cpus else None


def with_model() -> list[str]:
    """The reproducers whose analyze.py has a model (a `projection` function)."""
    from krig.reproducer import load_analyzer, load_reproducer, reproducer_names
    return [n for n in reproducer_names() if hasattr(load_analyzer(load_reproducer(n)), "projection")]


def require_model(repro, analyzer, extra: tuple) -> None:
    """--project given for a run whose reproducer has no model: one line saying which have one."""
    if extra and not hasattr(analyzer, "projection"):
        raise UsageError(f"--project: {repro.name} has no model to project a run with (analyze.py "
                         f"projection()); reproducers that have one: {', '.join(with_model()) or 'none'}")


def project(manifest, analyzer, metrics: dict, extra: tuple = ()) -> dict | None:
    """The projection of a run (its krig.record.Manifest and metric values, RunRecord.metrics) by
    its reproducer's analyze.py (`load_analyzer(repro)`, loaded once by the caller); None: it has
    no model, or the run tells none."""
    fn = getattr(analyzer, "projection", None)
    if fn is None or not metrics:
        return None
    return fn(dict(metrics), manifest.machine_said, tuple(extra))


def _gb(n: float) -> str:
    return f"{n / (1 << 30):,.3g} GiB" if n < 1 << 40 else f"{n / (1 << 40):,.3g} TiB"


def _duration(s: float) -> str:
    if not math.isfinite(s):
        return "-"
    return f"{s:,.0f} s" if s < 120 else f"{s / 60:,.0f} min" if s < 7200 else f"{s / 3600:,.1f} h"


def table(proj: dict) -> tuple[list, list]:
    """(header, rows) of a projection, as text cells."""
    if proj["kind"] == "per_bucket":
        return (["machine", "dentry hash buckets", "negatives", "memory", "% of RAM"],
                [[r["machine"], f"{r['dentry_buckets']:,}", f"{r['negatives']:,.0f}", _gb(r["bytes"]),
                  f"{r['pct_ram']:.3g}%"] for r in proj["rows"]])
    return (["machine", "CPUs", "negatives at the limit", "memory", "time to the limit"],
            [[r["machine"], f"{r['cpus']:,}" if r.get("cpus") else "-", f"{r['negatives']:,.0f}", _gb(r["bytes"]),
              _duration(r["seconds_to_limit"])] for r in proj["rows"]])


def text_lines(proj: dict) -> list[str]:
    """The projection as plain text lines (summary.txt, the reply): the basis, then the table."""
    header, rows = table(proj)
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    fmt = lambda cells: "  ".join(str(c).rjust(w) if i else str(c).ljust(w)   # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [fmt(header)] + [fmt(r) for r in rows]


def write(run_dir, proj: dict | None) -> None:
    """projection.json beside the metrics; none (an older one removed) if nothing is projected."""
    if proj is not None:
        safeio.write_json(run_dir, PROJECTION, proj)
    else:
        (pathlib.Path(run_dir) / PROJECTION).unlink(missing_ok=True)   # a link itself, never its target
