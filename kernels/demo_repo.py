"""The history `make bisect-demo` bisects: a small git history of Debian's 6.1 source with one bad
commit (the rmdir-keeps-children patch), bisected with unlink-dentry-growth.

The history is a bare repository in $KRIG_CACHE/bisect-demo/ (made once, with
fixed author dates, so its commit ids are the same on every machine with the
same tarball):

    1 Import Debian linux-source-6.1          <- tag krig-demo-good
    2 Documentation: a note                   (no object changes)
    3 xfs: a comment in xfs_icache.c          (one object)
    4 vfs: rmdir-keeps-children               <- the first bad commit
    5 mm: a comment in vmscan.c               (one object)
    6 Documentation: another note             <- tag krig-demo-bad

The build tree of the first step is seeded from the most recently built krig
tree (linux-6.1), so no step compiles more than a few files.
"""
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import time

from krig import KERNEL_DIR
from krig.errors import KrigError
from krig.paths import cache_dir
from .patching import apply_to_copies
from .trees import ensure_pristine
from .definition import DEFAULT_TARBALL
from .digest import tarball_sha256

CULPRIT = "vfs: do not prune a removed directory's children in vfs_rmdir() (demo regression)"
COMMITS = [
    ("Documentation: say that this tree is krig's bisect demo",
     "append", "Documentation/filesystems/vfs.rst", "\n.. krig bisect demo: a harmless documentation change.\n"),
    ("xfs: add a comment to xfs_icache.c (demo, harmless)",
     "append", "fs/xfs/xfs_icache.c", "\n/* krig bisect demo: a harmless comment, one object rebuilds. */\n"),
    (CULPRIT, "patch", "rmdir-keeps-children", ""),      # (a patch series: no text)
    ("mm: add a comment to vmscan.c (demo, harmless)",
     "append", "mm/vmscan.c", "\n/* krig bisect demo: another harmless comment. */\n"),
    ("Documentation: a second note for the bisect demo",
     "append", "Documentation/filesystems/vfs.rst", "\n.. krig bisect demo: a second documentation change.\n"),
]


def _git(repo, *args, input=None, env=None, work_tree=None) -> str:
    argv = ["git", f"--git-dir={repo}"] + ([f"--work-tree={work_tree}"] if work_tree else []) + list(args)
    p = subprocess.run(argv, input=input, capture_output=True, env=env)
    if p.returncode != 0:
        raise KrigError(f"{' '.join(argv[:4])}...: {p.stderr.decode(errors='replace').strip()[-300:]}")
    return p.stdout.decode().strip()


