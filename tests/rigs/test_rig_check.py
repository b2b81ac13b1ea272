"""`krig rig check` without a BMC simulator: the fingerprint forms a rig file takes, the TLS item
against a real TLS server on 127.0.0.1 (a certificate made here), the Redfish privileges read
from a fake AccountService, the drivers kept, a QEMU rig, a bad rig file, a lab rig whose BMC
does not answer, and a run refused before its build for a host key known_hosts lacks.
Against the real BMC simulators: tests/rigs/redfish/test_rig_check_redfish.py, tests/rigs/ipmi/test_rig_check_ipmi.py.

Covers: rigs/check.py, rigs/ipmi/check.py, rigs/redfish/check.py, workflows/rigcheck.py."""
import os
import re
import socket
import ssl
import subprocess
import threading
import types

import pytest

from conftest import KRIG, ROOT
from krig.errors import UsageError
from rig_check_fixture import redfish_table
from rigs.check import BAD, NOTE, OK
from rigs.labsim.bmc import free_port
from rigs.labsim.redfish import make_cert
from rigs.redfish.check import privilege_items, tls_item
from rigs.redfish.spec import validate_spec
from workflows.rigcheck import drivers_cache

FP = ":".join(["AB"] * 32)


@pytest.mark.parametrize("given", [f"sha256 Fingerprint={FP}", f"SHA256 Fingerprint={FP}", f"sha256:{FP}", FP,
                                   "ab" * 32, f"  sha256 Fingerprint={FP}\n"])
def test_a_pin_in_every_form_openssl_and_krig_print(tmp_path, given):
    spec, _ = validate_spec("x", redfish_table(tmp_path, bmc={"fingerprint": given}), "rigs/x.toml")
    assert spec.bmc.fingerprint == "ab" * 32


@pytest.mark.parametrize("given", [f"md5 Fingerprint={FP}", f"sha1 Fingerprint={FP}", "sha256 Fingerprint=AB:CD",
                                   f"Fingerprint={FP}"])
def test_other_fingerprints_are_one_line(tmp_path, given):
    with pytest.raises(UsageError, match=r"^rigs/x\.toml\.bmc\.fingerprint: .* is not a SHA-256 fingerprint .*"
                                         r"`krig rig check` prints it\)$"):
        validate_spec("x", redfish_table(tmp_path, bmc={"fingerprint": given}), "rigs/x.toml")


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """A TLS server on 127.0.0.1 presenting a self-signed certificate for 127.0.0.1."""
    d = tmp_path_factory.mktemp("tls")
    cert, key, fp = make_cert(d)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.5)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            try:
                with ctx.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                pass
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield types.SimpleNamespace(port=sock.getsockname()[1], cert=cert, fp=fp)
    stop.set()
    t.join(5)
    sock.close()


def _cfg(port, fingerprint=None, ca_file=None):
    return types.SimpleNamespace(host="127.0.0.1", port=port, timeout=5, fingerprint=fingerprint, ca_file=ca_file)


def test_tls_pinned_matches(tls_server):
    item, go_on = tls_item(_cfg(tls_server.port, tls_server.fp))
    assert item.state == OK and go_on


def test_tls_a_wrong_pin_prints_the_presented_one(tls_server):
    item, go_on = tls_item(_cfg(tls_server.port, "ab" * 32))
    assert item.state == BAD and not go_on and item.field == "bmc.fingerprint"
    paste = re.search(r'fingerprint = "([0-9A-F:]+)"', item.line()).group(1)
    assert paste.replace(":", "").lower() == tls_server.fp


