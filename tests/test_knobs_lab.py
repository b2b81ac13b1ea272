"""A knob-only A/B validated end to end on real guests (the long lab tier: `make test-lab`; four
neg-dentry-flood smoke runs a side).

tiny-6.1 (no series) on 1 GB guests, with and without `vm.nr_hugepages=HUGEPAGES` on the patched
side: the huge pages it reserves take most of the guest's memory out of the page allocator's
free pool, so the flood meets the kernel's own reclaim long before its 5% limit, and the dcache
shrinker holds the negatives where reclaim leaves them. Without it nothing reclaims before the
flood's bound (10% of RAM): the tunable moves both judged metrics (peak_negative_pct_ram,
last_quarter_growth_pct_of_limit), each significant by the Mann-Whitney U test four runs a side
allow. (`vm.vfs_cache_pressure` alone moves nothing here: without memory pressure the shrinker
it weighs never runs; docs/measurements.md.) The knob-gated series is tests/test_knobs_series.py.
"""
import pytest
from scipy.stats import mannwhitneyu

from conftest import build_kernels, qemu_pids, rig_with_memory
from test_knobs_series import side_runs, validate_flood

pytestmark = [pytest.mark.testlab, pytest.mark.kbuild, pytest.mark.guest]
HUGEPAGES = 430         # 2 MiB each: 860 MiB of the 1 GB guest's ~920 MiB free after boot
KNOB = f"vm.nr_hugepages={HUGEPAGES}"


def test_a_knob_only_ab(tmp_path):
    build_kernels("tiny-6.1")
    rig = rig_with_memory(tmp_path, "1G")
    p, state = validate_flood(tmp_path, "ab", "--rig", str(rig), "--series-sysctl", KNOB, "--repeat", "4")
    assert not qemu_pids(str(tmp_path)), "qemu left behind"
    assert state is not None and state["comparison"], p.stdout[-3000:] + p.stderr[-2000:]
    assert state["series"] is None and state["knobs"]["series"] == [f"sysctl {KNOB}"]
    assert state["base_kernel"]["release"] == state["new_kernel"]["release"]
    for run, man, _, _ in side_runs(tmp_path / "ab", "new"):
        assert man["knobs"]["sysctl"] == [{"name": "vm.nr_hugepages", "set": str(HUGEPAGES),
                                           "read_back": str(HUGEPAGES)}], run
    for run, man, _, _ in side_runs(tmp_path / "ab", "base"):
        assert "knobs" not in man, run
    rows = {r["metric"]: r for r in state["comparison"]["metrics"]}
    judged = state["judged_metrics"]
    assert set(judged) == {"peak_negative_pct_ram", "last_quarter_growth_pct_of_limit"}, judged
    text = (tmp_path / "ab" / "reply.txt").read_text()
    for metric in judged:
        row = rows[metric]
        base, new = row["values"]["base"], row["values"]["new"]
        assert len(base) == len(new) == 4, row
        # moved for the better (lower), every knob run below every base run: no overlap, so the
        # two-sided test gives at most 2/C(8,4) = 0.029 (a little less with ties on a side)
        assert max(new) < min(base), (metric, base, new)
        assert mannwhitneyu(base, new, alternative="two-sided").pvalue <= 0.029
        assert row["significant"] and row["p"] <= 0.029, row
        assert f"{row['p']:.3f}*" in text, (metric, text)        # the reply's table: significant
    assert p.returncode == 0 and state["answer"] == "fixed", state["reason"]
    assert all(f"{m} p = {rows[m]['p']:.3f}" in state["reason"] for m in judged), state["reason"]
    reply = " ".join(text.split())
    assert "on these knobs (one kernel, with and without them)" in reply
    assert f"patched knob sysctl {KNOB}" in reply