def _commit(repo, message, parent, n) -> str:
    date = f"2024-01-{n:02d}T12:00:00+0000"
    env = {**os.environ, "GIT_AUTHOR_NAME": "krig demo", "GIT_AUTHOR_EMAIL": "krig@localhost",
           "GIT_COMMITTER_NAME": "krig demo", "GIT_COMMITTER_EMAIL": "krig@localhost",
           "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    tree = _git(repo, "write-tree")
    return _git(repo, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", message, env=env)


def _put(repo, path: str, data: bytes):
    blob = _git(repo, "hash-object", "-w", "--stdin", f"--path={path}", input=data)
    _git(repo, "update-index", "--cacheinfo", f"100644,{blob},{path}")


def existing_demo_repo() -> str | None:
    repos = sorted(cache_dir("bisect-demo").glob("*.git/krig-demo.json"))
    return str(repos[-1].parent) if repos else None


def make_demo_repo(log=print) -> tuple[pathlib.Path, dict]:
    """The demo history, made once in the cache; a second caller at the same time waits for the
    first one's import instead of making its own."""
    tarball = pathlib.Path(DEFAULT_TARBALL)
    sha = tarball_sha256(tarball)
    repo = cache_dir("bisect-demo") / f"linux-6.1-{sha[:12]}.git"
    with open(repo.with_name(repo.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info_path = repo / "krig-demo.json"
        if info_path.exists():
            return repo, json.loads(info_path.read_text())
        return _import(tarball, sha, repo, log)


def _import(tarball: pathlib.Path, sha: str, repo: pathlib.Path, log) -> tuple[pathlib.Path, dict]:
    pristine = ensure_pristine(tarball, sha, log)
    tmp = repo.with_name(repo.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    log(f"bisect-demo: importing {pristine} into {repo} (once)")
    subprocess.run(["git", "init", "-q", "--bare", str(tmp)], check=True)
    _git(tmp, "-c", "core.looseCompression=1", "add", "-A", "-f", ".", work_tree=pristine)
    commits = [_commit(tmp, "Import Debian linux-source-6.1 (krig bisect demo base)", None, 1)]
    culprit = None
    for i, (msg, kind, what, text) in enumerate(COMMITS, 2):
        if kind == "append":
            old = subprocess.run(["git", f"--git-dir={tmp}", "cat-file", "blob", f"{commits[-1]}:{what}"],
                                 capture_output=True, check=True).stdout
            _put(tmp, what, old + text.encode())
        else:
            patches = [(what, p) for p in sorted((KERNEL_DIR / "patches" / what).glob("*.patch"))]
            for f, data in apply_to_copies(lambda rel: (pristine / rel).read_bytes(), patches).items():
                _put(tmp, f, data)
        commits.append(_commit(tmp, msg, commits[-1], i))
        if msg == CULPRIT:
            culprit = commits[-1]
    _git(tmp, "update-ref", "refs/heads/master", commits[-1])
    _git(tmp, "update-ref", "refs/tags/krig-demo-good", commits[0])
    _git(tmp, "update-ref", "refs/tags/krig-demo-bad", commits[-1])
    info = {"good": "krig-demo-good", "bad": "krig-demo-bad", "culprit": culprit, "commits": commits,
            "import_seconds": round(time.monotonic() - t0, 1)}
    (tmp / "krig-demo.json").write_text(json.dumps(info, indent=1) + "\n")
    tmp.rename(repo)
    assert culprit is not None, "CULPRIT is one of COMMITS"
    log(f"bisect-demo: {len(commits)} commits in {time.monotonic() - t0:.0f}s; first bad is {culprit[:12]}")
    return repo, info


AUTHOR = {"GIT_AUTHOR_NAME": "Pat Developer", "GIT_AUTHOR_EMAIL": "pat@example.org",
          "GIT_COMMITTER_NAME": "Pat Developer", "GIT_COMMITTER_EMAIL": "pat@example.org",
          "GIT_AUTHOR_DATE": "2024-02-01T12:00:00+0000", "GIT_COMMITTER_DATE": "2024-02-01T12:00:00+0000"}


def _env() -> dict:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **AUTHOR}


def commit_on(repo, parent: str, path: str, data: bytes, message: str, index: pathlib.Path) -> str:
    """A commit on `parent` that sets one file (a separate index: the repository stays bare)."""
    env = {**_env(), "GIT_INDEX_FILE": str(index)}
    _git(repo, "read-tree", parent, env=env)
    blob = _git(repo, "hash-object", "-w", "--stdin", input=data, env=env)
    _git(repo, "update-index", "--cacheinfo", f"100644,{blob},{path}", env=env)
    return _git(repo, "commit-tree", _git(repo, "write-tree", env=env), "-p", parent, "-m", message, env=env)


def series_mbox(repo, base: str, tip: str, subject: str, out: pathlib.Path, to: tuple = ()) -> pathlib.Path:
    """base..tip as a mailed series (`git format-patch --cover-letter --thread --base`, sent `to`
    these addresses), one mbox."""
    d = out.with_suffix(".d")
    _git(repo, "format-patch", "-q", "--cover-letter", "--thread", f"--base={base}", "-o", str(d),
         *(f"--to={a}" for a in to), f"{base}..{tip}", env=_env())
    cover = d / "0000-cover-letter.patch"
    cover.write_text(cover.read_text().replace("*** SUBJECT HERE ***", subject))
    out.write_bytes(b"".join(p.read_bytes() for p in sorted(d.iterdir())))
    return out


CULPRIT_SUBJECT = "vfs: rmdir keeps the children"


def culprit_series(out: pathlib.Path, log=print) -> pathlib.Path:
    """The demo history's culprit commit as its developer mails it (to FIX_LIST): the
    rmdir-keeps-children regression as a series, one mbox at out."""
    demo, info = make_demo_repo(log=log)
    culprit = info["culprit"]
    return series_mbox(demo, _git(demo, "rev-parse", f"{culprit}^").strip(), culprit, CULPRIT_SUBJECT, out,
                       to=(FIX_LIST,))


FIX_SUBJECT = "vfs: rmdir prunes children again"
FIX_LIST = "linux-fsdevel@vger.kernel.org"         # where a vfs fix is sent (a reply copies it)


def fix_series(demo: pathlib.Path, info: dict, dev: pathlib.Path, out: pathlib.Path) -> tuple[pathlib.Path, str]:
    """A developer's clone of the demo history (dev, bare) with the culprit's fix on its tip, mailed
    as a series to out: shrink_dcache_parent() back in vfs_rmdir(). Returns (mbox, base commit)."""
    bad, culprit = info["commits"][-1], info["culprit"]
    subprocess.run(["git", "clone", "-q", "--bare", "--shared", str(demo), str(dev)], check=True, env=_env())
    namei = subprocess.run(["git", f"--git-dir={dev}", "cat-file", "blob", f"{culprit}^:fs/namei.c"],
                           capture_output=True, check=True).stdout
    fix = commit_on(dev, bad, "fs/namei.c", namei,
                    "vfs: prune a removed directory's children in vfs_rmdir() again\n\n"
                    "Put shrink_dcache_parent() back, so rmdir drops the negative\n"
                    "dentries of the files that were in the directory.", dev / "krig-index")
    return series_mbox(dev, bad, fix, FIX_SUBJECT, out, to=(FIX_LIST,)), bad
