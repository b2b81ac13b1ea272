"""What a built kernel is: a kernel definition's table (kernels/definition.py) made a build spec,
what decides its build, and its cache key.

A built kernel lives in a cache directory keyed by a hash of everything that
goes into it (source identity, base config targets, merged config fragments,
local version, patch series contents, compiler), so the same kernel is never
built twice:  $KRIG_CACHE/kernels/<key>/ (default ~/.cache/krig/kernels/<key>/)
holding bzImage, config, System.map, mod/lib/modules/<release>/ and build.json.

Building is kernels/build.py (`python -m kernels.build`); how a tree is
reused, patched and configured between builds is kernels/incremental.py.
"""
import dataclasses
import functools
import json
import os
import pathlib
import subprocess

from krig import KERNEL_DIR, REPRO_DIR, ROOT
from krig.errors import UsageError
from krig.paths import cache_dir
from .definition import DEFAULT_TARBALL, KernelDefinition, checked, resolved_table
from .digest import cache_key, sha256_file, tarball_sha256
from .gitrepo import git_env
from .kconfig import merge_fragments
from .kernel import Kernel

RECIPE = "krig-kbuild-1"      # bump when the build recipe changes what comes out
ARCH = "x86_64"
DRIVERS_LABEL = "drivers="       # the origin of the options a server's drivers add (soft: reported, not fatal)


class KernelNotBuilt(UsageError):
    """A kernel described by a toml that has not been built yet."""

    def __init__(self, message: str, description: str = ""):
        super().__init__(message)
        self.description = description


@dataclasses.dataclass
class KernelSpec:
    name: str
    where: str
    source: str
    tarball: pathlib.Path | None
    tree: pathlib.Path | None
    ref: str
    base_config: list
    fragments: list          # [(label, path)] in merge order (the last wins)
    patches: list            # [(series, path)] in apply order
    localversion: str
    cmdline: list
    description: str
    drivers: dict | None = None     # a server's drivers added (kernels/drivers.py plan), or None

    def tarball_path(self) -> pathlib.Path:
        """A linux-source spec's tarball (spec_of sets it for that source)."""
        assert self.tarball is not None, f"{self.where}: source {self.source!r} has no tarball"
        return self.tarball

    def tree_path(self) -> pathlib.Path:
        """A git spec's tree (spec_of sets it for that source)."""
        assert self.tree is not None, f"{self.where}: source {self.source!r} has no tree"
        return self.tree


# -- a definition made a spec -------------------------------------------------

def resolve_spec(name: str, kernel_dir: pathlib.Path = KERNEL_DIR, repro_dir: pathlib.Path = REPRO_DIR) -> KernelSpec:
    """The spec of kernels/<name>.toml, `extends` resolved."""
    data, where = resolved_table(name, kernel_dir)
    return spec_of(name, checked(data, where), where, kernel_dir, repro_dir)


def spec_of(name: str, t: KernelDefinition, where: str, kernel_dir: pathlib.Path = KERNEL_DIR,
            repro_dir: pathlib.Path = REPRO_DIR) -> KernelSpec:
    """The spec of a built kernel's definition (checked, `extends` resolved) read from `where`:
    the files it names found (paths relative to kernels/)."""
    source = t.source
    tarball = _path(t.tarball or DEFAULT_TARBALL, ROOT) if source == "linux-source" else None
    tree = _path(t.tree, ROOT) if source == "git" and t.tree is not None else None     # (checked: git has one)
    ref = t.ref if source == "git" else "HEAD"
    fragments = [(f"reproducers/{n}/config", repro_dir / n / "config") for n in _reproducers(t, where, repro_dir)]
    for f in t.fragments:
        p = _path(f, kernel_dir)
        if not p.is_file():
            raise UsageError(f"{where}.fragments: {f!r} not found (paths are relative to kernels/)")
        fragments.append((f"kernels/{f}" if not os.path.isabs(f) else f, p))
    return KernelSpec(name=name, where=where, source=source, tarball=tarball, tree=tree, ref=ref,
                      base_config=list(t.base_config), fragments=fragments,
                      patches=_patches(t.patches, where, kernel_dir),
                      localversion=f"-krig-{name}" if t.localversion is None else t.localversion,
                      cmdline=list(t.cmdline), description=t.description)


def _path(value: str, base: pathlib.Path) -> pathlib.Path:
    p = pathlib.Path(os.path.expandvars(os.path.expanduser(value)))
    return p if p.is_absolute() else base / p


def _reproducers(t: KernelDefinition, where: str, repro_dir: pathlib.Path) -> list:
    """The reproducers whose config fragments the kernel takes ("all": every one that has one)."""
    if t.reproducers == "all":
        return sorted(p.parent.name for p in repro_dir.glob("*/config"))
    for n in t.reproducers:
        if not isinstance(n, str) or not (repro_dir / n / "config").exists():
            raise UsageError(f"{where}.reproducers: {n!r} has no reproducers/{n}/config")
    return list(t.reproducers)


