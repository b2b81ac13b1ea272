"""Results from a lab server, taken as hostile data.

The server's results come back as `tar -cf - .` over SSH, and krig runs as root on the
host: a tar stream is a list of things to create, and `tar -x` creates all of them
(symlinks, hard links, devices, FIFOs, owners, modes). Here the stream is read in
krig's own process (tarfile in streaming mode, from the producer's stdout, with the
pull's timeout over the whole stream) and only data is taken from it:
- regular files and directories, nothing else: a symlink, a hard link, a device, a
  FIFO or any other kind of entry is refused;
- strictly below the destination: an absolute name, a `..`, a name through a refused
  entry or through something that is not a directory is refused;
- every directory opened with O_NOFOLLOW|O_DIRECTORY, every file created with
  O_CREAT|O_EXCL|O_NOFOLLOW: never through a link, never over a file already there;
- no owner or mode from the stream: files 0644, directories 0755;
- never a name krig writes itself at the top of a run directory (krig/rundir.py KRIG_FILES:
  manifest.json, verdict.json, metrics.json, thresholds.json, report.html, ...): a server
  cannot hand over a verdict or a judgement;
- bounded: a cap on one file and on the whole stream (the rig file's
  pull_max_file_size and pull_max_size), checked against each header before its data.
A refused entry is skipped and the extraction goes on (a cap stops it): the regular
files are kept, and the pull fails with one line naming what was refused (Refused).
"""
import dataclasses
import errno
import os
import select
import shlex
import shutil
import subprocess
import tarfile
import time

from krig import safeio
from krig.tarbound import BoundedHeader as _Header, HeaderRefused as _Stop
from krig.errors import RigError, os_fault
from krig.rundir import KRIG_FILES
from rigs.procs import stop_group
from krig.paths import dies_with_parent

TOTAL_CAP = 16 << 30            # the whole stream (rig file: pull_max_size)
FILE_CAP = 8 << 30              # one file (rig file: pull_max_file_size)
REFUSED_CAP = 10000             # refused entries remembered (names below them are refused too)
TRAILER_CAP = 1 << 20           # what may follow the end of the archive (tar pads to its record size)
CHUNK = 1 << 20
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(RigError):
    """The stream held something that is not data below the destination; the rest was kept."""


_show = safeio.printable             # a name from the stream as printable text on one line


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 and n % (1 << 30) == 0 else f"{n} bytes"




@dataclasses.dataclass
class Pulled:
    """What an extraction took and refused."""
    files: int = 0
    dirs: int = 0
    bytes: int = 0
    refused: list = dataclasses.field(default_factory=list)    # the first few, one phrase each
    n_refused: int = 0
    stopped: str | None = None      # a cap: the rest of the stream was not read
    broken: str | None = None       # not a (complete) tar stream

    def refusal(self, what: str) -> str | None:
        """One line: `<what> hold <the first refused entry>: refused (...)`, or None."""
        if not self.refused:
            return None
        more = self.n_refused - 1
        also = f" (and {more} more: {'; '.join(self.refused[1:4])}{'; ...' if more > 3 else ''})" if more else ""
        rest = "" if not self.stopped else "; the rest of the stream was not read" + \
            ("" if self.stopped in self.refused else f" ({self.stopped})")
        return (f"{what} hold {self.refused[0]}: refused{also}{rest}; "
                f"{self.files} regular file{'s' * (self.files != 1)} pulled")


