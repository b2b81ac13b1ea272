"""The compiler cache of kernel builds: ccache (Debian package ccache), in $KRIG_CACHE/ccache.

A tree that must recompile what it compiled before (a header a series touched put back, a
git tree moved between commits, a tree made again) then costs a cache lookup per object.
ccache is put in front of gcc by PATH (/usr/lib/ccache/gcc), not by CC=, so the command lines
kbuild records do not change and a tree built without it is not rebuilt because of it.
KBUILD_BUILD_TIMESTAMP is fixed (kernels/incremental.py clean_env) so the version object hits too.

Who writes it: builds of krig's own kernels (kernels/*.toml, TREE@REF) only. A series from
outside reads it (CCACHE_READONLY, the directory bound read-only in its sandbox) and writes
nothing: an entry is found by a hash of the preprocessed source and the compiler's arguments,
so a build that could write the directory could file any object under the hash a later
kernel of krig's computes (docs/security.md, the compiler cache).
"""
import pathlib
import shutil

from krig.paths import cache_dir

MASQUERADE = pathlib.Path("/usr/lib/ccache")


def available() -> bool:
    return shutil.which("ccache") is not None and (MASQUERADE / "gcc").exists()


def directory() -> pathlib.Path:
    return cache_dir("ccache")


def env(tree: pathlib.Path, writable: bool, where: str) -> dict:
    """What a build in `tree` adds to its environment (nothing without ccache), the cache seen at `where`."""
    if not available():
        return {}
    # NOHASHDIR: an object compiled in one tree is a hit in another (debug info may name the first)
    out = {"CCACHE_DIR": where, "CCACHE_BASEDIR": str(tree), "CCACHE_TEMPDIR": "/tmp", "CCACHE_NOHASHDIR": "1"}
    if not writable:
        out.update(CCACHE_READONLY="1", CCACHE_NOSTATS="1")
    return out


def path(path: str) -> str:
    """PATH with ccache's gcc first (unchanged without ccache)."""
    if not available() or str(MASQUERADE) in path.split(":"):
        return path
    return f"{MASQUERADE}:{path}"
