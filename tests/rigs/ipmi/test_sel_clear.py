"""Clearing an IPMI server's SEL (rigs/ipmi/bmc.py sel_clear): off unless the rig file asks
(bmc.clear_sel, as Redfish's clear_log); a BMC that refuses it to the account is the line the
run's facts keep, the BMC still answering; a BMC that does not answer is still the BMC's fault.
The ipmitool here is a script of this test standing in for the BMC's answers; the real
ipmi_sim clears its SEL in tests/rigs/ipmi/test_ipmi.py."""
import pytest

from krig.errors import RigError
from rigs import load_rig
from rigs.ipmi import bmc as ipmi_bmc
from rigs.ipmi.state import Power


def _rig(tmp_path, **bmc):
    for name, text in (("key", "k\n"), ("pw", "pw\nbmc = 127.0.0.1\n"), ("known_hosts", "")):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o600)
    extra = "".join(f"{k} = {str(v).lower()}\n" for k, v in bmc.items())
    path = tmp_path / "lab1.toml"
    path.write_text(f'driver = "ipmi"\n[bmc]\nhost = "127.0.0.1"\nuser = "krig"\npassword_file = "{tmp_path / "pw"}"\n'
                    f'timeout = 1\nretries = 1\n{extra}[ssh]\nhost = "127.0.0.1"\nkey = "{tmp_path / "key"}"\n'
                    f'known_hosts = "{tmp_path / "known_hosts"}"\n')
    return load_rig(str(path))


def _bmc(tmp_path, monkeypatch, sel_clear: str):
    """The rig's BMC with an ipmitool answering `sel clear` with the shell lines given, and the
    power state to anything else."""
    tool = tmp_path / "ipmitool"
    tool.write_text(f'#!/bin/sh\ncase "$*" in\n*"sel clear") {sel_clear} ;;\n*) echo "Chassis Power is off" ;;\nesac\n')
    tool.chmod(0o755)
    monkeypatch.setattr(ipmi_bmc, "IPMITOOL", str(tool))
    bmc = _rig(tmp_path, clear_sel=True).server.bmc
    bmc.log_path = tmp_path / "bmc.log"
    return bmc


def test_the_sel_is_kept_unless_the_rig_file_asks(tmp_path):
    assert _rig(tmp_path).spec.bmc.clear_sel is False
    assert _rig(tmp_path, clear_sel=True).spec.bmc.clear_sel is True


@pytest.mark.parametrize("answer, says", [
    ("echo 'Clear SEL failed: Insufficient privilege level' >&2; exit 1", "lacks the privilege"),
    ("echo 'Clear SEL failed: Invalid command' >&2; exit 1", "Invalid command"),
])
def test_a_refused_clear_is_a_line_and_the_bmc_still_answers(tmp_path, monkeypatch, answer, says):
    bmc = _bmc(tmp_path, monkeypatch, answer)
    said = bmc.sel_clear()
    assert said and said.startswith("not cleared: ") and says in said and "\n" not in said
    assert "bmc.clear_sel = false" in said and bmc.failed is None
    assert bmc.power_status() is Power.OFF
    assert "log clearing not cleared" in (tmp_path / "bmc.log").read_text()


def test_a_clear_the_bmc_takes_is_no_line(tmp_path, monkeypatch):
    assert _bmc(tmp_path, monkeypatch, "echo 'Clearing SEL.  Please allow a few seconds to erase.'").sel_clear() is None


def test_a_bmc_that_does_not_answer_is_still_an_error(tmp_path, monkeypatch):
    bmc = _bmc(tmp_path, monkeypatch, "echo 'Error: Unable to establish IPMI v2 / RMCP+ session' >&2; exit 1")
    with pytest.raises(RigError, match="did not answer"):
        bmc.sel_clear()
