"""Boot an IPMI server into the kernel under test with kexec.

The server first runs its installed system (powered on if needed). The image
and an initrd go to <remote_dir>/run.XXXXXX/boot: the initrd.img-<release>
next to the image if there is one, else krig's own initramfs for that kernel
(rigs/initramfs.py: its modules for the root disk, then `krig.mode=root`
mounts the server's root= and switch_roots to its init). The kernel's modules
go to /lib/modules/<release> on the server (never over a directory krig did
not put there). `kexec -l` (kexec_load) or `kexec -s` (kexec_file_load, the
only one a kernel locked down by Secure Boot allows) loads them with the
command line (`cmdline = "reuse"` keeps the running one), the exec command
(`systemctl kexec` where systemd runs: an orderly shutdown first; `kexec -e`
otherwise) jumps into it, and the rig waits for SSH to answer with a new boot_id.
Between the runs of one workflow the server stays up: the next run kexecs from the
previous run's kernel when it is healthy, else it goes through a power cycle first
(rigs/ipmi/warm.py).
"""
import pathlib
import shlex
import subprocess

from krig import progress
from krig.errors import RigError, UsageError
from krig.safeio import printable
from rigs import initramfs
from rigs.ipmi.ssh import SshLost, remote_command
from rigs.protocol import ReachCheck
from rigs.ipmi.state import ServerState
from rigs.ipmi.warm import INSTALLED, begin, keep_installed, warm_words

# What krig's initramfs loads before it mounts the server's root (each if the
# kernel has it; built-in ones are skipped).
ROOT_MODULES = ["virtio_pci", "virtio_blk", "nvme", "ahci", "sd_mod", "ext4", "xfs"]
MODULES_MARK = ".installed-by-krig"
SYSCALLS = ("auto", "kexec_load", "kexec_file_load")
# the limits of a kexec boot's steps over SSH (the copies: the rig's pull_timeout; SSH: boot_timeout)
FACTS_TIMEOUT, LOAD_TIMEOUT, JUMP_TIMEOUT = 60, 120, 30


def boot_bound(spec, timeout: float | None = None) -> float:
    """The most a kexec boot's steps may take, each at its limit: SSH in the system to kexec from
    (after a power on or cycle), the kernel's and its modules' copies, the facts read, the load,
    the jump, SSH in the new kernel. The boot's progress line says it as its "at most"."""
    return 2 * (timeout or spec.boot_timeout) + 2 * spec.pull_timeout + FACTS_TIMEOUT + LOAD_TIMEOUT + JUMP_TIMEOUT


def initrd_for(rig, kernel) -> tuple[pathlib.Path | None, list]:
    """(initrd to load, words to append to the command line for it)."""
    initrd = rig.spec.kexec.initrd
    if initrd == "none":
        return None, []
    if initrd == "auto":
        cand = pathlib.Path(kernel.image).parent / f"initrd.img-{kernel.release}"
        if cand.is_file():
            return cand, []
        return initramfs.build(kernel.release, kernel.modules_dir, ROOT_MODULES, optional=True), ["krig.mode=root"]
    p = pathlib.Path(initrd).expanduser()
    if not p.is_file():
        raise UsageError(f"{rig.where}.kexec.initrd: {p} does not exist")
    return p, []


def syscall_for(setting: str, lockdown: str) -> str:
    """kexec_load or kexec_file_load: a kernel in lockdown (/sys/kernel/security/lockdown
    showing [integrity] or [confidentiality]) refuses kexec_load."""
    if setting != "auto":
        return setting
    mode = lockdown[lockdown.find("[") + 1:lockdown.find("]")] if "[" in lockdown else "none"
    return "kexec_load" if mode == "none" else "kexec_file_load"


def relocatable(kernel) -> bool:
    """False only when the kernel's .config says CONFIG_RELOCATABLE is not set: the kernel's
    kexec_file_load refuses such a bzImage (kexec_load can still place it at its fixed address)."""
    cfg = pathlib.Path(kernel.config) if getattr(kernel, "config", None) else None
    try:
        return "# CONFIG_RELOCATABLE is not set" not in cfg.read_text().splitlines() if cfg else True
    except OSError:
        return True


