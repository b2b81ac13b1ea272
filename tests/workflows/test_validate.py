"""krig validate without a guest: series read by the real b4 and git, the answer rule on
fake groups, the reply (parsed with Python's mailbox, then fed back to the real
`b4 am -m` and `git am`), `krig compare --format lkp` against the statistics module,
and the one-line errors (a series that does not apply, a kernel missing an option).
The reply's own checks are in tests/workflows/test_validate_reply.py.
The end to end runs on real kernels: tests/rigs/redfish/test_labsim_redfish.py (`make test`),
tests/workflows/test_validate_e2e.py (`make test-lab`).

Covers: kernels/series.py."""
import gzip
import hashlib
import json
import os
import pathlib
import statistics
import subprocess
import sys

import pytest

from conftest import KRIG, ROOT
from kernels.given import parse
from kernels.prebuilt import image_release
from kernels.series import load_series
from workflows.compare import compare
from krig.errors import UsageError
from krig.record_compare import Comparison
from krig.record_validation import SideKernel, ValidationRecord
from workflows.reply import write_reply
from workflows.validate import decide, judged_metrics
from test_compare import fake_group

B4 = str(pathlib.Path(sys.executable).with_name("b4"))      # pyproject.toml's b4, in krig's environment
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
       "GIT_AUTHOR_NAME": "Pat Developer", "GIT_AUTHOR_EMAIL": "pat@example.org",
       "GIT_COMMITTER_NAME": "Pat Developer", "GIT_COMMITTER_EMAIL": "pat@example.org"}
TESTER = ("Krig Tester", "tester@example.org")


def git(repo, *args):
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=ENV)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


@pytest.fixture
def series_repo(tmp_path):
    """A small git tree: base commit, then a two-patch series on a branch, as an mbox with a cover letter."""
    r = tmp_path / "tree"
    r.mkdir()
    git(r, "init", "-q", "-b", "master")
    (r / "fs").mkdir()
    (r / "fs" / "namei.c").write_text("".join(f"line {i}\n" for i in range(1, 40)))
    git(r, "add", "-A")
    git(r, "commit", "-qm", "base")
    base = git(r, "rev-parse", "HEAD")
    git(r, "checkout", "-qb", "fix")
    (r / "fs" / "namei.c").write_text((r / "fs" / "namei.c").read_text().replace("line 10\n", "line ten\n"))
    git(r, "commit", "-qam", "vfs: spell ten")
    (r / "fs" / "namei.c").write_text((r / "fs" / "namei.c").read_text().replace("line 30\n", "line thirty\n"))
    git(r, "commit", "-qam", "vfs: spell thirty")
    out = tmp_path / "patches"
    git(r, "format-patch", "-q", "--cover-letter", "--thread", f"--base={base}", "-o", str(out),
        "--to=linux-fsdevel@vger.kernel.org", "--cc=Al Reviewer <al@example.org>",
        "--cc=Pat Developer <pat@example.org>", "master")
    cover = out / "0000-cover-letter.patch"
    cover.write_text(cover.read_text().replace("*** SUBJECT HERE ***", "vfs: spell two numbers"))
    mbox = tmp_path / "series.mbox"
    mbox.write_bytes(b"".join(p.read_bytes() for p in sorted(out.iterdir())))
    return {"repo": r, "base": base, "mbox": mbox, "dir": out}


def test_series_provenance_and_patchset_hash(series_repo, tmp_path):
    s = load_series(series_repo["mbox"], log=lambda *a: None)
    prov = s["provenance"]
    cover = (series_repo["dir"] / "0000-cover-letter.patch").read_text()
    msgid = next(ln.split(":", 1)[1].strip() for ln in cover.splitlines() if ln.lower().startswith("message-id:"))
    assert prov["message_id"] == msgid.strip("<>")
    assert prov["subject"] == "vfs: spell two numbers"
    assert prov["author"] == "Pat Developer <pat@example.org>"
    assert prov["base_commit"] == series_repo["base"]
    assert [p.name[5:] for p in s["patches"]] == ["vfs-spell-ten.patch", "vfs-spell-thirty.patch"]
    # KCIDB: sha256 over the newline-terminated sha256 hex of each patch, in order
    inner = "".join(hashlib.sha256(p.read_bytes()).hexdigest() + "\n" for p in s["patches"])
    assert prov["patchset_hash"] == hashlib.sha256(inner.encode()).hexdigest()
    # the same series as .mbox.gz and as the directory format-patch wrote: the same patches
    gz = tmp_path / "series.mbox.gz"
    gz.write_bytes(gzip.compress(series_repo["mbox"].read_bytes()))
    for other in (gz, series_repo["dir"]):
        assert load_series(other, log=lambda *a: None)["provenance"] == prov


