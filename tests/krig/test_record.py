"""The run record (krig/record.py): facts derived from the typed manifest, decided once.

Covers: krig/record_machine.py, krig/rundir.py."""
import json
import shutil

import pytest

from conftest import ROOT
from krig.errors import UsageError
from krig.record import Manifest, RunRecord
from krig.record_machine import KernelRecord, Machine, RigRecord
from krig.rundir import RunDir

FIXTURE = ROOT / "tests" / "data" / "run-neg-dentry-flood-1g-distro"


@pytest.mark.parametrize("data, release", [
    ({"machine": {"release": "6.1.0-krig"}, "kernel": {"release": "6.1.0"}}, "6.1.0-krig"),
    ({"machine": {"cpus": 2}, "kernel": {"release": "6.1.0"}}, "6.1.0"),
    ({"machine": None, "kernel": {"release": "6.1.0"}}, "6.1.0"),
    ({"kernel": {"name": "distro"}}, None),
    ({}, None),
])
def test_the_release_that_ran_is_the_machines_else_the_kernels(data, release):
    assert Manifest.from_json(data).release == release


def test_an_old_manifest_reads_typed_and_writes_back_as_it_was():
    """The fixture an earlier krig wrote: every nested object typed, and written back the same
    (a fact the run adds as it goes stays absent until known, as the runner writes it)."""
    data = json.loads((FIXTURE / "manifest.json").read_text())
    man = Manifest.from_json(data)
    assert isinstance(man.machine, Machine) and isinstance(man.kernel, KernelRecord) and isinstance(man.rig, RigRecord)
    assert man.machine.cpus == data["machine"]["cpus"] and man.kernel.name == data["kernel"]["name"]
    assert man.rig.spec["memory"] == data["rig"]["memory"] and man.rig.cpus == data["rig"]["cpus"]
    assert data["host_fault"] is None                   # not known: absent when written again
    assert man.to_json() == {k: v for k, v in data.items() if k != "host_fault"}
    odd = {**data, "kernel": {**data["kernel"], "patches": ["a"]}, "machine": {**data["machine"], "numa": 2}}
    assert Manifest.from_json(odd).to_json()["kernel"]["patches"] == ["a"]
    assert Manifest.from_json(odd).to_json()["machine"]["numa"] == 2


@pytest.mark.parametrize("data, cpus, ram, rig", [
    ({"machine": {"cpus": 4, "mem_total_bytes": 1 << 30}, "rig": {"name": "qemu-2g", "cpus": 2}}, 4, 1 << 30, "qemu-2g"),
    ({"rig": {"name": "qemu-2g", "cpus": 2}}, 2, None, "qemu-2g"),          # the machine never answered
    ({"rig": None, "kernel": None}, None, None, None),
])
def test_the_rigs_name_cpus_and_ram_are_decided_once(data, cpus, ram, rig):
    man = Manifest.from_json(data)
    assert (man.cpus, man.mem_total_bytes, man.rig_name) == (cpus, ram, rig)
    assert man.machine_answered == ("machine" in data)
    assert man.machine_said.cpus == (data.get("machine") or {}).get("cpus")


def test_a_run_record_reads_through_one_run_dir(tmp_path):
    """The record reads the manifest at once, the rest when asked, through the RunDir it was given:
    a file written through that RunDir is what the record reads next."""
    shutil.copytree(FIXTURE, tmp_path / "run")
    run = RunDir(tmp_path / "run")
    rec = RunRecord.read(run)
    assert rec.run is run and rec.manifest.reproducer == "neg-dentry-flood"
    assert rec.verdict.verdict == "FAIL" and rec.thresholds == []
    run.write_json("thresholds.json", [{"threshold": "x >= 1", "outcome": "pass", "message": "held"}])
    assert [t.outcome for t in rec.thresholds] == ["pass"]
    assert RunRecord.read(tmp_path / "run").metrics == rec.metrics
    with pytest.raises(UsageError, match="missing manifest.json"):
        RunRecord.read(tmp_path)
    assert RunRecord.read(tmp_path, required=False).manifest == Manifest()
