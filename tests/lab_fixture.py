"""A real labgrid-coordinator on 127.0.0.1 for the lab tests, and labgrid-client to check it.

The coordinator runs in its own directory (it writes places.yaml and
resources.yaml there) and dies with the test process; stop() kills it and
waits for it to be gone. labgrid-client is the independent view: what a lab's
users would see.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from rigs.labsim.bmc import free_port
from krig.paths import dies_with_parent

BIN = pathlib.Path(sys.executable).parent
COORDINATOR = str(BIN / "labgrid-coordinator")
CLIENT = str(BIN / "labgrid-client")


class Coordinator:
    def __init__(self, base: pathlib.Path):
        self.base = base
        self.base.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.log = base / "coordinator.log"
        self.proc: subprocess.Popen | None = None

    def start(self):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(dies_with_parent([COORDINATOR, "-l", self.addr]), cwd=self.base,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        for _ in range(100):
            if self.proc.poll() is not None:
                raise RuntimeError(f"labgrid-coordinator exited {self.proc.returncode}: {self.log.read_text()[-500:]}")
            if f"listening on 127.0.0.1:{self.port}" in self.log.read_text(errors="replace"):
                return self
            time.sleep(0.1)
        raise RuntimeError(f"labgrid-coordinator does not listen on {self.addr}")

    def kill(self, sig=signal.SIGKILL):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(15)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def client(self, *args, timeout=60) -> subprocess.CompletedProcess:
        return subprocess.run([CLIENT, "-x", self.addr, *args], capture_output=True, text=True, timeout=timeout)

    def who(self) -> list[str]:
        """Locked places, one line each (labgrid-client who, header dropped)."""
        p = self.client("who")
        assert p.returncode == 0, p.stderr
        return [ln for ln in p.stdout.splitlines()[1:] if ln.strip()]

    def reservations(self) -> str:
        p = self.client("reservations")
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    def waiting(self) -> int:
        return self.reservations().count("state: waiting")


def start_holder(path: pathlib.Path, place: str, prio: float, seconds: float, lease: float,
                 env: dict) -> subprocess.Popen:
    """hold_script as a process in its own session, its output in `path`."""
    with open(path, "wb") as out:
        return subprocess.Popen(hold_script(place, prio, seconds, lease), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                cwd=pathlib.Path(__file__).resolve().parent.parent)


def facts_of(path: pathlib.Path, what: str = "DONE") -> dict | None:
    """The facts a holder printed on its HELD or DONE line (None if not yet)."""
    for ln in path.read_text(errors="replace").splitlines():
        if ln.startswith(what + " "):
            return json.loads(ln[len(what) + 1:])
    return None


def wait_for(cond, timeout: float, what: str, step: float = 0.5):
    """Poll cond() until true; bounded."""
    for _ in range(int(timeout / step) + 1):
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def hold_script(place: str, prio: float, seconds: float, lease: float, wait: float = 300) -> list:
    """argv of a small controller that holds `place` through rigs.lab for `seconds`, printing its facts."""
    code = ("import json, signal, sys, time\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from rigs import lab\n"
            f"h = lab.Coordinator(lab.address()).hold({place!r}, {prio!r}, {wait!r}, {lease!r})\n"
            "print('HELD', json.dumps(h.facts), flush=True)\n"
            "try:\n"
            f"    time.sleep({seconds!r})\n"
            "finally:\n"
            "    h.release()\n"
            "    print('DONE', json.dumps(h.facts), flush=True)\n")
    return [sys.executable, "-c", code]
