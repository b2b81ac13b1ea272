"""Errors name what the user typed (the flag, the file, the subcommand), never an internal name,
and bad input makes no directory: one line, exit 2 (a missing subcommand: the usage and the list)."""
import re
import subprocess

import pytest

from conftest import ROOT
from test_bad_input import assert_one_line
from test_compare import fake_run

INTERNAL = ("cmd", "bcmd", "kcmd", "lcmd", "ecmd", "tcmd", ".extends", "KERNEL=", "GOOD=", "TREE=", "METRIC=")


def no_internal_names(text):
    words = set(re.findall(r"[\w.=-]+", text))
    assert not [w for w in INTERNAL if w in words or (not w.isalpha() and w in text)], text


@pytest.mark.parametrize("args, subs", [((), ("run", "validate", "b4-check", "bisect")),
                                        (("bisect",), ("run", "demo")),
                                        (("kernel",), ("build", "status"))])
def test_a_missing_subcommand_prints_the_usage_and_the_subcommands(krig_cli, args, subs):
    p = krig_cli(*args)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"usage: krig {' '.join(args)}".replace("  ", " ").rstrip() + " ")
    listed = [ln.split()[0] for ln in p.stderr.splitlines() if ln.startswith("  ")]
    assert set(subs) <= set(listed), p.stderr
    no_internal_names(p.stderr)


@pytest.mark.parametrize("args, typed", [(("frobnicate",), "frobnicate"), (("bisect", "frob"), "frob"),
                                         (("export", "csv"), "csv")])
def test_an_unknown_subcommand_is_named(krig_cli, args, typed):
    p = krig_cli(*args)
    assert_one_line(p, f"'{typed}' is not a subcommand", "one of:")
    no_internal_names(p.stderr)


def test_a_missing_argument_is_named_as_the_usage_names_it(krig_cli):
    assert_one_line(krig_cli("run"), "REPRODUCER", "krig run --help")


@pytest.fixture
def one_patch(tmp_path):
    mbox = tmp_path / "fix.mbox"
    mbox.write_text("From: Pat <pat@example.org>\nSubject: [PATCH] fs: fix\nMessage-ID: <fix-1@example.org>\n\n"
                    "---\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    return mbox


@pytest.mark.parametrize("base, needle", [("no-such", "--base no-such: unknown kernel"),
                                          ("distro", "--base distro: the distro's packaged kernel"),
                                          ("tiny-6.1,bogus=1", "--base tiny-6.1,bogus=1: 'bogus=1' is not an option"),
                                          ("/no/such/tree@v6.1", "no such directory")])
def test_validate_names_the_base_and_makes_no_directory(krig_cli, tmp_path, one_patch, base, needle):
    results = tmp_path / "results"
    p = krig_cli("validate", "selftest-pass", "--base", base, "--series", str(one_patch),
                 "--from", "Krig Tester <tester@example.org>", env={"KRIG_RESULTS": str(results)})
    assert_one_line(p, needle)
    assert "--kernel" not in p.stderr
    assert not results.exists() or not any(results.rglob("*")), sorted(results.rglob("*"))
    assert p.stdout.count("krig: series ") <= 1, p.stdout


def test_kernel_status_names_the_kernel_typed(krig_cli):
    p = krig_cli("kernel", "status", "no-such")
    assert_one_line(p, "no-such: unknown kernel", "tiny-6.1")
    no_internal_names(p.stderr)


def test_bisect_names_its_flags(krig_cli, tmp_path):
    assert_one_line(krig_cli("bisect", "run", "--tree", str(tmp_path), "--good", "a", "--bad", "b",
                             "--repro", "selftest-pass"), f"--tree {tmp_path}: not a git repository")
    subprocess.run(["git", "init", "-q", str(tmp_path / "t")], check=True)
    subprocess.run(["git", "-C", str(tmp_path / "t"), "-c", "user.name=a", "-c", "user.email=a@b.c", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    p = krig_cli("bisect", "run", "--tree", str(tmp_path / "t"), "--good", "no-such-ref", "--bad", "HEAD",
                 "--repro", "selftest-pass")
    assert_one_line(p, "--good no-such-ref: not a commit")
    no_internal_names(p.stderr)


def test_a_missing_rig_file_is_no_such_file(krig_cli, tmp_path):
    assert_one_line(krig_cli("run", "selftest-pass", "--rig", str(tmp_path / "lab.toml")),
                    f"--rig {tmp_path / 'lab.toml'}: no such file")


TRACE = str(ROOT / "tests" / "data" / "host618_sched_xfs_v7.dat")


@pytest.mark.parametrize("args, needles", [
    (["--event", "sched:sched_switch"], ("not-a-trace.dat",)),
    (["--event", "xfs:no_such_event"], ("'xfs:no_such_event'", "events of xfs", "xfs:xfs_")),
    (["--event", "frobnicate"], ("'frobnicate'", "systems: ftrace, sched, xfs")),
])
def test_trace_stats_bad_input_is_exit_2(krig_cli, tmp_path, args, needles):
    bad = tmp_path / "not-a-trace.dat"
    bad.write_text("not a trace\n")
    p = krig_cli("trace", "stats", str(bad) if "not-a-trace.dat" in needles else TRACE, *args)
    assert_one_line(p, *needles)
    assert "ftrace:bprint" not in p.stderr


def test_compare_refuses_the_same_runs_on_both_sides(krig_cli, tmp_path):
    fake_run(tmp_path / "run", 5)
    run = str(tmp_path / "run")
    assert_one_line(krig_cli("compare", "--out", str(tmp_path / "o"), run, "--", run), "NEW", "BASE's too")
    assert not (tmp_path / "o").exists()


def test_bundle_of_a_directory_that_is_no_run_says_so(krig_cli, tmp_path):
    p = krig_cli("bundle", str(tmp_path))
    assert_one_line(p, "not a run directory", "results/latest")
    assert "krig check" not in p.stderr


@pytest.mark.parametrize("prio", ["nan", "inf", "-inf"])
def test_qualify_prio_must_be_a_finite_number(krig_cli, tmp_path, prio):
    p = krig_cli("qualify", "qualify/smoke.toml", f"--prio={prio}", "-o", str(tmp_path / "q"),
                 env={"KRIG_RESULTS": str(tmp_path / "results")})
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--prio {float(prio)}" in lines[0] and "finite" in lines[0], p.stderr
    assert not (tmp_path / "q").exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_lab_priority_from_the_environment_must_be_finite(monkeypatch, value):
    from krig.errors import UsageError
    from rigs import lab
    monkeypatch.setenv("KRIG_LAB_PRIO", value)
    with pytest.raises(UsageError, match="KRIG_LAB_PRIO: must be a finite number"):
        lab.priority()
