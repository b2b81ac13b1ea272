"""reproducers/lib/harness.sh on the host, with a stand-in trace-cmd: stopping the
collectors is bounded. A `trace-cmd record` that ignores SIGINT is killed after
KRIG_TRACE_STOP_S, the harness says so in one line (stderr and trace-cmd.log) and still
leaves the workload's exit code; one that ends on SIGINT is waited for, and nothing is said.

The real trace-cmd in a real guest is tests/reproducers/test_trace_ring.py's and the smoke runs'."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

HARNESS = ROOT / "reproducers" / "lib" / "harness.sh"
EVENT = "sched:sched_switch"
# the handler first, then the mark the harness waits for: a SIGINT before it is not lost
ON_INT = ("import os, signal, sys, time; signal.signal(signal.SIGINT, lambda *_: sys.exit(0)); "
          "open(os.environ['KRIG_TRACEFS'] + '/events/sched/sched_switch/enable', 'w').write('1'); "
          "time.sleep(600)")


def _stand_in(bin_dir, pid_file, on_int: str):
    """A trace-cmd whose `record` writes its pid, marks the event enabled and then either
    ignores SIGINT (`exec sleep`, the ignored signal kept) or exits on it. Bash starts a
    background job with SIGINT ignored and a script cannot trap it again; the real trace-cmd
    sets its own handler, as the Python stand-in does."""
    script = f"""#!/bin/bash
[[ $1 == --version ]] && {{ echo "trace-cmd version 0 (stand-in)"; exit 0; }}
[[ $1 == record ]] || exit 0
echo $$ > {pid_file}
{on_int}
"""
    tc = bin_dir / "trace-cmd"
    tc.write_text(script)
    tc.chmod(0o755)


@pytest.mark.parametrize("ignores_int", [True, False])
def test_trace_cmd_record_is_stopped_within_its_bound(tmp_path, ignores_int):
    bin_dir, tracefs, repro, out = (tmp_path / n for n in ("bin", "tracefs", "repro", "out"))
    for d in (bin_dir, tracefs / "events" / "sched" / "sched_switch", repro, tmp_path / "mnt"):
        d.mkdir(parents=True)
    (tracefs / "events" / "sched" / "sched_switch" / "enable").write_text("0\n")
    (repro / "run.sh").write_text("exit 3\n")
    pid_file = tmp_path / "tracer.pid"
    _stand_in(bin_dir, pid_file, "echo 1 > $KRIG_TRACEFS/events/sched/sched_switch/enable; trap '' INT; exec sleep 600"
              if ignores_int
              else f"exec {sys.executable} -c '{ON_INT}'")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KRIG_TRACEFS": str(tracefs),
           "KRIG_TRACE_MODE": "record", "KRIG_TRACE_EVENTS": EVENT, "KRIG_TRACE_STOP_S": "1",
           "KRIG_COLLECT": "1", "KRIG_SCRATCH_DEV": "/dev/null", "KRIG_SCRATCH_MNT": str(tmp_path / "mnt")}
    res = subprocess.run(["bash", str(HARNESS), str(repro), str(out)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 3, res.stderr
    assert (out / "workload.rc").read_text().strip() == "3"
    said = [ln for ln in res.stderr.splitlines() if "trace-cmd record did not end" in ln]
    if ignores_int:
        assert said == ["krig: trace-cmd record did not end within 1s of SIGINT and was killed; "
                        "trace.dat may be cut short"], res.stderr
        assert said[0] in (out / "trace-cmd.log").read_text()
    else:
        assert said == [], res.stderr
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
