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
A tree or image kernel's config is checked against the reproducer's `config`
fragment before anything boots (check_config): a missing option is one line.
"""
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess

from krig import KERNEL_DIR, REPRO_DIR
from krig.errors import KrigError, UsageError
from krig.paths import cache_dir
from krig.results import public_repository
from . import drivers, fromtree
from .incremental import build_kernel
from .makelog import clean_env, first_error, run_logged
from .patching import apply_to_copies
from .trees import ensure_pristine
from .kernel import Kernel
from .series import load_series
from .spec import (KernelSpec, build_inputs, cache_key, git, is_distro, kernel_cache, kernel_toml, parse_fragment,
                   read_dotconfig, resolve_commit, resolve_spec, resolved_table, sha256_file, source_identity,
                   wanted_config)
from .spec import git_env as git_env_of

OPTIONS = ("config", "modules", "like", "series", "drivers", "drivers-scope")
DEFAULT_LIKE = "linux-6.1"
SYNTAX = ("NAME | PATH (built tree or image file) | TREE@REF, then optionally ,config=FILE "
          ",modules=DIR ,like=KERNEL ,drivers=RIG|PATH [,drivers-scope=boot|all] ,series=MBOX")
_NAME_RE = re.compile(r"^[A-Za-z0-9._+-]+$")


@dataclasses.dataclass
class Given:
    text: str
    kind: str                  # toml | tree | image | git
    name: str | None = None    # toml
    path: pathlib.Path | None = None
    ref: str | None = None
    opts: dict = dataclasses.field(default_factory=dict)


def is_given(text: str) -> bool:
    """Anything but a plain kernels/<name>.toml name."""
    return not (_NAME_RE.match(text) and not os.path.exists(text))


def parse(text: str) -> Given:
    if not text.strip():
        raise UsageError(f"--kernel {text!r}: empty; give a kernel (syntax: {SYNTAX})")
    head, *rest = text.split(",")
    opts = {}
    for item in rest:
        key, eq, value = item.partition("=")
        if not eq or key not in OPTIONS or not value:
            raise UsageError(f"--kernel {text}: {item!r} is not an option; allowed: "
                             f"{', '.join(o + '=' for o in OPTIONS)} (syntax: {SYNTAX})")
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
    elif _NAME_RE.match(head):
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


def load_given(text: str, build: bool = False, log=print) -> Kernel:
    g = parse(text)
    if g.kind == "tree":
        return _tree_kernel(g, log)
    if g.kind == "image":
        return _image_kernel(g)
    return _built_kernel(g, build, log)


# -- the reproducer's config, and what makes numbers incomparable --------------

def check_config(kernel: Kernel, repro_name: str, label: str = "--kernel") -> None:
    """A kernel given as a tree or image must have every option the reproducer's fragment asks for."""
    frag = REPRO_DIR / repro_name / "config"
    if not frag.is_file() or kernel.config is None:
        return
    wanted = parse_fragment(frag, f"reproducers/{repro_name}/config")
    have = read_dotconfig(kernel.config)
    modules = kernel.modules_dir is not None and kernel.modules_dir.is_dir() and any(kernel.modules_dir.iterdir())
    for k, v in wanted.items():
        got = have.get(k, "n")
        if v == "n" or got == v or got == "y" or (got == "m" and modules):
            continue
        state = "not set" if got == "n" else f"={got} with no modules installed"
        raise UsageError(f"{label} {kernel.arg or kernel.name}: {k}={v} is {state} in {kernel.config}, "
                         f"and reproducers/{repro_name}/config needs it")


# -- a built tree, an image file -------------------------------------------------

def _git_origin(tree: pathlib.Path, ref: str = "HEAD") -> dict | None:
    if not ((tree / ".git").exists() or (tree / "HEAD").exists()):
        return None
    try:
        commit = git(tree, "rev-parse", "--verify", f"{ref}^{{commit}}")
    except KrigError:
        return None
    full = git(tree, "rev-parse", "--symbolic-full-name", ref, check=False)
    branch = full[len("refs/heads/"):] if full.startswith("refs/heads/") else None
    # named by its origin (no credentials, no query string) or its directory's last name, never
    # by a path of this host: the record goes into bundles, replies and KCIDB reports
    remote = git(tree, "config", "--get", "remote.origin.url", check=False)
    return {"repository": public_repository(remote) if remote else tree.name, "commit": commit, "branch": branch}


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


