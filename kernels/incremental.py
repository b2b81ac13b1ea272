"""Incremental builds: where krig compiles kernels, and how it avoids compiling twice.

One in-tree build directory per source origin (a tarball's sha256, or a git
repository), under $KRIG_CACHE/kbuild/trees/, serialised by a lock file. All
kernels of one origin are built in that one tree, one after the other:

- linux-source: the tarball is extracted once (kbuild/src/), the tree starts
  as a copy of it. Before a build the files the previous patch series touched
  are copied back from the pristine source (fresh mtime) and the new series
  is applied, so make recompiles only the objects that depend on files that
  changed (plus the few that depend on CONFIG_LOCALVERSION) and relinks.
- git: the tree is a checkout sharing the repository's objects
  (objects/info/alternates) moved between commits with `git reset --hard`,
  which rewrites only files that differ. A new git tree is seeded with
  `cp -a` (timestamps preserved) of the most recently built tree, then
  adopted by git (read-tree + update-index --refresh): files identical to
  the commit keep their old mtime, so their objects are reused.

The final kernel (bzImage, .config, System.map, modules) is copied out to
$KRIG_CACHE/kernels/<key>/ as data, no link in the tree followed (kernels/fromtree.py);
the tree stays for the next build.

Only krig's own kernels (kernels/*.toml, with krig's own patches; TREE@REF) are built in
the tree itself. A kernel with a series from outside is built in a throwaway overlay over
it (kernels/overlay.py): the tree is first brought to the series' base and built there
(once; that lower layer is shared by every series on it), then the series is applied,
configured and built in the overlay under a shared lock, and the overlay's upper layer is
removed after the kernel is copied out. Whatever that build wrote, the tree never sees.
Compiles go through ccache (kernels/ccache.py).
"""
import contextlib
import dataclasses
import fcntl
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import tempfile
import time

from krig import KERNEL_DIR, safeio
from krig.errors import KrigError, UsageError
from krig.paths import cache_dir
from krig.results import now
from . import ccache, fromtree, overlay, sandbox
from .spec import (ARCH, DEFAULT_BASE_CONFIG, KernelSpec, sha256_file, build_inputs, cache_key, config_mismatches, git, git_env,
                     kernel_cache, localversion_fragment, read_dotconfig, source_identity, wanted_config)

STRIP_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "GNUMAKEFLAGS", "O", "KBUILD_OUTPUT",
             "ARCH", "SRCARCH", "CROSS_COMPILE", "LOCALVERSION", "KERNELRELEASE", "KCONFIG_CONFIG", "CC")
HEARTBEAT = 60.0
TIMED_OUT = 124         # timeout(1)'s status when the sandbox's wall time ran out
# the build date in the kernel's version string: fixed, so init/version.o is a ccache hit too
BUILD_TIMESTAMP = "Thu Jan  1 00:00:00 UTC 2015"


def clean_env() -> dict:
    """The environment for the kernel's make: nothing inherited from an outer make."""
    env = {k: v for k, v in os.environ.items() if k not in STRIP_ENV and not k.startswith("GIT_")}
    path = env.get("PATH", "/usr/bin:/bin")
    for extra in ("/usr/sbin", "/sbin"):
        if extra not in path.split(":"):
            path += ":" + extra
    # LOCALVERSION set but empty: no "+" appended to the release in git trees.
    env.update(PATH=ccache.path(path), KBUILD_BUILD_USER="krig", KBUILD_BUILD_HOST="krig", LC_ALL="C",
               LOCALVERSION="", KBUILD_BUILD_TIMESTAMP=BUILD_TIMESTAMP)
    if ccache.available():
        env["CCACHE_DIR"] = str(ccache.directory())
    return env


