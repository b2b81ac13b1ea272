"""A simulated lab server that boots like a real one, behind ipmi_sim, all on 127.0.0.1.

The BMC side is tests/ipmi_fixture.py's (ipmi_sim with an external BMC + KCS,
SOL through SerialCable, "power diag" = NMI). The server is different: UEFI
firmware (OVMF, its own variable store) boots GRUB from the server's own disk
(tests/labsim_image.py: Debian 12 with systemd, sshd, sudo, kexec-tools,
xfsprogs, trace-cmd, fio), never -kernel. Its disk is a qcow2 overlay on the
cached image, made once per server: what the server writes survives power
cycles, as on a real disk. krig logs in as the non-root user `krig` (sudo
without a password) and checks the image's own host key. The scratch disk is
an emulated NVMe (/dev/nvme0n1); the root disk is virtio-blk (/dev/vda).
The server's kernel runs with panic=0: after a panic only krig's power cycle
through the BMC brings it back.
"""
import pathlib
import shutil
import subprocess

from ipmi_fixture import SimServer
import labsim_image
from rigs import qemu_confine

MEMORY_MB = 2048


class LabServer(SimServer):
    USER = "krig"

    def __init__(self, base: pathlib.Path, image_dir: pathlib.Path, memory_mb: int = MEMORY_MB,
                 scratch_bytes: int = 16 << 30):
        super().__init__(base, kernel=None, initrd=None, memory_mb=memory_mb, scratch_bytes=scratch_bytes)
        self.image_dir = image_dir

    def _keys(self):
        b = self.base
        shutil.copy(self.image_dir / "client_key", b / "client_key")
        (b / "client_key").chmod(0o600)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "krig-test-other",
                        "-f", str(b / "other_host_key")], check=True, timeout=60)
        host = f"[127.0.0.1]:{self.ssh_port}"
        good = (self.image_dir / "host_key.pub").read_text().split()[:2]
        bad = (b / "other_host_key.pub").read_text().split()[:2]
        (b / "known_hosts").write_text(f"{host} {' '.join(good)}\n")
        (b / "bad_known_hosts").write_text(f"{host} {' '.join(bad)}\n")
        pw = b / "bmc-password"
        pw.write_text(self.password + "\n")
        pw.chmod(0o600)
        # The server's own disk and firmware variables, kept across power cycles.
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
                        "-b", str(self.image_dir / "disk.qcow2"), str(b / "disk.qcow2")], check=True, timeout=60)
        shutil.copy(labsim_image.OVMF_VARS, b / "OVMF_VARS.fd")

    def _vm_argv(self) -> list:
        b = self.base
        return ["setpriv", "--pdeathsig", "KILL", *qemu_confine.confine([
                "qemu-system-x86_64", "-name", "krig-labsim-server",
                "-machine", "q35", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", str(self.memory_mb),
                "-display", "none", "-vga", "none", "-nodefaults", "-pidfile", f"{b}/qemu.pid",
                "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={labsim_image.OVMF_CODE}",
                "-drive", f"if=pflash,format=raw,unit=1,file={b}/OVMF_VARS.fd",
                "-chardev", f"socket,id=ipmi0,host=127.0.0.1,port={self.kcs_port},reconnect=2",
                "-device", "ipmi-bmc-extern,id=bmc0,chardev=ipmi0", "-device", "isa-ipmi-kcs,bmc=bmc0",
                "-chardev", f"socket,id=ser0,host=127.0.0.1,port={self.vm_serial_port},server=on,wait=on",
                "-serial", "chardev:ser0",
                "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
                "-device", "virtio-net-pci,netdev=n0,romfile=",
                "-drive", f"file={b}/disk.qcow2,if=none,id=disk0,format=qcow2",
                "-device", "virtio-blk-pci,drive=disk0,bootindex=0",
                "-drive", f"file={b}/scratch.img,if=none,id=nvme0,format=raw,cache=unsafe",
                "-device", "nvme,drive=nvme0,serial=krig-scratch"])]

    def rig_file(self, name: str, bmc: dict | None = None, ssh: dict | None = None, **top) -> pathlib.Path:
        top = {"remote_dir": "/var/lib/krig", "shutdown_command": ["systemctl", "poweroff"],
               "boot_timeout": 900, "hang_timeout": 60, "nmi_wait": 20, "shutdown_timeout": 120, **top}
        return super().rig_file(name, bmc=bmc, ssh={"user": self.USER, **(ssh or {})}, **top)

    def ssh(self, *remote: str, known_hosts: str = "known_hosts", timeout: float = 60) -> subprocess.CompletedProcess:
        """A command on the server as krig (through sudo when it needs root), outside any run."""
        b = self.base
        return subprocess.run(["ssh", "-F", "none", "-p", str(self.ssh_port), "-l", self.USER,
                               "-i", str(b / "client_key"), "-o", "BatchMode=yes",
                               "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={b / known_hosts}",
                               "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
                               "127.0.0.1", *remote], capture_output=True, text=True, timeout=timeout)
