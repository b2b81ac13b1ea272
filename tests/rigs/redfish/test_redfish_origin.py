"""The Redfish client against a hostile BMC: a fake Redfish service in this process (TLS with a
certificate made here, pinned in the rig file as krig pins a BMC's), whose answers point at
another origin (a second listener on 127.0.0.1, plain http and https with the same pinned
certificate), redirect there, stream more than krig reads, or carry escape sequences. Nothing
reaches the other origin, not a connection; a refusal is one line naming the link and the BMC.
Also the password file's binding to its BMC, and an IPv6 BMC. Boots nothing.

Covers: rigs/redfish/origin.py, rigs/redfish/spec.py."""
import json
import os
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import KRIG, ROOT
from krig.config import toml_document
from krig.errors import RigError, UsageError
from rigs import load_rig
from rigs.ipmi.bmc import BmcAuthError
from rigs.ipmi.state import Power
from rigs.labsim.redfish import make_cert
from rigs.redfish.origin import BODY_CAP
from rigs.redfish.spec import validate_spec

PW = "bmc-s3cret-pw"
CONTROL = {chr(c) for c in (*range(0x20), 0x7f, *range(0x80, 0xa0))}
EVIL = "\x1b]0;owned\x07\x1b[2J\x1b[31m"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _any(self):
        srv = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        srv.seen.append({"method": self.command, "path": self.path, "auth": self.headers.get("Authorization"),
                         "token": self.headers.get("X-Auth-Token"), "body": body.decode(errors="replace")})
        route = srv.routes.get(self.path.rstrip("/") or "/", (404, {}, {"error": {"message": "no such resource"}}))
        status, headers, out = route(self) if callable(route) else route
        if callable(out):           # a body streamed by the route (out(write) -> bytes sent)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            srv.sent += out(self.wfile.write)
            self.close_connection = True
            return
        data = json.dumps(out).encode() if out is not None else b""
        self.send_response(status)
        for k, v in {"Content-Type": "application/json", **headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _any


class FakeBmc(ThreadingHTTPServer):
    """A Redfish service on 127.0.0.1 (or ::1), TLS unless plain: what it was asked (seen), how
    many connections it took (connections), how many streamed body bytes it sent (sent)."""
    daemon_threads = True

    def __init__(self, cert=None, key=None, host="127.0.0.1"):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, 0), Handler)
        self.port = self.server_address[1]
        self.ctx = None
        if cert:
            self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.ctx.load_cert_chain(cert, key)
        self.scheme = "https" if cert else "http"
        self.url = f"{self.scheme}://{'[' + host + ']' if ':' in host else host}:{self.port}"
        self.routes, self.seen, self.connections, self.sent = {}, [], 0, 0
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def get_request(self):
        sock, addr = self.socket.accept()
        self.connections += 1
        sock.settimeout(10)
        return (self.ctx.wrap_socket(sock, server_side=True) if self.ctx else sock), addr

    def stop(self):
        self.shutdown()
        self.server_close()


def redfish(bmc: FakeBmc, sessions: str | None = None, member: str = "/redfish/v1/Systems/s1", **system):
    """A small Redfish tree: a service root, one system (fields of `system` over the defaults), its
    manager; Links.Sessions when `sessions` is given (POST there answers a session token)."""
    root = {"@odata.id": "/redfish/v1/", "Id": "RootService", "RedfishVersion": "1.6.0",
            "Systems": {"@odata.id": "/redfish/v1/Systems"}, "Managers": {"@odata.id": "/redfish/v1/Managers"}}
    if sessions:
        root["SessionService"] = {"@odata.id": "/redfish/v1/SessionService"}
        root["Links"] = {"Sessions": {"@odata.id": sessions}}
    bmc.routes.update({
        "/redfish/v1": (200, {}, root),
        "/redfish/v1/Systems": (200, {}, {"@odata.id": "/redfish/v1/Systems", "Members@odata.count": 1,
                                          "Members": [{"@odata.id": member}]}),
        "/redfish/v1/Systems/s1": (200, {}, {
            "@odata.id": "/redfish/v1/Systems/s1", "Id": "s1", "PowerState": "Off", "Manufacturer": "Acme",
            "Model": "R1", "BiosVersion": "1.0", "MemorySummary": {"TotalSystemMemoryGiB": 4},
            "ProcessorSummary": {"Count": 2, "Model": "cpu"},
            "Links": {"ManagedBy": [{"@odata.id": "/redfish/v1/Managers/m1"}]},
            "Actions": {"#ComputerSystem.Reset": {
                "target": "/redfish/v1/Systems/s1/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": ["On", "ForceOff"]}}, **system}),
        "/redfish/v1/Managers/m1": (200, {}, {"@odata.id": "/redfish/v1/Managers/m1", "Id": "m1",
                                              "Model": "BMC", "FirmwareVersion": "2.0"}),
    })


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    d = tmp_path_factory.mktemp("cert")
    return make_cert(d)


