"""A kernel by the name of its definition, kernels/<name>.toml, with nothing on top: Debian's
packaged kernel (kernels/distro.py), or one krig builds, found in its cache (kernels/spec.py;
built by `krig kernel build NAME`, never here)."""
from krig import KERNEL_DIR
from krig.config import load_toml
from .definition import DistroDefinition, is_distro, kernel_toml, read
from .distro import distro_kernel
from .given import Given
from .kernel import Kernel
from .spec import load_built_kernel


class NamedKernels:
    """The Loader of a plain kernels/<name>.toml name. Distro kernels cannot be extended: a name
    with options is kernels/derived.py's."""

    def takes(self, g: Given) -> bool:
        return g.kind == "toml" and not g.opts

    def load(self, g: Given, build: bool, log, read_server=None) -> Kernel:
        defn, where = read(g.toml, KERNEL_DIR)
        if isinstance(defn, DistroDefinition):
            return distro_kernel(g.toml, defn)
        return load_built_kernel(g.toml, defn, where)

    def builds(self, g: Given) -> bool:
        return builds_named(g.toml)

    def series_refusal(self, g: Given) -> str | None:
        return named_series_refusal(g.toml)


def builds_named(name: str) -> bool:
    """Whether kernels/<name>.toml (or a toml a workflow wrote) is one krig builds."""
    path = kernel_toml(name, KERNEL_DIR)
    return path.exists() and not is_distro(load_toml(path))


def named_series_refusal(name: str) -> str | None:
    """Why a series cannot go on the kernel of kernels/<name>.toml, None when it can."""
    from .build import buildable_kernels
    built = ", ".join(buildable_kernels())
    if not (KERNEL_DIR / f"{name}.toml").is_file():
        return f"unknown kernel (no kernels/{name}.toml); allowed: a built kernel toml ({built}) or TREE@REF"
    if name not in buildable_kernels():
        return f"the distro's packaged kernel takes no series; give a built kernel toml ({built}) or TREE@REF"
    return None
