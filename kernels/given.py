"""Kernels given on the command line (`krig run --kernel`, `krig validate --base`) besides
the names of kernels/<name>.toml:

    NAME                 kernels/NAME.toml (the distro's, or one built by `make kernel`)
    PATH                 a built kernel tree: arch/x86/boot/bzImage, .config, System.map,
                         include/config/kernel.release; its modules (if it builds any) are
                         installed into krig's cache with `make modules_install`
    PATH                 an image file (bzImage, vmlinuz); its config is ,config=FILE or found
                         next to it (config-<release> beside vmlinuz-<release>, .config, config);
                         its modules ,modules=DIR (a lib/modules/<release> directory)
    TREE@REF             a git tree at a commit-ish, built by krig with the config of
                         ,like=KERNEL (a built kernel toml, default linux-6.1), cached like every
                         built kernel; the tree's checkout and refs are never touched.
                         TREE@ (no REF) is the series' base-commit
    BASE,series=MBOX     a buildable kernel (NAME of a built toml, or TREE@REF) with a patch
                         series applied on top (an mbox, .mbox.gz, a directory of patches, or
                         the Message-ID of its posting, fetched with b4; kernels/series.py)

Options follow the kernel after commas: config=, modules=, like=, series=, drivers=,
drivers-scope= (boot: the drivers of the server's network cards and disks, the default when
the server was read; all: every driver it has loaded; kernels/drivers.py).
This module reads the text into a Given; kernels/catalog.py loads each form: a tree or an image
(kernels/prebuilt.py), a kernel krig builds from TREE@REF or with a series or drivers on top
(kernels/derived.py), a name (kernels/definition.py). A tree or image kernel's config is checked
against the reproducer's `config` fragment before anything boots (kernels/kconfig.py
check_config): a missing option is one line.
"""
import dataclasses
import os
import pathlib
import re
from typing import Protocol

from krig.errors import UsageError
from . import drivers
from .kernel import Kernel

OPTIONS = ("config", "modules", "like", "series", "drivers", "drivers-scope")
SYNTAX = ("NAME | PATH (built tree or image file) | TREE@REF, then optionally ,config=FILE "
          ",modules=DIR ,like=KERNEL ,drivers=RIG|PATH [,drivers-scope=boot|all] ,series=MBOX")
NAME_RE = re.compile(r"^[A-Za-z0-9._+-]+$")


@dataclasses.dataclass
class Given:
    text: str
    kind: str                  # toml | tree | image | git
    name: str | None = None    # toml
    path: pathlib.Path | None = None
    ref: str | None = None
    opts: dict = dataclasses.field(default_factory=dict)


class Loader(Protocol):
    """The loader of one kind of Given (kernels/catalog.py LOADERS): whether it takes a Given,
    and its Kernel, built first when `build` says so and the kind is one krig builds."""

    def takes(self, g: Given) -> bool: ...

    def load(self, g: Given, build: bool, log) -> Kernel: ...


def is_given(text: str) -> bool:
    """Anything but a plain kernels/<name>.toml name."""
    return not (NAME_RE.match(text) and not os.path.exists(text))


def parse(text: str) -> Given:
    """The --kernel text as a Given (a plain name: kind toml, no options); one line when it is none."""
    if not text.strip():
        raise UsageError(f"--kernel {text!r}: empty; give a kernel (syntax: {SYNTAX})")
    head, *rest = text.split(",")
    opts = {}
    for item in rest:
        key, eq, value = item.partition("=")
        if not eq or key not in OPTIONS or not value:
            raise UsageError(f"--kernel {text}: {item!r} is not an option; allowed: "
                             f"{', '.join(o + '=' for o in OPTIONS)} (syntax: {SYNTAX})")
        if key in opts:
            raise UsageError(f"--kernel {text}: {key}= given twice ({key}={opts[key]} and {key}={value}); "
                             "give it once")
        opts[key] = value
    m = re.match(r"^(.+)@([^@]*)$", head)
    if m and not os.path.exists(head):
        tree = pathlib.Path(m.group(1)).expanduser().resolve()
        if not ((tree / ".git").exists() or (tree / "HEAD").exists()):
            why = "not a git repository" if tree.is_dir() else "not a directory" if tree.exists() else "no such directory"
            raise UsageError(f"--kernel {text}: {m.group(1)}: {why} (TREE@REF: TREE is a git tree of the kernel; "
                             f"syntax: {SYNTAX})")
        g = Given(text, "git", path=tree, ref=m.group(2) or None, opts=opts)
    elif os.path.isdir(head):
        g = Given(text, "tree", path=pathlib.Path(head).resolve(), opts=opts)
    elif os.path.isfile(head):
        g = Given(text, "image", path=pathlib.Path(head).resolve(), opts=opts)
    elif NAME_RE.match(head):
        g = Given(text, "toml", name=head, opts=opts)
    else:
        raise UsageError(f"--kernel {text}: {head} is neither a kernel name, an existing path nor TREE@REF "
                         f"(syntax: {SYNTAX})")
    allowed = {"toml": {"series", "drivers", "drivers-scope"}, "git": {"like", "series", "drivers", "drivers-scope"},
               "tree": set(), "image": {"config", "modules"}}[g.kind]
    for k in opts:
        if k not in allowed:
            raise UsageError(f"--kernel {text}: {k}= does not go with a {g.kind} kernel "
                             f"(allowed: {', '.join(sorted(allowed)) or 'no options'})")
    if "drivers-scope" in opts and ("drivers" not in opts or opts["drivers-scope"] not in drivers.SCOPES):
        raise UsageError(f"--kernel {text}: drivers-scope={opts['drivers-scope']}: " + (
            "goes with drivers=RIG|PATH" if "drivers" not in opts else f"allowed: {', '.join(drivers.SCOPES)}"))
    return g
