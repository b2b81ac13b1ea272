"""`krig lab sim down` of a Redfish server (`krig lab sim up NAME --bmc redfish`) stops what its
`up` started and nothing else, found by record and by the files they hold, never by command
line: even after its supervisor was killed with SIGKILL, when libvirt's QEMU and log daemon
(daemons outside any session krig recorded) outlive it. The server is powered on through
Redfish and killed while its firmware starts: nothing boots to the end. What other users get
from a running Redfish BMC: tests/rigs/labsim/test_redfish_trust.py.

Covers: rigs/labsim/redfish_server.py."""
import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

from conftest import KRIG, ROOT, setup_missing
from rigs.labsim import image as labsim_image
from rigs.labsim import redfish as labsim_redfish

pytestmark = [pytest.mark.labsim, pytest.mark.long(2)]
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def _krig(env, *args):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)


def _theirs(vm_dir: str, but=()) -> list[str]:
    """The test's own view: every process whose command line or environment names the server's
    directory (libvirt gives its QEMU and log daemon a HOME there), but the pids `but`."""
    out = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in but or int(d.name) == os.getpid():
            continue
        try:
            if vm_dir.encode() in (d / "cmdline").read_bytes() + (d / "environ").read_bytes():
                out.append(f"{d.name} " + (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return out


def _power_on(st: dict) -> None:
    import requests
    base, cert = f"https://127.0.0.1:{st['lan_port']}", os.path.join(st["vm_dir"], "bmc-cert.pem")
    auth = ("krig", pathlib.Path(st["password_file"]).read_text().splitlines()[0])
    system = requests.get(base + "/redfish/v1/Systems", auth=auth, verify=cert, timeout=60).json()["Members"][0]
    r = requests.post(base + system["@odata.id"] + "/Actions/ComputerSystem.Reset", json={"ResetType": "On"},
                      auth=auth, verify=cert, timeout=60)
    assert r.status_code in (200, 202, 204), r.text


def test_down_after_a_killed_supervisor_stops_only_what_up_started(tmp_path):
    setup_missing(labsim_redfish.missing_tools() + labsim_image.missing_tools(), "the Redfish lab server test")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "KRIG_LOCK_DIR": str(tmp_path / "locks")}
    p = _krig(env, "lab", "sim", "up", "lab1", "--bmc", "redfish")
    decoys = []
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        st = json.loads((tmp_path / "state" / "krig" / "labsim" / "lab1" / "state.json").read_text())
        vm_dir = st["vm_dir"]
        assert f'console = "unix:{vm_dir}/run/console.sock"' in pathlib.Path(st["rig"]).read_text()
        _power_on(st)
        for _ in range(300):
            if any("qemu-system-x86_64" in ln.split()[1] for ln in _theirs(vm_dir)):
                break
            time.sleep(0.2)
        assert any("qemu-system-x86_64" in ln.split()[1] for ln in _theirs(vm_dir)), _theirs(vm_dir)
        crafted = f"sleep {vm_dir} {vm_dir}/run/console.sock rigs.labsim.sim serve lab1 libvirtd qemu-system-x86_64"
        decoys = [subprocess.Popen(NOBODY + ["bash", "-c", f'exec -a "{crafted}" sleep 600']),
                  subprocess.Popen(["bash", "-c", f'exec -a "{crafted}" sleep 600'], start_new_session=True)]
        os.kill(st["supervisor"]["pid"], signal.SIGKILL)
        for _ in range(100):
            if not os.path.exists(f"/proc/{st['supervisor']['pid']}"):
                break
            time.sleep(0.1)
        survivors = _theirs(vm_dir, but={d.pid for d in decoys})
        assert any("qemu-system-x86_64" in ln.split()[1] for ln in survivors), survivors    # libvirt's daemon
        down = _krig(env, "lab", "sim", "down", "lab1")
        assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
        assert [d.poll() for d in decoys] == [None, None]
        assert not _theirs(vm_dir, but={d.pid for d in decoys}) and not os.path.exists(vm_dir)
    finally:
        for d in decoys:
            d.kill()
            d.wait()
        _krig(env, "lab", "sim", "down", "lab1")
