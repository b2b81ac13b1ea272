"""`krig bundle RUN_DIR`: one tarball a stranger can rerun with reproduce.sh.

The tarball holds one directory:

    README                three lines: what it is, how to rerun (krig reproduce), what to fill in
    reproduce.sh          reruns the reproducer with the same parameters (krig checkout: $KRIG or PATH)
    bundle.json           reproducer, preset, parameters, kernel identity, bundled verdict
    run-args              the `krig run` arguments, one a line (read by reproduce.sh)
    rig.toml              the rig description, identities replaced by <PLACEHOLDERS>
    reproducer/<name>/    the reproducer's sources (no bin/), reproducer/lib/ the harness
    kernel/               identity.json, the kernel toml(s), its .config, patch series, fragments
    run/                  the run directory (no trace.dat unless --with-trace), identities scrubbed

Secrets and identities (BMC password, password file, host names, addresses,
user names, key and known_hosts paths, this machine's name and home, a URL's
user:password) never enter the bundle: the password is never in a run directory (rigs/ipmi/spec.py),
and every other value is replaced by a placeholder in every text file of run/.
"""
import hashlib
import io
import json
import os
import pathlib
import re
import stat
import subprocess
import tarfile
import time

from krig import KERNEL_DIR, REPRO_DIR, safeio
from .argcheck import output_file
from krig.asked import AskedRun
from krig.config import load_toml, toml_value
from rigs import rig_path
from krig.errors import UsageError
from krig.paths import cache_dir, kernel_file
from krig.reproducer import load_reproducer
from kernels.given import kernel_text
from krig.results import bundle_name, public_paths, public_repository, public_url
from krig.record import Manifest, RunRecord, Verdict
from krig.record_machine import KernelRecord, RigRecord
from krig.rundir import MANIFEST, VERDICT, RunDir

TRACE = "trace.dat"
_TREE_IMAGE = "/arch/x86/boot/bzImage"
# Rig fields that identify a machine, a person or a secret: replaced by placeholders.
IDENTITY_FIELDS = {
    ("bmc", "host"): "<BMC_HOST>", ("bmc", "port"): "<BMC_PORT>", ("bmc", "user"): "<BMC_USER>",
    ("bmc", "password_file"): "<BMC_PASSWORD_FILE>", ("bmc", "password_env"): "<BMC_PASSWORD_ENV>",
    ("ssh", "host"): "<SSH_HOST>", ("ssh", "port"): "<SSH_PORT>", ("ssh", "user"): "<SSH_USER>",
    ("ssh", "key"): "<SSH_KEY>", ("ssh", "known_hosts"): "<SSH_KNOWN_HOSTS>",
    ("ssh", "host_key_alias"): "<SSH_HOST_KEY_ALIAS>",
}
# Account names every machine has: replaced in `user@host` forms and rig fields only,
# never as a bare word (console lines such as `root=` would be mangled for nothing).
GENERIC_USERS = {"root", "admin", "user"}
# Binary files are copied as they are; every other file of run/ is scrubbed as text.
BINARY_SUFFIXES = {".png", ".dat", ".gz", ".zst", ".img"}


