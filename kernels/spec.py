"""What a built kernel is: kernels/<name>.toml resolved to a spec, and its cache key.

A built kernel lives in a cache directory keyed by a hash of everything that
goes into it (source identity, base config targets, merged config fragments,
local version, patch series contents, compiler), so the same kernel is never
built twice:  $KRIG_CACHE/kernels/<key>/ (default ~/.cache/krig/kernels/<key>/)
holding bzImage, config, System.map, mod/lib/modules/<release>/ and build.json.

Building is kernels/build.py (`python -m kernels.build`); how a tree is
reused, patched and configured between builds is kernels/incremental.py.
"""
import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import re
import subprocess

from krig import KERNEL_DIR, REPRO_DIR, ROOT
from krig.config import load_toml
from krig.errors import KrigError, UsageError
from krig.paths import cache_dir
from krig.schema import OMIT, Field, check, missing, optional, reject_unknown
from .kernel import Kernel

RECIPE = "krig-kbuild-1"      # bump when the build recipe changes what comes out
ARCH = "x86_64"
DEFAULT_TARBALL = "/usr/src/linux-source-6.1.tar.xz"
DEFAULT_BASE_CONFIG = ["x86_64_defconfig", "kvm_guest.config"]
SOURCES = ("linux-source", "git")
FIELDS = {"source", "description", "extends", "tarball", "tree", "ref", "base_config", "fragments",
          "reproducers", "patches", "localversion", "cmdline"}
SOURCE_FIELDS = {"linux-source": {"tarball"}, "git": {"tree", "ref"}}
DRIVERS_LABEL = "drivers="       # the origin of the options a server's drivers add (soft: reported, not fatal)
_CONFIG_RE = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_NOTSET_RE = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")


class KernelNotBuilt(UsageError):
    """A kernel described by a toml that has not been built yet."""

    def __init__(self, message: str, description: str = ""):
        super().__init__(message)
        self.description = description


@dataclasses.dataclass
class KernelSpec:
    name: str
    where: str
    source: str
    tarball: pathlib.Path | None
    tree: pathlib.Path | None
    ref: str
    base_config: list
    fragments: list          # [(label, path)] in merge order (the last wins)
    patches: list            # [(series, path)] in apply order
    localversion: str
    cmdline: list
    description: str
    drivers: dict | None = None     # a server's drivers added (kernels/drivers.py plan), or None


# -- kconfig fragments ------------------------------------------------------

def parse_fragment(path: pathlib.Path, label: str | None = None) -> dict:
    """A kconfig fragment -> {CONFIG_X: value}; `# CONFIG_X is not set` -> 'n'."""
    label = label or str(path)
    out = {}
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"{label}: cannot read config fragment ({e.strerror})") from None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _CONFIG_RE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
            continue
        m = _NOTSET_RE.match(line)
        if m:
            out[m.group(1)] = "n"
            continue
        if line and not line.startswith("#"):
            raise UsageError(f"{label}:{n}: not a kconfig line: {raw!r} (want CONFIG_X=value or "
                             "'# CONFIG_X is not set')")
    return out


def merge_fragments(fragments: list) -> tuple[dict, dict, list]:
    """[(label, path)] -> (values, origin label per option, redefinitions).

    Same rule as scripts/kconfig/merge_config.sh: a later fragment overrides an
    earlier one; redefinitions are reported (label, option, old, new).
    """
    values, origin, redefined = {}, {}, []
    for label, path in fragments:
        for k, v in parse_fragment(path, label).items():
            if k in values and values[k] != v:
                redefined.append((label, k, values[k], v))
            values[k] = v
            origin[k] = label
    return values, origin, redefined


def read_dotconfig(path: pathlib.Path) -> dict:
    return parse_dotconfig(path.read_text())


