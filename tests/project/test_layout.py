"""The layout is the design: the folders are the floors, imports go down only, and no
module imports itself back through a cycle (read with ast, nothing imported).

    floor 3  workflows/   (the commands: cli, run, check, validate, bisect, ...)  -> the parts, the vocabulary
    floor 2  rigs/, kernels/, analysis/   (the parts)                         -> themselves, libraries, the vocabulary
             analysis                                                          never -> rigs or kernels
             a reproducer's analyze.py (loaded by krig.reproducer)              as analysis
             libraries (a part's subpackage: analysis/trace)                   -> themselves and the vocabulary only
    floor 1  krig/        (the vocabulary: errors, config, safeio, record, rundir, verdict,
                           reproducer, results, paths)                         -> itself only
"""
import ast
import functools
import pathlib
import re
import subprocess

import pytest

from conftest import ROOT

# the floors, by folder: a module's floor is its top folder's
FLOORS = {"krig": 1, "rigs": 2, "kernels": 2, "analysis": 2, "workflows": 3}
PARTS = tuple(FLOORS)


# Each rule is a function of a tree's root (the checkout, or a copy a test breaks on purpose:
# tests/project/test_layout_checks.py) that returns what breaks it, a line each.

@functools.lru_cache(maxsize=8)
def subpackages(root: pathlib.Path = ROOT) -> list:
    """Folders with an __init__.py below a part (analysis/trace: the trace.dat library): each is a
    library of its own, below its part, that imports only itself and the vocabulary. A folder of
    rigs/ is a driver's package (rigs/qemu/, rigs/ipmi/, ...), part of rigs, not a library."""
    return sorted(".".join(p.parent.relative_to(root).parts) for part in PARTS if FLOORS[part] == 2
                  and part != "rigs" for p in (root / part).glob("*/__init__.py"))


def part_of(module: str, root: pathlib.Path = ROOT) -> str:
    """'vocabulary' (krig/), 'workflows', a library (analysis.trace), or its part (rigs, kernels, analysis)."""
    top = module.split(".")[0]
    if top == "krig":
        return "vocabulary"
    for sub in subpackages(root):
        if module == sub or module.startswith(sub + "."):
            return "library"
    return top


ALLOWED = {
    "vocabulary": {"vocabulary"},
    "library": {"vocabulary", "library"},
    "rigs": {"vocabulary", "rigs", "library"},
    "kernels": {"vocabulary", "kernels", "library"},
    "analysis": {"vocabulary", "analysis", "library"},
    "workflows": {"vocabulary", "workflows", "rigs", "kernels", "analysis", "library"},
}


def test_the_floors_are_the_folders():
    """Every rule above is a floor rule: an allowed import never goes up a floor."""
    floor = {"vocabulary": 1, "library": 2, "rigs": 2, "kernels": 2, "analysis": 2, "workflows": 3}
    for part, allowed in ALLOWED.items():
        assert all(floor[a] <= floor[part] for a in allowed), part
    assert set(FLOORS) == {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: pathlib.Path = ROOT) -> dict:
    out = {}
    for part in PARTS:
        for p in sorted((root / part).rglob("*.py")):
            if "bin" in p.parts or "__pycache__" in p.parts:
                continue
            out[module_name(p, root)] = p
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


# "package.module:function": a subcommand's handler (workflows/cli.py's set_defaults(handler=...),
# imported when the subcommand runs) or a rig driver's class (rigs.DRIVERS, imported by load_rig)
NAMED_TARGET = re.compile(r"((?:krig|rigs|kernels|analysis|workflows)(?:\.\w+)*):\w+")


