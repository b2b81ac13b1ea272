"""A fleet: reproducers x kernels on a pool of rigs (IPMI servers), in parallel.

    python -m krig.fleet --rig lab1 --rig lab2 \\
        --run selftest-pass --run xfs-ail-storm:smoke --kernel distro --kernel fix [--expect PASS]

The engine is pytest-xdist: one worker per rig (worker gwN drives the N-th
rig only, so a server never runs two reproducers at once), every
(reproducer, preset, kernel) is one test, and xdist hands the next test to
whichever worker is free. The rig's fcntl lock (taken in prepare) keeps other
krig processes off a server; here a worker waits for it (KRIG_LOCK_WAIT)
instead of failing. Results: the usual run directories, plus a junit file
with each case's verdict and run directory.
"""
import argparse
import itertools
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

import pytest

from krig import RESULTS_DIR
from krig.errors import KrigError, UsageError
from krig.reproducer import load_reproducer
from krig.run import run
from kernels.catalog import load_kernel
from rigs import load_rig
from rigs.ipmi_spec import SECRETS_FILE_ENV, write_secrets_file

SPEC_ENV = "KRIG_FLEET_SPEC"


def expand_cases(runs: list[str], kernels: list[str]) -> list[dict]:
    """'name' or 'name:preset' x kernels -> [{repro, preset, kernel}]."""
    out = []
    for r, k in itertools.product(runs, kernels):
        name, _, preset = r.partition(":")
        out.append({"repro": name, "preset": preset or None, "kernel": k})
    return out


def rig_for_worker(worker_id: str, rigs: list[str]) -> str:
    """gw0 -> rigs[0], gw1 -> rigs[1]...; without xdist ('master') the first rig."""
    n = int(worker_id[2:]) if worker_id.startswith("gw") else 0
    if n >= len(rigs):
        raise RuntimeError(f"worker {worker_id} has no rig (pool of {len(rigs)})")
    return rigs[n]


def _validate(rigs, cases):
    if len(set(rigs)) != len(rigs):
        raise UsageError("--rig: each rig at most once (one run per server at a time)")
    servers = {}
    for name in rigs:
        rig = load_rig(name)
        key = (rig.spec.get("bmc") or {}).get("host"), (rig.spec.get("bmc") or {}).get("port")
        if key != (None, None) and key in servers:
            raise UsageError(f"--rig {name}: same BMC as --rig {servers[key]}; a server may be in the pool once")
        servers[key] = name
    for c in cases:
        load_reproducer(c["repro"]).resolve_params(c["preset"], {})
        load_kernel(c["kernel"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m krig.fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("--rig", action="append", required=True, help="a rig of the pool (repeat)")
    p.add_argument("--run", action="append", required=True, metavar="REPRO[:PRESET]", help="repeatable")
    p.add_argument("--kernel", action="append", default=None, help="repeatable; default: distro")
    p.add_argument("--expect", action="append", default=None, help="verdicts that count as success (default PASS)")
    p.add_argument("--results", default=None, help="results root (default: krig's)")
    a = p.parse_args(argv)
    cases = expand_cases(a.run, a.kernel or ["distro"])
    try:
        _validate(a.rig, cases)
    except KrigError as e:
        print(f"krig fleet: error: {e}", file=sys.stderr)
        return e.exit_code
    results = pathlib.Path(a.results or RESULTS_DIR).resolve()
    results.mkdir(parents=True, exist_ok=True)
    junit = results / f"fleet-{time.strftime('%Y%m%dT%H%M%S')}.xml"
    os.environ[SPEC_ENV] = json.dumps({"rigs": a.rig, "cases": cases, "results": str(results),
                                       "expect": a.expect or ["PASS"]})
    os.environ.setdefault("KRIG_LOCK_WAIT", "3600")
    # _validate took the BMC passwords out of the environment; the workers read them from a 0600 file.
    secrets_dir = tempfile.mkdtemp(prefix="krig-fleet-")
    secrets = write_secrets_file(pathlib.Path(secrets_dir))
    if secrets:
        os.environ[SECRETS_FILE_ENV] = str(secrets)
    args = [str(pathlib.Path(__file__).resolve()), "-p", "xdist", "-n", str(len(a.rig)), "--dist", "load",
            "-q", "-rA", "-p", "no:cacheprovider", f"--junitxml={junit}", "-o", "junit_family=xunit2"]
    try:
        rc = pytest.main(args)
    finally:
        shutil.rmtree(secrets_dir, ignore_errors=True)
        os.environ.pop(SECRETS_FILE_ENV, None)
    print(f"fleet: {len(cases)} runs on {len(a.rig)} rigs; junit: {junit}")
    return int(rc)


def pytest_generate_tests(metafunc):
    if "fleet_case" in metafunc.fixturenames:
        spec = json.loads(os.environ.get(SPEC_ENV, '{"cases": []}'))
        metafunc.parametrize("fleet_case", spec["cases"],
                             ids=[f"{c['repro']}{':' + c['preset'] if c['preset'] else ''}@{c['kernel']}"
                                  for c in spec["cases"]])


def test_fleet_case(fleet_case, worker_id, record_property):
    spec = json.loads(os.environ[SPEC_ENV])
    rig = rig_for_worker(worker_id, spec["rigs"])
    run_dir, verdict = run(fleet_case["repro"], rig_name=rig, kernel_name=fleet_case["kernel"],
                           preset=fleet_case["preset"], results_root=pathlib.Path(spec["results"]),
                           log=lambda *a, **k: None)
    record_property("rig", rig)
    record_property("verdict", verdict["verdict"])
    record_property("run_dir", str(run_dir))
    assert verdict["verdict"] in spec["expect"], f"{verdict['verdict']} on {rig}: {verdict['reason']} ({run_dir})"


if __name__ == "__main__":
    sys.exit(main())
