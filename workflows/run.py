"""The run pipeline: reproducer + kernel + rig -> a run directory with a verdict.

Never branches on the kind of rig: only the protocols of rigs/protocol.py.
"""
import contextlib
import os
import pathlib
import signal
import subprocess
import time

from krig import DEFAULT_KERNEL, DEFAULT_RIG, RESULTS_DIR, ROOT, progress, safeio
from .check import check
from krig.errors import GuestCrashed, GuestHung, KrigError, RigError, os_fault
from .history.remember import remember
from .hostload import HostSampler
from krig.paths import owner_record
from krig.knobs import Knobs, applied, apply_argv, summary as knob_summary
from .plan import RunPlan, plan_run
from .preflight import admission_line
from . import serverreach
from .session import Session, power_down
from krig.record import Manifest, Verdict
from krig.record_machine import Machine
from krig.results import claim_run_dir, new_run_dir, now
from krig.version import git_revision
from rigs.hashsize import from_log as hash_tables

FACTS_TIMEOUT = 60
RUN_LOG = "krig.log"         # what krig said of the run, progress included (run_log)


def run(repro_name: str, rig_name: str = DEFAULT_RIG, kernel_name: str = DEFAULT_KERNEL,
        preset: str | None = None, sets: dict | None = None,
        results_root: pathlib.Path = RESULTS_DIR, log=print, collect: bool = True,
        run_dir: pathlib.Path | None = None, workflow: str | None = None,
        knobs: Knobs = Knobs()) -> tuple[pathlib.Path, Verdict]:
    """Returns (run_dir, verdict). Bad input raises UsageError before anything starts.

    collect=False runs the workload without sampler and tracer (for benchmarks).
    run_dir: a new directory to use instead of results/<repro>/<kernel>/<rig>/<time> (a group's run).
    workflow: what the history records the run as (workflows/history/rows.py WORKFLOWS; default:
    what its place in the results says). knobs: the sysctls and boot parameters the run sets
    (krig/knobs.py)."""
    plan = plan_run(repro_name, rig_name, kernel_name, preset, sets, results_root, log, collect, knobs)
    return execute(plan, results_root, log, run_dir, workflow=workflow)


def execute(plan: RunPlan, results_root: pathlib.Path = RESULTS_DIR, log=print,
            run_dir: pathlib.Path | None = None, session: Session | None = None,
            workflow: str | None = None) -> tuple[pathlib.Path, Verdict]:
    """One run of a plan (workflows/plan.py) on a fresh object of its rig: (run_dir, verdict).
    session: the workflow's (workflows/session.py: a group's, a validation's): the rig comes from
    it, kept up from the previous run when it can be, and may stay up in it for the next run
    instead of being powered off. Every run, judged, is written to the history (workflows/history:
    a store that fails costs the run nothing but one line)."""
    repro, kernel, params, collect, host = plan.repro, plan.kernel, plan.params, plan.collect, plan.host
    assert kernel is not None, "a plan runs once its kernel is built (RunPlan.with_kernel)"
    rig = session.take(plan.rig) if session is not None else plan.rig.fresh()
    run_dir = claim_run_dir(results_root, run_dir) if run_dir else \
        new_run_dir(results_root, repro.name, kernel.kernel_id, rig.name)
    manifest = Manifest.begun(repro.name, plan.preset, params, kernel.describe(), kernel.series, rig.describe(),
                              krig_revision=git_revision(), started=now(), collect=collect, owner=owner_record(),
                              preflight=host, host_cpu=host_cpu(), knobs=knobs_asked(plan.knobs))
    manifest.write(run_dir)
    with run_log(run_dir, log) as log:
        log(f"krig: {repro.name} on {rig.name} with kernel {kernel.kernel_id} -> {run_dir}")
        if host.get("sparse_admitted_by") == "host_budget_guard":
            log(admission_line(host))
        reason = _attempt(rig, repro, params, kernel, run_dir, manifest, log, collect, session, plan.knobs)
    try:
        verdict = check(run_dir, repro=repro)
    except OSError as e:
        raise RigError(f"cannot record the verdict in {run_dir}: {os_fault(e)} (run ended: {reason})") from None
    remember(run_dir, workflow, log)
    return run_dir, verdict


