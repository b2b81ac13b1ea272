"""The results history on a real PostgreSQL (a throwaway cluster, tests/pg_fixture.py: a unix
socket, no port), as a lab shared by several controllers uses it: two controllers writing at once
lose nothing and see each other's runs, and every question has the same answer as SQLite gives
from the same run directories (tests/history_runs.py: a real run's records varied). The same
two-writer check on SQLite: one controller's parallel workers lose nothing. Seconds; no guest.

Covers: workflows/history/query.py."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from history_runs import kernel_sequence, make_run
from pg_fixture import postgres_cluster, postmaster_pid, running

WRITER = """
import sys
from workflows.history.remember import remember
lines = []
for d in sys.argv[1:]:
    assert remember(d, None, lines.append), lines
"""


def many_runs(root, n):
    """n runs on two rigs over four kernels, verdicts varied."""
    out = []
    for i in range(n):
        k = f"w{i % 4}"
        out.append(make_run(root, k, "FAIL" if i % 4 == 3 else "PASS", 2.0 + i % 4 * 2, rig=f"rig-{i % 2}",
                            started=f"2026-04-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00", name=f"r{i:03d}"))
    return out


def two_writers(url, dirs):
    """Two processes, each writing half of dirs to the store at `url`, one run per transaction."""
    env = {**os.environ, "KRIG_HISTORY_URL": url, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, *map(str, dirs[i::2])], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, out + err


def answers(url):
    from workflows.history import query, store
    eng = store.engine(url)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "id"} for r in rows]  # noqa: E731
    trend = [(p.kernel, sorted(p.values), p.limit) for p in query.trend(eng, "peak_negative_pct_ram",
                                                                        "neg-dentry-flood", sku="qemu-2c-1g")]
    return {"runs": sorted(strip(query.list_runs(eng, limit=10_000)), key=lambda r: r["run_dir"]),
            "regressions": query.regressions(eng), "health": query.health(eng), "trend": trend}


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_two_writers_lose_nothing_and_answer_as_sqlite(tmp_path, backend):
    dirs = many_runs(tmp_path / "results", 60) + kernel_sequence(tmp_path / "results")
    sqlite_url = f"sqlite:///{tmp_path / 'reference.sqlite'}"
    from workflows.history import remember, store
    done, refused = remember.import_dirs([tmp_path / "results"], store.engine(sqlite_url))
    assert (done, refused) == (len(dirs), [])
    with contextlib_for(backend, tmp_path) as url:
        two_writers(url, dirs)
        got = answers(url)
        assert [r["run_dir"] for r in got["runs"]] == sorted(str(d) for d in dirs)      # every row there
        want = answers(sqlite_url)
        assert got == want
        regs, flaky = got["regressions"]
        assert any(g["last_passing"].startswith("k2 ") and g["first_failing"].startswith("k3 ") for g in regs), regs
        assert [f["kernel"].split()[0] for f in flaky] == ["kflaky"]
        if backend == "postgresql":
            pid = postmaster_pid(url)
            assert pid is not None and running(pid)
            store._engines.pop(url).dispose()
    if backend == "postgresql":
        assert not running(pid)             # the cluster stopped: nothing of it left running


def contextlib_for(backend, tmp_path):
    import contextlib
    if backend == "postgresql":
        return postgres_cluster()
    return contextlib.nullcontext(f"sqlite:///{tmp_path / 'shared.sqlite'}")
