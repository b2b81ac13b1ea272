"""The simulated lab server behind a Redfish BMC: `krig lab sim up NAME --bmc redfish`.

The same server as the IPMI one (rigs/labsim/sim.py: UEFI firmware + GRUB booting Debian 12
from its own disk, rigs/labsim/image.py; an NVMe scratch disk; its network card virtio-net or
`--nic e1000e`/`e1000`, QEMU's user-mode network with SSH forwarded to 127.0.0.1 (a
-netdev/-device pair on the domain's QEMU command line: libvirt's user interface forwards no
port); panic=0), here a libvirt domain of libvirt's per-user session daemon, its BMC sushy-tools'
sushy-emulator with the libvirt driver, its serial line served by ser2net on a Unix socket
(the rig's `console = "unix:PATH"`; rigs/labsim/redfish.py). HTTPS with a self-signed
certificate made at `up`, pinned by its fingerprint in the generated rig file; the BMC
password in krig's secret store. The domain's files (its disk overlay on a hard link of the
cached image, firmware variables, scratch disk) and the daemons' configuration are in vm_dir
(krig's directory; the domain's files given to the lab user), the sockets in vm_dir/run (the
lab user's); the rest in base.
"""
import os
import pathlib
import secrets
import shutil
import subprocess

from krig.config import toml_document
from rigs.labsim import image as labsim_image
from rigs.labsim import owned
from krig.paths import process_record
from rigs.labsim.bmc import free_port
from rigs.labsim.redfish import (LibvirtSession, Ser2net, SushyEmulator, domain_xml, give, kill_leftovers,
                                 listen_local, make_cert, make_vm_dir, remove_vm_dir, write_htpasswd)

DOMAIN = "server"


