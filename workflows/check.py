"""`krig check RUN_DIR`: metrics and verdict of a run, without a rig.

evidence() reads what the run directory records about how the run ended
(manifest.json, console.log, samples.tsv, phases.tsv, host.tsv) and
krig.verdict.decide() rules on it; a completed workload's metrics are
computed here and its thresholds judged. Thresholds are judged by pytest (one test per
threshold, analysis/test_thresholds.py); each one's outcome comes back as data
(conftest.py's --krig-outcomes) into the run's thresholds.json, and junit.xml is written
from the same outcomes beside it for other tools, never read back.
"""
import dataclasses
import json
import math
import pathlib
import subprocess
import sys
import tempfile

from analysis.projection import parse_projects
from analysis.projection import require_model
from analysis.report import write_report
from analysis.rundata import RunData

from krig import ROOT, junit, safeio
from krig.errors import KrigError, UsageError
from .hostload import contended_pct
from krig.paths import owner_alive
from krig.record import (Manifest, MetricEntry, Tally, ThresholdOutcome, Verdict, write_metrics, write_thresholds,
                         write_verdict)
from krig.reproducer import load_analyzer, load_reproducer
from krig.rundir import MANIFEST, RunDir
from .stall import still_progressing
from krig.verdict import JUDGED, Evidence, decide, exit_code, host_contended, scan_console


# metrics krig adds to every run that has the data, unless the reproducer declares them
BUILTIN_METRICS = {
    "host_contended_pct": {"unit": "%", "better": "lower", "description":
                           "share of the workload's seconds in which other host processes kept the "
                           "host's CPUs saturated (host.tsv; emulated rigs only)"},
}


def run_notes(analyzer, metrics: dict[str, MetricEntry]) -> list[str]:
    """What the reproducer's analyze.py says about how its verdict was reached
    (optional `notes(metrics) -> [str]`, e.g. a flood that ran into its time cap; it is given
    metrics.json's objects, as a reproducer reads them)."""
    fn = getattr(analyzer, "notes", None)
    return [str(n) for n in fn({k: e.to_json() for k, e in metrics.items()})] if fn else []


def workload_metrics(run: RunDir) -> dict:
    """Metrics run.sh reported itself with `krig_metric NAME VALUE`."""
    out = {}
    for line in run.text("workload-metrics.tsv").splitlines():
        name, _, value = line.partition("\t")
        try:
            out[name] = float(value)
        except ValueError:
            raise UsageError(f"{run.path('workload-metrics.tsv')}: metric {name!r} has a non-numeric "
                             f"value {value!r}") from None
    return out


def compute_metrics(data: RunData, repro, analyzer) -> dict[str, MetricEntry]:
    values = workload_metrics(data)
    if analyzer is not None:
        values.update(analyzer.metrics(data))
    if repro.trace_events and data.exists("trace.dat"):
        # Every traced run says whether its trace is complete.
        values.setdefault("trace_lost_events", data.trace().lost_events()["total"])
    if data.exists("samples.tsv"):
        # ... and every sampled run whether its sampler kept its interval.
        values.setdefault("sampler_max_gap_intervals", data.sampler_max_gap_intervals())
    host = data.record.manifest.host or {}
    if data.exists("host.tsv") and host.get("cpus"):
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
        out[name] = MetricEntry(None if v is None or math.isnan(v) else v, **meta)
    return out


def judge(run, contended: bool = False, properties: dict | None = None) -> Tally:
    """Run the threshold tests with pytest; returns their Tally (counts and one line per threshold not passed),
    and writes the run's thresholds.json (each threshold's outcome, as data) and junit.xml (the
    same, for other tools; never read back; `properties`: its suite's, what ran where).
    `contended`: the run's host was contended (krig.verdict.host_contended); a timing
    (host_sensitive) threshold crossed then is recorded as "contended" in thresholds.json and as
    a skipped case in junit.xml (the counts keep it a failure: the verdict rule says what it
    makes of it).

    Each test case records krig_outcome (pass, fail, unmeasured, instrument) and krig_message;
    a case without them is pytest itself erring (a bug), reported as an error. run: a run
    directory or its RunDir (whose later reads then see thresholds.json)."""
    run = RunDir.of(run)
    run_dir = run.dir.resolve()        # pytest runs in ROOT: a relative path would judge another directory
    with tempfile.TemporaryDirectory(prefix="krig-judge-") as tmp:
        # pytest writes where krig chose, never through a name in the run directory
        said = pathlib.Path(tmp) / "outcomes.jsonl"
        argv = [sys.executable, "-m", "pytest", str(ROOT / "analysis" / "test_thresholds.py"),
                f"--krig-run-dir={run_dir}", f"--krig-outcomes={said}", "-q",
                "-p", "no:cacheprovider", "--rootdir", str(ROOT)]
        p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        safeio.write_text(run_dir, "analysis.log", p.stdout + p.stderr)
        if p.returncode not in PYTEST_JUDGED:
            raise KrigError(f"analysis did not complete (pytest exit {p.returncode}); see analysis.log")
        rows = [json.loads(ln) for ln in said.read_text().splitlines()] if said.exists() else []
    tests = threshold_tests(rows)
    record = outcomes(tests)
    counts = Tally.of(record)       # before a contended host relabels: the rule reads the crossing
    if contended:
        record = [dataclasses.replace(r, outcome="contended") if r.outcome == "fail" and r.host_sensitive else r
                  for r in record]
    junit.write(run_dir / "junit.xml", "krig", junit_cases(tests, record), properties or {})
    write_thresholds(run, record)
    return counts