class Extraction:
    def __init__(self, dest, total_cap: int, file_cap: int, own=KRIG_FILES):
        self.dest = str(dest)
        self.own = own                  # top-level names krig writes itself: refused
        self.total_cap, self.file_cap = total_cap, min(file_cap, total_cap)
        self.got = Pulled()
        self.seen = 0                   # bytes of the stream the members so far took
        self.refused_paths: set = set()

    def refuse(self, phrase: str, parts=None, stop: bool = True):
        g = self.got
        g.n_refused += 1
        if len(g.refused) < 4:
            g.refused.append(phrase)
        if parts:
            self.refused_paths.add(tuple(parts))
        if stop and g.n_refused >= REFUSED_CAP:
            raise _Stop(f"more than {REFUSED_CAP} refused entries")

    def run(self, fileobj) -> Pulled:
        """Extract the tar stream fileobj (see extract)."""
        g = self.got
        root = os.open(self.dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            tf = tarfile.open(fileobj=fileobj, mode="r|", tarinfo=_Header, encoding="utf-8",
                              errors="surrogateescape")
            while True:
                m = tf.next()
                tf.members.clear()  # type: ignore[attr-defined]  # tarfile keeps every header it read (its stubs omit the list)
                if m is None:
                    break
                self.member(tf, m, root)
        except _Stop as e:
            g.stopped = str(e)
            self.refuse(str(e), stop=False)
        except (tarfile.TarError, EOFError) as e:
            g.broken = str(e) or type(e).__name__
        finally:
            os.close(root)
        return g

    def member(self, tf, m, root: int):
        name = _show(m.name)
        parts = [p for p in m.name.split("/") if p not in ("", ".")]
        clean = "/".join(parts)
        shown = _show(clean) if clean and not m.name.startswith("/") and ".." not in parts else name
        data = m.isreg() or m.type not in tarfile.SUPPORTED_TYPES       # tarfile reads (or skips) its data
        self.seen += tarfile.BLOCKSIZE + (m.size if data else 0)
        if m.sparse is not None:
            raise _Stop(f"a sparse file {shown}")
        if data and m.size > self.file_cap:
            raise _Stop(f"a file {shown} of {m.size} bytes, more than the {_size(self.file_cap)} one file may hold")
        if self.seen > self.total_cap:
            raise _Stop(f"more than the {_size(self.total_cap)} the results may hold in all (at {shown})")
        kind = self.kind(m, shown)
        if kind:
            return self.refuse(kind, parts)
        if "\0" in m.name:
            return self.refuse(f"a name with a NUL byte {name}")
        if m.name.startswith("/"):
            return self.refuse(f"an absolute name {name}")
        if ".." in parts:
            return self.refuse(f"a name outside the results directory {name}")
        under = next((p for i in range(1, len(parts) + 1) if (p := tuple(parts[:i])) in self.refused_paths), None)
        if under:
            return self.refuse(f"a name {shown} below the refused {_show('/'.join(under))}", parts)
        if parts and parts[0] in self.own:
            return self.refuse(f"a {'directory' if m.isdir() else 'file'} {shown} taking the name of krig's own "
                               f"{parts[0]}", parts[:1])
        if m.isdir():
            if parts:
                fd = self.walk(root, parts, shown, whole=True)
                if fd is not None:
                    os.close(fd)
                    self.got.dirs += 1
            return
        if not parts:
            return self.refuse(f"a file without a name {name}")
        self.write(tf, m, root, parts, shown)

    @staticmethod
    def kind(m, shown: str) -> str | None:
        """A phrase naming an entry that is neither a regular file nor a directory."""
        if m.isreg() or m.isdir():
            return None
        if m.issym():
            return f"a symlink {shown} -> {_show(m.linkname)}"
        if m.islnk():
            to = [p for p in m.linkname.split("/") if p not in ("", ".")]
            plain = not m.linkname.startswith("/") and ".." not in to
            return f"a hard link {shown} to {_show('/'.join(to) if plain else m.linkname)}"
        if m.ischr():
            return f"a character device {shown} ({m.devmajor},{m.devminor})"
        if m.isblk():
            return f"a block device {shown} ({m.devmajor},{m.devminor})"
        if m.isfifo():
            return f"a FIFO {shown}"
        return f"an entry of tar type {_show(m.type.decode('latin-1'))!r} {shown}"

    def walk(self, root: int, parts: list, shown: str, whole: bool = False) -> int | None:
        """A descriptor of the directory root/parts, made (0755) where missing, no link followed;
        None (and the entry refused) where a component is not a directory. whole: parts is
        the entry's own name (a directory entry), not the directory of a file."""
        fd = os.dup(root)
        for i, p in enumerate(parts):
            made = False
            try:
                os.mkdir(p, 0o755, dir_fd=fd)
                made = True
            except FileExistsError:
                pass
            except OSError as e:
                os.close(fd)
                return self.fault(e, parts[:i + 1], shown, "make the directory")
            try:
                nfd = os.open(p, _DIR, dir_fd=fd)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.ENOTDIR, errno.ELOOP) and whole and i == len(parts) - 1:
                    self.refuse(f"a directory {shown} where {self.dest} already has something else")
                    return None
                if e.errno in (errno.ENOTDIR, errno.ELOOP):
                    self.refuse(f"a name {shown} through {_show('/'.join(parts[:i + 1]))}, which is not a "
                                f"directory")
                    return None
                return self.fault(e, parts[:i + 1], shown, "open the directory")
            os.close(fd)
            fd = nfd
            if made:
                os.fchmod(fd, 0o755)
        return fd

    def fault(self, e: OSError, parts: list, shown: str, doing: str):
        if e.errno in (errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ):
            self.refuse(f"a name {shown} the host cannot take ({e.strerror})", parts)
            return None
        raise RigError(f"cannot {doing} {os.path.join(self.dest, *parts)} for {shown}: {os_fault(e)}") from None

    def write(self, tf, m, root: int, parts: list, shown: str):
        d = self.walk(root, parts[:-1], shown)
        if d is None:
            return
        try:
            try:
                fd = os.open(parts[-1], _NEW_FILE, 0o644, dir_fd=d)
            except FileExistsError:
                return self.refuse(f"a file {shown} where {self.dest} already has one", parts)
            except OSError as e:
                return self.fault(e, parts, shown, "create")
        finally:
            os.close(d)
        try:
            os.fchmod(fd, 0o644)
            src = tf.extractfile(m)
            while True:
                b = src.read(CHUNK)
                if not b:
                    break
                view = memoryview(b)
                while view:
                    view = view[os.write(fd, view):]
            self.got.files += 1
            self.got.bytes += m.size
            try:
                os.utime(fd, (int(m.mtime), int(m.mtime)))
            except (OSError, ValueError, OverflowError):
                pass
        except OSError as e:
            raise RigError(f"cannot write {os.path.join(self.dest, *parts)}: {os_fault(e)}") from None
        finally:
            os.close(fd)


