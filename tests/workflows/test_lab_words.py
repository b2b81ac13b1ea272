"""`krig lab` says what it takes and shows: lab sync takes IPMI and Redfish rigs (its help, its
page, the glossary), and `krig lab sim list` has each server's BMC and network card (read from
the state a simulated server leaves; nothing started here)."""
import json
import os
import subprocess

from conftest import KRIG, ROOT


def _krig(env, *args):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)


def test_lab_sync_says_redfish_too():
    env = {**os.environ, "COLUMNS": "200"}
    assert "Redfish" in _krig(env, "lab", "--help").stdout
    assert "IPMI and Redfish rig" in _krig(env, "lab", "sync", "--help").stdout
    for page in ("docs/lab-coordinator.md", "docs/glossary.md"):
        text = (ROOT / page).read_text()
        assert "Redfish" in text and "one per IPMI rig" not in text and "every IPMI rig" not in text, page


def test_sim_list_has_the_bmc_and_the_nic(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": "200"}
    for name, st in (("lab1", {"lan_port": 40001, "ssh_port": 40002, "memory_mb": 2048, "sparse": False}),
                     ("rf1", {"lan_port": 40003, "ssh_port": 40004, "memory_mb": 2048, "sparse": False,
                              "bmc_kind": "redfish", "nic": "e1000e"})):
        d = tmp_path / "state" / "krig" / "labsim" / name
        d.mkdir(parents=True)
        (d / "state.json").write_text(json.dumps(st))
        (d / "request.json").write_text(json.dumps({"name": name, "nic": st.get("nic"),
                                                    "bmc_kind": st.get("bmc_kind", "ipmi")}))
    p = _krig(env, "lab", "sim", "list")
    assert p.returncode == 0, p.stderr
    head, lab1, rf1 = p.stdout.splitlines()
    assert head.split()[:6] == ["NAME", "STATE", "MEMORY", "BMC", "NIC", "SSH"], head
    assert lab1.split()[:8] == ["lab1", "stopped", "2048", "MiB", "ipmi", "127.0.0.1:40001", "virtio-net",
                                "127.0.0.1:40002"], lab1
    assert rf1.split()[4:7] == ["redfish", "127.0.0.1:40003", "e1000e"], rf1