def run_logged(argv, cwd, logf, log=print, what="", env=None) -> int:
    """Run argv with output appended to logf; print a heartbeat line every minute."""
    with open(logf, "ab") as f:
        f.write(f"\n$ {' '.join(map(str, argv))}    (cwd {cwd}, {now()})\n".encode())
        f.flush()
        p = subprocess.Popen(argv, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env or clean_env())
        t0 = last = time.monotonic()
        try:
            while p.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=1)       # back as soon as it ends: a short step takes no whole second
                if what and time.monotonic() - last >= HEARTBEAT:
                    last = time.monotonic()
                    log(f"kbuild: {what}: {(last - t0) / 60:.0f} min, at {_last_step(logf)}")
        except BaseException:
            p.terminate()
            p.wait()
            raise
    return p.returncode


def _last_step(logf) -> str:
    with open(logf, "rb") as f:
        f.seek(max(0, os.path.getsize(logf) - 4096))
        lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.startswith("  ")]
    return lines[-1] if lines else "..."


def first_error(logf, start: int = 0) -> str:
    text = pathlib.Path(logf).read_text(errors="replace")[start:]
    for pat in (r"^.*\berror:.*$", r"^.*\*\*\*.*$", r"^.*Error \d+.*$"):
        m = re.search(pat, text, re.M)
        if m:
            return m.group(0).strip()[:300]
    tail = text.strip().splitlines()[-1:] or ["no output"]
    return tail[0][:300]


@contextlib.contextmanager
def locked(path: pathlib.Path, log=print, what="", block=True, shared=False):
    """An flock on path: exclusive (a build in the tree), or shared (reading the tree: a
    series' overlay over it, a copy of it)."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    f = open(path, "a+")
    try:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if not block:
                raise
            log(f"kbuild: waiting for {what or path} (another build holds it)")
            fcntl.flock(f, mode)
        yield
    finally:
        f.close()


# -- sources -----------------------------------------------------------------

def pristine_dir(tarball: pathlib.Path, sha: str) -> pathlib.Path:
    stem = re.sub(r"\.tar(\.\w+)?$", "", tarball.name)
    return cache_dir("kbuild", "src") / f"{stem}-{sha[:12]}"


def ensure_pristine(tarball: pathlib.Path, sha: str, log=print) -> pathlib.Path:
    """The tarball extracted once (top directory stripped); never built in."""
    dest = pristine_dir(tarball, sha)
    if dest.is_dir():
        return dest
    with locked(cache_dir("kbuild", "locks") / f"src-{sha[:12]}.lock", log, "the source extraction"):
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
    repo = str(spec.tree.resolve())
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


def remove_tree(tree: pathlib.Path, log=print) -> None:
    """A build tree and its state removed, under its lock: a build in it or a copy of it is
    waited for, and a build waiting to copy it finds it gone and seeds from another. The lock
    file stays (a waiter may hold it open)."""
    with locked(tree_lock(tree), log, f"build tree {tree.name} (to remove it)"):
        _state_path(tree).unlink(missing_ok=True)
        shutil.rmtree(tree, ignore_errors=True)


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


def copy_tree(src: pathlib.Path, dst: pathlib.Path, log=print) -> None:
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    p = subprocess.run(["cp", "-a", str(src), str(tmp)], capture_output=True, text=True)
    if p.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise KrigError(f"cp -a {src} {tmp}: {p.stderr.strip()[:300]}")
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
        with locked(tree_lock(cand), log, f"build tree {cand.name} (to copy it)", shared=True):
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

def patch_targets(patch: pathlib.Path) -> list:
    """Paths (strip 1) a unified diff touches, in order."""
    out = []
    lines = patch.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("+++ ") and i > 0 and lines[i - 1].startswith("--- "):
            new = line[4:].split("\t")[0].strip()
            old = lines[i - 1][4:].split("\t")[0].strip()
            name = old if new == "/dev/null" else new
            parts = name.split("/", 1)
            if len(parts) == 2 and parts[1] not in out:
                out.append(parts[1])
    return out


def checked_targets(patch: pathlib.Path, label: str, tree: pathlib.Path) -> dict:
    """{path the patch touches: its lstat in the tree, or None}, each a name below the tree
    (relative, no `..`) reached without following a link: otherwise one line, before
    anything reads, copies or patches a file."""
    out = {}
    for rel in patch_targets(patch):
        try:
            name = safeio.name_below(rel)
        except safeio.UnsafeFile:
            raise UsageError(f"{label} touches {rel!r}: not a path below the tree (absolute or with '..'); "
                             "refused") from None
        try:
            out[str(name)] = safeio.lstat(tree, name)
        except UsageError as e:
            raise UsageError(f"{label} touches {rel}: {e}") from None
    return out


def patch_error(label: str, output: str) -> str:
    """GNU patch's output of a failed (dry) run -> one line naming the file and hunk."""
    current, failed = None, []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(?:checking|patching) file (.+?)(?: \(read from .*\))?$", line)
        if m:
            current = m.group(1).strip("'")
        m = re.match(r"^Hunk #(\d+) FAILED at (\d+)", line)
        if m:
            failed.append(f"{current}: hunk #{m.group(1)} FAILED at line {m.group(2)}")
        if line.startswith("can't find file to patch"):
            name = next((ln[5:].split("\t")[0] for ln in lines[i:] if ln.startswith("|+++ ")), "?")
            failed.append(f"{name.split('/', 1)[-1]}: no such file in the source")
        if "Reversed (or previously applied) patch detected" in line:
            failed.append(f"{current}: already applied (reversed patch detected)")
        if "malformed patch" in line or "Only garbage was found" in line:
            failed.append(f"malformed patch ({line.split('**** ')[-1].strip()})")
    if not failed:
        tail = [ln for ln in lines if ln.strip()][-1:] or ["patch failed without output"]
        failed.append(tail[0].strip())
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"{label} does not apply: {failed[0]}{more}"


