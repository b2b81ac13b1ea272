"""The simulated Redfish BMC is its starter's: what another local user (`nobody`) and the user
every QEMU guest runs as (`krig-qemu`) get from a running one, and what runs as root. The real
sushy-emulator, ser2net and libvirt of tests/redfish_fixture.py (the layout `krig lab sim up
NAME --bmc redfish` makes); its domain has no disk and is powered on through libvirt, so its
QEMU runs and its console is served while each user tries. `down` of a whole simulated
server: tests/rigs/labsim/test_labsim_trust.py."""
import os
import pathlib
import pwd
import re
import stat
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from redfish_fixture import running_bench
from rigs.labsim.user import lab_ids

pytestmark = [pytest.mark.redfish, pytest.mark.long(2)]
STRANGERS = {"nobody": ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"],
             "krig-qemu": ["setpriv", "--reuid=krig-qemu", "--regid=krig-qemu", "--clear-groups", "--"]}


@pytest.fixture(scope="module")
def bench():
    if os.geteuid() != 0:
        pytest.fail("the tests of who reaches the simulated Redfish BMC run as root (make test does): another "
                    "user must be made up")
    with running_bench() as b:
        dom = b.domain()
        try:
            dom.create()                # its QEMU runs, its console is served
        finally:
            dom.connect().close()
        for _ in range(150):
            if any("qemu-system-x86_64" in ln for ln in b.processes()):
                break
            time.sleep(0.2)
        yield b


def _pids(bench) -> dict[int, str]:
    return {int(ln.split()[0]): ln for ln in bench.processes()}


def _uids(pid: int) -> list[int]:
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    return [int(u) for u in next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1:]]


def test_no_part_runs_as_root(bench):
    """sushy-emulator, ser2net, libvirtd, the domain's QEMU and libvirt's log daemon: every uid
    (real, effective, saved, filesystem) the lab user's."""
    procs = _pids(bench)
    kinds = {k for k in ("libvirtd", "ser2net", "redfish_faults.py", "qemu-system-x86_64", "virtlogd")
             if any(k in ln for ln in procs.values())}
    assert kinds >= {"libvirtd", "ser2net", "redfish_faults.py", "qemu-system-x86_64"}, procs
    uid = lab_ids()[0]
    assert {p: _uids(p) for p in procs} == {p: [uid] * 4 for p in procs}, procs


def test_root_creates_nothing_in_the_lab_users_directory(bench):
    """The server's directory is root's (the lab user's group, 0710); what root wrote for the
    daemons (sushy-emulator's configuration, which flask executes; htpasswd; the TLS key) is
    root's there, 0640, never the lab user's to replace; in `run` (the lab user's, 0700) every
    file is the lab user's: root made none of them; the console socket is 0600."""
    uid, gid = lab_ids()
    st = os.lstat(bench.base)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, gid, 0o710)
    for name in ("sushy-emulator.conf", "htpasswd", "bmc-key.pem"):
        st = os.lstat(bench.base / name)
        assert stat.S_ISREG(st.st_mode) and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, gid, 0o640), name
    st = os.lstat(bench.run)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700)
    theirs = [os.path.join(d, f) for d, dirs, files in os.walk(bench.run) for f in dirs + files]
    assert theirs and not [f for f in theirs if os.lstat(f).st_uid != uid], theirs
    sock = os.lstat(bench.run / "console.sock")
    assert stat.S_ISSOCK(sock.st_mode) and stat.S_IMODE(sock.st_mode) == 0o600 and sock.st_uid == uid


CONNECT = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.settimeout(5)\ntry:\n s.connect(sys.argv[1])\n"
           " print('reached', s.recv(100))\nexcept PermissionError: print('refused')\n")


@pytest.mark.parametrize("who", sorted(STRANGERS))
def test_another_user_reads_no_console_byte(bench, who):
    """The console is ser2net's Unix socket, and nothing of the server listens on TCP but the BMC."""
    for sock in ("console.sock", "serial.sock"):
        p = subprocess.run(STRANGERS[who] + ["/usr/bin/python3", "-I", "-c", CONNECT, str(bench.run / sock)],
                           capture_output=True, text=True, timeout=30)
        assert p.stdout.strip() == "refused", (who, sock, p.stdout, p.stderr)
    ss = subprocess.run(["ss", "-H", "-tlnp"], capture_output=True, text=True).stdout
    pids = set(_pids(bench))
    ports = {ln.split()[3].rsplit(":", 1)[1] for ln in ss.splitlines()
             if {int(p) for p in re.findall(r"pid=(\d+)", ln)} & pids}
    assert ports == {str(bench.port)}, ss


