"""Reproducers: reproducers/<name>/ with repro.toml (the contract), run.sh,
config (kconfig fragment), analyze.py (metrics) and optional C helpers.

repro.toml is validated on load; every problem is one line naming the field.
"""
import dataclasses
import importlib.util
import pathlib
import re

from . import REPRO_DIR
from .config import PARAM_TYPES, coerce, load_toml, optional, parse_size, reject_unknown, require
from .errors import UsageError

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
BETTER = ("higher", "lower", "info")
# `krig compare` calls a metric better or worse only when the change is significant *and*
# at least this much of BASE's median (metrics.<name>.min_change_pct overrides it): a count
# that varies by a handful of events in 260,000 is "significant" at 4 runs a side.
MIN_CHANGE_PCT = 1.0
# Parameters every reproducer has; presets and --set may change them.
BUILTIN_PARAMS = {
    "timeout": {"type": "int", "min": 1, "max": 30 * 86400,
                "help": "seconds the workload may run before the verdict is HUNG"},
    "sample_interval": {"type": "float", "default": 1.0, "min": 0.05, "max": 3600,
                        "help": "seconds between dcache/slab/memory samples"},
}
RANGE_KEYS = ("min", "max", "max_per_cpu")
RESERVED_ENV = {"PATH", "HOME", "LANG", "SHELL", "USER", "PWD", "TERM", "IFS", "TMPDIR"}


THRESHOLD_KINDS = ("regression", "instrument")
# ring: events stay in the guest's ring buffer during the workload, extracted after it (no
# reader disturbs the workload; a run whose events do not fit is ERROR with what fit kept);
# record: trace-cmd record streams them out while the workload runs (longer than memory).
TRACE_MODES = ("ring", "record")
REQUIRES_KEYS = {"scratch_size", "scratch_write", "min_memory", "min_cpus", "programs", "output_size", "touch",
                 "host_budget_guard"}


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
    groups: list
    requires: dict
    params: dict          # name -> {type, default, help, choices}
    presets: dict         # name -> {param: value}
    trace_events: list
    trace_buffer_kb: int
    metrics: dict         # name -> {unit, better, description, min_change_pct}
    thresholds: list
    plots: list = dataclasses.field(default_factory=list)   # [[plots]], see PLOTS_DOC
    session: dict | None = None                              # where KernelShark opens
    preset_requires: dict = dataclasses.field(default_factory=dict)   # preset -> requires overriding
    preset_buffer_kb: dict = dataclasses.field(default_factory=dict)  # preset -> trace buffer_kb
    trace_mode: str = "ring"
    preset_trace_mode: dict = dataclasses.field(default_factory=dict)  # preset -> trace mode

    @property
    def timing_metrics(self) -> set:
        """The metrics of its timing (host_sensitive) thresholds: numbers a busy host moves."""
        return {t.metric for t in self.thresholds if t.host_sensitive}

    def requires_for(self, preset: str | None) -> dict:
        """The reproducer's requires, with the preset's own [presets.X.requires] on top."""
        return {**self.requires, **self.preset_requires.get(preset, {})}

    def buffer_kb_for(self, preset: str | None) -> int:
        """Per-CPU trace buffer: [presets.X.trace] buffer_kb, else [trace] buffer_kb."""
        return self.preset_buffer_kb.get(preset, self.trace_buffer_kb)

    def trace_mode_for(self, preset: str | None) -> str:
        """How the harness records: [presets.X.trace] mode, else [trace] mode (TRACE_MODES)."""
        return self.preset_trace_mode.get(preset, self.trace_mode)

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


REPRO_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


def _mib(nbytes: int) -> str:
    """A size parameter as the user would write it: 10M, 2038M, 1.5G."""
    return f"{nbytes / 2**30:g}G" if nbytes % 2**30 == 0 else f"{nbytes / 2**20:g}M"


def check_range(value, spec: dict, field: str, cpus: int | None = None) -> None:
    """A parameter value against its declared min, max and max_per_cpu (x the rig's CPUs)."""
    show = _mib if spec.get("type") == "size" else repr
    if spec.get("min") is not None and value < spec["min"]:
        raise UsageError(f"{field}: {show(value)} is below the minimum {show(spec['min'])}")
    if spec.get("max") is not None and value > spec["max"]:
        raise UsageError(f"{field}: {show(value)} is above the maximum {show(spec['max'])}")
    per = spec.get("max_per_cpu")
    if per is not None and cpus and value > per * cpus:
        raise UsageError(f"{field}: {value!r} is above the maximum {per * cpus!r} "
                         f"({per!r} per CPU x {cpus} CPUs of the rig)")


