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
This module is the one reader of the text (tests/project/test_layout_kernel_text.py: no other module
splits it): its words as written (KernelText: nothing on disk read, for a text a record kept) and
a Given (the words, and what they name on this host). Both give the text fit to leave the host
(public: its paths by their last names) and TREE@REF with REF pinned to a commit (pinned).
kernels/catalog.py loads each form: a tree or an image
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

from krig.errors import KrigError, UsageError
from . import drivers
from .kernel import Kernel

OPTIONS = ("config", "modules", "like", "series", "drivers", "drivers-scope")
SYNTAX = ("NAME | PATH (built tree or image file) | TREE@REF, then optionally ,config=FILE "
          ",modules=DIR ,like=KERNEL ,drivers=RIG|PATH [,drivers-scope=boot|all] ,series=MBOX")
NAME_RE = re.compile(r"^[A-Za-z0-9._+-]+$")
TREE_AT_REF = re.compile(r"^(.+)@([^@]*)$")


def is_path(value: str) -> bool:
    """Whether a word of the text is a path (not a name): it has a / or starts with ~ or ."""
    return "/" in value or value.startswith(("~", "."))


def _last_name(value: str) -> str:
    return pathlib.PurePosixPath(value.rstrip("/")).name or value if is_path(value) else value


@dataclasses.dataclass(frozen=True)
class KernelText:
    """The --kernel text's words as written, nothing on disk read but whether the head is a path
    there: the head (NAME, PATH, or TREE of TREE@REF), REF when the head is TREE@REF (at "@"),
    and the options after the commas, each as written (KEY=VALUE)."""
    text: str
    head: str
    at: str                     # "@" when the head is TREE@REF, else ""
    ref: str
    items: tuple[str, ...]

    def public(self, tree_as: str | None = None, ref_as: str | None = None) -> str:
        """The text fit to leave the host: a tree, image or file path in it (the head, TREE of
        TREE@REF, config=, modules=, series= FILE) named by its last name
        (/home/alice/src/linux@v6.1,like=tiny-6.1 -> linux@v6.1,like=tiny-6.1), or the head's path
        by `tree_as` (a reply's ./linux, the clone it tells to make) and its REF by `ref_as` (the
        commit a local branch was). A value written <LIKE_THIS> (a placeholder) is kept."""
        head = tree_as if tree_as and is_path(self.head) else _last_name(self.head)
        parts = [head + self.at + ((ref_as or self.ref) if self.at else "")]
        for item in self.items:
            key, eq, value = item.partition("=")
            parts.append(key + eq + (value if value.startswith("<") else _last_name(value)))
        return ",".join(parts)

    def pinned(self, ref: str) -> str:
        """TREE@REF's text with REF the commit `ref` (TREE@ spelled out: the series' base-commit),
        its options as written."""
        if not self.at:
            raise KrigError(f"--kernel {self.text}: not TREE@REF, nothing to pin")
        return ",".join([f"{self.head}@{ref}", *self.items])

    def paths(self) -> list[str]:
        """The paths of this host the text names, as written: the head (TREE of TREE@REF) and
        every option's value that is a path."""
        values = [self.head] + [item.partition("=")[2] for item in self.items]
        return [v for v in values if is_path(v)]


def kernel_text(text: str) -> KernelText:
    """The text's words (KernelText): split at its commas, the head's last @ making TREE@REF unless
    the head is a path that exists (a file whose name has an @)."""
    head, *items = text.split(",")
    m = TREE_AT_REF.match(head)
    if m and not os.path.exists(head):
        return KernelText(text, m.group(1), "@", m.group(2), tuple(items))
    return KernelText(text, head, "", "", tuple(items))


@dataclasses.dataclass
class Given:
    """The --kernel text read (parse): its kind, what it names on this host, its options."""
    text: str
    kind: str                  # toml | tree | image | git
    name: str | None = None    # toml
    path: pathlib.Path | None = None
    ref: str | None = None
    opts: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def words(self) -> KernelText:
        return kernel_text(self.text)

    @property
    def toml(self) -> str:
        """The kernels/<name>.toml name of a toml kernel (a loader asks it of the Givens it takes)."""
        if self.name is None:
            raise KrigError(f"--kernel {self.text}: a {self.kind} kernel has no toml name")
        return self.name

    @property
    def where(self) -> pathlib.Path:
        """The path of a tree, an image or TREE@REF's tree (a loader asks it of the Givens it takes)."""
        if self.path is None:
            raise KrigError(f"--kernel {self.text}: a {self.kind} kernel names no path")
        return self.path

    def public(self, tree_as: str | None = None, ref_as: str | None = None) -> str:
        """The text fit to leave the host (KernelText.public)."""
        return self.words.public(tree_as, ref_as)

    def pinned(self, ref: str) -> str:
        """TREE@REF's text with REF the commit `ref` (KernelText.pinned)."""
        return self.words.pinned(ref)

    def unpinned(self) -> bool:
        """TREE@ without REF: the series' base-commit is its REF (kernels/derived.py)."""
        return self.kind == "git" and not self.ref


