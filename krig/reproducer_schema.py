"""repro.toml's tables as schemas (krig/schema.py): requires, params, presets, trace, metrics,
thresholds. Every problem is one line naming the field. [[plots]] and [session] are in
krig/reproducer_plots.py; krig/reproducer.py puts a Reproducer together from all of them.
"""
import re
from typing import Any

from .config import PARAM_TYPES, coerce, parse_size
from .errors import UsageError
from .schema import ANY, OMIT, Field, a_table, check, missing, require, with_defaults

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
NUMERIC = ("int", "float", "size")
RESERVED_ENV = {"PATH", "HOME", "LANG", "SHELL", "USER", "PWD", "TERM", "IFS", "TMPDIR"}
THRESHOLD_KINDS = ("regression", "instrument")
# ring: events stay in the guest's ring buffer during the workload, extracted after it (no
# reader disturbs the workload; a run whose events do not fit is ERROR with what fit kept);
# record: trace-cmd record streams them out while the workload runs (longer than memory).
TRACE_MODES = ("ring", "record")
POSITIVE = "must be a positive integer, got {v}"


def parse_touch(value: Any, where: str) -> dict[str, Any]:
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


def _touch_term(amount: Any, value: Any, where: str) -> dict[str, Any]:
    if isinstance(amount, str) and amount.strip().endswith("%"):
        try:
            pct = float(amount.strip()[:-1])
        except ValueError:
            pct = -1.0
        if not 0 < pct <= 100:
            raise UsageError(f"{where}: {value!r}: a share of RAM is more than 0% and at most 100%")
        return {"pct": pct}
    return {"bytes": parse_size(amount, where)}


# [requires] or [presets.X.requires]: scratch_size, scratch_write, min_memory, output_size (sizes),
# min_cpus, programs, touch, host_budget_guard. scratch_write: how much of the scratch disk the
# workload writes (a sparse disk image grows by as much on the rig's work directory; the preflight
# counts it). touch: how much of the guest's RAM the workload may touch, "N%" of it or a size (a
# sparse guest is backed only where it touches; the preflight counts it, see touch_bytes()).
# host_budget_guard: the workload stops itself when a sparse guest's host budget
# (KRIG_HOST_BUDGET_FILE) falls to 0; its value, in touch's syntax, is what it touches outside that
# guard, so the preflight may admit it when the fixed cost plus that much fits although its whole
# touch does not. A key a preset leaves out is the reproducer's (Reproducer.requires_for).
REQUIRES = (
    Field("scratch_size", ANY, OMIT, convert=parse_size),
    Field("scratch_write", ANY, OMIT, convert=parse_size),
    Field("min_memory", ANY, OMIT, convert=parse_size),
    Field("min_cpus", int, OMIT, min=1, says=POSITIVE),
    Field("programs", list, OMIT),
    # what run.sh writes into $KRIG_OUT besides the trace (checked against free space before booting)
    Field("output_size", ANY, OMIT, convert=parse_size),
    Field("touch", ANY, OMIT, convert=parse_touch),
    Field("host_budget_guard", ANY, OMIT, convert=parse_touch),
)
REQUIRES_KEYS = {f.key for f in REQUIRES}
TOP_REQUIRES = with_defaults(REQUIRES, programs=[], output_size="1M")

TRACE = (
    Field("events", list, [], each=r"[a-z0-9_]+:[a-z0-9_*]+", says="{item!r} is not SYSTEM:EVENT"),
    Field("buffer_kb", int, 65536, min=1, says=POSITIVE),
    Field("mode", str, "ring", choices=TRACE_MODES),
)
PRESET_TRACE = (Field("buffer_kb", int, OMIT, min=1, says=POSITIVE), Field("mode", str, OMIT, choices=TRACE_MODES))

METRIC = (
    Field("better", str, choices=BETTER),
    Field("min_change_pct", (int, float), MIN_CHANGE_PCT, convert=lambda v, _: float(v), test=lambda v: 0 <= v < 1000,
          says="{raw!r} is not a number from 0 to 1000 (per cent of BASE's median)"),
    Field("unit", str),
    Field("description", str, ""),
)

