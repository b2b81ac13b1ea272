"""`krig qualify SUITE.toml`: a matrix of reproducers x kernels x rigs x repeats, in parallel.

    krig qualify qualify/smoke.toml [-o DIR] [--fresh]

The engine is pytest-xdist: one worker per rig (xdist group = rig, `--dist
loadgroup`, as many workers as rigs), so a rig never runs two reproducers at
once while every rig works at the same time. An IPMI rig's server lock lives
in KRIG_LOCK_DIR (shared by a lab's users), or with KRIG_LAB_COORDINATOR held
through a labgrid coordinator (reservation in priority order, lock, lease;
rigs/lab.py), so two qualifications never share a server; here a run waits for
it (KRIG_LOCK_WAIT, default 3600 s) instead of failing. A suite may choose its
servers by tags instead of names ([lab], workflows/lab.py). Each finished run is
recorded at once in DIR/cases/<id>.json; the same
command again (after Ctrl-C, a crash, a reboot) runs only the cases without a
finished record. DIR (default results/qualify/<suite name>) gets suite.json,
junit.xml (one test case per run), qualify.html (the matrix, each verdict
linking its run's report) and signoff.txt (one line per rig); the run
directories are under DIR/runs/.

The suite file is described in docs/qualify.md.
"""
import argparse
import hashlib
import json
import math
import os
import pathlib
import shlex
import shutil
import sys
import time

import pytest

from krig import DEFAULT_KERNEL, DEFAULT_RIG, RESULTS_DIR, ROOT
from .argcheck import kernel_arg, output_dir
from krig.config import load_toml
from krig.errors import KrigError, UsageError, guarded
from krig.schema import OMIT, Field, check, check_rows
from .lab import select_rigs
from .preflight import before_build
from .qualify_report import write_outputs
from krig.reproducer import load_reproducer
from krig.record_qualify import CaseRecord, read_case, write_case
from krig.results import QUALIFY_CASES, now, qualify_dir
from .plan import resolve
from .history.health import healthy_cases
from .run import execute
from .serverdrivers import server_drivers
from krig.knobs import Knobs, parse as parse_knobs
from krig.verdict import UNFINISHED, VERDICTS
from kernels.catalog import krig_builds, load_kernel
from kernels.kernel import Kernel
from rigs import SECRETS_FILE_ENV, hand_over_secrets, load_rig, take_handed_secrets
from krig.paths import dies_with_parent

SPEC_ENV = "KRIG_QUALIFY_SPEC"
MAX_REPEATS = 100


def _names_ok(v) -> bool:
    return bool(v) and all(isinstance(x, str) and x for x in v) and len(set(v)) == len(v)


_NAMES = "expected a non-empty list of names, each once, got {v!r}"
_REPEATS = "{v} is not in 1..{max}"
# A suite file (docs/qualify.md): the top table, and each [[runs]] table. A field a run leaves
# out takes the top table's (kernels, rigs, repeats); what one field cannot say alone (rigs or
# [lab], expect against the run's kernels, names that must exist) is checked after them.
RUN_FIELDS = (
    Field("reproducer", str),
    Field("preset", str, None),
    Field("set", dict, {}),
    Field("expect", (str, dict), "PASS"),         # a verdict, or a table kernel = verdict
    Field("kernels", list, OMIT, test=_names_ok, says=_NAMES),
    Field("rigs", list, OMIT, test=_names_ok, says=_NAMES),
    Field("repeats", int, OMIT, min=1, max=MAX_REPEATS, says=_REPEATS),
    Field("sysctl", list, [], each=str, says="expected a list of \"NAME=VALUE\" strings, got {item!r}"),
    Field("cmdline", list, [], each=str, says="expected a list of boot parameter strings, got {item!r}"),
)
SUITE_FIELDS = (
    Field("description", str, ""),
    Field("kernels", list, [DEFAULT_KERNEL], test=_names_ok, says=_NAMES),
    Field("rigs", list, OMIT, test=_names_ok, says=_NAMES),
    Field("lab", dict, OMIT),
    Field("repeats", int, 1, min=1, max=MAX_REPEATS, says=_REPEATS),
    Field("runs", list, test=bool, says="the suite names no runs; add [[runs]] tables"),
)


# -- the suite ------------------------------------------------------------------

