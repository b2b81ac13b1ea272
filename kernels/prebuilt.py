"""A kernel built elsewhere, given by its path (kernels/given.py): a built kernel tree, or an
image file with its config (and modules) beside it or named. Nothing is built: a tree's modules
are installed once into krig's cache ($KRIG_CACHE/given/<key>/, keyed by the image and the
config), a kernel without modules gets an empty lib/modules/<release> the rig's initramfs wants.
"""
import os
import pathlib
import shutil
import subprocess

from krig.errors import KrigError, UsageError
from krig.paths import cache_dir
from . import fromtree
from .digest import cache_key, sha256_file
from .given import Given
from .gitrepo import git_origin
from .kconfig import read_dotconfig
from .kernel import Kernel
from .makelog import clean_env, first_error, run_logged


def tree_kernel(g: Given, log=print) -> Kernel:
    """A built kernel tree: arch/x86/boot/bzImage, .config, System.map, include/config/kernel.release."""
    t = g.where
    need = [t / "arch/x86/boot/bzImage", t / ".config", t / "System.map", t / "include/config/kernel.release"]
    missing = [str(p.relative_to(t)) for p in need if not p.is_file()]
    if missing:
        raise UsageError(f"--kernel {g.text}: not a built kernel tree (no {', '.join(missing)}; "
                         "build it with `make bzImage`, or give an image file or TREE@REF)")
    release = fromtree.check_release(need[3].read_text().strip(), f"--kernel {g.text}: {need[3]}", UsageError)
    key = cache_key({"image": sha256_file(need[0]), "config": sha256_file(need[1])})
    out = cache_dir("given") / key
    modular = read_dotconfig(need[1]).get("CONFIG_MODULES") == "y"
    order = t / "modules.order"
    mod = out / "mod" / "lib" / "modules" / release
    if not modular:
        mod = _no_modules(key, release)
    elif not mod.is_dir():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        tmod = tmp / "mod" / "lib" / "modules" / release
        if order.is_file() and order.read_text().strip():
            logf = tmp / "modules_install.log"
            log(f"krig: installing {t}'s modules into {out}")
            argv = ["make", "-s", "modules_install", f"INSTALL_MOD_PATH={tmp / 'mod'}", "INSTALL_MOD_STRIP=1"]
            if run_logged(argv, t, logf, f"the modules of {t}: make modules_install", env=clean_env()) != 0:
                raise KrigError(f"--kernel {g.text}: `make modules_install` failed: {first_error(logf)}; log: {logf}")
            fromtree.keep_plain(tmp / "mod", logf)
        else:
            # no module built: what is built in is all modprobe needs (nvme, xfs, 9p seen as built in)
            if not (t / "modules.builtin").is_file():
                raise UsageError(f"--kernel {g.text}: CONFIG_MODULES=y but no modules.builtin in the tree "
                                 "(build it with `make bzImage modules`)")
            tmod.mkdir(parents=True)
            for f in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
                if (t / f).is_file():
                    fromtree.copy(t, f, tmod / f)
            dep = subprocess.run(["depmod", "-b", str(tmp / "mod"), release], capture_output=True, text=True,
                                 env=clean_env())
            if dep.returncode != 0:
                raise KrigError(f"--kernel {g.text}: depmod failed: {dep.stderr.strip()[:200]}")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return Kernel(name=f"tree-{t.name}", release=release, image=need[0], modules_dir=mod, config=need[1],
                  cmdline=[], description=f"built tree {t.name}", arg=g.text, git=git_origin(t))


def _no_modules(key: str, release: str) -> pathlib.Path:
    """An empty lib/modules/<release> for a kernel without modules (the rig's initramfs wants one)."""
    d = cache_dir("given") / key / "empty" / "lib" / "modules" / release
    d.mkdir(parents=True, exist_ok=True)
    return d


def image_release(image: pathlib.Path) -> str | None:
    """The release in a bzImage's setup header (the kernel_version string `file` prints)."""
    try:
        with open(image, "rb") as f:
            head = f.read(0x8000)
    except OSError:
        return None
    if len(head) < 0x210 or head[0x202:0x206] != b"HdrS":
        return None
    off = int.from_bytes(head[0x20E:0x210], "little") + 0x200
    s = head[off:off + 256].split(b"\0")[0].decode(errors="replace")
    return s.split()[0] if s.split() else None


def image_kernel(g: Given) -> Kernel:
    """An x86 bzImage; its config ,config=FILE or beside it, its modules ,modules=DIR."""
    img = g.where
    release = image_release(img)
    if not release:
        raise UsageError(f"--kernel {g.text}: {img} is not an x86 bzImage (no setup header with a version)")
    fromtree.check_release(release, f"--kernel {g.text}: {img}", UsageError)
    cfg: pathlib.Path | None
    if "config" in g.opts:
        cfg = pathlib.Path(g.opts["config"]).expanduser().resolve()
        if not cfg.is_file():
            raise UsageError(f"--kernel {g.text}: config={cfg}: no such file")
    else:
        names = [f"config-{img.name[len('vmlinuz-'):]}"] if img.name.startswith("vmlinuz-") else []
        names += [f"config-{release}", ".config", "config"]
        beside = next((img.parent / n for n in names if (img.parent / n).is_file()), None)
        if beside is None:
            raise UsageError(f"--kernel {g.text}: no config next to the image ({', '.join(names)}); give it "
                             "as ,config=FILE (the reproducer's options are checked before booting)")
        cfg = beside
    mods = _no_modules(cache_key({"image": sha256_file(img)}), release)
    if "modules" in g.opts:
        mods = pathlib.Path(g.opts["modules"]).expanduser().resolve()
        if not (mods / "modules.builtin").is_file():
            raise UsageError(f"--kernel {g.text}: modules={mods}: not a lib/modules/<release> directory "
                             "(no modules.builtin)")
    elif read_dotconfig(cfg).get("CONFIG_MODULES") == "y":
        raise UsageError(f"--kernel {g.text}: the kernel has CONFIG_MODULES=y: give its modules as "
                         ",modules=DIR (a lib/modules/<release> directory, from `make modules_install`)")
    return Kernel(name=f"image-{img.name}", release=release, image=img, modules_dir=mods, config=cfg,
                  cmdline=[], description=f"image {img.name}", arg=g.text)


class BuiltElsewhere:
    """A kernel built elsewhere: krig builds nothing of it, and no series goes on it."""

    def builds(self, g: Given) -> bool:
        return False

    def series_refusal(self, g: Given) -> str | None:
        return ("a series needs a base krig can build: a built kernel toml (e.g. tiny-6.1) "
                "or TREE@REF")


class TreeKernels(BuiltElsewhere):
    """The Loader of a built kernel tree (tree_kernel); nothing is built."""

    def takes(self, g: Given) -> bool:
        return g.kind == "tree"

    def load(self, g: Given, build: bool, log, read_server=None) -> Kernel:
        return tree_kernel(g, log)


class ImageKernels(BuiltElsewhere):
    """The Loader of an image file with its config and modules (image_kernel); nothing is built."""

    def takes(self, g: Given) -> bool:
        return g.kind == "image"

    def load(self, g: Given, build: bool, log, read_server=None) -> Kernel:
        return image_kernel(g)
