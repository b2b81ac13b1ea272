"""`krig export kcidb RUN|GROUP|QUALIFY_DIR... --origin NAME`: runs as a KCIDB report.

KCIDB is KernelCI's common database of kernel test results (schema v5.3,
validated here with kcidb-io's `kcidb_io.schema.LATEST.validate` before anything
is written or sent). A report holds:

- checkouts: the kernel's source (git repository, commit and branch when the
  manifest records them; the patch series' message id and patchset hash when the
  kernel was built from one);
- builds: the kernel as built (architecture, compiler from the kernel's own
  banner on the console, config name = the krig kernel's name);
- tests: one per run, path `krig.<reproducer>`, and for a judged run (PASS or
  FAIL) one per threshold, path `krig.<reproducer>.<metric>`, with the measured
  value as `number` and the limit, direction and rationale in `misc`.

krig's verdicts map onto KCIDB's statuses by STATUS; an ERROR run (or any run
not judged) has no `number` anywhere: its numbers may come from a broken
instrument. Ids are derived from what they name (the run's start, owner, rig and
directory name; the kernel's identity), so exporting the same runs again gives
the same ids and KCIDB updates instead of duplicating. See docs/kcidb.md.
"""
import datetime
import hashlib
import json
import math
import pathlib
import re
import sys

import jsonschema
import kcidb_io

from analysis.summary import threshold_measurements

from krig import RESULTS_DIR, safeio
from krig.paths import kernel_file
from .argcheck import output_file
from krig.errors import KrigError, UsageError
from .kcidb_submit import read_token, submit
from krig.reproducer import load_reproducer
from krig.results import GROUP_FILE, SUITE_FILE, public_paths, public_repository, run_dirs_of, run_state
from krig.record import Manifest, RunRecord, Verdict, read_metrics, read_verdict
from krig.record_qualify import read_suite
from krig.rundir import RunDir, is_run_dir
from krig.verdict import JUDGED, VERDICTS

SCHEMA = kcidb_io.schema.V5_3            # what the report says it is; validated with LATEST
ORIGIN_RE = re.compile(f"^{kcidb_io.schema.LATEST.origin_pattern}$")

# krig verdict -> KCIDB status. HUNG and CRASHED are the kernel's failures (krig's verdict is
# in misc.krig_verdict); INCOMPLETE and INTERRUPTED are MISS: the harness did not finish the
# run, so neither the test's nor the kernel's status is known (KCIDB's definition of MISS).
STATUS = {"PASS": "PASS", "FAIL": "FAIL", "ERROR": "ERROR", "SKIP": "SKIP", "HUNG": "FAIL",
          "CRASHED": "FAIL", "INCOMPLETE": "MISS", "INTERRUPTED": "MISS"}
# a threshold of a judged run, by the judge's outcome (analysis/test_thresholds.py)
# (a timing threshold crossed on a contended host: the host moved it, ERROR, never the kernel's FAIL)
THRESHOLD_STATUS = {"pass": "PASS", "fail": "FAIL", "unmeasured": "ERROR", "instrument": "ERROR",
                    "error": "ERROR", "contended": "ERROR"}
EXCERPT_LINES = 80
CONFIG_CAP = 4 << 20                     # a kernel .config is ~250 KiB; the architecture is read from it
EXCERPT_MAX = 16384                      # KCIDB's maxLength of log_excerpt
_PATH_BAD = re.compile(r"[^a-zA-Z0-9_-]")
# "Linux version 6.1.0-56-amd64 (who@where) (gcc-12 (Debian 12.2.0-14) 12.2.0, GNU ld (...) 2.40) #1 ..."
_BANNER = re.compile(r"Linux version \S+ \([^()]*\) \((?P<tools>(?:[^()]|\([^()]*\))*)\) #")


def check_origin(origin: str) -> str:
    if not ORIGIN_RE.match(origin or ""):
        raise UsageError(f"--origin {origin!r}: not a KCIDB origin; it must match {ORIGIN_RE.pattern} "
                         "(lower-case letters, digits and underscores, e.g. my_lab)")
    return origin


