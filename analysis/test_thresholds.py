"""One test per threshold of the run's reproducer: pytest is the judge.

Run by `krig check RUN_DIR` as
  pytest analysis/test_thresholds.py --krig-run-dir=RUN_DIR --junitxml=RUN_DIR/junit.xml
"""
import json
import math
import pathlib

import pytest

from krig.reproducer import load_reproducer


def _run_dir(config) -> pathlib.Path:
    d = config.getoption("krig_run_dir")
    if not d:
        pytest.skip("no --krig-run-dir given")
    return pathlib.Path(d)


def pytest_generate_tests(metafunc):
    if "threshold" not in metafunc.fixturenames:
        return
    d = metafunc.config.getoption("krig_run_dir")
    if not d:
        metafunc.parametrize("threshold", [])
        return
    manifest = json.loads((pathlib.Path(d) / "manifest.json").read_text())
    repro = load_reproducer(manifest["reproducer"])
    metafunc.parametrize("threshold", repro.thresholds,
                         ids=[f"{t.metric} {t.describe()}" for t in repro.thresholds])


@pytest.fixture(scope="module")
def metrics(request):
    return json.loads((_run_dir(request.config) / "metrics.json").read_text())


@pytest.fixture(scope="module", autouse=True)
def _properties(request, record_testsuite_property):
    d = request.config.getoption("krig_run_dir")
    if not d:
        return
    m = json.loads((pathlib.Path(d) / "manifest.json").read_text())
    facts = m.get("rig_facts", {})
    for k, v in {"reproducer": m.get("reproducer"), "preset": m.get("preset"),
                 "kernel": m.get("kernel", {}).get("release"), "kernel_config": m.get("kernel", {}).get("config_sha256_16"),
                 "rig": m.get("rig", {}).get("name"), "accel": facts.get("accel"),
                 "qemu": facts.get("qemu_version"), "krig_revision": m.get("krig_revision")}.items():
        record_testsuite_property(k, v)


def test_threshold(threshold, metrics):
    m = metrics[threshold.metric]
    value, unit = m["value"], m["unit"]
    assert value is not None and not math.isnan(value), \
        f"{threshold.metric}: not measured ({unit}); {threshold.rationale}"
    if threshold.max is not None:
        assert value <= threshold.max, (
            f"{threshold.metric} = {value:g} {unit}, limit <= {threshold.max:g} {unit}: {threshold.rationale}")
    if threshold.min is not None:
        assert value >= threshold.min, (
            f"{threshold.metric} = {value:g} {unit}, limit >= {threshold.min:g} {unit}: {threshold.rationale}")