class Loader(Protocol):
    """The loader of one kind of Given (kernels/catalog.py LOADERS): whether it takes a Given,
    and its Kernel, built first when `build` says so and the kind is one krig builds (a server's
    drivers read by `read_server`, a workflow's: kernels/drivers.py ServerReader); whether krig
    builds it, and why a patch series cannot go on it (krig validate's --base)."""

    def takes(self, g: Given) -> bool: ...

    def load(self, g: Given, build: bool, log, read_server: drivers.ServerReader | None = None) -> Kernel: ...

    def builds(self, g: Given) -> bool:
        """Whether krig builds g: not the distro's packaged kernel, nor one built elsewhere;
        nothing is read but the tomls."""
        ...

    def series_refusal(self, g: Given) -> str | None:
        """Why a patch series cannot go on g (one line, after the option's name), None when it can."""
        ...


def is_given(text: str) -> bool:
    """Anything but a plain kernels/<name>.toml name."""
    return not (NAME_RE.match(text) and not os.path.exists(text))


def parse(text: str, option: str = "--kernel") -> Given:
    """The --kernel text as a Given (a plain name: kind toml, no options); one line naming `option`
    (--kernel, --base) when it is none."""
    if not text.strip():
        raise UsageError(f"{option} {text!r}: empty; give a kernel (syntax: {SYNTAX})")
    words = kernel_text(text)
    opts: dict[str, str] = {}
    for item in words.items:
        key, eq, value = item.partition("=")
        if not eq or key not in OPTIONS or not value:
            raise UsageError(f"{option} {text}: {item!r} is not an option; allowed: "
                             f"{', '.join(o + '=' for o in OPTIONS)} (syntax: {SYNTAX})")
        if key in opts:
            raise UsageError(f"{option} {text}: {key}= given twice ({key}={opts[key]} and {key}={value}); "
                             "give it once")
        opts[key] = value
    head = words.head + words.at + words.ref
    if words.at:
        tree = pathlib.Path(words.head).expanduser().resolve()
        if not ((tree / ".git").exists() or (tree / "HEAD").exists()):
            why = "not a git repository" if tree.is_dir() else "not a directory" if tree.exists() else "no such directory"
            raise UsageError(f"{option} {text}: {words.head}: {why} (TREE@REF: TREE is a git tree of the kernel; "
                             f"syntax: {SYNTAX})")
        g = Given(text, "git", path=tree, ref=words.ref or None, opts=opts)
    elif os.path.isdir(head):
        g = Given(text, "tree", path=pathlib.Path(head).resolve(), opts=opts)
    elif os.path.isfile(head):
        g = Given(text, "image", path=pathlib.Path(head).resolve(), opts=opts)
    elif NAME_RE.match(head):
        g = Given(text, "toml", name=head, opts=opts)
    else:
        raise UsageError(f"{option} {text}: {head} is neither a kernel name, an existing path nor TREE@REF "
                         f"(syntax: {SYNTAX})")
    allowed = {"toml": {"series", "drivers", "drivers-scope"}, "git": {"like", "series", "drivers", "drivers-scope"},
               "tree": set(), "image": {"config", "modules"}}[g.kind]
    for k in opts:
        if k not in allowed:
            raise UsageError(f"{option} {text}: {k}= does not go with a {g.kind} kernel "
                             f"(allowed: {', '.join(sorted(allowed)) or 'no options'})")
    if "drivers-scope" in opts and ("drivers" not in opts or opts["drivers-scope"] not in drivers.SCOPES):
        raise UsageError(f"{option} {text}: drivers-scope={opts['drivers-scope']}: " + (
            "goes with drivers=RIG|PATH" if "drivers" not in opts else f"allowed: {', '.join(drivers.SCOPES)}"))
    return g