def load_suite(path: pathlib.Path, rigs: list | None = None, unbuilt: bool = False,
               knobs: Knobs = Knobs()) -> dict:
    """The suite file, validated: {name, description, cases: [...], kernels: {name: Kernel}} (every
    problem one line; each kernel loaded once, what the workers' runs boot).
    rigs: names every run goes to instead of the suite's (`krig qualify --rig`); unbuilt: a kernel
    krig builds need not be built yet (`krig qualify --check`, before the builds); knobs: what
    `krig qualify --sysctl/--cmdline` adds to every run, after the run's own sysctl and cmdline."""
    where = str(path)
    data = load_toml(path)
    if rigs:                    # the rigs it is given, in place of the suite's own and any [lab]
        if len(set(rigs)) != len(rigs):
            raise UsageError(f"--rig: a rig is given twice: {rigs!r}")
        data = {k: v for k, v in data.items() if k != "lab"}
        data["rigs"] = list(rigs)
        data["runs"] = [{k: v for k, v in r.items() if k != "rigs"} if isinstance(r, dict) else r
                        for r in data.get("runs", [])]
    top = check(data, SUITE_FIELDS, where)
    if "lab" in top:            # servers chosen by tags among the lab coordinator's places
        if "rigs" in top:
            raise UsageError(f"{where}: set rigs (names) or [lab] (tags), not both")
        top["rigs"] = select_rigs(top["lab"], f"{where}.lab")
    top.setdefault("rigs", [DEFAULT_RIG])
    runs = check_rows(top["runs"], RUN_FIELDS, f"{where}.runs", "expected a table ([[runs]])")
    cases, rig_objs, loaded = [], {}, {}
    for i, r in enumerate(runs):
        w = f"{where}.runs[{i}]"
        repro = _named(w, load_reproducer, r["reproducer"])
        preset = r["preset"]
        sets = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in r["set"].items()}
        kernels, rigs = r.get("kernels", top["kernels"]), r.get("rigs", top["rigs"])
        expect = _expect(r["expect"], w, kernels)
        own = parse_knobs(r["sysctl"], r["cmdline"], f"{w}.sysctl", f"{w}.cmdline") + knobs
        parse_knobs([f"{n}={v}" for n, v in own.sysctl], [])   # a sysctl in the run and on the command line
        for k in kernels:               # each kernel loaded once, for every run of the suite
            if k not in loaded:
                loaded[k] = _named(w, kernel_arg if unbuilt and krig_builds(k) else _load_kernel, k)
        for rig in rigs:
            if rig not in rig_objs:
                rig_objs[rig] = _named(w, load_rig, rig)
        _one_rig_per_server(rig_objs, where)        # before a BMC is asked (before_build)
        for rig in rigs:
            try:            # the rig boots the kernels, the host can give the run: before any build
                params = repro.resolve_params(preset, sets, cpus=rig_objs[rig].host_needs().get("cpus"))
                before_build(rig_objs[rig], repro, RESULTS_DIR, [("kernels", k) for k in kernels], preset=preset,
                             params=params)
            except UsageError as e:
                raise UsageError(f"{w} on rig {rig}: {e}") from None
        for k in kernels:
            for rig in rigs:
                for n in range(1, r.get("repeats", top["repeats"]) + 1):
                    c = {"reproducer": repro.name, "preset": preset, "set": sets, "kernel": k, "rig": rig,
                         "repeat": n, "expect": expect.get(k, "PASS"), **({"knobs": own.to_json()} if own else {})}
                    c["id"] = case_id(c)
                    cases.append(c)
    ids = [c["id"] for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise UsageError(f"{where}.runs: the same run is listed twice: {dup[0]}")
    return {"name": path.stem, "file": str(path), "description": top["description"], "rigs": list(rig_objs),
            "cases": cases, "kernels": {k: v for k, v in loaded.items() if isinstance(v, Kernel)}}


def _load_kernel(name: str):
    """A suite's kernel, the server ,drivers=RIG names read (workflows/serverdrivers.py)."""
    return load_kernel(name, read_server=server_drivers)


def _named(where: str, loader, name: str):
    """A reproducer, rig or kernel by name; a bad one is one line naming the suite's entry."""
    try:
        return loader(name)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None


def _expect(v, where: str, kernels: list) -> dict:
    """expect = "FAIL" (every kernel) or {kernel = verdict, ...}; default PASS."""
    table = {k: v for k in kernels} if isinstance(v, str) else v
    for k, verdict in table.items():
        if k not in kernels:
            raise UsageError(f"{where}.expect.{k}: not one of this run's kernels ({', '.join(kernels)})")
        if verdict not in VERDICTS:
            raise UsageError(f"{where}.expect.{k}: {verdict!r} is not one of {', '.join(VERDICTS)}")
    return table


def _one_rig_per_server(rig_objs: dict, where: str):
    servers: dict[tuple, str] = {}
    for name, rig in rig_objs.items():
        key = rig.bmc_address()
        if key is not None and key in servers:
            raise UsageError(f"{where}.rigs: {name} and {servers[key]} are the same server (one BMC); "
                             "list a server once")
        servers[key] = name


def case_id(c: dict) -> str:
    """Stable across reruns of the same suite: what ran where, and which repeat."""
    sets = ""
    if c["set"] or c.get("knobs"):      # a run without knobs keeps the id it had before knobs
        asked = {**c["set"], **({"knobs": c["knobs"]} if c.get("knobs") else {})}
        sets = "-" + hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:8]
    return f"{c['reproducer']}-{c['preset'] or 'default'}{sets}@{c['kernel']}@{c['rig']}#{c['repeat']}"


