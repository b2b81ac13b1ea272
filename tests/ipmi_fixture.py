"""A simulated IPMI server for the IPMI rig's tests, all on 127.0.0.1 (rigs/labsim/bmc.py).

ipmi_sim is the BMC; the server QEMU boots the distro kernel with krig's
initramfs in `krig.mode=sshd` (the guest root of rigs/qemu/guestroot.py, the host's
own sshd binary with keys generated here), an NVMe scratch disk, user
networking with ssh forwarded to 127.0.0.1 only. Everything started is killed
in stop(), which the fixtures call even when a test fails.
"""
import contextlib

from rigs.labsim.bmc import GUEST_MODULES_EXTRA, SimServer, missing_tools


@contextlib.contextmanager
def running_sim(tmp_path_factory, name: str):
    """A started SimServer booting Debian's kernel, its rig file `sim`, with KRIG_RIG_PATH and
    KRIG_LOCK_DIR pointing at it; stopped afterwards, and nothing of it may be left running."""
    import pytest
    from conftest import setup_missing
    from kernels.catalog import load_kernel
    from rigs import initramfs
    from rigs.qemu import rig as qemu
    setup_missing(missing_tools(), "the IPMI rig tests")
    kernel = load_kernel("distro")
    initrd = initramfs.build(kernel.release, kernel.modules_dir, qemu.BASE_MODULES + GUEST_MODULES_EXTRA)
    base = tmp_path_factory.mktemp(name)
    server = SimServer(base, kernel, initrd)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KRIG_RIG_PATH", str(server.rigs))
        mp.setenv("KRIG_LOCK_DIR", str(base / "locks"))
        try:
            server.start()
            server.rig_file("sim")
            yield server
        finally:
            server.stop()
    left = server.processes()
    assert not left, f"left running after the simulator stopped: {left}"


@contextlib.contextmanager
def two_sims(tmp_path, what: str, user_prefix: str, **rig_kw):
    """Two started SimServers, a and b, of 1 GiB each booting Debian's kernel, with rig files
    lab-a and lab-b (rig_kw passed on); each BMC's user is `<user_prefix><a|b>bmcuser`, a name
    to look for where it must not be. Stopped afterwards, and nothing of them may be left running."""
    from conftest import setup_missing
    from kernels.catalog import load_kernel
    from rigs import initramfs
    from rigs.qemu import rig as qemu
    setup_missing(missing_tools(), what)
    kernel = load_kernel("distro")
    initrd = initramfs.build(kernel.release, kernel.modules_dir, qemu.BASE_MODULES + GUEST_MODULES_EXTRA)
    sims = []
    try:
        for n in ("a", "b"):
            (tmp_path / n).mkdir()
            s = SimServer(tmp_path / n, kernel, initrd, memory_mb=1024)
            s.USER = f"{user_prefix}{n}bmcuser"
            sims.append(s)
            s.start()
            s.rig_file(f"lab-{n}", **rig_kw)
        yield sims
    finally:
        for s in sims:
            s.stop()
    assert not [s.processes() for s in sims if s.processes()]