# -- which runs ----------------------------------------------------------------------

def run_dirs(paths: list, note=None) -> list:
    """(run directory, its public name) of every run the arguments name: a run (manifest.json), a
    group (group.json: its run-* directories) or a qualification directory (suite.json: each case's run)."""
    out, seen = [], set()
    note = note or _stderr

    def add(d: pathlib.Path, named: pathlib.Path):
        if d.resolve() not in seen:
            seen.add(d.resolve())
            out.append((d, public_name(d, named)))
    for p in map(safeio.given, paths):       # the user's own path: results/latest is followed
        if is_run_dir(p):
            add(p, p)
        elif (p / GROUP_FILE).is_file():
            for d in run_dirs_of(p):
                add(d, p)
        elif (p / SUITE_FILE).is_file():
            for d in _suite_runs(p, note):
                add(d, p)
        else:
            raise UsageError(f"{p}: not a run, group or qualification directory "
                             f"(no manifest.json, {GROUP_FILE} or {SUITE_FILE})")
    if not out:
        raise UsageError(f"{' '.join(map(str, paths))}: no runs to export")
    return out


def public_name(d: pathlib.Path, named: pathlib.Path) -> str:
    """What the report calls a run directory (misc.run_dir): its path below the results root, else
    below the directory holding the one named on the command line, else its name; never a path of
    this host."""
    d, named, results = d.resolve(), named.resolve(), RESULTS_DIR.resolve()
    if results in d.parents:
        return str(d.relative_to(results))
    if d == named or named in d.parents:
        return str(d.relative_to(named.parent))
    return d.name


def _suite_runs(qdir: pathlib.Path, note) -> list:
    found = []
    for c in read_suite(qdir).cases:
        if not c.run_dir:
            why = "not run yet" if c.verdict is None else f"{c.verdict} before a run directory was made"
            note(f"krig: export: {qdir}: case {c.id} left out: {why}")
            continue
        d = pathlib.Path(c.run_dir)
        if not d.is_absolute() and not d.exists():
            d = qdir / d
        if not is_run_dir(d):
            raise UsageError(f"{qdir / SUITE_FILE}: case {c.id}: run directory {d} has no manifest.json")
        found.append(d)
    return found


# -- the report ----------------------------------------------------------------------

def build_report(paths: list, origin: str, note=None) -> dict:
    """The KCIDB report of every run the paths name, validated (one line if it is not)."""
    check_origin(origin)
    checkouts: dict[str, dict] = {}
    builds: dict[str, dict] = {}
    tests: list[dict] = []
    for d, name in run_dirs(paths, note):
        run = {**_read_run(d), "name": name}
        checkout = _checkout(run, origin)
        build = _build(run, origin, checkout["id"])
        checkouts.setdefault(checkout["id"], checkout)
        builds.setdefault(build["id"], build)
        tests += _tests(run, origin, build["id"])
    report = {"version": {"major": SCHEMA.major, "minor": SCHEMA.minor},
              "checkouts": list(checkouts.values()), "builds": list(builds.values()), "tests": tests}
    validate(report)
    return report


def validate(report: dict) -> None:
    try:
        kcidb_io.schema.LATEST.validate(report)
    except jsonschema.exceptions.ValidationError as e:
        where = "/".join(str(x) for x in e.absolute_path) or "(top)"
        raise KrigError(f"the report does not validate against KCIDB v{SCHEMA.major}.{SCHEMA.minor} "
                        f"at {where}: {e.message[:300]}") from None


