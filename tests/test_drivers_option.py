"""`--kernel KERNEL,drivers=...` as given: once only, a rig file's path read as that rig, and the
distro's kernel refused naming drivers= (not a series)."""
import subprocess

import pytest

from conftest import KRIG, ROOT
from kernels import derived, drivers, given
from krig.errors import UsageError
from test_drivers_scope import SERVER


def test_drivers_given_twice_is_refused():
    with pytest.raises(UsageError, match=r"^--kernel tiny-6\.1,drivers=a,drivers=b: drivers= given twice "
                                         r"\(drivers=a and drivers=b\); give it once$"):
        given.parse("tiny-6.1,drivers=a,drivers=b")
    with pytest.raises(UsageError, match="series= given twice"):
        given.parse("tiny-6.1,series=a,series=b")


def test_a_rig_files_path_is_read_as_that_rig(tmp_path, linux_source, monkeypatch):
    rig = tmp_path / "lab1.toml"
    rig.write_text('driver = "ipmi"\n')
    asked = []
    monkeypatch.setattr(drivers, "rig_reader", lambda name, log: asked.append(name) or
                        drivers.parse_inventory(SERVER, f"rig {name}"))
    spec, _, _ = derived.derived_spec(given.parse(f"tiny-6.1,drivers={rig}"), log=lambda *a, **k: None)
    assert asked == [str(rig)] and spec.drivers["config"]["CONFIG_E1000E"] == "y"


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
    from workflows import serverdrivers
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(serverdrivers, "READ", {})
    closed = []
    rig = types.SimpleNamespace(kind="redfish", name="rf1", power=types.SimpleNamespace(status=lambda: "off"),
                                bmc=types.SimpleNamespace(close=lambda: closed.append(1)))
    monkeypatch.setattr(serverdrivers, "rig_path", lambda name: tmp_path / "rf1.toml")
    monkeypatch.setattr(serverdrivers, "load_rig", lambda name, what: rig)
    monkeypatch.setattr(serverdrivers, "read", lambda rig, log: pytest.fail("the server was powered on to read it"))
    (tmp_path / "cache" / "servers").mkdir(parents=True)
    (tmp_path / "cache" / "servers" / "rf1.drivers").write_text(SERVER)
    said = []
    inv = serverdrivers.server_drivers("rf1", log=said.append)
    assert inv["release"] == "6.1.0-28-amd64" and said[0].startswith("krig: rf1 is off: its drivers as read on ")
    assert closed == [1]
