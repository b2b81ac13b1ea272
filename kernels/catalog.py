"""Every kernel by the name --kernel takes (kernels/given.py reads the text), loaded by the one
loader of its kind:

    PATH of a built tree, of an image     kernels/prebuilt.py   built elsewhere, nothing built
    TREE@REF, NAME,series=, NAME,drivers= kernels/derived.py    built by krig on demand
    NAME                                  kernels/named.py      Debian's packaged kernel (kernels/distro.py),
                                                                or one krig built (kernels/spec.py; `krig kernel build`)

Each loader is a kernels/given.py Loader: it says which Givens it takes and loads them, whether
krig builds them and why a series cannot go on them; the catalog picks the one that takes the
Given and passes the Given on, so the name is read once and nothing below reads it again, and
nothing above asks a Given its kind. A new kind of kernel is a new loader here, not another branch.
A NAME is kernels/<name>.toml (kernels/definition.py); a Kernel is what a rig boots (kernels/kernel.py).
"""
from krig.errors import KrigError
from .derived import DerivedKernels
from .drivers import ServerReader
from .given import Given, Loader, parse
from .kernel import Kernel
from .named import NamedKernels
from .prebuilt import ImageKernels, TreeKernels

# One Loader per kind of Given; each Given is taken by exactly one (tests/kernels/test_kernel_loaders.py).
LOADERS: tuple[Loader, ...] = (TreeKernels(), ImageKernels(), DerivedKernels(), NamedKernels())


def loader_of(g: Given) -> Loader:
    """The one loader that takes g."""
    takers = [loader for loader in LOADERS if loader.takes(g)]
    if len(takers) != 1:            # krig's own fault: the loaders' `takes` overlap or leave a gap
        raise KrigError(f"--kernel {g.text}: {len(takers)} of krig's kernel loaders take a {g.kind} kernel, not one")
    return takers[0]


def load_kernel(name: str, build: bool = False, log=print, read_server: ServerReader | None = None) -> Kernel:
    """A kernel by toml name, or any form kernels/given.py reads (a path, TREE@REF, ...,series=),
    read once into a Given and loaded by its kind's loader. build: build a given git kernel or
    series that is not built yet (krig run, krig validate). read_server: what reads the server
    ,drivers=RIG names (the workflow's; without it only files are taken)."""
    g = parse(name)
    return loader_of(g).load(g, build, log, read_server)


def krig_builds(name: str) -> bool:
    """Whether `name` asks for a kernel krig builds: a kernels/ toml of a built source, TREE@REF,
    anything with ,series=. Not the distro's packaged kernel, nor a tree or an image built
    elsewhere (one a lab server may have installed). Nothing is read but the tomls."""
    g = parse(name)
    return loader_of(g).builds(g)


def series_refusal(g: Given) -> str | None:
    """Why a patch series cannot go on the kernel g names (its loader says), None when it can."""
    return loader_of(g).series_refusal(g)
