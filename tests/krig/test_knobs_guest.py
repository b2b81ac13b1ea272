"""Knobs on a real QEMU guest (Debian's kernel): a sysctl written before the workload and read
back, a boot parameter the kernel acted on, both in the manifest; an unknown sysctl is ERROR
before the workload, naming it. Two boots of selftest-pass."""
import json

import pytest

from conftest import krig_run, run_dir_of

pytestmark = pytest.mark.guest


def test_knobs_set_read_back_and_refused(tmp_path, no_leftover_qemu):
    p = krig_run(tmp_path, "selftest-pass", "--kernel", "distro", "--sysctl", "vm.vfs_cache_pressure=200",
                 "--cmdline", "dhash_entries=32768")
    assert p.returncode == 0, p.stdout + p.stderr
    m = json.loads((run_dir_of(p) / "manifest.json").read_text())
    assert m["knobs"] == {"sysctl": [{"name": "vm.vfs_cache_pressure", "set": "200", "read_back": "200"}],
                          "cmdline": [{"arg": "dhash_entries=32768", "read_back": True}]}
    # the kernel acted on the boot parameter: it sized its dentry hash table by it
    assert "dhash_entries=32768" in m["machine"]["cmdline"].split()
    assert m["machine"]["dentry_hash_entries"] == 32768, m["machine"]
    assert m["workload"]["exit_code"] == 0

    p = krig_run(tmp_path, "selftest-pass", "--kernel", "distro", "--sysctl", "vm.vfs_cache_pressure=200",
                 "--sysctl", "vm.krig_no_such_knob=1")
    assert p.returncode != 0 and "ERROR" in p.stdout, p.stdout + p.stderr
    d = run_dir_of(p)
    v = json.loads((d / "verdict.json").read_text())
    assert v["verdict"] == "ERROR"
    assert "--sysctl vm.krig_no_such_knob=1: no such sysctl on this kernel" in v["reason"], v["reason"]
    m = json.loads((d / "manifest.json").read_text())
    assert "workload" not in m and not (d / "stdout").exists()     # nothing ran
    assert m["knobs"]["sysctl"][0]["read_back"] == "200"
    assert "no such sysctl" in m["knobs"]["sysctl"][1]["fault"]