def _attempt(rig, repro, params, kernel, run_dir, manifest: Manifest, log, collect, session, knobs) -> str:
    """Boot, run and pull on the rig; how the run ended recorded in the manifest; the rig closed,
    or kept up by the session for the workflow's next run. Returns the reason."""
    outcome, reason = "error", "the run did not start"
    kept = False
    try:
        try:
            try:
                outcome, reason = _drive(rig, repro, params, kernel, run_dir, manifest, log, collect, knobs)
            except GuestHung as e:
                outcome, reason = "hung", str(e)
                try:
                    _save_partial(rig, run_dir)
                except OSError as e2:
                    outcome, reason = "error", f"host: {os_fault(e2)} (while saving the output of a hung run: {e})"
            except GuestCrashed as e:
                outcome, reason = "crashed", str(e)
                manifest.rig_fault = e.rig_fault
            except KrigError as e:
                outcome, reason = "error", str(e)
            except OSError as e:        # the host: a full or read-only disk, ...
                outcome, reason = "error", f"host: {os_fault(e)}"
            finally:
                # Results first: pulled before anything is powered off or removed; a
                # power-off that fails is recorded and never costs the results.
                kept = _end(rig, run_dir, manifest, outcome, reason, session)
        finally:
            if not kept:
                rig.close()
    except KeyboardInterrupt:
        outcome, reason = "interrupted", "interrupted by a signal (SIGINT/SIGTERM)"
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            rig.close()
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    finally:
        # what the verdict rule (krig.verdict.decide) is given: how the run ended, as recorded
        manifest.ended, manifest.outcome, manifest.reason = now(), outcome, reason
        manifest.host_load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        manifest.status = "complete" if outcome != "interrupted" else "incomplete"
        manifest.complete = outcome != "interrupted"
        _final_write(run_dir, manifest)
    return reason


@contextlib.contextmanager
def run_log(run_dir: pathlib.Path, log):
    """The run's log, RUN_LOG in its directory: krig's lines of the run and the progress of its long
    waits (krig/progress.py). Yields `log` writing there too; a directory that refuses the file
    costs the run nothing but its log."""
    try:
        fd = os.open(pathlib.Path(run_dir) / RUN_LOG, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_APPEND, 0o644)
    except OSError:
        yield log
        return

    def both(msg, *a, **k):
        log(msg, *a, **k)
        try:
            f.write(f"{msg}\n")
            f.flush()
        except (OSError, ValueError):
            pass
    with os.fdopen(fd, "a", encoding="utf-8", errors="replace") as f, progress.run_log(f):
        yield both


def _final_write(run_dir, manifest: Manifest):
    """The run's end; if the disk refuses it, one line saying what happened to the run."""
    try:
        manifest.write(run_dir)
    except OSError as e:
        pulled = f"; {manifest.pull_error}" if manifest.pull_error else ""
        raise RigError(f"cannot record the end of the run in {run_dir}: {os_fault(e)} "
                       f"(run ended: {manifest.outcome}: {manifest.reason}{pulled})") from None


def _end(rig, run_dir, manifest: Manifest, outcome: str, reason: str, session) -> bool:
    """The run's end on the rig: results pulled, facts recorded, then the machine powered off, or
    kept up by the session for the workflow's next run (True)."""
    _pull(rig, run_dir, manifest)
    manifest.rig_facts = rig.facts()
    manifest.host_fault = rig.host_fault()
    if session is not None and session.keep(rig, outcome, reason, (run_dir, manifest)):
        return True
    manifest.power_off_error = power_down(rig, outcome == "completed")
    return False


def _pull(rig, run_dir, manifest):
    """Bring the results back; a pull that fails is recorded (the verdict rule makes a finished
    run an ERROR saying where the results are)."""
    try:
        with progress.waiting(f"the results to come back from {rig.name}"):
            rig.files.pull(rig.files.results_dir(), run_dir)
    except KrigError as e:
        manifest.pull_error = str(e)


