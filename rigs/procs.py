"""Child processes that die with krig, started without preexec_fn.

Python documents preexec_fn as unsafe once threads run (the SOL watcher
thread starts ipmitool while the main thread starts ssh and tar), so the
parent-death signal is set by util-linux's `setpriv --pdeathsig KILL`, which
then execs the real program: same pid, same argv in /proc, and a SIGKILL of
krig still takes every rig child with it. As with PR_SET_PDEATHSIG itself,
"parent" is the thread that started the child: start children from threads
that live as long as the children should.
"""
import shutil

SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


def dies_with_parent(argv: list) -> list:
    """argv prefixed so the process gets SIGKILL when krig (the starting thread) dies."""
    return [SETPRIV, "--pdeathsig", "KILL", "--", *[str(a) for a in argv]]
