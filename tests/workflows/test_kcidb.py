"""`krig export kcidb` and the measurements in JUnit, without a guest: run directories
judged for real by `krig check` (the pytest judge), the report validated by kcidb-io
itself, `--submit` to a KCIDB-ng-like server on 127.0.0.1 that validates what it gets.
The exports of real guest runs (the seed smokes, a group, a qualification) are in
tests/reproducers/test_smoke.py, tests/workflows/test_group_guest.py and tests/workflows/test_qualify.py (kcidb_checks).

Covers: krig/junit.py, workflows/kcidb_submit.py."""
import http.server
import json
import os
import pathlib
import shutil
import threading
import tomllib
import xml.etree.ElementTree as ET

import kcidb_io
import pytest

import kcidb_checks
from conftest import ROOT
from workflows.check import check
from krig.errors import UsageError
from krig.record_qualify import CaseRecord
from workflows.kcidb import check_origin
from workflows.qualify_report import write_junit

BANNER = ("[    0.000000] Linux version 6.1.0-56-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian "
          "12.2.0-14+deb12u1) 12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2\n")
PANIC = "[   12.345678] Kernel panic - not syncing: sysrq triggered crash\n"
SELFTEST = tomllib.loads((ROOT / "reproducers" / "selftest-pass" / "repro.toml").read_text())

# outcome recorded by the run -> (krig's verdict, KCIDB's status)
CASES = {
    "pass": ("completed", "PASS", "PASS"), "fail": ("completed", "FAIL", "FAIL"),
    "error": ("error", "ERROR", "ERROR"), "skip": ("skip", "SKIP", "SKIP"),
    "hung": ("hung", "HUNG", "FAIL"), "crashed": ("crashed", "CRASHED", "FAIL"),
    "incomplete": (None, "INCOMPLETE", "MISS"), "interrupted": ("interrupted", "INTERRUPTED", "MISS"),
}