def in_krig(patch: pathlib.Path) -> pathlib.Path | None:
    """The patch's path under kernels/ when it is one of krig's own, else None (from outside)."""
    try:
        return patch.resolve().relative_to(KERNEL_DIR.resolve())
    except ValueError:
        return None


def patch_label(series: str, patch: pathlib.Path) -> str:
    """How a patch is named in a one-line error: kernels/patches/<series>/<file> for a kernel
    toml's series, `<mbox>: patch <file>` for a series given on the command line."""
    rel = in_krig(patch)
    return f"kernels/{rel}" if rel else f"{series}: patch {patch.name}"


def boxed(argv: list, tree: pathlib.Path, box, writable: tuple = (), readable: tuple = ()) -> list:
    """argv as it runs on `tree`: in the build sandbox (kernels/sandbox.py) when `box`; when box
    is an overlay.Layer, in that layer over the tree (`tree` is then its view), with the
    compiler cache read-only."""
    if not box:
        return argv
    layer = box if isinstance(box, overlay.Layer) else None
    real = inside(tree, box)
    cache = (ccache.directory(), layer is None) if ccache.available() else None
    env = {**clean_env(), **ccache.env(real, layer is None, sandbox.CACHE_MOUNT)}
    out = sandbox.argv(argv, real, writable, readable, env, cache)
    return layer.wrap(out) if layer else out


def inside(tree: pathlib.Path, box) -> pathlib.Path:
    """The tree's path as the build sees it (a layer's view is read by krig through /proc)."""
    return box.tree if isinstance(box, overlay.Layer) else tree.resolve()


def apply_patch(tree: pathlib.Path, patch: pathlib.Path, label: str, state: dict, box=False) -> None:
    """Dry-run, then apply; files touched are recorded in state (modified/created)."""
    targets = checked_targets(patch, label, tree)
    argv = boxed(["patch", "-p1", "--forward", "--batch", "--no-backup-if-mismatch", "-d", str(inside(tree, box)),
                  "-i", str(patch.resolve())], tree, box, readable=(patch,))
    p = subprocess.run(argv + ["--dry-run"], capture_output=True, text=True)
    if p.returncode != 0:
        raise UsageError(patch_error(label, p.stdout + p.stderr))
    for rel, st in targets.items():
        key = "modified" if st is not None else "created"
        if rel not in state.setdefault(key, []):
            state[key].append(rel)
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise UsageError(patch_error(label, p.stdout + p.stderr))