def parse_dotconfig(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        m = _CONFIG_RE.match(line) or _NOTSET_RE.match(line)
        if m:
            out[m.group(1)] = m.group(2) if m.re is _CONFIG_RE else "n"
    return out


def config_mismatches(wanted: dict, final: dict) -> list:
    """Requested options the final .config does not honour. A requested =m is
    satisfied by =y (built in); a requested 'not set' by an absent option."""
    bad = []
    for k, v in wanted.items():
        got = final.get(k, "n")
        if v == got or (v == "m" and got == "y"):
            continue
        bad.append((k, v, got))
    return bad


# -- resolving kernels/<name>.toml -------------------------------------------

def is_distro(data: dict) -> bool:
    """A kernel toml of Debian's packaged kernel: source "distro", or no source and no
    `extends` (a toml that extends another takes its source from it). The one answer to "is this
    the distro kernel?" for a toml's table, raw or resolved."""
    return data.get("source", None if "extends" in data else "distro") == "distro"


# Directories of kernel tomls a workflow wrote for itself outside the checkout (krig bisect's,
# in its results directory: workflows/bisect.py), searched after kernels/ while it runs.
GENERATED_DIRS: list[pathlib.Path] = []


def kernel_toml(name: str, kernel_dir: pathlib.Path = KERNEL_DIR) -> pathlib.Path:
    """kernel_dir/<name>.toml, or for kernels/ a generated toml of that name when kernels/ has
    none (the kernels/ path, missing, when neither has it)."""
    path = kernel_dir / f"{name}.toml"
    if path.exists() or kernel_dir != KERNEL_DIR:
        return path
    return next((d / f"{name}.toml" for d in GENERATED_DIRS if (d / f"{name}.toml").is_file()), path)


def resolved_table(name: str, kernel_dir: pathlib.Path, seen=()) -> tuple[dict, str]:
    """The toml's table with `extends` resolved (the child's keys win)."""
    where = f"kernels/{name}.toml"
    path = kernel_toml(name, kernel_dir)
    if not path.exists() and not seen:
        known = ", ".join(sorted(p.stem for p in kernel_dir.glob("*.toml")))
        raise UsageError(f"{name}: unknown kernel (no {where}); known: {known}")
    if not path.exists():
        raise UsageError(f"{seen[-1]}.extends: unknown kernel {name!r}")
    data = load_toml(path)
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
        for k in SOURCE_FIELDS.get(base.get("source"), ()):
            base.pop(k, None)
    base.pop("description", None)
    base.pop("localversion", None)     # defaults to -krig-<this name>
    merged = {**base, **data}
    merged.pop("extends", None)
    return merged, where


def _path(value: str, base: pathlib.Path) -> pathlib.Path:
    p = pathlib.Path(os.path.expandvars(os.path.expanduser(value)))
    return p if p.is_absolute() else base / p


_STRINGS = "expected a list of strings, got {item!r}"
# A kernel definition, kernels/NAME.toml (docs/kernels.md). What one field cannot say alone (the
# fields of the other source, a git tree's path, files that must exist) is checked after it.
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
assert {f.key for f in KERNEL_FIELDS} == FIELDS


def resolve_spec(name: str, data: dict | None = None, where: str | None = None,
                 kernel_dir: pathlib.Path = KERNEL_DIR, repro_dir: pathlib.Path = REPRO_DIR) -> KernelSpec:
    if data is None or "extends" in data:
        data, where = resolved_table(name, kernel_dir)
    where = where or f"kernels/{name}.toml"
    t = check(data, KERNEL_FIELDS, where)
    source = t["source"]
    for s, fields in SOURCE_FIELDS.items():
        for f in fields:
            if s != source and f in data:
                raise UsageError(f"{where}.{f}: only for source = {s!r}, this kernel's source is {source!r}")
    if source == "git" and "ref" in data and "tree" not in data:
        missing(data, "tree", where)
    tarball = _path(t.get("tarball", DEFAULT_TARBALL), ROOT) if source == "linux-source" else None
    tree = _path(missing(t, "tree", where), ROOT) if source == "git" else None
    ref = t["ref"] if source == "git" else "HEAD"
    fragments = [(f"reproducers/{n}/config", repro_dir / n / "config") for n in _reproducers(t, where, repro_dir)]
    for f in t["fragments"]:
        p = _path(f, kernel_dir)
        if not p.is_file():
            raise UsageError(f"{where}.fragments: {f!r} not found (paths are relative to kernels/)")
        fragments.append((f"kernels/{f}" if not os.path.isabs(f) else f, p))
    return KernelSpec(name=name, where=where, source=source, tarball=tarball, tree=tree, ref=ref,
                      base_config=list(t["base_config"]), fragments=fragments,
                      patches=_patches(t["patches"], where, kernel_dir),
                      localversion=t.get("localversion", f"-krig-{name}"), cmdline=list(t["cmdline"]),
                      description=t["description"])


def _reproducers(t: dict, where: str, repro_dir: pathlib.Path) -> list:
    """The reproducers whose config fragments the kernel takes ("all": every one that has one)."""
    if t["reproducers"] == "all":
        return sorted(p.parent.name for p in repro_dir.glob("*/config"))
    for n in t["reproducers"]:
        if not isinstance(n, str) or not (repro_dir / n / "config").exists():
            raise UsageError(f"{where}.reproducers: {n!r} has no reproducers/{n}/config")
    return list(t["reproducers"])


def _patches(series, where: str, kernel_dir: pathlib.Path) -> list:
    """[(series, patch file)] in apply order, each series a folder of kernels/patches/."""
    out = []
    allowed = sorted(p.name for p in (kernel_dir / "patches").glob("*") if p.is_dir())
    for s in [series] if isinstance(series, str) else series:
        if not s:
            continue
        d = kernel_dir / "patches" / s
        if not d.is_dir():
            raise UsageError(f"{where}.patches: series {s!r} not found in kernels/patches/; "
                             f"allowed: {', '.join(allowed) or '(none)'}")
        files = sorted(d.glob("*.patch"))
        if not files:
            raise UsageError(f"{where}.patches: kernels/patches/{s}/ has no *.patch files")
        out += [(s, f) for f in files]
    return out


# -- identity and cache key --------------------------------------------------

def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tarball_sha256(path: pathlib.Path) -> str:
    """sha256 of a source tarball, remembered by (path, size, mtime)."""
    try:
        st = path.stat()
    except OSError:
        raise UsageError(f"{path}: source tarball not found (apt-get install linux-source-6.1, "
                         "or `make setup`)") from None
    memo = cache_dir("kbuild") / "tarball-sha256.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    tag = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    if tag not in known:
        known[tag] = sha256_file(path)
        tmp = memo.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(memo)
    return known[tag]


def git_env() -> dict:
    """The environment minus GIT_DIR & co. (`git bisect run` exports them to its command)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def git(repo, *args, check=True) -> str:
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=git_env())
    if check and p.returncode != 0:
        msg = (p.stderr.strip().splitlines() or ["failed"])[-1]
        raise KrigError(f"git -C {repo} {' '.join(args)}: {msg}")
    return p.stdout.strip()


def resolve_commit(spec: KernelSpec) -> str:
    if not (spec.tree / ".git").exists() and not (spec.tree / "HEAD").exists():
        raise UsageError(f"{spec.where}.tree: {spec.tree} is not a git repository")
    p = subprocess.run(["git", "-C", str(spec.tree), "rev-parse", "--verify", "--quiet",
                        f"{spec.ref}^{{commit}}"], capture_output=True, text=True, env=git_env())
    if p.returncode != 0:
        raise UsageError(f"{spec.where}.ref: {spec.ref!r} is not a commit in {spec.tree}")
    return p.stdout.strip()


@functools.lru_cache(maxsize=1)
def compiler_version() -> str:
    try:
        out = subprocess.run(["gcc", "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "gcc: not found"
    return (out.splitlines() or ["gcc: unknown"])[0]


def source_identity(spec: KernelSpec) -> dict:
    if spec.source == "linux-source":
        return {"kind": "linux-source", "tarball_sha256": tarball_sha256(spec.tarball)}
    return {"kind": "git", "commit": resolve_commit(spec)}


def localversion_fragment(localversion: str) -> str:
    return (f'CONFIG_LOCALVERSION="{localversion}"\n'
            "# CONFIG_LOCALVERSION_AUTO is not set\n")


def wanted_config(spec: KernelSpec) -> tuple[dict, dict, list]:
    values, origin, redefined = merge_fragments(spec.fragments)
    for k, v in (spec.drivers or {}).get("config", {}).items():
        values[k] = v
        origin[k] = DRIVERS_LABEL
    for k, v in (("CONFIG_LOCALVERSION", f'"{spec.localversion}"'), ("CONFIG_LOCALVERSION_AUTO", "n")):
        values[k] = v
        origin[k] = f"{spec.where}.localversion"
    return values, origin, redefined


def build_inputs(spec: KernelSpec, identity: dict | None = None) -> dict:
    """Everything that decides what comes out of a build (hashed into the key)."""
    values, _, _ = wanted_config(spec)
    return {
        "recipe": RECIPE, "arch": ARCH, "compiler": compiler_version(),
        "source": identity or source_identity(spec),
        "base_config": list(spec.base_config),
        "config": dict(sorted(values.items())),
        "patches": [{"series": s, "name": p.name, "sha256": sha256_file(p)} for s, p in spec.patches],
    }


def cache_key(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def kernel_cache(key: str) -> pathlib.Path:
    return cache_dir("kernels") / key


# -- loading a built kernel ---------------------------------------------------

def load_built_kernel(name: str, data: dict, where: str, kernel_dir: pathlib.Path = KERNEL_DIR,
                      repro_dir: pathlib.Path = REPRO_DIR):
    """The Kernel record of a kernel built by `krig kernel build NAME` (make kernel KERNEL=NAME)."""
    spec = resolve_spec(name, data, where, kernel_dir, repro_dir)
    key = cache_key(build_inputs(spec))
    out = kernel_cache(key)
    meta_path = out / "build.json"
    if not meta_path.exists():
        raise KernelNotBuilt(f"kernel {name} is not built; run `krig kernel build {name}` "
                             f"(cache key {key})", spec.description)
    meta = json.loads(meta_path.read_text())
    release = meta["release"]
    return Kernel(name=name, release=release, image=out / "bzImage",
                  modules_dir=out / "mod" / "lib" / "modules" / release, config=out / "config",
                  cmdline=list(spec.cmdline), description=spec.description)
