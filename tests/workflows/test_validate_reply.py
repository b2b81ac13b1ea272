"""The reply krig validate writes, without a guest: parsed with Python's mailbox, its trailer
taken by the real `b4 am -m` and `git am`, its reproduce command read back by sh as typed, and
what it names (the tree by its public name, never a local path; the reproducer, krig).
The series and the answer it replies on come from tests/workflows/test_validate.py.

Covers: analysis/lkp.py, krig/version.py, workflows/reply.py."""
import mailbox
import re
import shlex
import subprocess

import pytest

from kernels.series import load_series
from krig.errors import UsageError
from workflows.reply import wrap_shell, write_reply
from workflows.reproduce import parse_run_args
from workflows.validate import decide, judged_metrics
from test_validate import B4, ENV, PUBLIC_TREE, TESTER, git, reply_state, series_repo, sides  # noqa: F401 (series_repo: a fixture)

def test_reply_threads_parses_and_b4_takes_the_trailer(series_repo, tmp_path):
    series = load_series(series_repo["mbox"], log=lambda *a: None)
    res = sides(tmp_path, [0, 0, 0, 0], [5, 6, 7, 8])
    answer, reason = decide(res, judged_metrics(res))
    vdir = tmp_path / "v"
    vdir.mkdir()
    write_reply(vdir, reply_state(series, answer, reason, res, tmp_path), res, TESTER)
    msgs = list(mailbox.mbox(str(vdir / "reply.mbox")))
    assert len(msgs) == 1
    m = msgs[0]
    mid = "<" + series["provenance"]["message_id"] + ">"
    assert m["In-Reply-To"] == mid and m["References"] == mid
    assert m["Subject"] == "Re: [PATCH 0/2] vfs: spell two numbers"
    assert m["From"] == "Krig Tester <tester@example.org>" and "pat@example.org" in m["To"]
    text = m.get_payload()
    assert text == (vdir / "reply.txt").read_text()
    assert text.isascii() and all(len(ln) <= 72 for ln in text.splitlines()), max(text.splitlines(), key=len)
    assert "Tested-by: Krig Tester <tester@example.org>" in text.splitlines()
    assert series["provenance"]["patchset_hash"] in text and "CONFIG_KASAN: BASE n, NEW y" in text
    assert "files_seen" in text
    assert "\n  tree            https://" in text and '"  tree' not in text   # prose, not a shell word
    assert m["Cc"] == "linux-fsdevel@vger.kernel.org, Al Reviewer <al@example.org>"   # the author is To
    assert str(tmp_path) not in (vdir / "reply.mbox").read_text()      # the trees by their last names
    # the developer's side: b4 am -m of the series plus the reply, then git am: commits with the trailer
    both = tmp_path / "thread.mbox"
    both.write_bytes(series_repo["mbox"].read_bytes() + (vdir / "reply.mbox").read_bytes())
    p = subprocess.run([B4, "--offline-mode", "am", "-m", str(both), "-o", str(tmp_path / "am"), "-n", "s"],
                       capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    r = series_repo["repo"]
    git(r, "checkout", "-q", "-b", "applied", series_repo["base"])
    git(r, "am", "-q", str(tmp_path / "am" / "s.mbx"))
    bodies = git(r, "log", "--format=%B%x00", f"{series_repo['base']}..HEAD").split("\0")
    bodies = [b for b in bodies if b.strip()]
    assert len(bodies) == 2
    assert all("Tested-by: Krig Tester <tester@example.org>" in b for b in bodies), bodies


def _reply(series_repo, tmp_path, **kw) -> str:
    series = load_series(series_repo["mbox"], log=lambda *a: None)
    res = sides(tmp_path, [0, 0, 0, 0], [5, 6, 7, 8])
    answer, reason = decide(res, judged_metrics(res))
    vdir = tmp_path / "v"
    vdir.mkdir()
    write_reply(vdir, reply_state(series, answer, reason, res, tmp_path, **kw), res, TESTER)
    text = (vdir / "reply.txt").read_text()
    assert text.isascii() and all(len(ln) <= 72 for ln in text.splitlines()), max(text.splitlines(), key=len)
    return text


def _command(text: str) -> list:
    """The reply's reproduce lines as sh reads them back: [argv, ...]."""
    block = text.split("To reproduce", 1)[1].split("\n\n", 1)[0].split(":\n", 1)[1]
    script = block.replace("\\\n", "")
    return [shlex.split(ln) for ln in script.splitlines() if ln.strip()]


def test_reply_names_the_tree_by_its_public_name_in_the_command_too(series_repo, tmp_path):
    text = _reply(series_repo, tmp_path)
    clone, krig = _command(text)
    assert clone == ["git", "clone", PUBLIC_TREE, "linux"]
    assert krig[krig.index("--base") + 1] == "linux@" + "a" * 40 + ",like=tiny-6.1"   # the commit, not master
    assert str(tmp_path) not in text


def test_reply_never_names_a_local_tree(series_repo, tmp_path):
    text = _reply(series_repo, tmp_path, tree=str(tmp_path / "linux.git"))
    assert "  tree            a local tree (no public remote)" in text and str(tmp_path) not in text
    (krig,) = _command(text)
    assert krig[krig.index("--base") + 1].startswith("linux@") and "clone of the tree" in " ".join(text.split())


def test_reply_names_local_files_in_the_base_by_their_last_name(series_repo, tmp_path):
    """The base's tree becomes the clone (./linux), its image or config file their own names: the
    same rule the bundle's and the export's --kernel use (kernels/given.py KernelText.public)."""
    from kernels.given import kernel_text
    tree = f"{tmp_path}/src/linux@master,config={tmp_path}/cfg/my.config"
    text = _reply(series_repo, tmp_path, base=tree)
    _, krig = _command(text)
    assert krig[krig.index("--base") + 1] == "linux@" + "a" * 40 + ",config=my.config"
    assert kernel_text(tree).public() == "linux@master,config=my.config"
    image = f"{tmp_path}/boot/vmlinuz-6.1,config={tmp_path}/boot/config-6.1"
    (tmp_path / "i").mkdir()
    text = _reply(series_repo, tmp_path / "i", base=image)
    (krig,) = _command(text)                        # nothing to clone
    assert krig[krig.index("--base") + 1] == "vmlinuz-6.1,config=config-6.1" and str(tmp_path) not in text


def test_reply_says_what_the_reproducer_measures_and_which_krig(series_repo, tmp_path):
    from krig.reproducer import load_reproducer
    from krig.version import git_revision, version
    text = _reply(series_repo, tmp_path)
    flat = " ".join(text.split())
    assert load_reproducer("selftest-pass").measures in flat
    assert f"krig version {version()}, commit {git_revision()}" in flat


def test_every_reproducer_says_in_one_sentence_what_it_measures():
    from krig.reproducer import load_reproducer, reproducer_names
    for name in reproducer_names():
        said = load_reproducer(name).measures
        assert said.startswith("It ") and said.endswith(".") and ". " not in said[:-1], (name, said)


def test_a_metric_name_too_long_for_its_column_never_sits_beside_another_row():
    from analysis.lkp import table_lines
    from krig.record_compare import Comparison
    res = Comparison.from_json({"metrics": [{"metric": m, "values": {"base": [b, b], "new": [n, n]}, "p": 0.194, "significant": False,
                        "verdict": "PASS", "base": {"n": 2}, "new": {"n": 2}}
                       for m, b, n in (("end_nr_negative", 40000, 8), ("peak_negative_vs_inflight", 50, 1.155))]})
    lines = table_lines(res)
    assert lines[2:] == ["end_nr_negative:", "    40000    0.0%  -100.0%         8    0.0% 0.194",
                         "peak_negative_vs_inflight:", "       50    0.0%   -97.7%     1.155    0.0% 0.194"], lines
    assert all(len(ln) <= 72 for ln in lines)
    short = table_lines(res, ["end_nr_negative"])           # names that fit: the 0-day layout, one line a row
    assert short[2] == "    40000    0.0%  -100.0%         8    0.0% 0.194   end_nr_negative"


def test_folded_from_and_subject_of_the_series_give_one_line_headers(series_repo, tmp_path):
    """A series whose From: and Subject: are folded over lines (one of them whitespace only): every
    header of the reply is one line, and the body starts after the blank line krig wrote."""
    series = load_series(series_repo["mbox"], log=lambda *a: None)
    series["provenance"] = {**series["provenance"], "author": "Pat\n \n\tO. Dev\r\n <pat@example.org>"}
    series["reply_subject"] = "Re: [PATCH 0/2]\n \n vfs: spell two numbers"
    res = sides(tmp_path, [0, 0, 0, 0], [5, 6, 7, 8])
    answer, reason = decide(res, judged_metrics(res))
    vdir = tmp_path / "v"
    vdir.mkdir()
    write_reply(vdir, reply_state(series, answer, reason, res, tmp_path), res, TESTER)
    raw = (vdir / "reply.mbox").read_text()
    head = raw.split("\n\n", 1)[0].splitlines()
    assert all(re.match(r"^[A-Za-z-]+: \S", ln) for ln in head[1:]), head
    (m,) = mailbox.mbox(str(vdir / "reply.mbox"))
    assert m["To"] == "\"Pat O. Dev\" <pat@example.org>" and m["Subject"] == "Re: [PATCH 0/2] vfs: spell two numbers"
    assert m.get_payload() == (vdir / "reply.txt").read_text()


def test_reply_without_fix_has_no_tested_by(series_repo, tmp_path):
    series = load_series(series_repo["mbox"], log=lambda *a: None)
    res = sides(tmp_path, [0, 0, 0, 0], [0, 0, 0, 0], "FAIL", ["FAIL"] * 4)
    answer, reason = decide(res, judged_metrics(res))
    assert answer == "not fixed"
    vdir = tmp_path / "v"
    vdir.mkdir()
    write_reply(vdir, reply_state(series, answer, reason, res, tmp_path), res, TESTER)
    text = (vdir / "reply.txt").read_text()
    assert "Tested-by" not in text and "not fixed" in text


@pytest.mark.parametrize("words", [
    ["--base", "/very/" + "long/" * 20 + "path@master,like=tiny-6.1"],
    ["--series", "<20261120-dcache-v2-0-1@example.org>", "--from", "Pat O'Dev <pat@example.org>"],
    ["--set", "x=a b $HOME `id` \\ \"q\" *", "--series", "/a path/with spaces/" + "and-more-" * 12 + "$x\\.mbox"]])
def test_shell_command_reads_back_as_typed(words):
    """The reply's command: every line within 72 columns, and sh reads back exactly the words."""
    lines = wrap_shell(["krig", "validate", *words])
    assert all(len(ln) <= 72 for ln in lines), lines
    joined = "\n".join(lines).replace("krig", "printf '%s\\0'", 1)
    p = subprocess.run(["sh", "-c", joined], capture_output=True, text=True)
    assert p.stdout.split("\0")[:-1] == ["validate", *words], lines


def test_a_long_word_never_merges_with_the_next():
    """A Message-ID of any length (134 characters ended its line with its last character) followed by
    another word: sh reads back the words as typed, and each line stays within 72 columns."""
    for n in range(40, 160):
        words = ["--series", "<" + "m" * (n - 14) + "@example.org>", "--rig", "qemu-default"]
        for before in ([], ["--base", "tiny-6.1"]):
            lines = wrap_shell(["krig", "validate", *before, *words])
            assert all(len(ln) <= 72 for ln in lines), lines
            joined = "\n".join(lines).replace("krig", "printf '%s\\0'", 1)
            p = subprocess.run(["sh", "-c", joined], capture_output=True, text=True)
            assert p.stdout.split("\0")[:-1] == ["validate", *before, *words], lines


def test_reproduce_refuses_foreign_arguments():
    asked = parse_run_args(["selftest-pass", "--kernel", "distro", "--set", "timeout=60"], "b")
    assert asked.sets == ("timeout=60",) and asked.kernel == "distro"
    for lines, want in ((["../../bin/sh"], "not one of krig's reproducers"),
                        (["selftest-pass", "--rig", "x"], "not an argument"),
                        (["selftest-pass", "--kernel"], "not an argument")):
        with pytest.raises(UsageError, match=want):
            parse_run_args(lines, "b")
