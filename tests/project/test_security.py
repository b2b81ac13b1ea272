"""Security cases that need no guest: real sshd on 127.0.0.1, the real CLI, real setpriv.

(Case 1, the guest's root, is tests/rigs/qemu/test_guest_root.py; cases 2 and 6, the BMC
password in children's environments and a BMC that fails the power off, run
on ipmi_sim in tests/rigs/ipmi/test_ipmi.py.)
"""
import json
import os
import pwd
import signal
import subprocess
import sys
import time

import pytest

from conftest import KRIG, ROOT
from sshd_fixture import ipmi_rig, running_sshd
from rigs.ipmi.rig import IpmiRig
from rigs.ipmi.ssh import SshLost, remote_command
from rigs.ipmi.state import ServerState


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """The host's own sshd on 127.0.0.1 with keys made here (tests/sshd_fixture.py)."""
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def _rig(sshd, remote_dir: str) -> IpmiRig:
    return ipmi_rig(sshd, remote_dir)


def test_remote_dir_refused_unless_safe(sshd, tmp_path):
    """Case 4: a directory another user made, or one under a non-sticky world-writable
    directory, is refused; a safe one gets a fresh mktemp -d per boot, mode 0700."""
    planted = tmp_path / "planted"
    planted.mkdir()
    os.chown(planted, 65534, 65534)                 # made first by someone else (nobody)
    with pytest.raises(Exception, match=rf"remote_dir {planted} is not safe to use as root: "
                                        rf"{planted} is owned by uid 65534, not 0"):
        _rig(sshd, str(planted)).server.make_workdir()
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)                           # world-writable, no sticky bit
    with pytest.raises(Exception, match=rf"{open_dir} is writable by others"):
        _rig(sshd, str(open_dir / "krig")).server.make_workdir()
    rig = _rig(sshd, str(tmp_path / "safe" / "krig"))
    first, second = rig.server.make_workdir(), rig.server.make_workdir()
    assert first != second and first.startswith(f"{tmp_path}/safe/krig/run.")
    assert not os.path.exists(first)                # the older run.* was removed
    assert oct(os.stat(tmp_path / "safe" / "krig").st_mode & 0o777) == "0o700"
    assert oct(os.stat(second).st_mode & 0o777) == "0o700"


def test_exit_255_is_not_a_lost_connection(sshd, tmp_path):
    """Case 7: the workload's own exit 255 (even with ssh-like words on its stderr)
    comes back as 255; a connection that dies is SshLost."""
    rig = _rig(sshd, str(tmp_path / "rd"))
    rig.server.workdir = tmp_path
    rig.server.become(ServerState.UP)
    rig.server.make_workdir()
    res = rig.command.run(["sh", "-c", "echo 'Connection reset by peer' >&2; echo out; exit 255"], timeout=60)
    assert res.returncode == 255 and res.stdout == b"out\n"
    assert b"Connection reset" in res.stderr
    assert "255 is the command's own exit code" in (sshd["dir"] / "ssh.log").read_text()
    # Now a real loss: the server side of the connection is killed under a running command.
    rc_file = f"{rig.server.wd}/rc.lost"
    marker = f"sleep 61.{os.getpid()}"
    remote = remote_command(["sh", "-c", marker], None, rc_file=rc_file)
    killer = subprocess.Popen([sys.executable, "-c", f"""
import subprocess, time, os, signal
for _ in range(100):
    out = subprocess.run(["pgrep", "-f", "^{marker}$"], capture_output=True, text=True).stdout.split()
    if out:
        ppid = int(open(f"/proc/{{out[0]}}/stat").read().split(")")[1].split()[1])
        while "sshd" not in open(f"/proc/{{ppid}}/cmdline").read():
            ppid = int(open(f"/proc/{{ppid}}/stat").read().split(")")[1].split()[1])
        os.kill(ppid, signal.SIGKILL); os.kill(int(out[0]), signal.SIGKILL); break
    time.sleep(0.1)
"""])
    try:
        with pytest.raises(SshLost):
            rig.ssh.run(remote, timeout=60, rc_file=rc_file)
    finally:
        killer.wait(30)


def test_children_die_with_krig_without_preexec_fn(tmp_path):
    """Case 8: no preexec_fn anywhere; a child started from a thread (as the SOL
    watcher does) through rigs.procs dies when its krig process is SIGKILLed."""
    hits = subprocess.run(["grep", "-rn", "preexec_fn", "krig", "rigs", "analysis"], cwd=ROOT,
                          capture_output=True, text=True).stdout
    assert [h for h in hits.splitlines() if "procs.py" not in h] == []
    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", f"""
import subprocess, threading, time, pathlib
from krig.paths import dies_with_parent
def start():
    p = subprocess.Popen(dies_with_parent(["sleep", "300"]), start_new_session=True)
    pathlib.Path({str(pidfile)!r}).write_text(str(p.pid))
    time.sleep(600)
threading.Thread(target=start, daemon=True).start()
time.sleep(600)
"""], cwd=ROOT)
    try:
        for _ in range(100):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.1)
        child = int(pidfile.read_text())
        for _ in range(50):         # setpriv has exec'd into sleep
            if open(f"/proc/{child}/cmdline").read().startswith("sleep"):
                break
            time.sleep(0.1)
        _gone_after_its_parent(parent, child, "the child", 50)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_qemu_runs_as_its_own_user_and_dies_with_krig(tmp_path):
    """QEMU as the rig starts it (rigs/qemu/launch.py): when the tests run as root, it is its own
    unprivileged user from its exec on, under the rig's seccomp filter (set*id calls still
    denied: it never changes user itself), the share it writes is that user's, and, its
    parent-death signal gone with its non-dumpable exec, the guard kills it when its krig
    process is SIGKILLed. A real QEMU without a guest (-machine none)."""
    from rigs.qemu import confine as qemu_confine
    want = qemu_confine.runas_user() or pwd.getpwuid(os.geteuid()).pw_name
    share, pidfile = tmp_path / "share", tmp_path / "qemu.pid"
    (share / "out").mkdir(parents=True)
    parent = subprocess.Popen([sys.executable, "-c", f"""