# pytest's exit codes of a judge that ran: all passed, some failed, no threshold to test
PYTEST_JUDGED = (0, 1, 5)


@dataclasses.dataclass
class ThresholdTest:
    """One threshold test as pytest ran it (its phases, conftest.py's rows, folded): whether a
    phase failed, the line that says it, and the properties the test recorded."""
    failed: bool = False
    message: str = ""
    properties: dict[str, str] = dataclasses.field(default_factory=dict)


def threshold_tests(rows: list) -> dict[str, ThresholdTest]:
    """The judge's phases (conftest.py's rows) -> per threshold test id, its ThresholdTest."""
    tests: dict[str, ThresholdTest] = {}
    for r in rows:
        t = tests.setdefault(r["id"], ThresholdTest())
        t.properties.update({str(k): str(v) for k, v in (r.get("properties") or {}).items()})
        if r["outcome"] == "failed" and not t.failed:
            t.failed, t.message = True, r.get("message") or ""
    return tests


def outcomes(tests: dict[str, ThresholdTest]) -> list[ThresholdOutcome]:
    """One per threshold test: its threshold id, the outcome (pass, fail, unmeasured, instrument;
    error when the judge itself broke), the line that says it, and whether the threshold is
    host-sensitive."""
    out = []
    for tid, t in tests.items():
        said = t.properties.get("krig_outcome")
        outcome = "pass" if not t.failed and said in (None, "pass") else said if said not in (None, "pass") \
            else "error"
        message = t.properties.get("krig_message", "") if outcome != "error" \
            else f"test_threshold[{tid}]: {t.message[:400] or 'error'}"
        out.append(ThresholdOutcome(t.properties.get("krig_threshold") or tid, outcome, message,
                                    t.properties.get("krig_host_sensitive") == "1"))
    return out


def junit_cases(tests: dict[str, ThresholdTest], record: list[ThresholdOutcome]) -> list:
    """The judge's junit.xml cases, one per threshold test (as pytest names it), with the
    properties the test recorded: a crossed threshold a failure, one the judge could not
    judge (unmeasured, instrument, a broken test) an error, a timing threshold crossed on a
    contended host a skipped case saying why."""
    cases = []
    for (tid, t), r in zip(tests.items(), record):
        result: tuple | None = None
        kind = None
        if r.outcome == "fail":
            result = ("failure", r.message, r.message)
        elif r.outcome == "contended":
            result = ("skipped", "host contended, not blamed on the kernel: "
                      f"{t.properties.get('krig_message', '')}", None)
            kind = "krig.contended"
        elif r.outcome != "pass":
            result = ("error", r.message, r.message)
        cases.append(junit.Case("analysis.test_thresholds", f"test_threshold[{tid}]",
                                list(t.properties.items()), result, kind=kind))
    return cases


def evidence(run: RunDir, m: Manifest) -> Evidence:
    """What the run directory records about how the run ended (krig.verdict.Evidence); m: its
    manifest (the run's krig.record.RunRecord's)."""
    ev = Evidence(m.outcome, m.reason or "", run.text("console.log"),
                  rig_fault=m.rig_fault, host_fault=m.host_fault,
                  machine_answered=m.machine_answered, pull_error=m.pull_error,
                  timeout=(m.params or {}).get("timeout"), host_load=m.host_load,
                  last_phase=run.last_phase())
    if ev.outcome == "hung" and ev.timeout:
        ev.progress = still_progressing(run, float(ev.timeout))
    return ev


