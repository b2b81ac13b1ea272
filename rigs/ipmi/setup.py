"""What krig checks and prepares on a lab server once it answers SSH, before any
reproducer runs: every program krig and the reproducer need (a missing one is one
line naming its Debian package, docs/lab-server.md), sudo without a password for
a non-root user, a fresh work directory no other user can plant, the NMI panic
sysctls and the scratch disk. One SSH round trip after each boot.
"""
import shlex
from collections.abc import Callable

from typing import Any

from krig.errors import RigError
from krig.safeio import printable
from rigs.ipmi.spec import ServerSpec


# Programs krig itself runs on a server (the harness, the setup round trip), and the
# Debian package of each program a server may lack (docs/lab-server.md).
SERVER_PROGRAMS = ["bash", "tar", "awk", "sysctl", "blockdev", "mktemp", "timeout", "/usr/bin/time"]
PACKAGES = {"bash": "bash", "tar": "tar", "awk": "mawk", "sysctl": "procps", "blockdev": "util-linux",
            "timeout": "coreutils", "/usr/bin/time": "time",
            "mktemp": "coreutils", "mkfs.xfs": "xfsprogs", "xfs_info": "xfsprogs", "xfs_io": "xfsprogs",
            "mkfs.ext4": "e2fsprogs", "trace-cmd": "trace-cmd", "fio": "fio", "kexec": "kexec-tools",
            "systemctl": "systemd", "modprobe": "kmod", "insmod": "kmod", "sudo": "sudo"}


def workdir_script(remote_dir: str) -> str:
    """Shell: make remote_dir (0700) if missing, refuse it unless it and every directory
    above it are safe from other users (owned by root or us, no group/other write
    unless sticky, no symlinks), then remove older run.* dirs and print
    workdir=<a fresh mktemp -d> (or unsafe=<why>). Never a predictable path others can plant."""
    return ("( umask 077; rd=" + shlex.quote(remote_dir) + "; me=$(id -u); mkdir -p -- \"$rd\" || exit 1; "
            "p=$rd; bad=; while [ -z \"$bad\" ]; do "
            "if [ -L \"$p\" ]; then bad=\"$p is a symlink\"; break; fi; "
            "o=$(stat -c %u -- \"$p\"); m=$(stat -c %a -- \"$p\"); m=$((0$m)); "
            "if [ \"$p\" = \"$rd\" ]; then [ \"$o\" = \"$me\" ] || bad=\"$p is owned by uid $o, not $me\"; "
            "elif [ \"$o\" != 0 ] && [ \"$o\" != \"$me\" ]; then bad=\"$p is owned by uid $o\"; "
            "elif [ $((m & 022)) != 0 ] && [ $((m & 01000)) = 0 ]; then bad=\"$p is writable by others\"; fi; "
            "[ \"$p\" = / ] && break; p=$(dirname -- \"$p\"); done; "
            "if [ -n \"$bad\" ]; then echo \"unsafe=$bad\"; exit 0; fi; chmod 700 -- \"$rd\"; "
            "rm -rf -- \"$rd\"/run.*; w=$(mktemp -d -- \"$rd/run.XXXXXX\") && mkdir -- \"$w/home\" && "
            "echo \"workdir=$w\" )")