def _save_partial(rig, run_dir):
    out, err = rig.command.partial_output()
    safeio.write_bytes(run_dir, "stdout", out)
    safeio.write_bytes(run_dir, "stderr", err)


CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
# What makes a machine's numbers incomparable with another's (a lab server's clock policy):
# model, cpufreq governor, turbo (intel_pstate no_turbo, or cpufreq boost), current MHz.
CPU_FACTS = ("sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n1; "
             "cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo -; "
             "if [ -r /sys/devices/system/cpu/intel_pstate/no_turbo ]; then "
             "[ \"$(cat /sys/devices/system/cpu/intel_pstate/no_turbo)\" = 0 ] && echo on || echo off; "
             "elif [ -r /sys/devices/system/cpu/cpufreq/boost ]; then "
             "[ \"$(cat /sys/devices/system/cpu/cpufreq/boost)\" = 1 ] && echo on || echo off; else echo -; fi; "
             "awk -F: '/^cpu MHz/ {s += $2; n++} END {if (n) printf \"%.0f\\n\", s / n; else print \"-\"}' "
             "/proc/cpuinfo")

# the kernel's own boot lines giving its hash table sizes (KERN_INFO: in dmesg whatever the console's loglevel)
HASH_FACTS = "dmesg 2>/dev/null | grep -E 'hash table entries' || true"


