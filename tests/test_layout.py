"""The layout is the design: imports between krig's parts go one way, and no
module imports itself back through a cycle (read with ast, nothing imported).

    runner  (workflows.cli, workflows.run, workflows.check, workflows.qualify, ...)  -> rigs, kernels, analysis, libraries, vocabulary
    rigs, kernels, analysis                                    -> themselves, libraries, vocabulary
    analysis                                                   never -> rigs
    a reproducer's analyze.py (loaded by krig.reproducer)      as analysis
    libraries (a part's subpackage: analysis/trace)            -> themselves and the vocabulary only
    vocabulary (krig.VOCABULARY, declared in krig/__init__.py)   -> vocabulary only
"""
import ast
import pathlib
import re

import pytest

import krig
from conftest import ROOT

PARTS = ("krig", "rigs", "kernels", "analysis")
VOCABULARY = set(krig.VOCABULARY)


def subpackages() -> list:
    """Folders with an __init__.py below a part (analysis/trace: the trace.dat library): each is a
    library of its own, below its part, that imports only itself and the vocabulary."""
    return sorted(".".join(p.parent.relative_to(ROOT).parts) for part in PARTS
                  for p in (ROOT / part).glob("*/__init__.py"))


def part_of(module: str) -> str:
    """'vocabulary', 'runner', a subpackage (analysis.trace), or the top package (rigs, kernels, analysis)."""
    if module in VOCABULARY:
        return "vocabulary"
    for sub in subpackages():
        if module == sub or module.startswith(sub + "."):
            return "library"
    top = module.split(".")[0]
    return "runner" if top == "krig" else top


ALLOWED = {
    "vocabulary": {"vocabulary"},
    "library": {"vocabulary", "library"},
    "rigs": {"vocabulary", "rigs", "library"},
    "kernels": {"vocabulary", "kernels", "library"},
    "analysis": {"vocabulary", "analysis", "library"},
    "runner": {"vocabulary", "runner", "rigs", "kernels", "analysis", "library"},
}


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict:
    out = {}
    for part in PARTS:
        for p in sorted((ROOT / part).rglob("*.py")):
            if "bin" in p.parts or "__pycache__" in p.parts:
                continue
            out[module_name(p)] = p
    return out


def loaded_by_name(node: ast.AST) -> list:
    """The module a call `importlib.import_module("x")`, `import_module("x")` or `__import__("x")`
    names with a literal string: an import the import statements do not show."""
    if not isinstance(node, ast.Call) or not node.args:
        return []
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    arg = node.args[0]
    if called in ("import_module", "__import__") and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    return []


def imports_of(name: str, path: pathlib.Path, known: set) -> set:
    """Project modules imported anywhere in the file (function bodies included), by an import
    statement or by name through importlib."""
    tree = ast.parse(path.read_text(), str(path))
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            cands = [a.name for a in node.names]
        elif isinstance(node, ast.Call):
            cands = loaded_by_name(node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            cands = [f"{mod}.{a.name}" for a in node.names] + [mod]
        else:
            continue
        for c in cands:
            # the longest known module this names ("from x import y" may name a module or a symbol)
            while c and c not in known:
                c = c.rpartition(".")[0]
            if c and c != name:
                found.add(c)
    return found


def graph() -> dict:
    mods = modules()
    known = set(mods)
    g = {}
    for name, path in mods.items():
        deps = imports_of(name, path, known)
        # importing a.b.c also runs a/__init__ and a/b/__init__: count only real modules named
        g[name] = {d for d in deps if d in known}
    return g


def test_the_parts_exist_where_the_layout_says():
    mods = modules()
    assert "kernels.catalog" in mods and "kernels.build" in mods and "workflows.bisect" in mods
    # bisect drives runs in-process (workflows.run), so it sits with the runner, not in kernels/
    for gone in ("krig.kbuild", "krig.kbuild_tree", "krig.kernels", "kernels.bisect", "kernels.metric_bisect",
                 "krig.bisect_demo",
                 "rigs.ipmi_fleet", "krig.fleet"):
        assert gone not in mods, f"{gone} should have moved"


def test_imports_go_one_way():
    bad = []
    for mod, deps in graph().items():
        for d in deps:
            if part_of(d) not in ALLOWED[part_of(mod)]:
                bad.append(f"{mod} ({part_of(mod)}) imports {d} ({part_of(d)})")
    assert not bad, "imports against the one-way order:\n" + "\n".join(sorted(bad))


def find_cycle(g: dict) -> list | None:
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(g, WHITE)
    stack = []

    def visit(n):
        color[n] = GREY
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if color.get(m) == GREY:
                return stack[stack.index(m):] + [m]
            if color.get(m) == WHITE:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        color[n] = BLACK
        return None

    for n in sorted(g):
        if color[n] == WHITE:
            c = visit(n)
            if c:
                return c
    return None


def analyzers() -> dict:
    """Each reproducer's analyze.py (krig.reproducer loads it by path, so no import names it),
    as the analysis module it is: it may import the vocabulary and analysis, never rigs,
    kernels or the runner."""
    return {f"analysis.{p.parent.name.replace('-', '_')}_analyze": p
            for p in sorted((ROOT / "reproducers").glob("*/analyze.py"))}


def test_reproducers_analyzers_import_as_analysis():
    known = set(modules())
    names = analyzers()
    assert "analysis.neg_dentry_flood_analyze" in names
    bad = [f"{path.relative_to(ROOT)} imports {d} ({part_of(d)})" for name, path in names.items()
           for d in imports_of(name, path, known) if part_of(d) not in ALLOWED["analysis"]]
    assert not bad, "a reproducer's analysis against the one-way order:\n" + "\n".join(sorted(bad))


def test_the_checker_sees_an_analyzer_reaching_into_a_rig(tmp_path):
    """An analyze.py loading a rig module, by import or by name through importlib, is named."""
    known = {"rigs", "rigs.hashsize", "krig", "krig.hashsize", "workflows.run"}
    for line, want in (("from rigs import hashsize\n", "rigs.hashsize"),
                       ("import importlib\nh = importlib.import_module('rigs.hashsize')\n", "rigs.hashsize"),
                       ("r = __import__('workflows.run')\n", "workflows.run")):
        p = tmp_path / "analyze.py"
        p.write_text(line)
        deps = imports_of("analysis.x_analyze", p, known)
        assert want in deps, line
        assert part_of(want) not in ALLOWED["analysis"]
    p.write_text("from krig import hashsize\n")
    assert all(part_of(d) in ALLOWED["analysis"] for d in imports_of("analysis.x_analyze", p, known))


def test_no_import_cycles():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("g, expect", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
])
def test_cycle_finder_finds_cycles(g, expect):
    assert (find_cycle(g) is not None) == expect