def extract(fileobj, dest, total_cap: int = TOTAL_CAP, file_cap: int = FILE_CAP) -> Pulled:
    """Regular files and directories of the tar stream fileobj, below the existing directory
    dest; everything else refused (Pulled.refused). Raises RigError only for the host's own
    faults (a full disk); the producer's timeout (subprocess.TimeoutExpired) passes through."""
    return Extraction(dest, total_cap, file_cap).run(fileobj)


class _Pipe:
    """A child's stdout, read with a deadline over the whole stream; its stderr read alongside
    (only the end kept), so neither pipe fills."""

    def __init__(self, p: subprocess.Popen, deadline: float, label: str, timeout: float):
        assert p.stdout is not None and p.stderr is not None       # started with both as pipes
        self.out, self.err = p.stdout.fileno(), p.stderr.fileno()
        self.deadline, self.label, self.timeout = deadline, label, timeout
        self.err_tail = b""

    def _select(self, fds: list) -> list:
        left = self.deadline - time.monotonic()
        ready = select.select(fds, [], [], left)[0] if left > 0 else []
        if not ready:
            raise subprocess.TimeoutExpired(self.label, self.timeout)
        return ready

    def _read_err(self):
        b = os.read(self.err, 65536)
        if b:
            self.err_tail = (self.err_tail + b)[-4096:]
        else:
            self.err = None

    def read(self, n: int = CHUNK) -> bytes:
        if n == 0:
            return b""
        while True:
            ready = self._select([self.out] + ([self.err] if self.err is not None else []))
            if self.err is not None and self.err in ready:
                self._read_err()
            if self.out in ready:
                return os.read(self.out, min(n if n and n > 0 else CHUNK, CHUNK))

    def finish_stderr(self):
        while self.err is not None:
            self._select([self.err])
            self._read_err()