def host_cpu() -> dict:
    """CPU_FACTS of the host krig runs on (what an emulated machine's speed rests on)."""
    try:
        p = subprocess.run(["bash", "-c", CPU_FACTS], capture_output=True, text=True, timeout=FACTS_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return cpu_facts([])
    return cpu_facts(p.stdout.splitlines())


def cpu_facts(lines: list) -> dict:
    """CPU_FACTS' four lines -> {model, governor, turbo, mhz} (None for what the machine does not say)."""
    vals = [(ln.strip() if ln.strip() not in ("", "-") else None) for ln in (lines + [""] * 4)[:4]]
    mhz = vals[3]
    return {"model": vals[0], "governor": vals[1], "turbo": vals[2],
            "mhz": int(mhz) if mhz and mhz.isdigit() else None}


def accel_said(facts: dict, kind: str) -> str:
    """The accelerator the boot line names; under TCG also why not KVM (the rig file's choice or
    the probe's answer, as manifest.json's rig_facts.accel_reason records it)."""
    accel = facts.get("accel", kind)
    return f"{accel}: {facts['accel_reason']}" if accel == "tcg" and facts.get("accel_reason") else accel


def knobs_asked(knobs: Knobs) -> dict | None:
    """The manifest's record of the knobs asked, before the machine read any back."""
    return applied(knobs, None, None)[0] if knobs else None


def _set_knobs(rig, knobs: Knobs, cmdline: str, manifest, log) -> str | None:
    """The sysctls written on the booted machine and read back, the boot parameters looked for in
    its /proc/cmdline; all recorded in the manifest. None, or the ERROR naming the knob."""
    if not knobs:
        return None
    said = ""
    if knobs.sysctl:
        res = rig.command.run(apply_argv(knobs), timeout=FACTS_TIMEOUT)
        said = res.stdout.decode(errors="replace")
        if res.returncode != 0:
            return f"could not set the sysctls: {res.stderr.decode(errors='replace').strip() or res.returncode}"
    manifest.knobs, fault = applied(knobs, said, cmdline)
    log(f"krig: knobs: {'; '.join(knob_summary(manifest.knobs))}")
    return fault


def _drive(rig, repro, params, kernel, run_dir, manifest, log, collect, knobs):
    requires = repro.requires_for(manifest.preset)
    rig.prepare(run_dir, kernel, requires)
    t0 = time.monotonic()
    with progress.waiting(f"kernel {kernel.release} to boot on {rig.name}",
                          rig.boot.bound() or rig.boot_timeout()):
        # a kernel lacking the server's NIC or disk driver: never kexec'd
        rig.boot.boot(kernel, list(knobs.cmdline), reach=serverreach.at_kexec)
    log(f"krig: booted in {time.monotonic() - t0:.1f}s ({accel_said(rig.facts(), rig.kind)})")
    facts = rig.command.run(["bash", "-c", 'uname -r; cat /proc/cmdline; nproc; '
                             'awk "/^MemTotal:/ {print \\$2}" /proc/meminfo; '
                             f'cat {CLOCKSOURCE} 2>/dev/null || echo unknown; {CPU_FACTS}; {HASH_FACTS}'],
                            timeout=FACTS_TIMEOUT)
    lines = facts.stdout.decode(errors="replace").splitlines()
    if facts.returncode != 0 or len(lines) < 4:
        return "error", f"could not read the machine's facts: {facts.stderr.decode(errors='replace').strip()}"
    release, cmdline, ncpu, memkb = lines[:4]
    # the clock every trace event and sample reads (HPET under TCG unless the rig says tsc)
    manifest.machine = Machine(
        release, cmdline, int(ncpu), int(memkb) * 1024, lines[4] if len(lines) > 4 else "unknown", cpu_facts(lines[5:]),
        # the dcache and inode hash tables the kernel sized at boot (rigs/hashsize.py)
        **(hash_tables(facts.stdout.decode(errors="replace")) or hash_tables(rig.console.text())))
    manifest.write(run_dir)
    if release != kernel.release:
        return "error", f"machine runs kernel {release}, not the {kernel.release} asked for"
    need_mem = requires.get("min_memory")
    if need_mem and int(memkb) * 1024 < need_mem:
        return "skip", f"needs {need_mem >> 20} MiB of RAM, the machine has {int(memkb) >> 10} MiB"
    need_cpus = requires.get("min_cpus")
    if need_cpus and int(ncpu) < need_cpus:
        return "skip", f"needs {need_cpus} CPUs, the machine has {ncpu}"
    fault = _set_knobs(rig, knobs, cmdline, manifest, log)
    manifest.write(run_dir)
    if fault:
        return "error", fault

    root = rig.files.stage(ROOT)
    out = rig.files.results_dir()
    env = {**repro.param_env(params), **rig.scratch_env(),
           "KRIG_TRACE_EVENTS": " ".join(repro.trace_events),
           "KRIG_TRACE_BUFFER_KB": str(repro.buffer_kb_for(manifest.preset)),
           "KRIG_TRACE_MODE": repro.trace_mode_for(manifest.preset), "KRIG_COLLECT": "1" if collect else "0"}
    argv = ["bash", f"{root}/reproducers/lib/harness.sh", f"{root}/reproducers/{repro.name}", out]
    log(f"krig: running {repro.name} (timeout {params['timeout']}s)")
    # on a timeout, the salvage keeps the trace still in the machine before HUNG is declared
    salvage = ["bash", f"{root}/reproducers/lib/salvage.sh", out]
    pid = rig.emulator_pid()  # an emulator runs as fast as the host lets it: sample the host
    host = HostSampler(run_dir / "host.tsv", pid).start() if pid else None
    try:
        with progress.waiting(f"the workload {repro.name} on {rig.name}", params["timeout"]):
            res = rig.command.run(argv, env=env, timeout=params["timeout"], salvage=salvage)
    finally:
        if host is not None:
            host.stop()
            manifest.host = {"cpus": host.ncpus, "interval": host.interval}
    safeio.write_bytes(run_dir, "stdout", res.stdout)
    safeio.write_bytes(run_dir, "stderr", res.stderr)
    safeio.write_text(run_dir, "exit_code", f"{res.returncode}\n")
    manifest.workload = {"argv": argv, "exit_code": res.returncode, "seconds": round(res.duration, 2)}
    if res.returncode == 4:
        tail = res.stderr.decode(errors="replace").strip().splitlines()
        return "skip", tail[-1] if tail else "the reproducer skipped"
    if res.returncode != 0:
        tail = res.stderr.decode(errors="replace").strip().splitlines()[-3:]
        said = f": {' | '.join(tail)}" if tail else " without a word on stderr"
        return "error", f"run.sh exited {res.returncode}{said}"
    return "completed", "the workload finished"
