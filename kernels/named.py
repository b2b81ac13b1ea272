"""A kernel by the name of its definition, kernels/<name>.toml, with nothing on top: Debian's
packaged kernel (kernels/distro.py), or one krig builds, found in its cache (kernels/spec.py;
built by `krig kernel build NAME`, never here)."""
from krig import KERNEL_DIR
from .definition import is_distro, read
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
        data, where = read(g.name, KERNEL_DIR)
        if is_distro(data):
            return distro_kernel(g.name, data, where)
        return load_built_kernel(g.name, data, where)
