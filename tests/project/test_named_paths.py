"""A file of krig's named in its code, docs or tests exists: a docstring that says where a rule
is checked (tests/project/test_layout_records.py), a comment that points at the module doing a thing, a
doc's path. A Python, Markdown or shell file named under one of the checkout's folders must be
there; a placeholder (test_X.py, NAME) is not a name."""
import pathlib
import re
import subprocess

from conftest import ROOT

TOPS = ("tests", "krig", "rigs", "workflows", "kernels", "analysis", "bench", "reproducers", "docs", "qualify")
NAMED = re.compile(r"\b(?:" + "|".join(TOPS) + r")/[A-Za-z0-9_./-]+\.(?:py|md|sh)\b")
PLACEHOLDER = re.compile(r"[A-Z]{1,5}(?:\.|/|$)|/x/|\*")


def tracked(root) -> list[str]:
    out = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.sh", "*.toml", "Makefile", "mk/*"],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    return out.split()


def dangling(root, files) -> list[str]:
    """'file: the path it names' for each named path that is not in the tree."""
    out = []
    for rel in files:
        try:
            text = (root / rel).read_text(errors="replace")
        except OSError:
            continue
        for name in sorted(set(NAMED.findall(text))):
            if not PLACEHOLDER.search(name.split("/", 1)[1]) and not (root / name).exists():
                out.append(f"{rel}: {name}")
    return out


def test_every_named_file_exists():
    mine = pathlib.Path(__file__).relative_to(ROOT).as_posix()     # its own examples are not names
    assert dangling(ROOT, [f for f in tracked(ROOT) if f != mine]) == []


def test_a_name_of_a_file_that_is_gone_is_found(tmp_path):
    (tmp_path / "krig").mkdir()
    (tmp_path / "krig" / "a.py").write_text('"""Checked by tests/test_layout_gone.py; tests/test_X.py is a form."""\n')
    (tmp_path / "tests").mkdir()
    assert dangling(tmp_path, ["krig/a.py"]) == ["krig/a.py: tests/test_layout_gone.py"]
