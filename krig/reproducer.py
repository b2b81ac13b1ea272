"""Reproducers: reproducers/<name>/ with repro.toml (the contract), run.sh,
config (kconfig fragment), analyze.py (metrics) and optional C helpers.

repro.toml is validated on load against its schemas (krig/reproducer_schema.py, and
krig/reproducer_plots.py for [[plots]] and [session]); every problem is one line naming the field.
"""
import dataclasses
import importlib.util
import pathlib
import re
import types
from typing import Any

from . import REPRO_DIR
from .config import coerce, load_toml
from .errors import UsageError
from .reproducer_plots import parse_plots, parse_session
from .reproducer_schema import (TOP, check_range, check_touch_params, mib, parse_metrics,
                                parse_params, parse_presets, parse_thresholds)
from .schema import check


@dataclasses.dataclass
class Threshold:
    """kind "regression": crossing it is FAIL (the kernel shows the regression);
    kind "instrument": crossing it means the measurement itself is broken (lost trace
    events, sampler gaps, a kernel that cannot report the metric): ERROR, never FAIL."""
    metric: str
    min: float | None
    max: float | None
    rationale: str
    kind: str = "regression"
    # a timing metric the host's own load can move (a TCG guest runs as fast as the host
    # lets it): crossed while the host was contended, the run is ERROR, not FAIL
    host_sensitive: bool = False

    def describe(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        return " and ".join(parts)


@dataclasses.dataclass
class Reproducer:
    name: str
    path: pathlib.Path
    description: str
    measures: str         # one sentence: what it measures and what it cannot tell (the reply says it)
    report: str
    fixed_by: str
    introduced_by: str
    groups: list[str]
    requires: dict[str, Any]
    params: dict[str, Any]          # name -> {type, default, help, choices}
    presets: dict[str, Any]         # name -> {param: value}
    trace_events: list[str]
    trace_buffer_kb: int
    metrics: dict[str, Any]         # name -> {unit, better, description, min_change_pct}
    thresholds: list[Threshold]
    plots: list[dict[str, Any]] = dataclasses.field(default_factory=list)   # [[plots]], see krig/reproducer_plots.py PLOTS_DOC
    session: dict[str, Any] | None = None                              # where KernelShark opens
    preset_requires: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)   # preset -> requires overriding
    preset_buffer_kb: dict[str, int] = dataclasses.field(default_factory=dict)  # preset -> trace buffer_kb
    trace_mode: str = "ring"
    preset_trace_mode: dict[str, str] = dataclasses.field(default_factory=dict)  # preset -> trace mode

    @property
    def timing_metrics(self) -> set[str]:
        """The metrics of its timing (host_sensitive) thresholds: numbers a busy host moves."""
        return {t.metric for t in self.thresholds if t.host_sensitive}

    def requires_for(self, preset: str | None) -> dict[str, Any]:
        """The reproducer's requires, with the preset's own [presets.X.requires] on top."""
        return {**self.requires, **(self.preset_requires.get(preset, {}) if preset is not None else {})}

    def buffer_kb_for(self, preset: str | None) -> int:
        """Per-CPU trace buffer: [presets.X.trace] buffer_kb, else [trace] buffer_kb."""
        return self.preset_buffer_kb.get(preset, self.trace_buffer_kb) if preset is not None else self.trace_buffer_kb

    def trace_mode_for(self, preset: str | None) -> str:
        """How the harness records: [presets.X.trace] mode, else [trace] mode (TRACE_MODES)."""
        return self.preset_trace_mode.get(preset, self.trace_mode) if preset is not None else self.trace_mode

    def resolve_params(self, preset: str | None, sets: dict[str, Any], cpus: int | None = None) -> dict[str, Any]:
        """defaults <- preset <- --set, each value checked against its type and range.

        cpus: the rig's CPU count if known before booting (for `max_per_cpu`)."""
        values = {k: p["default"] for k, p in self.params.items()}
        source = {k: f"reproducers/{self.name}/repro.toml.params.{k}.default" for k in values}
        if preset is not None:
            if preset not in self.presets:
                allowed = ", ".join(sorted(self.presets)) or "(none)"
                raise UsageError(f"--preset {preset!r}: unknown preset for {self.name}; allowed: {allowed}")
            values.update(self.presets[preset])
            source.update({k: f"--preset {preset}: {k}" for k in self.presets[preset]})
        for k, raw in sets.items():
            if k not in self.params:
                raise UsageError(f"--set {k}: unknown parameter for {self.name}; allowed: {', '.join(sorted(self.params))}")
            p = self.params[k]
            values[k] = coerce(raw, p["type"], f"--set {k}", p.get("choices"))
            source[k] = f"--set {k}"
        for k, v in values.items():
            check_range(v, self.params[k], source[k], cpus)
        return values

    def param_env(self, values: dict[str, Any]) -> dict[str, str]:
        """Parameters as the environment run.sh reads (NAME in upper case)."""
        env = {}
        for k, v in values.items():
            if isinstance(v, bool):
                v = int(v)
            env[k.upper()] = str(v)
        return env


