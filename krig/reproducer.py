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
    "timeout": {"type": "int", "min": 1, "max": 30 * 86400,
                "help": "seconds the workload may run before the verdict is HUNG"},
    "sample_interval": {"type": "float", "default": 1.0, "min": 0.05, "max": 3600,
                        "help": "seconds between dcache/slab/memory samples"},
}
RANGE_KEYS = ("min", "max", "max_per_cpu")
RESERVED_ENV = {"PATH", "HOME", "LANG", "SHELL", "USER", "PWD", "TERM", "IFS", "TMPDIR"}


@dataclasses.dataclass
class Threshold:
    metric: str
    min: float | None
    max: float | None
    rationale: str

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

    def resolve_params(self, preset: str | None, sets: dict, cpus: int | None = None) -> dict:
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

    def param_env(self, values: dict) -> dict:
        """Parameters as the environment run.sh reads (NAME in upper case)."""
        env = {}
        for k, v in values.items():
            if isinstance(v, bool):
                v = int(v)
            env[k.upper()] = str(v)
        return env


def check_range(value, spec: dict, field: str, cpus: int | None = None) -> None:
    """A parameter value against its declared min, max and max_per_cpu (x the rig's CPUs)."""
    if spec.get("min") is not None and value < spec["min"]:
        raise UsageError(f"{field}: {value!r} is below the minimum {spec['min']!r}")
    if spec.get("max") is not None and value > spec["max"]:
        raise UsageError(f"{field}: {value!r} is above the maximum {spec['max']!r}")
    per = spec.get("max_per_cpu")
    if per is not None and cpus and value > per * cpus:
        raise UsageError(f"{field}: {value!r} is above the maximum {per * cpus!r} "
                         f"({per!r} per CPU x {cpus} CPUs of the rig)")


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

    requires = optional(data, "requires", dict, w, {})
    reject_unknown(requires, {"scratch_size", "min_memory", "programs", "output_size"}, f"{w}.requires")
    req = {}
    # What run.sh writes into $KRIG_OUT besides the trace (checked against free space before booting).
    req["output_size"] = parse_size(requires.get("output_size", "1M"), f"{w}.requires.output_size")
    if "scratch_size" in requires:
        req["scratch_size"] = parse_size(requires["scratch_size"], f"{w}.requires.scratch_size")
    if "min_memory" in requires:
        req["min_memory"] = parse_size(requires["min_memory"], f"{w}.requires.min_memory")
    req["programs"] = optional(requires, "programs", list, f"{w}.requires", [])

    params = {}
    raw_params = optional(data, "params", dict, w, {})
    for pname, spec in {**{k: dict(v) for k, v in BUILTIN_PARAMS.items()}, **raw_params}.items():
        pw = f"{w}.params.{pname}"
        if not NAME_RE.match(pname) or pname.upper() in RESERVED_ENV or pname.upper().startswith("KRIG_"):
            raise UsageError(f"{pw}: parameter names are lower_case identifiers, not {sorted(RESERVED_ENV)} or krig_*")
        if not isinstance(spec, dict):
            raise UsageError(f"{pw}: expected a table with type, default and help")
        if pname in BUILTIN_PARAMS:     # a reproducer may narrow a built-in's range or change its default
            spec = {**BUILTIN_PARAMS[pname], **spec}
        reject_unknown(spec, {"type", "default", "help", "choices", *RANGE_KEYS}, pw)
        ptype = optional(spec, "type", str, pw, "str")
        if ptype not in PARAM_TYPES:
            raise UsageError(f"{pw}.type: {ptype!r} is not one of {', '.join(PARAM_TYPES)}")
        if pname == "timeout":
            spec.setdefault("default", timeout)
        if "default" not in spec:
            raise UsageError(f"{pw}: missing required field 'default'")
        choices = optional(spec, "choices", list, pw)
        params[pname] = {"type": ptype, "help": optional(spec, "help", str, pw, ""), "choices": choices}
        for key in RANGE_KEYS:
            if key in spec:
                if ptype not in ("int", "float", "size") or (key == "max_per_cpu" and ptype == "size"):
                    raise UsageError(f"{pw}.{key}: only for int or float parameters (and min/max for size)")
                params[pname][key] = (parse_size(spec[key], f"{pw}.{key}") if ptype == "size"
                                      else coerce(spec[key], "float" if ptype == "float" else "int", f"{pw}.{key}"))
        if params[pname].get("min") is not None and params[pname].get("max") is not None \
                and params[pname]["min"] > params[pname]["max"]:
            raise UsageError(f"{pw}: min {params[pname]['min']!r} is above max {params[pname]['max']!r}")
        params[pname]["default"] = coerce(spec["default"], ptype, f"{pw}.default", choices)
        check_range(params[pname]["default"], params[pname], f"{pw}.default")

    presets = {}
    for prname, values in optional(data, "presets", dict, w, {}).items():
        prw = f"{w}.presets.{prname}"
        if not isinstance(values, dict):
            raise UsageError(f"{prw}: expected a table of parameter values")
        presets[prname] = {}
        for k, v in values.items():
            if k not in params:
                raise UsageError(f"{prw}.{k}: not a parameter; allowed: {', '.join(sorted(params))}")
            presets[prname][k] = coerce(v, params[k]["type"], f"{prw}.{k}", params[k]["choices"])
            check_range(presets[prname][k], params[k], f"{prw}.{k}")

    trace = optional(data, "trace", dict, w, {})
    reject_unknown(trace, {"events", "buffer_kb"}, f"{w}.trace")
    events = optional(trace, "events", list, f"{w}.trace", [])
    for e in events:
        if not isinstance(e, str) or not re.match(r"^[a-z0-9_]+:[a-z0-9_*]+$", e):
            raise UsageError(f"{w}.trace.events: {e!r} is not SYSTEM:EVENT")
    buffer_kb = optional(trace, "buffer_kb", int, f"{w}.trace", 65536)

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
        reject_unknown(t, {"metric", "min", "max", "rationale"}, tw)
        metric = require(t, "metric", str, tw)
        if metric not in metrics:
            raise UsageError(f"{tw}.metric: {metric!r} is not a declared metric; allowed: {', '.join(sorted(metrics))}")
        lo, hi = optional(t, "min", (int, float), tw), optional(t, "max", (int, float), tw)
        if lo is None and hi is None:
            raise UsageError(f"{tw}: needs min or max")
        thresholds.append(Threshold(metric, lo, hi, require(t, "rationale", str, tw)))

    return Reproducer(
        name=name, path=path, description=description.strip(),
        report=optional(data, "report", str, w, ""), fixed_by=optional(data, "fixed_by", str, w, ""),
        introduced_by=optional(data, "introduced_by", str, w, ""),
        groups=optional(data, "groups", list, w, []), requires=req, params=params, presets=presets,
        trace_events=events, trace_buffer_kb=buffer_kb, metrics=metrics, thresholds=thresholds)