class RedfishLabServer:
    USER = "krig"
    BMC = "redfish"

    def __init__(self, base: pathlib.Path, image_dir: pathlib.Path, memory_mb: int = 2048,
                 scratch_bytes: int = 16 << 30, name: str = "lab", nic: str = "virtio-net",
                 nic_device: str = "virtio-net-pci"):
        self.base, self.image_dir, self.memory_mb, self.scratch_bytes = base, image_dir, memory_mb, scratch_bytes
        self.name, self.nic, self.nic_device = name, nic, nic_device     # --nic, and QEMU's device of it
        self.password = "krig-rf-" + secrets.token_hex(8)
        self.listener = listen_local()              # the BMC's port, bound here, handed to sushy-emulator
        self.lan_port = self.listener.getsockname()[1]
        self.ssh_port = free_port()     # QEMU's forward binds it: whatever answers there must have the image's host key
        self.rigs = base / "rigs"
        self.logs = base / "logs"
        self.password_file = base / "bmc-password"
        self.vm_dir: pathlib.Path | None = None
        self.libvirt = self.emulator = self.ser2net = None
        self.fingerprint = ""
        self.parts: list[dict] = []     # process records of libvirtd, sushy-emulator and ser2net
        self.written: list[dict] = []   # the records of the rig file and password (owned.py)

    @property
    def proc(self):
        """The BMC's process: the supervisor stops the server when it ends."""
        return self.emulator.proc

    def _files(self):
        b, v = self.base, self.vm_dir
        labsim_image.client_files(b, self.image_dir, self.ssh_port)
        # the BMC password, mode 0600, bound to this BMC (rigs/ipmi/spec.py), a new file (owned.py:
        # never over one that is there)
        text = f"{self.password}\nbmc = 127.0.0.1:{self.lan_port}\n"
        self.written.append(owned.write_new(self.password_file, text.encode(), 0o600))
        try:            # the cached image, readable by the domain's user without entering root's home
            os.link(self.image_dir / "disk.qcow2", v / "base.qcow2")
        except OSError:
            shutil.copy(self.image_dir / "disk.qcow2", v / "base.qcow2")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", "base.qcow2",
                        str(v / "disk.qcow2")], check=True, timeout=60, cwd=v)
        shutil.copy(labsim_image.OVMF_VARS, v / "OVMF_VARS.fd")
        with open(v / "scratch.img", "wb") as f:
            f.truncate(self.scratch_bytes)      # sparse
        for f in ("disk.qcow2", "OVMF_VARS.fd", "scratch.img"):
            give(v / f)

    def domain(self) -> str:
        v = self.vm_dir
        assert v is not None, "made by start()"
        loader = (f"<loader readonly='yes' secure='no' type='pflash'>{labsim_image.OVMF_CODE}</loader>"
                  f"<nvram>{v / 'OVMF_VARS.fd'}</nvram>")
        return domain_xml(DOMAIN, self.memory_mb, v / "run" / "serial.sock", disks=[(v / "disk.qcow2", "qcow2", "vda")],
                          os_extra=loader, cpu="max", tb_cache_mib=labsim_image.TB_CACHE_MIB, qemu_args=[
                              "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
                              "-device", f"{self.nic_device},netdev=n0,romfile=,bus=pcie.0,addr=0x10",  # slots libvirt leaves free
                              "-drive", f"file={v / 'scratch.img'},if=none,id=nvme0,format=raw,cache=unsafe",
                              "-device", "nvme,drive=nvme0,serial=krig-scratch,bus=pcie.0,addr=0x11"])

    def start(self):
        self.rigs.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.vm_dir = make_vm_dir()
        self._files()
        v = self.vm_dir
        self.libvirt = LibvirtSession(v, self.logs)
        self.libvirt.start()
        self.parts.append(process_record(self.libvirt.proc.pid))
        self.libvirt.define(self.domain())
        cert, key, self.fingerprint = make_cert(v)
        self.emulator = SushyEmulator(v, self.libvirt.uri, self.listener, cert, key,
                                      write_htpasswd(v, self.USER, self.password), self.logs, v / "run" / "sushy",
                                      self.fingerprint)
        self.emulator.start()
        self.parts.append(process_record(self.emulator.proc.pid))
        self.ser2net = Ser2net(v / "run" / "console.sock", f"unix,{v / 'run' / 'serial.sock'}", self.logs, lab=True)
        self.ser2net.start()
        self.parts.append(process_record(self.ser2net.proc.pid))

    def rig_file(self, name: str, bmc: dict | None = None, ssh: dict | None = None, **top) -> pathlib.Path:
        assert self.vm_dir is not None and self.ser2net is not None, "a server's rig file once start() made it"
        spec = {"driver": "redfish", "description": f"simulated lab server ({self.memory_mb} MiB, sushy-emulator "
                f"on 127.0.0.1:{self.lan_port})", "console": self.ser2net.url, "scratch_dev": "/dev/nvme0n1",
                "remote_dir": "/var/lib/krig", "shutdown_command": ["systemctl", "poweroff"], "boot_timeout": 1800,
                "hang_timeout": 60, "nmi_wait": 20, "shutdown_timeout": 120,
                "emulator_pidfile": str(self.vm_dir / "run" / "r" / "libvirt" / "qemu" / "run" / "server.pid"), **top}
        b = {"host": "127.0.0.1", "port": self.lan_port, "user": self.USER, "password_file": str(self.password_file),
             "fingerprint": self.fingerprint, "auth": "auto", "timeout": 30, "retries": 3, **(bmc or {})}
        s = {"host": "127.0.0.1", "port": self.ssh_port, "user": self.USER, "key": str(self.base / "client_key"),
             "known_hosts": str(self.base / "known_hosts"), "connect_timeout": 30, **(ssh or {})}
        path = self.rigs / f"{name}.toml"
        self.written.append(owned.write_new(path, (owned.header(name) + toml_document(spec, bmc=b, ssh=s)).encode()))
        return path

    def stop(self):
        for part in (self.ser2net, self.emulator, self.libvirt):
            if part is not None:
                part.stop()
        self.listener.close()
        if self.vm_dir is not None:
            kill_leftovers(self.vm_dir, self.parts, since=process_record(os.getpid())["start"])
            remove_vm_dir(self.vm_dir)