REPRO_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


def reproducer_names() -> list[str]:
    return sorted(p.parent.name for p in REPRO_DIR.glob("*/repro.toml"))


def load_reproducer(name: object, root: pathlib.Path = REPRO_DIR) -> Reproducer:
    """A reproducer by name. Names come from manifests and bundles other people
    wrote, so a name is a name (REPRO_NAME_RE), never a path."""
    if not isinstance(name, str) or not REPRO_NAME_RE.match(name):
        raise UsageError(f"reproducer {str(name)[:80]!r}: not a reproducer name (lower-case letters, digits "
                         "and '-', starting with a letter or digit)")
    path = root / name
    if not (path / "repro.toml").is_file():
        allowed = ", ".join(reproducer_names())
        raise UsageError(f"reproducer {name!r}: unknown; allowed: {allowed}")
    if not (path / "run.sh").is_file():
        raise UsageError(f"reproducers/{name}: missing run.sh")
    return parse_reproducer(name, path, load_toml(path / "repro.toml"))


def parse_reproducer(name: str, path: pathlib.Path, data: dict[str, Any]) -> Reproducer:
    """repro.toml's tables (TOP and the schemas below it), checked, as a Reproducer."""
    w = f"reproducers/{name}/repro.toml"
    top = check(data, TOP, w)
    params = parse_params(top["params"], top["timeout"], w)
    presets, preset_requires, preset_buffer_kb, preset_trace_mode = parse_presets(top["presets"], params, w)
    check_touch_params(top["requires"], params, f"{w}.requires")
    for prname, preq in preset_requires.items():
        check_touch_params(preq, params, f"{w}.presets.{prname}.requires")
    trace, metrics = top["trace"], parse_metrics(top["metrics"], w)
    thresholds = [Threshold(**t) for t in parse_thresholds(top["thresholds"], metrics, w)]
    return Reproducer(
        name=name, path=path, description=top["description"].strip(), measures=" ".join(top["measures"].split()),
        report=top["report"], fixed_by=top["fixed_by"], introduced_by=top["introduced_by"], groups=top["groups"],
        requires=top["requires"], params=params, presets=presets, trace_events=trace["events"],
        trace_buffer_kb=trace["buffer_kb"], metrics=metrics, thresholds=thresholds,
        plots=parse_plots(top, w, trace["events"], metrics, thresholds, params),
        session=parse_session(top, w, trace["events"]), preset_requires=preset_requires,
        preset_buffer_kb=preset_buffer_kb, trace_mode=trace["mode"], preset_trace_mode=preset_trace_mode)


def touch_bytes(requires: dict[str, Any], ram: int, params: dict[str, Any] | None = None, key: str = "touch") -> tuple[int, str]:
    """Bytes of a guest of `ram` bytes the workload may touch, and where the figure comes from:
    requires.touch (or the requires key named) with the run's parameters (params), or all of its
    RAM when the reproducer declares none. Never more than the RAM."""
    touch = requires.get(key)
    if touch is None:
        return ram, f"all of its RAM: no requires.{key} declared"
    terms = touch.get("terms", [touch])
    total, said = 0.0, []
    for term in terms:
        size = ram * term["pct"] / 100 if "pct" in term else term["bytes"]
        what = f"{term['pct']:g}%" if "pct" in term else mib(term["bytes"])
        if "param" in term:
            factor = float((params or {}).get(term["param"], 1))
            size, what = size * factor, f"{what} x {term['param']}={factor:g}"
        total += size
        said.append(what)
    of_ram = " of RAM" if any("pct" in t for t in terms) else ""
    return min(ram, int(total)), f"requires.{key} {' + '.join(said)}{of_ram}"


def load_analyzer(repro: Reproducer) -> types.ModuleType | None:
    """The reproducer's analyze.py as a module (metrics(), and optionally notes(),
    side_summary(), projection()), or None if it has none."""
    path = repro.path / "analyze.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"krig_analyze_{repro.name.replace('-', '_')}", path)
    assert spec is not None and spec.loader is not None, path      # a .py file always has a loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