def bundle(run_dir, output=None, with_trace: bool = False, log=print, with_kernel: bool = False,
           with_config: bool = False) -> pathlib.Path:
    if output is not None:
        output_file(output, "-o")
    run = RunDir(safeio.given(run_dir))         # the user's own path: results/latest is followed
    run_dir = run.dir
    if not run.exists(MANIFEST):
        raise UsageError(f"{run_dir}: not a run directory (no {MANIFEST}); give the directory `krig run` printed "
                         "after `results:` (results/latest is the newest run)")
    if not run.exists(VERDICT):
        raise UsageError(f"{run_dir}: the run has no {VERDICT}; judge it first with `krig check {run_dir}`")
    try:
        rec = RunRecord.read(run)
        man, verdict = rec.manifest, rec.verdict or Verdict(None)
    except UsageError as e:
        raise UsageError(f"{run_dir}: unreadable manifest.json or verdict.json: {e}") from None
    repro = load_reproducer(man.reproducer)
    top = bundle_name(repro.name)
    stamp = top.rsplit("-", 1)[1]
    out = pathlib.Path(output) if output else pathlib.Path.cwd() / f"{top}.tar.gz"
    subs = identity_substitutions(man)
    meta = {
        "reproducer": repro.name, "preset": man.preset, "params": man.params,
        "kernel": kernel_identity(man.kernel),
        "rig": {"name": man.rig.name, "kind": man.rig.kind},
        "verdict": verdict.verdict, "reason": verdict.reason,
        "krig_revision": man.krig_revision, "bundled": stamp, "with_trace": with_trace,
        "series": man.series, "with_kernel": with_kernel, "with_config": with_config or with_kernel,
    }
    with_config = with_config or with_kernel
    image = _kernel_image(man.kernel) if with_kernel else None
    trace = run_dir / TRACE
    try:
        with tarfile.open(out, "w:gz") as tar:
            w = TarWriter(tar, top, subs)
            w.add_text("README", readme(meta, out.name))
            w.add_text("reproduce.sh", (pathlib.Path(__file__).with_name("reproduce.sh")).read_text(), 0o755)
            w.add_text("bundle.json", json.dumps(meta, indent=2, default=str) + "\n")
            w.add_text("run-args", "".join(a + "\n" for a in run_args(man, repro)))
            w.add_text("rig.toml", rig_toml(_rig_spec(man.rig), man.rig))
            for src in sorted(_sources(REPRO_DIR / repro.name)) + sorted(_sources(REPRO_DIR / "lib")):
                tar.add(src, f"{top}/reproducer/{src.relative_to(REPRO_DIR)}", recursive=False)
            add_kernel(w, man.kernel, man.series, with_config, image)
            add_run_files(w, run, with_trace)
    except BaseException:
        out.unlink(missing_ok=True)          # no half-written tarball
        raise
    size = out.stat().st_size
    msg = f"bundle: {out} ({_human(size)})" + (f", with the kernel image ({_human(image.stat().st_size)})"
                                                if image is not None else "")
    if trace.exists() and not with_trace:
        msg += f"; trace.dat ({_human(trace.stat().st_size)}) left out (--with-trace adds it)"
    log(msg)
    return out


class TarWriter:
    """Members of the bundle's tarball, each under its top directory: text scrubbed of the
    host's identity (subs), bytes and files as they are."""

    def __init__(self, tar: tarfile.TarFile, top: str, subs):
        self.tar, self.top, self.subs = tar, top, subs

    def add_bytes(self, name, data: bytes, mode=0o644):
        ti = tarfile.TarInfo(f"{self.top}/{name}")
        ti.size, ti.mode, ti.mtime = len(data), mode, int(time.time())
        self.tar.addfile(ti, io.BytesIO(data))

    def add_text(self, name, text: str, mode=0o644):
        self.add_bytes(name, scrub(text, self.subs).encode(), mode)

    def add_open(self, src, name: str) -> str:
        """An open file as top/name, owned by nobody in particular; its sha256."""
        ti = self.tar.gettarinfo(fileobj=src, arcname=f"{self.top}/{name}")
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        h = hashlib.sha256()
        self.tar.addfile(ti, _Hashing(src, h))
        return h.hexdigest()

    def add_file(self, path: pathlib.Path, name: str) -> str:
        """A host file krig keeps, read as data (a regular file, no link, never blocking)."""
        with safeio.open_file(*safeio.split(path), cap=1 << 40) as src:
            return self.add_open(src, name)


