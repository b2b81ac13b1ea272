"""`krig reproduce BUNDLE.tar.gz [--kernel KERNEL] [--rig RIG]`: rerun a bundle from its data.

A bundle comes from a stranger: its reproduce.sh would run on this host as whoever
runs it. This path executes nothing from the bundle. It reads two data files out
of the tarball without unpacking it (bundle.json and run-args), checks every
argument against what `krig run` takes (the reproducer a name of krig's own
reproducers/, then only --kernel, --preset and --set), runs krig's own reproducer
of that name through krig's own code, says when the bundled sources differ from
krig's, and prints the new verdict next to the bundled one.

The kernel is --kernel if given, else the bundle's (its --kernel argument, or name).
`--kernel bundled` boots the image a `krig bundle --with-kernel` carries, inside the
guest only, after its sha256 matched kernel/SHA256SUMS.

Exit: 0 the same verdict, 1 a different one, 2 bad input.
"""
import hashlib
import json
import pathlib
import re
import tarfile

from . import REPRO_DIR, RESULTS_DIR
from .config import parse_set
from .errors import UsageError
from .paths import cache_dir
from .reproducer import reproducer_names
from .run import run

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_NAME_RELEASE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
MAX_MEMBER = 64 << 20      # bundle.json, run-args and sources are small; an image is read in chunks


def _members(tar: tarfile.TarFile, bundle: str) -> tuple[str, dict]:
    files = {m.name: m for m in tar.getmembers() if m.isfile()}
    tops = {n.split("/", 1)[0] for n in files}
    if len(tops) != 1:
        raise UsageError(f"{bundle}: not a krig bundle (expected one top directory, found {len(tops)})")
    top = tops.pop()
    return top, {n[len(top) + 1:]: m for n, m in files.items() if "/" in n}


def _read(tar, members, name, bundle) -> bytes:
    m = members.get(name)
    if m is None:
        raise UsageError(f"{bundle}: not a krig bundle (no {name})")
    if m.size > MAX_MEMBER:
        raise UsageError(f"{bundle}: {name} is {m.size} bytes, too large for what it should hold")
    return tar.extractfile(m).read()


def parse_run_args(lines: list, bundle: str) -> dict:
    """run-args -> {reproducer, kernel, preset, sets}; anything else is refused (one line)."""
    if not lines or not _NAME.match(lines[0]) or lines[0] not in reproducer_names():
        got = lines[0] if lines else "(empty)"
        raise UsageError(f"{bundle}: run-args: reproducer {got!r} is not one of krig's reproducers")
    out = {"reproducer": lines[0], "kernel": None, "preset": None, "sets": []}
    i = 1
    while i < len(lines):
        opt = lines[i]
        if opt not in ("--kernel", "--preset", "--set") or i + 1 >= len(lines):
            raise UsageError(f"{bundle}: run-args: {opt!r} is not an argument krig reproduce takes "
                             "(allowed: --kernel, --preset, --set KEY=VALUE)")
        val = lines[i + 1]
        if opt == "--set":
            out["sets"].append(val)
        else:
            out[opt[2:]] = val
        i += 2
    return out


def _sources_differ(tar, members, name: str) -> list:
    """Bundled reproducer files that differ from (or are missing in) krig's reproducers/<name>/."""
    prefix = f"reproducer/{name}/"
    differ = []
    for rel, m in members.items():
        if not rel.startswith(prefix):
            continue
        mine = REPRO_DIR / name / rel[len(prefix):]
        if not mine.is_file() or (m.size <= MAX_MEMBER and mine.read_bytes() != tar.extractfile(m).read()):
            differ.append(rel[len(prefix):])
    return sorted(differ)


