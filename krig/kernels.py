"""Kernels under test, described by kernels/<name>.toml.

A Kernel is what a rig needs to boot: an image, the matching modules tree
and a release string. `source = "distro"` is the packaged kernel installed on
this machine (linux-image-amd64). Other sources are built by kernels/build.
"""
import dataclasses
import hashlib
import pathlib
import re

from . import KERNEL_DIR
from .config import load_toml, optional, reject_unknown
from .errors import UsageError


@dataclasses.dataclass
class Kernel:
    name: str
    release: str
    image: pathlib.Path
    modules_dir: pathlib.Path | None     # /lib/modules/<release> or a build's staging dir
    config: pathlib.Path | None
    cmdline: list[str]
    description: str = ""

    @property
    def kernel_id(self) -> str:
        """Path-safe id used in result directories: <name>-<release>."""
        rel = re.sub(r"[^A-Za-z0-9._+-]", "_", self.release)
        return f"{self.name}-{rel}" if rel not in self.name else self.name

    def config_hash(self) -> str | None:
        if self.config and self.config.exists():
            return hashlib.sha256(self.config.read_bytes()).hexdigest()[:16]
        return None

    def describe(self) -> dict:
        return {
            "name": self.name, "release": self.release, "image": str(self.image),
            "modules_dir": str(self.modules_dir) if self.modules_dir else None,
            "config": str(self.config) if self.config else None,
            "config_sha256_16": self.config_hash(), "extra_cmdline": self.cmdline,
            "description": self.description,
        }


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


def load_kernel(name: str) -> Kernel:
    path = KERNEL_DIR / f"{name}.toml"
    if not path.exists():
        raise UsageError(f"--kernel {name!r}: unknown kernel; allowed: {', '.join(kernel_names()) or '(none)'}")
    data = load_toml(path)
    where = f"kernels/{name}.toml"
    source = optional(data, "source", str, where, "distro")
    if source == "distro":
        reject_unknown(data, {"source", "release", "description", "cmdline"}, where)
        rel, image, mods, cfg = distro_kernel(name, optional(data, "release", str, where))
        return Kernel(name=name, release=rel, image=image, modules_dir=mods, config=cfg,
                      cmdline=list(optional(data, "cmdline", list, where, [])),
                      description=optional(data, "description", str, where, ""))
    try:
        from .kbuild import load_built_kernel
    except ImportError:
        raise UsageError(f"{where}.source: {source!r} is not supported; allowed: distro") from None
    return load_built_kernel(name, data, where)