# kind "regression": crossing it is FAIL; "instrument": the measurement itself is broken (ERROR);
# host_sensitive: a timing a busy host moves (crossed while the host was contended: ERROR naming the
# host's contention, not FAIL; an instrument of that kind, a sampler's gaps, names the host too)
THRESHOLD = (
    Field("kind", str, "regression", choices=THRESHOLD_KINDS),
    Field("metric", str),
    Field("min", (int, float), None),
    Field("max", (int, float), None),
    Field("host_sensitive", bool, False),
    Field("rationale", str),
)

# [params.<name>]: min, max and max_per_cpu are read in the parameter's own type (parse_param)
PARAM = (
    Field("type", str, "str", choices=PARAM_TYPES),
    Field("default", ANY),
    Field("help", str, ""),
    Field("choices", list, None),
    *(Field(key, ANY, OMIT) for key in RANGE_KEYS),
)


# repro.toml's top level; [[plots]] and [session] are read by krig/reproducer_plots.py
TOP = (
    Field("description", str), Field("measures", str, ""), Field("report", str, ""), Field("fixed_by", str, ""),
    Field("introduced_by", str, ""), Field("groups", list, []), Field("timeout", int, 600),
    Field("requires", dict, {}, table=TOP_REQUIRES), Field("params", dict, {}), Field("presets", dict, {}),
    Field("trace", dict, {}, table=TRACE), Field("metrics", dict, {}), Field("thresholds", list, []),
    Field("plots", list, []), Field("session", dict, None),
)


def parse_requires(requires: dict[str, Any], where: str, fields: tuple[Field, ...] = REQUIRES) -> dict[str, Any]:
    """[requires] or [presets.X.requires] (REQUIRES): only the keys it sets."""
    return check(requires, fields, where)


def parse_metrics(tables: dict[str, Any], w: str) -> dict[str, Any]:
    """repro.toml's [metrics.<name>] tables: {name: {unit, better, description, min_change_pct}}."""
    return {name: check(a_table(m, f"{w}.metrics.{name}", "expected a table with unit, better and description"),
                        METRIC, f"{w}.metrics.{name}") for name, m in tables.items()}


def parse_thresholds(rows: list[Any], metrics: dict[str, Any], w: str) -> list[dict[str, Any]]:
    """[[thresholds]] (THRESHOLD), each on a declared metric, with min or max."""
    out = []
    for i, t in enumerate(rows):
        tw = f"{w}.thresholds[{i}]"
        t = check(a_table(t, tw, "expected a table with metric, min/max and rationale"), THRESHOLD, tw)
        if t["metric"] not in metrics:
            raise UsageError(f"{tw}.metric: {t['metric']!r} is not a declared metric; "
                             f"allowed: {', '.join(sorted(metrics))}")
        if t["min"] is None and t["max"] is None:
            raise UsageError(f"{tw}: needs min or max")
        out.append(t)
    return out


def parse_params(tables: dict[str, Any], timeout: int, w: str) -> dict[str, Any]:
    """The built-in parameters (a reproducer may narrow a range or change a default) and [params.<name>]."""
    return {name: parse_param(name, spec, timeout, f"{w}.params.{name}")
            for name, spec in {**{k: dict(v) for k, v in BUILTIN_PARAMS.items()}, **tables}.items()}


