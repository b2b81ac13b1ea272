"""The run pipeline: reproducer + kernel + rig -> a run directory with a verdict.

Never branches on the kind of rig: only the protocols of rigs/protocol.py.
"""
import pathlib
import signal
import time

from . import RESULTS_DIR, ROOT
from .check import check
from .errors import GuestCrashed, GuestHung, KrigError
from kernels.catalog import load_kernel
from .reproducer import load_reproducer
from .results import git_revision, new_run_dir, now, write_json
from .verdict import first_crash
from rigs import load_rig

FACTS_TIMEOUT = 60


def run(repro_name: str, rig_name: str = "qemu-default", kernel_name: str = "distro",
        preset: str | None = None, sets: dict | None = None,
        results_root: pathlib.Path = RESULTS_DIR, log=print, collect: bool = True) -> tuple[pathlib.Path, dict]:
    """Returns (run_dir, verdict). Bad input raises UsageError before anything starts.

    collect=False runs the workload without sampler and tracer (for benchmarks)."""
    repro = load_reproducer(repro_name)
    params = repro.resolve_params(preset, sets or {})
    kernel = load_kernel(kernel_name)
    rig = load_rig(rig_name)
    rig.console_crash = first_crash

    run_dir = new_run_dir(results_root, repro.name, kernel.kernel_id, rig.name)
    manifest = {
        "reproducer": repro.name, "preset": preset, "params": params,
        "kernel": kernel.describe(), "rig": rig.describe(),
        "krig_revision": git_revision(), "started": now(), "ended": None,
        "status": "running", "complete": False, "outcome": None, "reason": None, "collect": collect,
    }
    write_json(run_dir / "manifest.json", manifest)
    log(f"krig: {repro.name} on {rig.name} with kernel {kernel.kernel_id} -> {run_dir}")

    outcome, reason = "error", "the run did not start"
    try:
        with rig:
            try:
                outcome, reason = _drive(rig, repro, params, kernel, run_dir, manifest, log, collect)
            except GuestHung as e:
                outcome, reason = "hung", str(e)
                _save_partial(rig, run_dir)
            except GuestCrashed as e:
                outcome, reason = "crashed", str(e)
            except KrigError as e:
                outcome, reason = "error", str(e)
            finally:
                manifest["rig_facts"] = rig.facts()
                rig.shutdown() if outcome == "completed" else _hard_off(rig)
                _pull(rig, run_dir)
    except KeyboardInterrupt:
        outcome, reason = "interrupted", "interrupted by a signal (SIGINT/SIGTERM)"
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            rig.close()
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    finally:
        manifest.update({"ended": now(), "outcome": outcome, "reason": reason,
                         "status": "complete" if outcome not in ("interrupted",) else "incomplete",
                         "complete": outcome != "interrupted"})
        write_json(run_dir / "manifest.json", manifest)
    verdict = check(run_dir)
    return run_dir, verdict


def _hard_off(rig):
    try:
        rig.power.off()
    except KrigError:
        pass


def _pull(rig, run_dir):
    try:
        rig.files.pull(rig.files.results_dir(), run_dir)
    except KrigError:
        pass


def _save_partial(rig, run_dir):
    partial = getattr(rig.command, "partial_output", None)
    if partial:
        out, err = partial()
        (run_dir / "stdout").write_bytes(out)
        (run_dir / "stderr").write_bytes(err)


def _drive(rig, repro, params, kernel, run_dir, manifest, log, collect):
    requires = repro.requires_for(manifest["preset"])
    rig.prepare(run_dir, kernel, requires)
    t0 = time.monotonic()
    rig.boot.boot(kernel, [])
    log(f"krig: booted in {time.monotonic() - t0:.1f}s ({rig.facts().get('accel', rig.kind)})")
    facts = rig.command.run(["bash", "-c", 'uname -r; cat /proc/cmdline; nproc; '
                             'awk "/^MemTotal:/ {print \\$2}" /proc/meminfo'], timeout=FACTS_TIMEOUT)
    lines = facts.stdout.decode(errors="replace").splitlines()
    if facts.returncode != 0 or len(lines) < 4:
        return "error", f"could not read the machine's facts: {facts.stderr.decode(errors='replace').strip()}"
    release, cmdline, ncpu, memkb = lines[:4]
    manifest["machine"] = {"release": release, "cmdline": cmdline, "cpus": int(ncpu),
                           "mem_total_bytes": int(memkb) * 1024}
    write_json(run_dir / "manifest.json", manifest)
    if release != kernel.release:
        return "error", f"machine runs kernel {release}, not the {kernel.release} asked for"
    need_mem = requires.get("min_memory")
    if need_mem and int(memkb) * 1024 < need_mem:
        return "skip", f"needs {need_mem >> 20} MiB of RAM, the machine has {int(memkb) >> 10} MiB"
    need_cpus = requires.get("min_cpus")
    if need_cpus and int(ncpu) < need_cpus:
        return "skip", f"needs {need_cpus} CPUs, the machine has {ncpu}"

    root = rig.files.stage(ROOT)
    out = rig.files.results_dir()
    env = {**repro.param_env(params), **rig.scratch_env(),
           "KRIG_TRACE_EVENTS": " ".join(repro.trace_events),
           "KRIG_TRACE_BUFFER_KB": str(repro.buffer_kb_for(manifest["preset"])), "KRIG_COLLECT": "1" if collect else "0"}
    argv = ["bash", f"{root}/reproducers/lib/harness.sh", f"{root}/reproducers/{repro.name}", out]
    log(f"krig: running {repro.name} (timeout {params['timeout']}s)")
    res = rig.command.run(argv, env=env, timeout=params["timeout"])
    (run_dir / "stdout").write_bytes(res.stdout)
    (run_dir / "stderr").write_bytes(res.stderr)
    (run_dir / "exit_code").write_text(f"{res.returncode}\n")
    manifest["workload"] = {"argv": argv, "exit_code": res.returncode, "seconds": round(res.duration, 2)}
    if res.returncode == 4:
        tail = res.stderr.decode(errors="replace").strip().splitlines()
        return "skip", tail[-1] if tail else "the reproducer skipped"
    if res.returncode != 0:
        tail = res.stderr.decode(errors="replace").strip().splitlines()[-3:]
        return "error", f"run.sh exited {res.returncode}: {' | '.join(tail)}"
    return "completed", "the workload finished"