@pytest.fixture
def servers(cert):
    """The BMC (https), and another origin on the same host: plain http, and https presenting
    the very certificate the rig pins (only the origin tells them apart)."""
    c, k, _ = cert
    made = {"bmc": FakeBmc(c, k), "http": FakeBmc(), "https": FakeBmc(c, k)}
    yield made
    for s in made.values():
        s.stop()


def rig_file(tmp_path, bmc: FakeBmc, fingerprint: str, host: str = "127.0.0.1", bound: str | None = None,
             console: int = 9, **over) -> str:
    (tmp_path / "key").write_text("")
    # a host key pinned for the server's SSH address: a lab rig without one is refused before a run starts
    (tmp_path / "known_hosts").write_text("[127.0.0.1]:9 ssh-ed25519 "
                                          "AAAAC3NzaC1lZDI1NTE5AAAAIHkrigkrigkrigkrigkrigkrigkrigkrigkrigkrigkrig0\n")
    for name in ("key", "known_hosts"):
        (tmp_path / name).chmod(0o600)
    pw = tmp_path / "bmc-pw"
    pw.write_text(f"{PW}\nbmc = {bound or f'{host}:{bmc.port}'}\n")
    pw.chmod(0o600)
    b = {"host": host, "port": bmc.port, "user": "krig", "password_file": str(pw), "fingerprint": fingerprint,
         "auth": "auto", "timeout": 10, "retries": 0, **over}
    s = {"host": "127.0.0.1", "port": 9, "key": str(tmp_path / "key"), "known_hosts": str(tmp_path / "known_hosts"),
         "connect_timeout": 2}
    path = tmp_path / "rf.toml"
    path.write_text(toml_document({"driver": "redfish", "console": f"telnet://127.0.0.1:{console}", "boot_timeout": 5,
                                   "scratch_dev": "/dev/vdb"},
                                  bmc=b, ssh=s))
    return str(path)


def refused(tmp_path, servers, cert, **over) -> str:
    """The one line of the refusal that the first BMC call raises, checked not to be retried."""
    rig = load_rig(rig_file(tmp_path, servers["bmc"], cert[2], **over))
    try:
        with pytest.raises(BmcAuthError) as e:
            rig.bmc.power_status()
        asked = len(servers["bmc"].seen)
        with pytest.raises(BmcAuthError):
            rig.bmc.power_status()          # refused again without asking the BMC
        assert len(servers["bmc"].seen) == asked
    finally:
        rig.bmc.close()
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"rig rf: BMC https://127.0.0.1:{servers['bmc'].port} ")
    return line


def untouched(*others):
    for o in others:
        assert o.connections == 0 and o.seen == [], f"{o.url} was reached: {o.seen}"


@pytest.mark.parametrize("other", ["http", "https"])
@pytest.mark.parametrize("auth", ["session", "auto"])
def test_a_sessions_link_to_another_origin_gets_no_password(tmp_path, servers, cert, other, auth):
    link = f"{servers[other].url}/redfish/v1/SessionService/Sessions"
    redfish(servers["bmc"], sessions=link)
    line = refused(tmp_path, servers, cert, auth=auth)
    assert f"links to POST {link}, not the BMC's own origin https://127.0.0.1:{servers['bmc'].port}" in line
    untouched(servers["http"], servers["https"])
    assert all(PW not in r["body"] and r["auth"] is None for r in servers["bmc"].seen)


