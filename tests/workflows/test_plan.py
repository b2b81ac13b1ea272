"""A run planned once (workflows/plan.py): a group of runs reads its reproducer, its rig file and its
kernel once, and each run drives a fresh object of the rig; a validation resolves each side's
kernel once however many runs it makes. Counted on the fake rig (rigs/fake.py), every module's
reference to the loaders wrapped, so a second load anywhere below is counted too."""
import collections
import dataclasses
import sys

import pytest

import kernels.catalog
import krig.reproducer
import rigs
from test_validate import series_repo  # noqa: F401 (the fixture)

FAKE_RIG = """driver = "fake"
work_dir = "{work}"

[metrics]
answer = 42
files_seen = 100
"""


@pytest.fixture
def counted(monkeypatch):
    """{loader name: calls}: load_kernel, load_rig and load_reproducer counted wherever imported."""
    counts = collections.Counter()
    for owner, name in ((kernels.catalog, "load_kernel"), (rigs, "load_rig"), (krig.reproducer, "load_reproducer")):
        real = getattr(owner, name)

        def wrapper(*a, _real=real, _name=name, **k):
            counts[_name] += 1
            return _real(*a, **k)
        for mod in list(sys.modules.values()):
            if getattr(mod, name, None) is real and (getattr(mod, "__name__", "") or "").split(".")[0] in (
                    "kernels", "rigs", "krig", "workflows", "analysis"):
                monkeypatch.setattr(mod, name, wrapper)
    return counts


def fake_rig(tmp_path):
    (tmp_path / "work").mkdir(exist_ok=True)
    rig = tmp_path / "fake.toml"
    rig.write_text(FAKE_RIG.format(work=tmp_path / "work"))
    return rig


def test_a_group_of_three_loads_each_thing_once(tmp_path, counted, monkeypatch):
    from workflows import group, run as runner
    seen = []
    real = runner.execute

    def execute(plan, *a, **k):
        seen.append(plan)
        return real(plan, *a, **k)
    monkeypatch.setattr(group, "execute", execute)
    rigs_made = []
    real_fresh = rigs.protocol.Rig.fresh
    monkeypatch.setattr(rigs.protocol.Rig, "fresh", lambda self: rigs_made.append(real_fresh(self)) or rigs_made[-1])
    gdir, g, code = group.run_group("selftest-pass", str(fake_rig(tmp_path)), "distro", None, {}, 3, tmp_path / "g",
                                    results_root=tmp_path / "results", log=lambda *a, **k: None)
    assert (g.counted, g.verdicts, code) == (3, {"PASS": 3}, 0)
    assert dict(counted) == {"load_kernel": 1, "load_rig": 1, "load_reproducer": 1}
    assert len({id(p.kernel) for p in seen}) == 1 and len(seen) == 3       # one kernel value, passed down
    assert len({id(r) for r in rigs_made}) == 3 and all(r.name == "fake" for r in rigs_made)   # a fresh rig a run


def test_a_run_loads_each_thing_once(tmp_path, counted):
    from workflows.run import run
    d, v = run("selftest-pass", str(fake_rig(tmp_path)), "distro", results_root=tmp_path / "results",
               log=lambda *a, **k: None)
    assert v.verdict == "PASS"
    assert dict(counted) == {"load_kernel": 1, "load_rig": 1, "load_reproducer": 1}


def test_a_validation_resolves_each_side_once(series_repo, tmp_path, monkeypatch):
    """Four runs a side (groups faked): the base and the patched kernel resolved once each, and
    every group of a side given the same plan."""
    from workflows import validate as kv
    from workflows.plan import RunPlan
    from test_validate import _fake_groups
    calls = _fake_groups(monkeypatch, {"base": ("FAIL", -100), "new": ("PASS", 10)})
    resolved, plans = [], collections.defaultdict(set)
    monkeypatch.setattr(RunPlan, "with_kernel",
                        lambda self, text, log=print: resolved.append(text) or dataclasses.replace(self, kernel_arg=text))
    faked = kv.group_planned

    def group_planned(plan, repeat, gdir, log=print, session=None):
        plans[gdir.name].add(id(plan))
        return faked(plan, repeat, gdir, log, session)
    monkeypatch.setattr(kv, "group_planned", group_planned)
    kv.validate("selftest-pass", "tiny-6.1", str(series_repo["mbox"]), 4, out=tmp_path / "v",
                sender="Krig Tester <tester@example.org>", log=lambda *a: None)
    assert len(calls) == 8
    assert len(resolved) == 2 and resolved[0].endswith(f",series={series_repo['mbox']}") and resolved[1] == "tiny-6.1"
    assert {side: len(ids) for side, ids in plans.items()} == {"base": 1, "new": 1}


def test_a_rig_not_made_by_load_rig_has_no_fresh_copy():
    from rigs.fake import FakeRig
    with pytest.raises(TypeError, match="not made by rigs.load_rig"):
        FakeRig("x", {"driver": "fake"}).fresh()
