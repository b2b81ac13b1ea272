"""krig qualify: the suite file, and a real qualification on two QEMU rigs of different memory.

The guest test runs two seed reproducers (the flood's smoke, a smaller AIL storm)
on a 1 GiB and a 2 GiB rig (4 runs, two at a time),
interrupts it with SIGINT after the first run has finished, and runs the same
command again: finished runs are not redone (same run directories, verdict
files untouched), the rest finish, and the JUnit, HTML and sign-off say so.

Covers: workflows/qualify_report.py.
"""
import json
import os
import pathlib
import signal
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

import kcidb_checks
from conftest import KRIG, ROOT, qemu_pids
from krig.errors import UsageError
from krig.record_qualify import CaseRecord
from workflows.qualify import case_id, load_suite
from workflows.qualify_report import signoff_lines

# Two of the seed smokes, the smallest that still give their verdicts on Debian's 6.1 with
# two TCG guests sharing the 2 cores (docs/qualify.md): the flood's own
# smoke preset (a 20 s flood PASSed on the 2 GiB rig of a loaded host: growth 4% of a
# doubled limit), the AIL storm with 30,000 files and 2 writers. unlink-dentry-growth is
# left out: with two guests at once its trough/peak ratio measured 0.45 on both rigs
# (the rate swings with the host, ~200 unlinks/s), a FAIL of the host, not the kernel.
SCALED_SMOKES = """
description = "seed smokes, scaled down, on two QEMU rigs of different memory"
kernels = ["distro"]
rigs = ["q1g", "q2g"]

[[runs]]
reproducer = "neg-dentry-flood"
preset = "smoke"
expect = "FAIL"

[[runs]]
reproducer = "xfs-ail-storm"
preset = "smoke"
set = { files = 30000, writers = 2 }
"""


def qemu_rigs(d: pathlib.Path, sizes=("1G", "2G")) -> pathlib.Path:
    """Rig files q1g, q2g...: the default rig with other memory sizes."""
    d.mkdir(exist_ok=True)
    base = (ROOT / "rigs" / "qemu-default.toml").read_text()
    for size in sizes:
        text = base.replace('memory = "4G"', f'memory = "{size}"')
        assert text != base
        (d / f"q{size.lower()}.toml").write_text(text)
    return d