def add_kernel(w: TarWriter, kernel: KernelRecord, series, with_config: bool, image: pathlib.Path | None) -> None:
    """kernel/: its config (with_config), and with the image its modules and SHA256SUMS."""
    sums = []
    for name, path in kernel_files(kernel, series, with_config):
        digest = w.add_file(path, f"kernel/{name}")
        if name == "config":
            sums.append((digest, "config"))
    if image is not None:
        sums.insert(0, (w.add_file(image, "kernel/image"), "image"))
        mods = kernel_file(kernel.modules_dir, "modules")
        for f in _regular_files(mods) if mods else []:
            rel = f"modules/{f.relative_to(mods)}"
            sums.append((w.add_file(f, f"kernel/{rel}"), rel))
        w.add_bytes("kernel/SHA256SUMS", "".join(f"{d}  {name}\n" for d, name in sums).encode())


def add_run_files(w: TarWriter, run: RunDir, with_trace: bool) -> None:
    """run/: the run directory's files (trace.dat only with_trace)."""
    for f in sorted(run.dir.iterdir()):
        # a run's files may come from a guest: regular files only, no link followed (krig/safeio.py)
        if not run.is_file(f.name) or (f.name == TRACE and not with_trace):
            continue
        if f.suffix in BINARY_SUFFIXES:
            with run.open(f.name, cap=1 << 50) as src:
                w.add_open(src, f"run/{f.name}")
        else:
            w.add_text(f"run/{f.name}", run.read_bytes(f.name).decode(errors="replace"))


def _kernel_image(k: KernelRecord) -> pathlib.Path:
    image = kernel_file(k.image, "image")
    if image is None:
        raise UsageError(f"--with-kernel: the run's kernel image {str(k.image)[:200]!r} is not a kernel "
                         "krig keeps (one it built or unpacked in its cache, or the distro's in /boot), or it is "
                         "gone: not bundled (rebuild the kernel, or bundle without --with-kernel)")
    return image


class _Hashing:
    """A file object whose reads also feed a hash (the sha256 of what went into the tarball)."""

    def __init__(self, f, h):
        self.f, self.h = f, h

    def read(self, n=-1):
        b = self.f.read(n)
        self.h.update(b)
        return b


def _regular_files(d: pathlib.Path):
    """The regular files below d, no link followed (a modules tree krig installed)."""
    for root, dirs, files in os.walk(d):
        dirs.sort()
        for name in sorted(files):
            f = pathlib.Path(root, name)
            if stat.S_ISREG(f.lstat().st_mode):
                yield f


def _sources(d: pathlib.Path):
    """A reproducer's files, without compiled helpers (bin/) or caches."""
    for p in d.rglob("*"):
        rel = p.relative_to(d).parts
        if p.is_file() and "bin" not in rel and "__pycache__" not in rel:
            yield p


def _human(n: int) -> str:
    v = float(n)
    for unit in ("B", "KiB", "MiB"):
        if v < 1024:
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} GiB"


def readme(meta: dict, tarball: str) -> str:
    return (f"krig bundle: {meta['reproducer']} (preset {meta['preset'] or 'none'}) on kernel "
            f"{meta['kernel'].get('release')} gave {meta['verdict']}: {meta['reason']}\n"
            f"Rerun: krig reproduce {tarball} [--rig NAME] [--kernel NAME] (default rig qemu-default; krig runs "
            "its own code, nothing from the bundle; ./reproduce.sh is the bundle's own script: read it first)\n"
            "rig.toml describes the rig it ran on, to read, not to run: rerun on a rig file of your own (--rig); "
            "copy a setting from it only after reading it, and put your own values where it has <PLACEHOLDERS>.\n")


def run_args(manifest: Manifest, repro) -> list[str]:
    """`krig run` arguments minus the rig (reproduce.sh adds its own): the summary's command."""
    args = AskedRun.from_manifest(manifest, repro).args(rig=False)
    return [kernel_text(a).public() if i and args[i - 1] == "--kernel" else a for i, a in enumerate(args)]


# -- identities -------------------------------------------------------------