@pytest.mark.parametrize("other", ["http", "https"])
def test_a_system_member_at_another_origin_is_never_asked(tmp_path, servers, cert, other):
    member = f"{servers[other].url}/redfish/v1/Systems/s1"
    redfish(servers["bmc"], member=member)
    line = refused(tmp_path, servers, cert)
    assert f"links to GET {member}, not the BMC's own origin" in line
    untouched(servers["http"], servers["https"])
    assert any(r["auth"] for r in servers["bmc"].seen)     # basic authentication: to the BMC only


def test_a_session_located_at_another_origin_is_not_logged_out_there(tmp_path, servers, cert):
    """The BMC's own Sessions answer a token and a Location at another origin: the session is
    used on the BMC only; its logout (a DELETE of the Location) is refused, bmc.log says so."""
    redfish(servers["bmc"], sessions="/redfish/v1/SessionService/Sessions")
    elsewhere = f"{servers['https'].url}/redfish/v1/SessionService/Sessions/1"
    servers["bmc"].routes["/redfish/v1/SessionService/Sessions"] = (201, {"X-Auth-Token": "tok-1",
                                                                         "Location": elsewhere}, {})
    rig = load_rig(rig_file(tmp_path, servers["bmc"], cert[2], auth="session"))
    rig.bmc.log_path = tmp_path / "bmc.log"
    try:
        assert rig.bmc.power_status() is Power.OFF
    finally:
        rig.bmc.close()
    untouched(servers["http"], servers["https"])
    assert servers["bmc"].seen[-1]["token"] == "tok-1" and servers["bmc"].seen[-1]["auth"] is None
    assert f"links to DELETE {elsewhere}, not the BMC's own origin" in (tmp_path / "bmc.log").read_text()


def test_a_redirect_to_another_origin_is_refused_and_one_on_the_origin_followed(tmp_path, servers, cert):
    redfish(servers["bmc"])
    target = f"{servers['https'].url}/redfish/v1/Systems"
    servers["bmc"].routes["/redfish/v1/Systems"] = (302, {"Location": target}, None)
    line = refused(tmp_path, servers, cert)
    assert f"redirects GET /redfish/v1/Systems to {target}, not the BMC's own origin" in line
    untouched(servers["http"], servers["https"])
    here = tmp_path / "here"
    here.mkdir()
    redfish(servers["bmc"])
    systems = servers["bmc"].routes["/redfish/v1/Systems"]
    servers["bmc"].routes.update({"/redfish/v1/Systems": (301, {"Location": "/redfish/v1/Systems/index"}, None),
                                  "/redfish/v1/Systems/index": systems})
    rig = load_rig(rig_file(here, servers["bmc"], cert[2]))
    try:
        assert rig.bmc.power_status() is Power.OFF
    finally:
        rig.bmc.close()


def _stream(total: int):
    def out(write) -> int:
        sent, chunk = 0, b"x" * (1 << 20)
        try:
            while sent < total:
                write(chunk)
                sent += len(chunk)
        except OSError:         # krig closed the connection
            pass
        return sent
    return out


@pytest.mark.parametrize("length", [False, True])
def test_a_huge_body_is_refused_while_it_streams(tmp_path, servers, cert, length):
    """64 MiB for the system: refused past the cap (or by its Content-Length, unread); what the BMC
    got to send is the cap and the sockets' buffers, far from all of it."""
    redfish(servers["bmc"])
    total = 64 << 20
    servers["bmc"].routes["/redfish/v1/Systems/s1"] = (
        200, {"Content-Type": "application/json", **({"Content-Length": str(total)} if length else {})},
        _stream(total))
    line = refused(tmp_path, servers, cert)
    assert (f"with {total} bytes (Content-Length), over the {BODY_CAP >> 20} MiB" in line if length else
            f"sent more than {BODY_CAP >> 20} MiB for /redfish/v1/Systems/s1; refused after" in line), line
    assert servers["bmc"].sent < BODY_CAP + (24 << 20) < total