def test_tls_not_pinned_not_trusted_prints_the_line_to_paste(tmp_path, tls_server):
    item, go_on = tls_item(_cfg(tls_server.port))
    assert item.state == BAD and not go_on and item.field == "bmc.fingerprint or bmc.ca_file"
    assert "the system's CAs do not trust the certificate" in item.text
    paste = re.search(r'(fingerprint = "[0-9A-F:]+")', item.text).group(1)
    spec = redfish_table(tmp_path)              # the line pasted under [bmc] of a rig file is a valid pin
    text = f'driver = "redfish"\nconsole = "telnet://ts1:7001"\n[bmc]\n{paste}\n'
    import tomllib
    spec["bmc"]["fingerprint"] = tomllib.loads(text)["bmc"]["fingerprint"]
    assert validate_spec("x", spec, "rigs/x.toml")[0].bmc.fingerprint == tls_server.fp
    assert tls_item(_cfg(tls_server.port, tls_server.fp))[0].state == OK


def test_tls_trusted_by_its_ca_file_still_prints_the_pin(tls_server):
    item, go_on = tls_item(_cfg(tls_server.port, ca_file=str(tls_server.cert)))
    assert item.state == OK and go_on and "trusted by ca_file" in item.text
    assert tls_server.fp[:2].upper() in item.text.split('fingerprint = "')[1]


def test_tls_nothing_listening_names_the_address():
    item, go_on = tls_item(_cfg(free_port()))
    assert item.state == BAD and not go_on and item.field == "bmc.host or bmc.port"


class _FakeRedfish:
    """Just enough of RedfishBmc for the privileges: an AccountService of one account and its role."""

    def __init__(self, role: str, privileges: list):
        self._root = types.SimpleNamespace(json={"AccountService": {"@odata.id": "/redfish/v1/AccountService"}})
        self.tree = {
            "/redfish/v1/AccountService": {"Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"},
                                           "Roles": {"@odata.id": "/redfish/v1/AccountService/Roles"}},
            "/redfish/v1/AccountService/Accounts": {"Members": [{"@odata.id": "/a/1"}, {"@odata.id": "/a/2"}]},
            "/a/1": {"UserName": "root", "RoleId": "Administrator"},
            "/a/2": {"UserName": "krig", "RoleId": role},
            f"/redfish/v1/AccountService/Roles/{role}": {"AssignedPrivileges": privileges}}

    def raw(self, path):
        return self.tree[path]

    def call(self, what, fn, *args):
        return fn(None, *args)


def _rig(role, privileges, clear=True):
    return types.SimpleNamespace(bmc=_FakeRedfish(role, privileges),
                                 spec=types.SimpleNamespace(bmc=types.SimpleNamespace(user="krig", clear_sel=clear)))


def test_an_operator_account_may_power_but_not_clear_the_logs():
    items = list(privilege_items(_rig("Operator", ["Login", "ConfigureComponents", "ConfigureSelf"])))
    assert [i.state for i in items] == [OK, BAD]
    assert items[1].what == "log clearing" and items[1].field == "bmc.clear_log = false"
    assert "ConfigureManager" in items[1].text
    assert [i.state for i in privilege_items(_rig("Operator", ["Login", "ConfigureComponents"], clear=False))] == [OK]


def test_a_read_only_account_is_refused_for_power():
    items = list(privilege_items(_rig("ReadOnly", ["Login", "ConfigureSelf"], clear=False)))
    assert [i.state for i in items] == [BAD] and "ConfigureComponents" in items[0].text


def test_an_administrator_account_is_all_ok():
    privs = ["Login", "ConfigureComponents", "ConfigureManager", "ConfigureUsers", "ConfigureSelf"]
    assert [i.state for i in privilege_items(_rig("Administrator", privs))] == [OK, OK]


INVENTORY = ("krig-drivers 1\nrelease 6.1.0-28-amd64\n== modules\ne1000e 1 0 - Live 0x0\n== bound\n"
             "pci 0000:00:02.0 e1000e e1000e\n== boot\nnet eth0 pci 0000:00:02.0 e1000e e1000e\n")


def test_the_drivers_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    assert drivers_cache("lab1").state == NOTE
    (tmp_path / "cache" / "servers" / "lab1.drivers").write_text(INVENTORY)
    item = drivers_cache("lab1")
    assert item.state == OK and "release 6.1.0-28-amd64: net eth0 -> e1000e" in item.text
    (tmp_path / "cache" / "servers" / "lab1.drivers").write_text("garbage\n")
    assert drivers_cache("lab1").state == BAD