def _read_run(d: pathlib.Path) -> dict:
    run = RunDir(d)         # a run directory is read only through RunDir (docs/security.md)
    manifest = RunRecord.read(run, required=False).manifest
    state = run_state(d)
    if state == "RUNNING":
        pid = (manifest.owner or {}).get("pid")
        raise UsageError(f"{d}: still running (krig pid {pid}); export it when it ends")
    verdict = read_verdict(run) or Verdict(None)
    if state not in STATUS:
        raise UsageError(f"{d / 'verdict.json'}: verdict {state!r} is not one of {', '.join(STATUS)}")
    if verdict.verdict != state:           # no verdict recorded: the run never ended
        verdict = Verdict(state, reason=verdict.reason or "the krig process ended without recording an end "
                          "(killed?)")
    return {"dir": d, "run": run, "manifest": manifest, "verdict": verdict, "console": run.text("console.log"),
            "metrics": lambda: read_metrics(run)}


def _id(origin: str, *parts) -> str:
    return f"{origin}:krig-" + hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _checkout(run: dict, origin: str) -> dict:
    """The source: git and patch series where the manifest has them (keys kernel.git and series)."""
    kernel = run["manifest"].kernel
    git, series = dict(kernel.git or {}), run["manifest"].series or {}
    if "repository" in git:             # an older manifest's may carry user:token@ or a path of this host
        git["repository"] = public_repository(git["repository"])
    identity = {"git": git, "patchset_hash": series.get("patchset_hash"), "message_id": series.get("message_id")}
    if not git:         # a kernel without a recorded source (a distro package) is its release
        identity.update(kernel=kernel.name, release=kernel.release)
    c = {"id": _id(origin, "checkout", identity), "origin": origin, "valid": True}
    misc = {"krig_kernel": kernel.name}
    repo = git.get("repository")
    if isinstance(repo, str) and repo.startswith("https://"):
        c["git_repository_url"] = repo
    elif repo:
        misc["git_repository"] = repo          # KCIDB takes only https:// URLs
    commit = git.get("commit")
    if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit):
        c["git_commit_hash"] = commit
    elif commit:
        misc["git_commit"] = commit
    if git.get("branch"):
        c["git_repository_branch"] = str(git["branch"])
    if series:
        ph = series.get("patchset_hash")
        if isinstance(ph, str) and re.fullmatch(r"[0-9a-f]{64}", ph):
            c["patchset_hash"] = ph
        mid = str(series.get("message_id") or "").strip().strip("<>")
        if "@" in mid:
            c["message_id"] = mid
        misc["series"] = {k: series[k] for k in ("subject", "author", "base_commit", "message_id", "patchset_hash")
                          if series.get(k)}
        if series.get("subject"):
            c["comment"] = _text(series["subject"])[:1000]
    if "comment" not in c and kernel.description:
        c["comment"] = _text(public_paths(kernel.description))[:1000]
    c["misc"] = _pruned(misc)
    return c


def _build(run: dict, origin: str, checkout_id: str) -> dict:
    kernel = run["manifest"].kernel
    b = {"id": _id(origin, "build", checkout_id, kernel.name, kernel.release,
                   kernel.config_sha256_16, kernel.debug_options),
         "checkout_id": checkout_id, "origin": origin, "status": "PASS"}   # krig booted what was built
    if kernel.name:
        b["config_name"] = _text(kernel.name)
    arch = _architecture(run)
    if arch:
        b["architecture"] = arch
    m = _BANNER.search(run["console"])
    if m:           # the compiler, without the linker that follows it
        b["compiler"] = _text(re.split(r", (?:GNU ld|LLD|ld\.)", m.group("tools"))[0]).strip()
    if kernel.description:
        b["comment"] = _text(public_paths(kernel.description))[:1000]
    misc = {k: getattr(kernel, k) for k in ("release", "config_sha256_16", "debug_options", "extra_cmdline")
            if getattr(kernel, k)}
    b["misc"] = _pruned(misc)
    return b