def _tree_kernel(g: Given, log) -> Kernel:
    t = g.path
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
            if run_logged(argv, t, logf, env=clean_env()) != 0:
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
                  cmdline=[], description=f"built tree {t.name}", arg=g.text, git=_git_origin(t))


def _no_modules(key: str, release: str) -> pathlib.Path:
    """An empty lib/modules/<release> for a kernel without modules (the rig's initramfs wants one)."""
    d = cache_dir("given") / key / "empty" / "lib" / "modules" / release
    d.mkdir(parents=True, exist_ok=True)
    return d


def _image_kernel(g: Given) -> Kernel:
    img = g.path
    release = image_release(img)
    if not release:
        raise UsageError(f"--kernel {g.text}: {img} is not an x86 bzImage (no setup header with a version)")
    fromtree.check_release(release, f"--kernel {g.text}: {img}", UsageError)
    if "config" in g.opts:
        cfg = pathlib.Path(g.opts["config"]).expanduser().resolve()
        if not cfg.is_file():
            raise UsageError(f"--kernel {g.text}: config={cfg}: no such file")
    else:
        names = ([f"config-{img.name[len('vmlinuz-'):]}"] if img.name.startswith("vmlinuz-") else []) + \
            [f"config-{release}", ".config", "config"]
        cfg = next((img.parent / n for n in names if (img.parent / n).is_file()), None)
        if cfg is None:
            raise UsageError(f"--kernel {g.text}: no config next to the image ({', '.join(names)}); give it "
                             "as ,config=FILE (the reproducer's options are checked before booting)")
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


# -- buildable: a toml, a git tree at a ref, either with a series -----------------

def _spec(g: Given, series: dict | None, log=print) -> tuple[KernelSpec, dict | None]:
    if g.kind == "toml":
        path = kernel_toml(g.name)
        if not path.exists():
            raise UsageError(f"--kernel {g.text}: unknown kernel {g.name!r}")
        data, _ = resolved_table(g.name, KERNEL_DIR)
        if is_distro(data):
            raise UsageError(f"--kernel {g.text}: {g.name} is the distro's packaged kernel; a series needs a "
                             "kernel krig builds (a built kernel toml, or TREE@REF)")
        spec = resolve_spec(g.name)
        origin = _git_origin(spec.tree, spec.ref) if spec.source == "git" else None
    else:
        like = g.opts.get("like", DEFAULT_LIKE)
        if not (KERNEL_DIR / f"{like}.toml").exists():
            raise UsageError(f"--kernel {g.text}: like={like}: unknown kernel")
        data, _ = resolved_table(like, KERNEL_DIR)
        if is_distro(data):
            raise UsageError(f"--kernel {g.text}: like={like} is the distro kernel; like= takes a built kernel's "
                             "config (e.g. tiny-6.1, linux-6.1)")
        ref = g.ref or (series or {}).get("provenance", {}).get("base_commit")
        if not ref:
            raise UsageError(f"--kernel {g.text}: TREE@ takes the series' base-commit, and "
                             f"{'there is no series' if not series else 'the series has no base-commit: line'}")
        for k in ("tarball", "tree", "ref", "patches", "description"):
            data.pop(k, None)
        data.update(source="git", tree=str(g.path), ref=ref)
        where = f"--kernel {g.text}"
        probe = resolve_spec(f"git-{g.path.name}", data, where)
        commit = resolve_commit(probe)
        data["localversion"] = f"-krig-g{commit[:12]}"
        data["description"] = f"{g.path.name} at {ref} ({commit[:12]}), config like {like}"
        spec = resolve_spec(f"git-{g.path.name}-{commit[:12]}", data, where)
        origin = _git_origin(g.path, ref)
    if "drivers" in g.opts:
        _add_drivers(spec, g, log)
    if series:
        label = pathlib.Path(series["source"]).name
        spec.patches = spec.patches + [(label, p) for p in series["patches"]]
        phash = series["provenance"]["patchset_hash"]
        spec.name = f"{spec.name}+s{phash[:8]}"
        spec.localversion = f"{spec.localversion}-s{phash[:8]}"
        spec.description = f"{spec.description or spec.name} + series {series['provenance']['subject']!r}"
    return spec, origin


def given_series(text: str, log=print) -> dict | None:
    g = parse(text)
    return load_series(g.opts["series"], "series=", log) if "series" in g.opts else None


