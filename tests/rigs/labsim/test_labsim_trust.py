"""A simulated lab server is its starter's: a real `krig lab sim up` (ipmi_sim, and the server's
QEMU once powered on; nothing is booted here) and what another local user, a decoy process and
a second `up` of the same name get from it. The wires themselves: tests/rigs/labsim/test_labsim_wire.py.

Covers: rigs/labsim/bmc.py."""
import json
import os
import pathlib
import re
import socket
import subprocess
import time

import pytest

from conftest import KRIG, ROOT, setup_missing
from labsim_fixture import started_under
from rigs.labsim import image as labsim_image
from rigs.labsim.user import lab_user
from rigs.qemu import confine as qemu_confine
from rigs.labsim.bmc import missing_tools as bmc_missing

pytestmark = pytest.mark.labsim
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def _env(tmp_path):
    return {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "KRIG_LOCK_DIR": str(tmp_path / "locks")}


def _krig(tmp_path, *args, **kw):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, env=_env(tmp_path),
                          timeout=900, **kw)


def _state(tmp_path, name="lab1") -> dict:
    return json.loads((tmp_path / "state" / "krig" / "labsim" / name / "state.json").read_text())


@pytest.fixture
def server(tmp_path):
    """lab1 up (powered off); `down` at the end, and nothing of it left running."""
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the lab server tests")
    p = _krig(tmp_path, "lab", "sim", "up", "lab1")
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        yield _state(tmp_path)
    finally:
        _krig(tmp_path, "lab", "sim", "down", "lab1")
    assert not started_under(tmp_path / "state")


def _power(st: dict, tmp_path, what: str) -> None:
    env = {**os.environ, "IPMI_PASSWORD": pathlib.Path(st["password_file"]).read_text().splitlines()[0]}
    p = subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(st["lan_port"]), "-U", "krig", "-E",
                        "-C", "3", "chassis", "power", what], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr


def _listening(pids: set[int]) -> tuple[set[str], list[str]]:
    """proto:port of every TCP/UDP socket the processes pids listen on, and ss's lines for them."""
    out, lines = set(), []
    for proto in ("-tlnp", "-ulnp"):
        for ln in subprocess.run(["ss", "-H", proto], capture_output=True, text=True).stdout.splitlines():
            if {int(p) for p in re.findall(r"pid=(\d+)", ln)} & pids:
                out.add(f"{proto[1]}:{ln.split()[3].rsplit(':', 1)[1]}")
                lines.append(ln)
    return out, lines


def _uid(pid: int) -> int:
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Uid:")))


def test_another_user_reaches_neither_console_nor_bmc_wires(server, tmp_path):
    """Powered on: ipmi_sim and the server's QEMU run as krig-lab (krig as root; not krig-qemu,
    the QEMU rig's guests' user); the console, the KCS wire and QEMU's COM port are Unix sockets
    that neither nobody (a second local user) nor krig-qemu can connect to; the only ports are
    the IPMI LAN (UDP) and SSH; a local newcomer on the SOL wire is closed and ipmi_sim keeps its
    console; QEMU's COM port is connected to the serial cable's socket."""
    st = server
    _power(st, tmp_path, "on")
    run = pathlib.Path(st["wire"]) / "run"
    for _ in range(300):            # QEMU started and listening (its SSH forward)
        if f"t:{st['ssh_port']}" in _listening({int(ln.split()[0]) for ln in started_under(tmp_path / "state")})[0]:
            break
        time.sleep(0.2)
    procs = {int(ln.split()[0]): ln for ln in started_under(tmp_path / "state")}
    qemu = [p for p, ln in procs.items() if "qemu-system-x86_64" in ln.split()[1]]
    assert len(qemu) == 1 and st["bmc"]["pid"] in procs, procs
    if lab_user() is not None:
        import pwd
        uid = pwd.getpwnam(lab_user()).pw_uid
        assert _uid(qemu[0]) == uid and _uid(st["bmc"]["pid"]) == uid
        assert uid not in (0, pwd.getpwnam(qemu_confine.USER).pw_uid), uid
    ports, lines = _listening(set(procs))
    assert ports == {f"u:{st['lan_port']}", f"t:{st['ssh_port']}"}, (st["lan_port"], st["ssh_port"], procs, lines)
    guest_user = ["setpriv", f"--reuid={qemu_confine.USER}", f"--regid={qemu_confine.USER}", "--clear-groups", "--"]
    for sock in (run.parent / "sol.sock", run / "kcs.sock", run.parent / "serial.sock"):
        code = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print('reached')\n"
                "except PermissionError: print('refused')\n")
        for who in [NOBODY] + ([guest_user] if os.geteuid() == 0 else []):
            p = subprocess.run(who + ["/usr/bin/python3", "-I", "-c", code, str(sock)], capture_output=True,
                               text=True, timeout=30)
            assert p.stdout.strip() == "refused", (who, sock, p.stdout, p.stderr)
    intruder = socket.socket(socket.AF_UNIX)
    intruder.connect(str(run.parent / "sol.sock"))
    intruder.settimeout(10)
    assert intruder.recv(100) == b""            # closed at once
    intruder.close()
    # ipmi_sim still holds the cable's BMC end: its socket's peer is the supervisor's accepted one
    ss = subprocess.run(["ss", "-H", "-xp", "state", "established"], capture_output=True, text=True).stdout
    ends = [ln for ln in ss.splitlines() if f"pid={st['bmc']['pid']}," in ln and "sol.sock" not in ln.split()[3]]
    sup = [ln for ln in ss.splitlines() if f"{run.parent}/sol.sock" in ln and f"pid={st['supervisor']['pid']}," in ln]
    assert len(sup) == 1 and any(ln.split()[4] == sup[0].split()[6] for ln in ends), (sup, ends)
    for _ in range(100):
        ss = subprocess.run(["ss", "-H", "-xp", "state", "established"], capture_output=True, text=True).stdout
        com = [ln for ln in ss.splitlines() if f"{run.parent}/serial.sock" in ln and f"pid={st['supervisor']['pid']}," in ln]
        qemu_ends = [ln for ln in ss.splitlines() if f"pid={qemu[0]}," in ln]
        if len(com) == 1 and any(ln.split()[4] == com[0].split()[6] for ln in qemu_ends):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"QEMU's COM port is not connected to the cable: {com} {qemu_ends}")


