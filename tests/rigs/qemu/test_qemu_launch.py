"""QEMU opens nothing as root (rigs/qemu/launch.py): a real QEMU, started as the rig starts it,
has its unprivileged user from its exec on, so a root-only file named on its command line
(the rig file's filter bypassed) is refused to it by the kernel, while what krig hands it
(console, disk image, 9p share, all in a directory only root may enter) still works.

Covers: rigs/qemu/confine.py, rigs/qemu/launch.py."""
import json
import os
import pathlib
import pwd
import shutil
import subprocess
import tempfile
import time

import pytest

from krig.errors import RigError
from rigs.qemu import rig as qemu
from rigs.qemu import confine as qemu_confine
from rigs.qemu import launch as qemu_launch

BASE = [qemu.QEMU, "-machine", "q35", "-accel", "tcg", "-m", "128", "-display", "none", "-vga", "none",
        "-nodefaults", "-S", "-sandbox", qemu.SANDBOX]
# the user QEMU runs as: krig-qemu when the tests run as root
USER = qemu_confine.runas_user() or pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def secret():
    """A file only its owner may read (mode 0600 under root; 0000 otherwise, which its owner
    cannot read either), in a directory everyone may enter: only the file's mode guards it."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="krig-secret-"))
    d.chmod(0o755)
    f = d / "secret"
    f.write_bytes(b"KRIG-SECRET-" + os.urandom(8).hex().encode())
    f.chmod(0o600 if os.geteuid() == 0 else 0)
    yield f
    shutil.rmtree(d)


def _start(argv, extra=(), owned=()):
    p, guard, facts = qemu_launch.start(argv, extra, owned=owned, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True)
    return p, guard, facts


def _stop(p, guard):
    if p.poll() is None:
        p.kill()
    out, err = p.communicate(timeout=60)
    qemu_confine.end_guard(guard)
    return err.decode(errors="replace")


@pytest.mark.parametrize("extra", [
    lambda f: ["-device", json.dumps({"driver": "loader", "file": str(f), "addr": 4096})],
    lambda f: ["-device", f"loader,file={f},addr=0x1000"],
])
def test_a_root_only_file_named_to_qemu_is_refused_to_it(secret, extra):
    """The loader device copies a host file into guest memory. Named to QEMU directly (the
    rig file's filter bypassed), the 0600 root-only file cannot be opened: QEMU exits at once
    with "Permission denied" naming it. QEMU that opened its command line as root (-runas)
    would load it and keep running, stopped (-S), with the bytes in the guest's memory."""
    p, guard, facts = _start(BASE, extra(secret))
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        pass
    err = _stop(p, guard)
    assert p.returncode not in (None, 0, -9), (p.returncode, err)
    assert f"{secret}: Permission denied" in err, err
    assert "-runas" not in facts["qemu_started_as"]


def test_qemu_has_its_user_from_its_exec_and_cannot_be_read_by_its_kin(tmp_path, secret):
    """From the first moment the process is QEMU (its /proc cmdline), it has its user; when the
    tests run as root it is not dumpable (its real group is not its effective one), so another
    process of that same user (another run's QEMU) cannot open its descriptors through /proc.
    What krig hands over, in a directory only root may enter (console.log, a disk image, the
    9p share), QEMU opened: it runs, stopped (-S), and the share is its user's."""
    work = tmp_path / "work"
    (work / "share").mkdir(parents=True)
    work.chmod(0o700)
    (work / "disk.img").write_bytes(b"\0" * (1 << 20))
    argv = [*BASE, "-chardev", f"file,id=con,path={work / 'console.log'}", "-serial", "chardev:con",
            "-virtfs", f"local,path={work / 'share'},mount_tag=krig,security_model=mapped-xattr,multidevs=remap",
            "-drive", f"file={work / 'disk.img'},if=none,id=d0,format=raw,cache=unsafe",
            "-device", "nvme,drive=d0,serial=krig-test"]
    p, guard, facts = _start(argv, owned=[work / "share"])
    try:
        uid, status = None, ""
        for _ in range(1000):           # bounded: setpriv execs QEMU at once
            status = pathlib.Path(f"/proc/{p.pid}/status").read_text()
            if pathlib.Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"qemu-system"):
                uid = next(ln.split()[1:] for ln in status.splitlines() if ln.startswith("Uid:"))
                break
            time.sleep(0.005)
        want = pwd.getpwnam(USER).pw_uid
        assert uid == [str(want)] * 4, uid      # real, effective, saved, filesystem
        time.sleep(2)
        assert p.poll() is None, _stop(p, guard)       # it opened every file it was handed
        assert pwd.getpwuid((work / "share").stat().st_uid).pw_name == USER
        if os.geteuid() == 0:
            assert sorted(facts["qemu_files"].values()) == sorted(
                str(work / n) for n in ("console.log", "share", "disk.img"))
            gid = next(ln.split()[1:3] for ln in status.splitlines() if ln.startswith("Gid:"))
            assert gid[0] != gid[1], gid
            fds = sorted(os.listdir(f"/proc/{p.pid}/fd"))
            kin = subprocess.run(["setpriv", f"--reuid={want}", f"--regid={pwd.getpwnam(USER).pw_gid}",
                                  "--clear-groups", "--", "cat", f"/proc/{p.pid}/fd/{fds[-1]}"],
                                 capture_output=True, text=True, timeout=30)
            assert kin.returncode != 0 and "Permission denied" in kin.stderr, kin
    finally:
        _stop(p, guard)


