"""A kernel krig builds from a --kernel text (kernels/given.py), on demand: a git tree at a
ref (TREE@REF, the config of ,like=KERNEL), a kernel definition (a built kernels/<name>.toml),
either with a patch series (,series=, kernels/series.py) or a server's drivers (,drivers=,
kernels/drivers.py) on top. The spec is made from the definition's table (kernels/spec.py),
the build cached like every built kernel's (kernels/incremental.py); a series is first applied
to copies of the files it touches, so a patch that does not apply is one line before any build.
"""
import pathlib

from krig import KERNEL_DIR
from krig.errors import KrigError, UsageError
from . import drivers
from .definition import checked, is_distro, kernel_toml, resolved_table
from .digest import cache_key
from .given import NAME_RE, Given
from .named import builds_named, named_series_refusal
from .gitrepo import git_origin
from .incremental import build_kernel
from .kernel import Kernel
from .patching import apply_to_copies
from .series import load_series
from .spec import KernelSpec, build_inputs, build_meta, built_kernel, resolve_commit, spec_of, wanted_config
from .trees import source_files, source_tree

DEFAULT_LIKE = "linux-6.1"


def derived_spec(g: Given, log=print, read_server: drivers.ServerReader | None = None
                 ) -> tuple[KernelSpec, dict | None, dict | None]:
    """The spec of a given toml or TREE@REF kernel with its series and drivers (a rig's server
    read by `read_server`), the git origin of its source (None for a tarball's), and the series
    ,series= names, read (or None)."""
    series = load_series(g.opts["series"], "series=", log) if "series" in g.opts else None
    if g.kind == "toml":
        path = kernel_toml(g.toml)
        if not path.exists():
            raise UsageError(f"--kernel {g.text}: unknown kernel {g.toml!r}")
        data, where = resolved_table(g.toml, KERNEL_DIR)
        if is_distro(data):
            what = " and ".join(f"{o}=" for o in ("series", "drivers") if o in g.opts)
            raise UsageError(f"--kernel {g.text}: {g.toml} is the distro's packaged kernel; {what} needs a "
                             "kernel krig builds (a built kernel toml such as tiny-6.1, or TREE@REF)")
        spec = spec_of(g.toml, checked(data, where), where)
        origin = git_origin(spec.tree, spec.ref) if spec.source == "git" and spec.tree else None
    else:
        like = g.opts.get("like", DEFAULT_LIKE)
        if not kernel_toml(like).exists():     # kernels/, or a toml a workflow wrote (GENERATED_DIRS)
            raise UsageError(f"--kernel {g.text}: like={like}: unknown kernel")
        data, _ = resolved_table(like, KERNEL_DIR)
        if is_distro(data):
            raise UsageError(f"--kernel {g.text}: like={like} is the distro kernel; like= takes a built kernel's "
                             "config (e.g. tiny-6.1, linux-6.1)")
        ref = g.ref or (series or {}).get("provenance", {}).get("base_commit")
        if not ref:
            raise UsageError(f"--kernel {g.text}: TREE@ takes the series' base-commit, and "
                             f"{'there is no series' if not series else 'the series has no base-commit: line'}")
        for k in ("tarball", "tree", "ref", "patches", "description"):
            data.pop(k, None)
        data.update(source="git", tree=str(g.where), ref=ref)
        where = f"--kernel {g.text}"
        probe = spec_of(f"git-{g.where.name}", checked(data, where), where)
        commit = resolve_commit(probe)
        data["localversion"] = f"-krig-g{commit[:12]}"
        data["description"] = f"{g.where.name} at {ref} ({commit[:12]}), config like {like}"
        spec = spec_of(f"git-{g.where.name}-{commit[:12]}", checked(data, where), where)
        origin = git_origin(g.where, ref)
    if "drivers" in g.opts:
        _add_drivers(spec, g, log, read_server)
    if series:
        label = pathlib.Path(series["source"]).name
        spec.patches = spec.patches + [(label, p) for p in series["patches"]]
        phash = series["provenance"]["patchset_hash"]
        spec.name = f"{spec.name}+s{phash[:8]}"
        spec.localversion = f"{spec.localversion}-s{phash[:8]}"
        spec.description = f"{spec.description or spec.name} + series {series['provenance']['subject']!r}"
    return spec, origin, series


