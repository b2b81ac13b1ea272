"""A simulated IPMI server's BMC admits only its own user with its password, over cipher suite 3:
the real ipmi_sim as SimServer starts it (rigs/labsim/bmc.py), its server never powered on (no
guest boots; seconds). Each refusal is tried as `nobody` and, when the tests run as root, as
`krig-qemu` (the QEMU rig's guests' user) and `krig-lab` (the server's own QEMU's); ipmi_sim
itself runs as `krig-lab`, and its LAN port stays krig's while ipmi_sim is down."""
import os
import pathlib
import pwd
import socket
import subprocess
import time
import types

import pytest

from conftest import setup_missing
from rigs.labsim.bmc import SimServer, missing_tools
from rigs.labsim.user import USER as LAB_USER
from rigs.qemu import confine as qemu_confine

pytestmark = pytest.mark.ipmi
ROOT_RUN = os.geteuid() == 0
ME = "root" if ROOT_RUN else pwd.getpwuid(os.geteuid()).pw_name      # krig's own user
USERS = ["nobody"] + ([qemu_confine.USER] if ROOT_RUN else [])
# the BMC's refusals hold for the server's own user too (a guest that escaped its QEMU)
AUTH_USERS = USERS + ([LAB_USER] if ROOT_RUN else [])


def _as(user: str) -> list:
    if user == "root":
        return []
    pw = pwd.getpwnam(user)
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--"]


@pytest.fixture(scope="module")
def bmc(tmp_path_factory):
    """ipmi_sim of a SimServer whose server is never powered on (its kernel a file never booted)."""
    setup_missing(missing_tools(), "the IPMI BMC tests")
    base = tmp_path_factory.mktemp("bmcauth")
    (base / "vmlinuz").write_bytes(b"never booted: the chassis stays off\n")
    (base / "initrd").write_bytes(b"never booted\n")
    server = SimServer(base / "srv", types.SimpleNamespace(image=base / "vmlinuz"), base / "initrd")
    server.base.mkdir()
    try:
        server.start()
        yield server
    finally:
        server.stop()
    assert not server.own(), server.own()


def _ipmitool(server, user: str, *how: str, password: str | None = None) -> subprocess.CompletedProcess:
    """ipmitool as `user` against the BMC: chassis power status; the password through the
    environment (-E), never argv."""
    env = {**os.environ, "IPMI_PASSWORD": server.password if password is None else password}
    return subprocess.run(_as(user) + ["ipmitool", "-H", "127.0.0.1", "-p", str(server.lan_port), *how, "-E",
                                       "-N", "1", "-R", "1", "chassis", "power", "status"],
                          capture_output=True, text=True, timeout=60, env=env, cwd="/")


def _refused(p: subprocess.CompletedProcess) -> bool:
    return p.returncode != 0 and "Chassis Power is" not in p.stdout and "Unable to establish" in p.stderr


def test_the_right_user_password_and_cipher_suite_3_work(bmc):
    """krig's own call (rigs/ipmi/bmc.py: -I lanplus -C 3, the password in the environment)."""
    p = _ipmitool(bmc, ME, "-I", "lanplus", "-C", "3", "-U", "krig", "-L", "ADMINISTRATOR")
    assert p.returncode == 0 and "Chassis Power is off" in p.stdout, (p.stdout, p.stderr)


@pytest.mark.parametrize("user", AUTH_USERS)
def test_cipher_suite_0_with_a_wrong_password_is_refused(bmc, user):
    p = _ipmitool(bmc, user, "-I", "lanplus", "-C", "0", "-U", "krig", "-L", "ADMINISTRATOR", password="wrong")
    assert _refused(p), (p.stdout, p.stderr)


@pytest.mark.parametrize("user", AUTH_USERS)
def test_cipher_suite_0_even_with_the_password_is_refused(bmc, user):
    """Suite 0 authenticates nobody: not offered even to whoever knows the password."""
    p = _ipmitool(bmc, user, "-I", "lanplus", "-C", "0", "-U", "krig")
    assert _refused(p), (p.stdout, p.stderr)


@pytest.mark.parametrize("user", AUTH_USERS)
@pytest.mark.parametrize("suite", ["1", "2"])
def test_suites_without_integrity_or_confidentiality_are_refused(bmc, user, suite):
    p = _ipmitool(bmc, user, "-I", "lanplus", "-C", suite, "-U", "krig")
    assert _refused(p), (suite, p.stdout, p.stderr)


