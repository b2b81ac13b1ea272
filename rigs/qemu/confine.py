"""QEMU as an unprivileged user: when krig runs as root, the emulator does not.

A guest that escapes the emulator (9p and NVMe emulation are where QEMU's escapes have
been) has QEMU's user: `krig-qemu` when krig runs as root (a system user `make setup`
creates; `nobody` where it does not exist), krig's own user otherwise. The QEMU rig's
QEMU is exec'd as that user from its first instruction, its host files handed over as
descriptors (rigs/qemu/launch.py). A simulated lab server's QEMU runs as that server's
ipmi_sim, as `krig-lab` (rigs/labsim/user.py), never as `krig-qemu`.

QEMU ends up non-dumpable (its real and effective groups differ at exec), and the kernel
clears its parent-death signal (`setpriv --pdeathsig`, rigs/procs.py). A guard does that
job: a small process of krig's user in its own session that waits on pidfds of krig and
QEMU, SIGKILLs QEMU when krig goes first and exits when QEMU does.

This file runs as that guard too (`python -I qemu_confine.py fd WATCH QEMU`): the
standard library only.
"""
import os
import pathlib
import pwd
import select
import signal
import subprocess
import sys

USER = "krig-qemu"
FALLBACK_USER = "nobody"


def runas_user() -> str | None:
    """The user QEMU runs as: None when krig is not root (QEMU then runs as krig's user)."""
    if os.geteuid() != 0:
        return None
    for name in (USER, FALLBACK_USER):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    from krig.errors import RigError
    raise RigError(f"neither {USER} nor {FALLBACK_USER} exists for QEMU to run as; run `make setup`")


def give(owned, who: str) -> None:
    """Each path of `owned` (a directory with everything below it, links not followed) made
    the user `who`'s."""
    pw = pwd.getpwnam(who)
    for top in owned:
        _chown_tree(pathlib.Path(top), pw.pw_uid, pw.pw_gid)


def _chown_tree(top: pathlib.Path, uid: int, gid: int) -> None:
    os.chown(top, uid, gid, follow_symlinks=False)
    if top.is_symlink() or not top.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def process_user(pid: int) -> str | None:
    """The user a running process runs as (its effective uid, by name), None when it is gone."""
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    uid = int(next(ln.split()[2] for ln in status.splitlines() if ln.startswith("Uid:")))
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def start_guard(qemu: subprocess.Popen) -> subprocess.Popen | None:
    """The guard that SIGKILLs QEMU (krig's child `qemu`) if krig dies first; None when QEMU
    keeps krig's user (its parent-death signal then holds)."""
    if runas_user() is None:
        return None
    fds = (os.pidfd_open(os.getpid()), os.pidfd_open(qemu.pid))
    try:
        return subprocess.Popen([sys.executable, "-I", __file__, "fd", *map(str, fds)], pass_fds=fds,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    finally:
        for fd in fds:
            os.close(fd)


def end_guard(guard: subprocess.Popen | None) -> None:
    """Reap the guard once QEMU is gone (it exits by itself then)."""
    if guard is None:
        return
    try:
        guard.wait(10)
    except subprocess.TimeoutExpired:
        guard.kill()
        guard.wait()


def _guard(watch_fd: int, qemu_fd: int) -> None:
    poll = select.poll()
    poll.register(watch_fd, select.POLLIN)
    poll.register(qemu_fd, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poll.poll()}
        if qemu_fd in ready:
            return
        if watch_fd in ready:
            try:
                signal.pidfd_send_signal(qemu_fd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return


def main(args: list) -> int:
    if len(args) != 3 or args[0] != "fd" or not all(a.isdigit() for a in args[1:]):
        print("usage: qemu_confine.py fd WATCH QEMU", file=sys.stderr)
        return 2
    _guard(*(int(a) for a in args[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