def identity_substitutions(manifest: Manifest) -> list[tuple[re.Pattern, str]]:
    """(pattern, placeholder) pairs for every identity of the rig and of this machine."""
    pairs: list[tuple[str, str, bool]] = []       # (value, placeholder, as a bare word too)
    for (table, key), ph in IDENTITY_FIELDS.items():
        v = manifest.rig.table(table).get(key)
        if v in (None, "") or key == "port":
            continue
        v = str(v)
        if key == "user":
            pairs.append((v + "@", ph + "@", True))
            if v in GENERIC_USERS:
                continue
        pairs.append((v, ph, True))
        if key in ("key", "known_hosts", "password_file"):
            pairs.append((os.path.dirname(v), f"<{ph[1:-1]}_DIR>", False))
    node = os.uname().nodename
    if len(node) >= 3:
        pairs.append((node, "<KRIG_HOST>", True))
    owner = (manifest.owner or {}).get("host")
    if owner and len(owner) >= 3:
        pairs.append((owner, "<KRIG_HOST>", True))
    pairs += [(path, name, False) for path, name in local_paths(manifest.kernel)]
    home = str(pathlib.Path.home())
    if home not in ("/", ""):
        pairs.append((home, "<HOME>", False))
    user = os.environ.get("USER") or os.environ.get("LOGNAME")
    if user and user not in GENERIC_USERS and len(user) >= 3:
        pairs.append((user, "<USER>", True))
    out = []
    for value, ph, word in sorted(set(pairs), key=lambda p: -len(p[0])):     # longest first
        if len(value) < 2:
            continue
        esc = re.escape(value)
        pat = rf"(?<![A-Za-z0-9_]){esc}(?![A-Za-z0-9_])" if word and value[-1] != "@" else esc
        out.append((re.compile(pat), ph))
    return out


def local_paths(k: KernelRecord) -> list[tuple[str, str]]:
    """(path, its last name) for every tree or file of this host the kernel record names that is
    not a kernel krig keeps: a built tree (the directory above arch/x86/boot/bzImage), an image,
    its config and modules, the --kernel argument's paths, a local origin."""
    out = []
    for what, key in (("image", "image"), ("config", "config"), ("modules", "modules_dir")):
        v = getattr(k, key)
        if isinstance(v, str) and v.startswith("/") and kernel_file(v, what) is None:
            tree = v[:-len(_TREE_IMAGE)] if v.endswith(_TREE_IMAGE) else v
            out.append((tree, pathlib.PurePosixPath(tree).name))
    for v in kernel_text(k.arg).paths() if isinstance(k.arg, str) else []:
        p = os.path.abspath(os.path.expanduser(v)).rstrip("/")
        out.append((p, pathlib.PurePosixPath(p).name))
    repo = k.git.get("repository") if isinstance(k.git, dict) else None
    if isinstance(repo, str) and repo.startswith("/"):
        out.append((repo.rstrip("/"), public_repository(repo)))
    return [(p, n) for p, n in out if len(pathlib.PurePosixPath(p).parts) > 2 and n]


def scrub(text: str, subs) -> str:
    """Identities replaced by placeholders, and the user name and password taken out of every URL
    (an origin URL an older manifest recorded with its token)."""
    text = public_url(text)
    for pat, ph in subs:
        text = pat.sub(ph, text)
    return text


def _rig_spec(described: RigRecord) -> dict:
    """The rig file as written (loadable again), or the manifest's description if the file is gone.
    Only a rig of this host's rig directories, by a plain name: the manifest's name is data, never
    a path to read (a toml file of secrets elsewhere would enter the bundle)."""
    name = described.name
    plain = isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name)
    path = rig_path(name) if plain and name is not None else None
    if path is not None:
        try:
            return load_toml(path)
        except UsageError:
            pass
    return dict(described.spec)