class ServerSetup:
    """The after-boot checks of IpmiServer (rigs/ipmi/server.py), which sets these in its __init__
    and provides ssh_call(); the checks set wd, boot_id and at_boot."""
    name: str
    spec: ServerSpec[Any]
    rd: str                         # the rig file's remote_dir
    needs: dict
    facts: dict
    wd: str | None
    boot_id: str | None
    at_boot: dict
    ssh_call: Callable[..., tuple[int, bytes, bytes]]

    def after_boot(self):
        """One round trip: boot_id, NMI panic sysctls, a fresh work dir, scratch disk checks."""
        dev = shlex.quote(self.spec.scratch_dev)
        script = [workdir_script(self.rd), "echo boot_id=$(cat /proc/sys/kernel/random/boot_id)",
                  "echo cmdline=$(cat /proc/cmdline)", "echo tainted=$(cat /proc/sys/kernel/tainted)",
                  "echo dmesg_lines=$(dmesg 2>/dev/null | wc -l)"]
        if self.spec.nmi_panic:
            script.append("sysctl -q -w kernel.unknown_nmi_panic=1 kernel.panic_on_io_nmi=1 "
                          "kernel.panic_on_unrecovered_nmi=1 >/dev/null 2>&1 && echo nmi_panic=set "
                          "|| echo nmi_panic=failed")
        if self.spec.scratch_dev:
            script.append(f"if [ -b {dev} ]; then echo scratch_size=$(blockdev --getsize64 {dev}); "
                          f"awk -v d={dev} 'index($1, d) == 1 {{print \"scratch_busy=\" $1 \" on \" $2}}' "
                          f"/proc/mounts /proc/swaps; else echo scratch_size=missing; fi")
        self.check_programs()
        rc, out, err = self.ssh_call("setting up the work directory", "set -e; " + "; ".join(script), 120)
        self.sudo_refused(err)
        kv = dict(ln.split("=", 1) for ln in out.decode(errors="replace").splitlines() if "=" in ln)
        self.take_workdir(rc, kv, err)
        self.boot_id = kv.get("boot_id", "").strip()
        # what the kernel said before the run: the health check after it looks at what came since
        self.at_boot = {k: int(v) for k, v in kv.items() if k in ("tainted", "dmesg_lines") and v.strip().isdigit()}
        self.facts.update({k: kv[k] for k in ("cmdline", "nmi_panic", "scratch_size") if k in kv})
        need, size = self.needs.get("scratch_size"), kv.get("scratch_size", "")
        if need and size == "missing":
            raise RigError(f"rig {self.name}: scratch_dev {self.spec.scratch_dev} is not a block device on the server")
        if need and size.isdigit() and int(size) < need:
            raise RigError(f"rig {self.name}: scratch_dev {self.spec.scratch_dev} has {int(size) >> 20} MiB; "
                           f"the reproducer needs {need >> 20} MiB")
        if "scratch_busy" in kv:
            raise RigError(f"rig {self.name}: scratch_dev {self.spec.scratch_dev} is in use on the server "
                           f"({kv['scratch_busy']}); refusing to use it as a scratch disk")

    def check_programs(self, extra: list | None = None):
        """Preflight on the server: every program krig and the reproducer will run is there.
        A missing one is one line naming its package; nothing has been started yet."""
        progs = list(dict.fromkeys([*SERVER_PROGRAMS, *self.needs.get("programs", []), *(extra or [])]))
        script = (f"m=; for p in {' '.join(shlex.quote(p) for p in progs)}; do "
                  "command -v \"$p\" >/dev/null 2>&1 || m=\"$m $p\"; done; echo \"missing=$m\"")
        rc, out, err = self.ssh_call("checking the programs on the server", script, 60)
        self.sudo_refused(err)
        missing = out.decode(errors="replace").partition("missing=")[2].split()
        if rc != 0 or not out.strip():
            raise RigError(f"rig {self.name}: cannot check the programs on the server (exit {rc}): "
                           f"{printable(err.decode(errors='replace').strip()[-200:], 200)}")
        if missing:
            what = ", ".join(f"{p} (package {PACKAGES.get(p, '?')})" for p in missing)
            raise RigError(f"rig {self.name}: the server lacks {what}; install it there "
                           f"(docs/lab-server.md lists what a server needs); nothing was run")
        self.facts["programs_checked"] = progs

    def sudo_refused(self, err: bytes):
        line = next((ln for ln in err.decode(errors="replace").splitlines() if ln.startswith("sudo:")), None)
        if line:
            u = self.spec.ssh.user
            raise RigError(f"rig {self.name}: `sudo -n` as {u} failed on the server ({printable(line)}); krig runs "
                           f"everything as root: give {u} sudo without a password (docs/lab-server.md)")

    def make_workdir(self) -> str:
        """A fresh work directory under remote_dir, checked safe (also for the kexec files)."""
        rc, out, err = self.ssh_call("making the work directory", workdir_script(self.rd), 60)
        return self.take_workdir(rc, dict(ln.split("=", 1) for ln in out.decode(errors="replace").splitlines()
                                           if "=" in ln), err)

    def take_workdir(self, rc: int, kv: dict, err: bytes) -> str:
        if "unsafe" in kv:
            raise RigError(f"rig {self.name}: remote_dir {self.rd} is not safe to use as "
                           f"{self.spec.ssh.user}: {kv['unsafe']}")
        wd = kv.get("workdir", "")
        if rc != 0 or not wd.startswith(self.rd + "/run."):
            raise RigError(f"rig {self.name}: cannot set up {self.rd} on the server: "
                           f"{printable(err.decode(errors='replace').strip()[-200:], 200)}")
        self.wd = wd
        return wd
