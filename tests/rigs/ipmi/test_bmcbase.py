"""What both BMCs share (rigs/ipmi/bmcbase.py): the bounded wait for a power state, and the
password never in what a BMC's answer leaves in bmc.log or an error line, for the IPMI Bmc
and the Redfish one alike. Each BMC's real protocol runs in tests/rigs/ipmi/test_ipmi.py and
tests/rigs/redfish/test_redfish.py."""
import pytest

from rigs.ipmi.bmc import Bmc
from rigs.ipmi.bmcbase import BmcBase
from rigs.ipmi.state import Power

PASSWORD = "s3cret-Pw"


class _Answers(BmcBase[None]):
    """A BMC whose power answers are a list, the last repeated."""

    def __init__(self, answers):
        super().__init__("r", None, PASSWORD)
        self.answers, self.asked = list(answers), 0

    def power_status(self):
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_wait_power_returns_once_the_bmc_says_so():
    b = _Answers([Power.ON, Power.ON, Power.OFF])
    assert b.wait_power(Power.OFF, timeout=60, poll=0.01) is True
    assert b.asked == 3


def test_wait_power_gives_up_after_its_bound():
    b = _Answers([Power.ON])
    assert b.wait_power(Power.OFF, timeout=0.05, poll=0.01) is False
    assert 1 <= b.asked <= int(0.05 / 0.01) + 2         # bounded: never asked past the loop's count


def test_the_shared_parts_are_the_bases_and_declared():
    assert Bmc.wait_power is BmcBase.wait_power and Bmc._log is BmcBase._log
    with pytest.raises(NotImplementedError):
        BmcBase("r", None, PASSWORD).power_status()


def _rig(tmp_path, driver):
    """A rig file's table for either driver: the password in a 0600 file that names its BMC."""
    key, pw = tmp_path / "key", tmp_path / "pw"
    key.write_text("k")
    pw.write_text(f"{PASSWORD}\nbmc = 127.0.0.1\n")
    for f in (key, pw):
        f.chmod(0o600)
    console = {"console": "telnet://127.0.0.1:7001"} if driver == "redfish" else {}
    return {"driver": driver, **console, "bmc": {"host": "127.0.0.1", "user": "krig", "password_file": str(pw)},
            "ssh": {"host": "127.0.0.1", "key": str(key), "known_hosts": str(key)}}


@pytest.mark.parametrize("driver", ["ipmi", "redfish"])
def test_the_password_is_taken_out_of_a_bmcs_answer(tmp_path, driver):
    from rigs.ipmi import spec as ipmi_spec
    from rigs.redfish import spec as redfish_spec
    from rigs.redfish.bmc import RedfishBmc
    checks, kind = (ipmi_spec, Bmc) if driver == "ipmi" else (redfish_spec, RedfishBmc)
    spec, password = checks.validate_spec("r", _rig(tmp_path, driver), "rigs/r.toml")
    assert password == PASSWORD
    b = kind("r", spec.bmc, password, tmp_path / "bmc.log")
    said = b._clean(f"login failed for krig:{PASSWORD} at the BMC")
    assert PASSWORD not in said and "krig:********" in said
    b._log(said)
    assert "krig:********" in (tmp_path / "bmc.log").read_text()
    assert PASSWORD not in (tmp_path / "bmc.log").read_text()