def reproducer_names() -> list[str]:
    return sorted(p.parent.name for p in REPRO_DIR.glob("*/repro.toml"))


def trace_mode(table: dict, where: str) -> str:
    mode = optional(table, "mode", str, where, "ring")
    if mode not in TRACE_MODES:
        raise UsageError(f"{where}.mode: {mode!r} is not one of {', '.join(TRACE_MODES)}")
    return mode


def load_reproducer(name, root: pathlib.Path = REPRO_DIR) -> Reproducer:
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


def parse_reproducer(name: str, path: pathlib.Path, data: dict) -> Reproducer:
    w = f"reproducers/{name}/repro.toml"
    reject_unknown(data, {"description", "measures", "report", "fixed_by", "introduced_by", "groups", "timeout",
                          "requires", "params", "presets", "trace", "metrics", "thresholds", "plots", "session"}, w)
    description = require(data, "description", str, w)
    timeout = optional(data, "timeout", int, w, 600)

    req = parse_requires(optional(data, "requires", dict, w, {}), f"{w}.requires")
    req.setdefault("programs", [])
    # What run.sh writes into $KRIG_OUT besides the trace (checked against free space before booting).
    req.setdefault("output_size", parse_size("1M", f"{w}.requires.output_size"))

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

    presets, preset_requires, preset_buffer_kb, preset_trace_mode = {}, {}, {}, {}
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
            reject_unknown(ptrace, {"buffer_kb", "mode"}, f"{prw}.trace")
            if "buffer_kb" in ptrace or "mode" not in ptrace:
                preset_buffer_kb[prname] = positive_int(ptrace, "buffer_kb", f"{prw}.trace")
            if "mode" in ptrace:
                preset_trace_mode[prname] = trace_mode(ptrace, f"{prw}.trace")
            del values["trace"]
        presets[prname] = {}
        for k, v in values.items():
            if k not in params:
                raise UsageError(f"{prw}.{k}: not a parameter; allowed: {', '.join(sorted(params))}")
            presets[prname][k] = coerce(v, params[k]["type"], f"{prw}.{k}", params[k]["choices"])
            check_range(presets[prname][k], params[k], f"{prw}.{k}")

    check_touch_params(req, params, f"{w}.requires")
    for prname, preq in preset_requires.items():
        check_touch_params(preq, params, f"{w}.presets.{prname}.requires")

    trace = optional(data, "trace", dict, w, {})
    reject_unknown(trace, {"events", "buffer_kb", "mode"}, f"{w}.trace")
    events = optional(trace, "events", list, f"{w}.trace", [])
    for e in events:
        if not isinstance(e, str) or not re.match(r"^[a-z0-9_]+:[a-z0-9_*]+$", e):
            raise UsageError(f"{w}.trace.events: {e!r} is not SYSTEM:EVENT")
    buffer_kb = positive_int(trace, "buffer_kb", f"{w}.trace") if "buffer_kb" in trace else 65536

    metrics = parse_metrics(optional(data, "metrics", dict, w, {}), w)

    thresholds = []
    for i, t in enumerate(optional(data, "thresholds", list, w, [])):
        tw = f"{w}.thresholds[{i}]"
        if not isinstance(t, dict):
            raise UsageError(f"{tw}: expected a table with metric, min/max and rationale")
        reject_unknown(t, {"metric", "min", "max", "rationale", "kind", "host_sensitive"}, tw)
        kind = optional(t, "kind", str, tw, "regression")
        if kind not in THRESHOLD_KINDS:
            raise UsageError(f"{tw}.kind: {kind!r} is not one of {', '.join(THRESHOLD_KINDS)}")
        metric = require(t, "metric", str, tw)
        if metric not in metrics:
            raise UsageError(f"{tw}.metric: {metric!r} is not a declared metric; allowed: {', '.join(sorted(metrics))}")
        lo, hi = optional(t, "min", (int, float), tw), optional(t, "max", (int, float), tw)
        if lo is None and hi is None:
            raise UsageError(f"{tw}: needs min or max")
        host_sensitive = optional(t, "host_sensitive", bool, tw, False)
        if host_sensitive and kind != "regression":
            raise UsageError(f"{tw}.host_sensitive: only for kind = \"regression\" (an instrument "
                             f"check is ERROR whatever the host did)")
        thresholds.append(Threshold(metric, lo, hi, require(t, "rationale", str, tw), kind,
                                    host_sensitive))

    return Reproducer(
        name=name, path=path, description=description.strip(),
        measures=" ".join(optional(data, "measures", str, w, "").split()),
        report=optional(data, "report", str, w, ""), fixed_by=optional(data, "fixed_by", str, w, ""),
        introduced_by=optional(data, "introduced_by", str, w, ""),
        groups=optional(data, "groups", list, w, []), requires=req, params=params, presets=presets,
        trace_events=events, trace_buffer_kb=buffer_kb, metrics=metrics, thresholds=thresholds,
        plots=parse_plots(data, w, events, metrics, thresholds, params), session=parse_session(data, w, events),
        preset_requires=preset_requires, preset_buffer_kb=preset_buffer_kb,
        trace_mode=trace_mode(trace, f"{w}.trace") if "mode" in trace else "ring",
        preset_trace_mode=preset_trace_mode)


