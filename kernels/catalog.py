"""Every kernel by the name --kernel takes (kernels/given.py reads the text), loaded by the one
loader of its kind:

    PATH of a built tree, of an image     kernels/prebuilt.py   built elsewhere, nothing built
    TREE@REF, NAME,series=, NAME,drivers= kernels/derived.py    built by krig on demand
    NAME, Debian's packaged kernel        kernels/distro.py     installed on this machine
    NAME, a kernel krig builds            kernels/spec.py       found in the cache (`krig kernel build`)

A NAME is kernels/<name>.toml (kernels/definition.py); a Kernel is what a rig boots (kernels/kernel.py).
"""
from krig import KERNEL_DIR
from krig.config import load_toml
from .definition import is_distro, kernel_toml, read
from .derived import derived_kernel
from .distro import distro_kernel
from .given import parse
from .kernel import Kernel
from .prebuilt import image_kernel, tree_kernel
from .spec import load_built_kernel


def load_kernel(name: str, build: bool = False, log=print) -> Kernel:
    """A kernel by toml name, or any form kernels/given.py reads (a path, TREE@REF, ...,series=).
    build: build a given git kernel or series that is not built yet (krig run, krig validate)."""
    g = parse(name)
    if g.kind == "tree":
        return tree_kernel(g, log)
    if g.kind == "image":
        return image_kernel(g)
    if g.kind == "git" or g.opts:          # TREE@REF, or a toml's kernel with a series or drivers
        return derived_kernel(g, build, log)
    data, where = read(g.name, KERNEL_DIR)
    if is_distro(data):             # (distro kernels cannot be extended)
        return distro_kernel(g.name, data, where)
    return load_built_kernel(g.name, data, where)


def krig_builds(name: str) -> bool:
    """Whether `name` asks for a kernel krig builds: a kernels/ toml of a built source, TREE@REF,
    anything with ,series=. Not the distro's packaged kernel, nor a tree or an image built
    elsewhere (one a lab server may have installed). Nothing is read but the tomls."""
    g = parse(name)
    if g.kind == "git" or "series" in g.opts:
        return True
    if g.kind != "toml":
        return False
    path = kernel_toml(g.name, KERNEL_DIR)
    return path.exists() and not is_distro(load_toml(path))
