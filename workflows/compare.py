"""`krig compare BASE... -- NEW...`: two sets of runs of one reproducer, metric by metric.

Each side is any mix of run directories and group directories (`krig run
--repeat`). Every run must be of the same reproducer, preset and parameters
(otherwise one line, exit 2); a different rig is a warning. Only judged runs
(PASS or FAIL) give numbers; the others are counted in the side's verdicts.

For every metric: n, median and min-max per side, the change of the median in
% of BASE's, better/worse by the metric's direction, and the two-sided
Mann-Whitney U test (analysis/stats.py: significant only at p < 0.05 and with
enough runs for the test to reach it, 4 per side). A change is called better or
worse only when it is significant and at least the metric's min_change_pct of
BASE's median (repro.toml, default 1%); a significant smaller one is "small". For every threshold: how
many runs held it on each side, and whether it flips. Output: a text table of
at most 100 columns, or --json; compare.html with both sides' time series
overlaid (analysis/compare_html.py) in --out DIR.
"""
import json
import pathlib
import sys

from analysis import projection
from analysis.compare_html import write_compare_html
from analysis.stats import ALPHA, TEST, change_pct, compare_samples, describe, direction, min_n_per_side, min_p
from analysis.summary import threshold_id, threshold_outcomes
from analysis.lkp import format_lkp

from krig import safeio
from .argcheck import output_dir
from krig.knobs import summary as knob_summary
from krig.errors import KrigError, UsageError
from .group import group_runs, metric_values, verdict_counts, verdict_text
from krig.reproducer import load_analyzer, load_reproducer
from krig.reproducer_schema import MIN_CHANGE_PCT
from krig.results import GROUP_FILE, compare_dir, run_state
from krig.record import Manifest, RunRecord
from krig.record_compare import Comparison, MetricRow, Side, Spread, ThresholdRow, ThresholdSide
from krig.rundir import is_run_dir
from krig.verdict import JUDGED

WIDTH = 100
USAGE = ("usage: krig compare [--json | --format text|lkp] [--out DIR] BASE... -- NEW... "
         "(run or group directories)")
FORMATS = ("text", "lkp")


def parse_args(tokens: list) -> dict:
    """The compare command's own argv: options, BASE dirs, `--`, NEW dirs."""
    opts: dict[str, object] = {"json": False, "out": None, "format": "text"}
    sides: list[list[str]] = [[], []]
    i = side = 0
    while i < len(tokens):
        t = tokens[i]
        if t == "--" and side == 0:
            side = 1
        elif t == "--json":
            opts["json"] = True
        elif t == "--format":
            if i + 1 >= len(tokens) or tokens[i + 1] not in FORMATS:
                raise UsageError(f"--format: one of {', '.join(FORMATS)}")
            opts["format"] = tokens[i + 1]
            i += 1
        elif t == "--out":
            if i + 1 >= len(tokens):
                raise UsageError("--out: needs a directory")
            opts["out"] = tokens[i + 1]
            i += 1
        elif t.startswith("-") and t != "-":
            raise UsageError(f"{t}: unknown option; {USAGE}")
        else:
            sides[side].append(t)
        i += 1
    if not sides[0] or not sides[1]:
        raise UsageError(f"BASE and NEW each need at least one directory; {USAGE}")
    return {**opts, "base": sides[0], "new": sides[1]}


def load_side(label: str, paths: list) -> list:
    """[(run_dir, verdict, RunRecord)] of the runs the given directories hold (krig/record.py)."""
    runs = []
    for p in map(safeio.given, paths):       # the user's own path: results/latest is followed
        if (p / GROUP_FILE).is_file():
            found = group_runs(p)
            if not found:
                raise UsageError(f"{label} {p}: the group has no runs")
        elif is_run_dir(p):
            found = [(p, run_state(p))]
        else:
            raise UsageError(f"{label} {p}: not a run or group directory (no manifest.json or {GROUP_FILE})")
        for d, v in found:
            try:
                rec = RunRecord.read(d)
            except (UsageError, OSError) as e:
                raise UsageError(f"{label} {d}: manifest.json unreadable ({e})") from None
            runs.append((d, v, rec))
    return runs