def positive_int(table: dict, key: str, where: str) -> int:
    v = require(table, key, int, where)
    if v < 1:
        raise UsageError(f"{where}.{key}: must be a positive integer, got {v}")
    return v


def parse_metrics(tables: dict, w: str) -> dict:
    """repro.toml's [metrics.<name>] tables: {name: {unit, better, description, min_change_pct}}."""
    metrics = {}
    for mname, m in tables.items():
        mw = f"{w}.metrics.{mname}"
        if not isinstance(m, dict):
            raise UsageError(f"{mw}: expected a table with unit, better and description")
        reject_unknown(m, {"unit", "better", "description", "min_change_pct"}, mw)
        better = require(m, "better", str, mw)
        if better not in BETTER:
            raise UsageError(f"{mw}.better: {better!r} is not one of {', '.join(BETTER)}")
        floor = optional(m, "min_change_pct", (int, float), mw, MIN_CHANGE_PCT)
        if isinstance(floor, bool) or not 0 <= floor < 1000:
            raise UsageError(f"{mw}.min_change_pct: {floor!r} is not a number from 0 to 1000 "
                             f"(per cent of BASE's median)")
        metrics[mname] = {"unit": require(m, "unit", str, mw), "better": better,
                          "description": optional(m, "description", str, mw, ""),
                          "min_change_pct": float(floor)}
    return metrics


def parse_requires(requires: dict, where: str) -> dict:
    """[requires] or [presets.X.requires]: scratch_size, scratch_write, min_memory, output_size (sizes),
    min_cpus, programs, touch, host_budget_guard. scratch_write: how much of the scratch disk the workload
    writes (a sparse disk image grows by as much on the rig's work directory; the preflight counts it).
    touch: how much of the guest's RAM the workload may touch, "N%" of it or a size (a sparse guest is
    backed only where it touches; the preflight counts it, see touch_bytes()). host_budget_guard: the
    workload stops itself when a sparse guest's host budget (KRIG_HOST_BUDGET_FILE) falls to 0; its
    value, in touch's syntax, is what it touches outside that guard, so the preflight may admit it
    when the fixed cost plus that much fits although its whole touch does not."""
    reject_unknown(requires, REQUIRES_KEYS, where)
    req = {}
    for key in ("scratch_size", "scratch_write", "min_memory"):
        if key in requires:
            req[key] = parse_size(requires[key], f"{where}.{key}")
    if "min_cpus" in requires:
        req["min_cpus"] = positive_int(requires, "min_cpus", where)
    if "programs" in requires:
        req["programs"] = optional(requires, "programs", list, where, [])
    if "output_size" in requires:
        req["output_size"] = parse_size(requires["output_size"], f"{where}.output_size")
    for key in ("touch", "host_budget_guard"):
        if key in requires:
            req[key] = parse_touch(requires[key], f"{where}.{key}")
    return req