def check(run_dir, project: tuple = (), repro=None) -> Verdict:
    """Judge a run directory: verdict.json (its record returned as written), metrics.json, thresholds.json, the
    report. repro: the run's reproducer when the caller has it (the runner's plan), else read
    from the manifest."""
    data = RunData(safeio.given(run_dir))       # the user's own path: results/latest is followed
    run_dir, manifest = data.dir, data.record.manifest
    owner = manifest.owner
    if manifest.outcome is None and owner is not None and owner_alive(owner):
        raise UsageError(f"{run_dir}: still running (krig pid {owner['pid']}); check it when it ends")
    try:
        repro = repro if repro is not None and repro.name == manifest.reproducer else \
            load_reproducer(manifest.reproducer)
    except UsageError as e:
        raise UsageError(f"{data.path(MANIFEST)}: field reproducer: {e}") from None
    require_model(repro, load_analyzer(repro) if project else None, project)    # before anything is written
    ev = evidence(data, manifest)
    scan = scan_console(ev.console)
    verdict = Verdict(None, reproducer=repro.name, run_dir=str(run_dir), complete=manifest.complete,
                      console={k: v[:20] for k, v in scan.items()})
    if scan["oom_kill"]:
        verdict.oom_kill = scan["oom_kill"][:20]
    if manifest.power_off_error:       # after the results were pulled: they stand, with a note
        verdict.warn(f"the rig failed to power off after the run: {manifest.power_off_error}")
    decided = decide(ev)
    v, why = decided
    notes = []
    if v is None:        # the workload completed: the thresholds decide
        try:
            analyzer = load_analyzer(repro)
            metrics = compute_metrics(data, repro, analyzer)
        except KrigError as e:
            ev.analysis_error = str(e)
        except Exception as e:   # a bug in analyze.py is the reproducer breaking, not a kernel verdict
            ev.analysis_error = f"{type(e).__name__}: {e}"
        else:
            write_metrics(data, metrics)
            lost = metrics.get("trace_lost_events", MetricEntry(None)).value
            if lost:
                verdict.warn(f"the trace lost {lost:.0f} events: metrics computed from it are lower bounds; "
                             "enlarge trace.buffer_kb")
            ev.host_contended_pct = metrics.get("host_contended_pct", MetricEntry(None)).value
            ev.thresholds = verdict.thresholds = judge(data, host_contended(ev.host_contended_pct),
                                                       junit_properties(manifest))
            notes = run_notes(analyzer, metrics)
        decided = decide(ev)
        v, why = decided
    if notes and ev.thresholds is not None:   # how the verdict was reached, on its line (judged,
        # or an ERROR the thresholds gave: an instrument, the host's contention)
        verdict.notes = notes
        why = f"{why} ({'; '.join(notes)})"
    assert v is not None, "a completed run has its thresholds or its analysis error by now"
    verdict.verdict, verdict.reason, verdict.cause = v, why, decided.cause
    if v == "CRASHED" and scan.get("crash_context"):
        verdict.crash_context = scan["crash_context"]
    if ev.thresholds is None:    # not judged this time: no outcome of an earlier check stays
        write_thresholds(data, [])
    if v not in JUDGED:          # the judge wrote junit.xml for PASS/FAIL: one case saying why otherwise
        junit.write_single(data.path("junit.xml"), repro.name, v, why, junit_properties(manifest))
    write_verdict(data, verdict)
    report(data, repro, project)
    return verdict


def junit_properties(m: Manifest) -> dict:
    """What ran where, as the properties of the run's junit.xml suite (what a CI dashboard groups by)."""
    facts = m.rig_facts or {}
    return {"reproducer": m.reproducer, "preset": m.preset, "kernel": m.kernel.release,
            "kernel_config": m.kernel.config_sha256_16, "rig": m.rig_name,
            "accel": facts.get("accel"), "qemu": facts.get("qemu_version"), "krig_revision": m.krig_revision}


def report(run, repro=None, project: tuple = ()) -> None:
    """The report never changes the verdict nor loses results: a failure is one line."""
    try:
        for note in write_report(run, repro, project)["notes"]:
            print(f"krig: report: {note}", file=sys.stderr)
    except Exception as e:
        print(f"krig: report not written: {type(e).__name__}: {e}", file=sys.stderr)


def cmd_check(a) -> int:
    """`krig check RUN_DIR`."""
    verdict = check(a.run_dir, parse_projects(a.project))
    print(safeio.printable_text(f"{verdict.verdict}: {verdict.reason}"))
    assert verdict.verdict is not None      # check() decided it
    return exit_code(verdict.verdict)
