"""krig b4-check as `b4 review` runs it: the check commands read from git config by b4's own
loader and run by b4's own runner (b4.review.checks) on a series krig validated (the runs
faked, the series, its reading by b4 and the validation directory real), from the
reviewer's kernel tree.

Covers: workflows/b4check.py."""
import email
import email.policy
import json
import mailbox
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import b4
import b4.review.checks as checks
import pytest

from conftest import KRIG, ROOT
from workflows import b4check
from kernels.trees import pristine_dir
from kernels.definition import DEFAULT_TARBALL
from kernels.digest import sha256_file
from workflows.validate import validate
from test_validate import _fake_groups, git, series_repo  # noqa: F401  (series_repo is a fixture)

CMD = f"{sys.executable} -m workflows.cli b4-check"


def messages(mbox_path) -> list:
    """(Message-ID without <>, EmailMessage) of each message of an mbox, as b4 hands them over."""
    out = []
    for m in mailbox.mbox(str(mbox_path)):
        msg = email.message_from_bytes(m.as_bytes(), policy=b4.emlpolicy)
        out.append((msg["Message-ID"].strip("<> "), msg))
    return out


@pytest.fixture
def validated(series_repo, tmp_path, monkeypatch):  # noqa: F811
    """A finished validation of series_repo's series under tmp_path/results/validate ("fixed")."""
    _fake_groups(monkeypatch, {"base": ("FAIL", -100), "new": ("PASS", 10)})
    vdir = tmp_path / "results" / "validate" / "selftest-pass-x"
    _, state, _ = validate("selftest-pass", "tiny-6.1", str(series_repo["mbox"]), 4, out=vdir,
                           sender="Krig Tester <tester@example.org>", log=lambda *a: None)
    assert state.answer == "fixed"
    monkeypatch.setenv("KRIG_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))          # the command runs from the kernel tree
    return vdir


def test_b4_review_runs_it_on_the_cover_letter_and_each_patch(series_repo, validated):  # noqa: F811
    repo = series_repo["repo"]
    git(repo, "config", "b4.review-series-check-cmd", CMD)
    git(repo, "config", "b4.review-perpatch-check-cmd", CMD)
    b4._setup_main_config(topdir=str(repo))
    perpatch, series = checks.load_check_cmds()
    assert perpatch == [CMD] and series == [CMD]
    cover, *patches = messages(series_repo["mbox"])
    got = checks.run_series_checks(cover, series, str(repo))
    assert len(got) == 1, got
    r = got[0]
    assert (r["tool"], r["status"]) == ("krig/selftest-pass", "pass"), r
    assert r["summary"].startswith("fixed: every base run FAILed")
    assert r["url"] == (validated / "reply.txt").resolve().as_uri()
    assert "files_seen" in r["details"] and "%change" in r["details"]
    per = checks.run_perpatch_checks(patches, perpatch, str(repo))
    assert [e["status"] for mid, _ in patches for e in per[mid]] == ["pass", "pass"], per


CHECKPATCH = ("scripts/checkpatch.pl", "scripts/spelling.txt", "scripts/const_structs.checkpatch")


@pytest.fixture(scope="module")
def checkpatch(tmp_path_factory) -> pathlib.Path:
    """Debian's linux-source checkpatch.pl (and the word lists it reads): from the source a
    kernel build extracted, else out of the tarball itself."""
    tarball = pathlib.Path(DEFAULT_TARBALL)
    src = pristine_dir(tarball, sha256_file(tarball))
    if (src / CHECKPATCH[0]).is_file():
        return src
    out = tmp_path_factory.mktemp("linux")
    top = tarball.name.split(".tar")[0]
    subprocess.run(["tar", "-xJf", str(tarball), "-C", str(out), "--strip-components=1",
                    *(f"{top}/{f}" for f in CHECKPATCH)], check=True)
    return out


def documented_lines() -> list:
    """The git config lines of docs/b4-review.md's "Wiring it in", as argv lists."""
    text = (ROOT / "docs" / "b4-review.md").read_text()
    block = re.search(r"(?ms)^## Wiring it in.*?^```sh\n(.*?)^```", text).group(1)
    return [shlex.split(ln.replace("$PWD", str(ROOT))) for ln in block.splitlines() if ln.strip()]


@pytest.mark.ksource        # checkpatch.pl from linux-source-6.1 (unpacked from the tarball when no build did)
def test_the_documented_setup_keeps_b4s_checkpatch(series_repo, validated, checkpatch, tmp_path,  # noqa: F811
                                                     monkeypatch):
    """The page's lines, run as written (--global: into a fresh $HOME), then b4's own loader and
    runner in a tree with the kernel's checkpatch.pl: each patch gets both checkpatch's entry
    and krig's; running the lines twice changes nothing."""
    repo = series_repo["repo"]
    (repo / "scripts").mkdir()
    for f in CHECKPATCH:
        shutil.copy(checkpatch / f, repo / f)
    (repo / ".checkpatch.conf").write_text("--no-tree\n")   # the tree is a small stand-in, not a kernel
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    (tmp_path / "home").mkdir()
    lines = documented_lines()
    assert len(lines) == 3 and all(argv[:3] == ["git", "config", "--global"] for argv in lines), lines
    for _ in range(2):
        for argv in lines:
            subprocess.run(argv, cwd=ROOT, check=True)
    krig_cmd = f"{ROOT}/.venv/bin/krig b4-check"
    assert os.access(f"{ROOT}/.venv/bin/krig", os.X_OK)
    b4._setup_main_config(topdir=str(repo))
    perpatch, series = checks.load_check_cmds()
    assert perpatch == ["_builtin_checkpatch", krig_cmd] and series == [krig_cmd], (perpatch, series)
    _, *patches = messages(series_repo["mbox"])
    per = checks.run_perpatch_checks(patches, perpatch, str(repo))
    for mid, _ in patches:
        got = {e["tool"]: e for e in per[mid]}
        assert set(got) == {"checkpatch", "krig/selftest-pass"}, per[mid]
        assert got["krig/selftest-pass"]["status"] == "pass", got
        # the patches carry no Signed-off-by: checkpatch.pl itself ran and said so
        assert got["checkpatch"]["status"] == "fail" and "Signed-off-by" in got["checkpatch"]["details"], got


@pytest.mark.parametrize("answer, status", [("not fixed", "fail"), ("regressed", "fail"),
                                            ("inconclusive", "warn"), ("base does not reproduce", "warn"),
                                            (None, "warn")])
def test_each_answer_maps_to_a_status(series_repo, validated, answer, status):  # noqa: F811
    vfile = validated / "validate.json"
    state = json.loads(vfile.read_text())
    state["answer"] = answer
    vfile.write_text(json.dumps(state))
    cover = series_repo["dir"] / "0000-cover-letter.patch"
    (r,) = b4check.check(cover.read_bytes(), [validated.parent])
    assert r["status"] == status, r
    assert r["summary"].startswith(answer + ":" if answer else "validation not finished"), r


def test_the_newest_validation_of_a_reproducer_answers(series_repo, validated):  # noqa: F811
    older = validated.with_name("older")
    shutil.copytree(validated, older)
    state = json.loads((older / "validate.json").read_text())
    state.update(answer="not fixed", finished="2000-01-01T00:00:00Z")
    (older / "validate.json").write_text(json.dumps(state))
    cover = series_repo["dir"] / "0000-cover-letter.patch"
    (r,) = b4check.check(cover.read_bytes(), [validated.parent])
    assert r["status"] == "pass" and "newest of 2" in r["summary"], r


def test_a_series_without_message_ids_is_found_by_its_patchset_hash(series_repo, tmp_path,  # noqa: F811
                                                                      monkeypatch):
    """git format-patch without --thread: no Message-ID to match, the same patches match by hash."""
    out = tmp_path / "unthreaded"
    git(series_repo["repo"], "format-patch", "-q", "-o", str(out), "master")
    mbox = tmp_path / "unthreaded.mbox"
    mbox.write_bytes(b"".join(p.read_bytes() for p in sorted(out.iterdir())))
    assert b"Message-ID" not in mbox.read_bytes() and b"Message-Id" not in mbox.read_bytes()
    _fake_groups(monkeypatch, {"base": ("FAIL", -100), "new": ("FAIL", -100)})
    vdir = tmp_path / "v" / "one"
    validate("selftest-pass", "tiny-6.1", str(mbox), 4, out=vdir, sender="Krig Tester <tester@example.org>",
             log=lambda *a: None)
    (r,) = b4check.check(mbox.read_bytes(), [vdir])
    assert (r["status"], r["summary"].split(":")[0]) == ("fail", "not fixed"), r
    other = series_repo["mbox"].read_bytes()               # the threaded series: other patches' bytes
    assert b4check.check(other, [vdir])[0]["tool"] == "krig"


def test_no_validation_yet_is_a_warning_that_says_what_to_run(tmp_path):
    msg = b"Message-ID: <other-1@example.org>\nSubject: [PATCH 0/3] something else\n\nHi\n"
    p = subprocess.run(KRIG + ["b4-check", "--dir", str(tmp_path)], input=msg, capture_output=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    (r,) = json.loads(p.stdout)
    assert r["status"] == "warn" and "krig validate" in r["summary"] and "<other-1@example.org>" in r["summary"]


def test_hostile_message_id_is_one_shell_word_in_the_suggested_command(tmp_path):
    """A Message-ID holding quotes and a command substitution: the suggested command, run by a
    shell, passes it as one word and runs nothing."""
    evil = "<x'$(touch pwned)'\"`touch pwned2`\"@example.org>"
    msg = f"Message-ID: {evil}\nSubject: [PATCH] x\n\nHi\n".encode()
    (r,) = b4check.check(msg, [tmp_path])
    cmd = r["summary"].split(": ", 1)[1]
    words = shlex.split(cmd)
    assert words[:2] == ["krig", "validate"] and words[-2:] == ["--series", evil], words
    echo = subprocess.run(["bash", "-c", cmd.replace("krig validate", "printf '%s\\n'", 1)], cwd=tmp_path,
                          capture_output=True, text=True)
    assert echo.stdout.splitlines()[-1] == evil and not list(tmp_path.glob("pwned*")), echo


@pytest.mark.parametrize("args, stdin, needle", [([], b"", "standard input: empty"),
                                                 (["--dir", "/no/such/dir"], b"x", "--dir /no/such/dir")])
def test_bad_input_is_one_line(args, stdin, needle):
    p = subprocess.run(KRIG + ["b4-check", *args], input=stdin, capture_output=True, text=False, cwd=ROOT)
    err = p.stderr.decode()
    assert p.returncode == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
