"""Numbers over repeated runs: spread of one sample, and whether two samples differ.

The test is the two-sided Mann-Whitney U test (`scipy.stats.mannwhitneyu`): it
assumes no distribution, only that runs are independent, and works on the
handful of runs a TCG machine can afford. Its p-value has a floor set by the
sample sizes alone: with n1 and n2 runs and no ties, the most extreme
ordering has probability 1 / C(n1+n2, n1), so the smallest two-sided p is
2 / C(n1+n2, n1). With 3 runs a side that is 2/20 = 0.10: no result of 3 vs 3
can be significant at 0.05, however far apart. 4 vs 4 reaches 2/70 = 0.029
(3 vs 5: 0.036; 2 vs 8: 0.044). A change is called significant only when
p < ALPHA *and* that floor is below ALPHA, so a tie-corrected approximation
can never make a too-small sample look significant.
"""
import math

import numpy as np

ALPHA = 0.05
TEST = "Mann-Whitney U, two-sided (scipy.stats.mannwhitneyu)"


def describe(values) -> dict:
    """n, median, min, max of the finite values (None where there are none)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": int(len(v)), "median": float(np.median(v)), "min": float(v.min()), "max": float(v.max())}


def min_p(n1: int, n2: int) -> float:
    """The smallest two-sided p the exact test can give for samples of n1 and n2."""
    if n1 < 1 or n2 < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def min_n_per_side(alpha: float = ALPHA) -> int:
    """The smallest equal sample size per side whose floor is below alpha (4 for 0.05)."""
    n = 1
    while min_p(n, n) >= alpha:
        n += 1
    return n


def compare_samples(base, new, alpha: float = ALPHA) -> dict:
    """{p, u, floor, reachable, significant} for two samples (finite values only).

    p is None when a side is empty. Identical constant samples give p = 1."""
    a = [x for x in base if x is not None and math.isfinite(x)]
    b = [x for x in new if x is not None and math.isfinite(x)]
    floor = min_p(len(a), len(b))
    out = {"p": None, "u": None, "floor": floor, "reachable": floor < alpha, "significant": False}
    if not a or not b:
        return out
    if len(set(a) | set(b)) == 1:          # every value equal: nothing to tell apart
        out.update(p=1.0, u=len(a) * len(b) / 2)
        return out
    from scipy.stats import mannwhitneyu   # 0.8 s to import: only where a test is made
    r = mannwhitneyu(a, b, alternative="two-sided", method="auto")
    p = float(r.pvalue)
    out.update(p=p, u=float(r.statistic), significant=bool(p < alpha and floor < alpha))
    return out


def change_pct(base_median, new_median):
    """Change of the median in % of the base's; None if undefined (no value, base 0)."""
    if base_median is None or new_median is None or base_median == 0:
        return None
    return 100.0 * (new_median - base_median) / abs(base_median)


def direction(change, better: str) -> str:
    """'better', 'worse', 'same' or '' (the metric has no better direction or no change)."""
    if change is None or better not in ("lower", "higher"):
        return ""
    if change == 0:
        return "same"
    return "better" if (change < 0) == (better == "lower") else "worse"