def derived_kernel(g: Given, build: bool = False, log=print, read_server: drivers.ServerReader | None = None
                   ) -> Kernel:
    """A given toml or TREE@REF kernel with its series and drivers; built when it is not yet
    and `build` says so (krig run, krig validate)."""
    spec, origin, series = derived_spec(g, log, read_server)
    key = cache_key(build_inputs(spec))
    meta = build_meta(key)
    if meta is None:
        if not build:
            raise UsageError(f"--kernel {g.text}: not built yet (krig run and krig validate build it)")
        if series:          # applied to copies of the files it touches first: a patch that does not apply is one line
            apply_to_copies(source_files(spec), spec.patches)
        build_kernel(spec, log=log)
        meta = build_meta(key)
        if meta is None:                # krig's own fault: a build that ended without its record
            raise KrigError(f"--kernel {g.text}: built, but the cache has no record of the build ({key})")
    return built_kernel(spec, key, meta, arg=g.text, git=origin, series=series["provenance"] if series else None,
                        drivers=meta.get("drivers"))


class DerivedKernels:
    """The Loader of TREE@REF, and of a kernels/<name>.toml with a series or drivers on top
    (derived_kernel): built on demand."""

    def takes(self, g: Given) -> bool:
        return g.kind == "git" or (g.kind == "toml" and bool(g.opts))

    def load(self, g: Given, build: bool, log, read_server=None) -> Kernel:
        return derived_kernel(g, build, log, read_server)

    def builds(self, g: Given) -> bool:
        return g.kind == "git" or "series" in g.opts or builds_named(g.toml)

    def series_refusal(self, g: Given) -> str | None:
        if g.kind == "toml":
            return named_series_refusal(g.toml)
        return None if g.where.is_dir() else f"{g.where}: no such directory (TREE@REF: a git tree of the kernel)"


def _add_drivers(spec: KernelSpec, g: Given, log, read_server: drivers.ServerReader | None) -> None:
    """spec + the drivers of the server drivers= names (a rig, read by read_server) or describes (files)."""
    value = g.opts["drivers"]
    label = f"--kernel {g.text}: drivers={value}"
    path = pathlib.Path(value).expanduser()
    a_rig = (path.is_file() and path.suffix == ".toml") or (not path.exists() and NAME_RE.match(value))
    if a_rig and read_server is not None:
        inv = read_server(value, log)               # a rig's name, or a rig file's path: its server
    elif path.exists():
        inv = drivers.read_inventory(path, label)
    elif not NAME_RE.match(value):
        raise UsageError(f"{label}: no such file or directory, and not a rig name (drivers= takes a rig "
                         "whose server krig reads, or a module list, or a directory of modules/bound/config)")
    else:
        raise UsageError(f"{label}: a rig's server is read by the commands that run kernels (krig run, validate, "
                         "qualify, ...); give its drivers as files here (a module list, or a directory of "
                         "modules/bound/config)")
    tree = source_tree(spec)
    p = drivers.plan(inv, tree, wanted_config(spec)[0], g.opts.get("drivers-scope"), label)
    if not p["config"]:
        log(f"krig: drivers from {inv['source']} (scope {p['scope']}): nothing to add to {spec.name} (every driver "
            f"of the server is in it already or not in this source; {len(p['skipped'])} skipped)")
        return
    spec.drivers = {**p, "tree": str(tree)}
    spec.name = f"{spec.name}+d{p['hash']}"
    spec.localversion = f"{spec.localversion}-d{p['hash']}"
    spec.description = f"{spec.description or spec.name} + the drivers of {inv['source']}"
