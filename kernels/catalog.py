"""Kernels under test, described by kernels/<name>.toml.

A Kernel is what a rig needs to boot: an image, the matching modules tree
and a release string. `source = "distro"` is the packaged kernel installed on
this machine (linux-image-amd64). Other sources are built by kernels/build.py
and found in the cache through kernels/spec.py.
"""
import pathlib
import re

from krig import KERNEL_DIR
from krig.config import load_toml
from krig.errors import UsageError
from krig.schema import OMIT, Field, check, optional
from .given import is_given, load_given
from .kernel import Kernel
from .spec import is_distro, kernel_toml, load_built_kernel

# Debian's packaged kernel, kernels/distro.toml (docs/kernels.md): no source, or source = "distro".
DISTRO_FIELDS = (
    Field("source", str, "distro", choices=("distro",)),
    Field("release", str, OMIT),
    Field("description", str, ""),
    Field("cmdline", list, [], each=str, says="expected a list of strings, got {item!r}"),
)


def kernel_names() -> list[str]:
    return sorted(p.stem for p in KERNEL_DIR.glob("*.toml"))


def _release_key(rel: str):
    return [int(x) if x.isdigit() else x for x in re.split(r"[.-]", rel)]


def distro_kernel(name: str, release: str | None, boot_dir=pathlib.Path("/boot"),
                  modules_root=pathlib.Path("/lib/modules")) -> tuple[str, pathlib.Path, pathlib.Path, pathlib.Path]:
    images = sorted(boot_dir.glob("vmlinuz-*"), key=lambda p: _release_key(p.name[len("vmlinuz-"):]))
    if release:
        images = [p for p in images if p.name == f"vmlinuz-{release}"]
    if not images:
        want = f"vmlinuz-{release}" if release else "vmlinuz-*"
        raise UsageError(f"kernel {name}: no {boot_dir}/{want} installed "
                         "(install linux-image-amd64 with `make setup`)")
    image = images[-1]
    rel = image.name[len("vmlinuz-"):]
    return rel, image, modules_root / rel, boot_dir / f"config-{rel}"


def load_kernel(name: str, build: bool = False, log=print) -> Kernel:
    """A kernel by toml name, or any form kernels/given.py reads (a path, TREE@REF, ...,series=).
    build: build a given git kernel or series that is not built yet (krig run, krig validate)."""
    if is_given(name):
        return load_given(name, build, log)
    path = kernel_toml(name, KERNEL_DIR)
    if not path.exists():
        raise UsageError(f"--kernel {name!r}: unknown kernel; allowed: {', '.join(kernel_names()) or '(none)'}")
    data = load_toml(path)
    where = f"kernels/{name}.toml"
    optional(data, "source", str, where, None)          # a source that is not a string: one line
    if is_distro(data):             # (distro kernels cannot be extended)
        t = check(data, DISTRO_FIELDS, where)
        rel, image, mods, cfg = distro_kernel(name, t.get("release"))
        return Kernel(name=name, release=rel, image=image, modules_dir=mods, config=cfg,
                      cmdline=list(t["cmdline"]), description=t["description"])
    return load_built_kernel(name, data, where)


def krig_builds(name: str) -> bool:
    """Whether `name` asks for a kernel krig builds: a kernels/ toml of a built source, TREE@REF,
    anything with ,series=. Not the distro's packaged kernel, nor a tree or an image built
    elsewhere (one a lab server may have installed). Nothing is read but the tomls."""
    from .given import parse
    if is_given(name):
        g = parse(name)
        if g.kind == "git" or "series" in g.opts:
            return True
        if g.kind != "toml":
            return False
        name = g.name
    path = kernel_toml(name, KERNEL_DIR)
    return path.exists() and not is_distro(load_toml(path))
