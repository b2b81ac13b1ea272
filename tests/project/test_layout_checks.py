"""The layout's checks (tests/project/test_layout.py) see what they are for: each rule's function, run on a
copy of the tree with one line added that breaks it, names that line; on the copy as it is, and
on the checkout, it names nothing."""
import os
import pathlib
import shutil

import pytest

import test_layout as layout
import test_layout_kernel_text as kernel_text
import test_layout_records as records
from conftest import ROOT

TOPS = (*layout.PARTS, "reproducers", "bench")


def copy_tree(dst: pathlib.Path) -> pathlib.Path:
    """The checkout's Python files (the parts, the reproducers' analyze.py, the benchmarks)."""
    def skip(d, names):
        return [n for n in names if n in ("bin", "__pycache__")
                or not (n.endswith(".py") or os.path.isdir(os.path.join(d, n)))]
    for top in TOPS:
        shutil.copytree(ROOT / top, dst / top, ignore=skip)
    return dst


def python_files(root: pathlib.Path) -> list:
    return [str(p.relative_to(root)) for top in TOPS for p in (root / top).rglob("*.py")]


RULES = {"wrong way": layout.wrong_way_imports, "cycle": layout.import_cycle,
         "analyzer": layout.analyzer_imports, "vocabulary": layout.vocabulary_imports,
         "private": layout.private_name_imports, "driver": layout.driver_imports,
         "size": lambda root: layout.too_long(root, python_files(root)),
         "manifest": records.manifest_reads_under, "kernel text": kernel_text.second_readers}


LONG_FUNCTION = "def padded():\n" + "".join(f"    x{i} = {i}\n" for i in range(81))
CASES = [  # (rule, file, line(s) added, what the rule must name)
    ("driver", "workflows/run.py", "import rigs.qemu.rig\n", "workflows.run imports rigs.qemu.rig"),
    ("driver", "workflows/bisect.py", "from rigs.ipmi.lock import lock_dir\n",
     "workflows.bisect imports rigs.ipmi.lock"),
    ("driver", "workflows/group.py", "from rigs import fake\n", "workflows.group imports rigs.fake"),
    ("wrong way", "rigs/fake.py", "from workflows.run import run\n",
     "rigs.fake (rigs) imports workflows.run (workflows)"),
    ("wrong way", "rigs/__init__.py", "DRIVERS['x'] = 'workflows.run:execute'\n",
     "rigs (rigs) imports workflows.run (workflows)"),
    ("wrong way", "kernels/build.py", "HANDLER = 'workflows.bisect:cmd_bisect'\n",
     "kernels.build (kernels) imports workflows.bisect (workflows)"),
    ("wrong way", "analysis/trace/tracecli.py", "import analysis.report\n",
     "analysis.trace.tracecli (library) imports analysis.report (analysis)"),
    ("wrong way", "analysis/report.py", "from kernels import spec\n",
     "analysis.report (analysis) imports kernels.spec (kernels)"),
    ("vocabulary", "krig/errors.py", "import rigs\n", "krig.errors imports rigs"),
    ("cycle", "krig/errors.py", "from krig import config\n", "krig.config"),
    ("analyzer", "reproducers/xfs-ail-storm/analyze.py", "from rigs import hashsize\n",
     "reproducers/xfs-ail-storm/analyze.py imports rigs.hashsize (rigs)"),
    ("private", "workflows/run.py", "from krig.results import _USERINFO\n",
     "workflows.run imports krig.results._USERINFO"),
    ("size", "workflows/run.py", LONG_FUNCTION, "workflows/run.py:padded: 82 lines"),
    ("size", "krig/errors.py", "\n" * 500, "krig/errors.py: "),
    ("manifest", "workflows/run.py", "m = json.loads((d / 'manifest.json').read_text())\n",
     "workflows/run.py line "),
    ("manifest", "analysis/summary.py", "v = RunDir(d).json(VERDICT, {})\n", "analysis/summary.py line "),
    ("kernel text", "workflows/bundle.py", 'def tree_of(arg):\n    head, *opts = arg.split(",")\n'
     '    return head.rpartition("@")[0]\n', "workflows/bundle.py line "),
    ("kernel text", "krig/results.py", 'def scope(arg):\n    return [o for o in arg.split(",") '
     'if o.startswith("drivers-scope=")]\n', "krig/results.py line "),
    ("kernel text", "workflows/validate.py", "def built(g):\n    return g.kind in ('git', 'toml')\n",
     "workflows/validate.py line "),
]


def test_the_checks_name_nothing_on_a_copy_of_the_tree(tmp_path):
    root = copy_tree(tmp_path / "copy")
    assert {rule: f(root) for rule, f in RULES.items()} == dict.fromkeys(RULES, [])
    assert set(RULES) == {rule for rule, *_ in CASES}  # every rule is broken below


@pytest.mark.parametrize("rule,rel,added,named", CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_each_check_sees_its_rule_broken(tmp_path, rule, rel, added, named):
    root = copy_tree(tmp_path / "copy")
    with open(root / rel, "a") as f:
        f.write("\n" + added)
    found = RULES[rule](root)
    hits = [" -> ".join(found)] if rule == "cycle" else found
    assert any(named in h for h in hits), (rule, found)