def apply_to_copies(read, patches: list) -> dict:
    """Apply [(series, patch)] in order to copies of the files they touch, read from
    read(rel) -> bytes or None (no such file), in a temporary directory: no tree is
    touched. Returns {rel: the patched bytes, or None if the series removed it}.
    A patch that does not apply is one line naming it and the file or hunk. `patch` runs in
    the build sandbox; without it, a series from outside is refused before anything runs."""
    box = sandbox.usable()
    outside = next((p for _, p in patches if in_krig(p) is None), None)
    if outside is not None and not box:
        sandbox.refuse_outside_series(str(outside))
    with tempfile.TemporaryDirectory(prefix="krig-apply-") as td:
        td = pathlib.Path(td)
        rels = list(dict.fromkeys(rel for series, p in patches
                                  for rel in checked_targets(p, patch_label(series, p), td)))
        for rel in rels:
            data = read(rel)
            if data is not None:
                safeio.write_bytes(td, rel, data)
        for series, p in patches:
            apply_patch(td, p, patch_label(series, p), {}, box)
        return {rel: safeio.read_bytes(td, rel) if safeio.is_file(td, rel) else None for rel in rels}


def restore(tree: pathlib.Path, state: dict) -> None:
    """Undo the previous patch series: remove the files it created, copy back from the pristine
    source those it modified (a git tree has none: `git reset` does it). Files get a fresh mtime
    so make rebuilds them. The tree is the build's, so no link in it is followed and nothing
    outside it is touched: a path through a symlinked directory is refused in one line."""
    pristine = state.get("pristine")
    try:
        for rel in state.get("created", []):
            _put_back(tree, safeio.name_below(rel))
        for rel in state.get("modified", []) if pristine else []:
            name = safeio.name_below(rel)
            src = safeio.lstat(pristine, name)
            if src is not None:
                _put_back(tree, name, pathlib.Path(pristine), src)
    except safeio.UnsafeFile as e:
        raise KrigError(f"{e} (an earlier build left the tree so; remove {tree} to make it again)") from None
    state.update(applied=[], modified=[], created=[])


def _put_back(tree: pathlib.Path, name: pathlib.PurePosixPath, pristine=None, src=None) -> None:
    """Remove tree/name (no link followed on the way) and put back the pristine one, if any."""
    if src is not None and stat.S_ISREG(src.st_mode):
        safeio.write_bytes(tree, name, safeio.read_bytes(pristine, name, src.st_size), stat.S_IMODE(src.st_mode))
        return
    try:
        with safeio.open_dir(tree, name.parent) as d:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name.name, dir_fd=d)
            if src is not None and stat.S_ISLNK(src.st_mode):
                os.symlink(os.readlink(pristine / name), name.name, dir_fd=d)
    except safeio.MissingFile:
        pass


def sync_source(tree: pathlib.Path, spec: KernelSpec, identity: dict, state: dict, log=print,
                box: bool = False) -> None:
    """Bring the tree to spec's source + patch series, touching as few files as possible."""
    want = [[s, p.name, sha256_file(p)] for s, p in spec.patches]
    same_source = state.get("source") == identity
    if same_source and state.get("applied") == want and not state.get("adopt"):
        return
    restore(tree, state)
    if spec.source == "git":
        if state.pop("adopt", False):
            log("kbuild: adopting the seeded tree into git (hashing its files once)")
            git(tree, "read-tree", identity["commit"])
            subprocess.run(["git", "-C", str(tree), "update-index", "-q", "--refresh"], capture_output=True,
                           env=git_env())
        git(tree, "reset", "-q", "--hard", identity["commit"])
    state["source"] = identity
    save_state(tree, state)
    for (series, patch), entry in zip(spec.patches, want):
        try:
            apply_patch(tree, patch, patch_label(series, patch), state, box)
        finally:
            save_state(tree, state)
        state["applied"].append(entry)
    save_state(tree, state)


