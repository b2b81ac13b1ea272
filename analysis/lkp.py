"""The comparison of two sides as the 0-day robot mails it (lkp-tests' `%stddev %change` table):

     base %stddev  %change       new %stddev      p  metric
    40000    0.0%   -99.9%         8   12.5% 0.029*  end_nr_negative

base and new are the means of each side's judged runs, %stddev the sample standard
deviation in % of the mean (blank with one run), %change the mean's change in % of
base's, p the Mann-Whitney U test's (analysis/stats.py; `*` when significant). At most
72 columns of ASCII, so it goes into a mail as it is. When a metric's name is too long
for its column, every metric gets its name on a line of its own, ending in a colon, with
its numbers on the next (one shape for every row, so no name is read as another's):

     base %stddev  %change       new %stddev      p
--------- ------- -------- --------- ------- ------
end_nr_negative:
    40000    0.0%  -100.0%         8    0.0% 0.194
peak_negative_vs_inflight:
       50    0.0%   -97.7%     1.155    1.7% 0.221

Input: a `krig compare` result (krig/record_compare.py Comparison).
"""
import math
import statistics

from krig.record_compare import Comparison

WIDTH = 72
HEAD = f"{'base':>9s} {'%stddev':>7s} {'%change':>8s} {'new':>9s} {'%stddev':>7s} {'p':>6s}  metric"
RULE = f"{'-' * 9} {'-' * 7} {'-' * 8} {'-' * 9} {'-' * 7} {'-' * 6}  {'-' * 6}"


def mean_sd(values: list) -> tuple:
    """(mean, stddev in % of the mean) of the finite values; (None, None) without any."""
    v = [float(x) for x in values if x is not None and math.isfinite(x)]
    if not v:
        return None, None
    mean = statistics.fmean(v)
    if len(v) < 2:
        return mean, None
    sd = statistics.stdev(v)
    return mean, (100.0 * sd / abs(mean) if mean else (0.0 if sd == 0 else None))


def num(v) -> str:
    if v is None:
        return "-"
    v = float(v)
    if v.is_integer() and abs(v) < 1e8:
        return str(int(v))
    return f"{v:.4g}"


def _pct(v, signed=False) -> str:
    if v is None:
        return ""
    if abs(v) >= 1000:
        return f"{v:+.0f}%" if signed else f"{v:.0f}%"
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def lkp_rows(res: Comparison) -> list:
    """[{metric, base, base_sd, new, new_sd, change, p, significant, n_base, n_new}] in res's order."""
    rows = []
    for r in res.metrics:
        bm, bsd = mean_sd(r.values["base"])
        nm, nsd = mean_sd(r.values["new"])
        change = 100.0 * (nm - bm) / abs(bm) if bm not in (None, 0) and nm is not None else None
        rows.append({"metric": r.metric, "base": bm, "base_sd": bsd, "new": nm, "new_sd": nsd,
                     "change": change, "p": r.p, "significant": r.significant, "verdict": r.verdict,
                     "n_base": r.base.n, "n_new": r.new.n})
    return rows


def table_lines(res: Comparison, metrics: list | None = None) -> list:
    """The table (header, rule, one row a metric; only `metrics` if given), each line <= 72 columns."""
    room = WIDTH - len(RULE) + 6
    rows = [row for row in lkp_rows(res) if metrics is None or row["metric"] in metrics]
    own_line = any(len(row["metric"]) > room for row in rows)
    out = [HEAD.rsplit("  metric", 1)[0], RULE.rsplit("  ", 1)[0]] if own_line else [HEAD, RULE]
    for row in rows:
        p = "-" if row["p"] is None else f"{row['p']:.3f}" + ("*" if row["significant"] else " ")
        nums = (f"{num(row['base']):>9s} {_pct(row['base_sd']):>7s} {_pct(row['change'], True):>8s} "
                f"{num(row['new']):>9s} {_pct(row['new_sd']):>7s} {p:>6s}")
        out += [f"{row['metric']}:", nums.rstrip()] if own_line else [f"{nums}  {row['metric']}"]
    return out


def format_lkp(res: Comparison) -> str:
    b, n = res.base, res.new
    out = [f"{res.reproducer} (preset {res.preset or 'defaults'})"[:WIDTH],
           f"base: {', '.join(b.kernels)}"[:WIDTH], f"  {b.judged} judged runs: {b.verdict_text}"[:WIDTH],
           f"new:  {', '.join(n.kernels)}"[:WIDTH], f"  {n.judged} judged runs: {n.verdict_text}"[:WIDTH],
           ""]
    out += [f"differs: {d}"[:WIDTH] for d in res.differences]
    out += table_lines(res)
    out += ["", "base/new: means of the judged runs; %stddev: sample standard",
            "deviation in % of the mean; p: Mann-Whitney U, two-sided;",
            f"* = significant (p < {res.alpha} with at least {res.min_n_per_side} runs a side)."]
    return "\n".join(line.encode("ascii", "replace").decode() for line in out)