def test_the_checker_sees_a_wrong_way_import(tmp_path):
    """The walk itself works: a rigs module importing the runner is named."""
    p = tmp_path / "x.py"
    p.write_text("from workflows.run import run\nimport numpy\n")
    deps = imports_of("rigs.x", p, {"workflows.run", "krig", "rigs"})
    assert deps == {"workflows.run"}
    assert part_of("workflows.run") not in ALLOWED[part_of("rigs.x")]


def test_the_vocabulary_is_real_modules():
    """The declaration names modules that exist (a renamed module is not silently dropped)."""
    mods = modules()
    assert VOCABULARY and all(m in mods for m in VOCABULARY), sorted(VOCABULARY - set(mods))


def test_the_design_page_names_the_declared_vocabulary():
    """docs/design.md's layout paragraph lists exactly krig.VOCABULARY."""
    text = " ".join((ROOT / "docs" / "design.md").read_text().split())
    start = text.index("The vocabulary, declared once as `krig.VOCABULARY`")
    listed = text[start:].split(" is: ", 1)[1].split("; it imports only itself", 1)[0]
    assert set(re.findall(r"`(krig(?:\.\w+)?)`", listed)) == VOCABULARY, listed


def private_imports(name: str, path: pathlib.Path, known: set) -> list[str]:
    """`from other_module import _name` of another project module: a private name used across modules."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = pkg.split(".")
            mod = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        if mod != name and (mod in known or mod.split(".")[0] in PARTS):
            out += [f"{name} imports {mod}.{a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_module_imports_another_modules_private_name(tmp_path):
    mods = modules()
    bad = [line for name, path in mods.items() for line in private_imports(name, path, set(mods))]
    assert not bad, "\n".join(bad)
    p = tmp_path / "x.py"
    p.write_text("from .spec import _raw, public\nfrom . import __version__\n")
    assert private_imports("kernels.x", p, {"kernels.spec"}) == ["kernels.x imports kernels.spec._raw"]


def test_the_trace_library_is_its_own_folder():
    """analysis/trace is the trace.dat library (reader, page walk, its C helper, `trace stats`):
    a subpackage, so the layout holds it to itself and the vocabulary; the synthetic trace
    writer lives with the tests and reads the library's public API only."""
    assert "analysis.trace" in subpackages()
    mods = modules()
    assert {"analysis.trace.tracedat", "analysis.trace.kbuffer", "analysis.trace.tracecli"} <= set(mods)
    assert (ROOT / "analysis" / "trace" / "kwalk.c").exists()
    assert "analysis.tracegen" not in mods, "the trace writer is test support (tests/tracegen.py)"
    gen = (ROOT / "tests" / "tracegen.py").read_text()
    private = sorted(set(re.findall(r"\btf\._\w+", gen)))
    assert not private, f"tests/tracegen.py reads TraceFile's private fields: {private}"


def test_the_runner_names_no_rig_drivers_module():
    """The runner reaches rigs through the rigs package (load_rig, and what rigs/__init__.py
    exports) and rigs/protocol.py, never a driver's own modules (rigs/qemu*.py, rigs/ipmi*.py,
    rigs/fake.py: every module named after a driver of rigs.DRIVERS)."""
    import rigs
    drivers = set(rigs.DRIVERS)
    g = graph()
    bad = sorted(f"{mod} imports {d}" for mod, deps in g.items() if part_of(mod) == "runner" for d in deps
                 if d.startswith("rigs.") and any(d.split(".")[1].startswith(drv) for drv in drivers))
    assert not bad, "\n".join(bad)