def check_same(base: list, new: list) -> list:
    """One line (UsageError) for a reproducer/preset/parameter mismatch; warnings for rigs."""
    ref_dir, ref = base[0][0], base[0][2].manifest
    for label, runs in (("BASE", base), ("NEW", new)):
        for d, _, rec in runs:
            m = rec.manifest
            for field in ("reproducer", "preset", "params"):
                if getattr(m, field) != getattr(ref, field):
                    raise UsageError(f"{label} {d}: {field} {getattr(m, field)!r}, but BASE {ref_dir} has "
                                     f"{getattr(ref, field)!r}: runs of different {field}s cannot be compared")
    rigs = {lab: sorted({r.manifest.rig_name or "?" for _, _, r in runs})
            for lab, runs in (("BASE", base), ("NEW", new))}
    if rigs["BASE"] != rigs["NEW"] or len(rigs["BASE"]) > 1:
        return [f"different rigs: BASE {', '.join(rigs['BASE'])}, NEW {', '.join(rigs['NEW'])}"]
    return []


def _side(repro, runs: list) -> Side:
    counts = verdict_counts(runs)
    return Side(runs=[str(d) for d, _, _ in runs], verdicts=counts,
                verdict_text=verdict_text(counts, sum(counts.values())),
                judged=sum(counts.get(v, 0) for v in JUDGED),
                kernels=sorted({r.manifest.kernel.name or "?" for _, _, r in runs}),
                releases=sorted({r.manifest.release or "?" for _, _, r in runs}),
                rigs=sorted({r.manifest.rig_name or "?" for _, _, r in runs}),
                outcome=side_outcome(repro, runs), projection=side_projection(repro, runs))


def side_outcome(repro, runs: list) -> str | None:
    """The reproducer's own one line about a side (analyze.py `side_summary(runs)`, each judged
    run's metric values; e.g. where the flood's negatives settled), or None."""
    fn = getattr(load_analyzer(repro), "side_summary", None)
    if fn is None:
        return None
    values = []
    for _, v, rec in runs:
        if v in JUDGED:
            try:
                values.append(rec.metrics)
            except (OSError, KrigError, AttributeError):
                continue
    return fn(values) if values else None