def parse_touch(value, where: str) -> dict:
    """requires.touch: "N%" of the guest's RAM ({"pct": N}), a size ({"bytes": n}), or a sum of
    such terms, each optionally times a numeric parameter of the run ("5% x settle_limit_x + 2%":
    {"terms": [{"pct": 5, "param": "settle_limit_x"}, {"pct": 2}]}), so the figure follows what
    the run was asked (touch_bytes)."""
    if isinstance(value, str) and ("+" in value or " x " in value or "*" in value):
        terms = []
        for part in value.split("+"):
            amount, _, param = part.replace("*", " x ").partition(" x ")
            term = _touch_term(amount.strip(), value, where)
            if param.strip():
                if not param.strip().isidentifier():
                    raise UsageError(f"{where}: {value!r}: {param.strip()!r} is not a parameter's name")
                term["param"] = param.strip()
            terms.append(term)
        return {"terms": terms}
    return _touch_term(value, value, where)


def _touch_term(amount, value, where: str) -> dict:
    if isinstance(amount, str) and amount.strip().endswith("%"):
        try:
            pct = float(amount.strip()[:-1])
        except ValueError:
            pct = -1.0
        if not 0 < pct <= 100:
            raise UsageError(f"{where}: {value!r}: a share of RAM is more than 0% and at most 100%")
        return {"pct": pct}
    return {"bytes": parse_size(amount, where)}


def touch_bytes(requires: dict, ram: int, params: dict | None = None, key: str = "touch") -> tuple[int, str]:
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
        what = f"{term['pct']:g}%" if "pct" in term else _mib(term["bytes"])
        if "param" in term:
            factor = float((params or {}).get(term["param"], 1))
            size, what = size * factor, f"{what} x {term['param']}={factor:g}"
        total += size
        said.append(what)
    of_ram = " of RAM" if any("pct" in t for t in terms) else ""
    return min(ram, int(total)), f"requires.{key} {' + '.join(said)}{of_ram}"


def check_touch_params(requires: dict, params: dict, where: str) -> None:
    """A touch term's parameter must be one of the reproducer's numeric parameters."""
    numeric = sorted(k for k, p in params.items() if p["type"] in ("int", "float", "size"))
    for key in ("touch", "host_budget_guard"):
        for term in (requires.get(key) or {}).get("terms", []):
            name = term.get("param")
            if name is not None and name not in numeric:
                raise UsageError(f"{where}.{key}: {name!r} is not a numeric parameter of the reproducer "
                                 f"(known: {', '.join(numeric)})")


# ----------------------------------------------------------------- [[plots]] and [session]
PLOTS_DOC = """The `[[plots]]` and `[session]` tables of repro.toml: what a report draws.

A plot is series against time (seconds since the first sample), with phase
marks, horizontal lines taken from the reproducer's own thresholds or
metrics, and shaded spans. A series comes from a samples.tsv column (or the
difference of two), or from a trace event grouped by a field (one bar per
group, at the group's first event). Every problem is one line naming the
field, like the rest of repro.toml.

    [[plots]]
    name = "negatives"                 # plot-negatives.png and .csv
    title = "..."
    ylabel = "dentries"
    y2label = "unlinks/s"              # optional right axis
    phases = ["unlink", "unlinked"]    # vertical marks (names in phases.tsv); true = all
    [[plots.series]]
    column = "nr_negative"             # or: event = "sys:ev", group_by = "field"
    minus = "..."                      # optional: column - minus
    times = "..."                      # optional: (column - minus) x another column
    during = ["unlink", "unlinked"]    # optional: only the samples between two phases
    transform = "value"                # value | rate | -rate | pct_ram
    scale = 1.0
    label = "nr_negative"
    axis = "left"                      # left | right
    mark_max = "{metric:.1f} MiB"      # event series: annotate the largest group (metrics.json values)
    mark_max_metric = "metric"         # event series: a point at the largest group, on the right axis
    [[plots.lines]]
    threshold = "metric"               # its min/max; or metric = "name" (value from metrics.json)
    times_params = ["p1", "p2"]        # multiply by parameters
    times_metric = "name"              # multiply by a metric's value
    optional = true                    # metric lines: drawn only when the metric has a value
    label = "..."
    axis = "left"
    [[plots.shade]]
    between = ["flood", "flooded"]     # phases
    from = 0.75                        # fraction of that span
    to = 1.0
    label = "last quarter"

    [session]                          # trace.kshark.json: where KernelShark opens
    window = "largest_group"           # or "steepest_rise"
    event = "xfs:xfs_ail_insert"       # largest_group: the burst of the largest group
    group_by = "new_lsn"
    column = "nr_negative"             # steepest_rise: samples column
    seconds = 4.0                      # steepest_rise: width of the window
"""