def _bundled_kernel(tar, members, bundle: str, meta: dict) -> str:
    """Copy the bundled image (and config) out, checked against SHA256SUMS; an image kernel argument."""
    if "kernel/image" not in members or "kernel/SHA256SUMS" not in members:
        raise UsageError(f"--kernel bundled: {bundle} carries no kernel image (made without --with-kernel)")
    sums = {}
    for line in _read(tar, members, "kernel/SHA256SUMS", bundle).decode(errors="replace").splitlines():
        digest, _, name = line.partition("  ")
        sums[name.strip()] = digest.strip()
    release = (meta.get("kernel") or {}).get("release") or ""
    if not _NAME_RELEASE.match(release):
        raise UsageError(f"--kernel bundled: bundle.json's kernel release {release!r} is not a release")
    dest = cache_dir("reproduce") / sums.get("image", "unknown")[:16]
    moddir = dest / "mod" / "lib" / "modules" / release
    for name, digest in sums.items():
        parts = pathlib.PurePosixPath(name).parts
        if f"kernel/{name}" not in members or not parts or ".." in parts or name.startswith("/") or \
                not (name in ("image", "config") or (parts[0] == "modules" and len(parts) > 1)):
            raise UsageError(f"--kernel bundled: kernel/SHA256SUMS names {name!r}, not a file of the bundle's kernel")
        target = dest / ("bzImage" if name == "image" else "config" if name == "config" else
                         moddir.joinpath(*parts[1:]))
        target.parent.mkdir(parents=True, exist_ok=True)
        h, tmp = hashlib.sha256(), target.with_name(f".{target.name}.tmp")
        with tar.extractfile(members[f"kernel/{name}"]) as src, open(tmp, "wb") as f:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                h.update(chunk)
                f.write(chunk)
        if h.hexdigest() != digest:
            tmp.unlink()
            raise UsageError(f"--kernel bundled: kernel/{name}'s sha256 does not match kernel/SHA256SUMS")
        tmp.chmod(0o644)
        tmp.rename(target)
    arg = str(dest / "bzImage")
    if (dest / "config").exists():
        arg += f",config={dest / 'config'}"
    if (moddir / "modules.builtin").exists():
        arg += f",modules={moddir}"
    return arg


def reproduce(bundle: str, kernel: str | None = None, rig: str = "qemu-default", log=print) -> int:
    path = pathlib.Path(bundle)
    try:
        tar = tarfile.open(path, "r:*")
    except (OSError, tarfile.TarError) as e:
        raise UsageError(f"{bundle}: not a readable tarball ({e})") from None
    with tar:
        _, members = _members(tar, bundle)
        try:
            meta = json.loads(_read(tar, members, "bundle.json", bundle))
        except ValueError as e:
            raise UsageError(f"{bundle}: bundle.json is not JSON ({e})") from None
        lines = _read(tar, members, "run-args", bundle).decode(errors="replace").splitlines()
        args = parse_run_args([ln for ln in lines if ln != ""], bundle)
        differ = _sources_differ(tar, members, args["reproducer"])
        if kernel == "bundled":
            kernel = _bundled_kernel(tar, members, bundle, meta)
    if differ:
        log(f"krig: note: krig's reproducers/{args['reproducer']} differs from the bundled sources "
            f"({', '.join(differ[:5])}{' ...' if len(differ) > 5 else ''}); krig's own runs")
    kernel = kernel or args["kernel"] or "distro"
    log(f"krig: rerunning {args['reproducer']} from {path.name} with krig's own code (nothing from the bundle "
        f"is executed) on rig {rig}, kernel {kernel}")
    run_dir, verdict = run(args["reproducer"], rig, kernel, args["preset"], parse_set(args["sets"]),
                           results_root=RESULTS_DIR, log=log)
    bundled = meta.get("verdict")
    print(f"{verdict['verdict']}: {verdict['reason']}")
    print(f"results: {run_dir}")
    print(f"bundled: {bundled}")
    print(f"rerun:   {verdict['verdict']} (rig {rig})")
    return 0 if verdict["verdict"] == bundled else 1