def named_targets(node: ast.AST) -> list:
    """The module a string constant "package.module:function" names: an import made by name."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        m = NAMED_TARGET.fullmatch(node.value)
        return [m.group(1)] if m else []
    return []


def imports_of(name: str, path: pathlib.Path, known: set, named: bool = True) -> set:
    """Project modules imported anywhere in the file (function bodies included), by an import
    statement, by name through importlib, or (named) named as "package.module:function" (a
    handler, a driver) for an import when it is used: a floor rule counts those, the cycle rule
    does not (nothing is imported while the module loads)."""
    tree = ast.parse(path.read_text(), str(path))
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            cands = [a.name for a in node.names]
        elif isinstance(node, ast.Call):
            cands = loaded_by_name(node)
        elif isinstance(node, ast.Constant) and named:
            cands = named_targets(node)
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


def graph(root: pathlib.Path = ROOT, named: bool = True) -> dict:
    """module -> the project modules it imports (named: with those it names as handlers or drivers)."""
    mods = modules(root)
    known = set(mods)
    g = {}
    for name, path in mods.items():
        deps = imports_of(name, path, known, named)
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


def wrong_way_imports(root: pathlib.Path = ROOT) -> list:
    return sorted(f"{mod} ({part_of(mod, root)}) imports {d} ({part_of(d, root)})"
                  for mod, deps in graph(root).items() for d in deps
                  if part_of(d, root) not in ALLOWED[part_of(mod, root)])


def test_imports_go_one_way():
    bad = wrong_way_imports()
    assert not bad, "imports against the one-way order:\n" + "\n".join(bad)


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


def analyzers(root: pathlib.Path = ROOT) -> dict:
    """Each reproducer's analyze.py (krig.reproducer loads it by path, so no import names it),
    as the analysis module it is: it may import the vocabulary and analysis, never rigs,
    kernels or the runner."""
    return {f"analysis.{p.parent.name.replace('-', '_')}_analyze": p
            for p in sorted((root / "reproducers").glob("*/analyze.py"))}


def analyzer_imports(root: pathlib.Path = ROOT) -> list:
    known = set(modules(root))
    return sorted(f"{path.relative_to(root)} imports {d} ({part_of(d, root)})"
                  for name, path in analyzers(root).items()
                  for d in imports_of(name, path, known) if part_of(d, root) not in ALLOWED["analysis"])


def test_reproducers_analyzers_import_as_analysis():
    assert "analysis.neg_dentry_flood_analyze" in analyzers()
    bad = analyzer_imports()
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


def import_cycle(root: pathlib.Path = ROOT) -> list:
    """The modules of an import cycle, [] if there is none."""
    return find_cycle(graph(root, named=False)) or []


def test_no_import_cycles():
    cycle = import_cycle() or None
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


def vocabulary(root: pathlib.Path = ROOT) -> set:
    return {m for m in modules(root) if part_of(m, root) == "vocabulary"}


def vocabulary_imports(root: pathlib.Path = ROOT) -> list:
    g = graph(root)
    return sorted(f"{m} imports {d}" for m in vocabulary(root) for d in g[m]
                  if part_of(d, root) != "vocabulary")


def test_the_vocabulary_is_the_ground_folder():
    """krig/ holds the vocabulary and nothing of a workflow: no module there imports a part or a workflow."""
    assert {"krig.errors", "krig.record", "krig.rundir", "krig.safeio", "krig.verdict"} <= vocabulary()
    assert not vocabulary_imports()


def test_the_design_page_names_the_vocabulary():
    """docs/design.md's layout paragraph lists exactly the modules of krig/."""
    text = " ".join((ROOT / "docs" / "design.md").read_text().split())
    start = text.index("The vocabulary, the folder `krig/`")
    listed = text[start:].split(" is: ", 1)[1].split("; it imports only itself", 1)[0]
    assert set(re.findall(r"`(krig(?:\.\w+)?)`", listed)) == vocabulary(), listed


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


def private_name_imports(root: pathlib.Path = ROOT) -> list:
    mods = modules(root)
    return [line for name, path in mods.items() for line in private_imports(name, path, set(mods))]


def test_no_module_imports_another_modules_private_name(tmp_path):
    bad = private_name_imports()
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


