"""Every command the README and docs/ show runs as written, and docs/command.md is the
complete synopsis of the parser.

A command is a line of a ```sh block (or a `$ ` line of any block) that starts with
`krig`, `.venv/bin/krig` or `make` (after VAR=value assignments). A krig line must parse
with krig's own argparse parser; the reproducer, preset, kernel, rig and metric it names
must exist; a path into the repository (qualify/..., rigs/...) must exist, and a .toml
file a guide has the reader write must be introduced on the same page. A make line's
targets must exist in the Makefile or mk/*.mk, its variables be used there. A toml
block labelled with a file of the repository shows that file. And every krig line runs as
typed, in a directory laid out as the checkout after a first run (results/latest made by
the fake rig), and exits as its page says, unless it is in one of the named classes that
need a kernel build, a guest or a server, or is a template the reader fills in."""
import argparse
import contextlib
import io
import os
import pathlib
import re
import shlex
import shutil
import subprocess

import pytest

from conftest import KRIG

from workflows.cli import build_parser
from workflows.clihelp import subcommands
from workflows.compare import parse_args as compare_args
from krig.errors import UsageError
from krig.reproducer import load_reproducer, reproducer_names

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"(?ms)^```(\w*)\n(.*?)^```")
SHELL_BLOCKS = {"sh", "bash", "shell", "console"}
# the shell variables the docs' commands use, with a value of the kind they hold
SHELL_VARS = {"i": "1", "DEMO": "/tmp/demo-linux", "PWD": str(ROOT), "HOME": "/home/pat"}
REPO_DIRS = ("qualify/", "reproducers/", "rigs/", "kernels/", "docs/", "tests/", "analysis/", "krig/", "mk/", "bench/")
_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")


def commands(page: pathlib.Path):
    """(line number, the command's words) of every krig or make command on the page."""
    text = page.read_text()
    for m in FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        first = text[:m.start()].count("\n") + 2
        joined = re.sub(r"\\\n\s*", " ", body)          # continued lines
        for n, line in enumerate(joined.splitlines()):
            line = line.strip()
            if line.startswith("$ "):
                line = line[2:]
            elif lang not in SHELL_BLOCKS:
                continue
            line = re.sub(r"\$\{?(\w+)\}?", lambda v: SHELL_VARS.get(v.group(1), f"<unknown ${v.group(1)}>"), line)
            try:
                words = shlex.split(line, comments=True)
            except ValueError as e:
                yield first + n, [f"<unparsable: {e}>"]
                continue
            while words and re.match(r"^[A-Z_]+=", words[0]):
                words = words[1:]
            for stop in ("|", "&&", ";", "<", ">"):
                if stop in words:
                    words = words[:words.index(stop)]
            if words and words[0] in ("krig", ".venv/bin/krig", "make"):
                yield first + n, words


def all_commands():
    return [(p, n, w) for p in PAGES for n, w in commands(p)]