# -- configure, make, install --------------------------------------------------

def configure(tree: pathlib.Path, spec: KernelSpec, logf, log=print, box: bool = False) -> None:
    for target in spec.base_config:
        if run_logged(boxed(["make", f"ARCH={ARCH}", target], tree, box), tree, logf) != 0:
            raise KrigError(f"{spec.where}.base_config: `make {target}` failed: {first_error(logf)}; log: {logf}")
    lv = tree / ".krig-localversion.config"
    safeio.write_text(tree, lv.name, localversion_fragment(spec.localversion))
    frags = [p.resolve() for _, p in spec.fragments]
    argv = ["bash", "scripts/kconfig/merge_config.sh", "-m", ".config", *map(str, frags),
            str(inside(tree, box) / lv.name)]
    if run_logged(boxed(argv, tree, box, readable=tuple(frags)), tree, logf) != 0:
        raise KrigError(f"{spec.where}: merge_config.sh failed: {first_error(logf)}; log: {logf}")
    if run_logged(boxed(["make", f"ARCH={ARCH}", "olddefconfig"], tree, box), tree, logf) != 0:
        raise KrigError(f"{spec.where}: `make olddefconfig` failed: {first_error(logf)}; log: {logf}")
    wanted, origin, redefined = wanted_config(spec)
    with open(logf, "a") as f:
        for label, k, old, new in redefined:
            f.write(f"krig: {label} redefines {k}: {old} -> {new}\n")
    bad = config_mismatches(wanted, fromtree.dotconfig(tree))
    if bad:
        with open(logf, "a") as f:
            for k, v, got in bad:
                f.write(f"krig: {k}={v} from {origin[k]} is {got} in the final .config\n")
        k, v, got = bad[0]
        more = f" (and {len(bad) - 1} more, see {logf})" if len(bad) > 1 else f" (log: {logf})"
        raise UsageError(f"{spec.where}: {k}={v} requested by {origin[k]} is "
                         f"{'not set' if got == 'n' else got} in the final .config: a dependency is missing "
                         f"or the option does not exist in this source{more}")


def make_kernel(tree: pathlib.Path, spec: KernelSpec, logf, log=print, box: bool = False) -> None:
    jobs = os.environ.get("KRIG_JOBS") or str(os.cpu_count() or 1)
    targets = ["bzImage"] + (["modules"] if fromtree.dotconfig(tree).get("CONFIG_MODULES") == "y" else [])
    start = os.path.getsize(logf)
    argv = ["nice", "-n", "10", "make", f"ARCH={ARCH}", f"-j{jobs}", *targets]
    rc = run_logged(boxed(argv, tree, box), tree, logf, log, what=f"building {spec.name}")
    if rc == TIMED_OUT and box:
        raise KrigError(f"kernel {spec.name}: build stopped after the sandbox's {sandbox.WALL_SECONDS // 3600} "
                        f"hours; log: {logf}")
    if rc != 0:
        raise KrigError(f"kernel {spec.name}: build failed: {first_error(logf, start)}; log: {logf}")


INSTALLED = (("arch/x86/boot/bzImage", "bzImage"), (".config", "config"), ("System.map", "System.map"))


