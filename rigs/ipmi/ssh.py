"""Commands and files on a server over OpenSSH.

Host keys are always checked against the rig's own known_hosts
(StrictHostKeyChecking=yes, no global file, never updated); BatchMode=yes so
nothing ever prompts. argv is quoted word by word for the remote shell; the
environment is passed as `env -i NAME=value ...` words, names checked. Every remote
command runs with krig's PATH (BASE_PATH), and what it writes is read as it comes, at most
a cap a stream (rigs/procs.py drain): a server can neither pick the programs nor fill
krig's memory or disk.
"""
import pathlib
import re
import shlex
import subprocess
import time

from krig.errors import RigError
from krig.safeio import printable
from rigs.ipmi.spec import IpmiSpecSsh
from rigs.procs import Overflow, drain, log_line, stop_group
from rigs.ipmi.pull import stream_from
from krig.paths import dies_with_parent

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The PATH of everything krig runs on a server: the system's own directories, never a
# /usr/local or a home directory a workload (or anyone) may have put a `uname` or an `env` in.
BASE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
READ_CAP = 16 << 20         # what krig reads of a remote command's stdout (Ssh.run caps=)
ERR_CAP = 1 << 20           # ... and of its stderr
_PATH_SET = f"PATH={BASE_PATH}; export PATH; "
# ssh's own messages when it (not the remote command) fails; its exit code is then 255.
_HOSTKEY = re.compile(r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|"
                      r"No \S+ host key is known for|host key for \S+ has changed", re.I)
_AUTH = re.compile(r"Permission denied \(|Too many authentication failures|Load key .*: ", re.I)
_LOST = re.compile(r"Connection to \S+ closed by remote host|Timeout, server \S+ not responding|"
                   r"client_loop: |Connection reset|Broken pipe|Connection closed by|"
                   r"connect to host \S+ port \d+: |Connection timed out|kex_exchange_identification|"
                   r"banner exchange|No route to host|Network is unreachable|Could not resolve|mux_client|"
                   r"Control socket|master", re.I)


class HostKeyError(RigError):
    pass


class SshLost(Exception):
    """ssh itself failed: no connection, or the connection died. Not a KrigError on purpose."""

    def __init__(self, message: str, connected: bool):
        super().__init__(message)
        self.connected = connected


def remote_command(argv: list, env: dict | None, cwd: str | None = None, rc_file: str | None = None) -> str:
    """One shell string for the remote login shell: every word shlex-quoted.

    With rc_file, the command's exit code is also written there, so an exit
    code 255 of the command can be told from ssh's own 255 (see Ssh.run)."""
    words = ["env", "-i", f"PATH={BASE_PATH}", "LANG=C.UTF-8"]
    for k, v in (env or {}).items():
        if not ENV_NAME.match(str(k)):
            raise RigError(f"environment variable name {k!r} cannot be passed over SSH")
        words.append(f"{k}={v}")
    words += [str(a) for a in argv]
    cmd = "exec " + " ".join(shlex.quote(w) for w in words)
    if rc_file:
        q = shlex.quote(rc_file)
        cmd = f"rm -f {q}; {cmd[5:]}; rc=$?; echo $rc > {q}; exit $rc"
    return f"cd {shlex.quote(cwd)} && {cmd}" if cwd else cmd