def _cli(tmp_path, *args):
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results"), "KRIG_CACHE": str(tmp_path / "cache")}
    p = subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
    return p


def test_a_qemu_rig_is_all_ok(tmp_path):
    p = _cli(tmp_path, "rig", "check", "qemu-default")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[0] == "ok   rig file: rigs/qemu-default.toml: driver qemu, every field valid"


def test_a_bad_rig_file_is_exit_2(tmp_path):
    rig = tmp_path / "bad.toml"
    rig.write_text('driver = "redfish"\nconsole = "sol"\n')
    p = _cli(tmp_path, "rig", "check", str(rig))
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.splitlines()) == 1, p.stderr
    assert f"{rig}.console" in p.stderr


def _lab_rig(tmp_path, known_hosts: str):
    for name, text in (("key", "k\n"), ("pw", "s3cret-Pw-x\nbmc = 127.0.0.1\n"), ("known_hosts", known_hosts)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o600)
    rig = tmp_path / "lab1.toml"
    rig.write_text(f'driver = "ipmi"\nboot = "kexec"\n[bmc]\nhost = "127.0.0.1"\nport = {free_port(socket.SOCK_DGRAM)}\n'
                   f'user = "krig"\npassword_file = "{tmp_path / "pw"}"\ntimeout = 1\nretries = 1\n'
                   f'[ssh]\nhost = "127.0.0.1"\nport = 2222\nkey = "{tmp_path / "key"}"\n'
                   f'known_hosts = "{tmp_path / "known_hosts"}"\n')
    return rig


