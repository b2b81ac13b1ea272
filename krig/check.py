"""`krig check RUN_DIR`: metrics and verdict of a run, without a rig.

The workload outcome in manifest.json, the console and the reproducer's
thresholds decide the verdict. Thresholds are judged by pytest (one test per
threshold, analysis/test_thresholds.py), which writes junit.xml.
"""
import importlib.util
import json
import math
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

from analysis.report import write_report

from . import ROOT
from .errors import KrigError, UsageError
from .junit import write_single
from .hostload import CONTENDED_LIMIT_PCT, contended_pct
from .paths import owner_alive
from .reproducer import load_reproducer
from .results import write_json
from .verdict import outcome_verdict, scan_console



# metrics krig adds to every run that has the data, unless the reproducer declares them
BUILTIN_METRICS = {
    "host_contended_pct": {"unit": "%", "better": "lower", "description":
                           "share of the workload's seconds in which other host processes kept the "
                           "host's CPUs saturated (host.tsv; emulated rigs only)"},
}


def load_analyzer(repro):
    path = repro.path / "analyze.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"krig_analyze_{repro.name.replace('-', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_notes(repro, metrics: dict) -> list[str]:
    """What the reproducer's analyze.py says about how its verdict was reached
    (optional `notes(metrics) -> [str]`, e.g. a flood that ran into its time cap)."""
    analyzer = load_analyzer(repro)
    fn = getattr(analyzer, "notes", None)
    return [str(n) for n in fn(metrics)] if fn else []


def workload_metrics(run_dir: pathlib.Path) -> dict:
    """Metrics run.sh reported itself with `krig_metric NAME VALUE`."""
    out = {}
    p = run_dir / "workload-metrics.tsv"
    if p.exists():
        for line in p.read_text().splitlines():
            name, _, value = line.partition("\t")
            try:
                out[name] = float(value)
            except ValueError:
                raise UsageError(f"{p}: metric {name!r} has a non-numeric value {value!r}") from None
    return out


def compute_metrics(run_dir: pathlib.Path, repro) -> dict:
    from analysis.rundata import RunData
    data = RunData(run_dir)
    values = workload_metrics(run_dir)
    analyzer = load_analyzer(repro)
    if analyzer is not None:
        values.update(analyzer.metrics(data))
    if repro.trace_events and data.path("trace.dat").exists():
        # Every traced run says whether its trace is complete.
        values.setdefault("trace_lost_events", data.trace().lost_events()["total"])
    if data.path("samples.tsv").exists():
        # ... and every sampled run whether its sampler kept its interval.
        values.setdefault("sampler_max_gap_intervals", data.sampler_max_gap_intervals())
    host = data.manifest.get("host") or {}
    if data.path("host.tsv").exists() and host.get("cpus"):
        # ... and every emulated run how much the host's other load took from it.
        values.setdefault("host_contended_pct", contended_pct(data.path("host.tsv"), host["cpus"]))
    missing = [m for m in repro.metrics if m not in values]
    if missing:
        raise UsageError(f"reproducers/{repro.name}: no value for metric {', '.join(missing)} "
                         "(from krig_metric in run.sh or analyze.py)")
    out = {}
    for name, v in values.items():
        meta = repro.metrics.get(name) or BUILTIN_METRICS.get(name) or {"unit": "", "better": "info",
                                                                         "description": ""}
        v = None if v is None else float(v)
        out[name] = {"value": None if v is None or math.isnan(v) else v, **meta}
    return out


def judge(run_dir: pathlib.Path) -> dict:
    """Run the threshold tests with pytest; returns counts and one line per threshold not passed.

    Each test case records krig_outcome (pass, fail, unmeasured, instrument) and krig_message;
    a case without them is pytest itself erring (a bug), reported as an error."""
    run_dir = run_dir.resolve()        # pytest runs in ROOT: a relative path would judge another directory
    junit = run_dir / "junit.xml"
    argv = [sys.executable, "-m", "pytest", str(ROOT / "analysis" / "test_thresholds.py"),
            f"--krig-run-dir={run_dir}", f"--junitxml={junit}", "-q", "-p", "no:cacheprovider",
            "--rootdir", str(ROOT), "-o", "junit_family=xunit1", "-o", "junit_suite_name=krig"]
    p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    (run_dir / "analysis.log").write_text(p.stdout + p.stderr)
    if not junit.exists():
        raise KrigError(f"analysis did not produce junit.xml (pytest exit {p.returncode}); see analysis.log")
    return tally(ET.parse(junit).getroot())


def tally(root) -> dict:
    res = {"passed": 0, "failed": 0, "failed_host_sensitive": 0, "unmeasured": 0, "instrument": 0,
           "errors": 0, "failures": [], "not_judged": [], "broken": []}
    for tc in root.iter("testcase"):
        props = {pr.get("name"): pr.get("value") for pr in tc.iter("property")}
        bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        outcome = props.get("krig_outcome")
        if bad is None and outcome in (None, "pass"):
            res["passed"] += 1
        elif outcome == "fail":
            res["failed"] += 1
            res["failures"].append(props["krig_message"])
            res["failed_host_sensitive"] += props.get("krig_host_sensitive") == "1"
        elif outcome == "unmeasured":
            res["unmeasured"] += 1
            res["not_judged"].append(props["krig_message"])
        elif outcome == "instrument":
            res["instrument"] += 1
            res["broken"].append(props["krig_message"])
        else:
            res["errors"] += 1
            msg = (bad.get("message") or "").splitlines() if bad is not None else []
            res["broken"].append(f"{tc.get('name')}: {msg[0][:400] if msg else 'error'}")
    return res


def verdict_of(res: dict, host_contended_pct: float | None = None) -> tuple[str, str]:
    """The verdict rule: an instrument check that failed (or a judge that broke) makes the run
    ERROR whatever else happened; so does a FAIL that rests only on host_sensitive thresholds
    while the host was contended (host_contended_pct over krig/hostload.py's limit); otherwise
    FAIL only if a measured regression threshold failed (metrics that could not be computed
    are named alongside); otherwise a metric that could not be computed is ERROR naming it;
    otherwise PASS."""
    if res["broken"]:
        return "ERROR", ("instrument: " if res["instrument"] else "judge error: ") + "; ".join(res["broken"])
    if (res["failed"] and res.get("failed_host_sensitive", 0) == res["failed"]
            and host_contended_pct is not None and host_contended_pct > CONTENDED_LIMIT_PCT):
        return "ERROR", (f"host contention: other processes kept the host's CPUs saturated in "
                         f"{host_contended_pct:.0f}% of the workload's seconds (limit "
                         f"{CONTENDED_LIMIT_PCT:g}%, host.tsv), so these timing thresholds are not "
                         f"blamed on the kernel: " + "; ".join(res["failures"]))
    if res["failed"]:
        extra = [f"not measured: {m}" for m in res["not_judged"]]
        return "FAIL", "; ".join(res["failures"] + extra)
    if res["unmeasured"]:
        return "ERROR", "metric not measured: " + "; ".join(res["not_judged"])
    return "PASS", f"{res['passed']} thresholds held"


def check(run_dir) -> dict:
    run_dir = pathlib.Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a run directory")
    man_path = run_dir / "manifest.json"
    if not man_path.exists():
        raise UsageError(f"{run_dir}: missing manifest.json (not a krig run directory)")
    try:
        manifest = json.loads(man_path.read_text())
    except ValueError as e:
        raise UsageError(f"{man_path}: not valid JSON ({e})") from None
    if manifest.get("outcome") is None and owner_alive(manifest.get("owner")):
        raise UsageError(f"{run_dir}: still running (krig pid {manifest['owner']['pid']}); check it when it ends")
    try:
        repro = load_reproducer(manifest.get("reproducer"))
    except UsageError as e:
        raise UsageError(f"{man_path}: field reproducer: {e}") from None
    console = (run_dir / "console.log").read_text(errors="replace") if (run_dir / "console.log").exists() else ""
    scan = scan_console(console)
    outcome, reason = manifest.get("outcome"), manifest.get("reason") or ""
    verdict = {"reproducer": repro.name, "run_dir": str(run_dir), "complete": manifest.get("complete", False),
               "console": {k: v[:20] for k, v in scan.items()}}
    if scan["oom_kill"]:
        verdict["oom_kill"] = scan["oom_kill"][:20]
    if manifest.get("power_off_error"):       # after the results were pulled: they stand, with a note
        verdict.setdefault("warnings", []).append(f"the rig failed to power off after the run: "
                                                  f"{manifest['power_off_error']}")

    ruled, reason = outcome_verdict(outcome, reason, console, manifest.get("rig_fault"),
                                    machine_answered=bool(manifest.get("machine")))
    props = {"kernel": manifest.get("kernel", {}).get("release"), "rig": manifest.get("rig", {}).get("name"),
             "accel": manifest.get("rig_facts", {}).get("accel"), "krig_revision": manifest.get("krig_revision")}
    if ruled is None:        # the workload completed: the thresholds decide
        try:
            metrics = compute_metrics(run_dir, repro)
        except KrigError as e:
            verdict.update(verdict="ERROR", reason=f"analysis failed: {e}")
        except Exception as e:   # a bug in analyze.py is the reproducer breaking, not a kernel verdict
            verdict.update(verdict="ERROR", reason=f"analysis failed: {type(e).__name__}: {e}")
        else:
            write_json(run_dir / "metrics.json", metrics)
            lost = metrics.get("trace_lost_events", {}).get("value")
            if lost:
                verdict.setdefault("warnings", []).append(f"the trace lost {lost:.0f} events: metrics computed from it "
                                       "are lower bounds; enlarge trace.buffer_kb")
            res = judge(run_dir)
            verdict["thresholds"] = res
            v, why = verdict_of(res, metrics.get("host_contended_pct", {}).get("value"))
            verdict.update(verdict=v, reason=why)
            notes = run_notes(repro, metrics)
            if notes and v in ("PASS", "FAIL"):     # how the verdict was reached, on its line
                verdict.update(notes=notes, reason=f"{why} ({'; '.join(notes)})")
        if verdict["verdict"] == "ERROR":
            write_single(run_dir / "junit.xml", repro.name, "ERROR", verdict["reason"], props)
    else:
        v = ruled
        verdict.update(verdict=v, reason=reason)
        if v == "CRASHED" and scan.get("crash_context"):
            verdict["crash_context"] = scan["crash_context"]
        write_single(run_dir / "junit.xml", repro.name, v, verdict["reason"], props)
    write_json(run_dir / "verdict.json", verdict)
    report(run_dir)
    return verdict


def report(run_dir: pathlib.Path) -> None:
    """The report never changes the verdict nor loses results: a failure is one line."""
    try:
        for note in write_report(run_dir)["notes"]:
            print(f"krig: report: {note}", file=sys.stderr)
    except Exception as e:
        print(f"krig: report not written: {type(e).__name__}: {e}", file=sys.stderr)