class _Archive:
    """A list archive on 127.0.0.1 answering as lore does: GET /all/<msgid>/t.mbox.gz."""

    def __init__(self, threads: dict):
        import http.server
        import threading
        import urllib.parse
        self.requests = []
        archive = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                archive.requests.append(self.path)
                parts = self.path.strip("/").split("/")
                mbox = threads.get(urllib.parse.unquote_plus(parts[1])) if len(parts) == 3 and \
                    parts[0] == "all" and parts[2] == "t.mbox.gz" else None
                body = gzip.compress(mbox) if mbox else b"not found\n"
                self.send_response(200 if mbox else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET

            def log_message(self, *a):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/all"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


def test_series_by_message_id_is_fetched_with_b4_once(series_repo, tmp_path, monkeypatch):
    """A Message-ID (bare, in <>, or a list archive URL) is fetched by the real b4 from the archive
    its git config names, kept, and read like the mbox file."""
    prov = load_series(series_repo["mbox"], log=lambda *a: None)["provenance"]
    msgid = prov["message_id"]
    archive = _Archive({msgid: series_repo["mbox"].read_bytes()})
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text(f"[b4]\n\tmidmask = {archive.url}/%s\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))      # b4's own cache
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "krig-cache"))
    try:
        said = []
        s = load_series(f"<{msgid}>", log=said.append)
        assert s["provenance"] == prov and s["source"] == msgid
        assert len([r for r in archive.requests if r.endswith("/t.mbox.gz")]) == 1, archive.requests
        # again, as bare id and as the archive's URL: the kept thread, no second fetch
        for text in (msgid, f"{archive.url}/{msgid}/", f"https://lore.kernel.org/r/{msgid}",
                     f"https://lore.kernel.org/linux-xfs/{msgid}/T/#u"):
            assert load_series(text, log=said.append)["provenance"] == prov
        assert len([r for r in archive.requests if r.endswith("/t.mbox.gz")]) == 1, archive.requests
        assert any("thread fetched with b4 mbox" in m for m in said), said
        with pytest.raises(UsageError) as e:
            load_series("<nobody-posted-this@example.org>", log=lambda *a: None)
        assert str(e.value).startswith("--series nobody-posted-this@example.org: b4 could not fetch the thread (")
        assert "\n" not in str(e.value)
        # the reply names the Message-ID in its command (as typed: a lore URL), not a path of this machine
        res = sides(tmp_path, [0, 0, 0, 0], [5, 6, 7, 8])
        answer, reason = decide(res, judged_metrics(res))
        state = reply_state(s, answer, reason, res, tmp_path)
        state.command[-1] = f"https://lore.kernel.org/linux-xfs/{msgid}/T/#u"
        (tmp_path / "reply").mkdir()
        write_reply(tmp_path / "reply", state, res, TESTER)
        text = (tmp_path / "reply" / "reply.txt").read_text()
        assert "b4 fetches the series by its Message-ID" in text and f'"<{msgid}>"' in text, text
    finally:
        archive.close()


def test_series_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("From: a@b.c\nSubject: hello\n\nno patch here\n")
    for path, want in ((tmp_path / "missing.mbox", "no such file"), (tmp_path / "empty", r"no \*\.patch"),
                       (tmp_path / "notes.txt", "no patch in it")):
        with pytest.raises(UsageError, match=want):
            load_series(path, log=lambda *a: None)


