"""Run directories for the results history's tests and benchmark, made from a real run's records:
tests/data/run-neg-dentry-flood-1g-distro's manifest.json, metrics.json and verdict.json (a
neg-dentry-flood smoke run on Debian's kernel, judged FAIL), copied with the kernel, the rig, the
time, the verdict, a metric's value and the thresholds' outcomes changed as a test asks."""
import hashlib
import json
import pathlib

DATA = pathlib.Path(__file__).resolve().parent / "data" / "run-neg-dentry-flood-1g-distro"
METRIC = "peak_negative_pct_ram"
THRESHOLD = f"{METRIC} <= 5"
RECORDS = {name: json.loads((DATA / name).read_text()) for name in ("manifest.json", "metrics.json", "verdict.json")}


def make_run(root: pathlib.Path, kernel: str, verdict: str, value: float, *, started: str, rig: str = "qemu-1g",
             commit: str | None = None, cause: str | None = None, reason: str = "", params: dict | None = None,
             name: str | None = None, release: str | None = None) -> pathlib.Path:
    """One run directory under root/<reproducer>/<kernel>/<rig>/<name>: the real run's records with
    these facts (the release 6.1.0-KERNEL unless given); its threshold on METRIC passes or fails
    with the verdict (an ERROR run has none)."""
    release = release or f"6.1.0-{kernel}"
    man = json.loads(json.dumps(RECORDS["manifest.json"]))
    man["kernel"].update(name=kernel, release=release)
    man["kernel"]["git"] = {"commit": commit} if commit else None
    man["machine"]["release"] = release
    man["rig"]["name"] = rig
    man["started"], man["ended"] = started, started
    if params:
        man["params"] = {**man["params"], **params}
    d = root / man["reproducer"] / kernel / rig / (name or started.replace(":", "").replace("-", ""))
    d.mkdir(parents=True)
    metrics = json.loads(json.dumps(RECORDS["metrics.json"]))
    metrics[METRIC]["value"] = value
    v = {**RECORDS["verdict.json"], "run_dir": str(d), "verdict": verdict, "cause": cause or
         ("kernel" if verdict == "FAIL" else None), "reason": reason or f"{METRIC} = {value}"}
    judged = verdict in ("PASS", "FAIL")
    outcome = [{"threshold": THRESHOLD, "outcome": "fail" if verdict == "FAIL" else "pass",
                "message": f"{METRIC} = {value:g} %", "host_sensitive": False}] if judged else []
    for fname, data in (("manifest.json", man), ("metrics.json", metrics), ("verdict.json", v),
                        ("thresholds.json", outcome)):
        (d / fname).write_text(json.dumps(data))
    return d


def commit_of(kernel: str) -> str:
    """The commit a made-up kernel is built from (one per kernel name)."""
    return hashlib.sha1(kernel.encode()).hexdigest()


def kernel_sequence(root: pathlib.Path, flaky: bool = True) -> list:
    """k1 and k2 pass, k3 and k4 fail (the regression: last passing k2, first failing k3), k5 passes
    again (fixed in k5); with flaky, kflaky's two reruns disagree. One rig, one SKU."""
    out, n = [], 0
    seq = [("k1", "PASS", 3.0), ("k2", "PASS", 3.5), ("k3", "FAIL", 9.0), ("k3", "FAIL", 9.5), ("k4", "FAIL", 10.0),
           ("k5", "PASS", 4.0)]
    if flaky:
        seq += [("kflaky", "PASS", 4.9), ("kflaky", "FAIL", 5.1)]
    for kernel, verdict, value in seq:
        n += 1
        out.append(make_run(root, kernel, verdict, value, started=f"2026-01-{n:02d}T10:00:00+00:00",
                            commit=commit_of(kernel)))
    return out