def driver_imports(root: pathlib.Path = ROOT) -> list:
    """Modules of the workflows (the runner, workflows/run.py, and every command beside it) that
    import a rig driver's own module: rigs/qemu/rig*.py, rigs/ipmi/rig*.py, rigs/fake.py, every module
    named after a driver of rigs.DRIVERS."""
    import rigs
    drivers = set(rigs.DRIVERS)
    return sorted(f"{mod} imports {d}" for mod, deps in graph(root).items()
                  if part_of(mod, root) == "workflows" for d in deps
                  if d.startswith("rigs.") and any(d.split(".")[1].startswith(drv) for drv in drivers))


def test_the_runner_names_no_rig_drivers_module():
    """The runner reaches rigs through the rigs package (load_rig, and what rigs/__init__.py
    exports) and rigs/protocol.py, never a driver's own modules."""
    bad = driver_imports()
    assert not bad, "\n".join(bad)


# Files and functions allowed past the size where one idea stays one (a file over 500 lines, a
# function over 80): none.
LONG_FILES: set = set()
LONG_FUNCTIONS: set = set()
MAX_FILE_LINES, MAX_FUNCTION_LINES = 500, 80


def sizes(rel: str, text: str) -> tuple[list, list]:
    """(the file if it is too long, [(file, function) too long]) of one Python file, measured with ast."""
    lines = len(text.splitlines())
    long_file = [(rel, lines)] if lines > MAX_FILE_LINES else []
    long_functions = [((rel, n.name), n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(text, rel))
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    return long_file, long_functions


def too_long(root: pathlib.Path, rels: list) -> list:
    """The files (root-relative) over 500 lines and functions over 80, but the allowed ones."""
    files, functions = [], []
    for rel in rels:
        if not (root / rel).is_file():
            continue
        f, fn = sizes(rel, (root / rel).read_text())
        files += [f"{name}: {n} lines" for name, n in f if name not in LONG_FILES]
        functions += [f"{name}:{func}: {n} lines" for (name, func), n in fn if (name, func) not in LONG_FUNCTIONS]
    return files + functions


def test_no_file_or_function_too_long():
    """Every tracked .py file: at most 500 lines, no function over 80 (but the allowed ones)."""
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.py"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert "krig/record.py" in tracked
    bad = too_long(ROOT, tracked)
    assert not bad, "\n".join(["too long (split by idea):"] + bad)


def test_the_size_check_sees_a_long_file_and_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(81))
    text = "def f():\n" + body + "\n" * 500
    f, fn = sizes("x.py", text)
    assert f == [("x.py", len(text.splitlines()))] and fn == [(("x.py", "f"), 82)]
    assert sizes("y.py", "def g():\n    pass\n") == ([], [])


def test_handlers_and_drivers_named_by_string_are_imports():
    """A subcommand's handler and a rig driver are imported by name ("module:function"): the floor
    rules see them as imports of the module that names them, the cycle rule does not."""
    g, loaded = graph(), graph(named=False)
    assert "workflows.group" in g["workflows.cli"] and "rigs.qemu.rig" in g["rigs"] and "rigs.redfish.rig" in g["rigs"]
    assert "rigs.qemu.rig" not in loaded["rigs"]
    assert "kernels.build" in g["kernels.buildargs"] and "kernels.build" not in loaded["kernels.buildargs"]


def test_the_design_pages_drawing_reads_the_same_graph():
    """docs/layout.py draws docs/layout.png from this file's graph: its folder arrows are the
    imports counted here, none of them up a floor."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("layout_drawing", ROOT / "docs" / "layout.py")
    drawing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drawing)
    edges, lines = drawing.folder_graph()
    assert edges and all(FLOORS[a] >= FLOORS[b] for a, b in edges), edges
    assert edges[("workflows", "krig")] == sum(1 for m, deps in graph().items() if m.split(".")[0] == "workflows"
                                                for d in deps if d.split(".")[0] == "krig")
    assert all(lines[p] > 0 for p in FLOORS)
