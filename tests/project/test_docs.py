"""The documentation is true to the project: every relative link in README.md and docs/
resolves (file and heading), every make target and every `krig` subcommand is documented,
and no tracked file talks about how the project was developed."""
import argparse
import pathlib
import re
import subprocess

import pytest

from workflows.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"(?ms)^```.*?^```")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def anchors(page: pathlib.Path) -> set:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"(?m)^#{1,6} (.*)$", text)}


def links(page: pathlib.Path):
    text = FENCE.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    for m in LINK.finditer(text):
        yield m.group(1) or m.group(2)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):       # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)


def test_every_docs_page_is_reachable_from_the_index():
    index = {t.partition("#")[0] for t in links(ROOT / "docs" / "README.md")}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages <= index, f"docs pages not in docs/README.md: {sorted(pages - index)}"


def _all_docs() -> str:
    return "\n".join(p.read_text() for p in PAGES)


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "krig"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}"
                yield from _subcommands(sub, f"{prefix} {name}")


def test_every_krig_subcommand_is_documented():
    docs = _all_docs()
    missing = [c for c in _subcommands(build_parser()) if c not in docs]
    assert not missing, f"krig subcommands not in README.md or docs/: {missing}"


def test_every_make_target_is_documented():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    targets = sorted({m.group(1) for m in re.finditer(r"(?m)^make ([a-z][a-z-]*)", out)})
    assert len(targets) >= 10, out
    docs = _all_docs()
    missing = [t for t in targets if f"make {t}" not in docs]
    assert not missing, f"make targets in `make help` but not in README.md or docs/: {missing}"


def _readme_section(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_tables_name_every_reproducer_and_directory():
    from krig.reproducer import reproducer_names
    table = _readme_section("Reproducers")
    named = set(re.findall(r"(?m)^\| `([\w-]+)`", table))
    for m in re.finditer(r"(?m)^\| `([\w-]+)\{([\w,]+)\}`", table):
        named |= {m.group(1) + s for s in m.group(2).split(",")}
    assert set(reproducer_names()) <= named, sorted(set(reproducer_names()) - named)
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    dirs = {f.split("/")[0] for f in tracked.split() if "/" in f and not f.startswith(".")} | {"results"}
    layout = set(re.findall(r"(?m)^\| `([\w.-]+)/`", _readme_section("Layout")))
    assert dirs == layout, (sorted(dirs - layout), sorted(layout - dirs))


def test_quick_start_runs_something_before_the_long_self_tests():
    start = _readme_section("Quick start (Debian 12)")
    assert start.index("make run") < start.index("make test"), start[:400]


# (the phrases are split so that this file does not spell them itself)
DEV_WORDS = re.compile(r"\b(stop|issue)s? [0-9]+\b|" + "other" + r" helpers|helpers' (builds|guests)"
                       r"|" + "this" + r" session|other sessions|\bthe lead\b", re.I)


def test_no_words_about_how_the_project_was_developed():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    hits = []
    for f in files:
        p = ROOT / f
        if p.suffix not in {".md", ".py", ".sh", ".toml", ".c", ".txt", ""} or f.endswith(".patch") \
                or not p.is_file():
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if DEV_WORDS.search(line) and f != "tests/project/test_docs.py":
                hits.append(f"{f}:{n}: {line.strip()[:80]}")
    assert not hits, "\n".join(hits[:20])