def parse_param(name: str, spec: Any, timeout: int, pw: str) -> dict[str, Any]:
    """One parameter: {type, default, help, choices} and its range keys, each in the parameter's type."""
    if not NAME_RE.match(name) or name.upper() in RESERVED_ENV or name.upper().startswith("KRIG_"):
        raise UsageError(f"{pw}: parameter names are lower_case identifiers, not {sorted(RESERVED_ENV)} or krig_*")
    spec = {**BUILTIN_PARAMS.get(name, {}), **a_table(spec, pw, "expected a table with type, default and help")}
    if name == "timeout":
        spec.setdefault("default", timeout)
    p = check(spec, PARAM, pw)
    ptype = p["type"]
    for key in RANGE_KEYS:
        if key in p:
            if ptype not in NUMERIC or (key == "max_per_cpu" and ptype == "size"):
                raise UsageError(f"{pw}.{key}: only for int or float parameters (and min/max for size)")
            p[key] = (parse_size(p[key], f"{pw}.{key}") if ptype == "size"
                      else coerce(p[key], "float" if ptype == "float" else "int", f"{pw}.{key}"))
    if p.get("min") is not None and p.get("max") is not None and p["min"] > p["max"]:
        raise UsageError(f"{pw}: min {p['min']!r} is above max {p['max']!r}")
    p["default"] = coerce(p["default"], ptype, f"{pw}.default", p["choices"])
    check_range(p["default"], p, f"{pw}.default")
    return p


def parse_presets(tables: dict[str, Any], params: dict[str, Any],
                  w: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], dict[str, int], dict[str, str]]:
    """[presets.<name>]: parameter values, and optionally the preset's own [requires] and [trace]
    (buffer_kb, mode). Returns (values, requires, buffer_kb, trace mode), each by preset."""
    presets: dict[str, dict[str, Any]] = {}
    requires: dict[str, dict[str, Any]] = {}
    buffer_kb: dict[str, int] = {}
    modes: dict[str, str] = {}
    for name, values in tables.items():
        prw = f"{w}.presets.{name}"
        values = dict(a_table(values, prw, "expected a table of parameter values"))
        if "requires" in values:
            requires[name] = parse_requires(require(values, "requires", dict, prw), f"{prw}.requires")
        if "trace" in values:
            trace = check(require(values, "trace", dict, prw), PRESET_TRACE, f"{prw}.trace")
            if "mode" in trace:
                modes[name] = trace["mode"]
            if "buffer_kb" in trace or "mode" not in trace:
                buffer_kb[name] = missing(trace, "buffer_kb", f"{prw}.trace")
        presets[name] = {}
        for k, v in values.items():
            if k in ("requires", "trace"):
                continue
            if k not in params:
                raise UsageError(f"{prw}.{k}: not a parameter; allowed: {', '.join(sorted(params))}")
            presets[name][k] = coerce(v, params[k]["type"], f"{prw}.{k}", params[k]["choices"])
            check_range(presets[name][k], params[k], f"{prw}.{k}")
    return presets, requires, buffer_kb, modes


def check_touch_params(requires: dict[str, Any], params: dict[str, Any], where: str) -> None:
    """A touch term's parameter must be one of the reproducer's numeric parameters."""
    numeric = sorted(k for k, p in params.items() if p["type"] in NUMERIC)
    for key in ("touch", "host_budget_guard"):
        for term in (requires.get(key) or {}).get("terms", []):
            name = term.get("param")
            if name is not None and name not in numeric:
                raise UsageError(f"{where}.{key}: {name!r} is not a numeric parameter of the reproducer "
                                 f"(known: {', '.join(numeric)})")


def mib(nbytes: int) -> str:
    """A size parameter as the user would write it: 10M, 2038M, 1.5G."""
    return f"{nbytes / 2**30:g}G" if nbytes % 2**30 == 0 else f"{nbytes / 2**20:g}M"


def check_range(value: Any, spec: dict[str, Any], field: str, cpus: int | None = None) -> None:
    """A parameter value against its declared min, max and max_per_cpu (x the rig's CPUs)."""
    show = mib if spec.get("type") == "size" else repr
    if spec.get("min") is not None and value < spec["min"]:
        raise UsageError(f"{field}: {show(value)} is below the minimum {show(spec['min'])}")
    if spec.get("max") is not None and value > spec["max"]:
        raise UsageError(f"{field}: {show(value)} is above the maximum {show(spec['max'])}")
    per = spec.get("max_per_cpu")
    if per is not None and cpus and value > per * cpus:
        raise UsageError(f"{field}: {value!r} is above the maximum {per * cpus!r} "
                         f"({per!r} per CPU x {cpus} CPUs of the rig)")