def test_a_kernel_qemu_user_cannot_read_goes_as_a_sealed_copy(tmp_path, secret):
    """A file QEMU reads by name (the kernel, the initrd; a distribution may install its kernel
    0600) that its user may not read is handed over as a sealed in-memory copy, not as the
    file; a share root that user may not read is one line naming it, before QEMU starts."""
    secret.chmod(0o600)
    h = qemu_launch.Handover(qemu_confine.USER if os.geteuid() == 0 else "nobody")
    try:
        name = h.by_name(secret)
        assert h.files[name] == f"{secret} (a copy: mode 600)" and len(h.fds) == 1
        assert os.readlink(name).startswith("/memfd:") and pathlib.Path(name).read_bytes() == secret.read_bytes()
        with pytest.raises(OSError):
            pathlib.Path(name).write_bytes(b"changed")     # sealed
        (tmp_path / "closed").mkdir(mode=0o700)
        with pytest.raises(RigError) as e:
            h.by_name(tmp_path / "closed", directory=True)
        assert str(e.value).startswith(f"{tmp_path / 'closed'} is not readable by ") and "\n" not in str(e.value)
    finally:
        h.close()


def test_only_krigs_own_host_paths_are_handed_over(tmp_path):
    """The kernel, a 9p root, the console and a disk image become descriptors (the disk one
    read-write and one read-only, in one set; its host path as the set's opaque label); every
    other option, a rig file's extra_args among them, goes to QEMU as it is."""
    for name in ("vmlinuz", "disk.img", "console.log"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "vmlinuz").chmod(0o644)
    (tmp_path / "share").mkdir()
    h = qemu_launch.Handover("nobody")
    try:
        argv = h.rewrite([qemu.QEMU, "-nodefaults", "-kernel", tmp_path / "vmlinuz", "-name", "-kernel",
                          "-chardev", f"file,id=con,path={tmp_path / 'console.log'}",
                          "-virtfs", f"local,path={tmp_path / 'share'},mount_tag=krig,readonly=on",
                          "-drive", f"file={tmp_path / 'disk.img'},if=none,id=d0,format=raw"])
        k, c, s, d = h.fds[:4]
        assert argv == [qemu.QEMU, "-add-fd", f"fd={c},set={c},opaque={tmp_path / 'console.log'}",
                        "-add-fd", f"fd={d},set={d},opaque={tmp_path / 'disk.img'}",
                        "-add-fd", f"fd={h.fds[4]},set={d},opaque={tmp_path / 'disk.img'}",
                        "-nodefaults", "-kernel", f"/proc/self/fd/{k}", "-name", "-kernel",
                        "-chardev", f"file,id=con,path=/dev/fdset/{c}",
                        "-virtfs", f"local,path=/proc/self/fd/{s},mount_tag=krig,readonly=on",
                        "-drive", f"file=/dev/fdset/{d},if=none,id=d0,format=raw"]
        assert os.readlink(f"/proc/self/fd/{k}") == str(tmp_path / "vmlinuz")
        assert h.files[f"/dev/fdset/{d}"] == str(tmp_path / "disk.img")
        cmd = h.command(argv)
        assert cmd[cmd.index("--") + 1:] == argv and f"--reuid={pwd.getpwnam('nobody').pw_uid}" in cmd
    finally:
        h.close()