def _architecture(run: dict) -> str | None:
    """From the kernel's config when it is a config krig keeps (paths.kernel_file, the rule a bundle
    reads a host file by) and is the one the run recorded, else from the emulator that ran it
    (qemu-system-<arch>)."""
    kernel = run["manifest"].kernel
    try:
        # a path the run directory names: only a kernel's config krig keeps, read as data (a
        # regular file, no link, capped, never blocking); any other host file is not read
        cfg = kernel_file(kernel.config, "config")
        if cfg is None:
            raise ValueError("not a kernel config krig keeps")
        data = safeio.read_bytes(*safeio.split(str(cfg)), cap=CONFIG_CAP)
        if hashlib.sha256(data).hexdigest()[:16] == kernel.config_sha256_16:
            for opt, arch in (("CONFIG_X86_64", "x86_64"), ("CONFIG_ARM64", "arm64"), ("CONFIG_X86_32", "i386"),
                              ("CONFIG_RISCV", "riscv"), ("CONFIG_PPC64", "powerpc"), ("CONFIG_S390", "s390")):
                if f"\n{opt}=y\n".encode() in data:
                    return arch
    except (KeyError, TypeError, ValueError, OSError, UsageError):
        pass
    argv = (run["manifest"].rig_facts or {}).get("qemu_argv") or []
    m = re.search(r"qemu-system-([a-z0-9_]+)$", str(argv[0])) if argv else None
    return m.group(1) if m else None


def _tests(run: dict, origin: str, build_id: str) -> list:
    man, verdict = run["manifest"], run["verdict"]
    v = verdict.verdict or "INCOMPLETE"
    repro_name = man.reproducer or "unknown"
    owner = man.owner or {}
    run_id = _id(origin, "run", repro_name, man.rig_name, man.started,
                 owner.get("host"), owner.get("pid"), owner.get("start"), run["dir"].name)
    base: dict[str, object] = {"build_id": build_id, "origin": origin, "environment": _environment(man)}
    start, duration = _times(man)
    if start:
        base["start_time"] = start
    path = f"krig.{_PATH_BAD.sub('_', repro_name)}"
    t = {**base, "id": run_id, "path": path, "status": STATUS[v],
         "comment": _text(f"{repro_name}: {v}: {verdict.reason}")[:1000]}
    if duration is not None:
        t["duration"] = duration
    misc = {"krig_verdict": v, "reason": _text(verdict.reason), "reproducer": repro_name,
            "preset": man.preset, "params": man.params,
            "knobs": man.knobs,         # each --sysctl as set and read back, each --cmdline (krig/knobs.py)
            "kernel_release": man.release,
            "krig_revision": man.krig_revision, "run_dir": run["name"]}
    for k in ("warnings", "notes"):
        if getattr(verdict, k):
            misc[k] = getattr(verdict, k)
    if v != "PASS":
        excerpt = _excerpt(run)
        if excerpt:
            t["log_excerpt"] = excerpt
    out = [t]
    if v in JUDGED:                # only a judged run's numbers are measurements
        try:
            metrics = run["metrics"]()
        except (OSError, KrigError):
            metrics = {}
        misc["metrics"] = {n: {"value": m.value, "unit": m.unit, "better": m.better}
                           for n, m in metrics.items() if _finite(m.value)}
        out += _threshold_tests(run, repro_name, base, run_id, path)
    t["misc"] = _pruned(misc)
    return out


def _threshold_tests(run: dict, repro_name: str, base: dict, run_id: str, path: str) -> list:
    try:
        repro = load_reproducer(repro_name)
    except UsageError as e:
        raise UsageError(f"{run['dir']}/manifest.json: field reproducer: {e}") from None
    out: list[dict] = []
    seen: dict[str, int] = {}
    for m in threshold_measurements(run["run"], repro):
        thr, outcome = m["threshold"], m["outcome"]
        if outcome is None:             # the judge did not record it
            continue
        seen[thr.metric] = seen.get(thr.metric, 0) + 1
        suffix = "" if seen[thr.metric] == 1 else f"-{seen[thr.metric]}"
        status = THRESHOLD_STATUS.get(outcome, "ERROR")
        t = {**base, "id": f"{run_id}.{thr.metric}{suffix}", "path": f"{path}.{_PATH_BAD.sub('_', thr.metric)}",
             "status": status, "comment": _text(f"{thr.metric} = {_num(m['value'])} {m['unit']}".rstrip()
                                                + f", limit {thr.describe()} {m['unit']}".rstrip() + f": {outcome}")}
        if status in ("PASS", "FAIL") and m["value"] is not None:
            t["number"] = {"value": m["value"], **({"unit": m["unit"]} if m["unit"] else {})}
        misc = {"limit": thr.describe(), "better": m["better"], "rationale": thr.rationale, "kind": thr.kind,
                "krig_outcome": outcome}
        if thr.min is not None:
            misc["limit_min"] = thr.min
        if thr.max is not None:
            misc["limit_max"] = thr.max
        if thr.host_sensitive:
            misc["host_sensitive"] = True
        t["misc"] = _pruned(misc)
        out.append(t)
    return out


