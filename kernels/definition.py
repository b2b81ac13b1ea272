"""A kernel definition, kernels/<name>.toml (docs/kernels.md): where it is found, its table read
with `extends` resolved, and the fields each kind of kernel may have: Debian's packaged kernel
(DISTRO_FIELDS, kernels/distro.py) or one krig builds (KERNEL_FIELDS, with what one field cannot
say alone in `checked`). A checked definition is a typed value, a DistroDefinition or a
KernelDefinition (field tables as records, krig/schema.py); kernels/spec.py makes a
KernelDefinition a build spec. The catalog reads a name here once (`read`).
"""
import pathlib

from krig import KERNEL_DIR
from krig.config import load_toml
from krig.errors import UsageError
from krig.schema import OMIT, Field, Record, check, missing, optional, reject_unknown

DEFAULT_TARBALL = "/usr/src/linux-source-6.1.tar.xz"
DEFAULT_BASE_CONFIG = ["x86_64_defconfig", "kvm_guest.config"]
SOURCES = ("linux-source", "git")
SOURCE_FIELDS = {"linux-source": {"tarball"}, "git": {"tree", "ref"}}

_STRINGS = "expected a list of strings, got {item!r}"
# A kernel krig builds (docs/kernels.md). What one field cannot say alone (the fields of the other
# source, a git tree's path) is checked after it (`checked`), the files it names by kernels/spec.py.
KERNEL_FIELDS = (
    Field("source", str, choices=SOURCES, says="{v!r} is not one of distro, " + ", ".join(SOURCES)),
    Field("description", str, ""),
    Field("extends", str, OMIT),
    Field("tarball", str, OMIT),
    Field("tree", str, OMIT),
    Field("ref", str, "HEAD"),
    Field("base_config", list, DEFAULT_BASE_CONFIG, each=str, test=bool,
          says="needs at least one config target (e.g. x86_64_defconfig), each a string"),
    Field("fragments", list, [], each=str, says=_STRINGS),
    Field("reproducers", (str, list), "all", test=lambda v: v == "all" or isinstance(v, list),
          says='expected "all" or a list of reproducer names, got {v!r}'),
    Field("patches", (str, list), [], test=lambda v: isinstance(v, str) or all(isinstance(x, str) for x in v),
          says="expected a series name or a list of them, got {v!r}"),
    Field("localversion", str, OMIT, pattern=r"[A-Za-z0-9._+-]*", says="{v!r}: use letters, digits and . _ + -"),
    Field("cmdline", list, [], each=str, says=_STRINGS),
)
FIELDS = {f.key for f in KERNEL_FIELDS}


class KernelDefinition(Record, fields=KERNEL_FIELDS):      # checked (`checked`); an omitted field is None
    source: str
    description: str
    extends: str | None
    tarball: str | None
    tree: str | None
    ref: str
    base_config: tuple[str, ...]
    fragments: tuple[str, ...]
    reproducers: str | tuple[str, ...]
    patches: str | tuple[str, ...]
    localversion: str | None
    cmdline: tuple[str, ...]


# Debian's packaged kernel, kernels/distro.toml: no source, or source = "distro".
DISTRO_FIELDS = (
    Field("source", str, "distro", choices=("distro",)),
    Field("release", str, OMIT),
    Field("description", str, ""),
    Field("cmdline", list, [], each=str, says=_STRINGS),
)


class DistroDefinition(Record, fields=DISTRO_FIELDS):
    source: str
    release: str | None
    description: str
    cmdline: tuple[str, ...]


# Directories of kernel tomls a workflow wrote for itself outside the checkout (krig bisect's,
# in its results directory: workflows/bisect.py), searched after kernels/ while it runs.
GENERATED_DIRS: list[pathlib.Path] = []


def kernel_names(kernel_dir: pathlib.Path = KERNEL_DIR) -> list[str]:
    return sorted(p.stem for p in kernel_dir.glob("*.toml"))


