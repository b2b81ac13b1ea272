"""The root a QEMU guest sees: made for it, never the host's `/`.

The kernel and workload under test run as root in the guest, so the guest is
given only what it needs, each piece a read-only 9p share:
- `usr` (and any of bin/sbin/lib* that are real directories on a host without
  merged /usr), exported as they are: programs and libraries, no secrets;
- a skeleton root made here: the host's top-level symlinks (bin -> usr/bin,
  ...), empty mount points, and a copy of /etc holding only what every local
  user may read anyway (world-readable files in world-searchable directories,
  minus key and password files by name): no /etc/shadow, no SSH host keys,
  no TLS private keys (its /etc/shadow is made here: every account, no password);
- the krig tree's `reproducers/` at its own path (not .venv, .git, results/).
Nothing from /root, /home, krig's cache or config, or the run's other files.
The guest's /root, /tmp, /run and /var are tmpfs (rigs/guest/init.sh).
"""
import hashlib
import os
import pathlib
import re
import shutil
import stat
import tempfile
import time

from krig.paths import cache_dir

SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
MOUNT_POINTS = ("proc", "sys", "dev", "tmp", "run", "var", "root", "home", "mnt")
# Readable by all on some systems, still nothing a guest should get.
SECRET_NAME = re.compile(r"(^|[_.-])(key|keys|keytab|secret|secrets|passwd-|shadow|gshadow|pw|password)"
                         r"([_.-]|$)|^ssh_host_|^id_|^\.pwd\.lock$", re.I)
SHARE_OPTS = "security_model=none,readonly=on,multidevs=remap"
# The made-up shadow holds no password; QEMU reads it as its own user (rigs/qemu/confine.py).
SHADOW_MODE = 0o644


def _public(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_IROTH)


def copy_public_etc(dest: pathlib.Path, src: pathlib.Path = pathlib.Path("/etc")) -> int:
    """Copy what any local user could read of /etc; returns the number of files copied."""
    n = 0
    for dirpath, dirnames, filenames in os.walk(src):
        d = pathlib.Path(dirpath)
        out = dest / d.relative_to(src)
        out.mkdir(exist_ok=True)
        keep = []
        for name in dirnames:
            p = d / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                filenames.append(name)          # copied as a link below
            elif st.st_mode & stat.S_IXOTH and _public(st) and not SECRET_NAME.search(name):
                keep.append(name)
        dirnames[:] = keep
        for name in filenames:
            p = d / name
            if SECRET_NAME.search(name):
                continue
            try:
                st = p.lstat()
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(p), out / name)
                elif stat.S_ISREG(st.st_mode) and _public(st):
                    shutil.copyfile(p, out / name)
                    os.chmod(out / name, stat.S_IMODE(st.st_mode))
                    n += 1
            except OSError:
                continue
    return n


def _no_password_shadow(etc: pathlib.Path) -> None:
    """A shadow file without a single password ("*": no password login, not locked), so
    programs that check accounts (the test server's sshd) work without the host's."""
    users = [ln.split(":", 1)[0] for ln in (etc / "passwd").read_text().splitlines() if ":" in ln] \
        if (etc / "passwd").exists() else []
    (etc / "shadow").write_text("".join(f"{u}:*:19000:0:99999:7:::\n" for u in users))
    (etc / "shadow").chmod(SHADOW_MODE)


def build(dest: pathlib.Path, tree: pathlib.Path) -> tuple[list, list]:
    """Make the skeleton in dest (a new directory); returns shares(dest, tree).

    tree: the krig tree; its reproducers/ is shared (tag krigtree) and mounted at
    <tree>/reproducers in the guest."""
    dest.mkdir()
    for name in SYSTEM_DIRS:
        host = pathlib.Path("/", name)
        if host.is_symlink():
            os.symlink(os.readlink(host), dest / name)
        elif host.is_dir():
            (dest / name).mkdir()
    for name in MOUNT_POINTS:
        (dest / name).mkdir(exist_ok=True)
    (dest / "etc").mkdir()
    copy_public_etc(dest / "etc")
    _no_password_shadow(dest / "etc")
    repro = pathlib.Path(tree).resolve() / "reproducers"
    (dest / repro.relative_to("/")).mkdir(parents=True, exist_ok=True)
    return shares(dest, tree)


def _etc_key(tree: pathlib.Path) -> str:
    """Changes whenever anything in /etc (name, size, mtime, mode, link) or the tree's path does."""
    h = hashlib.sha256(f"{tree}|{SECRET_NAME.pattern}|{MOUNT_POINTS}|{SYSTEM_DIRS}|{SHADOW_MODE:o}".encode())
    for dirpath, dirnames, filenames in os.walk("/etc"):
        dirnames.sort()
        for name in sorted(filenames + dirnames):
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            h.update(f"{dirpath}/{name}|{st.st_size}|{st.st_mtime_ns}|{st.st_mode}\n".encode())
    return h.hexdigest()[:16]


def cached(tree: pathlib.Path) -> tuple[list, list]:
    """build() once per state of /etc (a stat walk, ~0.1 s) and reuse it: read-only for every guest."""
    tree = pathlib.Path(tree).resolve()
    base = cache_dir("guest-root")
    final = base / _etc_key(tree)
    if not final.exists():
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=".new-", dir=base))
        build(tmp / "root", tree)
        try:
            os.rename(tmp / "root", final)
        except OSError:
            pass                                # another krig made it first
        shutil.rmtree(tmp, ignore_errors=True)
        for old in base.iterdir():              # older states of /etc, unused for a day
            if old != final and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old, ignore_errors=True)
    os.utime(final)
    return shares(final, tree)


def shares(root: pathlib.Path, tree: pathlib.Path) -> tuple[list, list]:
    """QEMU -virtfs args and kernel cmdline words for a skeleton made by build()."""
    repro = pathlib.Path(tree).resolve() / "reproducers"
    system = [n for n in SYSTEM_DIRS if (root / n).is_dir() and not (root / n).is_symlink()]
    args = ["-virtfs", f"local,path={root},mount_tag=host,{SHARE_OPTS}",
            "-virtfs", f"local,path={repro},mount_tag=krigtree,{SHARE_OPTS}"]
    for name in system:
        args += ["-virtfs", f"local,path=/{name},mount_tag=sys-{name},{SHARE_OPTS}"]
    return args, [f"krig.sysdirs={','.join(system)}", f"krig.tree={repro}"]
