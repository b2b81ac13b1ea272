"""What a lab server's boot leaves to pull (rigs/ipmi/server.py IpmiServer): its remote results
directory, pulled over SSH into the run (only regular files and directories, rigs/ipmi/pull.py),
or before a power off while the server still answers, and kept for the run's pull then."""
import pathlib
import subprocess
import tempfile

from typing import Any

from krig import progress
from krig.errors import KrigError
from rigs.ipmi.spec import ServerSpec
from rigs.ipmi.pull import Refused, pull_results
from rigs.ipmi.ssh import Ssh, SshLost
from rigs.ipmi.state import ServerState


class ServerResults:
    """The results pull of IpmiServer, which sets these in its __init__."""
    name: str
    spec: ServerSpec[Any]
    ssh: Ssh
    facts: dict
    boot_id: str | None
    workdir: pathlib.Path | None
    _state: ServerState
    results: str | None             # this boot's remote results directory, once made
    prefetched: tuple[str, pathlib.Path, Refused | None] | None     # (remote, local dir, why refused)
    salvaged: bool                  # pulled (or refused) already: not pulled again before the power off

    def new_boot(self) -> None:
        """A boot begins: nothing of its results is known yet."""
        self.results, self.prefetched, self.salvaged = None, None, False

    def prefetch_results(self, probe: bool = False):
        """Pull this run's remote results before the server goes off (best effort, bounded)."""
        if self.salvaged or self.results is None or self._state not in (ServerState.UP, ServerState.HUNG):
            return
        self.salvaged = True
        if probe and self.ssh.probe(10) != self.boot_id:
            self.facts["results_pull"] = "not possible: the server does not answer SSH"
            return
        dest = pathlib.Path(tempfile.mkdtemp(prefix="prefetch.", dir=self.workdir))
        try:
            self.pull_over_ssh(self.results, dest, 60 if probe else self.spec.pull_timeout)
            self.prefetched = (self.results, dest, None)
            self.pulled(self.results, refused=False)
        except Refused as e:
            self.prefetched = (self.results, dest, e)       # the files it took are kept; pull() says why
            self.pulled(self.results, refused=True)
        except (KrigError, SshLost, subprocess.TimeoutExpired) as e:
            self.facts["results_pull"] = f"failed: {e or type(e).__name__}"

    def take_prefetched(self, remote: str) -> tuple[pathlib.Path, Refused | None] | None:
        """What prefetch_results() pulled of remote before a power off (the files, and why some
        were refused), once; None when nothing of remote was."""
        if self.prefetched is None or self.prefetched[0] != remote:
            return None
        _, src, refused = self.prefetched
        self.prefetched = None
        return src, refused

    def pulled(self, remote: str, refused: bool) -> None:
        """remote was pulled (refused: some of its entries were refused); the results directory
        is not pulled again before the power off."""
        if remote == self.results:
            self.salvaged = True
            self.facts["results_pull"] = "refused entries (pull_error)" if refused else "pulled before the power off"

    def pull_over_ssh(self, remote: str, local: pathlib.Path, timeout: float):
        """The directory remote into local: only regular files and directories (rigs/ipmi/pull.py)."""
        local.mkdir(parents=True, exist_ok=True)
        with progress.waiting(f"the results to come over SSH from the server {self.name}", timeout):
            pull_results(self.ssh, remote, local, timeout, self.spec.pull_max_size,
                         self.spec.pull_max_file_size)
