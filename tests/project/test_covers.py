"""Every module of krig's code has its tests: each .py under krig/, workflows/, rigs/, kernels/ and
analysis/ (but an __init__.py and the results history's migration versions, each run by the
store's upgrade) has a test file named after it in the folder of tests/ that mirrors its package
(rigs/ipmi/NAME.py: tests/rigs/ipmi/test_NAME.py or tests/rigs/ipmi/test_NAME_*.py), or is named
by its path in the `Covers:` paragraph of the module docstring of a test file that imports or runs
it (tests/README.md, "Layout"). A Covers entry names a module there is, and no two test files share
a name: a test file is imported by its name from every folder (tests/conftest.py)."""
import ast
import collections
import pathlib
import re
import shutil

from conftest import ROOT

PACKAGES = ("krig", "workflows", "rigs", "kernels", "analysis")
SKIPPED = ("workflows/history/migrations/versions/",)
NAMED = re.compile(r"(?<![\w/.])(?:" + "|".join(PACKAGES) + r")/[\w/]+\.py\b")


def product_modules(root: pathlib.Path) -> list[str]:
    return sorted(rel for top in PACKAGES for p in (root / top).rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts
                  and not (rel := p.relative_to(root).as_posix()).startswith(SKIPPED))


def files_of_tests(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted((root / "tests").rglob("test_*.py"))


def covers(path: pathlib.Path) -> list[str]:
    """The modules the `Covers:` paragraph of a test file's module docstring names."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
    return [name for para in re.split(r"\n\s*\n", doc) if para.startswith("Covers:")
            for name in NAMED.findall(para)]


def named_test(root: pathlib.Path, module: str) -> bool:
    """Whether tests/ has test_NAME.py or test_NAME_*.py for module .../NAME.py, in its package's folder."""
    rel = pathlib.PurePosixPath(module)
    return any(p.stem == f"test_{rel.stem}" or p.stem.startswith(f"test_{rel.stem}_")
               for p in (root / "tests" / rel.parent).glob(f"test_{rel.stem}*.py"))


def untested(root: pathlib.Path) -> list[str]:
    """A line for each module with neither a test named after it nor a Covers entry, and for
    each Covers entry that names no module."""
    modules = product_modules(root)
    covered = collections.defaultdict(list)
    for t in files_of_tests(root):
        for name in covers(t):
            covered[name].append(t.relative_to(root).as_posix())
    out = [f"{m}: no test_{pathlib.PurePosixPath(m).stem}.py in tests/{pathlib.PurePosixPath(m).parent}/, "
           "and no test file's Covers: names it" for m in modules if m not in covered and not named_test(root, m)]
    return out + [f"{f}: Covers: names {name}, not a module of {', '.join(PACKAGES)}"
                  for name, files in sorted(covered.items()) if name not in modules for f in files]


def test_every_module_has_its_tests():
    assert len(product_modules(ROOT)) > 100
    found = untested(ROOT)
    assert not found, "modules without tests:\n" + "\n".join(found)


def test_no_two_test_files_share_a_name():
    names = collections.Counter(p.name for p in files_of_tests(ROOT))
    assert [n for n, count in names.items() if count > 1] == []


def copy_tree(dst: pathlib.Path) -> pathlib.Path:
    """The checkout's Python files of the packages and of tests/."""
    def skip(d, names):
        return [n for n in names if n == "__pycache__" or not (n.endswith(".py") or (pathlib.Path(d) / n).is_dir())]
    for top in (*PACKAGES, "tests"):
        shutil.copytree(ROOT / top, dst / top, ignore=skip)
    return dst


def test_a_new_module_without_tests_is_named(tmp_path):
    root = copy_tree(tmp_path / "tree")
    assert untested(root) == []
    (root / "rigs" / "ipmi" / "NEW.py").write_text('"""A part no test runs."""\n')
    (root / "workflows" / "history" / "migrations" / "versions" / "0099_new.py").write_text("")
    assert untested(root) == ["rigs/ipmi/NEW.py: no test_NEW.py in tests/rigs/ipmi/, "
                              "and no test file's Covers: names it"]
    (root / "tests" / "rigs" / "ipmi" / "test_NEW_power.py").write_text('"""Its test."""\n')
    assert untested(root) == []


def test_a_covers_entry_counts_only_in_its_paragraph_and_for_a_module_there_is(tmp_path):
    root = copy_tree(tmp_path / "tree")
    (root / "kernels" / "NEW.py").write_text('"""A part no test runs."""\n')
    test = root / "tests" / "kernels" / "test_OTHER.py"
    test.write_text('"""A test that reads kernels/NEW.py, but not in its Covers: paragraph."""\n')
    assert [ln.split(":")[0] for ln in untested(root)] == ["kernels/NEW.py"]
    test.write_text('"""A test.\n\nCovers: kernels/NEW.py,\nkernels/GONE.py."""\n')
    assert untested(root) == ["tests/kernels/test_OTHER.py: Covers: names kernels/GONE.py, "
                              "not a module of krig, workflows, rigs, kernels, analysis"]
