"""A QEMU guest's commands: the mailbox krig shares with the guest's agent (rigs/guest/agent.sh).

krig posts a request as files in ctl/ of the run's writable 9p share (N.argv, N.env, then
N.req, each written as a new file renamed into place) and the agent answers with N.out, N.err
and, last, N.rc. Everything the guest writes there is read back as data: a regular file, no
link followed, capped at OUTPUT_CAP (krig/safeio.py). On a timeout the agent's watcher of that
command can run a salvage command first (the trace a hung run would lose).

`machine` is the rig's QemuMachine (rigs/qemu/rig.py): its share, name and facts, and alive(),
died(), timed_out(), stopped.
"""
import pathlib
import time

from krig import safeio
from krig.errors import GuestHung, KrigError, RigError
from rigs.protocol import OUTPUT_CAP, SALVAGE_TIMEOUT, CommandProtocol, CommandResult


class MailboxCommand(CommandProtocol):
    """The CommandProtocol of a QEMU guest: requests posted to the guest agent's mailbox
    (ctl/ in the run's share), answers read back safely and capped."""

    def __init__(self, machine):
        self.m = machine
        self.n = 0

    def run(self, argv, env=None, timeout=60, salvage=None):
        r = self.m
        if not r.alive():
            raise r.died(f"before running {argv[0]}")
        n = self.n
        self.n += 1
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": "/run/krig/home", "LANG": "C.UTF-8", **(env or {})}
        t0 = time.monotonic()
        end = self._wait(self._post(str(n), argv, env), timeout)
        if end == "died":
            raise r.died(f"while running {argv[0]}")
        if end == "timeout":
            r.timed_out()
            if salvage and not r.stopped:   # a stopped emulator runs no salvage either
                r.facts["salvage"] = self._salvage(n, salvage)
            raise GuestHung(f"{' '.join(map(str, argv))} did not finish within {timeout:.0f}s")
        rc = self._rc(f"{n}.rc")
        return CommandResult(list(argv), rc, self._read(f"{n}.out"), self._read(f"{n}.err"),
                             time.monotonic() - t0)

    def _read(self, name: str, cap: int = OUTPUT_CAP) -> bytes:
        """A file of the agent's mailbox: a regular file, no link followed, capped (rigs/qemu/share.py)."""
        try:
            return safeio.read_bytes(self.m.share, f"ctl/{name}", cap)
        except KrigError as e:
            raise RigError(f"rig {self.m.name}: the guest's ctl/{name}: {str(e).rsplit(': ', 1)[-1]}") from None

    def _rc(self, name: str) -> int:
        text = self._read(name, 64).decode(errors="replace").strip()
        if not text:
            return 255
        if not text.isdigit() or int(text) > 255:
            raise RigError(f"rig {self.m.name}: the guest's ctl/{name} holds {text[:20]!r}, not an exit status")
        return int(text)

    def _post(self, name: str, argv, env: dict | None = None) -> pathlib.Path:
        """A request in the agent's mailbox: NAME.argv (and NAME.env), then NAME.req.
        Returns the NAME.rc the agent writes last. Each is written as a new file renamed into
        place (krig/safeio.py): a link the guest left under that name is replaced, never followed."""
        ctl = self.m.share / "ctl"
        try:
            safeio.write_bytes(self.m.share, f"ctl/{name}.argv", b"".join(str(a).encode() + b"\0" for a in argv))
            if env is not None:
                safeio.write_bytes(self.m.share, f"ctl/{name}.env",
                                   b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
            safeio.write_bytes(self.m.share, f"ctl/{name}.req", b"")
        except (OSError, KrigError) as e:
            raise RigError(f"rig {self.m.name}: cannot post {name} to the guest's mailbox: {e}") from None
        return ctl / f"{name}.rc"

    def _wait(self, rc_file: pathlib.Path, timeout: float) -> str | None:
        """None once rc_file is there; "died" if the machine died first, "timeout" after timeout."""
        t0 = time.monotonic()
        while not rc_file.exists():
            if not self.m.alive():
                return "died"
            if time.monotonic() - t0 > timeout:
                return "timeout"
            time.sleep(0.1)
        return None

    def _salvage(self, n: int, argv: list) -> str:
        """Ask the agent's watcher of command n to run argv (with n's environment); one line
        on how it went."""
        t0 = time.monotonic()
        rc_file = self._post(f"{n}.salvage", argv)
        end = self._wait(rc_file, SALVAGE_TIMEOUT)
        if end == "died":
            return "the machine died during the salvage"
        if end == "timeout":
            return f"no answer within {SALVAGE_TIMEOUT}s (the agent is stuck too)"
        try:
            return f"ran in {time.monotonic() - t0:.1f}s, exit {self._rc(rc_file.name)}"
        except RigError as e:
            return str(e)

    def partial_output(self) -> tuple[bytes, bytes]:
        """stdout/stderr of the last command so far (kept when it hangs)."""
        ctl = self.m.share / "ctl"
        n = self.n - 1
        def read(name):
            try:
                return self._read(name) if (ctl / name).exists() else b""
            except RigError as e:
                return f"krig: {e}\n".encode()
        return read(f"{n}.out"), read(f"{n}.err")
