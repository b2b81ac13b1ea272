"""A command loads what it uses when it runs: building `krig`'s parser imports no workflow and
no plotting or statistics library, `krig b4-check` (b4 runs it once per patch) imports neither
numpy nor matplotlib, and `krig trace stats` draws nothing (and counts without numpy). Each subcommand names its handler as
"module:function" (workflows/cli.py), so every name is checked here to resolve, not at a user's first run.

The imports are read from sys.modules of a fresh interpreter, never timed (`make bench` times them).

Covers: workflows/bisectargs.py."""
import argparse
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from workflows import bisectargs
from workflows.cli import build_parser
from workflows.clihelp import subcommands
from krig.errors import handler

PLOTTING_AND_STATISTICS = ("matplotlib", "scipy", "pandas", "PIL", "fontTools")
HEAVY = PLOTTING_AND_STATISTICS + ("numpy", "jinja2", "jsonschema", "kcidb_io", "pytest", "zstandard")

# run a krig command line in this interpreter, then name every module it imported on stderr
AFTER = """
import json, sys
from workflows import cli
code = cli.main(sys.argv[1:]) if len(sys.argv) > 1 else (cli.build_parser() and 0)
print("MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""

PATCH = b"""From 1f2e3d4c5b6a79881726354433221100ffeeddcc Mon Sep 17 00:00:00 2001
From: A Developer <dev@example.org>
Date: Thu, 26 Nov 2026 10:00:00 +0000
Subject: [PATCH] mm: count the dentries once

---
 mm/count.c | 1 +
 1 file changed, 1 insertion(+)

diff --git a/mm/count.c b/mm/count.c
index 1111111..2222222 100644
--- a/mm/count.c
+++ b/mm/count.c
@@ -1 +1,2 @@
 int count;
+int counted;
--
2.39.2
"""


def imported(argv: list, stdin: bytes = b"") -> tuple[subprocess.CompletedProcess, set]:
    p = subprocess.run([sys.executable, "-c", AFTER, *argv], input=stdin, capture_output=True, cwd=ROOT,
                       timeout=120)
    line = [ln for ln in p.stderr.decode().splitlines() if ln.startswith("MODULES ")]
    assert line, p.stderr.decode()
    return p, set(json.loads(line[-1].split(" ", 1)[1]))


def tops(modules: set, names) -> list:
    return sorted(m for m in modules if m.split(".")[0] in names)


def declared_handlers() -> dict:
    """'krig kernel build' -> its handler name, for every subcommand that runs something, with
    the `python -m workflows.bisect` oracle step."""
    out = {" ".join(path): sub.get_default("handler") for path, sub in subcommands(build_parser())
           if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)}
    sub = argparse.ArgumentParser().add_subparsers()
    bisectargs.add_commands(sub, oracle_step=True)
    out["python -m workflows.bisect oracle"] = sub.choices["oracle"].get_default("handler")
    return out


def test_building_the_parser_imports_no_workflow_and_no_heavy_library():
    _, mods = imported([])
    workflows = {h.partition(":")[0] for h in declared_handlers().values()}
    assert not tops(mods, HEAVY), tops(mods, HEAVY)
    assert not sorted(workflows & mods), sorted(workflows & mods)
    assert "workflows.cli" in mods and "workflows.bisectargs" in mods and "kernels.buildargs" in mods


def test_every_subcommand_names_a_handler_that_resolves():
    handlers = declared_handlers()
    assert len(handlers) >= 17 and handlers["b4-check"] == "workflows.b4check:cmd_b4_check"
    missing = [cmd for cmd, name in handlers.items() if not isinstance(name, str) or name.count(":") != 1]
    assert not missing, f"no module:function handler: {missing}"
    for cmd, name in handlers.items():
        assert callable(handler(name)), f"krig {cmd}: {name} is not a function"


def test_a_misspelled_handler_fails_at_resolution():
    with pytest.raises(AttributeError):
        handler("workflows.b4check:cmd_b4_chek")
    with pytest.raises(ModuleNotFoundError):
        handler("krig.b4chek:cmd_b4_check")


def test_b4_check_imports_neither_numpy_nor_plotting(tmp_path):
    """On a patch with a validation of another series in --dir: the series is read (its patchset
    hash compared) and the answer is a warning, without numpy, plotting or statistics."""
    other = tmp_path / "other-series"
    other.mkdir()
    (other / "validate.json").write_text(json.dumps({
        "kind": "krig-validate", "reproducer": "selftest-pass", "answer": "fixed",
        "series_provenance": {"message_id": "other@example.org", "patchset_hash": "0" * 64}}))
    p, mods = imported(["b4-check", "--dir", str(tmp_path)], stdin=PATCH)
    assert p.returncode == 0, p.stderr.decode()
    assert [e["status"] for e in json.loads(p.stdout)] == ["warn"]
    assert "workflows.b4check" in mods and "kernels.series" in mods
    assert not tops(mods, HEAVY), tops(mods, HEAVY)
    # neither the run record (a validation is read through krig/record_validation.py) nor the installed package's metadata
    assert not {"krig.record", "importlib.metadata"} & mods, {"krig.record", "importlib.metadata"} & mods


def test_trace_stats_imports_no_plotting_or_statistics():
    trace = ROOT / "tests" / "data" / "xfs_template_v7.dat"
    p, mods = imported(["trace", "stats", str(trace), "--event", "xfs:xfs_ail_insert", "--json"])
    assert p.returncode == 0, p.stderr.decode()
    assert json.loads(p.stdout)["event"] == "xfs:xfs_ail_insert"
    assert "analysis.trace.tracecli" in mods
    assert not tops(mods, PLOTTING_AND_STATISTICS), tops(mods, PLOTTING_AND_STATISTICS)
    # the plain count is one call into the C library: numpy is for --group-by
    assert json.loads(p.stdout)["count"] > 0 and not tops(mods, ("numpy",)), tops(mods, ("numpy",))
    # and so is the grouping by a number field; strings are grouped over numpy columns
    p, mods = imported(["trace", "stats", str(trace), "--event", "xfs:xfs_ail_insert", "--json",
                        "--group-by", "new_lsn"])
    assert p.returncode == 0 and json.loads(p.stdout)["groups"], p.stderr.decode()
    assert not tops(mods, ("numpy",)), tops(mods, ("numpy",))
    p, mods = imported(["trace", "stats", str(ROOT / "tests" / "data" / "host618_sched_xfs_v7.dat"),
                        "--event", "sched:sched_switch", "--json", "--group-by", "prev_comm"])
    assert p.returncode == 0 and json.loads(p.stdout)["groups"], p.stderr.decode()
    assert "numpy" in mods
