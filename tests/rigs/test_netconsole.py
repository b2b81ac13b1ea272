"""The network serial console (rigs/netconsole.py) against a real ser2net on 127.0.0.1 in front
of a pty this test writes to as a server's serial port would: RFC 2217 and plain telnet,
console.log byte for byte, a dropped console server reconnected, and the rig file's
`console` field of both drivers."""
import os
import pathlib
import pty
import shutil
import subprocess
import tempfile
import time
import tty

import pytest

from conftest import require_program
from krig.errors import RigError, UsageError
from rigs.ipmi.spec import validate_spec as validate_ipmi
from rigs.labsim.bmc import free_port
from rigs.labsim.redfish import Ser2net
from rigs.procs import stop_group
from rigs.netconsole import NetConsole, open_console

BYTES = b"[    0.000000] Linux version 6.1\r\n\x00\x7f\xfe binary \xff\xff tail\r\n"


@pytest.fixture
def line(tmp_path):
    """(pty master fd, ser2net factory): ser2net serving the pty's other end."""
    require_program("ser2net", "ser2net")
    master, slave = pty.openpty()
    tty.setraw(slave)
    started = []

    def serve(rfc2217: bool, port=None) -> Ser2net:
        s = Ser2net(port or free_port(), f"serialdev,{os.ttyname(slave)},115200n81,local", tmp_path,
                    rfc2217=rfc2217)
        s.start()
        started.append(s)
        return s
    yield master, serve
    for s in started:
        s.stop()
    os.close(master)
    os.close(slave)


def _wait_for(path, data: bytes, timeout=15) -> bytes:
    for _ in range(int(timeout / 0.1)):
        got = path.read_bytes() if path.exists() else b""
        if data in got:
            return got
        time.sleep(0.1)
    return path.read_bytes() if path.exists() else b""


def _bytes_through(url: str, master: int, tmp_path) -> None:
    """BYTES written on the server's line arrive in console.log as they were, through krig's
    console for url."""
    con = open_console(url, None, tmp_path, tmp_path / "console.log", "rig t")
    try:
        time.sleep(1)
        os.write(master, BYTES)
        assert _wait_for(tmp_path / "console.log", BYTES) == BYTES
    finally:
        con.stop()


@pytest.mark.parametrize("rfc2217", [True, False])
def test_console_log_is_what_the_server_wrote(tmp_path, line, rfc2217):
    master, serve = line
    s = serve(rfc2217)
    _bytes_through(s.url, master, tmp_path)
    notes = (tmp_path / "netconsole.log").read_text()
    assert f"console {s.url} connected" in notes and "console stopped (0 reconnections)" in notes


def test_a_dropped_console_server_is_reconnected(tmp_path, line):
    master, serve = line
    s = serve(False)
    con = NetConsole(s.url, tmp_path / "console.log", tmp_path / "netconsole.log")
    con.start()
    try:
        time.sleep(1)
        os.write(master, b"before\r\n")
        assert b"before" in _wait_for(tmp_path / "console.log", b"before")
        stop_group(s.proc, 10)
        serve(False, port=s.listen)           # the console server back on its port
        for _ in range(100):
            if con.restarts and con._conn is not None:
                break
            time.sleep(0.2)
        time.sleep(1)
        os.write(master, b"after\r\n")
        assert _wait_for(tmp_path / "console.log", b"after").endswith(b"after\r\n")
    finally:
        con.stop()
    assert con.restarts >= 1
    assert "reconnecting (1)" in (tmp_path / "netconsole.log").read_text()


def test_a_console_nobody_serves_is_one_line(tmp_path):
    port = free_port()
    con = NetConsole(f"telnet://127.0.0.1:{port}", tmp_path / "console.log", tmp_path / "n.log", "rig t")
    with pytest.raises(RigError, match=rf"^rig t: cannot connect to the console telnet://127.0.0.1:{port}: "):
        con.start()


