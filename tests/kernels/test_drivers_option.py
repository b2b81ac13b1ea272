"""`--kernel KERNEL,drivers=...` as given: once only, a rig file's path read as that rig, and the
distro's kernel refused naming drivers= (not a series).

Covers: kernels/derived.py, kernels/given.py, workflows/serverdrivers.py."""
import subprocess

import pytest

from conftest import KRIG, ROOT
from kernels import derived, drivers, given
from krig.errors import UsageError
from test_drivers_scope import SERVER
from test_rig_spec import files, ipmi_file, redfish_file  # noqa: F401 (files: a fixture)


def test_drivers_given_twice_is_refused():
    with pytest.raises(UsageError, match=r"^--kernel tiny-6\.1,drivers=a,drivers=b: drivers= given twice "
                                         r"\(drivers=a and drivers=b\); give it once$"):
        given.parse("tiny-6.1,drivers=a,drivers=b")
    with pytest.raises(UsageError, match="series= given twice"):
        given.parse("tiny-6.1,series=a,series=b")


def test_a_rig_files_path_is_read_as_that_rig(tmp_path, linux_source):
    rig = tmp_path / "lab1.toml"
    rig.write_text('driver = "ipmi"\n')
    asked = []

    def read_server(name, log):
        asked.append(name)
        return drivers.parse_inventory(SERVER, f"rig {name}")
    spec, _, _ = derived.derived_spec(given.parse(f"tiny-6.1,drivers={rig}"), log=lambda *a, **k: None,
                                      read_server=read_server)
    assert asked == [str(rig)] and spec.drivers["config"]["CONFIG_E1000E"] == "y"


def test_a_rig_name_is_read_by_the_reader_passed_in_and_refused_without_one():
    """The kernels read a rig's server only through the reader the workflow passes (no module
    imported first sets one): without it, a rig's name is one line naming what drivers= takes."""
    asked = []

    def read_server(name, log):
        asked.append(name)
        raise UsageError(f"read {name}")
    g = given.parse("tiny-6.1,drivers=lab1")
    with pytest.raises(UsageError, match="^read lab1$"):
        derived.derived_spec(g, log=lambda *a, **k: None, read_server=read_server)
    assert asked == ["lab1"]
    with pytest.raises(UsageError, match=r"^--kernel tiny-6\.1,drivers=lab1: drivers=lab1: a rig's server is read by "
                                         r"the commands that run kernels .*give its drivers as files here"):
        derived.derived_spec(g, log=lambda *a, **k: None)


def test_the_distro_kernel_with_drivers_names_drivers():
    p = subprocess.run(KRIG + ["run", "selftest-pass", "--kernel", "distro,drivers=lab1"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "distro is the distro's packaged kernel; drivers= needs a kernel krig builds" in p.stderr
    assert "series" not in p.stderr


@pytest.mark.parametrize("cmd", ["run", "validate", "reproduce"])
def test_the_help_of_each_command_that_takes_a_kernel_says_drivers(cmd):
    p = subprocess.run(KRIG + [cmd, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0 and ",drivers=RIG" in p.stdout, p.stdout


def test_qualify_check_checks_what_drivers_names(tmp_path):
    import os
    from test_fake_rig import fake_rig
    rig = fake_rig(tmp_path)
    suite = tmp_path / "s.toml"
    env = {**os.environ, "KRIG_CACHE": str(tmp_path / "cache"), "KRIG_RESULTS": str(tmp_path / "results")}
    for value, code in (("no-such-rig", 2), (rig, 0)):
        suite.write_text(f'kernels = ["tiny-6.1,drivers={value}"]\n[[runs]]\nreproducer = "selftest-pass"\n')
        p = subprocess.run(KRIG + ["qualify", str(suite), "--check", "--rig", rig, "-o", str(tmp_path / "q")],
                           capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
        assert p.returncode == code, p.stdout + p.stderr
    suite.write_text('kernels = ["tiny-6.1,drivers=no-such-rig"]\n[[runs]]\nreproducer = "selftest-pass"\n')
    p = subprocess.run(KRIG + ["qualify", str(suite), "--check", "--rig", rig], capture_output=True, text=True,
                       cwd=ROOT, timeout=120, env=env)
    assert len(p.stderr.strip().splitlines()) == 1 and "drivers=no-such-rig: no such file or directory, and no " \
        "rig of that name" in p.stderr, p.stderr
    assert not (tmp_path / "cache" / "kbuild").exists()


def test_a_redfish_server_found_off_is_read_from_the_kept_drivers(tmp_path, monkeypatch):
    """drivers=RIG of a Redfish rig whose server is off: the kept reading, no power on (as an IPMI one)."""
    import types
    from rigs.ipmi import drivers as server_drivers
    from rigs.ipmi.state import Power
    from workflows import serverdrivers
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(serverdrivers, "READ", {})
    closed = []
    rig = types.SimpleNamespace(kind="redfish", name="rf1", bmc=types.SimpleNamespace(power_status=lambda: Power.OFF),
                                close=lambda: closed.append(1))
    rig.installed_drivers = lambda: server_drivers.ServerDrivers(rig)
    monkeypatch.setattr(serverdrivers, "rig_path", lambda name: tmp_path / "rf1.toml")
    monkeypatch.setattr(serverdrivers, "load_rig", lambda name, what: rig)
    monkeypatch.setattr(server_drivers, "read", lambda rig, log: pytest.fail("the server was powered on to read it"))
    (tmp_path / "cache" / "servers").mkdir(parents=True)
    (tmp_path / "cache" / "servers" / "rf1.drivers").write_text(SERVER)
    said = []
    inv = serverdrivers.server_drivers("rf1", log=said.append)
    assert inv["release"] == "6.1.0-28-amd64" and said[0].startswith("krig: rf1 is off: its drivers as read on ")
    assert closed == [1]


def test_each_rig_says_whether_it_reads_its_installed_drivers(files):
    """rigs/protocol.py Rig.installed_drivers: the lab server rigs (IPMI, Redfish) read theirs
    (rigs/ipmi/drivers.py); a QEMU rig has none to read (drivers= of it is one line:
    tests/kernels/test_server_drivers.py)."""
    from rigs import load_rig
    from rigs.ipmi.drivers import ServerDrivers
    from rigs.ipmi.rig import IpmiRig
    from rigs.redfish.rig import RedfishRig
    assert load_rig("qemu-default").installed_drivers() is None
    for cls, raw in ((IpmiRig, ipmi_file(files)), (RedfishRig, redfish_file(files))):
        rig = cls("lab", raw, path="rigs/lab.toml")
        reader = rig.installed_drivers()
        assert isinstance(reader, ServerDrivers) and reader.rig is rig, cls