def side_projection(repro, runs: list) -> dict | None:
    """The reproducer's projection of a side to other machine sizes (analysis/projection.py): that
    of the judged run whose measured level is the side's median, or None."""
    projs, analyzer = [], load_analyzer(repro)       # analyze.py once, not once a run
    for _, v, rec in runs:
        if v in JUDGED:
            try:
                p = projection.project(rec.manifest, analyzer, rec.metrics)
            except (OSError, KrigError, AttributeError, ValueError):
                continue
            if p:
                projs.append(p)
    kinds = {p["kind"] for p in projs}
    if len(kinds) != 1:          # none, or the runs disagree (bounded in some, not in others)
        return None
    key = "measured_per_bucket" if kinds == {"per_bucket"} else "measured_rate_per_cpu"
    projs.sort(key=lambda p: p[key])
    return {**projs[(len(projs) - 1) // 2], "runs": len(projs)}


def _thresholds(repro, base: list, new: list) -> list[ThresholdRow]:
    """Per threshold and side: how many judged runs held it. A timing (host_sensitive) threshold
    crossed in a run whose host was contended is not counted (`contended`): the host moved it,
    and a run FAILed on other thresholds kept that crossing in its reason, not as the kernel's."""
    rows = []
    # each judged run's record read once (thresholds.json, and metrics.json for a timing crossing)
    judged = {label: [threshold_outcomes(rec.run, repro) for _, v, rec in runs if v in JUDGED]
              for label, runs in (("base", base), ("new", new))}
    for t in repro.thresholds:
        sides = {}
        for label in ("base", "new"):
            outcomes = [o.get(threshold_id(t)) for o in judged[label]]
            held = [o == "pass" for o in outcomes if o not in (None, "contended")]
            lost = outcomes.count("contended")
            sides[label] = ThresholdSide(sum(held), len(held), lost,
                                         "-" if not held else "held" if all(held) else "crossed" if not any(held)
                                         else "mixed")
        b, n = sides["base"].state, sides["new"].state
        rows.append(ThresholdRow(threshold_id(t), t.metric, t.kind, sides["base"], sides["new"],
                                 flips=b != n and {b, n} == {"held", "crossed"}))
    return rows


KNOB_FACT = "knobs: "        # the line of differences() naming each side's --sysctl and --cmdline


def _facts(man: Manifest) -> dict:
    """The facts of one run that make its numbers incomparable with another's when they differ."""
    machine = man.machine_said
    out = {}
    for k, v in (man.kernel.debug_options or {}).items():
        out[k] = v
    for where, cpu in (("machine", machine.cpu), ("host", man.host_cpu)):
        for k, v in (cpu or {}).items():
            if k != "mhz":          # the current clock moves with load; governor and turbo decide it
                out[f"{where} cpu {k}"] = v
    for k in ("dentry_hash_entries", "inode_hash_entries"):    # a per-bucket bound's share of RAM
        if getattr(machine, k) is not None:
            out[f"machine {k}"] = getattr(machine, k)
    out[KNOB_FACT[:-2]] = "; ".join(knob_summary(man.knobs)) or "none"     # --sysctl, --cmdline as read back
    return out


def differences(base: list, new: list) -> list:
    """'CONFIG_XFS_DEBUG: BASE n, NEW y' for every recorded fact the two sides do not share."""
    sides = []
    for runs in (base, new):
        vals: dict[str, set[str]] = {}
        for _, _, rec in runs:
            for k, v in _facts(rec.manifest).items():
                vals.setdefault(k, set()).add("-" if v is None else str(v))
        sides.append(vals)
    out = []
    for k in sorted(set(sides[0]) & set(sides[1])):
        b, n = sorted(sides[0][k]), sorted(sides[1][k])
        if b != n:
            out.append(f"{k}: BASE {'/'.join(b)}, NEW {'/'.join(n)}")
    return out


def compare(base_paths: list, new_paths: list) -> Comparison:
    base, new = load_side("BASE", base_paths), load_side("NEW", new_paths)
    both = {d.resolve() for d, _, _ in base} & {d.resolve() for d, _, _ in new}
    if both:
        raise UsageError(f"NEW {new_paths[0]}: {len(both)} of its runs are BASE's too ({sorted(both)[0]}); "
                         "compare the runs of one kernel with those of another: BASE... -- NEW...")
    warnings = check_same(base, new)
    man = base[0][2].manifest
    repro = load_reproducer(man.reproducer or "?")
    bvals, bmeta = metric_values(base)
    nvals, nmeta = metric_values(new)
    rows = []
    for name in list(bvals) + [n for n in nvals if n not in bvals]:
        meta = bmeta.get(name) or nmeta[name]
        b, n = Spread(**describe(bvals.get(name, []))), Spread(**describe(nvals.get(name, [])))
        ch = change_pct(b.median, n.median)
        test = compare_samples(bvals.get(name, []), nvals.get(name, []))
        way = direction(ch, meta["better"])
        floor = repro.metrics.get(name, {}).get("min_change_pct", MIN_CHANGE_PCT)
        material = ch is not None and abs(ch) >= floor
        rows.append(MetricRow(name, meta["unit"], meta["better"], b, n, change_pct=ch, direction=way, **test,
                              min_change_pct=floor, material=material,
                              values={"base": bvals.get(name, []), "new": nvals.get(name, [])},
                              # what the change is called: better/worse only when significant and material
                              verdict=(way if material else "small") if test["significant"] and
                              way in ("better", "worse") else ""))
    return Comparison(repro.name, man.preset, man.params, TEST, ALPHA, min_n_per_side(),
                      _side(repro, base), _side(repro, new), warnings, differences(base, new),
                      rows, _thresholds(repro, base, new),
                      judged_runs={"base": [d for d, v, _ in base if v in JUDGED],
                                   "new": [d for d, v, _ in new if v in JUDGED]})


def _n(v) -> str:
    """A number in at most 9 characters (full precision is in --json)."""
    if v is None:
        return "-"
    a = abs(v)
    for above, div, suf in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if a >= above:
            return f"{v / div:.4g}{suf}"
    return f"{v:.4g}"


def _range(s: Spread) -> str:
    return "-" if s.min is None else f"{_n(s.min)}-{_n(s.max)}"


def _pct(v) -> str:
    if v is None:
        return "-"
    return f"{v:+.0f}%" if abs(v) >= 1000 else f"{v:+.1f}%"


def _p(row: MetricRow) -> str:
    if row.p is None:
        return "-"
    return f"{row.p:.3f}" + ("*" if row.significant else "")


def format_text(res: Comparison) -> str:
    b, n = res.base, res.new
    out = [f"krig compare: {res.reproducer}, preset {res.preset or '(defaults)'}",
           f"BASE: {', '.join(b.kernels)} ({', '.join(b.releases)}): {b.verdict_text}",
           f"NEW:  {', '.join(n.kernels)} ({', '.join(n.releases)}): {n.verdict_text}"]
    for label, side in (("BASE", b), ("NEW", n)):
        if side.outcome:
            out.append(f"{label + ':':5s} {side.outcome}")
    out += [f"warning: {w}" for w in res.warnings]
    out += [f"differs (numbers may not be comparable): {d}" for d in res.differences]
    out += ["", f"{'':26s} {'BASE, n=' + str(b.judged):^24s} {'NEW, n=' + str(n.judged):^24s}",
            f"{'metric':26s} {'median':>8s} {'min-max':>15s} {'median':>8s} {'min-max':>15s} "
            f"{'change':>8s} {'p':>6s} {'':7s}"]
    uneven = []
    for r in res.metrics:
        name = r.metric if len(r.metric) <= 26 else r.metric[:25] + "~"
        bs, ns = r.base, r.new
        out.append(f"{name:26s} {_n(bs.median):>8s} {_range(bs):>15s} "
                   f"{_n(ns.median):>8s} {_range(ns):>15s} "
                   f"{_pct(r.change_pct):>8s} {_p(r):>6s} {r.verdict:7s}".rstrip())
        if (bs.n, ns.n) != (b.judged, n.judged):
            uneven.append(f"{r.metric} {bs.n} vs {ns.n}")
    out.append("")
    out.append(f"p: {res.test}. * = significant: p < {res.alpha}")
    out.append(f"   and at least {res.min_n_per_side} judged runs a side (3 vs 3 cannot reach it: its "
               f"smallest p is {min_p(3, 3):.2f}).")
    out.append("   change: NEW median vs BASE median; better/worse only when significant and at least")
    out.append(f"   the metric's min_change_pct (default {MIN_CHANGE_PCT:g}%); small: significant but smaller.")
    if any(r.p is not None and not r.reachable for r in res.metrics):
        out.append(f"   with {b.judged} vs {n.judged} judged runs the smallest possible p is "
                   f"{min_p(b.judged, n.judged):.3f}: nothing here can be significant.")
    for u in uneven:
        out.append(f"   fewer values than runs: {u}")
    if res.thresholds:
        out += ["", f"{'threshold':52s} {'BASE held':>10s} {'NEW held':>10s}  flips"]
        for t in res.thresholds:
            name = t.threshold if len(t.threshold) <= 52 else t.threshold[:51] + "~"
            out.append(f"{name:52s} {_held(t.base):>10s} {_held(t.new):>10s}  {'FLIPS' if t.flips else '-'}")
        lost = sum(side.contended for t in res.thresholds for side in (t.base, t.new))
        if lost:
            out.append(f"   +k: crossings of a timing threshold in a run whose host was contended, not counted ({lost})")
    return "\n".join(line[:WIDTH] for line in out)


def _held(side: ThresholdSide) -> str:
    """held/judged, and +k timing crossings left out for the host's contention."""
    return f"{side.held}/{side.judged}" + (f" +{side.contended}" if side.contended else "")


def default_out(res: Comparison) -> pathlib.Path:
    assert res.reproducer is not None, "compare() names the reproducer of both sides"
    return compare_dir(res.reproducer)


def main(tokens: list) -> int:
    opts = parse_args(tokens)
    if opts["out"] is not None:
        output_dir(opts["out"], "--out")
    res = compare(opts["base"], opts["new"])
    out = pathlib.Path(opts["out"]) if opts["out"] else default_out(res)
    notes = write_compare_html(res, out)
    public = {**res.to_json(), "html": str(out / "compare.html")}
    show = safeio.printable_text         # a server's release in a line: no escape sequence
    for w in res.warnings:
        print(show(f"krig: warning: {w}"), file=sys.stderr)
    for note in notes:
        print(show(f"krig: compare: {note}"), file=sys.stderr)
    if opts["json"]:
        print(json.dumps(public, indent=1))
    elif opts["format"] == "lkp":
        print(show(format_lkp(res)))
    else:
        print(show(format_text(res)))
        print(f"\ncompare.html: {out / 'compare.html'}")
    return 0


def cmd_compare(a) -> int:
    """`krig compare BASE... -- NEW...` (the options parsed again by main, as `python -m` does)."""
    return main((["--json"] if a.json else []) + (["--out", a.out] if a.out else [])
                + ["--format", a.format] + a.dirs)
