"""`krig validate` end to end on real kernels, real guests, the real b4 and git.

The developer's tree is the bisect demo's history (kernels/demo_repo.py: Debian's
linux-source-6.1 with the rmdir-keeps-children regression committed in it), its tip
the base. Two series are made on a branch of it with `git format-patch --cover-letter
--thread`: one puts `shrink_dcache_parent()` back into vfs_rmdir() (the fix), one
adds a comment to mm/vmscan.c (does not touch the bug). Each kernel is built with
tiny-6.1's config (`--base TREE@,like=tiny-6.1`: TREE@ is the series' base-commit).

CI budget: this test uses fewer runs than the default 4 a side: 2 a side for the fix
(too few to be significant, so the answer rests on the verdicts and says so) and 1 a
side for the unrelated series. The default N=4 is measured in docs/validate.md.
"""
import json
import mailbox
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import KRIG, ROOT, build_kernels, qemu_pids
from kernels.demo_repo import AUTHOR, FIX_LIST, commit_on, fix_series, make_demo_repo, series_mbox

B4 = str(pathlib.Path(sys.executable).with_name("b4"))
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **AUTHOR}
TESTER = "Krig Tester <tester@example.org>"


def validate(tmp_path, demo, mbox, repeat, name):
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    return subprocess.run(KRIG + ["validate", "unlink-dentry-growth", "--base", f"{demo}@,like=tiny-6.1",
                                  "--series", str(mbox), "--repeat", str(repeat), "--preset", "smoke",
                                  "--from", TESTER, "-o", str(tmp_path / name)],
                          capture_output=True, text=True, cwd=ROOT, timeout=3600, env=env)


@pytest.mark.guest
@pytest.mark.kbuild
@pytest.mark.long(14)      # minutes on 2 cores: make test starts it early
def test_validate_fix_and_unrelated_series(tmp_path):
    build_kernels("tiny-6.1")               # its build tree seeds the demo tree's (no full build)
    demo, info = make_demo_repo(log=lambda *a: None)
    dev = tmp_path / "dev.git"
    fix_mbox, bad = fix_series(demo, info, dev, tmp_path / "fix.mbox")
    vmscan = subprocess.run(["git", f"--git-dir={dev}", "cat-file", "blob", f"{bad}:mm/vmscan.c"],
                            capture_output=True, check=True).stdout
    other = commit_on(dev, bad, "mm/vmscan.c", vmscan + b"\n/* a comment that changes nothing */\n",
                      "mm: a comment in vmscan.c\n\nNothing to do with dentries.", tmp_path / "index")
    other_mbox = series_mbox(dev, bad, other, "mm: a comment", tmp_path / "other.mbox")

    p = validate(tmp_path, demo, fix_mbox, 2, "v-fix")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    answer = [ln for ln in p.stdout.splitlines() if not ln.startswith(("krig: ", "kbuild: "))]
    assert answer[0].startswith("fixed: every base run FAILed and every patched run PASSed (2 vs 2 runs: too few")
    vdir = tmp_path / "v-fix"
    state = json.loads((vdir / "validate.json").read_text())
    assert state["answer"] == "fixed" and state["base"] == f"{demo}@{bad},like=tiny-6.1"
    man = json.loads((vdir / "new" / "run-01" / "manifest.json").read_text())
    prov = man["series"]
    assert prov["base_commit"] == bad and prov["subject"] == "vfs: rmdir prunes children again"
    assert prov["author"] == "Pat Developer <pat@example.org>" and prov["message_id"].startswith("cover.")
    assert man["kernel"]["git"]["commit"] == bad and man["kernel"]["debug_options"]["CONFIG_KASAN"] == "n"
    assert json.loads((vdir / "new" / "group.json").read_text())["series"] == prov
    base_man = json.loads((vdir / "base" / "run-01" / "manifest.json").read_text())
    assert "series" in base_man and base_man["series"] is None
    assert man["machine"]["release"].endswith(f"-krig-g{bad[:12]}-s{prov['patchset_hash'][:8]}")
    (reply,) = list(mailbox.mbox(str(vdir / "reply.mbox")))
    assert reply["In-Reply-To"] == f"<{prov['message_id']}>" and reply["Cc"] == FIX_LIST   # the list it went to
    text = reply.get_payload()
    assert f"Tested-by: {TESTER}" in text.splitlines() and all(len(ln) <= 72 for ln in text.splitlines())
    assert "peak_negative_vs_inflight" in text and prov["patchset_hash"] in text

    # the developer: b4 am -m of the series plus the reply, git am: the commit carries Tested-by
    thread = tmp_path / "thread.mbox"
    thread.write_bytes(fix_mbox.read_bytes() + (vdir / "reply.mbox").read_bytes())
    am = subprocess.run([B4, "--offline-mode", "am", "-m", str(thread), "-o", str(tmp_path / "am"), "-n", "fix"],
                        capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=120)
    assert am.returncode == 0, am.stdout + am.stderr
    work = tmp_path / "work"
    (work / "fs").mkdir(parents=True)
    (work / "fs" / "namei.c").write_bytes(subprocess.run(["git", f"--git-dir={dev}", "cat-file", "blob",
                                                          f"{bad}:fs/namei.c"], capture_output=True).stdout)
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"], ["am", "-q", str(tmp_path / "am/fix.mbx")]):
        subprocess.run(["git", "-C", str(work), *argv], check=True, env=ENV, capture_output=True)
    body = subprocess.run(["git", "-C", str(work), "log", "-1", "--format=%B"], capture_output=True, text=True).stdout
    assert f"Tested-by: {TESTER}" in body and "vfs: prune a removed directory" in body

    p = validate(tmp_path, demo, other_mbox, 1, "v-other")
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    answer = [ln for ln in p.stdout.splitlines() if not ln.startswith(("krig: ", "kbuild: "))]
    assert answer[0].startswith("not fixed: the patched kernel FAILs like the base (1 of 1 runs)")
    text = (tmp_path / "v-other" / "reply.txt").read_text()
    assert "Tested-by" not in text and "not fixed" in text
    assert not qemu_pids(str(tmp_path))