def _curl(who: str, url: str, *args) -> tuple[str, str]:
    """(HTTP status, body) of curl as `who` (the certificate not checked: an attacker's view)."""
    p = subprocess.run(STRANGERS[who] + ["curl", "-sk", "-o", "-", "-w", "\n%{http_code}", *args, url],
                       capture_output=True, text=True, timeout=60)
    body, _, code = p.stdout.rpartition("\n")
    return code, body


@pytest.mark.parametrize("who", sorted(STRANGERS))
def test_another_user_gets_no_bmc_command_accepted(bench, who):
    """Without the password every resource but the service root (which the Redfish
    specification leaves open: versions and links) is 401, a power action too, and the
    server keeps running; a wrong password is 401 as well."""
    base = f"https://127.0.0.1:{bench.port}"
    code, body = _curl(who, base + "/redfish/v1/")
    assert code == "200" and '"RedfishVersion"' in body, (code, body)
    systems = base + "/redfish/v1/Systems"
    for url, args in ((systems, ()), (systems + "/server", ()), (base + "/redfish/v1/Managers", ()),
                      (systems, ("-u", "krig:wrong")),
                      (systems + "/server/Actions/ComputerSystem.Reset",
                       ("-X", "POST", "-H", "Content-Type: application/json", "-d", '{"ResetType": "ForceOff"}'))):
        code, body = _curl(who, url, *args)
        assert code == "401", (who, url, code, body)
        assert bench.password not in body
    dom = bench.domain()
    try:
        assert dom.isActive()
    finally:
        dom.connect().close()


class _Media(BaseHTTPRequestHandler):
    hits: list = []

    def do_GET(self):
        self.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Disposition", 'attachment; filename="../../../../etc/krig-planted"')
        self.end_headers()
        self.wfile.write(b"iso")

    def log_message(self, *a):
        pass


def test_virtual_media_is_off(bench):
    """With the password, a VirtualMedia insert (sushy-emulator would download the image and
    name it after the server's Content-Disposition) is refused and nothing is fetched; the
    emulator keeps its state in the lab user's directory, not the shared temp directory."""
    import requests
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Media)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        base, auth = f"https://127.0.0.1:{bench.port}", ("krig", bench.password)
        system = requests.get(base + "/redfish/v1/Systems", auth=auth, verify=str(bench.cert), timeout=30)
        url = base + system.json()["Members"][0]["@odata.id"] + "/VirtualMedia"
        r = requests.get(url, auth=auth, verify=str(bench.cert), timeout=30)
        assert r.status_code == 200 and r.json()["Members"] == [], r.text
        r = requests.post(f"{url}/Cd/Actions/VirtualMedia.InsertMedia", auth=auth, verify=str(bench.cert),
                          json={"Image": f"http://127.0.0.1:{srv.server_port}/x.iso"}, timeout=30)
        assert r.status_code == 404, r.text
    finally:
        srv.shutdown()
        srv.server_close()
    assert _Media.hits == [] and not os.path.exists("/etc/krig-planted")
    state = bench.run / "sushy" / "vmedia.sqlite"
    assert state.exists() and state.stat().st_uid == lab_ids()[0]
    assert pwd.getpwuid(os.lstat(bench.run / "sushy").st_uid).pw_name == "krig-lab"


def test_a_listener_on_the_bmc_port_without_its_certificate_gets_no_password(bench, tmp_path):
    """Whatever took the BMC's address first (here a TLS server with a certificate of its own)
    gets no byte of a request, so no password: the client checks the pinned fingerprint before
    it sends one."""
    import ssl
    from krig.errors import RigError
    from rigs import load_rig
    from rigs.labsim.redfish import listen_local, make_cert
    (tmp_path / "other").mkdir()
    cert, key, _ = make_cert(tmp_path / "other")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    lsock, got = listen_local(), []
    lsock.settimeout(3)

    def serve():
        for _ in range(3):
            try:
                conn = ctx.wrap_socket(lsock.accept()[0], server_side=True)
                conn.settimeout(5)
                got.append(conn.recv(65536))
                conn.close()
            except (OSError, ssl.SSLError) as e:
                got.append(type(e).__name__.encode())
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    port = lsock.getsockname()[1]
    secret = tmp_path / "spoof-password"        # the real password, bound to the address taken first
    secret.touch(mode=0o600)
    secret.write_text(f"{bench.password}\nbmc = 127.0.0.1:{port}\n")
    rig = load_rig(str(bench.rig_file("rfspoof", bmc={"port": port, "password_file": str(secret)})))
    try:
        with pytest.raises(RigError, match=r"presents a certificate with SHA-256 fingerprint .*, not the pinned"):
            rig.bmc.power_status()
    finally:
        rig.bmc.close()
        t.join(15)
        lsock.close()
    assert got and not [g for g in got if bench.password.encode() in g or b"HTTP" in g], got