def test_escape_sequences_from_the_bmc_never_reach_output(tmp_path, servers, cert):
    redfish(servers["bmc"], Manufacturer=f"Acme{EVIL}", Model=f"R1{EVIL}", BiosVersion=f"1.0{EVIL}",
            ProcessorSummary={"Count": 2, "Model": f"cpu{EVIL}"})
    servers["bmc"].routes["/redfish/v1/Managers/m1"] = (200, {}, {
        "@odata.id": "/redfish/v1/Managers/m1", "Id": "m1", "Model": f"BMC{EVIL}", "FirmwareVersion": f"2.0{EVIL}"})
    servers["bmc"].routes["/redfish/v1/Systems/s1/Actions/ComputerSystem.Reset"] = (
        500, {}, {"error": {"code": "Base.1.0.GeneralError", "message": f"no{EVIL}\nsecond line"}})
    rig = load_rig(rig_file(tmp_path, servers["bmc"], cert[2]))
    try:
        facts, info = rig.bmc.server_facts(), rig.bmc.mc_info()
        with pytest.raises(RigError) as e:
            rig.bmc.power("on")
    finally:
        rig.bmc.close()
    shown = json.dumps(facts, ensure_ascii=False) + info + str(e.value)
    assert not CONTROL & set(shown), repr(shown)
    assert facts["server_model"].startswith("Acme\\x1b]0;owned\\x07") and "BMC\\x1b" in info and "2.0\\x1b" in info
    assert "HTTP 500 while ComputerSystem.Reset On" in str(e.value) and "\n" not in str(e.value)