class Ssh:
    def __init__(self, rig: str, cfg: IpmiSpecSsh):
        """cfg: the rig file's [ssh] table, checked (rigs/ipmi/spec.py SSH)."""
        self.rig = rig
        self.cfg = cfg
        self.target = f"{cfg.user}@{cfg.host}:{cfg.port}"
        self.control: pathlib.Path | None = None     # socket of our own master connection
        self.master: subprocess.Popen | None = None
        self.log_path: pathlib.Path | None = None

    def _log(self, line: str):
        log_line(self.log_path, line)

    def _options(self, connect_timeout: float | None = None, mux: bool = False) -> list:
        c = self.cfg
        a = ["-F", "none", "-T", "-p", str(c.port), "-l", c.user, "-i", c.key,
             "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
             "-o", f"UserKnownHostsFile={c.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
             "-o", "UpdateHostKeys=no", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
             "-o", f"ConnectTimeout={int(connect_timeout or c.connect_timeout)}",
             "-o", f"ServerAliveInterval={c.alive_interval}", "-o", f"ServerAliveCountMax={c.alive_count}"]
        use = (mux and self.master is not None and self.master.poll() is None and self.control is not None
               and self.control.exists())
        a += ["-o", "ControlMaster=no", "-o", f"ControlPath={self.control if use else 'none'}"]
        if c.host_key_alias:
            a += ["-o", f"HostKeyAlias={c.host_key_alias}"]
        for o in c.options:
            a += ["-o", o]
        return a

    def argv(self, remote: str, connect_timeout: float | None = None, mux: bool = True) -> list:
        return ["ssh", *self._options(connect_timeout, mux), "--", self.cfg.host, self.as_root(remote)]

    def as_root(self, remote: str) -> str:
        """Everything krig runs on a server runs as root, with krig's PATH (BASE_PATH, set before
        the first word, whatever the server's login PATH puts first): a user other than root goes
        through `sudo -n` (never a password prompt; sudo fails at once if it would ask), whose
        shell sets that PATH again (sudo's secure_path may differ)."""
        remote = f"{_PATH_SET}{remote}"
        if self.cfg.user == "root":
            return remote
        return f"{_PATH_SET}sudo -n -- sh -c {shlex.quote(remote)}"

    def start_master(self, sock_dir: pathlib.Path) -> bool:
        """One connection that later commands share (ControlMaster): a TCG guest or a
        busy server answers a new SSH handshake slowly. Our own child, never a daemon."""
        self.stop_master()
        self.control = sock_dir / "ssh-mux"
        self.control.unlink(missing_ok=True)
        opts = [o if not o.startswith("ControlMaster=") else "ControlMaster=yes" for o in self._options()]
        opts = [o if not o.startswith("ControlPath=") else f"ControlPath={self.control}" for o in opts]
        self.master = subprocess.Popen(dies_with_parent(["ssh", *opts, "-N", "--", self.cfg.host]),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True)
        ok = wait_until(lambda: self.control.exists() or self.master.poll() is not None,
                        self.cfg.connect_timeout + 5, 0.2)
        if not (ok and self.control.exists()):
            self.stop_master()
            return False
        return True

    def stop_master(self):
        if self.master is not None:
            stop_group(self.master, 3)
            self.master = None
        if self.control is not None:
            self.control.unlink(missing_ok=True)

    def _check_ssh_error(self, rc: int, err: str):
        """Raise for failures of ssh itself (rc 255 plus an ssh message)."""
        if rc != 255:
            return
        if _HOSTKEY.search(err):
            known = "is not in" if re.search(r"No \S+ host key is known", err) else "does not match"
            raise HostKeyError(f"rig {self.rig}: the SSH host key of {self.target} {known} "
                               f"{self.cfg.known_hosts}; refusing to connect (fix known_hosts)")
        if _AUTH.search(err):
            raise RigError(f"rig {self.rig}: SSH login to {self.target} with key {self.cfg.key} "
                           f"was refused: {_last_line(err)}")
        if _LOST.search(err) or not err.strip():
            connected = not re.search(r"connect to host|Connection refused|Connection timed out|"
                                      r"kex_exchange|banner exchange|No route|unreachable|resolve", err, re.I)
            raise SshLost(_last_line(err) or "ssh exited 255", connected)

    def run(self, remote: str, timeout: float, stdin=None, stdout=None, stderr=None,
            connect_timeout: float | None = None, mux: bool = True,
            rc_file: str | None = None, caps: tuple = (READ_CAP, ERR_CAP),
            what: str | None = None) -> tuple[int, bytes, bytes]:
        """Run a remote shell string. Returns (rc, stdout, stderr) of the remote command.

        ssh exits 255 both when it fails and when the remote command does: with
        rc_file (where remote_command(..., rc_file=) writes the exit code), a 255
        is the command's own if a second connection reads 255 from that file.

        stdout and stderr are read as they come (rigs/procs.py drain), each at most its cap
        (caps: stdout, stderr); past one, ssh is killed and Overflow (a RigError) names the cap.
        Raises subprocess.TimeoutExpired (ssh killed), SshLost, HostKeyError/RigError.
        stdout/stderr may be open files (then the returned bytes are empty).
        """
        t0 = time.monotonic()
        argv = self.argv(remote, connect_timeout, mux)
        p = subprocess.Popen(dies_with_parent(argv),
                             stdin=stdin if stdin is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        label = f"rig {self.rig}: {what or 'a command on the server'} (over SSH)"
        try:
            out, err, err_tail = drain(p, timeout, caps, label, (stdout, stderr))
        except subprocess.TimeoutExpired:
            self._log(f"ssh {remote[:100]!r}: killed after {timeout:.0f}s")
            raise
        except Overflow as e:
            self._log(f"ssh {remote[:100]!r}: killed: {e}")
            raise
        self._log(f"ssh {remote[:100]!r} -> rc {p.returncode} in {time.monotonic() - t0:.1f}s"
                  + (" (shared connection)" if "ControlPath=none" not in argv else ""))
        err_text = (err if stderr is None else err_tail).decode(errors="replace")
        if p.returncode == 255 and rc_file and self._remote_rc(rc_file) == "255":
            self._log(f"ssh {remote[:100]!r}: 255 is the command's own exit code ({rc_file})")
            return 255, out, err
        self._check_ssh_error(p.returncode, err_text)
        return p.returncode, out, err

    def _remote_rc(self, rc_file: str) -> str | None:
        """The exit code the remote wrapper wrote, or None if the server does not answer."""
        try:
            rc, out, _ = self.run(f"cat -- {shlex.quote(rc_file)} 2>/dev/null",
                                  timeout=self.cfg.connect_timeout + 10, mux=False)
        except (SshLost, subprocess.TimeoutExpired):
            return None
        return out.decode(errors="replace").strip() if rc == 0 else None

    def probe(self, timeout: float) -> str | None:
        """The machine's boot_id if it answers SSH now, else None (host key errors still raise)."""
        try:
            rc, out, _ = self.run("cat /proc/sys/kernel/random/boot_id", timeout=timeout + 5, mux=False,
                                  connect_timeout=max(1, min(timeout, self.cfg.connect_timeout)))
        except (SshLost, subprocess.TimeoutExpired):
            return None
        return out.decode(errors="replace").strip() if rc == 0 else None

    def pipe_to(self, remote: str, producer: list, timeout: float) -> None:
        """`producer | ssh remote`, e.g. tar c ... | ssh 'tar x'. Raises RigError on failure."""
        prod = subprocess.Popen(dies_with_parent(producer), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        assert prod.stdout is not None and prod.stderr is not None     # both pipes
        try:
            rc, _, err = self.run(remote, timeout=timeout, stdin=prod.stdout)
        finally:
            prod.stdout.close()
            try:
                prod.wait(30)
            except subprocess.TimeoutExpired:
                stop_group(prod)
        if prod.returncode != 0:
            raise RigError(f"rig {self.rig}: {producer[0]} failed: {_last_line(prod.stderr.read().decode(errors='replace'))}")
        if rc != 0:
            raise RigError(f"rig {self.rig}: remote `{remote[:60]}` failed (exit {rc}): "
                           f"{_last_line(err.decode(errors='replace'))}")

    def pipe_from(self, remote: str, consume, timeout: float) -> tuple[int | None, str, object]:
        """`ssh remote | consume(stream)`: the remote command's stdout read in this process
        (rigs/ipmi/pull.py stream_from), all of it within timeout (subprocess.TimeoutExpired,
        ssh killed). Returns (exit code or None, the end of ssh's stderr, what consume
        returned); check_exit() tells what the exit code means."""
        t0 = time.monotonic()
        try:
            rc, err, result = stream_from(self.argv(remote), consume, timeout, f"ssh {remote[:60]}")
        except subprocess.TimeoutExpired:
            self._log(f"ssh {remote[:100]!r}: killed after {timeout:.0f}s")
            raise
        self._log(f"ssh {remote[:100]!r} | krig -> rc {rc} in {time.monotonic() - t0:.1f}s")
        return rc, err, result

    def check_exit(self, remote: str, rc: int, err: str) -> None:
        """Raise for a failure of ssh itself (SshLost, HostKeyError) or of the remote command."""
        self._check_ssh_error(rc, err)
        if rc != 0:
            raise RigError(f"rig {self.rig}: remote `{remote[:60]}` failed (exit {rc}): {_last_line(err)}")


def _last_line(text: str) -> str:
    """The last line of a server's (or ssh's) stderr, printable: no escape sequence of the server's."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return printable(lines[-1], 300) if lines else ""


def wait_until(pred, timeout: float, interval: float = 1.0):
    """Poll pred() until truthy or timeout; bounded in count and time. Returns the last value."""
    deadline = time.monotonic() + timeout
    v = None
    for _ in range(int(timeout / max(interval, 0.05)) + 2):
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)
    return v