def _patches(series, where: str, kernel_dir: pathlib.Path) -> list:
    """[(series, patch file)] in apply order, each series a folder of kernels/patches/."""
    out = []
    allowed = sorted(p.name for p in (kernel_dir / "patches").glob("*") if p.is_dir())
    for s in [series] if isinstance(series, str) else series:
        if not s:
            continue
        d = kernel_dir / "patches" / s
        if not d.is_dir():
            raise UsageError(f"{where}.patches: series {s!r} not found in kernels/patches/; "
                             f"allowed: {', '.join(allowed) or '(none)'}")
        files = sorted(d.glob("*.patch"))
        if not files:
            raise UsageError(f"{where}.patches: kernels/patches/{s}/ has no *.patch files")
        out += [(s, f) for f in files]
    return out


# -- identity and cache key --------------------------------------------------

def resolve_commit(spec: KernelSpec) -> str:
    tree = spec.tree_path()
    if not (tree / ".git").exists() and not (tree / "HEAD").exists():
        raise UsageError(f"{spec.where}.tree: {tree} is not a git repository")
    p = subprocess.run(["git", "-C", str(tree), "rev-parse", "--verify", "--quiet",
                        f"{spec.ref}^{{commit}}"], capture_output=True, text=True, env=git_env())
    if p.returncode != 0:
        raise UsageError(f"{spec.where}.ref: {spec.ref!r} is not a commit in {tree}")
    return p.stdout.strip()


@functools.lru_cache(maxsize=1)
def compiler_version() -> str:
    try:
        out = subprocess.run(["gcc", "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "gcc: not found"
    return (out.splitlines() or ["gcc: unknown"])[0]


def source_identity(spec: KernelSpec) -> dict:
    if spec.source == "linux-source":
        return {"kind": "linux-source", "tarball_sha256": tarball_sha256(spec.tarball_path())}
    return {"kind": "git", "commit": resolve_commit(spec)}


def localversion_fragment(localversion: str) -> str:
    return (f'CONFIG_LOCALVERSION="{localversion}"\n'
            "# CONFIG_LOCALVERSION_AUTO is not set\n")


def wanted_config(spec: KernelSpec) -> tuple[dict, dict, list]:
    values, origin, redefined = merge_fragments(spec.fragments)
    for k, v in (spec.drivers or {}).get("config", {}).items():
        values[k] = v
        origin[k] = DRIVERS_LABEL
    for k, v in (("CONFIG_LOCALVERSION", f'"{spec.localversion}"'), ("CONFIG_LOCALVERSION_AUTO", "n")):
        values[k] = v
        origin[k] = f"{spec.where}.localversion"
    return values, origin, redefined


def build_inputs(spec: KernelSpec, identity: dict | None = None) -> dict:
    """Everything that decides what comes out of a build (hashed into the key)."""
    values, _, _ = wanted_config(spec)
    return {
        "recipe": RECIPE, "arch": ARCH, "compiler": compiler_version(),
        "source": identity or source_identity(spec),
        "base_config": list(spec.base_config),
        "config": dict(sorted(values.items())),
        "patches": [{"series": s, "name": p.name, "sha256": sha256_file(p)} for s, p in spec.patches],
    }


# -- the cache ----------------------------------------------------------------

def kernel_cache(key: str) -> pathlib.Path:
    return cache_dir("kernels") / key


def build_meta(key: str) -> dict | None:
    """The build.json of the kernel cached under key; None when it is not built."""
    path = kernel_cache(key) / "build.json"
    return json.loads(path.read_text()) if path.exists() else None


def built_kernel(spec: KernelSpec, key: str, meta: dict, **more) -> Kernel:
    """The Kernel record of spec's build under key (meta: its build.json); `more`: what the
    record says besides (the --kernel text, a git origin, a series, drivers)."""
    out = kernel_cache(key)
    release = meta["release"]
    return Kernel(name=spec.name, release=release, image=out / "bzImage",
                  modules_dir=out / "mod" / "lib" / "modules" / release, config=out / "config",
                  cmdline=list(spec.cmdline), description=spec.description, **more)


def load_built_kernel(name: str, defn: KernelDefinition, where: str, kernel_dir: pathlib.Path = KERNEL_DIR,
                      repro_dir: pathlib.Path = REPRO_DIR) -> Kernel:
    """The Kernel record of a kernel built by `krig kernel build NAME` (make kernel KERNEL=NAME),
    from its definition (kernels/definition.py read)."""
    spec = spec_of(name, defn, where, kernel_dir, repro_dir)
    key = cache_key(build_inputs(spec))
    meta = build_meta(key)
    if meta is None:
        raise KernelNotBuilt(f"kernel {name} is not built; run `krig kernel build {name}` "
                             f"(cache key {key})", spec.description)
    return built_kernel(spec, key, meta)