def test_series_that_does_not_apply_is_one_line(series_repo, tmp_path):
    """The series on a base where its hunk's context is gone: exit 2, the patch and the hunk named."""
    r = series_repo["repo"]
    git(r, "checkout", "-q", "master")
    (r / "fs" / "namei.c").write_text("".join(f"other {i}\n" for i in range(1, 40)))
    git(r, "commit", "-qam", "rewrite namei")
    p = subprocess.run(KRIG + ["validate", "selftest-pass", "--base", f"{r}@master,like=tiny-6.1",
                               "--series", str(series_repo["mbox"]), "--from", "Krig Tester <tester@example.org>",
                               "-o", str(tmp_path / "v")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "series.mbox: patch 0001-vfs-spell-ten.patch does not apply: fs/namei.c: hunk #1 FAILED" in err[0]


def fake_built_tree(d, config: str, release="6.1.0-test"):
    (d / "arch/x86/boot").mkdir(parents=True)
    (d / "include/config").mkdir(parents=True)
    (d / "arch/x86/boot/bzImage").write_bytes(b"\0" * 1024)
    (d / ".config").write_text(config)
    (d / "System.map").write_text("")
    (d / "include/config/kernel.release").write_text(release + "\n")
    return d


def test_kernel_tree_missing_an_option_is_one_line(tmp_path):
    frag = (ROOT / "reproducers/unlink-dentry-growth/config").read_text()
    cfg = frag.replace("CONFIG_XFS_FS=y\n", "# CONFIG_XFS_FS is not set\n")
    tree = fake_built_tree(tmp_path / "linux", cfg)
    p = subprocess.run(KRIG + ["run", "unlink-dentry-growth", "--kernel", str(tree)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120, env={**os.environ, "KRIG_RESULTS": str(tmp_path / "r")})
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip() == (f"krig: error: --kernel {tree}: CONFIG_XFS_FS=y is not set in {tree}/.config, "
                                "and reproducers/unlink-dentry-growth/config needs it")
    assert not (tmp_path / "r").exists()          # nothing ran


def test_kernel_argument_errors(tmp_path):
    img = tmp_path / "bzImage"
    img.write_bytes(b"not a kernel")
    for text, want in ((f"{img},like=tiny-6.1", "like= does not go with a image kernel"),
                       (f"{img}", "not an x86 bzImage"), ("tiny-6.1,colour=blue", "'colour=blue' is not an option"),
                       (f"{tmp_path}/nothing-here", "neither a kernel name")):
        p = subprocess.run(KRIG + ["run", "selftest-pass", "--kernel", text], capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
        assert p.returncode == 2 and want in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_image_release_from_the_setup_header():
    """Debian's installed kernel: the release in its header is the one in its file name."""
    images = sorted(pathlib.Path("/boot").glob("vmlinuz-*"))
    assert images, "make setup installs linux-image-amd64"
    assert image_release(images[-1]) == images[-1].name[len("vmlinuz-"):]
    assert parse(str(images[-1])).kind == "image"


# -- the answer ----------------------------------------------------------------

def sides(tmp_path, base, new, base_verdict="FAIL", new_verdicts=None):
    b = fake_group(tmp_path, "base", base, base_verdict)
    n = tmp_path / "new"
    for i, (v, verdict) in enumerate(zip(new, new_verdicts or ["PASS"] * len(new)), 1):
        fake_group(n, f"x{i}", [v], verdict)
        (n / f"x{i}" / "run-01").rename(n / f"run-{i:02d}")
    (n / "group.json").write_text("{}")
    return compare([str(b)], [str(n)])


@pytest.mark.parametrize("base, new, base_verdict, new_verdicts, answer", [
    ([0, 0, 0, 0], [5, 6, 7, 8], "FAIL", None, "fixed"),
    ([0, 0], [5, 6], "FAIL", None, "fixed"),                                  # too few: the verdicts alone
    ([0, 0, 0, 0], [0, 0, 0, 0], "FAIL", ["FAIL"] * 4, "not fixed"),
    ([5, 5, 5, 5], [6, 6, 6, 6], "PASS", None, "base does not reproduce"),
    ([0, 0, 0, 0], [5, 0, 6, 7], "FAIL", ["PASS", "FAIL", "PASS", "PASS"], "inconclusive"),
    ([0, 0, 0, 0], [5, 6, 7, 8], "FAIL", ["PASS", "PASS", "ERROR", "PASS"], "inconclusive"),
    ([0, 0, 0, 0], [5, 6, 7, 8], "FAIL", ["PASS", "PASS", "CRASHED", "PASS"], "regressed"),
])
def test_answers(tmp_path, base, new, base_verdict, new_verdicts, answer):
    res = sides(tmp_path, base, new, base_verdict, new_verdicts)
    got, reason = decide(res, judged_metrics(res))
    assert got == answer, reason
    if answer == "fixed" and len(base) < 4:
        assert "too few" in reason
    if answer == "fixed" and len(base) >= 4:
        assert "files_seen p = 0.0" in reason


def test_regressed_when_a_held_threshold_is_crossed_only_with_the_series(tmp_path):
    res = sides(tmp_path, [0, 0, 0, 0], [0, 0, 0, 0], "FAIL", ["FAIL"] * 4)
    for t in res.thresholds:
        if t.metric == "answer":
            t.base.state, t.base.held, t.base.judged = "held", 4, 4
            t.new.state, t.new.held, t.new.judged = "crossed", 0, 4
    got, reason = decide(res, judged_metrics(res))
    assert got == "regressed" and "answer" in reason


# -- the lkp table and the reply ----------------------------------------------------

def test_compare_lkp_numbers_equal_the_runs(tmp_path):
    b = fake_group(tmp_path, "b", [3, 5, 4, 9], "PASS")
    n = fake_group(tmp_path, "n", [30, 50, 41, 42], "PASS")
    p = subprocess.run(KRIG + ["compare", "--format", "lkp", "--out", str(tmp_path / "o"), str(b), "--", str(n)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    row = next(ln for ln in lines if ln.rstrip().endswith("files_seen")).split()
    bvals, nvals = [3, 5, 4, 9], [30, 50, 41, 42]
    assert float(row[0]) == statistics.mean(bvals) and float(row[3]) == statistics.mean(nvals)
    assert row[1] == f"{100 * statistics.stdev(bvals) / statistics.mean(bvals):.1f}%"
    assert row[2] == f"{100 * (statistics.mean(nvals) - statistics.mean(bvals)) / statistics.mean(bvals):+.1f}%"
    assert row[5].startswith("0.02")                     # 4 vs 4 separated: 2/70 = 0.029
    assert all(len(ln) <= 72 and ln.isascii() for ln in p.stdout.split("\ncompare.html")[0].splitlines())


PUBLIC_TREE = "https://git.example.org/pub/scm/linux/kernel/git/" + "x" * 60 + "/linux.git"


def reply_state(series, answer, reason, res, tmp_path, tree=None, base=None) -> ValidationRecord:
    return ValidationRecord.from_json({"reproducer": "selftest-pass", "preset": None, "repeat": 4, "answer": answer, "reason": reason,
            "series_provenance": series["provenance"], "reply_subject": series["reply_subject"],
            "judged_metrics": judged_metrics(res), "differences": ["CONFIG_KASAN: BASE n, NEW y"],
            "base_kernel": {"release": "6.1.192-krig-gabc", "git": {"repository": tree or PUBLIC_TREE,
                                                                   "commit": "a" * 40, "branch": "master"},
                            "machine": {"cpus": 2, "mem_total_bytes": 4 << 30, "cpu": {"model": "QEMU"}},
                            "rig": {"name": "qemu-default"}, "rig_facts": {"accel": "tcg"}},
            "new_kernel": {"release": "6.1.192-krig-gabc-s1234"},
            "command": ["krig", "validate", "selftest-pass", "--base",
                        base or f"{tmp_path / ('y' * 90)}@master,like=tiny-6.1", "--series", str(series["source"])], "series": series["source"]})


# -- the orchestration, with the groups faked (the real ones: tests/workflows/test_validate_e2e.py) ---

def _fake_groups(monkeypatch, verdicts: dict):
    """group_planned of workflows.validate replaced (each call adds fake runs up to `repeat`), and
    no kernel built (RunPlan.with_kernel keeps the text)."""
    import dataclasses
    from workflows import validate as kv
    from workflows.group import group_runs, summarize
    from workflows.plan import RunPlan
    from test_compare import fake_run
    calls = []

    def run_group(plan, repeat, gdir, log=print, session=None):
        side = "new" if ",series=" in plan.kernel_arg else "base"
        calls.append((side, repeat))
        verdict, value = verdicts[side]
        while len(list(gdir.glob("run-*"))) < repeat:
            i = len(list(gdir.glob("run-*"))) + 1
            fake_run(gdir / f"run-{i:02d}", value + i, verdict)
        group = summarize(group_runs(gdir))
        (gdir / "group.json").write_text(json.dumps(group))
        return gdir, group, 0
    monkeypatch.setattr(kv, "group_planned", run_group)
    monkeypatch.setattr(RunPlan, "with_kernel", lambda self, text, log=print: dataclasses.replace(self, kernel_arg=text))
    return calls


def test_validate_alternates_the_kernels(series_repo, tmp_path, monkeypatch):
    from workflows.validate import validate
    calls = _fake_groups(monkeypatch, {"base": ("FAIL", -100), "new": ("PASS", 10)})
    vdir, state, code = validate("selftest-pass", "tiny-6.1", str(series_repo["mbox"]), 4, out=tmp_path / "v",
                                 sender="Krig Tester <tester@example.org>", log=lambda *a: None)
    assert calls == [("base", 1), ("new", 1), ("base", 2), ("new", 2), ("base", 3), ("new", 3), ("base", 4),
                     ("new", 4)]
    assert (state.answer, code) == ("fixed", 0) and "files_seen p = 0.0" in state.reason
    assert "Tested-by: Krig Tester <tester@example.org>" in (vdir / "reply.txt").read_text()
    saved = json.loads((vdir / "validate.json").read_text())
    assert saved["series_provenance"]["base_commit"] == series_repo["base"] and saved["answer"] == "fixed"
    # the same command on the finished directory: nothing new runs, the same answer
    calls.clear()
    _, again, _ = validate("selftest-pass", "tiny-6.1", str(series_repo["mbox"]), 4, out=tmp_path / "v",
                           sender="Krig Tester <tester@example.org>", log=lambda *a: None)
    assert again.answer == "fixed" and len(list((vdir / "base").glob("run-*"))) == 4
    with pytest.raises(UsageError, match="made for base 'tiny-6.1', not 'linux-6.1'"):
        validate("selftest-pass", "linux-6.1", str(series_repo["mbox"]), 4, out=tmp_path / "v",
                 sender="Krig Tester <tester@example.org>", log=lambda *a: None)


def test_validate_stops_when_the_base_does_not_reproduce(series_repo, tmp_path, monkeypatch):
    from workflows.validate import validate
    calls = _fake_groups(monkeypatch, {"base": ("PASS", 10), "new": ("PASS", 10)})
    vdir, state, code = validate("selftest-pass", "tiny-6.1", str(series_repo["mbox"]), 4, out=tmp_path / "v",
                                 sender="Krig Tester <tester@example.org>", log=lambda *a: None)
    assert calls == [("base", 1), ("new", 1)] and (state.answer, code) == ("base does not reproduce", 4)
    text = (vdir / "reply.txt").read_text()
    assert "Tested-by" not in text and "base does not reproduce" in text
    assert all(len(ln) <= 72 for ln in text.splitlines())


def test_a_series_that_brings_the_regression_to_a_passing_base_is_regressed(series_repo, tmp_path, monkeypatch):
    """The base PASSes, the patched kernel FAILs: both sides run all their runs, the answer is regressed."""
    from workflows.validate import validate
    calls = _fake_groups(monkeypatch, {"base": ("PASS", 10), "new": ("FAIL", -100)})
    vdir, state, code = validate("selftest-pass", "tiny-6.1", str(series_repo["mbox"]), 2, out=tmp_path / "v",
                                 sender="Krig Tester <tester@example.org>", log=lambda *a: None)
    assert calls == [("base", 1), ("new", 1), ("base", 2), ("new", 2)]
    assert (state.answer, code) == ("regressed", 5), state.reason
    assert "held in every base run" in state.reason
    assert "Tested-by" not in (vdir / "reply.txt").read_text()


def test_runs_lost_to_host_contention_are_run_again(series_repo, tmp_path, monkeypatch):
    """A patched run that ended ERROR on host contention is replaced; the answer rests on the others."""
    from workflows.validate import validate
    calls = _fake_groups(monkeypatch, {"base": ("FAIL", -100), "new": ("PASS", 10)})
    from workflows import validate as kv
    plain = kv.group_planned

    def contended_once(plan, repeat, gdir, log=print, session=None):
        out = plain(plan, repeat, gdir, log, session)
        first = gdir / "run-01"
        if ",series=" in plan.kernel_arg and repeat == 1:
            (first / "verdict.json").write_text(json.dumps({"verdict": "ERROR", "reason": "host contention: x",
                                                                  "cause": "host-contention"}))
        return out
    monkeypatch.setattr(kv, "group_planned", contended_once)
    vdir, state, code = validate("selftest-pass", "tiny-6.1", str(series_repo["mbox"]), 2, out=tmp_path / "v",
                                 sender="Krig Tester <tester@example.org>", log=lambda *a: None)
    assert calls == [("base", 1), ("new", 1), ("new", 2), ("base", 2), ("new", 3)]
    assert (state.answer, code) == ("fixed", 0), state.reason
    assert state.comparison.new.verdicts == {"PASS": 2, "ERROR": 1}


def test_timing_thresholds_a_busy_host_moves_are_not_required():
    """unlink-dentry-growth's base crossed its dentry thresholds and, on a busy host, the timing
    one (host_sensitive): "fixed" rests on the dentry metrics."""
    def row(metric, state):
        return {"metric": metric, "kind": "regression", "base": {"state": state}}
    res = {"reproducer": "unlink-dentry-growth",
           "thresholds": [row("peak_negative_vs_inflight", "crossed"), row("end_nr_negative", "crossed"),
                          row("trough_peak_ratio", "crossed")]}
    assert judged_metrics(Comparison.from_json(res)) == ["peak_negative_vs_inflight", "end_nr_negative"]
    res["thresholds"] = [row("peak_negative_vs_inflight", "held"), row("trough_peak_ratio", "crossed")]
    assert judged_metrics(Comparison.from_json(res)) == ["trough_peak_ratio"]


def test_a_lab_servers_facts_are_the_answers():
    """What the IPMI rig records of a server (DMI before the kexec, `mc info`, the machine after it)
    becomes validate.json's "server" and one line of the answer; a QEMU guest has none."""
    from workflows.reply import server_line
    from workflows.validate import server_facts
    from rigs.ipmi.kexec import firmware_facts
    facts = firmware_facts("[none] integrity\nsystemd=yes\ndmi.bios_vendor=EFI Development Kit II / OVMF\n"
                           "dmi.bios_version=0.0.0\ndmi.bios_date=02/06/2015\ndmi.sys_vendor=QEMU\n"
                           "dmi.product_name=Standard PC (Q35 + ICH9, 2009)\n")
    assert facts == {"firmware": "EFI Development Kit II / OVMF 0.0.0 (02/06/2015)",
                     "system": "QEMU Standard PC (Q35 + ICH9, 2009)"}
    k = {"rig": {"name": "lab1"}, "machine": {"mem_total_bytes": 2 << 30, "cpus": 1, "cpu": {"model": "QEMU TCG"}},
         "rig_facts": {**facts, "bmc_info": "manufacturer id 4753, firmware 9.08, IPMI 2.0", "bmc": "127.0.0.1:623"}}
    s = server_facts(SideKernel.from_json(k))
    assert s.firmware.startswith("EFI Development Kit") and s.ram_bytes == 2 << 30 and s.rig == "lab1"
    assert server_line(s) == ("QEMU Standard PC (Q35 + ICH9, 2009), firmware EFI Development Kit II / OVMF 0.0.0 "
                              "(02/06/2015), 2.0 GiB, 1 x QEMU TCG; BMC manufacturer id 4753, firmware 9.08, IPMI 2.0")
    assert "server_model" not in s.to_json() and "firmware_versions" not in s.to_json()
    redfish = {"server_model": "Contoso 3500", "memory_gib": 256, "firmware_versions": {"bios": "2.1.7"}}
    s = server_facts(SideKernel.from_json({**k, "rig_facts": {**k["rig_facts"], **redfish}}))   # as a Redfish BMC says it
    assert {x: s.to_json()[x] for x in redfish} == redfish and s.firmware.startswith("EFI Development Kit")
    assert server_facts(SideKernel.from_json({"rig": {"name": "qemu-default"}, "rig_facts": {"accel": "tcg"}})) is None
    assert server_facts(None) is None                   # no run of the base could be read
    assert firmware_facts("dmi.bios_vendor=\ndmi.sys_vendor=\n") == {}


# -- the rig and the host, checked before any kernel is built ----------------------------------

@pytest.mark.parametrize("rig", ["installed", "too-big"])
def test_a_rig_that_cannot_run_it_is_refused_before_any_build(series_repo, tmp_path, monkeypatch, rig):
    """A lab server that boots only its installed kernel (boot = "installed"), or a guest larger
    than the host can give: one line, and the kernels' build was never entered."""
    from conftest import rig_with_memory
    from test_bad_input import installed_rig
    from workflows import validate as kv
    entered = []
    from workflows import plan as kp
    monkeypatch.setattr(kp, "load_kernel", lambda *a, **k: entered.append(a))
    if rig == "installed":
        path, line = installed_rig(tmp_path / "lab"), (r'^--base tiny-6\.1: rig installed cannot boot a kernel krig '
                                                        r'builds: .*boot = "installed".*; nothing was built$')
    else:
        path, line = rig_with_memory(tmp_path, "64T"), (r"qemu-64t\.toml\.memory: 65536\.0 GiB is more than this host "
                                                         r"can give now")
    with pytest.raises(UsageError, match=line):
        kv.validate("selftest-pass", "tiny-6.1", str(series_repo["mbox"]), 2, rig_name=str(path),
                    out=tmp_path / "v", sender="Krig Tester <tester@example.org>", log=lambda *a: None)
    assert entered == [] and not (tmp_path / "v").exists()
