"""Boot an IPMI server into the kernel under test with kexec.

The server first runs its installed system (powered on if needed); the image
(and initrd) are copied to <remote_dir>/run.XXXXXX/boot, `kexec -l` loads them with the
command line (`cmdline = "reuse"` keeps the running one), the exec command
(systemctl kexec by default: an orderly shutdown first) jumps into it, and
the rig waits for SSH to answer with a new boot_id.
"""
import pathlib
import shlex
import subprocess

from krig.errors import RigError, UsageError
from .ipmi_ssh import SshLost, remote_command


def initrd_for(rig, kernel) -> pathlib.Path | None:
    spec = rig.spec["kexec"]["initrd"]
    if spec == "none":
        return None
    if spec == "auto":
        cand = pathlib.Path(kernel.image).parent / f"initrd.img-{kernel.release}"
        return cand if cand.is_file() else None
    p = pathlib.Path(spec).expanduser()
    if not p.is_file():
        raise UsageError(f"{rig.where}.kexec.initrd: {p} does not exist")
    return p


def kexec_args(rig, kernel, cmdline: list, image: str, initrd: str | None) -> list:
    k = rig.spec["kexec"]
    extra = [*kernel.cmdline, *cmdline, *k["append"]]
    argv = ["kexec", "-l", image]
    if initrd:
        argv.append(f"--initrd={initrd}")
    if k["cmdline"] == "reuse":
        argv.append("--reuse-cmdline")
        if extra:
            argv.append("--append=" + " ".join(extra))
    else:
        argv.append("--command-line=" + " ".join([k["cmdline"], *extra]).strip())
    return argv


def kexec_boot(rig, power, kernel, cmdline: list, timeout: float) -> None:
    """rig: the IpmiServer (rigs/ipmi.py) being booted; power: its power protocol."""
    if rig.bmc.power_status() == "off":
        power.on()
        rig.wait_up(timeout, "into its installed system (before kexec)")
    else:
        bid = rig.ssh.probe(rig.spec["ssh"]["connect_timeout"])
        if bid is None:
            rig.power_cycle()
            rig.wait_up(timeout, "into its installed system (before kexec)")
        else:
            rig.boot_id, rig.state = bid, "up"
    old = rig.boot_id
    image = pathlib.Path(kernel.image)
    initrd = initrd_for(rig, kernel)
    bootdir = f"{rig.make_workdir()}/boot"
    files = [image] + ([initrd] if initrd else [])
    # tar with -h so symlinks (vmlinuz -> vmlinuz-x.y) arrive as files; flat names.
    producer = ["tar", "-ch"] + [a for f in files for a in ("-C", str(f.parent), f.name)] + ["-f", "-"]
    q = shlex.quote(bootdir)
    try:
        rig.ssh.pipe_to(f"rm -rf {q} && mkdir -p {q} && tar -xf - -C {q}", producer, rig.spec["pull_timeout"])
    except (SshLost, subprocess.TimeoutExpired) as e:
        raise RigError(f"rig {rig.name}: copying the kernel to the server failed: {e or 'timeout'}") from None
    argv = kexec_args(rig, kernel, cmdline, f"{bootdir}/{image.name}",
                      f"{bootdir}/{initrd.name}" if initrd else None)
    rig.facts["kexec"] = argv
    rc, _, err = rig.ssh_call("loading the kernel with kexec", remote_command(argv, None), 120)
    if rc != 0:
        raise RigError(f"rig {rig.name}: `kexec -l` failed on the server (exit {rc}): "
                       f"{err.decode(errors='replace').strip()[-300:]}")
    jump = "nohup sh -c " + shlex.quote("sleep 1; " + remote_command(rig.spec["kexec"]["exec_command"], None)) \
        + " >/dev/null 2>&1 &"
    try:
        rig.ssh.run(jump, timeout=30)
    except (SshLost, subprocess.TimeoutExpired):
        pass                # the connection may die with the old kernel
    rig.ssh.stop_master()
    rig.state = "unknown"
    rig.wait_up(timeout, "after kexec", old_boot_id=old)