def stream_from(argv: list, consume, timeout: float, label: str) -> tuple[int | None, str, object]:
    """Run argv (dying with krig, in its own session) and hand its stdout to consume(reader)
    in this process; the whole stream, and the child's exit, within timeout seconds.
    Returns (exit code, the end of its stderr, what consume returned); the exit code is None
    when the child went on writing after what consume took (then krig killed it). The child
    is killed when consume raises, and on a timeout (subprocess.TimeoutExpired)."""
    deadline = time.monotonic() + timeout
    p = subprocess.Popen(dies_with_parent(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        pipe = _Pipe(p, deadline, label, timeout)
        result = consume(pipe)
        left = TRAILER_CAP
        while left > 0 and (b := pipe.read(min(left, CHUNK))):    # tar pads to its record size
            left -= len(b)
        if left <= 0:
            stop_group(p, 2)
            return None, pipe.err_tail.decode(errors="replace"), result
        pipe.finish_stderr()
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(label, timeout) from None
        return p.returncode, pipe.err_tail.decode(errors="replace"), result
    finally:
        stop_group(p, 2)
        for f in (p.stdout, p.stderr):
            if f is not None:
                f.close()


def pull_results(ssh, remote: str, local, timeout: float, total_cap: int = TOTAL_CAP, file_cap: int = FILE_CAP,
                 what: str = "the server's results") -> Pulled:
    """Pull the directory `remote` of the server behind ssh (rigs/ipmi/ssh.py Ssh) into local.
    A refusal wins over every other failure (Refused); then the timeout
    (subprocess.TimeoutExpired), ssh's own failures (SshLost, HostKeyError), the remote tar's,
    a stream that is not tar or goes on after its end (RigError)."""
    ex = Extraction(local, total_cap, file_cap)
    try:
        rc, err, got = ssh.pipe_from(f"tar -C {shlex.quote(remote)} -cf - .", ex.run, timeout)
    except subprocess.TimeoutExpired:
        line = ex.got.refusal(what)
        if line:
            raise Refused(f"rig {ssh.rig}: {line}; the pull did not finish within {timeout:.0f}s") from None
        raise
    line = got.refusal(what)
    if line:
        raise Refused(f"rig {ssh.rig}: {line}")
    if rc is not None:                  # None: krig stopped it, having read what it needed
        ssh.check_exit(f"tar -C {remote} -cf - .", rc, err)
    if got.broken:
        raise RigError(f"rig {ssh.rig}: {what} are not a tar stream krig can read: {got.broken}")
    if rc is None:
        raise RigError(f"rig {ssh.rig}: {what} go on past the end of their tar stream")
    return got


def move_into(src, dest, what: str = "the server's results"):
    """Move the entries of src (an extraction's own directory: regular files and directories
    only) into dest, never over an entry dest already has (that one is refused, Refused)."""
    refused = []
    for entry in sorted(os.listdir(src)):
        target = os.path.join(dest, entry)
        if os.path.lexists(target):
            refused.append(f"a file {_show(entry)} where {dest} already has one")
            continue
        try:
            shutil.move(os.path.join(src, entry), target)
        except OSError as e:
            raise RigError(f"cannot move {entry} into {dest}: {os_fault(e)}; the pulled files are kept "
                           f"in {src}") from None
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise Refused(f"{what} hold {refused[0]}: refused{more}")