def qualify_cmd(suite, out, rig_dir, **popen):
    env = {**os.environ, "KRIG_RIG_PATH": str(rig_dir), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(KRIG + ["qualify", str(suite), "-o", str(out)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, **popen)


def finished_cases(out: pathlib.Path) -> dict:
    return {p.name: json.loads(p.read_text()) for p in (out / "cases").glob("*.json")} if (out / "cases").exists() else {}


def check_outputs(out: pathlib.Path, n_cases: int, rigs: list):
    suite = json.loads((out / "suite.json").read_text())
    assert suite["complete"] and suite["all_as_expected"], suite["signoff"]
    assert len(suite["cases"]) == n_cases
    cases = ET.parse(out / "junit.xml").getroot().findall(".//testcase")
    assert len(cases) == n_cases
    assert not [c for c in cases if c.find("failure") is not None or c.find("skipped") is not None]
    page = (out / "qualify.html").read_text()
    for c in suite["cases"]:
        report = pathlib.Path(c["run_dir"]) / "report.html"
        assert report.is_file()
        assert f'href="{os.path.relpath(report, out)}"' in page
    lines = (out / "signoff.txt").read_text().splitlines()
    assert [ln.split(":")[0] for ln in lines] == [f"rig {r}" for r in rigs]
    assert all("SIGNED OFF: all" in ln for ln in lines), lines
    return suite


@pytest.mark.smoke
@pytest.mark.testlab        # qualify's real runs in make test: tests/workflows/test_qualify_ipmi.py, tests/rigs/test_lab_ipmi.py
@pytest.mark.long(4)
def test_qualify_two_qemu_rigs_resumes_after_sigint(tmp_path, krig_cli):
    rig_dir = qemu_rigs(tmp_path / "rigs")
    suite_file = tmp_path / "scaled.toml"
    suite_file.write_text(SCALED_SMOKES)
    out = tmp_path / "qual"
    t0 = time.monotonic()
    p = qualify_cmd(suite_file, out, rig_dir)
    try:
        for _ in range(1800):                       # until the first run has finished (at most 15 min)
            if finished_cases(out) or p.poll() is not None:
                break
            time.sleep(0.5)
        first = finished_cases(out)
        assert first, f"no run finished: {p.poll()}\n{p.stdout.read() if p.poll() is not None else ''}"
        os.killpg(p.pid, signal.SIGINT)             # Ctrl-C: the whole process group
        rc = p.wait(300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    log1 = p.stdout.read()
    t1 = time.monotonic()
    assert rc == 130, log1
    assert "Traceback" not in log1
    assert not qemu_pids(str(tmp_path)), "qemu left behind after SIGINT"
    before = finished_cases(out)
    assert len(before) < 4, "everything had finished before the SIGINT"
    stamps = {n: (r["run_dir"], (pathlib.Path(r["run_dir"]) / "verdict.json").stat().st_mtime_ns)
              for n, r in before.items()}

    p2 = qualify_cmd(suite_file, out, rig_dir)
    log2 = p2.communicate(timeout=1800)[0]
    t2 = time.monotonic()
    assert p2.returncode == 0, log2
    assert f"{len(before)} finished before, {4 - len(before)} to run" in log2
    after = finished_cases(out)
    assert len(after) == 4
    for n, (run_dir, mtime) in stamps.items():       # finished runs were not redone
        assert after[n]["run_dir"] == run_dir
        assert (pathlib.Path(run_dir) / "verdict.json").stat().st_mtime_ns == mtime
    run_dirs = {str(m.parent) for m in (out / "runs").glob("*/*/*/*/manifest.json")}
    assert {r["run_dir"] for r in after.values()} <= run_dirs
    for extra in run_dirs - {r["run_dir"] for r in after.values()}:      # what the SIGINT cut short
        assert json.loads((pathlib.Path(extra) / "manifest.json").read_text())["outcome"] == "interrupted"
    assert len(run_dirs) <= 4 + 2                    # at most one interrupted run per rig
    suite = check_outputs(out, 4, ["q1g", "q2g"])
    verdicts = {(c["reproducer"], c["rig"]): c["verdict"] for c in suite["cases"]}
    assert verdicts == {(r, g): v for r, v in (("neg-dentry-flood", "FAIL"), ("xfs-ail-storm", "PASS"))
                        for g in ("q1g", "q2g")}
    mems = {c["rig"]: json.loads((pathlib.Path(c["run_dir"]) / "manifest.json").read_text())["machine"]
            ["mem_total_bytes"] for c in suite["cases"]}
    assert mems["q1g"] < mems["q2g"]
    assert not qemu_pids(str(tmp_path))
    print(f"first invocation {t1 - t0:.0f}s ({len(before)} runs finished), second {t2 - t1:.0f}s")

    # the qualification as a KCIDB report: its four runs (not what the SIGINT cut short), and
    # the suite's junit.xml carries each judged run's thresholds with their numbers
    report = kcidb_checks.export(krig_cli, tmp_path / "kcidb", out)
    kcidb_checks.check_report(report, [c["run_dir"] for c in suite["cases"]])
    assert {b["misc"]["release"] for b in report["builds"]} == {m["kernel"]["release"] for m in (
        json.loads((pathlib.Path(c["run_dir"]) / "manifest.json").read_text()) for c in suite["cases"])}
    for tc in ET.parse(out / "junit.xml").getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        metrics = json.loads((pathlib.Path(props["run_dir"]) / "metrics.json").read_text())
        metric = {"neg-dentry-flood": "peak_negative_pct_ram", "xfs-ail-storm": "ail_inserts"}[props["reproducer"]]
        assert float(props[f"{metric}.value"]) == metrics[metric]["value"]
        assert props[f"{metric}.unit"] == metrics[metric]["unit"] and props[f"{metric}.limit"]


# -- no guest ------------------------------------------------------------------

def test_suite_matrix_and_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("KRIG_RIG_PATH", str(qemu_rigs(tmp_path / "rigs")))
    f = tmp_path / "s.toml"
    f.write_text(SCALED_SMOKES.replace('kernels = ["distro"]', 'kernels = ["distro"]\nrepeats = 2'))
    s = load_suite(f)
    assert len(s["cases"]) == 2 * 2 * 2 and s["rigs"] == ["q1g", "q2g"]
    flood = [c for c in s["cases"] if c["reproducer"] == "neg-dentry-flood"]
    ail = [c for c in s["cases"] if c["reproducer"] == "xfs-ail-storm"]
    assert {c["expect"] for c in flood} == {"FAIL"} and ail[0]["set"] == {"files": "30000", "writers": "2"}
    assert len({c["id"] for c in s["cases"]}) == 8
    assert case_id(flood[0]) == load_suite(f)["cases"][s["cases"].index(flood[0])]["id"]   # stable


@pytest.mark.parametrize("text,message", [
    ('rigs = ["q1g"]\n', "missing required field 'runs'"),
    ('[[runs]]\nreproducer = "nope"\n', "runs[0]: reproducer 'nope': unknown"),
    ('[[runs]]\nreproducer = "selftest-pass"\nexpect = "GOOD"\n', ".runs[0].expect.distro: 'GOOD' is not one of"),
    ('[[runs]]\nreproducer = "selftest-pass"\nrepeats = 0\n', ".runs[0].repeats: 0 is not in 1..100"),
    ('[[runs]]\nreproducer = "selftest-pass"\nset = { files = 0 }\n', "runs[0] on rig qemu-default: --set files"),
    ('rigs = ["nope"]\n[[runs]]\nreproducer = "selftest-pass"\n', "runs[0]: --rig 'nope': unknown rig"),
    ('[[runs]]\nreproducer = "selftest-pass"\nwhat = 1\n', "runs[0]: unknown field 'what'"),
    ('kernels = ["distro", "distro"]\n[[runs]]\nreproducer = "selftest-pass"\n', ".kernels: expected a non-empty list"),
    ('runs = []\n', ".runs: the suite names no runs"),
    ('runs = [1]\n', ".runs[0]: expected a table ([[runs]])"),
    ('[[runs]]\nreproducer = "selftest-pass"\nexpect = 1\n', ".runs[0].expect: expected string or table"),
    ('[[runs]]\nreproducer = "selftest-pass"\npreset = 2\n', ".runs[0].preset: expected"),
])
def test_bad_suite_is_one_line(tmp_path, text, message):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(UsageError) as e:
        load_suite(f)
    assert message in str(e.value) and "\n" not in str(e.value)
    p = subprocess.run(KRIG + ["qualify", str(f), "-o", str(tmp_path / "q")], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert not (tmp_path / "q").exists()


def test_check_checks_and_runs_nothing(tmp_path):
    """`krig qualify --check`: the suite, its rigs and kernels and the host checked, exit 0, no
    qualification directory, nothing built (an empty kernel cache)."""
    from test_fake_rig import fake_rig
    rig = fake_rig(tmp_path)
    env = {**os.environ, "KRIG_CACHE": str(tmp_path / "cache"), "KRIG_RESULTS": str(tmp_path / "results")}
    p = subprocess.run(KRIG + ["qualify", "qualify/seed-scale.toml", "--check", "--rig", rig, "-o", str(tmp_path / "q")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == (f"qualify: seed-scale: 4 runs on {rig}: checked (each rig boots its kernels, the "
                                "host can give each run); nothing built or run"), p.stdout
    assert not (tmp_path / "q").exists() and not (tmp_path / "results").exists()
    assert not (tmp_path / "cache" / "kbuild").exists()


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIASFz6ihQaBKuHLq8tGKX3BMia7ErX0VF0N0T/TCRqUC"

def test_one_server_twice_is_refused(tmp_path, monkeypatch):
    d = tmp_path / "rigs"
    d.mkdir()
    for f, text in (("key", "x\n"), ("known_hosts", f"h {HOST_KEY}\n")):   # the server's key pinned
        (tmp_path / f).write_text(text)
        (tmp_path / f).chmod(0o600)
    for name in ("s1", "s2"):
        (d / f"{name}.toml").write_text(
            f'driver = "ipmi"\n[bmc]\nhost = "10.0.0.5"\nport = 623\nuser = "u"\npassword_env = "KRIG_TEST_PW"\n'
            f'[ssh]\nhost = "h"\nkey = "{tmp_path / "key"}"\nknown_hosts = "{tmp_path / "known_hosts"}"\n')
    monkeypatch.setenv("KRIG_RIG_PATH", str(d))
    monkeypatch.setenv("KRIG_TEST_PW", "pw")
    f = tmp_path / "s.toml"
    f.write_text('rigs = ["s1", "s2"]\n[[runs]]\nreproducer = "selftest-pass"\n')
    with pytest.raises(UsageError, match="s2 and s1 are the same server"):
        load_suite(f)


def test_signoff_lines():
    cases = [CaseRecord.from_json(c) for c in (
        {"id": "a#1", "rig": "r1", "verdict": "PASS", "expect": "PASS", "ok": True},
        {"id": "b#1", "rig": "r1", "verdict": "FAIL", "expect": "FAIL", "ok": True},
        {"id": "a#1@r2", "rig": "r2", "verdict": "ERROR", "expect": "PASS", "ok": False},
        {"id": "b#1@r2", "rig": "r2", "verdict": None, "expect": "FAIL"})]
    assert signoff_lines(["r1", "r2"], cases) == [
        "rig r1: SIGNED OFF: all 2 runs as expected (FAIL 1, PASS 1)",
        "rig r2: NOT SIGNED OFF: 2 of 2 runs not as expected: a#1@r2 gave ERROR, expected PASS; 1 not run yet"]


def _known_kernels(monkeypatch):
    """load_kernel that takes a known kernel the cache has not built yet (`make seed-scale` builds
    it first) as loaded, and the rigs checked for the kernels they boot but not against this
    host's memory now: a suite is checked for its names, not for this machine's cache or load."""
    import workflows.qualify as kq
    from workflows.preflight import check_boots
    monkeypatch.setattr(kq, "before_build", lambda rig, repro, root, asked, **k: check_boots(rig, asked))
    real = kq.load_kernel

    def load(name, *a, **k):
        try:
            return real(name, *a, **k)
        except UsageError as e:
            if " is not built; run `krig kernel build " not in str(e):
                raise
            return name
    monkeypatch.setattr(kq, "load_kernel", load)


def test_shipped_suites_load(monkeypatch):
    _known_kernels(monkeypatch)
    for f in sorted((ROOT / "qualify").glob("*.toml")):
        s = load_suite(f)
        assert s["cases"], f
    ram = load_suite(ROOT / "qualify" / "ram-scaling.toml")
    assert ram["rigs"] == ["qemu-2g", "qemu-default", "qemu-8g"]
    assert {c["expect"] for c in ram["cases"]} == {"FAIL"}


def test_seed_scale_suite_names_the_seed_scale_points(monkeypatch):
    """qualify/seed-scale.toml: the flood on a 256 GB guest (distro FAIL, the per-bucket fixture
    PASS) stopped at its RAM limit, the AIL storm's seed preset at the report's 1.2M files, unlink
    at 1.1M files; `--rig NAME` puts every entry on the rig given instead (resumable: its ids
    name the rig)."""
    from krig.reproducer import load_reproducer
    from rigs import load_rig
    _known_kernels(monkeypatch)
    s = load_suite(ROOT / "qualify" / "seed-scale.toml")
    by = {}
    for c in s["cases"]:
        by.setdefault(c["reproducer"], []).append(c)
        assert c["preset"] in load_reproducer(c["reproducer"]).presets, c
    assert set(by) == {"neg-dentry-flood", "xfs-ail-storm", "unlink-dentry-growth"}
    flood = {c["kernel"]: c for c in by["neg-dentry-flood"]}
    assert {k: c["expect"] for k, c in flood.items()} == {"distro": "FAIL",
                                                          "tiny-6.1-negative-dentry-per-bucket": "PASS"}
    for c in flood.values():
        assert load_rig(c["rig"]).spec.memory_bytes == 256 << 30 and c["set"]["settle_limit_x"] == "1", c
    ail, unlink = by["xfs-ail-storm"][0], by["unlink-dentry-growth"][0]
    assert ail["preset"] == "seed" and int(ail["set"]["files"]) == 1200000
    params = load_reproducer("unlink-dentry-growth").resolve_params(unlink["preset"], unlink["set"])
    assert params["top_dirs"] * params["subdirs"] * params["files_per_dir"] == 1100000
    lab = load_suite(ROOT / "qualify" / "seed-scale.toml", ["qemu-8g"])
    assert lab["rigs"] == ["qemu-8g"] and len(lab["cases"]) == len(s["cases"])
    assert {c["rig"] for c in lab["cases"]} == {"qemu-8g"} and all(c["id"].endswith("@qemu-8g#1") for c in lab["cases"])
    with pytest.raises(UsageError, match=r"^--rig: a rig is given twice"):
        load_suite(ROOT / "qualify" / "seed-scale.toml", ["qemu-8g", "qemu-8g"])


def test_a_qualification_loads_each_kernel_once(tmp_path, monkeypatch):
    """The suite loads each of its kernels once for all its runs; a worker's run boots the kernel
    the suite loaded and resolves no kernel name (the workers' side, run here in this process)."""
    import workflows.plan
    import workflows.qualify as kq
    from kernels.kernel import Kernel
    from test_fake_rig import fake_rig
    loads = []
    real = kq.load_kernel
    monkeypatch.setattr(kq, "load_kernel", lambda name, *a, **k: loads.append(name) or real(name, *a, **k))
    monkeypatch.setattr(workflows.plan, "load_kernel", lambda name, *a, **k: pytest.fail(f"{name} resolved again"))
    monkeypatch.setenv("KRIG_RESULTS", str(tmp_path / "results"))
    rig = fake_rig(tmp_path)
    f = tmp_path / "s.toml"
    f.write_text(f'kernels = ["distro"]\nrigs = ["{rig}"]\nrepeats = 2\n[[runs]]\nreproducer = "selftest-pass"\n'
                 '[[runs]]\nreproducer = "selftest-fail"\nexpect = "FAIL"\n')
    suite = load_suite(f)
    assert loads == ["distro"] and len(suite["cases"]) == 4
    assert Kernel.of_json(json.loads(json.dumps(suite["kernels"]["distro"].to_json()))) == suite["kernels"]["distro"]
    qdir = tmp_path / "q"
    (qdir / "cases").mkdir(parents=True)
    monkeypatch.setenv(kq.SPEC_ENV, json.dumps({"cases": suite["cases"], "qdir": str(qdir),
                                                "kernels": {k: v.to_json() for k, v in suite["kernels"].items()}}))
    for c in suite["cases"]:
        kq.test_qualify_case(c)
    done = kq.finished(qdir, suite["cases"])
    assert sorted(r.verdict for r in done.values()) == ["FAIL", "FAIL", "PASS", "PASS"], done
    assert all(r.ok for r in done.values()) and loads == ["distro"]
    m = json.loads(pathlib.Path(next(iter(done.values())).run_dir, "manifest.json").read_text())
    assert m["kernel"]["name"] == "distro" and m["kernel"]["release"] == suite["kernels"]["distro"].release
