"""The reused build trees: one per source origin under $KRIG_CACHE/kbuild/trees/, its lock and
state, the pristine source it starts from, and how a new tree is seeded from a built one (a copy
with timestamps kept, so make reuses its objects). kernels/incremental.py builds in them.
A spec's source is read here too without a tree: a file at a time (a series tried on copies of
the files it touches), or its build files (Makefiles, Kbuild, Kconfig: a server's drivers mapped)."""
import contextlib
import fcntl
import itertools
import json
import os
import pathlib
import re
import shutil
import subprocess
import time

from krig.errors import KrigError
from krig.paths import cache_dir
from .definition import DEFAULT_BASE_CONFIG
from .digest import cache_key
from .gitrepo import git, git_env
from .spec import KernelSpec, source_identity


@contextlib.contextmanager
def locked(path: pathlib.Path, log=print, what="", block=True, shared=False, doing=""):
    """An flock on path: exclusive (a build in the tree), or shared (reading the tree: a copy of
    it). `doing` (what the holder does, "building kernel tiny-6.1") is kept beside the lock while
    it is held, so a build that has to wait says what it waits for."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    f = open(path, "a+")
    note = None
    try:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if not block:
                raise
            log(f"kbuild: waiting for {what or path}: {holders(path) or 'another build holds it'}")
            fcntl.flock(f, mode)
        if doing:
            note = _held(path) / f"{os.getpid()}.{next(_notes)}"
            note.parent.mkdir(exist_ok=True)
            note.write_text(f"pid {os.getpid()} {doing} since {time.strftime('%H:%M:%S')}\n")
        yield
    finally:
        if note is not None:
            note.unlink(missing_ok=True)
        f.close()


_notes = itertools.count()


def _held(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(path.name + ".held")


def holders(path: pathlib.Path) -> str:
    """What the builds holding the lock at path said they do ("pid 4242 building kernel tiny-6.1
    since 11:40:02"), a note of a process that is gone removed."""
    said = []
    for note in sorted(_held(path).glob("*.*")):
        pid = note.name.split(".", 1)[0]
        if not pid.isdigit() or not pathlib.Path(f"/proc/{pid}").exists():
            note.unlink(missing_ok=True)
            continue
        try:
            said.append(note.read_text().strip())
        except OSError:
            continue
    return "; ".join(said)


# -- sources -----------------------------------------------------------------

def pristine_dir(tarball: pathlib.Path, sha: str) -> pathlib.Path:
    stem = re.sub(r"\.tar(\.\w+)?$", "", tarball.name)
    return cache_dir("kbuild", "src") / f"{stem}-{sha[:12]}"


def ensure_pristine(tarball: pathlib.Path, sha: str, log=print) -> pathlib.Path:
    """The tarball extracted once (top directory stripped); never built in."""
    dest = pristine_dir(tarball, sha)
    if dest.is_dir():
        return dest
    with locked(cache_dir("kbuild", "locks") / f"src-{sha[:12]}.lock", log, "the source extraction",
                doing=f"extracting {tarball.name}"):
        if dest.is_dir():
            return dest
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        log(f"kbuild: extracting {tarball} into {dest}")
        p = subprocess.run(["tar", "-xf", str(tarball), "-C", str(tmp), "--strip-components=1"],
                           capture_output=True, text=True)
        if p.returncode != 0 or not (tmp / "Makefile").exists():
            shutil.rmtree(tmp, ignore_errors=True)
            raise KrigError(f"cannot extract {tarball}: {p.stderr.strip()[:300] or 'no Makefile inside'}")
        tmp.rename(dest)
    return dest


def source_files(spec: KernelSpec):
    """A reader of the spec's source, a file at a time: rel -> its bytes, or None when the source
    has no such file (the extracted tarball's files, or a git commit's)."""
    ident = source_identity(spec)
    if spec.source == "git":
        def read_blob(rel):
            p = subprocess.run(["git", "-C", str(spec.tree), "cat-file", "blob", f"{ident['commit']}:{rel}"],
                               capture_output=True, env=git_env())
            return p.stdout if p.returncode == 0 else None
        return read_blob
    pristine = ensure_pristine(spec.tarball_path(), ident["tarball_sha256"])

    def read_file(rel):
        f = pristine / rel
        return f.read_bytes() if f.is_file() else None
    return read_file


def source_tree(spec: KernelSpec) -> pathlib.Path:
    """The spec's source as files to read the build files of: the extracted tarball, or a git
    commit's Makefiles, Kbuild and Kconfig files taken out once into krig's cache."""
    ident = source_identity(spec)
    if spec.source != "git":
        return ensure_pristine(spec.tarball_path(), ident["tarball_sha256"])
    out = cache_dir("kbuild", "buildfiles") / ident["commit"]
    if out.is_dir():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    names = subprocess.run(["git", "-C", str(spec.tree), "ls-tree", "-r", "-z", "--name-only", ident["commit"]],
                           capture_output=True, env=git_env()).stdout.split(b"\0")
    want = [n.decode(errors="replace") for n in names if n.rsplit(b"/", 1)[-1] in (b"Makefile", b"Kbuild") or
            n.rsplit(b"/", 1)[-1].startswith(b"Kconfig")]
    want = [n for n in want if ".." not in n.split("/") and not n.startswith("/")]
    batch = subprocess.run(["git", "-C", str(spec.tree), "cat-file", "--batch"], capture_output=True,
                           input="".join(f"{ident['commit']}:{n}\n" for n in want).encode(), env=git_env()).stdout
    pos = 0
    for rel in want:                    # "<oid> blob <size>\n<bytes>\n" per name, in order
        head, _, _ = batch[pos:pos + 200].partition(b"\n")
        words = head.split()
        pos += len(head) + 1
        if len(words) != 3 or words[1] != b"blob":
            continue
        size = int(words[2])
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(batch[pos:pos + size])
        pos += size + 1
    tmp.rename(out)
    return out


def config_family(spec: KernelSpec) -> str:
    """Suffix of the build tree's name: kernels whose base config differs (tinyconfig vs
    defconfig) share almost no objects, so each family gets its own tree and switching
    between them never rebuilds a whole kernel. The default family keeps the plain name."""
    if list(spec.base_config) == DEFAULT_BASE_CONFIG:
        return ""
    return "-" + cache_key({"base_config": list(spec.base_config)})[:8]


def origin_of(spec: KernelSpec, identity: dict) -> tuple[str, dict]:
    family = config_family(spec)
    if spec.source == "linux-source":
        sha = identity["tarball_sha256"]
        return f"src-{sha[:16]}{family}", {"kind": "linux-source", "tarball": str(spec.tarball), "sha256": sha}
    repo = str(spec.tree_path().resolve())
    return f"git-{cache_key({'repo': repo})}{family}", {"kind": "git", "repo": repo}


def _state_path(tree: pathlib.Path) -> pathlib.Path:
    return tree.with_name(tree.name + ".json")


def load_state(tree: pathlib.Path) -> dict:
    try:
        return json.loads(_state_path(tree).read_text())
    except (OSError, ValueError):
        return {}


def save_state(tree: pathlib.Path, state: dict):
    p = _state_path(tree)
    tmp = p.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(p)


def tree_lock(tree: pathlib.Path) -> pathlib.Path:
    return tree.with_name(tree.name + ".lock")


def remove_tree(tree: pathlib.Path, log=print, block: bool = True) -> None:
    """A build tree and its state removed, under its lock: a build in it or a copy of it is
    waited for (block=False: BlockingIOError instead), and a build waiting to copy it finds it
    gone and seeds from another. The lock file stays (a waiter may hold it open)."""
    with locked(tree_lock(tree), log, f"build tree {tree.name} (to remove it)", block=block, doing="removing it"):
        _state_path(tree).unlink(missing_ok=True)
        shutil.rmtree(tree, ignore_errors=True)


def git_repo_of(tree: pathlib.Path) -> str | None:
    """The repository a git origin's build tree was made for (its state's origin), or None."""
    origin = load_state(tree).get("origin")
    repo = origin.get("repo") if isinstance(origin, dict) and origin.get("kind") == "git" else None
    return repo if isinstance(repo, str) else None


def prune_orphans(keep: pathlib.Path | None, log=print) -> list:
    """Build trees of git origins whose repository is gone, removed: such a tree borrows the
    repository's objects (alternates) and no build can use it again; each one is ~1.7 GB. A
    tree another build holds is left for the next prune. Returns what was removed."""
    removed = []
    for sp in cache_dir("kbuild", "trees").glob("git-*.json"):
        tree = sp.with_suffix("")
        repo = git_repo_of(tree)
        if tree == keep or repo is None or pathlib.Path(repo).is_dir():
            continue
        try:
            remove_tree(tree, log, block=False)
        except BlockingIOError:
            continue
        log(f"kbuild: removed build tree {tree.name} (its repository {repo} is gone)")
        removed.append(tree)
    return removed


def _seed_candidates(exclude: pathlib.Path, base_config: list) -> list:
    """Built trees of the same config family, most recently used first (a tainted one never)."""
    trees = []
    for sp in cache_dir("kbuild", "trees").glob("*.json"):
        tree = sp.with_suffix("")
        try:
            st = json.loads(sp.read_text())
        except (OSError, ValueError):
            continue
        same_family = st.get("base_config", DEFAULT_BASE_CONFIG) == list(base_config)
        if tree != exclude and tree.is_dir() and st.get("built") and same_family and not st.get("tainted"):
            trees.append((st.get("last_used", 0), tree))
    return [t for _, t in sorted(trees, reverse=True)]


def copy_as_is(src: pathlib.Path, dst: pathlib.Path) -> None:
    """`cp -a` (timestamps, modes and links kept, so make reuses the objects); nothing left on failure."""
    shutil.rmtree(dst, ignore_errors=True)
    p = subprocess.run(["cp", "-a", str(src), str(dst)], capture_output=True, text=True)
    if p.returncode != 0:
        shutil.rmtree(dst, ignore_errors=True)
        raise KrigError(f"cp -a {src} {dst}: {p.stderr.strip()[:300]}")


def copy_tree(src: pathlib.Path, dst: pathlib.Path, log=print) -> None:
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    t0 = time.monotonic()
    copy_as_is(src, tmp)
    fixed = rebase_paths(tmp, src, dst)
    tmp.rename(dst)
    log(f"kbuild: copied {src.name} -> {dst.name} in {time.monotonic() - t0:.0f}s (timestamps kept, "
        f"{fixed} build files re-pointed)")


def rebase_paths(tree: pathlib.Path, old: pathlib.Path, new: pathlib.Path) -> int:
    """Kbuild records relative paths, but tools/objtool (built with O=$(abspath ..)) records
    absolute ones in its .cmd/.d files: a changed path changes its command lines, objtool is
    rebuilt, and every object that depends on objtool with it. Rewrite the old tree's path
    to the new one in those text files, keeping their mtimes."""
    p = subprocess.run(["grep", "-rlZF", "--binary-files=without-match", str(old), str(tree)],
                       capture_output=True, text=True)
    old_b, new_b, n = str(old).encode(), str(new).encode(), 0
    for name in filter(None, p.stdout.split("\0")):     # a name may hold a newline
        f = pathlib.Path(name)
        if f.is_symlink() or not f.is_file():
            continue
        st = f.stat()
        f.write_bytes(f.read_bytes().replace(old_b, new_b))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        n += 1
    return n


def create_tree(tree: pathlib.Path, origin: dict, base_config: list = DEFAULT_BASE_CONFIG, log=print) -> dict:
    """A new build tree for an origin. Returns its fresh state."""
    if origin["kind"] == "linux-source":
        pristine = ensure_pristine(pathlib.Path(origin["tarball"]), origin["sha256"], log)
        copy_tree(pristine, tree, log)
        return {"origin": origin, "pristine": str(pristine), "seeded_from": None}
    seeded = None
    for cand in _seed_candidates(tree, base_config):
        # a tree in use is waited for, not skipped: a copy needs only a shared lock (a series'
        # overlay over it holds one too), and a build from nothing costs many times the wait
        with locked(tree_lock(cand), log, f"build tree {cand.name} (to copy it)", shared=True,
                    doing=f"copying it to seed {tree.name}"):
            st = load_state(cand)
            if not cand.is_dir() or not st.get("built") or st.get("tainted"):
                continue            # gone, half-made or tainted while waited for: the next one
            copy_tree(cand, tree, log)
        shutil.rmtree(tree / ".git", ignore_errors=True)
        seeded = str(cand)
        break
    if seeded is None:
        tree.mkdir(parents=True)
    git(tree, "init", "-q")
    objects = pathlib.Path(git(origin["repo"], "rev-parse", "--path-format=absolute", "--git-common-dir")) / "objects"
    (tree / ".git" / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    return {"origin": origin, "seeded_from": seeded, "adopt": seeded is not None}


# -- patches -------------------------------------------------------------------
