"""Nothing secret or local leaves the host: a tree's origin URL with user:token@ is recorded
without them (and taken out of an older manifest's) in the manifest, the bundle, the reply
and the KCIDB report; the report names a run directory without this host's path. No guest.

Covers: kernels/gitrepo.py, krig/results.py."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import tarfile

import pytest

from conftest import KRIG, ROOT
from kernels.gitrepo import git_origin
from workflows.reply import body
from krig.record_validation import ValidationRecord
from krig.results import public_url
from test_kcidb import made_run

TOKEN = "ghp_k1rgS3cretT0ken"
ORIGIN = f"https://krig-bot:{TOKEN}@git.example.org/linux.git"
PUBLIC = "https://git.example.org/linux.git"


@pytest.mark.parametrize("text,public", [
    (ORIGIN, PUBLIC),
    (f"https://{TOKEN}@git.example.org/linux.git", PUBLIC),
    (f"https://user:p@ss{TOKEN}@git.example.org/a@b", "https://git.example.org/a@b"),     # a raw @ in the password
    ("ssh://git@git.example.org:2222/linux.git", "ssh://git.example.org:2222/linux.git"),
    (f'{{"repository": "{ORIGIN}"}} and http://u:{TOKEN}@h/x', f'{{"repository": "{PUBLIC}"}} and http://h/x'),
    ("https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git",
     "https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git"),
    ("/srv/linux", "/srv/linux"), ("git@github.com:torvalds/linux.git", "git@github.com:torvalds/linux.git"),
    # scp's form: the conventional git user stays, any other (a token, a person) goes
    (f"{TOKEN}@github.com:org/linux.git", "github.com:org/linux.git"),
    (f"krig-bot:{TOKEN}@git.example.org:org/linux.git", "git.example.org:org/linux.git"),
    (f"user:p@ss{TOKEN}@git.example.org:linux.git", "git.example.org:linux.git"),   # a raw @ in it
    ("alice@build-host:src/linux", "build-host:src/linux"),
    (f'{{"repository": "{TOKEN}@git.example.org:org/linux.git"}}', '{"repository": "git.example.org:org/linux.git"}'),
    # a fragment: of a URL, of scp's form
    (f"https://git.example.org/linux.git#{TOKEN}", PUBLIC),
    (f"https://git.example.org/linux.git?x=1#{TOKEN}", PUBLIC),
    (f"git@github.com:org/linux.git#{TOKEN}", "git@github.com:org/linux.git"),
    # words that only look like it stay
    ("host:path", "host:path"), ("Reported-by: a@example.org", "Reported-by: a@example.org"),
    ("ask a@b: c", "ask a@b: c"), ("at 12:30 ok", "at 12:30 ok"),
    (None, None),
])
def test_public_url(text, public):
    assert public_url(text) == public


@pytest.mark.parametrize("origin,public", [
    (ORIGIN, PUBLIC), (f"git@git.example.org:org/linux.git#{TOKEN}", "git@git.example.org:org/linux.git"),
    (f"{TOKEN}@git.example.org:org/linux.git", "git.example.org:org/linux.git")])
def test_origin_is_recorded_without_its_token(tmp_path, origin, public):
    tree = tmp_path / "linux"
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", "-b", "master", str(tree)], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run(git + ["remote", "add", "origin", origin], check=True)
    rec = git_origin(tree)
    assert rec["repository"] == public and rec["branch"] == "master"


def _state(git: dict) -> ValidationRecord:
    kernel = {"release": "6.1.0-test", "git": git, "rig": {"name": "qemu-default"}}
    return ValidationRecord.from_json({"series_provenance": {"patchset_hash": "b" * 64}, "reproducer": "selftest-pass", "answer": "fixed",
            "reason": "the base fails, the series passes", "base_kernel": kernel, "new_kernel": kernel,
            "preset": None, "repeat": 4, "differences": [], "series": "20261120.1-1-dev@example.org",
            "command": ["krig", "validate", "selftest-pass", "--base", "tiny-6.1", "--series", "x"]})


def test_an_older_manifests_token_reaches_no_bundle_reply_or_report(tmp_path, krig_cli):
    """A run whose manifest recorded the origin with its token (before krig took it out)."""
    git = {"repository": ORIGIN, "commit": "c" * 40, "branch": "master"}
    run = made_run(tmp_path / "runs" / "a-run", "pass", git=git)
    assert TOKEN in (run / "manifest.json").read_text()

    out = tmp_path / "r.json"
    p = krig_cli("export", "kcidb", str(run), "--origin", "lab_7", "-o", str(out))
    assert p.returncode == 0, p.stderr
    report = out.read_text()
    assert TOKEN not in report and "krig-bot" not in report and str(tmp_path) not in report
    (checkout,) = json.loads(report)["checkouts"]
    assert checkout["git_repository_url"] == PUBLIC
    assert [t["misc"]["run_dir"] for t in json.loads(report)["tests"] if "run_dir" in t["misc"]] == ["a-run"]

    b = tmp_path / "b.tar.gz"
    p = subprocess.run(KRIG + ["bundle", str(run), "-o", str(b)], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    with tarfile.open(b) as t:
        for m in t.getmembers():
            if m.isfile():
                data = t.extractfile(m).read()
                assert TOKEN.encode() not in data and b"krig-bot" not in data, m.name
        meta = json.loads(t.extractfile(next(m for m in t.getmembers() if m.name.endswith("/bundle.json"))).read())
    assert meta["kernel"]["git"]["repository"] == PUBLIC

    text = body(_state(git), None, ("Krig Tester", "tester@example.org"))
    assert TOKEN not in text and "krig-bot" not in text and f"tree            {PUBLIC}" in text


def test_a_tree_without_origin_leaves_no_path_of_this_host(tmp_path, krig_cli):
    """A kernel built from a local tree with no origin (and an origin with a token in its query
    string): the manifest records the tree by its last name, and neither the KCIDB report, the
    bundle nor the reply holds the tree's absolute path."""
    src = tmp_path / "home-alice-src"
    tree = src / "linux"
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", "-b", "master", str(tree)], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "x"], check=True)
    rec = git_origin(tree)
    assert rec["repository"] == "linux"
    kernel = {"name": "tree-linux", "release": "6.1.0-test", "arg": str(tree), "description": f"built tree {tree}",
              "image": str(tree / "arch/x86/boot/bzImage"), "config": str(tree / ".config"), "git": rec}
    run = made_run(tmp_path / "runs" / "a-run", "pass")
    man = json.loads((run / "manifest.json").read_text())
    man["kernel"].update(kernel, git={**rec, "repository": str(tree)})      # as an older manifest recorded it
    (run / "manifest.json").write_text(json.dumps(man))

    out = tmp_path / "r.json"
    p = krig_cli("export", "kcidb", str(run), "--origin", "lab_7", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert str(src) not in out.read_text()
    (checkout,) = json.loads(out.read_text())["checkouts"]
    assert checkout["misc"]["git_repository"] == "linux"

    b = tmp_path / "b.tar.gz"
    p = krig_cli("bundle", str(run), "-o", str(b), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    with tarfile.open(b) as t:
        for m in t.getmembers():
            assert str(src) not in m.name
            if m.isfile():
                assert str(src).encode() not in t.extractfile(m).read(), m.name
        meta = json.loads(t.extractfile(next(m for m in t.getmembers() if m.name.endswith("/bundle.json"))).read())
    assert meta["kernel"]["git"]["repository"] == "linux" and meta["kernel"]["description"] == "built tree linux"

    state = _state({**rec, "repository": str(tree)})
    state.command = ["krig", "validate", "selftest-pass", "--base", f"{tree}@master", "--series", "x"]
    text = body(state, None, ("Krig Tester", "tester@example.org"))
    # no public remote: the tree is said to be local, the command names ./linux at the base commit
    assert str(src) not in text and "tree            a local tree (no public remote)" in text
    assert f" linux@{rec['commit']} " in " ".join(text.replace("\\\n", " ").split()) + " ", text

    assert public_url("https://git.example.org/linux.git?access_token=" + TOKEN) == PUBLIC


# -- a qualify run's BMC passwords, handed to its workers ----------------------------------

SECRET = "qualpw-" + TOKEN[-8:]
PROBE = '''
import os, subprocess
from rigs.ipmi.spec import SECRETS_FILE_ENV, take_env_secret, take_handed_secrets

def test_worker_gets_the_secret_and_its_children_nothing():
    assert os.environ[SECRETS_FILE_ENV].startswith("/proc/")
    take_handed_secrets()
    assert take_env_secret("KRIG_TEST_QUAL_PW") == "{secret}"
    child = subprocess.run(["sh", "-c", "env; ls -l /proc/self/fd"], capture_output=True, text=True).stdout
    assert SECRETS_FILE_ENV not in child and "{secret}" not in child and "krig-secrets" not in child
'''
HOLDER = '''
import os, sys
import pytest
from workflows.qualify import worker_spec
from rigs.ipmi.spec import SECRETS_FILE_ENV, hand_over_secrets, take_env_secret
take_env_secret("KRIG_TEST_QUAL_PW")
fd, path = hand_over_secrets()
assert SECRETS_FILE_ENV not in os.environ
print(path, flush=True)
if sys.argv[1] == "wait":
    sys.stdin.read()
sys.exit(pytest.main([sys.argv[1], "-p", "xdist", "-p", "no:labgrid", "-p", "no:cacheprovider", "-q",
                      "--tx", worker_spec(1, path), "--dist", "load", "--rootdir", os.getcwd()]))
'''


def _files_holding_the_secret(tmp: pathlib.Path) -> list:
    """Files under the holder's TMPDIR (where the secrets file used to be made) that hold the secret."""
    return [f for f in tmp.rglob("*") if f.is_file() and SECRET in f.read_text(errors="replace")]


def _holder(tmp_path, what: str) -> subprocess.Popen:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "KRIG_TEST_QUAL_PW": SECRET, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", HOLDER, what], cwd=ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_qualify_workers_get_the_secrets_and_no_child_of_theirs_does(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE.replace("{secret}", SECRET))
    p = _holder(tmp_path, str(probe))
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0, out
    assert out.startswith(f"/proc/{p.pid}/fd/") and "1 passed" in out, out
    assert not _files_holding_the_secret(tmp_path / "tmp")


def test_a_killed_holder_leaves_no_secret_behind(tmp_path):
    p = _holder(tmp_path, "wait")
    path = p.stdout.readline().strip()
    assert path.startswith(f"/proc/{p.pid}/fd/")
    assert json.loads(pathlib.Path(path).read_text()) == {"KRIG_TEST_QUAL_PW": SECRET}
    assert not _files_holding_the_secret(tmp_path / "tmp")
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    p.stdout.close()
    p.stdin.close()
    assert not os.path.exists(path) and not _files_holding_the_secret(tmp_path / "tmp")