def test_a_refusal_is_one_error_line_of_a_run(tmp_path, servers, cert):
    link = f"{servers['http'].url}/redfish/v1/SessionService/Sessions"
    redfish(servers["bmc"], sessions=link)
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results"), "KRIG_LOCK_DIR": str(tmp_path / "locks")}
    p = subprocess.run(KRIG + ["run", "selftest-pass", "--rig", rig_file(tmp_path, servers["bmc"], cert[2])],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 3 and "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if link in ln]      # the BMC's login, before anything is built
    assert len(lines) == 1 and lines[0].startswith("krig: error: rig rf: login: BMC https://127.0.0.1:"), out
    assert lines[0].endswith("nothing was built (`krig rig check " + str(tmp_path / "rf.toml") + "` checks the whole rig)")
    untouched(servers["http"], servers["https"])
    assert PW not in out


def test_an_ipv6_bmc_is_bracketed_in_its_url(tmp_path, cert):
    bmc = FakeBmc(cert[0], cert[1], host="::1")
    try:
        redfish(bmc)
        rig = load_rig(rig_file(tmp_path, bmc, cert[2], host="::1", bound=f"[0:0::1]:{bmc.port}"))
        try:
            assert rig.bmc.url == f"https://[::1]:{bmc.port}" and rig.bmc.power_status() is Power.OFF
        finally:
            rig.bmc.close()
        assert bmc.seen[-1]["path"] == "/redfish/v1/Systems/s1" and bmc.seen[-1]["auth"].startswith("Basic ")
    finally:
        bmc.stop()


def _spec(tmp_path, secret: str, host: str = "bmc1.lab", **bmc) -> dict:
    for name in ("key", "known_hosts", "pw"):
        (tmp_path / name).write_text(secret if name == "pw" else "")
        (tmp_path / name).chmod(0o600)
    return {"driver": "redfish", "console": "telnet://ts1:7001",
            "bmc": {"host": host, "user": "krig", "password_file": str(tmp_path / "pw"), **bmc},
            "ssh": {"host": "s1", "key": str(tmp_path / "key"), "known_hosts": str(tmp_path / "known_hosts")}}


@pytest.mark.parametrize("secret, host, port", [
    ("pw\nbmc = bmc1.lab\n", "BMC1.lab", 443),
    ("pw\n\n# the rack's BMCs\nbmc = bmc0.lab:443\nbmc = bmc1.lab:8443\n", "bmc1.lab", 8443),
    ("pw\nbmc = [fd00::0:5]:443\n", "fd00::5", 443),
    ("pw\nbmc = fd00::5\n", "fd00:0::5", 8443),
])
def test_a_password_file_goes_to_the_bmcs_it_names(tmp_path, secret, host, port):
    spec, pw = validate_spec("x", _spec(tmp_path, secret, host, port=port), "rigs/x.toml")
    assert pw == "pw"


@pytest.mark.parametrize("secret, host, port, says", [
    ("pw\n", "bmc1.lab", 443, r"pw does not say which BMC its password is for: add the line `bmc = bmc1\.lab:443`"),
    ("pw\nbmc = bmc1.lab\n", "evil.example", 443,
     r"pw is for bmc1\.lab \(its bmc lines\), not bmc\.host evil\.example:443: a password file goes only to the BMCs"),
    ("pw\nbmc = bmc1.lab:443\n", "bmc1.lab", 8443, r"pw is for bmc1\.lab:443 \(its bmc lines\), not bmc\.host "),
    ("pw\nbmc = ::1\n", "fd00::5", 443, r"pw is for ::1 \(its bmc lines\), not bmc\.host \[fd00::5\]:443"),
    ("pw\nsecond-secret\n", "bmc1.lab", 443, r"pw line 2: expected `bmc = HOST` or `bmc = HOST:PORT`"),
])
def test_a_password_file_for_another_bmc_is_one_line(tmp_path, secret, host, port, says):
    with pytest.raises(UsageError, match=r"^rigs/x\.toml\.bmc\.password_file: \S+" + says) as e:
        validate_spec("x", _spec(tmp_path, secret, host, port=port), "rigs/x.toml")
    assert "\n" not in str(e.value) and "second-secret" not in str(e.value)


def test_a_run_shows_the_bmc_strings_printable(tmp_path, servers, cert):
    """A whole run against a BMC whose model, firmware and log entries carry escape sequences (its
    server never answers SSH: ERROR): no control byte on the terminal, in the manifest or sel.txt."""
    redfish(servers["bmc"], Manufacturer=f"Acme{EVIL}", Model=f"R1{EVIL}", BiosVersion=f"1.0{EVIL}",
            LogServices={"@odata.id": "/redfish/v1/Systems/s1/LogServices"})
    servers["bmc"].routes.update({
        "/redfish/v1/Systems/s1/Actions/ComputerSystem.Reset": (204, {}, None),
        "/redfish/v1/Systems/s1/LogServices": (200, {}, {"Members": [{"@odata.id": "/redfish/v1/Systems/s1/Log"}]}),
        "/redfish/v1/Systems/s1/Log": (200, {}, {"Name": f"SEL{EVIL}", "Entries": {"@odata.id": "/redfish/v1/E"}}),
        "/redfish/v1/E": (200, {}, {"Members": [{"Created": "now", "Message": f"fan{EVIL}\nfailed"}]})})
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results"), "KRIG_LOCK_DIR": str(tmp_path / "locks")}
    with socket.create_server(("127.0.0.1", 0)) as console:     # a console server whose line stays quiet
        accepted = []
        threading.Thread(target=lambda: accepted.append(console.accept()), daemon=True).start()
        rig = rig_file(tmp_path, servers["bmc"], cert[2], console=console.getsockname()[1])
        p = subprocess.run(KRIG + ["run", "selftest-pass", "--rig", rig], capture_output=True, text=True, cwd=ROOT,
                           timeout=300, env=env)
        for conn, _ in accepted:
            conn.close()
    out = p.stdout + p.stderr
    assert p.returncode == 3 and "Traceback" not in out, out
    assert "did not answer SSH" in out
    assert not CONTROL - {"\n"} & set(out), repr(out)
    run_dir = next((tmp_path / "results").glob("*/*/*/*"))
    facts = json.loads((run_dir / "manifest.json").read_text())["rig_facts"]
    assert facts["server_model"] == "Acme\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m R1\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m"
    for f in ("manifest.json", "sel-before.txt", "sel.txt"):
        text = (run_dir / f).read_text()
        assert "\x1b" not in text and "\x07" not in text, f
    assert "fan\\x1b]0;owned" in (run_dir / "sel-before.txt").read_text()
    untouched(servers["http"], servers["https"])