def finished(qdir: pathlib.Path, cases: list) -> dict[str, CaseRecord]:
    """id -> the record of every case that finished in an earlier (or this) invocation (a record
    that cannot be read is a case to run again)."""
    out = {}
    for c in cases:
        try:
            rec = read_case(qdir, c["id"])
        except (OSError, KrigError):
            continue
        if rec.verdict not in UNFINISHED:
            out[c["id"]] = rec
    return out


# -- the command ----------------------------------------------------------------

def qualify(suite_file, out_dir=None, fresh: bool = False, log=print, prio: float | None = None,
            rigs: list | None = None, check_only: bool = False, include_unhealthy: bool = False,
            knobs: Knobs = Knobs()) -> int:
    path = pathlib.Path(suite_file)
    if out_dir is not None:
        output_dir(out_dir, "-o")
    if prio is not None:        # the workers' runs reserve lab servers with it
        if not math.isfinite(prio):
            raise UsageError(f"--prio {prio}: must be a finite number (higher goes first)")
        os.environ["KRIG_LAB_PRIO"] = repr(float(prio))
    suite = load_suite(path, rigs, unbuilt=check_only, knobs=knobs)
    if check_only:              # the suite, its rigs and kernels, the host: nothing built, run or written
        log(f"qualify: {suite['name']}: {len(suite['cases'])} runs on {', '.join(suite['rigs'])}: checked "
            "(each rig boots its kernels, the host can give each run); nothing built or run")
        return 0
    qdir = pathlib.Path(out_dir or qualify_dir(suite["name"])).resolve()
    if fresh:       # forget the records only; earlier run directories stay in runs/
        shutil.rmtree(qdir / QUALIFY_CASES, ignore_errors=True)
    (qdir / QUALIFY_CASES).mkdir(parents=True, exist_ok=True)
    done = finished(qdir, suite["cases"])
    todo = healthy_cases([c for c in suite["cases"] if c["id"] not in done], include_unhealthy, log)
    rigs = sorted({c["rig"] for c in todo}, key=suite["rigs"].index)
    log(f"qualify: {suite['name']}: {len(suite['cases'])} runs on {len(suite['rigs'])} rigs; "
        f"{len(done)} finished before, {len(todo)} to run -> {qdir}")
    started = now()
    interrupted = False
    if todo:
        interrupted = _run_pytest(todo, rigs, qdir, suite["kernels"], log)
    done = finished(qdir, suite["cases"])
    res = write_outputs(qdir, suite, done, started, complete=len(done) == len(suite["cases"]))
    for line in res["signoff"]:
        log(line)
    log(f"qualify: {qdir / 'qualify.html'}")
    if interrupted or len(done) < len(suite["cases"]):
        log(f"qualify: {len(done)} of {len(suite['cases'])} runs finished; run the same command again to finish")
        return 130 if interrupted else 3
    return 0 if res["all_as_expected"] else 1


