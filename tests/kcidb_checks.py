"""Checks of `krig export kcidb` shared by the guest tests (smokes, group, qualification)
and tests/workflows/test_kcidb.py. The oracle is kcidb-io's own validator and what the run
directories record (verdict.json, metrics.json, repro.toml read here with tomllib)."""
import json
import os
import pathlib
import subprocess
import time
import tomllib

import kcidb_io

from conftest import KRIG, ROOT

NO_PROXY = {"no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost"}
# krig's verdict -> KCIDB's status, as docs/kcidb.md states it
STATUS = {"PASS": "PASS", "FAIL": "FAIL", "ERROR": "ERROR", "SKIP": "SKIP", "HUNG": "FAIL", "CRASHED": "FAIL",
          "INCOMPLETE": "MISS", "INTERRUPTED": "MISS"}


def one_line(p, code: int, *needles):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def export(krig_cli, tmp_path: pathlib.Path, *dirs, origin="lab_7") -> dict:
    """`krig export kcidb DIRS -o FILE`: the report, validated by kcidb-io here too."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "kcidb.json"
    p = krig_cli("export", "kcidb", *map(str, dirs), "--origin", origin, "-o", str(out))
    assert p.returncode == 0, p.stderr
    report = json.loads(out.read_text())
    kcidb_io.schema.LATEST.validate(report)
    assert report["version"] == {"major": 5, "minor": 3}
    return report


def exported_as(report: dict, run_dir) -> str:
    """The report's name of a run directory (misc.run_dir: the longest end of its path that names a
    run of the report; never the absolute path)."""
    names = [t["misc"]["run_dir"] for t in report["tests"] if t["path"].count(".") == 1]
    assert not [n for n in names if n.startswith("/")], names
    path = str(pathlib.Path(run_dir).resolve())
    ends = [n for n in names if path == n or path.endswith("/" + n)]
    assert ends, (run_dir, names)
    return max(ends, key=len)


def run_tests(report: dict, run_dirs=None) -> dict:
    """run directory (as given, or as the report names it) -> (its run test, [its threshold tests])."""
    runs = {t["misc"]["run_dir"]: t for t in report["tests"] if t["path"].count(".") == 1}
    by_id = {t["id"]: d for d, t in runs.items()}
    out = {d: (t, []) for d, t in runs.items()}
    for t in report["tests"]:
        if t["path"].count(".") == 2:
            out[by_id[t["id"].rsplit(".", 1)[0]]][1].append(t)
    if run_dirs is not None:
        out = {str(d): out[exported_as(report, d)] for d in run_dirs}
    return out


def check_report(report: dict, run_dirs: list) -> None:
    """Every run is there once with its verdict's status; a judged run's thresholds carry the
    numbers of its metrics.json; any other run has no number anywhere."""
    assert len(run_tests(report)) == len(set(map(str, run_dirs)))
    tests = run_tests(report, run_dirs)
    for d in map(pathlib.Path, run_dirs):
        verdict = json.loads((d / "verdict.json").read_text())["verdict"]
        run, thresholds = tests[str(d)]
        repro = json.loads((d / "manifest.json").read_text())["reproducer"]
        assert run["path"] == f"krig.{repro}" and run["status"] == STATUS[verdict], (d, verdict)
        assert run["misc"]["krig_verdict"] == verdict
        if verdict not in ("PASS", "FAIL"):
            no_measurement(report, [d])
            continue
        spec = tomllib.loads((ROOT / "reproducers" / repro / "repro.toml").read_text())
        metrics = json.loads((d / "metrics.json").read_text())
        assert len(thresholds) == len(spec["thresholds"])
        for t, th in zip(thresholds, spec["thresholds"]):
            m = metrics[th["metric"]]
            assert t["path"] == f"krig.{repro}.{th['metric']}"
            assert t["number"]["value"] == m["value"] and t["number"].get("unit", "") == m["unit"]
            assert t["misc"]["better"] == m["better"] and t["misc"]["rationale"] == th["rationale"]
            assert (t["misc"].get("limit_min"), t["misc"].get("limit_max")) == (th.get("min"), th.get("max"))
            assert t["status"] in ("PASS", "FAIL")
        if verdict == "PASS":
            assert {t["status"] for t in thresholds} == {"PASS"}
        else:
            assert "FAIL" in {t["status"] for t in thresholds}


def no_measurement(report: dict, run_dirs: list) -> None:
    """The runs' tests carry no number, no threshold tests and no metrics."""
    tests = run_tests(report, run_dirs)
    for d in map(str, run_dirs):
        run, thresholds = tests[d]
        assert not thresholds, d
        assert "number" not in run and "metrics" not in run["misc"], d


def _procs_holding(secret: str) -> list:
    """Processes whose argv or environment holds the secret (every process this host shows)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for what in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    if secret.encode() in f.read():
                        found.append((int(pid), what))
            except OSError:
                pass
    return found


def submit_watching(server: dict, paths: list, token_file: pathlib.Path, origin: str):
    """`krig export kcidb PATHS --submit URL --token-file FILE`; while krig's request is held
    open at the server (the token is in flight), every process's argv and environment is read."""
    argv = KRIG + ["export", "kcidb", *paths, "--origin", origin, "--submit", server["url"],
                   "--token-file", str(token_file)]
    p = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **NO_PROXY}, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = {"scans": 0, "leaks": []}
    try:
        deadline = time.monotonic() + 120
        while not server["arrived"].wait(0.05) and time.monotonic() < deadline and p.poll() is None:
            seen["leaks"] += _procs_holding(server["token"])
            seen["scans"] += 1
        assert server["arrived"].is_set(), "krig never reached the server"
        seen["leaks"] += _procs_holding(server["token"])         # the request is open now
        seen["scans"] += 1
    finally:
        server["hold"].set()
        out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, p.returncode, out, err), seen


def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def all_numbers(obj):
    """Every number anywhere in a JSON value (a leak check that does not trust the layout)."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from all_numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from all_numbers(v)
    elif finite(obj):
        yield obj