@pytest.mark.parametrize("user", AUTH_USERS)
def test_ipmi_1_5_authentication_none_is_refused(bmc, user):
    p = _ipmitool(bmc, user, "-I", "lan", "-A", "NONE", "-U", "krig", password="wrong")
    assert _refused(p), (p.stdout, p.stderr)


@pytest.mark.parametrize("user", AUTH_USERS)
def test_a_wrong_password_with_cipher_suite_3_is_refused(bmc, user):
    p = _ipmitool(bmc, user, "-I", "lanplus", "-C", "3", "-U", "krig", password="wrong")
    assert _refused(p), (p.stdout, p.stderr)


@pytest.mark.parametrize("user", AUTH_USERS)
def test_the_anonymous_user_is_refused(bmc, user):
    p = _ipmitool(bmc, user, "-I", "lanplus", "-C", "3", "-U", "", password="")
    assert _refused(p), (p.stdout, p.stderr)


def test_ipmi_sim_runs_as_krig_lab(bmc):
    """Never root, never the QEMU rig's guests' user."""
    uid = int(next(ln.split()[1] for ln in pathlib.Path(f"/proc/{bmc.proc.pid}/status").read_text().splitlines()
                   if ln.startswith("Uid:")))
    want = pwd.getpwnam(LAB_USER).pw_uid if ROOT_RUN else os.geteuid()
    assert uid == want and uid != 0, uid
    if ROOT_RUN:
        assert uid != pwd.getpwnam(qemu_confine.USER).pw_uid


@pytest.mark.parametrize("user", USERS)
def test_no_other_user_reaches_the_bmc_sockets(bmc, user):
    """The KCS wire (ipmi_sim's) and the console's BMC end (krig's serial cable): refused."""
    code = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print('reached')\n"
            "except PermissionError: print('refused')\n")
    for sock in (bmc.wire / "run" / "kcs.sock", bmc.wire / "sol.sock"):
        assert sock.exists(), sock
        p = subprocess.run(_as(user) + ["/usr/bin/python3", "-I", "-c", code, str(sock)], capture_output=True,
                           text=True, timeout=30)
        assert p.stdout.strip() == "refused", (sock, p.stdout, p.stderr)
    if ROOT_RUN:        # ipmi_sim's own user reaches its KCS wire (QEMU's connection)
        p = subprocess.run(_as(LAB_USER) + ["/usr/bin/python3", "-I", "-c", code, str(bmc.wire / "run" / "kcs.sock")],
                           capture_output=True, text=True, timeout=30)
        assert p.stdout.strip() == "reached", (p.stdout, p.stderr)


def test_a_kcs_peer_that_leaves_at_once_never_ends_the_bmc(bmc):
    """A peer that connects to the KCS wire and closes it before ipmi_sim writes (as a server's
    QEMU killed at power off does): ipmi_sim's write fails, and the BMC lives on and answers
    (without krig_unix.c's SIGPIPE rule it died of SIGPIPE within a few such peers)."""
    for _ in range(40):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(bmc.wire / "run" / "kcs.sock"))
        time.sleep(0.05)
    time.sleep(0.5)
    assert bmc.proc.poll() is None, f"ipmi_sim ended: {bmc.proc.returncode}"
    p = _ipmitool(bmc, ME, "-I", "lanplus", "-C", "3", "-U", "krig", "-L", "ADMINISTRATOR")
    assert p.returncode == 0 and "Chassis Power is off" in p.stdout, (p.stdout, p.stderr)


def test_the_lan_port_is_krigs_while_the_bmc_is_down(bmc):
    """krig binds the LAN port and hands it to ipmi_sim: with ipmi_sim killed, another user still
    cannot bind it (nothing else can answer there as the BMC), and a new ipmi_sim gets it again."""
    bmc.kill_bmc()
    code = ("import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            "try:\n s.bind(('127.0.0.1',int(sys.argv[1]))); print('bound')\nexcept OSError: print('taken')\n")
    try:
        for user in USERS:
            p = subprocess.run(_as(user) + ["/usr/bin/python3", "-I", "-c", code, str(bmc.lan_port)],
                               capture_output=True, text=True, timeout=30)
            assert p.stdout.strip() == "taken", (user, p.stdout, p.stderr)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, pytest.raises(OSError):
            s.bind(("127.0.0.1", bmc.lan_port))
    finally:
        bmc.start_bmc()
    assert bmc.power_status() == "off"