def rig_toml(rig: dict, described: RigRecord) -> str:
    """The rig's description as TOML, every identity field a placeholder."""
    lines = ["# The rig this run used, as a description to read: a bundle's file is not a rig to run as it",
             "# is. Fields in <ANGLE_BRACKETS> were removed from the bundle; in a rig file of your own,",
             "# put your own values there (a password goes in a 0600 file or an environment variable).",
             f"# Was: rig {described.name or '?'} (driver {described.kind or '?'})"]
    tables = []
    for k, v in rig.items():
        if k in ("name", "kind", "arg") or v is None:
            continue
        if isinstance(v, dict):
            tables.append((k, v))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.extend((f"[{k}]", x) for x in v)
        else:
            lines.append(f"{k} = {toml_value(v)}")
    for name, t in tables:
        table = name.strip("[]")
        lines.append(f"\n[{name}]")
        for k, v in t.items():
            ph = IDENTITY_FIELDS.get((table, k))
            if v is None and not ph:
                continue
            lines.append(f"{k} = {toml_value(ph if ph and v not in (None, '') else v)}")
    return "\n".join(lines) + "\n"


# -- the kernel's identity ----------------------------------------------------

def kernel_identity(k: KernelRecord) -> dict:
    """What the kernel was: its name and release, and the distro package or the toml it was built from."""
    out = {key: getattr(k, key) for key in ("name", "release", "config_sha256_16", "extra_cmdline", "debug_options")}
    # a tree or file of this host by its last name (kernels/given.py), an origin without credentials (results.py)
    arg = kernel_text(k.arg).public() if isinstance(k.arg, str) else k.arg
    out.update(description=public_paths(k.description), arg=arg,
               git={**k.git, "repository": public_repository(k.git.get("repository"))}
               if isinstance(k.git, dict) and "repository" in k.git else k.git)
    image = k.image
    if image and image.startswith("/boot/"):
        pkg = _dpkg(["dpkg-query", "-S", image])
        if pkg:
            name = pkg.split(":")[0]
            ver = _dpkg(["dpkg-query", "-W", "-f", "${Version}", name])
            out["distro_package"] = {"package": name, "version": ver}
    toml = KERNEL_DIR / f"{k.name}.toml"
    if toml.exists():
        out["toml"] = f"kernels/{toml.name}"
    return out


def _dpkg(argv) -> str | None:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None


def kernel_files(k: KernelRecord, series: dict | None = None, with_config: bool = False) -> list[tuple[str, pathlib.Path]]:
    """(name in kernel/, path): the toml and those it extends, patches, fragments, a series given
    on the command line (kernel/series/, from krig's series cache), and with_config the .config
    (only that of a kernel krig keeps: paths.kernel_file)."""
    out = []
    if series and re.fullmatch(r"[0-9a-f]{16,64}", str(series.get("patchset_hash") or "")):
        store = cache_dir("series") / series["patchset_hash"][:16]
        out += [(f"series/{p.name}", p) for p in sorted(store.glob("*.patch")) if p.is_file() and not p.is_symlink()]
    cfg = kernel_file(k.config, "config") if with_config else None
    if cfg:
        out.append(("config", cfg))
    name, seen = k.name, set()
    while name and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", str(name)) and name not in seen:
        seen.add(name)
        toml = KERNEL_DIR / f"{name}.toml"
        if not toml.exists():
            break
        out.append((toml.name, toml))
        data = load_toml(toml)
        patches = data.get("patches") or []
        for s in [patches] if isinstance(patches, str) else patches:
            for p in sorted((KERNEL_DIR / "patches" / str(s)).glob("*.patch")):
                out.append((f"patches/{s}/{p.name}", p))
        for frag in data.get("fragments") or []:
            p = KERNEL_DIR / str(frag)
            if p.is_file() and KERNEL_DIR.resolve() in p.resolve().parents:
                out.append((str(frag), p))
        name = data.get("extends")
    return out


def cmd_bundle(a) -> int:
    """`krig bundle RUN_DIR`."""
    bundle(a.run_dir, a.output, a.with_trace, with_kernel=a.with_kernel, with_config=a.with_config)
    return 0