def made_run(d: pathlib.Path, case: str, answer=42, series=None, git=None) -> pathlib.Path:
    """A selftest-pass run directory as a rig leaves it, judged by the real `krig check`."""
    outcome = CASES[case][0]
    d.mkdir(parents=True)
    man = {"reproducer": "selftest-pass", "preset": None, "params": {"timeout": 120, "sample_interval": 1.0,
                                                                    "files": 100},
           "kernel": {"name": "distro", "release": "6.1.0-56-amd64", "config": "/nonexistent/config",
                      "config_sha256_16": "f75010e906eac59e", "description": "Debian's packaged kernel"},
           "rig": {"name": "qemu-default", "kind": "qemu", "cpus": 2, "memory_bytes": 4 << 30},
           "rig_facts": {"accel": "tcg", "qemu_argv": ["qemu-system-x86_64", "-m", "4096"]},
           "machine": {"release": "6.1.0-56-amd64", "cpus": 2, "mem_total_bytes": 4105334784},
           "krig_revision": "0" * 40, "started": "2026-11-25T09:51:09+00:00",
           "ended": None if outcome is None else "2026-11-25T09:51:23+00:00", "outcome": outcome,
           "reason": f"the run ended: {case}", "owner": {"pid": 999999999, "start": "1", "host": os.uname().nodename}}
    if git:
        man["kernel"]["git"] = git
        man["kernel"]["debug_options"] = ["CONFIG_KASAN", "CONFIG_PROVE_LOCKING"]
    if series:
        man["series"] = series
    (d / "manifest.json").write_text(json.dumps(man))
    (d / "console.log").write_text(BANNER + "[    1.000000] booted\n" + (PANIC if case == "crashed" else ""))
    if outcome == "completed":
        (d / "workload-metrics.tsv").write_text(f"answer\t{answer}\nfiles_seen\t100\n")
    assert check(d).verdict == CASES[case][1]
    return d


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One run directory per verdict."""
    base = tmp_path_factory.mktemp("kcidb-runs")
    out = {c: made_run(base / c, c, answer=41 if c == "fail" else 42) for c in CASES}
    # an ERROR run whose directory still holds numbers from a judgement (metrics.json): never exported
    err = base / "error-with-numbers"
    shutil.copytree(out["pass"], err)
    man = json.loads((err / "manifest.json").read_text())
    man.update(outcome="error", reason="rig qemu-default: QEMU exited with status 1")
    (err / "manifest.json").write_text(json.dumps(man))
    assert check(err).verdict == "ERROR"
    assert json.loads((err / "metrics.json").read_text())["answer"]["value"] == 42
    out["error-with-numbers"] = err
    return out


def test_every_verdict_maps_to_its_status(runs, tmp_path, krig_cli):
    report = kcidb_checks.export(krig_cli, tmp_path, *[runs[c] for c in CASES])
    by_dir = {t["misc"]["run_dir"]: t for t in report["tests"] if t["path"] == "krig.selftest-pass"}
    assert sorted(by_dir) == sorted(CASES)         # each run by its name, never the path of this host
    for case, (_, verdict, status) in CASES.items():
        t = by_dir[case]
        assert (t["status"], t["misc"]["krig_verdict"]) == (status, verdict), case
        assert ("log_excerpt" in t) == (verdict != "PASS"), case
    assert "Kernel panic - not syncing" in by_dir["crashed"]["log_excerpt"]
    assert len(report["checkouts"]) == len(report["builds"]) == 1        # one kernel
    build = report["builds"][0]
    assert build["compiler"] == "gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0"
    assert build["architecture"] == "x86_64" and build["config_name"] == "distro"


def test_thresholds_of_judged_runs_only(runs, tmp_path, krig_cli):
    report = kcidb_checks.export(krig_cli, tmp_path, *[runs[c] for c in CASES], runs["error-with-numbers"])
    thresholds = [t for t in report["tests"] if t["path"] != "krig.selftest-pass"]
    judged = {t["id"].rsplit(".", 1)[0] for t in thresholds}
    run_ids = {t["misc"]["run_dir"]: t["id"] for t in report["tests"] if t["path"] == "krig.selftest-pass"}
    assert judged == {run_ids["pass"], run_ids["fail"]}
    want = {(th["metric"], th.get("min"), th.get("max")) for th in SELFTEST["thresholds"]}
    for t in thresholds:
        metric = t["path"].rsplit(".", 1)[1]
        assert t["id"].endswith(f".{metric}")
        assert (metric, t["misc"].get("limit_min"), t["misc"].get("limit_max")) in want
        assert t["number"]["unit"] == SELFTEST["metrics"][metric]["unit"]
        assert t["misc"]["better"] == SELFTEST["metrics"][metric]["better"]
        assert t["misc"]["rationale"]
    fail_answer = next(t for t in thresholds if t["id"] == run_ids["fail"] + ".answer")
    assert (fail_answer["status"], fail_answer["number"]["value"]) == ("FAIL", 41)
    kcidb_checks.no_measurement(report, [runs[c] for c in CASES if c not in ("pass", "fail")]
                                + [runs["error-with-numbers"]])


def test_series_and_git_provenance(tmp_path, krig_cli):
    series = {"message_id": "<20261120.1234-1-dev@example.org>", "subject": "[PATCH v2 0/3] mm: cap negative dentries",
              "author": "A Developer <dev@example.org>", "base_commit": "a" * 40, "patchset_hash": "b" * 64}
    git = {"repository": "https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git",
           "commit": "c" * 40, "branch": "master"}
    local = {"repository": "/srv/linux", "commit": "d" * 40, "branch": "wip"}
    a = made_run(tmp_path / "a", "pass", series=series, git=git)
    b = made_run(tmp_path / "b", "pass", git=local)
    report = kcidb_checks.export(krig_cli, tmp_path, a, b)
    ca, cb = sorted(report["checkouts"], key=lambda c: "patchset_hash" not in c)
    assert ca["git_repository_url"] == git["repository"] and ca["git_commit_hash"] == "c" * 40
    assert ca["git_repository_branch"] == "master" and ca["patchset_hash"] == "b" * 64
    assert ca["message_id"] == "20261120.1234-1-dev@example.org" and ca["comment"] == series["subject"]
    assert ca["misc"]["series"]["base_commit"] == "a" * 40
    # not https://, and a path of this host is named by its directory's last name
    assert "git_repository_url" not in cb and cb["misc"]["git_repository"] == "linux"
    assert cb["git_commit_hash"] == "d" * 40
    builds = {b["checkout_id"]: b for b in report["builds"]}
    assert builds[ca["id"]]["misc"]["debug_options"] == ["CONFIG_KASAN", "CONFIG_PROVE_LOCKING"]
    again = kcidb_checks.export(krig_cli, tmp_path / "again", a, b)
    assert [t["id"] for t in again["tests"]] == [t["id"] for t in report["tests"]], "ids must be stable"


def test_group_and_suite_directories(runs, tmp_path, krig_cli):
    g = tmp_path / "group"
    g.mkdir()
    for i, c in enumerate(("pass", "fail", "interrupted"), 1):
        shutil.copytree(runs[c], g / f"run-{i:02d}")
    (g / "group.json").write_text("{}")
    q = tmp_path / "qual"
    q.mkdir()
    (q / "suite.json").write_text(json.dumps({"cases": [
        {"id": "a#1", "verdict": "PASS", "run_dir": str(runs["pass"])},
        {"id": "b#1", "verdict": "ERROR", "reason": "rig x: unknown", "run_dir": None},
        {"id": "c#1", "verdict": None}]}))
    p = krig_cli("export", "kcidb", str(g), str(q), str(runs["pass"]), "--origin", "lab_7",
                 "-o", str(tmp_path / "r.json"))
    assert p.returncode == 0, p.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    kcidb_io.schema.LATEST.validate(report)
    dirs = [t["misc"]["run_dir"] for t in report["tests"] if t["path"] == "krig.selftest-pass"]
    assert len(dirs) == 4       # three group runs; the suite's run and the same run given again, once
    assert sorted(dirs) == ["group/run-01", "group/run-02", "group/run-03", "pass"]
    assert "case b#1 left out" in p.stderr and "case c#1 left out: not run yet" in p.stderr


def test_bad_origin_is_one_line(runs, krig_cli):
    p = krig_cli("export", "kcidb", str(runs["pass"]), "--origin", "My-Lab")
    kcidb_checks.one_line(p, 2, "--origin 'My-Lab'", "^[a-z0-9_]+$")
    for origin in ("lab 7", "", "lab:7", "Lab"):
        with pytest.raises(UsageError, match=r"\^\[a-z0-9_\]\+\$"):
            check_origin(origin)
    assert check_origin("lab_7") == "lab_7"


@pytest.mark.parametrize("args,needle", [
    (["--origin", "lab"], "not a run, group or qualification directory"),
    (["--origin", "lab", "--submit", "http://127.0.0.1:9/"], "--submit and --token-file go together"),
    (["--origin", "lab", "--token-file", "/nonexistent"], "--token-file"),
])
def test_bad_input_is_one_line(tmp_path, krig_cli, args, needle):
    kcidb_checks.one_line(krig_cli("export", "kcidb", str(tmp_path), *args), 2, needle)


def test_unreadable_run_is_one_line(runs, tmp_path, krig_cli):
    d = tmp_path / "odd"
    shutil.copytree(runs["pass"], d)
    (d / "verdict.json").write_text('{"verdict": "MAYBE"}')
    kcidb_checks.one_line(krig_cli("export", "kcidb", str(d), "--origin", "lab"), 2, "verdict.json", "'MAYBE'")
    (d / "manifest.json").write_text("{not json")
    kcidb_checks.one_line(krig_cli("export", "kcidb", str(d), "--origin", "lab"), 2, "manifest.json", "not valid JSON")


def test_junit_properties_per_threshold(runs, tmp_path):
    """The run's junit.xml (the judge's) and the qualification's carry value, unit, better and limit."""
    for case, answer in (("pass", 42.0), ("fail", 41.0)):
        cases = {tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
                 for tc in ET.parse(runs[case] / "junit.xml").getroot().iter("testcase")}
        for th in SELFTEST["thresholds"]:
            props = next(p for n, p in cases.items() if f"[{th['metric']} " in n)
            meta = SELFTEST["metrics"][th["metric"]]
            assert (props["unit"], props["better"]) == (meta["unit"], meta["better"])
            assert float(props["limit_min"]) == th["min"]
            assert ("limit_max" in props) == ("max" in th) and float(props.get("limit_max", 0)) == th.get("max", 0)
            assert float(props["value"]) == (answer if th["metric"] == "answer" else 100.0)
    suite = {"name": "s", "file": "s.toml"}
    cases = [CaseRecord(id=f"{c}#1", rig="qemu-default", reproducer="selftest-pass", preset=None,
                        kernel="distro", repeat=1, expect="PASS", verdict=v, ok=v == "PASS", reason="",
                        run_dir=str(runs[c]))
             for c, v in (("pass", "PASS"), ("fail", "FAIL"), ("error-with-numbers", "ERROR"))]
    write_junit(tmp_path / "junit.xml", suite, cases)
    props = {tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
             for tc in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    assert props["pass#1"]["answer.value"] == "42.0" and props["fail#1"]["answer.value"] == "41.0"
    assert props["fail#1"]["answer.outcome"] == "fail" and props["pass#1"]["files_seen.limit"] == ">= 1"
    assert props["pass#1"]["files_seen.unit"] == "files" and props["pass#1"]["files_seen.better"] == "higher"
    assert not [k for k in props["error-with-numbers#1"] if k.startswith(("answer.", "files_seen."))]


# -- --submit ----------------------------------------------------------------------------

class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


@pytest.fixture
def kcidb_server():
    """A KCIDB-ng-like /submit on 127.0.0.1: validates the body with kcidb-io, answers an id.
    `hold` (an Event) keeps a request open until the test has looked at every process."""
    state = {"token": "kt-" + os.urandom(16).hex(), "got": [], "hold": threading.Event(),
             "arrived": threading.Event(), "status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state["arrived"].set()
            if self.path == "/moved":           # a redirect elsewhere: krig must not follow it
                self.send_response(307)
                self.send_header("Location", state["url"] + "/submit")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            state["hold"].wait(30)
            if self.headers.get("Authorization") != f"Bearer {state['token']}" or state["status"] == 401:
                return self._answer(401, {"id": "0", "status": "error", "message": "Missing or invalid JWT"})
            try:
                report = json.loads(body)
                kcidb_io.schema.LATEST.validate(report)
            except Exception as e:
                return self._answer(400, {"id": "0", "status": "error", "message": str(e)[:200]})
            state["got"].append((self.path, report))
            self._answer(200, {"id": f"sub{len(state['got'])}x", "status": "ok", "message": "Received"})

        def _answer(self, code, data):
            raw = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *a):
            pass
    srv = _Server(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    state["url"] = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield state
    finally:
        state["hold"].set()
        srv.shutdown()
        srv.server_close()
        th.join(10)


def test_submit_validates_and_token_stays_out_of_argv(runs, tmp_path, kcidb_server):
    tok = tmp_path / "token"
    tok.write_text(kcidb_server["token"] + "\n")
    tok.chmod(0o600)
    p, seen = kcidb_checks.submit_watching(kcidb_server, [str(runs["pass"]), str(runs["crashed"])], tok,
                                           origin="lab_7")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "sub1x"
    assert seen["scans"] >= 1 and not seen["leaks"], seen
    path, report = kcidb_server["got"][0]
    assert path == "/submit"
    assert {t["status"] for t in report["tests"]} == {"PASS", "FAIL"}
    assert kcidb_server["token"] not in p.stdout + p.stderr


def test_submit_http_error_is_one_line(runs, tmp_path, kcidb_server, krig_cli):
    tok = tmp_path / "token"
    tok.write_text(kcidb_server["token"] + "\n")
    tok.chmod(0o600)
    kcidb_server["hold"].set()
    kcidb_server["status"] = 401
    p = krig_cli("export", "kcidb", str(runs["pass"]), "--origin", "lab_7", "--submit",
                 kcidb_server["url"] + "/submit", "--token-file", str(tok), env=kcidb_checks.NO_PROXY)
    kcidb_checks.one_line(p, 3, "HTTP 401", "Missing or invalid JWT")
    assert kcidb_server["token"] not in p.stdout + p.stderr and not kcidb_server["got"]
    kcidb_server["status"] = 200
    p = krig_cli("export", "kcidb", str(runs["pass"]), "--origin", "lab_7", "--submit",
                 kcidb_server["url"] + "/moved", "--token-file", str(tok), env=kcidb_checks.NO_PROXY)
    kcidb_checks.one_line(p, 3, "HTTP 307", "not followed")
    assert not kcidb_server["got"]


def test_submit_refuses_before_sending(runs, tmp_path, kcidb_server, krig_cli):
    tok = tmp_path / "token"
    tok.write_text(kcidb_server["token"] + "\n")
    tok.chmod(0o644)
    kcidb_server["hold"].set()
    base = ["export", "kcidb", str(runs["pass"]), "--origin", "lab_7"]
    p = krig_cli(*base, "--submit", kcidb_server["url"], "--token-file", str(tok))
    kcidb_checks.one_line(p, 2, "--token-file", "mode 0644")
    tok.chmod(0o600)
    secret_url = kcidb_server["url"].replace("http://", f"http://{kcidb_server['token']}@")
    p = krig_cli(*base, "--submit", secret_url, "--token-file", str(tok))
    kcidb_checks.one_line(p, 2, "--submit", "credentials")
    assert kcidb_server["token"] not in p.stderr
    p = krig_cli(*base, "--submit", "http://db.example.org/", "--token-file", str(tok))
    kcidb_checks.one_line(p, 2, "--submit", "https://")
    assert not kcidb_server["arrived"].is_set()


# -- the seed smokes (real guests: the runs tests/reproducers/test_smoke.py checks) ---------------------

@pytest.mark.smoke
def test_smoke_run_exports(smoke_run, tmp_path, krig_cli):
    name, _, d = smoke_run
    report = kcidb_checks.export(krig_cli, tmp_path, d)
    kcidb_checks.check_report(report, [d])
    build = report["builds"][0]
    assert build["architecture"] == "x86_64" and build["compiler"].startswith("gcc"), build
    env = report["tests"][0]["environment"]["misc"]
    man = json.loads((d / "manifest.json").read_text())
    assert (env["cpus"], env["mem_total_bytes"]) == (man["machine"]["cpus"], man["machine"]["mem_total_bytes"])
    assert env["accelerator"] == man["rig_facts"]["accel"] and env["rig"] == man["rig"]["name"]


@pytest.mark.smoke
def test_smoke_run_judged_error_has_no_measurement(smoke_run, tmp_path, krig_cli):
    """The same real run made ERROR with its numbers still in metrics.json: by its instrument
    (a kernel before 5.0 cannot report nr_negative) where the reproducer checks it, else by a
    rig fault recorded in the manifest. The report has no number of it anywhere."""
    name, _, d = smoke_run
    err = tmp_path / "error-run"
    shutil.copytree(d, err)
    man = json.loads((err / "manifest.json").read_text())
    values = json.loads((err / "metrics.json").read_text())
    if "nr_negative_reported" in values:
        man["machine"]["release"] = "3.0.0-rc1"
    else:
        man.update(outcome="error", reason="rig qemu-default: QEMU exited with status 1")
    (err / "manifest.json").write_text(json.dumps(man))
    p = krig_cli("check", str(err))
    assert p.returncode == 3 and p.stdout.startswith("ERROR"), p.stdout + p.stderr
    assert any(kcidb_checks.finite(m.get("value")) for m in json.loads((err / "metrics.json").read_text()).values())
    report = kcidb_checks.export(krig_cli, tmp_path, err)
    kcidb_checks.check_report(report, [err])
    # no measured value in the report, but for those the manifest also holds (parameters, RAM...)
    # and the schema's own version numbers (a count of 5 is not a leak because the schema is v5)
    numbers = {m["value"] for m in values.values() if kcidb_checks.finite(m.get("value"))}
    numbers -= set(kcidb_checks.all_numbers(man)) | {t.get("duration") for t in report["tests"]} | {0, 1}
    exported = set(kcidb_checks.all_numbers({k: v for k, v in report.items() if k != "version"}))
    assert numbers and not numbers & exported, "a number of the ERROR run was exported"
    # and the report does not depend on the measurements at all: without metrics.json it is the same
    (err / "metrics.json").unlink()
    assert kcidb_checks.export(krig_cli, tmp_path / "without-metrics", err) == report


def test_the_kernel_config_read_is_only_one_krig_keeps(tmp_path, krig_cli):
    """The architecture comes from the kernel's config only when the manifest names a config krig
    keeps (krig.paths.kernel_file, the rule `krig bundle` reads a host file by), else from the
    emulator. A host file of anyone's choosing with the hash the run recorded is not read; the
    distro's /boot/config-RELEASE is."""
    import glob
    import hashlib
    planted = tmp_path / "not-a-kernel-config"
    planted.write_bytes(b"# any host file\nCONFIG_ARM64=y\n")
    boot = sorted(glob.glob("/boot/config-*"))
    assert boot, "no /boot/config-*: the distro kernel (linux-image-amd64) is not installed"
    arch = {}
    for name, config in (("planted", planted), ("boot", pathlib.Path(boot[0]))):
        d = made_run(tmp_path / name, "pass")
        man = json.loads((d / "manifest.json").read_text())
        man["kernel"].update(config=str(config),
                             config_sha256_16=hashlib.sha256(config.read_bytes()).hexdigest()[:16])
        man["rig_facts"]["qemu_argv"] = ["qemu-system-riscv64", "-m", "4096"]
        (d / "manifest.json").write_text(json.dumps(man))
        report = kcidb_checks.export(krig_cli, tmp_path / f"out-{name}", d)
        arch[name] = report["builds"][0]["architecture"]
    assert arch == {"planted": "riscv64", "boot": "x86_64"}, arch