def kernel_toml(name: str, kernel_dir: pathlib.Path = KERNEL_DIR) -> pathlib.Path:
    """kernel_dir/<name>.toml, or for kernels/ a generated toml of that name when kernels/ has
    none (the kernels/ path, missing, when neither has it)."""
    path = kernel_dir / f"{name}.toml"
    if path.exists() or kernel_dir != KERNEL_DIR:
        return path
    return next((d / f"{name}.toml" for d in GENERATED_DIRS if (d / f"{name}.toml").is_file()), path)


def is_distro(data: dict) -> bool:
    """A kernel toml of Debian's packaged kernel: source "distro", or no source and no
    `extends` (a toml that extends another takes its source from it). The one answer to "is this
    the distro kernel?" for a toml's table, raw or resolved."""
    return data.get("source", None if "extends" in data else "distro") == "distro"


def read(name: str, kernel_dir: pathlib.Path = KERNEL_DIR) -> tuple[KernelDefinition | DistroDefinition, str]:
    """kernels/<name>.toml checked, as the catalog takes it, and where it is: the distro kernel's
    (it extends nothing) a DistroDefinition, a built kernel's a KernelDefinition with `extends`
    resolved. The file is read once."""
    data, where = _load(name, kernel_dir)
    if data is None:
        known = ", ".join(kernel_names(kernel_dir)) or "(none)"
        raise UsageError(f"--kernel {name!r}: unknown kernel; allowed: {known}")
    optional(data, "source", str, where, None)          # a source that is not a string: one line
    if is_distro(data):
        return DistroDefinition.of(check(data, DISTRO_FIELDS, where)), where
    if "extends" in data:
        data, where = _extended(name, data, where, kernel_dir, ())
    return checked(data, where), where


def resolved_table(name: str, kernel_dir: pathlib.Path, seen=()) -> tuple[dict, str]:
    """The toml's table with `extends` resolved (the child's keys win)."""
    data, where = _load(name, kernel_dir)
    if data is None and not seen:
        raise UsageError(f"{name}: unknown kernel (no {where}); known: {', '.join(kernel_names(kernel_dir))}")
    if data is None:
        raise UsageError(f"{seen[-1]}.extends: unknown kernel {name!r}")
    return _extended(name, data, where, kernel_dir, seen)


def _load(name: str, kernel_dir: pathlib.Path) -> tuple[dict | None, str]:
    """kernels/<name>.toml's table as written (None: no such file), and where it is."""
    path = kernel_toml(name, kernel_dir)
    return (load_toml(path) if path.exists() else None), f"kernels/{name}.toml"


def _extended(name: str, data: dict, where: str, kernel_dir: pathlib.Path, seen: tuple) -> tuple[dict, str]:
    """data (kernels/<name>.toml's, as read) with its `extends` chain resolved."""
    reject_unknown(data, FIELDS, where)
    parent = optional(data, "extends", str, where)
    if parent is None:
        return dict(data), where
    if parent in seen or parent == name:
        raise UsageError(f"{where}.extends: {parent!r} makes a cycle")
    base, _ = resolved_table(parent, kernel_dir, seen + (where,))
    if is_distro(base):
        raise UsageError(f"{where}.extends: {parent!r} is the distro kernel; only built kernels can be extended")
    if "source" in data and data["source"] != base.get("source"):
        for k in SOURCE_FIELDS.get(base.get("source", ""), ()):
            base.pop(k, None)
    base.pop("description", None)
    base.pop("localversion", None)     # defaults to -krig-<this name>
    merged = {**base, **data}
    merged.pop("extends", None)
    return merged, where


def checked(data: dict, where: str) -> KernelDefinition:
    """A built kernel's table (resolved) against KERNEL_FIELDS, and what one field cannot say
    alone: no field of the other source, a git source's tree."""
    t = check(data, KERNEL_FIELDS, where)
    source = t["source"]
    for s, fields in SOURCE_FIELDS.items():
        for f in fields:
            if s != source and f in data:
                raise UsageError(f"{where}.{f}: only for source = {s!r}, this kernel's source is {source!r}")
    if source == "git":
        missing(t, "tree", where)
    return KernelDefinition.of(t)