def test_a_lab_rig_whose_bmc_does_not_answer_and_whose_key_is_not_pinned(tmp_path):
    p = _cli(tmp_path, "rig", "check", str(_lab_rig(tmp_path, "")))
    assert p.returncode == 1, p.stdout + p.stderr
    bad = [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL")]
    assert len(bad) == 2, p.stdout
    assert bad[0].startswith("FAIL ssh host key: ") and bad[0].endswith("(field: ssh.known_hosts)")
    assert "[127.0.0.1]:2222" in bad[0]
    assert bad[1].startswith("FAIL login: ") and bad[1].endswith("(field: bmc.host or bmc.port)")
    assert "s3cret-Pw-x" not in p.stdout + p.stderr


def test_a_run_is_refused_before_its_build_for_a_host_key_not_pinned(tmp_path):
    p = _cli(tmp_path, "run", "selftest-pass", "--rig", str(_lab_rig(tmp_path, "")), "--kernel", "tiny-6.1")
    assert p.returncode == 2, p.stdout + p.stderr
    line = p.stderr.strip()
    assert len(line.splitlines()) == 1 and re.match(rf"^krig: error: {re.escape(str(tmp_path))}/lab1\.toml\."
                                                    r"ssh\.known_hosts: ssh host key: .* has no host key for \[127\.0\.0\.1\]:2222.*"
                                                    r"nothing was built", line), line
    assert not (tmp_path / "results").exists()


def test_the_redfish_example_rig_loads_with_its_files_made(tmp_path, monkeypatch):
    import tomllib
    spec = tomllib.loads((ROOT / "rigs" / "examples" / "redfish-server.toml").read_text())
    files = redfish_table(tmp_path)
    spec["ssh"].update(key=files["ssh"]["key"], known_hosts=files["ssh"]["known_hosts"])
    monkeypatch.setenv(spec["bmc"]["password_env"], "pw")
    out, _ = validate_spec("lab1", spec, "rigs/lab1.toml")
    assert out.bmc.clear_sel is False and len(out.bmc.fingerprint) == 64 and out.boot == "kexec"


class _Resp:
    def __init__(self, status, body=None):
        self.status_code, self.body = status, body or {}

    def json(self):
        return self.body


class _Conn:
    """A BMC's connector whose LogService.ClearLog answers 403 (an Operator account)."""

    def __init__(self):
        self.tree = {"/ls": {"Members": [{"@odata.id": "/ls/sel"}]},
                     "/ls/sel": {"Actions": {"#LogService.ClearLog": {"target": "/ls/sel/Actions/ClearLog"}}}}

    def get(self, path):
        return _Resp(200, self.tree[path])

    def post(self, path, data=None):
        import sushy.exceptions as sx
        raise sx.AccessError("POST", path, _Resp(403, {"error": {"message": "Insufficient privilege"}}))


def test_a_403_on_clearlog_is_no_lost_session(tmp_path):
    from rigs.redfish.bmc import RedfishBmc
    spec, pw = validate_spec("x", redfish_table(tmp_path, bmc={"clear_log": True}), "rigs/x.toml")
    bmc = RedfishBmc("x", spec.bmc, pw, tmp_path / "bmc.log")
    bmc._system, bmc._conn = types.SimpleNamespace(json={"LogServices": {"@odata.id": "/ls"}}), _Conn()
    said = bmc.sel_clear()
    assert said.startswith("not cleared: the BMC refused LogService.ClearLog to user 'krig' on /ls/sel (HTTP 403)")
    assert "bmc.clear_log = false" in said and bmc.failed is None
    assert bmc.call("reading again", lambda s: "answered") == "answered"     # the session is still good
    assert "log clearing not cleared" in (tmp_path / "bmc.log").read_text()


def test_log_clearing_is_off_unless_asked(tmp_path):
    assert validate_spec("x", redfish_table(tmp_path), "rigs/x.toml")[0].bmc.clear_sel is False


class _Calls:
    """A BMC that records what it is asked."""

    def __init__(self):
        self.calls = []

    def bootdev(self, device):
        self.calls.append(("bootdev", device))

    def power(self, action):
        self.calls.append(("power", action))


def test_the_boot_override_precedes_every_power_on_of_a_kexec_rig(tmp_path):
    from rigs import load_rig
    rig_path = _lab_rig(tmp_path, "")
    rig_path.write_text(rig_path.read_text().replace('timeout = 1\n', 'timeout = 1\nboot_device = "disk"\n'))
    rig = load_rig(str(rig_path))
    assert rig.spec.boot == "kexec"
    rig.server.bmc = bmc = _Calls()
    rig.power.on()
    rig.server.power_cycle()
    assert bmc.calls == [("bootdev", "disk"), ("power", "on"), ("bootdev", "disk"), ("power", "cycle")]


def test_a_raw_console_keeps_every_byte_and_rfc2217_takes_the_speed(tmp_path, monkeypatch):
    """raw://: what the console server sends, 0xff (telnet's IAC) included; rfc2217://: the rig
    file's console_speed is the line speed asked; a speed no serial line has is one line."""
    from rigs import netconsole
    srv = socket.create_server(("127.0.0.1", 0))
    sent = b"boot \xff\xfb\x01 ok\n"

    def serve():
        conn, _ = srv.accept()
        conn.sendall(sent)
        conn.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conn = netconsole.NetConsole(f"raw://127.0.0.1:{srv.getsockname()[1]}", tmp_path / "c", tmp_path / "n")._connect()
    got = b""
    for _ in range(50):
        try:
            got += conn.read()
        except ConnectionError:
            break
    conn.close()
    srv.close()
    assert got == sent
    import serial
    asked = []
    monkeypatch.setattr(serial, "serial_for_url", lambda url, **kw: asked.append(kw["baudrate"]))
    netconsole.NetConsole("rfc2217://ts1:7001", tmp_path / "c", tmp_path / "n", speed=9600)._connect()
    assert asked == [9600]
    spec = redfish_table(tmp_path)
    spec.update(console="raw://ts1:7001", console_speed=57600)
    assert validate_spec("x", spec, "rigs/x.toml")[0].console_speed == 57600
    spec["console_speed"] = 12345
    with pytest.raises(UsageError, match=r"^rigs/x\.toml\.console_speed: "):
        validate_spec("x", spec, "rigs/x.toml")
