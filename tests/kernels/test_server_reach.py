"""A kernel that cannot reach its lab server is refused before its kexec (kernels/reach.py,
workflows/serverreach.py), judged on a recorded inventory of a server (an e1000e card, a
virtio-blk root disk, an NVMe scratch disk) against tiny-6.1's own config and the real
linux-source-6.1 Makefiles. The same refusal on a booted simulated server with an e1000e card:
tests/rigs/labsim/test_labsim_reach.py.

Covers: kernels/reach.py, workflows/serverreach.py."""
import json
import types

import pytest

from kernels import drivers, reach
from kernels.kernel import Kernel
from kernels.spec import resolve_spec, wanted_config
from krig.errors import UsageError
from rigs import load_rig
from rigs.ipmi.rig import IpmiRig
from rigs.redfish.rig import RedfishRig
from test_drivers_scope import SERVER
from test_rig_spec import files, ipmi_file, redfish_file  # noqa: F401 (files: a fixture)
from workflows import serverdrivers, serverreach


def _kernel(tmp_path, linux_source, extra=None, drop=(), built=True) -> Kernel:
    """tiny-6.1 as its config asks it (+ extra, - drop), recorded as krig records a build."""
    d = tmp_path / "k"
    d.mkdir(exist_ok=True)
    cfg = {**wanted_config(resolve_spec("tiny-6.1"))[0], **(extra or {})}
    (d / "config").write_text("".join(f"{k}={v}\n" for k, v in cfg.items() if k not in drop and v != "n"))
    if built:
        (d / "build.json").write_text(json.dumps({"name": "tiny-6.1", "tree": str(linux_source)}))
    return Kernel("tiny-6.1", "6.1.192-krig-tiny-6.1", d / "bzImage", None, d / "config", [])


def _inv(text=SERVER):
    return drivers.parse_inventory(text, "rig lab")


def test_the_card_tiny_lacks_is_named_with_its_symbol_and_the_fix(tmp_path, linux_source):
    said = reach.refusal(_inv(), _kernel(tmp_path, linux_source), "/dev/nvme0n1", "lab")
    assert said is not None and "\n" not in said
    assert "network card enp0s16 needs driver e1000e (CONFIG_E1000E)" in said, said
    assert said.endswith("--kernel tiny-6.1,drivers=lab"), said
    assert "nvme" not in said and "vda" not in said


def test_a_kernel_with_the_driver_built_in_or_as_a_module_passes(tmp_path, linux_source):
    for value in ("y", "m"):
        k = _kernel(tmp_path, linux_source, {"CONFIG_E1000E": value})
        assert reach.refusal(_inv(), k, "/dev/nvme0n1", "lab") is None


def test_one_card_the_kernel_has_is_enough(tmp_path, linux_source):
    two = SERVER.replace("== boot\n", "== boot\nnet enp0s3 pci 0000:00:03.0 virtio-pci virtio_pci\n"
                                      "net enp0s3 virtio virtio0 virtio_net virtio_net\n")
    assert reach.refusal(_inv(two), _kernel(tmp_path, linux_source), "/dev/nvme0n1", "lab") is None


def test_the_scratch_disk_controller_is_named(tmp_path, linux_source):
    k = _kernel(tmp_path, linux_source, {"CONFIG_E1000E": "y"}, drop=("CONFIG_BLK_DEV_NVME",))
    said = reach.refusal(_inv(), k, "/dev/nvme0n1", "lab")
    assert said and "disk nvme0n1 needs driver nvme (CONFIG_BLK_DEV_NVME)" in said, said
    assert reach.refusal(_inv(), k, "", "lab") is None       # no scratch disk: the root's (vda) is there


def test_a_kernel_krig_did_not_build_is_not_judged(tmp_path, linux_source):
    assert reach.refusal(_inv(), _kernel(tmp_path, linux_source, built=False), "/dev/nvme0n1", "lab") is None


def _rig(files, kind="ipmi", boot="kexec"):
    """A real rig object of that kind, named lab (nothing of it is contacted)."""
    if kind == "qemu":
        rig = load_rig("qemu-default")
        rig.name = "lab"
        return rig
    cls, raw = (IpmiRig, ipmi_file(files, boot=boot)) if kind == "ipmi" else \
        (RedfishRig, redfish_file(files, boot=boot, scratch_dev="/dev/nvme0n1"))
    return cls("lab", raw, path="rigs/lab.toml")


def test_a_kept_inventory_refuses_before_anything_is_booted(tmp_path, linux_source, monkeypatch, files):
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(serverdrivers, "READ", {})
    k = _kernel(tmp_path, linux_source)
    serverreach.before_run(_rig(files), k)              # nothing known of the server: nothing refused yet
    (tmp_path / "cache" / "servers").mkdir(parents=True, exist_ok=True)
    (tmp_path / "cache" / "servers" / "lab.drivers").write_text(SERVER)
    for kind in ("ipmi", "redfish"):
        with pytest.raises(UsageError, match=r"^rig lab: kernel 6\.1\.192-krig-tiny-6\.1 cannot reach the server: .*"
                                             r"e1000e \(CONFIG_E1000E\).*drivers=lab; nothing was booted$"):
            serverreach.before_run(_rig(files, kind), k)
    # QEMU boots what it is given; boot = "installed": never kexec'd
    for rig in (_rig(files, "qemu"), _rig(files, boot="installed"), _rig(files, "redfish", boot="installed")):
        serverreach.before_run(rig, k)


def test_at_kexec_reads_the_running_server_once_and_keeps_it(tmp_path, linux_source, monkeypatch):
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(serverdrivers, "READ", {})
    reads = []
    monkeypatch.setattr(serverreach, "read_running_drivers", lambda s: reads.append(s.name) or SERVER)
    server = types.SimpleNamespace(name="lab", spec=types.SimpleNamespace(scratch_dev="/dev/nvme0n1"), facts={})
    assert serverreach.at_kexec(server, _kernel(tmp_path, linux_source, built=False), False) is None
    assert reads == []                                  # a kernel not judged: nothing read
    said = serverreach.at_kexec(server, _kernel(tmp_path, linux_source), False)
    assert said and "CONFIG_E1000E" in said and reads == ["lab"]
    assert (tmp_path / "cache" / "servers" / "lab.drivers").read_text() == SERVER
    assert serverreach.at_kexec(server, _kernel(tmp_path, linux_source), False) and reads == ["lab"]
