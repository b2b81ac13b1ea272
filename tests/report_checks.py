"""Checks of a run's report, shared by the fast tests (synthetic run
directories) and the smoke tests (real runs). The oracles are independent of
analysis/: samples.tsv read with the csv module, trace.dat read by
`trace-cmd report`, the page read by Chromium, the session by KernelShark."""
import collections
import csv
import json
import pathlib
import re
import subprocess

import viewers

PNG_MIN, PNG_MAX = (300, 200), (3000, 3000)


def read_csv(path: pathlib.Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def samples_oracle(run_dir: pathlib.Path, spec: dict, mem_total_bytes: int) -> list[tuple[float, float]]:
    """(t, y) of a samples series, computed straight from samples.tsv."""
    with open(run_dir / "samples.tsv", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t")]
    rows = [r for r in rows if None not in r.values() and all(v != "" for v in r.values())]
    t0 = float(rows[0]["time"])
    if spec.get("during"):
        phases = {}
        for line in (run_dir / "phases.tsv").read_text().splitlines():
            w, name = line.split("\t")
            phases.setdefault(name, float(w))
        a, b = phases[spec["during"][0]], phases[spec["during"][1]]
        rows = [r for r in rows if a <= float(r["time"]) <= b]
    pts = []
    for r in rows:
        y = float(r[spec["column"]]) - (float(r[spec["minus"]]) if spec.get("minus") else 0.0)
        y *= float(r[spec["times"]]) if spec.get("times") else 1.0
        pts.append((float(r["time"]) - t0, y))
    if spec["transform"] in ("rate", "-rate"):
        sign = -1.0 if spec["transform"] == "-rate" else 1.0
        pts = [(t1, sign * (y1 - y0) / (t1 - t0_)) for (t0_, y0), (t1, y1) in zip(pts, pts[1:]) if t1 > t0_]
    elif spec["transform"] == "pct_ram":
        pts = [(t, 100.0 * y / mem_total_bytes) for t, y in pts]
    return [(t, y * spec["scale"]) for t, y in pts]


def trace_cmd_groups(trace: pathlib.Path, event: str, field: str) -> list[int]:
    """Events per value of `field`, counted from `trace-cmd report` (sorted)."""
    out = subprocess.run(["trace-cmd", "report", "-i", str(trace)], capture_output=True, text=True,
                         timeout=600).stdout
    short = event.split(":")[1]
    counts = collections.Counter()
    pat = re.compile(r"new lsn (\d+/\d+)") if field == "new_lsn" else re.compile(rf"\b{field}=(\S+)")
    for line in out.splitlines():
        if f" {short}:" in line:
            m = pat.search(line)
            assert m, f"no {field} in: {line}"
            counts[m.group(1)] += 1
    return sorted(counts.values())


def close(a: float, b: float, rel=1e-9) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def check_plots(run_dir: pathlib.Path, repro, mem_total_bytes: int) -> int:
    """Every declared plot: a sane, non-blank PNG and a CSV equal to the run's data. Returns plots seen."""
    n = 0
    for spec in repro.plots:
        png, data = run_dir / f"plot-{spec['name']}.png", run_dir / f"plot-{spec['name']}.csv"
        assert png.exists() and data.exists(), f"{spec['name']}: missing PNG or CSV"
        img = viewers.png_pixels(png)
        h, w = img.shape[:2]
        assert PNG_MIN[0] <= w <= PNG_MAX[0] and PNG_MIN[1] <= h <= PNG_MAX[1], (w, h)
        assert not viewers.blank(img), f"{png} is blank"
        rows = read_csv(data)
        for s in spec["series"]:
            got = [(float(r["x"]), float(r["y"])) for r in rows if r["label"] == s["label"]
                   and r["kind"] in ("point", "bar")]
            if s["kind"] == "samples":
                want = samples_oracle(run_dir, s, mem_total_bytes)
                assert len(got) == len(want) and len(want) > 3, (s["label"], len(got), len(want))
                for (gx, gy), (wx, wy) in zip(got, want):
                    assert close(gx, wx, 1e-6) and close(gy, wy, 1e-6), (s["label"], gx, gy, wx, wy)
            else:
                want = trace_cmd_groups(run_dir / "trace.dat", s["event"], s["group_by"])
                assert sorted(int(y) for _, y in got) == want, s["label"]
        lines = {r["label"]: float(r["y"]) for r in rows if r["kind"] == "hline"}
        # an optional metric line is drawn only when its metric has a value
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert len(lines) == len([ln for ln in spec["lines"] if not ln.get("optional")
                                  or (metrics.get(ln["metric"]) or {}).get("value") is not None])
        n += 1
    return n


def check_summary(run_dir: pathlib.Path):
    text = (run_dir / "summary.txt").read_bytes()
    text.decode("ascii")                       # ASCII only
    lines = text.decode().splitlines()
    # 72 columns, but a command is never cut: a line of the reproduce command may be longer
    # only when it holds one argument that is longer by itself (a rig file's path)
    long = [ln for ln in lines if len(ln) > 72]
    assert all(len(ln.strip().removesuffix(" \\").split()) == 1 for ln in long), long
    metrics = json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").exists() else {}
    body = "\n".join(lines)
    for name, m in metrics.items():
        match = re.search(rf"^  {re.escape(name)} =\s+(\S+)", body, re.M)
        assert match, f"metric {name} not in summary.txt"
        if m["value"] is None:
            assert match.group(1) == "n/a"
        else:
            # integers in full, the rest to 6 significant digits
            assert close(float(match.group(1)), m["value"], 5e-6), (name, match.group(1), m)
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert lines[0].endswith(verdict["verdict"])
    assert "krig run " in body
    manifest = json.loads((run_dir / "manifest.json").read_text())
    release = manifest.get("machine", {}).get("release") or manifest["kernel"]["release"]
    assert release in body
    if (run_dir / "time.txt").exists():
        assert "time.txt:" in body and "elapsed" in body
    if verdict["verdict"] == "FAIL":
        assert "CROSSED" in body
    return lines


def check_page(run_dir: pathlib.Path, tmp: pathlib.Path, n_images: int) -> dict:
    res = viewers.check_report_in_chromium(run_dir / "report.html", tmp)
    assert res["screenshot"] is not None, res
    assert not res["console"], res["console"]
    assert res["broken"] == [], res
    assert res["images"] == n_images, res
    assert not viewers.blank(viewers.png_pixels(res["screenshot"])), "blank screenshot"
    return res


def check_session(run_dir: pathlib.Path, tmp: pathlib.Path, cwd: pathlib.Path, session_arg=None) -> dict:
    """KernelShark opens the session at the stated window, shows something, and
    saves (on quit) the same window and the stated events."""
    session = run_dir / "trace.kshark.json"
    doc = json.loads(session.read_text())
    res = viewers.kernelshark_session(session_arg or session, tmp, cwd)
    assert not viewers.blank(res["screenshot"]), "blank KernelShark screenshot"
    saved = res["saved"]
    assert saved is not None, f"KernelShark saved no session: {res['log'][-1500:]}"
    assert saved["data streams"], f"KernelShark loaded no trace: {res['log'][-1500:]}"
    stream = saved["data streams"][0]
    assert pathlib.Path(stream["data"]["file"]).resolve() == (run_dir / "trace.dat").resolve()
    a, b = doc["Model"]["range"]
    sa, sb = saved["Model"]["range"]
    # KernelShark rounds the range to whole bins
    slack = (b - a) * 0.01 + 1000
    assert abs(sa - a) <= slack and abs(sb - b) <= slack, (doc["Model"], saved["Model"])
    want = set(doc["data streams"][0]["filters"]["show event filter"])
    assert set(stream["filters"].get("show event filter", [])) == want
    return res