def kexec_args(rig, kernel, cmdline: list, image: str, initrd: str | None, syscall: str = "kexec_load",
               reused: str | None = None) -> list:
    """reused: the installed system's command line, given to a kexec from another kernel under
    test (`cmdline = "reuse"` would take that kernel's own, krig's words included, again)."""
    k = rig.spec.kexec
    extra = [*kernel.cmdline, *cmdline, *k.append]
    argv = ["kexec", "-s" if syscall == "kexec_file_load" else "-l", image]
    if initrd:
        argv.append(f"--initrd={initrd}")
    if k.cmdline == "reuse" and reused is not None:
        argv.append("--command-line=" + " ".join([reused, *extra]).strip())
    elif k.cmdline == "reuse":
        argv.append("--reuse-cmdline")
        if extra:
            argv.append("--append=" + " ".join(extra))
    else:
        argv.append("--command-line=" + " ".join([k.cmdline, *extra]).strip())
    return argv


# The server's firmware and model as its installed system sees them (DMI): the kernel under
# test may be built without DMI, so they are read before the kexec.
DMI = ("bios_vendor", "bios_version", "bios_date", "sys_vendor", "product_name")
FIRMWARE_FACTS = "; ".join(f"printf 'dmi.{f}=%s\\n' \"$(cat /sys/class/dmi/id/{f} 2>/dev/null)\"" for f in DMI)


def firmware_facts(text: str) -> dict:
    """FIRMWARE_FACTS' lines -> {"firmware": "vendor version (date)", "system": "vendor product"}."""
    d = {ln[4:].partition("=")[0]: ln.partition("=")[2].strip() for ln in text.splitlines() if ln.startswith("dmi.")}
    out = {}
    if d.get("bios_vendor") or d.get("bios_version"):
        out["firmware"] = " ".join(x for x in (d.get("bios_vendor"), d.get("bios_version")) if x) + \
            (f" ({d['bios_date']})" if d.get("bios_date") else "")
    if d.get("sys_vendor") or d.get("product_name"):
        out["system"] = " ".join(x for x in (d.get("sys_vendor"), d.get("product_name")) if x)
    return out


def exec_command(rig, has_systemd: bool) -> list:
    cmd = rig.spec.kexec.exec_command
    if cmd:
        return list(cmd)
    return ["systemctl", "kexec"] if has_systemd else ["kexec", "-e"]


def _ship_modules(rig, kernel) -> str:
    """The kernel's modules to /lib/modules/<release> on the server; what was done, for the facts."""
    md = pathlib.Path(kernel.modules_dir) if kernel.modules_dir else None
    if md is None or not md.is_dir() or not any(md.rglob("*.ko*")):
        return "none (all built in)"
    if md.resolve() == pathlib.Path("/lib/modules", kernel.release).resolve():
        return "none (a packaged kernel: its package installs the modules on the server)"
    dest = shlex.quote(f"/lib/modules/{kernel.release}")
    mark = shlex.quote(MODULES_MARK)
    rc, out, _ = rig.ssh.run(f"if [ -d {dest} ] && [ ! -e {dest}/{mark} ]; then echo theirs; fi", timeout=60)
    if b"theirs" in out:
        return f"kept the server's own {dest} (not installed by krig)"
    producer = ["tar", "-C", str(md.parent), "-ch", "--exclude=build", "--exclude=source", md.name, "-f", "-"]
    try:
        rig.ssh.pipe_to(f"rm -rf {dest} && mkdir -p /lib/modules && tar -xf - -C /lib/modules "
                        f"--no-same-owner && touch {dest}/{mark} && depmod {shlex.quote(kernel.release)}",
                        producer, rig.spec.pull_timeout)
    except (SshLost, subprocess.TimeoutExpired) as e:
        raise RigError(f"rig {rig.name}: copying the modules of {kernel.release} to the server failed: "
                       f"{e or 'timeout'}") from None
    return f"copied to {dest}"