def _environment(man: Manifest) -> dict:
    rig, facts = man.rig, man.rig_facts or {}
    cpus = man.cpus
    mem = man.mem_total_bytes or rig.memory_bytes
    accel = facts.get("accel")
    misc = {"rig": rig.name, "rig_kind": rig.kind, "cpus": cpus, "mem_total_bytes": mem,
            "accelerator": accel, "emulator": facts.get("qemu_version"), "description": rig.spec.get("description")}
    text = f"rig {rig.name or '?'} ({rig.kind or '?'}{', accelerator ' + accel if accel else ''})"
    if cpus:
        text += f": {cpus} CPUs"
    if mem:
        text += f", {mem / (1 << 30):.2f} GiB RAM"
    return {"comment": _text(text), "misc": _pruned(misc)}


def _times(man: Manifest) -> tuple[str | None, float | None]:
    def parse(s):
        try:
            t = datetime.datetime.fromisoformat(s)
        except (TypeError, ValueError):
            return None
        return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)
    start, end = parse(man.started), parse(man.ended)
    duration = (end - start).total_seconds() if start and end and end >= start else None
    return (start.isoformat() if start else None), duration


def _excerpt(run: dict) -> str:
    """The console where it matters: the crash and what led to it, else its last lines."""
    ctx = run["verdict"].crash_context
    lines = ctx if ctx else run["console"].splitlines()[-EXCERPT_LINES:]
    text = _text("\n".join(lines)).strip()
    return text[-EXCERPT_MAX:] if text else ""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _pruned(x):
    """KCIDB has no nulls: a field without a value is left out, in misc too."""
    if isinstance(x, dict):
        return {k: _pruned(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_pruned(v) for v in x if v is not None]
    return x


def _num(v) -> str:
    return "not measured" if v is None else f"{v:g}"


def _text(s) -> str:
    return str(s).replace("\0", "")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# -- the command ---------------------------------------------------------------------

def export(paths: list, origin: str, output=None, submit_url=None, token_file=None) -> int:
    """Build and validate the report; write it (-o FILE, or stdout without -o and --submit);
    send it (--submit URL --token-file FILE) and print the submission id."""
    if bool(submit_url) != bool(token_file):
        raise UsageError("--submit and --token-file go together: --submit URL --token-file FILE (a 0600 file)")
    token = read_token(token_file) if token_file else None      # bad input before any work
    if output is not None:
        output_file(output, "-o")
    report = build_report(paths, origin)
    text = json.dumps(report, indent=2) + "\n"
    if output:
        out = pathlib.Path(output)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(out)
        print(f"krig: export: {len(report['tests'])} tests of {len(report['builds'])} builds -> {out}",
              file=sys.stderr)
    elif not submit_url:
        sys.stdout.write(text)
    if submit_url:
        assert token is not None        # --submit goes with --token-file (checked above)
        print(submit(submit_url, token, text.encode()))
    return 0


assert set(STATUS) == set(VERDICTS), "every krig verdict needs a KCIDB status"


def cmd_export(a) -> int:
    """`krig export kcidb PATH... --origin NAME`."""
    return export(a.paths, a.origin, a.output, a.submit, a.token_file)