TRANSFORMS = ("value", "rate", "-rate", "pct_ram")
AXES = ("left", "right")
WINDOWS = ("largest_group", "steepest_rise")
PLOT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
EVENT_RE = re.compile(r"^[a-z0-9_]+:[a-z0-9_]+$")


def _axis(t: dict, where: str) -> str:
    axis = optional(t, "axis", str, where, "left")
    if axis not in AXES:
        raise UsageError(f"{where}.axis: {axis!r} is not one of {', '.join(AXES)}")
    return axis


def _table_list(data: dict, key: str, where: str) -> list:
    items = optional(data, key, list, where, [])
    for i, t in enumerate(items):
        if not isinstance(t, dict):
            raise UsageError(f"{where}.{key}[{i}]: expected a table")
    return items


def _series(s: dict, where: str, events: list, metrics: dict) -> dict:
    reject_unknown(s, {"column", "minus", "times", "transform", "scale", "label", "axis", "event", "group_by",
                       "mark_max", "mark_max_metric", "during"}, where)
    if ("column" in s) == ("event" in s):
        raise UsageError(f"{where}: needs exactly one of 'column' (samples.tsv) or 'event' (trace)")
    out = {"label": optional(s, "label", str, where, ""), "axis": _axis(s, where),
           "scale": float(optional(s, "scale", (int, float), where, 1.0))}
    if "column" in s:
        if "mark_max" in s or "mark_max_metric" in s or "group_by" in s:
            raise UsageError(f"{where}: 'group_by' and 'mark_max*' apply to an event, not to a column")
        during = optional(s, "during", list, where)
        if during is not None and (len(during) != 2 or not all(isinstance(x, str) for x in during)):
            raise UsageError(f"{where}.during: expected two phase names")
        out.update(kind="samples", column=require(s, "column", str, where),
                   minus=optional(s, "minus", str, where), times=optional(s, "times", str, where),
                   during=during)
        transform = optional(s, "transform", str, where, "value")
        if transform not in TRANSFORMS:
            raise UsageError(f"{where}.transform: {transform!r} is not one of {', '.join(TRANSFORMS)}")
        out["transform"] = transform
        out["label"] = out["label"] or out["column"]
    else:
        if "minus" in s or "times" in s or "transform" in s or "scale" in s:
            raise UsageError(f"{where}: 'minus', 'times', 'transform' and 'scale' apply to a column, "
                             "not to an event")
        ev = require(s, "event", str, where)
        if not EVENT_RE.match(ev):
            raise UsageError(f"{where}.event: {ev!r} is not SYSTEM:EVENT")
        if ev not in events:
            raise UsageError(f"{where}.event: {ev!r} is not traced; trace.events: {', '.join(events) or '(none)'}")
        mm = optional(s, "mark_max_metric", str, where)
        if mm is not None and mm not in metrics:
            raise UsageError(f"{where}.mark_max_metric: {mm!r} is not a declared metric")
        out.update(kind="groups", event=ev, group_by=require(s, "group_by", str, where),
                   mark_max=optional(s, "mark_max", str, where, ""), mark_max_metric=mm)
        out["label"] = out["label"] or f"{ev} per {out['group_by']}"
    return out


def _line(t: dict, where: str, metrics: dict, thresholds: list, params: dict) -> dict:
    reject_unknown(t, {"threshold", "metric", "times_params", "times_metric", "label", "axis", "optional"}, where)
    if ("threshold" in t) == ("metric" in t):
        raise UsageError(f"{where}: needs exactly one of 'threshold' or 'metric'")
    name = t.get("threshold") or t.get("metric")
    if not isinstance(name, str) or name not in metrics:
        raise UsageError(f"{where}: {name!r} is not a declared metric; allowed: {', '.join(sorted(metrics))}")
    if "threshold" in t and not any(th.metric == name for th in thresholds):
        raise UsageError(f"{where}.threshold: no threshold on metric {name!r}")
    times = optional(t, "times_params", list, where, [])
    for p in times:
        if p not in params or params[p]["type"] not in ("int", "float", "size"):
            raise UsageError(f"{where}.times_params: {p!r} is not a numeric parameter")
    tm = optional(t, "times_metric", str, where)
    if tm is not None and tm not in metrics:
        raise UsageError(f"{where}.times_metric: {tm!r} is not a declared metric")
    if_measured = optional(t, "optional", bool, where, False)
    if if_measured and "threshold" in t:
        raise UsageError(f"{where}.optional: only for a metric line (a threshold always has its limit)")
    return {"kind": "threshold" if "threshold" in t else "metric", "metric": name, "times_params": times,
            "times_metric": tm, "label": optional(t, "label", str, where, ""), "axis": _axis(t, where),
            "optional": if_measured}


