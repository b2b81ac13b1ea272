"""Generate the guest initramfs: static busybox, /init, and the kernel's own modules.

virtme-ng style: no disk image. /init loads the modules a guest needs
(nvme, xfs, 9p, virtio...) in the order `modprobe --show-depends` gives, mounts
the guest root of rigs/qemu/guestroot.py over 9p and chroots into it. The archive is cached,
keyed by everything that goes into it.
"""
import hashlib
import io
import os
import pathlib
import shutil
import stat
import subprocess

from krig import safeio
from krig.errors import RigError, UsageError
from krig.paths import cache_dir

GUEST_DIR = pathlib.Path(__file__).resolve().parent / "guest"
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")


def find_busybox() -> pathlib.Path:
    for c in BUSYBOX_CANDIDATES:
        p = pathlib.Path(c)
        if p.exists():
            out = subprocess.run(["file", "-L", str(p)], capture_output=True, text=True).stdout \
                if shutil.which("file") else "statically linked"
            if "dynamically" not in out:
                return p
    raise RigError("no static busybox found (apt-get install busybox-static, or run `make setup`)")


def module_load_order(release: str, modules_dir: pathlib.Path | None, names: list,
                      optional: bool = False) -> list[pathlib.Path]:
    """Module files to insmod, dependencies first, each once. Built-in modules are skipped,
    and so are modules the kernel does not have when optional."""
    if not names:
        return []
    if modules_dir is None or not modules_dir.exists():
        raise RigError(f"modules for kernel {release} not found at {modules_dir}")
    # modprobe -d takes the root that contains lib/modules/<release>.
    base = modules_dir.parent.parent.parent
    order, seen = [], set()
    for name in names:
        argv = ["modprobe", "-S", release, "--show-depends", name]
        if str(base) != "/":
            argv[1:1] = ["-d", str(base)]
        p = subprocess.run(argv, capture_output=True, text=True)
        if p.returncode != 0 and optional:
            continue
        if p.returncode != 0:
            raise RigError(f"kernel {release}: module {name!r} not available: {p.stderr.strip()}")
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "insmod":
                path = pathlib.Path(parts[1])
                _check_below(release, name, path, modules_dir)
                if path not in seen:
                    seen.add(path)
                    order.append(path)
    return order


def _check_below(release: str, name: str, path: pathlib.Path, modules_dir: pathlib.Path) -> None:
    """A module file modprobe names (from the kernel's modules.dep, which its own build wrote) is
    read into the guest's initramfs only when it is a regular file below the modules directory,
    reached without following a link: never a host file a hostile modules.dep points at."""
    try:
        st = safeio.lstat(modules_dir, safeio.name_below(os.path.relpath(path, modules_dir)))
    except UsageError as e:
        raise RigError(f"kernel {release}: module {name!r}: modprobe names {path}: refused ({e})") from None
    if st is None or not stat.S_ISREG(st.st_mode):
        what = "missing" if st is None else safeio.kind(st.st_mode)
        raise RigError(f"kernel {release}: module {name!r}: modprobe names {path}: refused ({what}, "
                       f"not a regular file below {modules_dir})")


class _Cpio:
    """Minimal newc writer (no root needed for device nodes)."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev=(0, 0)):
        name_b = name.encode() + b"\0"
        hdr = "070701" + "".join(f"{v:08x}" for v in (
            self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name_b), 0))
        self.ino += 1
        self.buf.write(hdr.encode() + name_b)
        self.buf.write(b"\0" * (-(110 + len(name_b)) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * (-len(data) % 4))

    def dir(self, name):
        self._entry(name, 0o040755)

    def file(self, name, data: bytes, mode=0o755):
        self._entry(name, 0o100000 | mode, data)

    def symlink(self, name, target):
        self._entry(name, 0o120777, target.encode())

    def chardev(self, name, major, minor):
        self._entry(name, 0o020600, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        self.buf.write(b"\0" * (-self.buf.tell() % 512))
        return self.buf.getvalue()


def build(release: str, modules_dir: pathlib.Path | None, modules: list, optional: bool = False) -> pathlib.Path:
    busybox = find_busybox()
    init = (GUEST_DIR / "init.sh").read_bytes()
    mods = module_load_order(release, modules_dir, modules, optional)
    h = hashlib.sha256()
    h.update(release.encode())
    h.update(init)
    st = busybox.stat()
    h.update(f"{busybox}:{st.st_size}:{st.st_mtime_ns}".encode())
    for m in mods:
        ms = m.stat()
        h.update(f"{m}:{ms.st_size}:{ms.st_mtime_ns}".encode())
    out = cache_dir("initramfs") / f"{release}-{h.hexdigest()[:16]}.cpio"
    if out.exists():
        return out
    c = _Cpio()
    for d in ("bin", "sbin", "dev", "proc", "sys", "host", "tmp", "run", "modules", "newroot"):
        c.dir(d)
    c.chardev("dev/console", 5, 1)
    c.chardev("dev/null", 1, 3)
    c.file("bin/busybox", busybox.read_bytes())
    c.symlink("bin/sh", "busybox")
    c.file("init", init)
    listing = []
    for i, m in enumerate(mods):
        name = f"modules/{i:02d}-{m.name}"
        c.file(name, m.read_bytes(), 0o644)
        listing.append("/" + name)
    c.file("modules/order", ("\n".join(listing) + "\n").encode(), 0o644)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(c.finish())
    tmp.rename(out)
    return out
