"""QEMU of the QEMU rig, unprivileged from its first instruction: it opens no host file as root.

When krig runs as root, QEMU is exec'd already as its own user (rigs/qemu/confine.py
runas_user, `krig-qemu`): `setpriv` sets the user and groups, then execs QEMU. So whatever
its command line names, a rig file's extra_args included, QEMU opens with that user's
rights, never root's (`-runas` would change the user only after QEMU had opened, as root,
everything its command line names). What the guest needs of the host krig opens itself
and hands over as descriptors, so krig's cache under /root (0700) is never traversed:
- the kernel and the initrd QEMU reads by name, and the roots of its 9p shares:
  /proc/self/fd/N (a reopen of krig's descriptor: the file or directory must be readable by
  QEMU's user; the writable share is made that user's; a kernel or initrd it may not read,
  mode 0600, goes as a sealed in-memory copy);
- console.log and the disk images it writes: `-add-fd fd=N,set=N,opaque=PATH` and /dev/fdset/N (QEMU
  dups krig's descriptor: the files stay krig's, mode and owner).
QEMU's real group (65534) is not its effective one (its user's group): the kernel makes a
process whose real and effective ids differ non-dumpable at exec, as it does a process that
changed its user, so another run's QEMU (the same user) can neither trace it nor open its
descriptors through /proc. That exec also clears the parent-death signal, so the guard
(qemu_confine.start_guard) kills QEMU when krig dies. Its one supplementary group is
/dev/kvm's, when that group may open it (KVM); none otherwise.
krig not root: QEMU runs as krig's user, its command line as given.
"""
import fcntl
import os
import pathlib
import pwd
import shutil
import stat
import subprocess

from krig.errors import RigError, os_fault
from rigs.qemu import args as qemu_args
from rigs.qemu import confine as qemu_confine
from krig.paths import SETPRIV, dies_with_parent

NONDUMP_GID = 65534
KVM = pathlib.Path("/dev/kvm")
# krig's own QEMU options without a value (every other one of its options takes one)
FLAGS = ("-nodefaults", "-no-reboot", "-S", "-nographic", "-no-user-config")