def _shade(t: dict, where: str) -> dict:
    reject_unknown(t, {"between", "from", "to", "label"}, where)
    between = require(t, "between", list, where)
    if len(between) != 2 or not all(isinstance(p, str) for p in between):
        raise UsageError(f"{where}.between: expected two phase names")
    lo = float(optional(t, "from", (int, float), where, 0.0))
    hi = float(optional(t, "to", (int, float), where, 1.0))
    if not 0.0 <= lo < hi <= 1.0:
        raise UsageError(f"{where}: need 0 <= from < to <= 1, got from={lo} to={hi}")
    return {"between": between, "from": lo, "to": hi, "label": optional(t, "label", str, where, "")}


def parse_plots(data: dict, w: str, events: list, metrics: dict, thresholds: list, params: dict) -> list:
    plots, names = [], set()
    for i, p in enumerate(_table_list(data, "plots", w)):
        pw = f"{w}.plots[{i}]"
        reject_unknown(p, {"name", "title", "ylabel", "y2label", "phases", "series", "lines", "shade"}, pw)
        name = require(p, "name", str, pw)
        if not PLOT_NAME_RE.match(name) or name in names:
            raise UsageError(f"{pw}.name: {name!r} must be a unique lower-case name (a-z, 0-9, _ and -)")
        names.add(name)
        phases = p.get("phases", [])
        if not isinstance(phases, bool) and not (isinstance(phases, list) and all(isinstance(x, str) for x in phases)):
            raise UsageError(f"{pw}.phases: expected true or a list of phase names")
        series = [_series(s, f"{pw}.series[{j}]", events, metrics) for j, s in enumerate(_table_list(p, "series", pw))]
        if not series:
            raise UsageError(f"{pw}.series: a plot needs at least one series")
        plots.append({
            "name": name, "title": optional(p, "title", str, pw, name), "ylabel": optional(p, "ylabel", str, pw, ""),
            "y2label": optional(p, "y2label", str, pw, ""), "phases": phases, "series": series,
            "lines": [_line(t, f"{pw}.lines[{j}]", metrics, thresholds, params)
                      for j, t in enumerate(_table_list(p, "lines", pw))],
            "shade": [_shade(t, f"{pw}.shade[{j}]") for j, t in enumerate(_table_list(p, "shade", pw))],
        })
    return plots


def parse_session(data: dict, w: str, events: list) -> dict | None:
    s = optional(data, "session", dict, w)
    if s is None:
        return None
    sw = f"{w}.session"
    reject_unknown(s, {"window", "event", "group_by", "column", "seconds"}, sw)
    window = require(s, "window", str, sw)
    if window not in WINDOWS:
        raise UsageError(f"{sw}.window: {window!r} is not one of {', '.join(WINDOWS)}")
    if not events:
        raise UsageError(f"{sw}: a session needs trace.events (KernelShark opens trace.dat)")
    out = {"window": window, "seconds": float(optional(s, "seconds", (int, float), sw, 4.0))}
    if out["seconds"] <= 0:
        raise UsageError(f"{sw}.seconds: must be positive")
    if window == "largest_group":
        ev = require(s, "event", str, sw)
        if ev not in events:
            raise UsageError(f"{sw}.event: {ev!r} is not traced; trace.events: {', '.join(events)}")
        out.update(event=ev, group_by=require(s, "group_by", str, sw))
    else:
        out["column"] = require(s, "column", str, sw)
    return out


def load_analyzer(repro):
    """The reproducer's analyze.py as a module (metrics(), and optionally notes(),
    side_summary(), projection()), or None if it has none."""
    path = repro.path / "analyze.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"krig_analyze_{repro.name.replace('-', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
