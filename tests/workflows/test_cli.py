"""The command is the interface: every workflow is a `krig` subcommand, and every option of
every subcommand says what it takes and its default.

Covers: workflows/clihelp.py, workflows/listing.py."""
import argparse
import re
import subprocess
import sys

from conftest import KRIG, ROOT
from workflows.cli import build_parser
from workflows.clihelp import subcommands
from workflows.listing import first_sentence
from krig.reproducer import load_reproducer, reproducer_names




def test_workflows_are_subcommands():
    names = {" ".join(p) for p, _ in subcommands(build_parser())}
    for want in ("run", "check", "kernel build", "kernel status", "bisect run", "bisect demo"):
        assert want in names, f"`krig {want}` is missing"
    assert "bisect oracle" not in names         # git bisect's step stays internal


def test_every_option_says_what_it_takes_and_its_default():
    bad = []
    for path, sub in subcommands(build_parser()):
        for a in sub._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            what = f"krig {' '.join(path)} {'/'.join(a.option_strings) or a.dest}"
            if not a.help or a.help == argparse.SUPPRESS:
                bad.append(f"{what}: no help line")
            elif a.option_strings and not a.required and "default" not in a.help:
                bad.append(f"{what}: the help does not say its default ({a.help!r})")
    assert not bad, "\n".join(bad)


def test_every_subcommand_help_has_examples_exit_codes_and_its_page():
    bad = []
    for path, sub in subcommands(build_parser()):
        text = sub.format_help()
        what = f"krig {' '.join(path)} --help"
        if "example" not in text or "exit code" not in text:
            bad.append(f"{what}: no example or no exit codes")
        pages = re.findall(r"\b(docs/[\w.-]+\.md|README\.md)", text)
        if not pages:
            bad.append(f"{what}: no docs page")
        bad += [f"{what}: {p} does not exist" for p in pages if not (ROOT / p).is_file()]
        for line in text.split("example", 1)[-1].splitlines():
            if line.startswith("  krig ") and line.split()[1] not in {p[0] for p, _ in subcommands(build_parser())}:
                bad.append(f"{what}: example of no subcommand: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_krig_alone_prints_the_usage_and_the_subcommands():
    p = subprocess.run(KRIG, capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and p.stderr.startswith("usage: krig ")
    for name in ("run", "check", "validate", "b4-check", "bisect"):
        assert f"\n  {name} " in p.stderr, p.stderr


def test_make_targets_are_thin_aliases():
    """make kernel-status and `krig kernel status` print the same."""
    k = subprocess.run(KRIG + ["kernel", "status", "tiny-6.1"], capture_output=True, text=True, cwd=ROOT)
    m = subprocess.run(["make", "-s", "kernel-status"], capture_output=True, text=True, cwd=ROOT)
    assert k.returncode == 0 and m.returncode == 0, k.stderr + m.stderr
    line = k.stdout.strip()
    assert line.startswith("tiny-6.1 ") and line in m.stdout.splitlines()


def test_bad_subcommand_input_is_one_line():
    p = subprocess.run(KRIG + ["kernel", "build", "no-such-kernel"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "no-such-kernel" in p.stderr and "Traceback" not in p.stderr


def test_version_names_the_version_and_the_checkouts_commit(tmp_path):
    p = subprocess.run(KRIG + ["--version"], capture_output=True, text=True, cwd=tmp_path)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    version = re.search(r'(?m)^version = "(.*)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert p.returncode == 0 and p.stdout.startswith(f"krig {version} (commit {head.strip()}"), p.stdout
    # the version alone, and nothing heavy imported, when the code is no git checkout
    code = ("import sys, krig.version as v; v.ROOT = v.pathlib.Path(sys.argv[1]); print(v.version_line()); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'analysis', 'rigs', 'kernels')))")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert p.stdout.splitlines() == [f"krig {version}", "[]"], p.stdout + p.stderr


def test_list_fits_80_columns_and_says_whole_sentences():
    p = subprocess.run(KRIG + ["list"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert [ln for ln in p.stdout.splitlines() if len(ln) > 80] == []
    flat = " ".join(p.stdout.split())
    for name in reproducer_names():
        sentence = first_sentence(load_reproducer(name).description)
        assert sentence.endswith((".", "!", "?")) and " ".join(sentence.split()) in flat, (name, sentence)


def test_make_seed_scale_checks_its_rig_before_it_builds(tmp_path):
    """SCALE_RIG is one rig name, never options, and is checked (with the suite and the host)
    before the suite's kernel is built: a bad one is said, and the kernel cache stays empty."""
    import os
    cache = tmp_path / "cache"
    env = {**os.environ, "KRIG_CACHE": str(cache), "KRIG_RESULTS": str(tmp_path / "results")}
    for value, said in (("lab1 --fresh", "make seed-scale: SCALE_RIG='lab1 --fresh' is not a rig name"),
                        ("nope", "--rig 'nope': unknown rig")):
        p = subprocess.run(["make", "-s", "-o", "helpers", "-o", "python", "seed-scale", f"SCALE_RIG={value}",
                            f"KRIG={' '.join(KRIG)}"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert p.returncode == 2 and said in p.stderr and "Traceback" not in p.stderr, p.stdout + p.stderr
        assert "kernel build" not in p.stdout + p.stderr
        assert not (cache / "kbuild").exists() or not any((cache / "kbuild").rglob("*")), p.stdout