def kexec_boot(rig, power, kernel, cmdline: list, timeout: float, reach: ReachCheck | None = None) -> None:
    """rig: the IpmiServer (rigs/ipmi/rig.py) being booted; power: its power protocol; reach:
    asked once the server is up, before the kexec (rigs/protocol.py ReachCheck)."""
    rig.facts["booted_by"], warm = begin(rig, power, timeout)     # warm: from the previous run's kernel
    if reach is not None:        # a kernel lacking the server's NIC or disk drivers: refused now
        said = reach(rig, kernel, warm)
        if said:
            raise UsageError(f"rig {rig.name}: {said}; it was not kexec'd")
    rig.check_programs(["kexec"])
    old = rig.boot_id
    image = pathlib.Path(kernel.image)
    initrd, initrd_words = initrd_for(rig, kernel)
    bootdir = f"{rig.make_workdir()}/boot"
    files = [image] + ([initrd] if initrd else [])
    # tar with -h so symlinks (vmlinuz -> vmlinuz-x.y) arrive as files; flat names.
    producer = ["tar", "-ch"] + [a for f in files for a in ("-C", str(f.parent), f.name)] + ["-f", "-"]
    q = shlex.quote(bootdir)
    try:
        with progress.waiting(f"the kernel {kernel.release} to copy to the server {rig.name}",
                              rig.spec.pull_timeout):
            rig.ssh.pipe_to(f"rm -rf {q} && mkdir -p {q} && tar -xf - -C {q}", producer, rig.spec.pull_timeout)
    except (SshLost, subprocess.TimeoutExpired) as e:
        raise RigError(f"rig {rig.name}: copying the kernel to the server failed: {e or 'timeout'}") from None
    rig.facts["kexec_modules"] = _ship_modules(rig, kernel)
    rc, out, _ = rig.ssh.run("cat /sys/kernel/security/lockdown 2>/dev/null; " + INSTALLED +
                             "; [ -d /run/systemd/system ] && echo systemd=yes; " + FIRMWARE_FACTS,
                             timeout=FACTS_TIMEOUT)
    text = out.decode(errors="replace")
    # from the kernel of the previous run (warm), the installed system's: its DMI, command line, ACPI
    rig.keep_firmware(firmware_facts(text) or (rig.firmware if warm else {}))
    keep_installed(rig, text, warm)
    lockdown = next((ln for ln in text.splitlines() if "[" in ln and "=" not in ln), "")
    syscall = syscall_for(rig.spec.kexec.syscall, lockdown)
    rig.facts["kexec_syscall"] = syscall + (f" (lockdown: {lockdown.strip()})" if lockdown else "")
    if syscall == "kexec_file_load" and not relocatable(kernel):
        raise RigError(f"rig {rig.name}: kernel {kernel.release} is not relocatable (CONFIG_RELOCATABLE is not "
                       f"set): kexec_file_load (`kexec -s`) cannot load it; build it with CONFIG_RELOCATABLE=y "
                       f"or use kexec.syscall = \"kexec_load\" (docs/lab-server.md)")
    argv = kexec_args(rig, kernel, [*cmdline, *initrd_words, *(warm_words(rig) if warm else [])],
                      f"{bootdir}/{image.name}", f"{bootdir}/{initrd.name}" if initrd else None, syscall,
                      rig.installed_cmdline if warm else None)
    rig.facts["kexec"] = argv
    with progress.waiting(f"kexec to load the kernel {kernel.release} on the server {rig.name}", LOAD_TIMEOUT):
        rc, _, err = rig.ssh_call("loading the kernel with kexec", remote_command(argv, None), LOAD_TIMEOUT)
    if rc != 0:
        msg = err.decode(errors="replace").strip().splitlines()
        why = printable(msg[-1], 300) if msg else f"exit {rc}"
        hint = ""
        if syscall == "kexec_file_load" and lockdown and "[none]" not in lockdown:
            hint = (f"; the server's kernel is locked down ({lockdown.strip()}): kexec_file_load takes only a "
                    "kernel signed by a key it trusts (docs/lab-server.md: Secure Boot)")
        raise RigError(f"rig {rig.name}: `{' '.join(argv[:2])}` failed on the server (exit {rc}): {why}{hint}")
    cmd = exec_command(rig, "systemd=yes" in text)
    rig.facts["kexec_exec"] = cmd
    jump = "nohup sh -c " + shlex.quote("sleep 1; " + remote_command(cmd, None)) + " >/dev/null 2>&1 &"
    try:
        rig.ssh.run(jump, timeout=JUMP_TIMEOUT)
    except (SshLost, subprocess.TimeoutExpired):
        pass                # the connection may die with the old kernel
    rig.ssh.stop_master()
    rig.become(ServerState.BOOTING)
    rig.wait_up(timeout, "after kexec", old_boot_id=old)