def _parse(argv: list) -> tuple[argparse.Namespace | None, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return build_parser().parse_args(argv), ""
        except SystemExit as e:
            return None, "" if e.code == 0 else err.getvalue().strip()


def _kernel_problem(flag: str, value: str) -> str | None:
    head = value.split(",")[0]
    if "@" in head or "/" in head or head.startswith("~") or not _NAME.match(head):
        return None                                  # a tree, an image, TREE@REF
    if not (ROOT / "kernels" / f"{head}.toml").is_file():
        return f"{flag} {value}: no kernels/{head}.toml"
    return None


def _file_problem(word: str, page_text: str) -> str | None:
    word = word.rstrip(",.;")
    if word.startswith(REPO_DIRS) and "<" not in word and "*" not in word:
        return None if (ROOT / word).exists() else f"{word}: no such file in the repository"
    if word.endswith(".toml") and "/" not in word and page_text.count(word) < 2:
        return f"{word}: a file the page never introduces"
    return None


def krig_problems(words: list, page_text: str) -> list:
    a, err = _parse(words[1:])
    if a is None:
        return [err] if err else []
    out = []
    repro = getattr(a, "reproducer", None) or getattr(a, "repro", None)
    if repro and repro not in reproducer_names():
        out.append(f"{repro}: no such reproducer")
    elif repro:
        r = load_reproducer(repro)
        if getattr(a, "preset", None) and a.preset not in r.presets:
            out.append(f"--preset {a.preset}: not a preset of {repro}")
        if getattr(a, "metric", None) and a.metric not in r.metrics:
            out.append(f"--metric {a.metric}: not a metric of {repro}")
        for s in getattr(a, "set", None) or []:
            if s.partition("=")[0] not in r.params:
                out.append(f"--set {s}: not a parameter of {repro}")
    for flag in ("kernel", "base", "like"):
        if isinstance(getattr(a, flag, None), str):
            out.append(_kernel_problem(f"--{flag}", getattr(a, flag)))
    rig = getattr(a, "rig", None)
    if rig and _NAME.match(rig) and not rig.endswith(".toml") and not (ROOT / "rigs" / f"{rig}.toml").is_file() \
            and page_text.count(f"{rig}.toml") == 0:
        out.append(f"--rig {rig}: no rigs/{rig}.toml, and the page never shows the reader writing it")
    if getattr(a, "handler", None) == "workflows.compare:cmd_compare":
        try:
            compare_args(a.dirs)
        except UsageError as e:
            out.append(str(e))
    out += [_file_problem(w, page_text) for w in words[1:]]
    return [p for p in out if p]


def make_targets() -> set:
    text = "\n".join(p.read_text() for p in [ROOT / "Makefile", *(ROOT / "mk").glob("*.mk")])
    return set(re.findall(r"(?m)^([a-z][\w-]*)\s*:(?!=)", text)), text


def make_problems(words: list) -> list:
    targets, text = make_targets()
    out = []
    for w in words[1:]:
        var, eq, value = w.partition("=")
        if eq:
            if f"$({var})" not in text:
                out.append(f"{var}=: not a variable of the Makefile")
            elif var in ("REPRO",) and value not in reproducer_names():
                out.append(f"REPRO={value}: no such reproducer")
            elif var in ("KERNEL", "LIKE"):
                out.append(_kernel_problem(f"{var}=", value))
        elif w.startswith("-"):
            continue
        elif w not in targets:
            out.append(f"{w}: no such make target")
    return [p for p in out if p]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_runs_as_written(page):
    text = page.read_text()
    bad = []
    for n, words in commands(page):
        problems = make_problems(words) if words[0] == "make" else krig_problems(words, text)
        bad += [f"{page.relative_to(ROOT)}:{n}: {' '.join(words)[:100]}\n    {p}" for p in problems]
    assert not bad, "\n".join(bad)


def test_the_docs_show_commands_at_all():
    found = all_commands()
    assert len([w for _, _, w in found if w[0] != "make"]) >= 30 and any(w[0] == "make" for _, _, w in found)


def inline_problems(span: str) -> list:
    """A `krig ...` in running text: its subcommands and its --flags exist (values may be placeholders)."""
    words, parser, path = span.split()[1:], build_parser(), []
    while words:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or words[0] not in sub.choices:
            break
        parser, path = sub.choices[words[0]], path + [words.pop(0)]
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is not None and words and not words[0].startswith("SUBCOMMAND"):
        return [f"krig {' '.join(path)}: {words[0]!r} is no subcommand of it ({', '.join(sub.choices)})"]
    known = {s for a in parser._actions for s in a.option_strings}
    return [f"krig {' '.join(path)}: no option {w.split('=')[0]}" for w in words
            if w.startswith("-") and w != "--" and w.split("=")[0].rstrip(",.;)") not in known
            and not w.startswith("-" * 3)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_in_running_text_name_real_subcommands_and_flags(page):
    text = FENCE.sub("", page.read_text())
    bad = [f"{page.relative_to(ROOT)}: `{m.group(1)}`: {p}" for m in re.finditer(r"`(krig [a-z][^`]*)`", text)
           for p in inline_problems(m.group(1))]
    assert not bad, "\n".join(bad)


def _content(text: str) -> list:
    return [ln.split("#")[0].rstrip() for ln in text.splitlines() if ln.split("#")[0].strip()]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_block_labelled_with_a_file_of_the_repo_is_that_file(page):
    """A ```toml block whose first line is `# qualify/smoke.toml` shows that file as it is."""
    bad = []
    for m in FENCE.finditer(page.read_text()):
        label = re.match(r"#\s*(\S+)\s*$", m.group(2).splitlines()[0] if m.group(2) else "")
        if m.group(1) == "toml" and label and (ROOT / label.group(1)).is_file():
            if _content(m.group(2)) != _content((ROOT / label.group(1)).read_text()):
                bad.append(f"the block labelled {label.group(1)} is not that file")
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)


# -- docs/command.md: the synopsis is complete ---------------------------------------

def synopsis() -> dict:
    """{subcommand path: the options its synopsis line(s) name} from docs/command.md's first block."""
    block = FENCE.search((ROOT / "docs" / "command.md").read_text()).group(2)
    paths = sorted((" ".join(p) for p, _ in subcommands(build_parser())), key=len, reverse=True)
    out = {}
    for line in block.splitlines():
        if not line.startswith("krig "):
            continue
        rest = line[len("krig "):]
        path = next((p for p in paths if rest == p or rest.startswith(p + " ")), None)
        assert path, f"docs/command.md: {line!r} is no subcommand"
        usage = rest.split("   (")[0]
        out.setdefault(path, set()).update(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", usage))
    return out


def test_command_md_lists_every_subcommand_and_option():
    syn = synopsis()
    bad = []
    for path, sub in subcommands(build_parser()):
        name = " ".join(path)
        if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            continue                                 # a group: its subcommands have the lines
        if name not in syn:
            bad.append(f"krig {name}: no synopsis line")
            continue
        opts = [a for a in sub._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
        known = {s for a in opts for s in a.option_strings}
        bad += [f"krig {name} {o}: documented, but no such option" for o in sorted(syn[name] - known)]
        bad += [f"krig {name} {'/'.join(a.option_strings)}: not in the synopsis" for a in opts
                if not set(a.option_strings) & syn[name]]
    assert not bad, "\n".join(bad)


# -- every full command runs, against a real run directory ------------------------------
#
# The run directory is made by the fake rig (rigs/fake.py: the real pipeline, no guest), in a
# directory laid out as the checkout is (results/, results/latest); each command runs there
# as typed. A command that needs what a fast test cannot have is in one named class with its
# reason; every other command runs and must exit as its page says.

CLASSES = {  # name: (why it is not run here, which commands; the first class that takes a command has it)
    "builds a kernel": ("a kernel build (minutes to an hour): the kernel, validate's two sides, "
                        "bisect's steps, a tree given as --kernel", lambda w: w[1] in ("kernel", "validate", "bisect")
                        or any(x.startswith(("~/", "/")) for x in w if "@" in x or x.startswith("~/"))),
    "boots a guest": ("a run boots the kernel on a QEMU guest or a lab server: tests/rigs/qemu/test_guest.py "
                      "and the smoke tests run these", lambda w: w[1] in ("run", "reproduce", "qualify")),
    "needs a server": ("the lab's coordinator, a lab server's BMC (krig rig check) or a KCIDB server",
                       lambda w: w[1] in ("lab", "rig") or "--submit" in w),
    "a template": ("names what the reader fills in (<...>, ..., a glob, RUN1, GROUP)",
                   lambda w: any(re.search(r"^<[^@]*>$|<[a-z.]+>|\.\.\.|\*|^RUN\d$|^GROUP$", x) for x in w)),
}
# what each command that runs exits with, as its page says (README's verdicts table: `krig
# check` of a PASS run is 0; docs/command.md's exit codes for the rest)
EXITS = {"check": 0, "list": 0, "--version": 0, "--help": 0, "b4-check": 0, "bundle": 0, "compare": 0, "history": 0}
FAKE_RIG = """driver = "fake"
work_dir = "{work}"

[metrics]
answer = 42
files_seen = 100
"""


def class_of(words: list) -> str | None:
    return next((name for name, (_, takes) in CLASSES.items() if takes(words)), None)


@pytest.fixture(scope="module")
def checkout_like(tmp_path_factory):
    """A directory laid out as a checkout after a first run: results/ with a PASS of
    selftest-pass and results/latest, the groups docs/measurements.md compares, a series."""
    d = tmp_path_factory.mktemp("checkout")
    (d / "work").mkdir()
    rig = d / "fake.toml"
    rig.write_text(FAKE_RIG.format(work=d / "work"))
    env = {**os.environ, "KRIG_RESULTS": str(d / "results")}
    for args in (["selftest-pass", "--rig", str(rig), "--repeat", "1", "--group", "G/base"],
                 ["selftest-pass", "--rig", str(rig)]):
        p = subprocess.run(KRIG + ["run", *args], cwd=d, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    for side in ("ail", "flood", "unlink"):
        for end in ("base", "new"):
            shutil.copytree(d / "G" / "base", d / "G" / f"{side}-{end}")
    (d / "series.mbox").write_text("From pat Thu Jan  1 00:00:00 1970\nMessage-ID: <one-1@example.org>\n"
                                   "Subject: [PATCH] vfs: a fix\n\n---\ndiff --git a/f b/f\n")
    return d, env


def test_every_full_command_exits_as_its_page_says(checkout_like):
    d, env = checkout_like
    ran, bad = [], []
    for page, n, words in all_commands():
        if words[0] == "make" or class_of(words):
            continue
        where = f"{page.relative_to(ROOT)}:{n}: {' '.join(words)}"
        stdin = (d / "series.mbox").read_bytes() if words[1] == "b4-check" else b""
        p = subprocess.run(KRIG + words[1:], cwd=d, env=env, input=stdin, capture_output=True, timeout=300)
        err = p.stderr.decode(errors="replace")
        want = EXITS.get(words[1])
        if want is None:
            bad.append(f"{where}: runs here, but EXITS does not say what its page says it exits with")
        elif p.returncode != want or "Traceback" in err:
            bad.append(f"{where}: exit {p.returncode}, the page says {want}: {err.strip()[-300:]}")
        ran.append(words[1])
    assert not bad, "\n".join(bad)
    # results/latest, the README's own example, is among them; so is every kind EXITS names
    assert ["check", "results/latest"] in [w[1:3] for _, _, w in all_commands()]
    assert set(ran) == set(EXITS), sorted(set(EXITS) - set(ran))


def test_every_class_of_commands_not_run_is_named_and_used():
    taken = {}
    for page, n, words in all_commands():
        if words[0] != "make" and class_of(words):
            taken.setdefault(class_of(words), []).append(f"{page.relative_to(ROOT)}:{n}")
    assert set(taken) == set(CLASSES), sorted(set(CLASSES) - set(taken))
    assert all(reason for reason, _ in CLASSES.values())