def _run_pytest(todo: list, rigs: list, qdir: pathlib.Path, kernels: dict, log) -> bool:
    """Runs the cases in pytest-xdist workers, one per rig, each on the kernel the suite loaded;
    True if interrupted."""
    os.environ[SPEC_ENV] = json.dumps({"cases": todo, "qdir": str(qdir),
                                       "kernels": {k: v.to_json() for k, v in kernels.items()}})
    os.environ.setdefault("KRIG_LOCK_WAIT", "3600")
    # load_suite took BMC passwords out of the environment; the workers read them from a file in
    # memory this process holds (gone with it, however it ends), named in their environment only
    secrets = hand_over_secrets()
    args = [str(pathlib.Path(__file__).resolve()), "-p", "xdist", "-p", "no:labgrid",
            "--tx", worker_spec(len(rigs), secrets[1] if secrets else None), "--dist", "loadgroup",
            "-q", "-rN", "-p", "no:cacheprovider", "--rootdir", str(ROOT), "-o", "console_output_style=classic"]
    try:
        rc = pytest.main(args)
    finally:
        if secrets:
            os.close(secrets[0])
        os.environ.pop(SPEC_ENV, None)
    return rc == pytest.ExitCode.INTERRUPTED


def worker_spec(n: int, secrets_path: str | None) -> str:
    """xdist's --tx for n workers that die with this process (a kill -9 of it must not leave a
    worker holding a server), the secrets' path in their environment only, never in this one's."""
    worker = shlex.join(dies_with_parent([sys.executable]))
    return f"{n}*popen//python={worker}" + (f"//env:{SECRETS_FILE_ENV}={secrets_path}" if secrets_path else "")


# -- the pytest side: one test per case, run in the worker of its rig --------------

def pytest_generate_tests(metafunc):
    if "qualify_case" in metafunc.fixturenames:
        spec = json.loads(os.environ.get(SPEC_ENV, '{"cases": []}'))
        metafunc.parametrize("qualify_case", [pytest.param(c, id=c["id"], marks=pytest.mark.xdist_group(c["rig"]))
                                              for c in spec["cases"]])


def test_qualify_case(qualify_case):
    take_handed_secrets()           # before any child: none of them inherits KRIG_SECRETS_FILE
    c = qualify_case
    spec = json.loads(os.environ[SPEC_ENV])
    qdir = pathlib.Path(spec["qdir"])
    t0 = time.monotonic()
    rec = CaseRecord(**c, started=now())
    try:                            # the suite's kernel as it loaded it: no name resolved again
        plan = resolve(c["reproducer"], c["rig"], c["preset"], c["set"],
                       knobs=Knobs.of_record(c.get("knobs"), f"{c['id']}: knobs"))
        plan = plan.checked(qdir / "runs", [("--kernel", c["kernel"])])
        run_dir, verdict = execute(plan.with_loaded(Kernel.of_json(spec["kernels"][c["kernel"]]), c["kernel"]),
                                   qdir / "runs", log=lambda *a, **k: None, workflow="qualify-case")
        rec.verdict, rec.reason, rec.run_dir = verdict.verdict, verdict.reason, str(run_dir)
    except KrigError as e:          # nothing ran (a rig that went away between loading and the run, ...)
        rec.verdict, rec.reason, rec.run_dir = "ERROR", str(e), None
    rec.ended, rec.seconds, rec.ok = now(), round(time.monotonic() - t0, 1), rec.verdict == c["expect"]
    if rec.verdict in UNFINISHED:
        raise KeyboardInterrupt     # Ctrl-C reached the worker: stop here, the case stays to do
    write_case(qdir, rec)
    assert rec.ok, f"{rec.verdict} (expected {c['expect']}) on {c['rig']}: {rec.reason} ({rec.run_dir})"


# -- command line -----------------------------------------------------------------

def cmd_qualify(a) -> int:
    """`krig qualify SUITE`."""
    return qualify(a.suite, a.output, a.fresh, prio=a.prio, rigs=a.rig, check_only=a.check,
                   include_unhealthy=a.include_unhealthy,
                   knobs=parse_knobs(getattr(a, "sysctl", None), getattr(a, "cmdline", None)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workflows.qualify")
    p.add_argument("suite")
    p.add_argument("-o", "--output")
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--prio", type=float)
    p.add_argument("--rig", action="append")
    p.add_argument("--check", action="store_true")
    a = p.parse_args(argv)
    return guarded(lambda: cmd_qualify(a))


if __name__ == "__main__":
    sys.exit(main())
