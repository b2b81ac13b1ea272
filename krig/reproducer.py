"""Reproducers: reproducers/<name>/ with repro.toml (the contract), run.sh,
config (kconfig fragment), analyze.py (metrics) and optional C helpers.

repro.toml is validated on load; every problem is one line naming the field.
"""
import dataclasses
import pathlib
import re

from . import REPRO_DIR
from .config import PARAM_TYPES, coerce, load_toml, optional, parse_size, reject_unknown, require
from .errors import UsageError

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
BETTER = ("higher", "lower", "info")
# Parameters every reproducer has; presets and --set may change them.
BUILTIN_PARAMS = {
    "timeout": {"type": "int", "help": "seconds the workload may run before the verdict is HUNG"},
    "sample_interval": {"type": "float", "default": 1.0, "help": "seconds between dcache/slab/memory samples"},
}
RESERVED_ENV = {"PATH", "HOME", "LANG", "SHELL", "USER", "PWD", "TERM", "IFS", "TMPDIR"}


THRESHOLD_KINDS = ("regression", "instrument")
REQUIRES_KEYS = {"scratch_size", "min_memory", "min_cpus", "programs"}


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
    report: str
    fixed_by: str
    introduced_by: str
    groups: list
    requires: dict
    params: dict          # name -> {type, default, help, choices}
    presets: dict         # name -> {param: value}
    trace_events: list
    trace_buffer_kb: int
    metrics: dict         # name -> {unit, better, description}
    thresholds: list
    preset_requires: dict = dataclasses.field(default_factory=dict)   # preset -> requires overriding
    preset_buffer_kb: dict = dataclasses.field(default_factory=dict)  # preset -> trace buffer_kb

    def requires_for(self, preset: str | None) -> dict:
        """The reproducer's requires, with the preset's own [presets.X.requires] on top."""
        return {**self.requires, **self.preset_requires.get(preset, {})}

    def buffer_kb_for(self, preset: str | None) -> int:
        """Per-CPU trace buffer: [presets.X.trace] buffer_kb, else [trace] buffer_kb."""
        return self.preset_buffer_kb.get(preset, self.trace_buffer_kb)

    def resolve_params(self, preset: str | None, sets: dict) -> dict:
        """defaults <- preset <- --set, each value checked against its type."""
        values = {k: p["default"] for k, p in self.params.items()}
        if preset is not None:
            if preset not in self.presets:
                allowed = ", ".join(sorted(self.presets)) or "(none)"
                raise UsageError(f"--preset {preset!r}: unknown preset for {self.name}; allowed: {allowed}")
            values.update(self.presets[preset])
        for k, raw in sets.items():
            if k not in self.params:
                raise UsageError(f"--set {k}: unknown parameter for {self.name}; allowed: {', '.join(sorted(self.params))}")
            p = self.params[k]
            values[k] = coerce(raw, p["type"], f"--set {k}", p.get("choices"))
        return values

    def param_env(self, values: dict) -> dict:
        """Parameters as the environment run.sh reads (NAME in upper case)."""
        env = {}
        for k, v in values.items():
            if isinstance(v, bool):
                v = int(v)
            env[k.upper()] = str(v)
        return env


def reproducer_names() -> list[str]:
    return sorted(p.parent.name for p in REPRO_DIR.glob("*/repro.toml"))


def load_reproducer(name: str, root: pathlib.Path = REPRO_DIR) -> Reproducer:
    path = root / name
    if not (path / "repro.toml").is_file():
        allowed = ", ".join(reproducer_names())
        raise UsageError(f"reproducer {name!r}: unknown; allowed: {allowed}")
    if not (path / "run.sh").is_file():
        raise UsageError(f"reproducers/{name}: missing run.sh")
    return parse_reproducer(name, path, load_toml(path / "repro.toml"))


