"""The host's own sshd on 127.0.0.1 with keys made here, for tests that need a real SSH server
and no guest (tests/project/test_security.py, tests/rigs/ipmi/test_hostile_server.py).

One sshd a module: `running_sshd(dir, keys)` makes a host key, the client key `client_key`
(a plain root login) and one key per entry of `keys` (name -> the authorized_keys options of
that key, such as `command="..."` for a server whose every answer is that command's, or
`environment="PATH=..."`: PermitUserEnvironment is on), and a known_hosts that pins the host
key. The sshd is stopped (its process group) when the block ends.
"""
import contextlib
import os
import signal
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=60)
    return path.with_name(path.name + ".pub").read_text().strip()


@contextlib.contextmanager
def running_sshd(d, keys: dict | None = None):
    """Yields {"dir": d, "port": port}; skips when not root (only root starts the host's sshd)."""
    import pytest
    from conftest import require_program
    if os.geteuid() != 0:
        pytest.skip(f"running as uid {os.geteuid()}, not root: the host's own sshd only starts as root, "
                    "and who runs the tests is not something `make setup` changes")
    require_program("sshd", "openssh-server")
    host_pub = _keygen(d / "host_key").split()[:2]
    # every login's HOME is a directory of the test's: the host's own ~/.bashrc (which bash runs for
    # a command sshd starts) never runs, least of all with a server's planted PATH
    (d / "home").mkdir(exist_ok=True)
    home = f'environment="HOME={d}/home"'
    lines = [f"{home} {_keygen(d / 'client_key')}"]
    lines += [f"{home},{opts} {_keygen(d / name)}" for name, opts in (keys or {}).items()]
    (d / "authorized_keys").write_text("\n".join(lines) + "\n")
    port = free_port()
    (d / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nUseDNS no\nStrictModes no\nPidFile {d}/sshd.pid\nPrintMotd no\nPermitUserEnvironment yes\nPermitUserRC no\n")
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_pub)}\n")
    pw = d / "bmc-password"
    pw.write_text("unused\nbmc = 127.0.0.1\n")
    pw.chmod(0o600)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)       # sshd's privilege separation directory
    p = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
                         stdout=subprocess.DEVNULL, stderr=open(d / "sshd.log", "wb"), start_new_session=True)
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield {"dir": d, "port": port}
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(10)


def ipmi_rig(sshd, remote_dir: str, key: str = "client_key"):
    """An IPMI rig (its BMC never asked) whose server is this sshd, logging in with `key`."""
    from rigs.ipmi.rig import IpmiRig
    d = sshd["dir"]
    rig = IpmiRig("local", {"driver": "ipmi", "remote_dir": remote_dir,
                            "bmc": {"host": "127.0.0.1", "user": "u", "password_file": str(d / "bmc-password")},
                            "ssh": {"host": "127.0.0.1", "port": sshd["port"], "key": str(d / key),
                                    "known_hosts": str(d / "known_hosts"), "options": ["Compression=no"]}})
    rig.ssh.log_path = d / "ssh.log"
    return rig