def trial_apply(spec: KernelSpec) -> None:
    """Apply the spec's patches to copies of the files they touch, from its source, before
    any build: a patch that does not apply is one line naming it and the file or hunk."""
    ident = source_identity(spec)
    if spec.source == "git":
        def read(rel):
            p = subprocess.run(["git", "-C", str(spec.tree), "cat-file", "blob", f"{ident['commit']}:{rel}"],
                               capture_output=True)
            return p.stdout if p.returncode == 0 else None
    else:
        pristine = ensure_pristine(spec.tarball, ident["tarball_sha256"])

        def read(rel):
            f = pristine / rel
            return f.read_bytes() if f.is_file() else None
    apply_to_copies(read, spec.patches)


def _built_kernel(g: Given, build: bool, log) -> Kernel:
    series = given_series(g.text, log)
    spec, origin = _spec(g, series, log)
    key = cache_key(build_inputs(spec))
    meta_path = kernel_cache(key) / "build.json"
    if not meta_path.exists():
        if not build:
            raise UsageError(f"--kernel {g.text}: not built yet (krig run and krig validate build it)")
        if series:
            trial_apply(spec)
        build_kernel(spec, log=log)
    meta = json.loads(meta_path.read_text())
    out = kernel_cache(key)
    release = meta["release"]
    return Kernel(name=spec.name, release=release, image=out / "bzImage",
                  modules_dir=out / "mod" / "lib" / "modules" / release, config=out / "config",
                  cmdline=list(spec.cmdline), description=spec.description, arg=g.text, git=origin,
                  series=series["provenance"] if series else None, drivers=meta.get("drivers"))


# -- a server's drivers added (kernels/drivers.py) ---------------------------------

def source_tree(spec: KernelSpec) -> pathlib.Path:
    """The spec's source as files to read the build files of: the extracted tarball, or a git
    commit's Makefiles, Kbuild and Kconfig files taken out once into krig's cache."""
    ident = source_identity(spec)
    if spec.source != "git":
        return ensure_pristine(spec.tarball, ident["tarball_sha256"])
    out = cache_dir("kbuild", "buildfiles") / ident["commit"]
    if out.is_dir():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    names = subprocess.run(["git", "-C", str(spec.tree), "ls-tree", "-r", "-z", "--name-only", ident["commit"]],
                           capture_output=True, env=git_env_of()).stdout.split(b"\0")
    want = [n.decode(errors="replace") for n in names if n.rsplit(b"/", 1)[-1] in (b"Makefile", b"Kbuild") or
            n.rsplit(b"/", 1)[-1].startswith(b"Kconfig")]
    want = [n for n in want if ".." not in n.split("/") and not n.startswith("/")]
    batch = subprocess.run(["git", "-C", str(spec.tree), "cat-file", "--batch"], capture_output=True,
                           input="".join(f"{ident['commit']}:{n}\n" for n in want).encode(), env=git_env_of()).stdout
    pos = 0
    for rel in want:                    # "<oid> blob <size>\n<bytes>\n" per name, in order
        head, _, _ = batch[pos:pos + 200].partition(b"\n")
        words = head.split()
        pos += len(head) + 1
        if len(words) != 3 or words[1] != b"blob":
            continue
        size = int(words[2])
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(batch[pos:pos + size])
        pos += size + 1
    tmp.rename(out)
    return out


def _add_drivers(spec: KernelSpec, g: Given, log) -> None:
    """spec + the drivers of the server drivers= names (a rig) or describes (files)."""
    value = g.opts["drivers"]
    label = f"--kernel {g.text}: drivers={value}"
    path = pathlib.Path(value).expanduser()
    if path.exists():
        inv = drivers.read_inventory(path, label)
    elif drivers.rig_reader is None or not _NAME_RE.match(value):
        raise UsageError(f"{label}: no such file or directory, and not a rig name (drivers= takes a rig "
                         "whose server krig reads, or a module list, or a directory of modules/bound/config)")
    else:
        inv = drivers.rig_reader(value, log)
    tree = source_tree(spec)
    p = drivers.plan(inv, tree, wanted_config(spec)[0], g.opts.get("drivers-scope"), label)
    if not p["config"]:
        log(f"krig: drivers from {inv['source']} (scope {p['scope']}): nothing to add to {spec.name} (every driver "
            f"of the server is in it already or not in this source; {len(p['skipped'])} skipped)")
        return
    spec.drivers = {**p, "tree": str(tree)}
    spec.name = f"{spec.name}+d{p['hash']}"
    spec.localversion = f"{spec.localversion}-d{p['hash']}"
    spec.description = f"{spec.description or spec.name} + the drivers of {inv['source']}"