def install(tree: pathlib.Path, out: pathlib.Path, logf, box: bool = False) -> str:
    """Copy the kernel out of the tree into out (new): what the build left is taken as data
    (kernels/fromtree.py); out/mod is all modules_install may write. Returns the release."""
    p = subprocess.run(boxed(["make", "-s", f"ARCH={ARCH}", "kernelrelease"], tree, box), cwd=tree,
                       capture_output=True, text=True, env=clean_env())
    release = p.stdout.strip()
    if p.returncode != 0 or not release:
        raise KrigError(f"`make -s kernelrelease` failed in {tree}: {p.stderr.strip()[:200]}")
    fromtree.check_release(release, f"`make -s kernelrelease` in {tree}")
    (out / "mod").mkdir(parents=True)
    try:
        for rel, name in INSTALLED:
            fromtree.copy(tree, rel, out / name)
        mods = out / "mod" / "lib" / "modules" / release
        if read_dotconfig(out / "config").get("CONFIG_MODULES") != "y":
            mods.mkdir(parents=True)
            return release
        argv = ["make", f"ARCH={ARCH}", "modules_install", f"INSTALL_MOD_PATH={out.resolve() / 'mod'}",
                "INSTALL_MOD_STRIP=1"]
        if run_logged(boxed(argv, tree, box, writable=(out / "mod",)), tree, logf) != 0:
            raise KrigError(f"`make modules_install` failed: {first_error(logf)}; log: {logf}")
        fromtree.keep_plain(out / "mod", logf)
        if not mods.is_dir():           # no link is left below out/mod
            raise KrigError(f"`make modules_install` left no lib/modules/{release} directory; log: {logf}")
        return release
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


def outside_series(spec: KernelSpec) -> str | None:
    """The first patch of the spec that is not krig's own (kernels/patches/): a series from a mail."""
    return next((str(p) for _, p in spec.patches if in_krig(p) is None), None)


def _cached(out: pathlib.Path, spec: KernelSpec, key: str, log) -> dict | None:
    if not (out / "build.json").exists():
        return None
    meta = json.loads((out / "build.json").read_text())
    log(f"kbuild: {spec.name} is built ({meta['release']}, key {key}); nothing to do")
    return {**meta, "dir": str(out)}


def _made(state: dict) -> list:
    """What the objects in a tree were last built from (its source and krig's own patches)."""
    return [state.get("source"), state.get("applied")]


def _prepare_tree(tree: pathlib.Path, origin: dict, spec: KernelSpec, log) -> dict:
    """The tree made (or made again) for a build in it, under its exclusive lock; its state."""
    state = load_state(tree)
    if tree.is_dir() and state.get("origin") != origin:
        log(f"kbuild: {tree} was left half-made; making it again")
        shutil.rmtree(tree)
    elif tree.is_dir() and state.get("tainted"):
        log(f"kbuild: {tree} has built a series from outside krig's tree in place ({state['tainted']}): "
            "anything may have been changed in it; making the tree again")
        shutil.rmtree(tree)
    if not tree.is_dir():
        state = create_tree(tree, origin, spec.base_config, log)
        state["base_config"] = list(spec.base_config)
        save_state(tree, state)
    return state


def _build_in(tree, origin, spec, identity, logf, log, box) -> tuple[bool, pathlib.Path]:
    """A kernel of krig's own, built in the tree itself (its lock held). Returns (incremental, tree)."""
    state = _prepare_tree(tree, origin, spec, log)
    incremental = bool(state.get("built")) or bool(state.get("seeded_from"))
    log(f"kbuild: {spec.name}: tree {tree} ({'incremental' if incremental else 'full build'}), log {logf}")
    sync_source(tree, spec, identity, state, log, box)
    configure(tree, spec, logf, log, box)
    make_kernel(tree, spec, logf, log, box)
    state.update(built=True, last_used=time.time(), last_kernel=spec.name, made=_made(state))
    save_state(tree, state)
    return incremental, tree


LAYER_TRIES = 3


