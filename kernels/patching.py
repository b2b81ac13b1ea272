"""A patch series on a build tree: which files each patch touches (checked before it applies),
the apply (inside the build sandbox for a series from outside), and putting the files back from
the pristine source afterwards. kernels/incremental.py uses it between builds."""
import contextlib
import os
import pathlib
import re
import stat
import subprocess
import tempfile

from krig import KERNEL_DIR, safeio
from krig.errors import KrigError, UsageError
from . import ccache, overlay, sandbox
from .makelog import clean_env


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
    with tempfile.TemporaryDirectory(prefix="krig-apply-") as tdir:
        td = pathlib.Path(tdir)
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
    pristine: str = state.get("pristine") or ""        # a git tree has none
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