def parse_reproducer(name: str, path: pathlib.Path, data: dict) -> Reproducer:
    w = f"reproducers/{name}/repro.toml"
    reject_unknown(data, {"description", "report", "fixed_by", "introduced_by", "groups", "timeout",
                          "requires", "params", "presets", "trace", "metrics", "thresholds"}, w)
    description = require(data, "description", str, w)
    timeout = optional(data, "timeout", int, w, 600)

    req = parse_requires(optional(data, "requires", dict, w, {}), f"{w}.requires")
    req.setdefault("programs", [])

    params = {}
    raw_params = optional(data, "params", dict, w, {})
    for pname, spec in {**{k: dict(v) for k, v in BUILTIN_PARAMS.items()}, **raw_params}.items():
        pw = f"{w}.params.{pname}"
        if not NAME_RE.match(pname) or pname.upper() in RESERVED_ENV or pname.upper().startswith("KRIG_"):
            raise UsageError(f"{pw}: parameter names are lower_case identifiers, not {sorted(RESERVED_ENV)} or krig_*")
        if not isinstance(spec, dict):
            raise UsageError(f"{pw}: expected a table with type, default and help")
        reject_unknown(spec, {"type", "default", "help", "choices"}, pw)
        ptype = optional(spec, "type", str, pw, "str")
        if ptype not in PARAM_TYPES:
            raise UsageError(f"{pw}.type: {ptype!r} is not one of {', '.join(PARAM_TYPES)}")
        if pname == "timeout":
            spec.setdefault("default", timeout)
        if "default" not in spec:
            raise UsageError(f"{pw}: missing required field 'default'")
        choices = optional(spec, "choices", list, pw)
        params[pname] = {"type": ptype, "help": optional(spec, "help", str, pw, ""), "choices": choices,
                         "default": coerce(spec["default"], ptype, f"{pw}.default", choices)}

    presets, preset_requires, preset_buffer_kb = {}, {}, {}
    for prname, values in optional(data, "presets", dict, w, {}).items():
        prw = f"{w}.presets.{prname}"
        if not isinstance(values, dict):
            raise UsageError(f"{prw}: expected a table of parameter values")
        values = dict(values)
        if "requires" in values:
            preset_requires[prname] = parse_requires(optional(values, "requires", dict, prw), f"{prw}.requires")
            del values["requires"]
        if "trace" in values:
            ptrace = optional(values, "trace", dict, prw)
            reject_unknown(ptrace, {"buffer_kb"}, f"{prw}.trace")
            preset_buffer_kb[prname] = positive_int(ptrace, "buffer_kb", f"{prw}.trace")
            del values["trace"]
        presets[prname] = {}
        for k, v in values.items():
            if k not in params:
                raise UsageError(f"{prw}.{k}: not a parameter; allowed: {', '.join(sorted(params))}")
            presets[prname][k] = coerce(v, params[k]["type"], f"{prw}.{k}", params[k]["choices"])

    trace = optional(data, "trace", dict, w, {})
    reject_unknown(trace, {"events", "buffer_kb"}, f"{w}.trace")
    events = optional(trace, "events", list, f"{w}.trace", [])
    for e in events:
        if not isinstance(e, str) or not re.match(r"^[a-z0-9_]+:[a-z0-9_*]+$", e):
            raise UsageError(f"{w}.trace.events: {e!r} is not SYSTEM:EVENT")
    buffer_kb = positive_int(trace, "buffer_kb", f"{w}.trace") if "buffer_kb" in trace else 65536

    metrics = {}
    for mname, m in optional(data, "metrics", dict, w, {}).items():
        mw = f"{w}.metrics.{mname}"
        if not isinstance(m, dict):
            raise UsageError(f"{mw}: expected a table with unit, better and description")
        reject_unknown(m, {"unit", "better", "description"}, mw)
        better = require(m, "better", str, mw)
        if better not in BETTER:
            raise UsageError(f"{mw}.better: {better!r} is not one of {', '.join(BETTER)}")
        metrics[mname] = {"unit": require(m, "unit", str, mw), "better": better,
                          "description": optional(m, "description", str, mw, "")}

    thresholds = []
    for i, t in enumerate(optional(data, "thresholds", list, w, [])):
        tw = f"{w}.thresholds[{i}]"
        if not isinstance(t, dict):
            raise UsageError(f"{tw}: expected a table with metric, min/max and rationale")
        reject_unknown(t, {"metric", "min", "max", "rationale", "kind"}, tw)
        kind = optional(t, "kind", str, tw, "regression")
        if kind not in THRESHOLD_KINDS:
            raise UsageError(f"{tw}.kind: {kind!r} is not one of {', '.join(THRESHOLD_KINDS)}")
        metric = require(t, "metric", str, tw)
        if metric not in metrics:
            raise UsageError(f"{tw}.metric: {metric!r} is not a declared metric; allowed: {', '.join(sorted(metrics))}")
        lo, hi = optional(t, "min", (int, float), tw), optional(t, "max", (int, float), tw)
        if lo is None and hi is None:
            raise UsageError(f"{tw}: needs min or max")
        thresholds.append(Threshold(metric, lo, hi, require(t, "rationale", str, tw), kind))

    return Reproducer(
        name=name, path=path, description=description.strip(),
        report=optional(data, "report", str, w, ""), fixed_by=optional(data, "fixed_by", str, w, ""),
        introduced_by=optional(data, "introduced_by", str, w, ""),
        groups=optional(data, "groups", list, w, []), requires=req, params=params, presets=presets,
        trace_events=events, trace_buffer_kb=buffer_kb, metrics=metrics, thresholds=thresholds,
        preset_requires=preset_requires, preset_buffer_kb=preset_buffer_kb)


def positive_int(table: dict, key: str, where: str) -> int:
    v = require(table, key, int, where)
    if v < 1:
        raise UsageError(f"{where}.{key}: must be a positive integer, got {v}")
    return v


def parse_requires(requires: dict, where: str) -> dict:
    """[requires] or [presets.X.requires]: scratch_size, min_memory (sizes), min_cpus, programs."""
    reject_unknown(requires, REQUIRES_KEYS, where)
    req = {}
    for key in ("scratch_size", "min_memory"):
        if key in requires:
            req[key] = parse_size(requires[key], f"{where}.{key}")
    if "min_cpus" in requires:
        req["min_cpus"] = positive_int(requires, "min_cpus", where)
    if "programs" in requires:
        req["programs"] = optional(requires, "programs", list, where, [])
    return req