import pathlib, subprocess, time
from rigs.qemu import rig as qemu
from rigs.qemu import launch as qemu_launch
p, guard, facts = qemu_launch.start([qemu.QEMU, "-machine", "none", "-display", "none", "-nodefaults",
                                     "-sandbox", qemu.SANDBOX], owned=[{str(share)!r}],
                                    stdin=subprocess.DEVNULL, start_new_session=True)
assert "elevateprivileges=deny" in " ".join(facts["qemu_started_as"])
pathlib.Path({str(pidfile)!r}).write_text(str(p.pid))
time.sleep(600)
"""], cwd=ROOT)
    qemu = None
    try:
        for _ in range(300):
            if pidfile.exists() and pidfile.read_text():
                qemu = int(pidfile.read_text())
                if open(f"/proc/{qemu}/cmdline").read().startswith("qemu-system"):
                    break
            time.sleep(0.1)
        assert qemu and qemu_confine.process_user(qemu) == want != "root", (qemu, want)
        assert open(f"/proc/{qemu}/cmdline").read().startswith("qemu-system")
        assert pwd.getpwuid((share / "out").stat().st_uid).pw_name == want
        _gone_after_its_parent(parent, qemu, "QEMU", 100)
    finally:
        if parent.poll() is None:
            parent.kill()


def _krig(*args, env=None):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("extra,refused", [(["-virtfs", "local,path=/,mount_tag=x"], "-virtfs is not allowed"),
                                           (["-drive", "file=/etc/shadow"], "-drive is not allowed"),
                                           (["-device", "vfio-pci,host=01:00.0"], "-device vfio-pci is not allowed"),
                                           (["-netdev", "user,id=n"], "-netdev is not allowed"),
                                           # -machine properties that read or write a host file
                                           (["-machine", "q35,initrd=/etc/shadow"], "initrd= is not allowed"),
                                           (["-machine", "kernel=/etc/shadow"], "kernel= is not allowed"),
                                           (["-machine", "q35,dumpdtb=/etc/passwd"], "dumpdtb= is not allowed"),
                                           (["-machine", "pc,firmware=/root/x"], "firmware= is not allowed"),
                                           (["-machine", "q35,dtb=/root/x"], "dtb= is not allowed"),
                                           (["-global", "guest-loader.kernel=/etc/shadow"], "kernel= is not allowed"),
                                           (["-device", "guest-loader,initrd=/etc/shadow"],
                                            "-device guest-loader is not allowed"),
                                           (["-global", "fw_cfg.bios=/etc/shadow"], "bios= is not allowed")])
def test_qemu_extra_args_allow_list(tmp_path, extra, refused):
    """Case 3 (QEMU): extra_args outside the allow-list, or a property naming a host file: exit 2,
    one line naming the option."""
    rig = tmp_path / "q.toml"
    rig.write_text(f'driver = "qemu"\nextra_args = {json.dumps(extra)}\n')
    p = _krig("run", "selftest-pass", "--rig", str(rig))
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and refused in lines[0] and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("option", ["SendEnv=KRIG_*", "ForwardAgent=yes", "PKCS11Provider=/tmp/p.so",
                                    "LocalForward=8080 127.0.0.1:80", "DynamicForward=1080",
                                    "ProxyCommand=sh -c x", "StrictHostKeyChecking=no"])
def test_ssh_options_allow_list(sshd, tmp_path, option):
    """Case 3 (ssh): options outside the allow-list: exit 2, one line naming the option.
    (An allowed one, Compression=no, is used against the real sshd by the tests above.)"""
    d = sshd["dir"]
    rig = tmp_path / "lab.toml"
    rig.write_text(f'driver = "ipmi"\n[bmc]\nhost = "127.0.0.1"\nuser = "u"\npassword_file = "{d}/bmc-password"\n'
                   f'[ssh]\nhost = "127.0.0.1"\nkey = "{d}/client_key"\nknown_hosts = "{d}/known_hosts"\n'
                   f'options = [{json.dumps(option)}]\n')
    p = _krig("run", "selftest-pass", "--rig", str(rig))
    assert p.returncode == 2, p.stdout + p.stderr
    name = option.split("=")[0]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"ssh.options: {name} is not allowed; allowed: " in lines[0], p.stderr


@pytest.mark.parametrize("name", ["../..", "/etc", "selftest-pass/../../x", "", 7])
def test_check_refuses_a_path_as_reproducer(tmp_path, name):
    """Case 5: a manifest's reproducer is a name, never a path: exit 2, one line, nothing imported."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"reproducer": name, "outcome": "completed"}))
    evil = tmp_path / "analyze.py"              # what "../.." would have reached
    evil.write_text(f"open({str(tmp_path / 'pwned')!r}, 'w').write('x')\ndef metrics(run): return {{}}\n")
    p = _krig("check", str(run_dir))
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "field reproducer" in lines[0] and "not a reproducer name" in lines[0], p.stderr
    assert not (tmp_path / "pwned").exists()
    assert not (run_dir / "verdict.json").exists()


def _gone_after_its_parent(parent, pid: int, what: str, tries: int) -> None:
    """SIGKILL `parent`, then `pid` must end (gone or a zombie) within `tries` tenths of a second."""
    parent.kill()
    parent.wait(10)
    for _ in range(tries):
        try:
            state = open(f"/proc/{pid}/stat").read().split(")")[1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"{what} outlived its parent")