def test_down_signals_only_what_it_started(server, tmp_path):
    """Processes of another user whose command lines hold every string that names the server
    (its name, its LAN port as `-p PORT `, its directories) survive its `down`."""
    st = server
    crafted = (f"sleep -p {st['lan_port']} port={st['ssh_port']} {st['base']} {st['wire']} rigs.labsim.sim serve lab1 "
               f"-c {st['wire']}/lan.conf")
    decoys = [subprocess.Popen(NOBODY + ["bash", "-c", f'exec -a "{crafted}" sleep 600']),
              subprocess.Popen(["bash", "-c", f'exec -a "{crafted}" sleep 600'], start_new_session=True)]
    try:
        for _ in range(100):
            if all(crafted in pathlib.Path(f"/proc/{d.pid}/cmdline").read_bytes().decode() for d in decoys):
                break
            time.sleep(0.1)
        down = _krig(tmp_path, "lab", "sim", "down", "lab1")
        assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
        assert not started_under(tmp_path / "state")
        assert [d.poll() for d in decoys] == [None, None]
    finally:
        for d in decoys:
            d.kill()
            d.wait()


def test_two_ups_of_one_name_one_wins(tmp_path):
    """Two `up lab1` at once: one starts it, the other says in one line that lab1 is being
    started; one supervisor, and after `down` nothing left."""
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the lab server tests")
    ups = [subprocess.Popen(KRIG + ["lab", "sim", "up", "lab1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=_env(tmp_path)) for _ in range(2)]
    try:
        outs = [(p.wait(600), *p.communicate()) for p in ups]
        won = [o for o in outs if o[0] == 0 and "BMC ipmi_sim on 127.0.0.1" in o[1]]
        lost = [o for o in outs if o not in won]
        assert len(won) == 1 and len(lost) == 1, outs
        rc, out, err = lost[0]
        assert rc == 3 and len(err.splitlines()) == 1 and "Traceback" not in err, (rc, out, err)
        assert re.search(r"lab sim lab1: being started or stopped by another krig lab sim \(process \d+\)", err), err
        sups = [ln for ln in started_under(tmp_path / "state") if "rigs.labsim.sim serve lab1" in ln]
        assert len(sups) == 1 and int(sups[0].split()[0]) == _state(tmp_path)["supervisor"]["pid"], sups
    finally:
        down = _krig(tmp_path, "lab", "sim", "down", "lab1")
    assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
    assert not started_under(tmp_path / "state")


def test_files_are_not_written_through_planted_links(tmp_path):
    """A link planted at the rig file's or the password's name is left as it is, the `up` refused
    in one line (rigs/labsim/owned.py), its target as it was; with those gone, `up` writes its own
    files; a rig directory that is a link is refused in one line."""
    setup_missing(bmc_missing() + labsim_image.missing_tools(), "the lab server tests")
    rigs, secrets = tmp_path / "config" / "krig" / "rigs", tmp_path / "config" / "krig" / "secrets"
    rigs.mkdir(parents=True)
    secrets.mkdir(mode=0o700)
    targets = [tmp_path / "victim-rig", tmp_path / "victim-secret"]
    for t, link in zip(targets, (rigs / "lab1.toml", secrets / "labsim-lab1-bmc")):
        t.write_text("theirs\n")
        link.symlink_to(t)
    for link in (rigs / "lab1.toml", secrets / "labsim-lab1-bmc"):
        p = _krig(tmp_path, "lab", "sim", "up", "lab1")
        assert p.returncode == 2 and f"NAME: {link} is there" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
        assert link.is_symlink() and [t.read_text() for t in targets] == ["theirs\n", "theirs\n"]
        link.unlink()
    try:
        p = _krig(tmp_path, "lab", "sim", "up", "lab1")
        assert p.returncode == 0, p.stdout + p.stderr
        assert [t.read_text() for t in targets] == ["theirs\n", "theirs\n"]
        assert not (rigs / "lab1.toml").is_symlink() and "[bmc]" in (rigs / "lab1.toml").read_text()
        secret = secrets / "labsim-lab1-bmc"
        assert not secret.is_symlink() and oct(secret.stat().st_mode & 0o777) == "0o600"
    finally:
        assert _krig(tmp_path, "lab", "sim", "down", "lab1").returncode == 0
    (tmp_path / "elsewhere").mkdir()
    os.rename(rigs, tmp_path / "rigs-was")
    rigs.symlink_to(tmp_path / "elsewhere")
    p = _krig(tmp_path, "lab", "sim", "up", "lab1")
    assert p.returncode == 3 and len(p.stderr.splitlines()) == 1, p.stdout + p.stderr
    assert f"{rigs}: refused: a symlink" in p.stderr and not list((tmp_path / "elsewhere").iterdir())
    assert not started_under(tmp_path / "state")
