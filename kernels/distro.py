"""Debian's packaged kernel, installed on this machine (linux-image-amd64, `make setup`):
kernels/distro.toml (no source, or source = "distro"; DISTRO_FIELDS), its image the newest
/boot/vmlinuz-* (or the toml's `release`), its modules /lib/modules/<release>."""
import pathlib
import re

from krig.errors import UsageError
from .definition import DistroDefinition
from .kernel import Kernel


def distro_kernel(name: str, t: DistroDefinition, boot_dir=pathlib.Path("/boot"),
                  modules_root=pathlib.Path("/lib/modules")) -> Kernel:
    """The Kernel record of kernels/<name>.toml, a distro kernel (its definition: kernels/definition.py read)."""
    release = t.release
    images = sorted(boot_dir.glob("vmlinuz-*"), key=lambda p: _release_key(p.name[len("vmlinuz-"):]))
    if release:
        images = [p for p in images if p.name == f"vmlinuz-{release}"]
    if not images:
        want = f"vmlinuz-{release}" if release else "vmlinuz-*"
        raise UsageError(f"kernel {name}: no {boot_dir}/{want} installed "
                         "(install linux-image-amd64 with `make setup`)")
    image = images[-1]
    rel = image.name[len("vmlinuz-"):]
    return Kernel(name=name, release=rel, image=image, modules_dir=modules_root / rel,
                  config=boot_dir / f"config-{rel}", cmdline=list(t.cmdline), description=t.description)


def _release_key(rel: str):
    return [int(x) if x.isdigit() else x for x in re.split(r"[.-]", rel)]
