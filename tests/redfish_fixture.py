"""A Redfish BMC for the Redfish rig's fast tests, all on 127.0.0.1 (rigs/labsim/redfish.py):
sushy-tools' sushy-emulator (HTTPS with a certificate made here, basic authentication) with
its libvirt driver over a small TCG domain of libvirt's per-user session daemon, and ser2net
in front of the domain's serial line (a Unix socket), all as the lab user when the tests run as
root, in a directory laid out as `krig lab sim up` lays out its own. The domain has no disk: powered on, its firmware finds
nothing to boot, which is enough to see power states, reset types, the boot override, an NMI
and the server's facts. tests/redfish_faults.py sits in front of the emulator for the faults
(a busy BMC, a dropped session). Everything started is stopped by stop(), and nothing of it
may be left running."""
import contextlib
import os
import pathlib
import secrets
import subprocess

from krig.config import toml_document
from krig.paths import process_record
from rigs.labsim.bmc import free_port
from rigs.labsim.redfish import (LibvirtSession, Ser2net, SushyEmulator, describe, domain_xml, holders,
                                 kill_leftovers, listen_local, make_cert, make_vm_dir, missing_tools, remove_vm_dir,
                                 write_htpasswd)

HERE = pathlib.Path(__file__).resolve().parent
USER = "krig"
DOMAIN = "server"


class RedfishBench:
    def __init__(self):
        self.base = make_vm_dir()
        self.run = self.base / "run"
        self.logs = self.base / "logs"
        self.rigs = self.base / "rigs"
        self.password = "rf-" + secrets.token_hex(8)
        self.listener = listen_local()
        self.port = self.listener.getsockname()[1]
        self.faults = self.base / "faults"
        self.libvirt = self.emulator = self.ser2net = None
        self.parts: list[dict] = []
        self.since = process_record(os.getpid())["start"]

    def start(self):
        self.logs.mkdir()
        self.rigs.mkdir()
        self.faults.write_text("")
        self.libvirt = LibvirtSession(self.base, self.logs)
        self.libvirt.start()
        self.parts.append(process_record(self.libvirt.proc.pid))
        self.libvirt.define(domain_xml(DOMAIN, 1024, self.run / "serial.sock", nic=True,
                                       os_extra="<bios useserial='yes'/>"))
        self.cert, key, self.fingerprint = make_cert(self.base)
        self.password_file = self.base / "bmc-password"
        self.password_file.touch(mode=0o600)
        self.password_file.write_text(f"{self.password}\nbmc = 127.0.0.1:{self.port}\n")
        self.emulator = SushyEmulator(self.base, self.libvirt.uri, self.listener, self.cert, key,
                                      write_htpasswd(self.base, USER, self.password), self.logs, self.run / "sushy",
                                      self.fingerprint,
                                      launcher=[HERE / "redfish_faults.py", self.faults])
        self.emulator.start()
        self.parts.append(process_record(self.emulator.proc.pid))
        self.ser2net = Ser2net(self.run / "console.sock", f"unix,{self.run / 'serial.sock'}", self.logs, lab=True)
        self.ser2net.start()
        self.parts.append(process_record(self.ser2net.proc.pid))
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.base / "client_key")],
                       check=True, timeout=60)
        (self.base / "known_hosts").write_text("")

    def fault(self, mode: str):
        self.faults.write_text(mode)

    def domain(self):
        """The server's libvirt domain (the caller closes its connection: dom.connect().close())."""
        return self.libvirt.connect().lookupByName(DOMAIN)

    def rig_file(self, name: str, bmc: dict | None = None, **top) -> pathlib.Path:
        spec = {"driver": "redfish", "description": f"sushy-emulator on 127.0.0.1:{self.port}",
                "console": self.ser2net.url, "scratch_dev": "/dev/vdb", "boot_timeout": 30, "hang_timeout": 10, "nmi_wait": 2,
                "shutdown_timeout": 10, **top}
        b = {"host": "127.0.0.1", "port": self.port, "user": USER, "password_file": str(self.password_file),
             "fingerprint": self.fingerprint, "auth": "auto", "timeout": 10, "retries": 1, **(bmc or {})}
        s = {"host": "127.0.0.1", "port": free_port(), "user": "root", "key": str(self.base / "client_key"),
             "known_hosts": str(self.base / "known_hosts"), "connect_timeout": 2}
        path = self.rigs / f"{name}.toml"
        path.write_text(toml_document(spec, bmc=b, ssh=s))
        key = (self.base / "client_key.pub").read_text().split()[:2]      # a key pinned for its SSH address
        with open(self.base / "known_hosts", "a") as f:
            f.write(f"[127.0.0.1]:{s['port']} {' '.join(key)}\n")
        return path

    def processes(self) -> list[str]:
        """'PID ARGS' of each process of the bench still running: its parts' sessions and what
        libvirt started (rigs/labsim/redfish.py holders)."""
        from rigs.labsim.wire import session_members
        pids = {p for rec in self.parts for p in session_members(rec)} | set(holders(self.base, self.since))
        return describe(sorted(pids))

    def stop(self):
        for part in (self.ser2net, self.emulator, self.libvirt):
            if part is not None:
                part.stop()
        self.listener.close()
        kill_leftovers(self.base, self.parts, since=self.since)


@contextlib.contextmanager
def running_bench():
    from conftest import setup_missing
    setup_missing(missing_tools(), "the Redfish rig tests")
    bench = RedfishBench()
    try:
        bench.start()
        yield bench
    finally:
        bench.stop()
        left = bench.processes()
        remove_vm_dir(bench.base)
    assert not left, f"left running after the Redfish BMC stopped: {left}"