def _ipmi_spec(tmp_path, console, monkeypatch):
    monkeypatch.setenv("KRIG_TEST_NETCONSOLE_PW", "pw")
    key = tmp_path / "key"
    key.write_text("k")
    key.chmod(0o600)
    spec = {"driver": "ipmi", "bmc": {"host": "b", "user": "u", "password_env": "KRIG_TEST_NETCONSOLE_PW"},
            "ssh": {"host": "s", "key": str(key), "known_hosts": str(key)}}
    if console is not None:
        spec["console"] = console
    return spec


def test_ipmi_rig_console_field(tmp_path, monkeypatch):
    assert validate_ipmi("x", _ipmi_spec(tmp_path, None, monkeypatch), "rigs/x.toml")[0].console == "sol"
    assert validate_ipmi("x", _ipmi_spec(tmp_path, "rfc2217://ts1:7001", monkeypatch), "rigs/x.toml")[0].console == \
        "rfc2217://ts1:7001"
    with pytest.raises(UsageError, match=r"^rigs/x.toml.console: 'ssh://ts1:22': use sol \(IPMI Serial over LAN\), "
                                         r"rfc2217://HOST:PORT, telnet://HOST:PORT or raw://HOST:PORT"):
        validate_ipmi("x", _ipmi_spec(tmp_path, "ssh://ts1:22", monkeypatch), "rigs/x.toml")


def test_a_unix_socket_console_is_read_byte_for_byte(tmp_path, line):
    """`unix:/PATH`: ser2net's Unix accepter (mode 0600), the bytes as the server wrote them."""
    master, serve = line
    s = serve(False, port=tmp_path / "console.sock")
    assert s.url == f"unix:{tmp_path}/console.sock" and oct(os.stat(tmp_path / "console.sock").st_mode & 0o777) == "0o600"
    _bytes_through(s.url, master, tmp_path)
    with pytest.raises(RigError, match=rf"^rig t: cannot connect to the console unix:{tmp_path}/none.sock: "):
        NetConsole(f"unix:{tmp_path}/none.sock", tmp_path / "c.log", tmp_path / "n.log", "rig t").start()
    with pytest.raises(UsageError, match=r"console: 'unix:console.sock': use sol"):
        validate_ipmi("x", {"driver": "ipmi", "console": "unix:console.sock"}, "rigs/x.toml")


def test_a_unix_console_of_another_user_put_at_its_name_is_not_read(tmp_path):
    """A link at the console's name to a socket another user (nobody) serves: refused in one line
    (the link is root's, the peer nobody's); the socket itself, nobody's and served by nobody, is read."""
    if os.geteuid() != 0:
        pytest.fail("this test makes up another user: it runs as root (make test does)")
    theirs = pathlib.Path(tempfile.mkdtemp(prefix="krig-test-theirs-"))       # where nobody can bind
    theirs.chmod(0o777)
    code = ("import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen(4)\n"
            "while True:\n c=s.accept()[0]\n try:\n  c.sendall(b'from nobody\\n'); time.sleep(0.5)\n"
            " except OSError: pass\n c.close()\n")
    srv = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--",
                            "/usr/bin/python3", "-I", "-c", code, str(theirs / "s.sock")])
    try:
        for _ in range(100):
            if (theirs / "s.sock").exists():
                break
            time.sleep(0.1)
        (tmp_path / "console.sock").symlink_to(theirs / "s.sock")
        con = NetConsole(f"unix:{tmp_path}/console.sock", tmp_path / "c.log", tmp_path / "n.log", "rig t")
        with pytest.raises(RigError, match=rf"^rig t: cannot connect to the console unix:{tmp_path}/console.sock: "
                                           r"answered by a process of uid 65534, not of the socket's owner \(uid 0\)$"):
            con.start()
        con = open_console(f"unix:{theirs}/s.sock", None, tmp_path, tmp_path / "c.log", "rig t")
        try:
            assert b"from nobody" in _wait_for(tmp_path / "c.log", b"from nobody")
        finally:
            con.stop()
    finally:
        srv.kill()
        srv.wait()
        shutil.rmtree(theirs)
