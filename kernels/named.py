"""A kernel by the name of its definition, kernels/<name>.toml, with nothing on top: Debian's
packaged kernel (kernels/distro.py), or one krig builds, found in its cache (kernels/spec.py;
built by `krig kernel build NAME`, never here)."""
from krig import KERNEL_DIR
from .definition import DistroDefinition, read
from .distro import distro_kernel
from .given import Given
from .kernel import Kernel
from .spec import load_built_kernel


class NamedKernels:
    """The Loader of a plain kernels/<name>.toml name. Distro kernels cannot be extended: a name
    with options is kernels/derived.py's."""

    def takes(self, g: Given) -> bool:
        return g.kind == "toml" and not g.opts

    def load(self, g: Given, build: bool, log) -> Kernel:
        assert g.name is not None, "a toml's Given has its name (kernels/given.py)"
        defn, where = read(g.name, KERNEL_DIR)
        if isinstance(defn, DistroDefinition):
            return distro_kernel(g.name, defn)
        return load_built_kernel(g.name, defn, where)