class Handover:
    """The host files one QEMU gets as descriptors krig opened, and the names its argv gives them."""

    def __init__(self, user: str):
        self.pw = pwd.getpwnam(user)
        self.fds: list[int] = []
        self.add_fd: list[str] = []
        self.files: dict[str, str] = {}     # the name in QEMU's argv -> the host path

    def _open(self, path, flags: int) -> int:
        try:
            fd = os.open(path, flags | os.O_CLOEXEC)
        except OSError as e:
            raise RigError(f"cannot open {path} for QEMU: {os_fault(e)}") from None
        self.fds.append(fd)
        return fd

    def by_name(self, path, directory: bool = False) -> str:
        """A file (or directory) QEMU opens by name: /proc/self/fd/N, which QEMU's user reopens.
        A file that user may not read (a kernel image of mode 0600) is handed over as a sealed
        in-memory copy: its bytes go to the guest anyway. A directory it may not read is refused."""
        fd = self._open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
        st, need = os.fstat(fd), (stat.S_IROTH | stat.S_IXOTH) if directory else stat.S_IROTH
        name, shown = f"/proc/self/fd/{fd}", str(path)
        if st.st_uid != self.pw.pw_uid and st.st_mode & need != need:
            if directory:
                raise RigError(f"{path} is not readable by {self.pw.pw_name}, the user QEMU runs as "
                               f"(mode {stat.S_IMODE(st.st_mode):o}); make it readable by all")
            name, shown = f"/proc/self/fd/{self._copy(fd, path)}", f"{path} (a copy: mode {stat.S_IMODE(st.st_mode):o})"
            self.fds.remove(fd)         # QEMU gets the copy, not the file
            os.close(fd)
        self.files[name] = shown
        return name

    def _copy(self, src: int, path) -> int:
        fd = os.memfd_create(pathlib.Path(path).name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        self.fds.append(fd)
        with open(src, "rb", closefd=False) as f_in, open(fd, "wb", closefd=False) as f_out:
            shutil.copyfileobj(f_in, f_out, 1 << 20)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK
                    | fcntl.F_SEAL_SEAL)
        return fd

    def fdset(self, path, *flags: int) -> str:
        """A file QEMU writes: /dev/fdset/N, a set of krig's descriptors (one per flags)."""
        fds = [self._open(path, f) for f in flags]
        for fd in fds:              # opaque: the host path, for query-fdsets and ps
            self.add_fd += ["-add-fd", qemu_args.join_opts([("fd", str(fd)), ("set", str(fds[0])),
                                                            ("opaque", str(path))])]
        self.files[f"/dev/fdset/{fds[0]}"] = str(path)
        return f"/dev/fdset/{fds[0]}"

    def rewrite(self, argv: list) -> list:
        """krig's own QEMU argv with each host path it names replaced by a handed-over one."""
        args, i = [str(a) for a in argv], 1
        while i < len(args) - 1:
            opt, value = args[i], args[i + 1]
            if opt in FLAGS:
                i += 1
                continue
            if opt in ("-kernel", "-initrd"):
                args[i + 1] = self.by_name(value)
            elif opt == "-virtfs":
                args[i + 1] = _swap(value, "path", lambda p: self.by_name(p, directory=True))
            elif opt == "-chardev" and value.startswith("file,"):
                args[i + 1] = _swap(value, "path", lambda p: self.fdset(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
            elif opt == "-drive":
                args[i + 1] = _swap(value, "file", lambda p: self.fdset(p, os.O_RDWR, os.O_RDONLY))
            i += 2
        return [args[0], *self.add_fd, *args[1:]]

    def command(self, argv: list) -> list:
        """setpriv, then QEMU: its user, a real group that is not its effective one, no
        supplementary group but /dev/kvm's, no new privileges."""
        other = NONDUMP_GID if self.pw.pw_gid != NONDUMP_GID else NONDUMP_GID - 1
        kvm = kvm_group()
        return [SETPRIV, f"--reuid={self.pw.pw_uid}", f"--egid={self.pw.pw_gid}", f"--rgid={other}",
                f"--groups={kvm}" if kvm else "--clear-groups", "--no-new-privs", "--", *argv]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _swap(value: str, key: str, hand) -> str:
    return qemu_args.join_opts([(k, hand(v) if k == key else v) for k, v in qemu_args.split_opts(value)])


def kvm_group() -> int | None:
    """/dev/kvm's group when that group may read and write it (and it is not root's)."""
    try:
        st = KVM.stat()
    except OSError:
        return None
    return st.st_gid if st.st_gid != 0 and st.st_mode & 0o060 == 0o060 else None


def start(argv: list, extra=(), owned=(), **popen) -> tuple[subprocess.Popen, subprocess.Popen | None, dict]:
    """Start QEMU: argv is krig's own (argv[0] the emulator; the host files it names are handed
    over when krig is root), extra the rig file's options, passed as they are; each path of
    `owned` is made QEMU's user's. Returns QEMU, its guard (None when QEMU has krig's user)
    and facts: qemu_argv (with the host paths), qemu_started_as (the command exec'd) and
    qemu_files (the host file behind each handed-over name)."""
    user = qemu_confine.runas_user()
    qemu_argv = [*map(str, argv), *extra]
    facts: dict[str, object] = {"qemu_argv": qemu_argv, "qemu_files": {}}
    if user is None:
        started_as = facts["qemu_started_as"] = dies_with_parent(qemu_argv)
        return subprocess.Popen(started_as, **popen), None, facts
    qemu_confine.give(owned, user)
    h = Handover(user)
    try:
        started_as = facts["qemu_started_as"] = h.command(h.rewrite(argv) + list(extra))
        proc = subprocess.Popen(started_as, pass_fds=h.fds, **popen)
    finally:
        h.close()
    facts["qemu_files"] = h.files
    return proc, qemu_confine.start_guard(proc), facts
