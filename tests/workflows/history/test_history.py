"""The results history on SQLite: import, the commands' answers, the schema's migrations, and a store
that fails never costing a run. The run directories are a real run's records with the kernel, the
verdict and a metric changed (tests/history_runs.py); the runs made here go through the fake rig.

Covers: workflows/history/commands.py, workflows/history/health.py,
workflows/history/migrations/env.py, workflows/history/remember.py, workflows/history/rows.py,
workflows/history/store.py, workflows/historyargs.py."""
import os
import pathlib
import sqlite3
import subprocess

import pytest

from conftest import KRIG, ROOT
from history_runs import METRIC, THRESHOLD, commit_of, kernel_sequence, make_run
from workflows.history.query import kernel_order, version_key


def env_of(tmp_path, **more) -> dict:
    return {**os.environ, "KRIG_HISTORY_URL": f"sqlite:///{tmp_path / 'h.sqlite'}", **more}


def krig(tmp_path, *args, **more):
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=env_of(tmp_path, **more))


@pytest.fixture
def imported(tmp_path):
    runs = kernel_sequence(tmp_path / "results")
    p = krig(tmp_path, "history", "import", str(tmp_path / "results"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"history: {len(runs)} runs written" in p.stdout
    return runs


def test_import_lists_newest_first_and_filters(tmp_path, imported):
    p = krig(tmp_path, "history")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:3] == ["STARTED", "REPRODUCER", "KERNEL"] and len(lines) == 1 + len(imported)
    assert str(imported[-1]) in lines[1] and str(imported[0]) in lines[-1]       # newest first
    p = krig(tmp_path, "history", "--verdict", "fail", "--kernel", "k3")
    assert [" FAIL " in ln and "k3 (6.1.0-k3)" in ln for ln in p.stdout.splitlines()[1:]] == [True, True], p.stdout
    p = krig(tmp_path, "history", "--since", "2026-01-05")
    assert len(p.stdout.splitlines()) == 1 + 4, p.stdout
    again = krig(tmp_path, "history", "import", str(tmp_path / "results"))   # idempotent
    assert again.returncode == 0 and len(krig(tmp_path, "history").stdout.splitlines()) == 1 + len(imported)


def test_regressions_name_last_passing_first_failing_fixed_and_flaky(tmp_path, imported):
    p = krig(tmp_path, "history", "regressions")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "regressions: 1" in out, out
    row = next(ln for ln in out.splitlines() if ln.startswith("neg-dentry-flood") and THRESHOLD in ln)
    assert "k2 (6.1.0-k2)" in row and "k3 (6.1.0-k3)" in row and "fixed in k5" in row, row
    regs, flaky = out.split("\nflaky (")
    assert "kflaky (6.1.0-kflaky)" in flaky and "kflaky" not in regs, out


def test_an_active_regression_has_its_bisect_line(tmp_path):
    kernel_sequence(tmp_path / "results", flaky=False)
    make_run(tmp_path / "results", "k6", "FAIL", 12.0, started="2026-02-01T00:00:00+00:00", commit=commit_of("k6"))
    krig(tmp_path, "history", "import", str(tmp_path / "results"))
    out = krig(tmp_path, "history", "regressions", "--active").stdout
    assert "regressions: 1" in out and "active" in out and "k5 (6.1.0-k5)" in out and "k6 (6.1.0-k6)" in out, out
    assert f"krig bisect run --good {commit_of('k5')} --bad {commit_of('k6')} --repro neg-dentry-flood" in out, out


def test_kernels_go_in_version_order_not_the_order_they_were_run(tmp_path):
    """A lab ran 6.1 (PASS), then 6.8 (FAIL), then went back to 6.5 (PASS) and 6.8-rc2 (FAIL) to
    narrow it: the last passing kernel is 6.5, the first failing 6.8-rc2, and the regression is
    active (not "fixed in 6.5"); the trend lists them by version too."""
    runs = [("v6.1", "6.1.0", "PASS", 3.0), ("v6.8", "6.8.0", "FAIL", 9.0), ("v6.5", "6.5.0", "PASS", 3.5),
            ("v6.8-rc2", "6.8.0-rc2-00012-g1234abcd", "FAIL", 8.0)]
    for n, (k, rel, verdict, value) in enumerate(runs, 1):
        make_run(tmp_path / "results", k, verdict, value, started=f"2026-03-{n:02d}T10:00:00+00:00",
                 commit=commit_of(k), release=rel)
    assert krig(tmp_path, "history", "import", str(tmp_path / "results")).returncode == 0
    out = krig(tmp_path, "history", "regressions").stdout
    row = next(ln for ln in out.splitlines() if ln.startswith("neg-dentry-flood") and THRESHOLD in ln)
    assert "v6.5 (6.5.0)" in row and "v6.8-rc2 (6.8.0-rc2-00012-g1234abcd)" in row and "active" in row, out
    assert "fixed" not in row and "regressions: 1" in out, out
    assert f"--good {commit_of('v6.5')} --bad {commit_of('v6.8-rc2')}" in out, out
    trend = krig(tmp_path, "history", "trend", METRIC, "--repro", "neg-dentry-flood", "-o", "-").stdout
    assert [ln.split()[0] for ln in trend.splitlines() if ln.startswith("v6.")] == ["v6.1", "v6.5", "v6.8-rc2", "v6.8"]


@pytest.mark.parametrize("release, key", [
    ("6.1.0-57-amd64", (6, 1, 0, 1, 0)), ("6.8.0-rc2-00012-g1234abcd", (6, 8, 0, 0, 2)), ("6.8", (6, 8, 0, 1, 0)),
    ("v6.13.2", (6, 13, 2, 1, 0)), ("5.15.170", (5, 15, 170, 1, 0)), ("next-20261201", None), (None, None)])
def test_version_key(release, key):
    assert version_key(release) == key


def test_a_kernel_without_a_version_keeps_the_order_they_were_run():
    def order(given):
        return [given[i][2] for i in kernel_order(given)]
    given = [("6.8.0", "2026-01-01", "b"), ("6.5.0", "2026-01-02", "a"), (None, "2026-01-03", "n")]
    assert order(given) == ["b", "a", "n"]
    assert order(given[:2]) == ["a", "b"]
    assert order([("6.1.0", "2026-02", "late"), ("6.1.0-k", "2026-01", "early")]) == ["early", "late"]


def test_trend_table_and_plot(tmp_path, imported):
    png = tmp_path / "t.png"
    p = krig(tmp_path, "history", "trend", METRIC, "--repro", "neg-dentry-flood", "--sku", "qemu-2c-1g",
             "-o", str(png))
    assert p.returncode == 0, p.stderr
    assert "threshold: <= 5" in p.stdout
    k3 = next(ln for ln in p.stdout.splitlines() if ln.startswith("k3 "))
    assert k3.split()[-4:] == ["2", "9.25", "9", "9.5"], k3          # two runs: median and spread
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    bad = krig(tmp_path, "history", "trend", "no_such_metric", "--repro", "neg-dentry-flood", "-o", "-")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "no_such_metric" in bad.stderr


def test_a_hostile_run_directory_is_refused_and_the_rest_imported(tmp_path):
    runs = kernel_sequence(tmp_path / "results", flaky=False)
    (runs[0] / "metrics.json").unlink()
    (runs[0] / "metrics.json").symlink_to("/etc/passwd")
    p = krig(tmp_path, "history", "import", str(tmp_path / "results"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"history: refused {runs[0]}" in p.stdout and f"{len(runs) - 1} runs written" in p.stdout, p.stdout
    assert "Traceback" not in p.stdout + p.stderr


def test_health_marks_a_server_of_rig_errors(tmp_path):
    r = tmp_path / "results"
    for i in range(4):
        make_run(r, "k1", "ERROR" if i else "PASS", 1.0, rig="sick-server", cause="rig",
                 started=f"2026-03-0{i + 1}T00:00:00+00:00", reason="BMC did not answer")
        make_run(r, "k1", "PASS", 1.0, rig="good-server", started=f"2026-03-0{i + 1}T00:00:00+00:00")
    krig(tmp_path, "history", "import", str(r))
    p = krig(tmp_path, "history", "health")
    rows = {ln.split()[0]: ln for ln in p.stdout.splitlines()[1:]}
    assert "UNHEALTHY" in rows["sick-server"] and "BMC did not answer" in rows["sick-server"], p.stdout
    assert " ok " in rows["good-server"], p.stdout
    from workflows.history.health import healthy_cases
    os.environ["KRIG_HISTORY_URL"] = env_of(tmp_path)["KRIG_HISTORY_URL"]
    said = []
    try:
        cases = [{"rig": "sick-server", "id": "a"}, {"rig": "good-server", "id": "b"}]
        assert healthy_cases(cases, False, said.append) == cases[1:]
        assert healthy_cases(cases, True, said.append) == cases
    finally:
        del os.environ["KRIG_HISTORY_URL"]
    assert len(said) == 1 and said[0].startswith("qualify: not scheduling sick-server: unhealthy: 3 of its last 4")


def test_migrations_upgrade_an_older_store_in_place(tmp_path):
    import sqlalchemy as sa
    from workflows.history import rows, store
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    eng = sa.create_engine(url)
    store.upgrade(eng, "0001")              # a store an earlier krig made: no sku column
    row, _m, _t = rows.run_rows(kernel_sequence(tmp_path / "r", flaky=False)[0])
    with eng.begin() as conn:
        assert "sku" not in {c["name"] for c in sa.inspect(conn).get_columns("runs")}
        conn.execute(sa.text("INSERT INTO runs (run_dir, workflow, rig) VALUES (:d, 'run', 'qemu-1g')"),
                     {"d": row["run_dir"]})
    eng.dispose()
    new = store.engine(url)                 # this krig opens it: upgraded to its head, the row kept
    with new.connect() as conn:
        assert store.revision_of(conn) == "0003"
        assert conn.execute(sa.text("SELECT sku FROM runs")).scalar() == "qemu-1g"


def test_a_store_newer_than_krig_is_one_line(tmp_path, imported):
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        db.execute("UPDATE alembic_version SET version_num = '0999'")
    p = krig(tmp_path, "history")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().count("\n") == 0 and "schema revision 0999, newer than this krig's (0003)" in p.stderr


def test_a_run_is_recorded_when_it_ends_and_a_locked_store_costs_it_nothing(tmp_path, monkeypatch):
    """Two real runs on the fake rig: the first is in the history with no step; during the second the
    store is locked by another writer, and the run completes with one line, its directory whole;
    `krig history import` then catches it up."""
    from test_fake_rig import fake_rig, fake_run
    from workflows.history import store
    monkeypatch.setenv("KRIG_HISTORY_URL", env_of(tmp_path)["KRIG_HISTORY_URL"])
    monkeypatch.setenv("KRIG_HISTORY_TIMEOUT", "0.5")
    first, verdict = fake_run(tmp_path)
    assert verdict.verdict == "PASS"
    listed = krig(tmp_path, "history", "--repro", "selftest-pass").stdout
    assert str(first) in listed and " run " in listed and "PASS" in listed, listed
    said = []
    import workflows.run as runner
    locker = sqlite3.connect(tmp_path / "h.sqlite", timeout=0.1)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        second, verdict = runner.run("selftest-pass", fake_rig(tmp_path), "distro", sets={"timeout": "120"},
                                     results_root=tmp_path / "results", log=said.append)
    finally:
        locker.rollback()
        locker.close()
    assert verdict.verdict == "PASS" and (second / "verdict.json").is_file()
    lines = [s for s in said if s.startswith("history not updated")]
    assert len(lines) == 1 and "locked" in lines[0] and str(second) in lines[0], said
    store._engines.clear()
    assert str(second) not in krig(tmp_path, "history").stdout
    krig(tmp_path, "history", "import", str(tmp_path / "results"))
    assert str(second) in krig(tmp_path, "history").stdout


def test_the_dashboard_is_written_with_its_plots(tmp_path, imported):
    p = krig(tmp_path, "history", "html", "-o", str(tmp_path / "dash"))
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "dash" / "index.html").read_text()
    assert "k3 (6.1.0-k3)" in page and "kflaky" in page and 'src="plots/' in page
    assert all(png.stat().st_size > 10_000 for png in (tmp_path / "dash" / "plots").glob("*.png"))


def test_the_workflow_of_a_run_is_read_from_where_it_is(tmp_path):
    """krig/results.py's layout: a group's run-NN, a validation side's, a qualification's runs/,
    else a plain run (a bisection step and a qualification case are also said by their caller)."""
    from workflows.history.rows import run_rows, workflow_of
    r = tmp_path / "results"
    plain = make_run(r, "k1", "PASS", 1.0, started="2026-05-01T00:00:00+00:00")
    group = r / "neg-dentry-flood" / "k1" / "qemu-1g" / "group-1"
    side = r / "validate" / "neg-dentry-flood-abc-1" / "new"
    suite = r / "qualify" / "nightly"
    for d, record in ((group, "group.json"), (side, "group.json"), (side.parent, "validate.json"),
                      (suite, "suite.json")):
        d.mkdir(parents=True, exist_ok=True)
        (d / record).write_text("{}")
    made = {"group": make_run(r, "k1", "PASS", 1.0, started="2026-05-02T00:00:00+00:00", name="group-1/run-01"),
            "validation-new": make_run(side, "k1", "PASS", 1.0, started="2026-05-03T00:00:00+00:00",
                                       name="x").rename(side / "run-01"),
            "qualify-case": make_run(suite / "runs", "k1", "PASS", 1.0, started="2026-05-04T00:00:00+00:00")}
    assert workflow_of(plain) == "run"
    for want, d in made.items():
        assert workflow_of(d) == want, d
    assert run_rows(plain, "bisect-step")[0]["workflow"] == "bisect-step"


def test_qualify_leaves_an_unhealthy_server_out_unless_told(tmp_path):
    """A real `krig qualify` on the fake rig: with three rig ERRORs among the server's last runs in
    the history it schedules nothing there (one line, the cases left to do, exit 3);
    --include-unhealthy runs them."""
    from test_fake_rig import fake_rig
    rig = fake_rig(tmp_path)
    name = pathlib.Path(rig).stem
    for i in range(3):
        make_run(tmp_path / "old", "k1", "ERROR", 1.0, rig=name, cause="rig", reason="BMC did not answer",
                 started=f"2026-03-0{i + 1}T00:00:00+00:00")
    krig(tmp_path, "history", "import", str(tmp_path / "old"))
    suite = tmp_path / "s.toml"
    suite.write_text(f'kernels = ["distro"]\nrigs = ["{rig}"]\n[[runs]]\nreproducer = "selftest-pass"\n')
    more = {"KRIG_RESULTS": str(tmp_path / "results")}
    p = krig(tmp_path, "qualify", str(suite), "-o", str(tmp_path / "q"), **more)
    said = [ln for ln in p.stdout.splitlines() if "not scheduling" in ln]
    assert p.returncode == 3 and len(said) == 1 and f"not scheduling {rig}: unhealthy: 3 of its last 3" in said[0], \
        p.stdout + p.stderr
    p = krig(tmp_path, "qualify", str(suite), "-o", str(tmp_path / "q"), "--include-unhealthy", **more)
    assert p.returncode == 0 and "not scheduling" not in p.stdout, p.stdout + p.stderr


@pytest.mark.parametrize("url, said", [
    ("postgresql+psycopg://krig@/krig?host=/nonexistent-socket-dir", "OperationalError"),   # nobody answers
    ("mysql://krig@localhost/krig", "'mysql' is not a store"),
    ("sqlite:////proc/krig-history.sqlite", "history not updated"),                          # cannot be written
])
def test_a_store_that_cannot_be_used_is_one_line_and_the_run_dir_stays(tmp_path, monkeypatch, url, said):
    from workflows.history.remember import remember
    run = make_run(tmp_path / "r", "k1", "PASS", 1.0, started="2026-06-01T00:00:00+00:00")
    before = sorted(p.name for p in run.iterdir())
    monkeypatch.setenv("KRIG_HISTORY_URL", url)
    monkeypatch.setenv("KRIG_HISTORY_TIMEOUT", "2")
    lines = []
    assert remember(run, None, lines.append) is False
    assert len(lines) == 1 and lines[0].startswith("history not updated: ") and said in lines[0], lines
    assert "\n" not in lines[0] and sorted(p.name for p in run.iterdir()) == before
    p = krig(tmp_path, "history", KRIG_HISTORY_URL=url, KRIG_HISTORY_TIMEOUT="2")
    assert p.returncode in (2, 3) and p.stderr.strip().count("\n") == 0, p.stderr