@contextlib.contextmanager
def _build_over(tree, tree_id, origin, spec, identity, logf, log):
    """A kernel with a series from outside: the tree brought to the series' base and built there
    (exclusive lock, only when it is not already), then the series built in a throwaway layer
    over it (shared lock). Yields (incremental, the layer's view) with the layer up."""
    base = dataclasses.replace(spec, patches=[(s, p) for s, p in spec.patches if in_krig(p) is not None])
    series = [(s, p) for s, p in spec.patches if in_krig(p) is None]
    for _ in range(LAYER_TRIES):
        with locked(tree_lock(tree), log, f"build tree {tree_id}"):
            state = _prepare_tree(tree, origin, base, log)
            incremental = bool(state.get("built")) or bool(state.get("seeded_from"))
            sync_source(tree, base, identity, state, log, True)
            if state.get("made") != _made(state):
                log(f"kbuild: {spec.name}: building the series' base in tree {tree} first "
                    f"({'incremental' if incremental else 'full build'}); the series builds over it")
                configure(tree, base, logf, log, True)
                make_kernel(tree, base, logf, log, True)
                state.update(built=True, made=_made(state))
            state["last_used"] = time.time()
            save_state(tree, state)
            want = state["made"]
        with locked(tree_lock(tree), log, f"build tree {tree_id}", shared=True):
            if not tree.is_dir() or load_state(tree).get("made") != want:
                continue            # another build moved the tree between the two locks
            log(f"kbuild: {spec.name}: in a throwaway layer over tree {tree} (incremental), log {logf}")
            overlay.sweep(cache_dir("kbuild", "layers"))
            with overlay.Layer(tree, cache_dir("kbuild", "layers") / f"{tree_id}-{os.getpid()}") as layer:
                view = layer.view
                for s, p in series:
                    apply_patch(view, p, patch_label(s, p), {}, layer)
                configure(view, spec, logf, log, layer)
                make_kernel(view, spec, logf, log, layer)
                yield incremental, view, layer
            return
    raise KrigError(f"kernel {spec.name}: build tree {tree} kept changing under other builds "
                    f"({LAYER_TRIES} tries); try again")


def kernel_lock(key: str) -> pathlib.Path:
    """Held while one kernel (a cache key) is built and published."""
    return cache_dir("kbuild", "locks") / f"kernel-{key}.lock"


def build_kernel(spec: KernelSpec, force: bool = False, log=print) -> dict:
    identity = source_identity(spec)
    inputs = build_inputs(spec, identity)
    key = cache_key(inputs)
    out = kernel_cache(key)
    done = None if force else _cached(out, spec, key, log)
    if done:
        return done
    tree_id, origin = origin_of(spec, identity)
    tree = cache_dir("kbuild", "trees") / tree_id
    logf = cache_dir("kbuild", "logs") / f"{spec.name}-{key}.log"
    box, outside = sandbox.usable(), outside_series(spec)
    if outside and not box:
        sandbox.refuse_outside_series(f"kernel {spec.name}: {outside}")
    with locked(kernel_lock(key), log, f"kernel {spec.name}"):
        # a build of the same key that held the lock while this one waited has made it already
        done = None if force else _cached(out, spec, key, log)
        if done:
            return done
        t0 = time.monotonic()
        logf.write_text(f"krig kbuild {spec.name} key {key} {now()}\n{json.dumps(inputs, indent=1)}\n")
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        layered = outside is not None
        with contextlib.ExitStack() as stack:
            if layered:
                incremental, where, layer = stack.enter_context(
                    _build_over(tree, tree_id, origin, spec, identity, logf, log))
            else:
                stack.enter_context(locked(tree_lock(tree), log, f"build tree {tree_id}"))
                incremental, where = _build_in(tree, origin, spec, identity, logf, log, box)
                layer = box
            t_inst = time.monotonic()
            release = install(where, tmp, logf, layer)
        took = time.monotonic() - t0
        meta = {"name": spec.name, "key": key, "release": release, "finished": now(),
                "incremental": incremental, "tree": str(tree), "layer": layered,
                "seeded_from": load_state(tree).get("seeded_from"),
                "seconds": {"total": round(took, 1), "build": round(t_inst - t0, 1),
                            "install": round(time.monotonic() - t_inst, 1)},
                "inputs": inputs, "log": str(logf), "sandbox": box, "ccache": ccache.available()}
        shutil.copyfile(logf, tmp / "build.log")
        (tmp / "build.json").write_text(json.dumps(meta, indent=1) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)                 # published under the kernel's lock: a waiter finds it whole
    log(f"kbuild: {spec.name}: built {release} in {took / 60:.1f} min -> {out}")
    return {**meta, "dir": str(out)}
