"""krig bundle: a tarball of a run that reruns elsewhere with its reproduce.sh.

The guest test runs selftest-pass, bundles it, unpacks the bundle in an empty
directory and reruns it there with reproduce.sh (two selftest-pass boots). A seed
smoke run is bundled and rerun in tests/reproducers/test_smoke.py (test_bundle_reproduces);
an IPMI run's bundle is grepped for the rig's secrets in tests/workflows/test_qualify_ipmi.py.
"""
import hashlib
import json
import os
import pathlib
import subprocess
import tarfile

import pytest

from bundle_checks import bundle_and_rerun, check_rerun, unpack
from conftest import KRIG, ROOT, build_kernels, krig_run, qemu_pids, run_dir_of
from krig.record import Manifest
from krig.record_machine import RigRecord
from workflows.bundle import identity_substitutions, rig_toml, scrub


@pytest.mark.guest
def test_selftest_pass_bundle_reruns(tmp_path):
    p = krig_run(tmp_path, "selftest-pass")
    run_dir = run_dir_of(p)
    assert p.returncode == 0, p.stdout + p.stderr
    top, b, rerun = bundle_and_rerun(run_dir, tmp_path)
    assert b.stdout.startswith("bundle: ") and "KiB" in b.stdout
    for f in ("README", "reproduce.sh", "bundle.json", "run-args", "rig.toml", "reproducer/selftest-pass/run.sh",
              "reproducer/selftest-pass/repro.toml", "reproducer/lib/harness.sh",
              "kernel/distro.toml", "run/manifest.json", "run/verdict.json", "run/metrics.json",
              "run/console.log", "run/summary.txt", "run/report.html"):
        assert (top / f).is_file(), f
    assert len((top / "README").read_text().splitlines()) == 3
    assert not (top / "kernel/config").exists()         # the config only when asked (--with-config)
    meta = json.loads((top / "bundle.json").read_text())
    assert meta["kernel"]["distro_package"]["package"].startswith("linux-image-")
    assert meta["params"] == json.loads((run_dir / "manifest.json").read_text())["params"]
    assert not list(top.rglob("bin"))
    check_rerun(top, rerun, "PASS")
    assert not qemu_pids(str(tmp_path))


# -- no guest ------------------------------------------------------------------

IPMI_MANIFEST = {
    "rig": {"name": "lab7", "kind": "ipmi", "scratch_dev": "/dev/nvme1n1",
            "bmc": {"host": "bmc-lab7.corp.example", "port": 6230, "user": "qualadmin",
                    "password_file": "/home/alice/.config/krig/lab7.pw"},
            "ssh": {"host": "lab7.corp.example", "port": 22, "user": "root", "key": "/home/alice/.ssh/lab_key",
                    "known_hosts": "/home/alice/.ssh/lab_known"}},
    "owner": {"pid": 1, "host": "buildhost-42"},
}


def test_identities_become_placeholders():
    subs = identity_substitutions(Manifest.from_json(IPMI_MANIFEST))
    text = ("ipmitool -H bmc-lab7.corp.example -p 6230 -U qualadmin -f /home/alice/.config/krig/lab7.pw\n"
            "ssh -i /home/alice/.ssh/lab_key -o UserKnownHostsFile=/home/alice/.ssh/lab_known "
            "root@lab7.corp.example\nkrig on buildhost-42\nroot=/dev/nvme0n1 rootwait\n")
    out = scrub(text, subs)
    for secret in ("bmc-lab7.corp.example", "qualadmin", "lab7.pw", "/home/alice/.ssh", "lab7.corp.example",
                   "buildhost-42", "root@"):
        assert secret not in out, (secret, out)
    assert "root=/dev/nvme0n1 rootwait" in out          # a generic account name is not a word to replace
    assert "<BMC_HOST>" in out and "<SSH_KEY>" in out and "<SSH_USER>@<SSH_HOST>" in out
    ip = {**IPMI_MANIFEST, "rig": {**IPMI_MANIFEST["rig"], "bmc": {"host": "10.1.2.3", "user": "u7"}}}
    assert scrub("lock locks/ipmi-10.1.2.3-623.lock, bmc 10.1.2.3:623", identity_substitutions(Manifest.from_json(ip))) == \
        "lock locks/ipmi-<BMC_HOST>-623.lock, bmc <BMC_HOST>:623"
    toml = rig_toml(IPMI_MANIFEST["rig"], RigRecord.from_json(IPMI_MANIFEST["rig"]))
    assert 'host = "<BMC_HOST>"' in toml and 'key = "<SSH_KEY>"' in toml and 'port = "<BMC_PORT>"' in toml
    assert 'scratch_dev = "/dev/nvme1n1"' in toml
    assert not any(s in toml for s in ("qualadmin", "alice", "corp.example"))


def test_bundle_bad_input_is_one_line(tmp_path, krig_cli):
    p = krig_cli("bundle", str(tmp_path))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "not a run directory" in p.stderr


@pytest.mark.guest
@pytest.mark.kbuild
def test_reproduce_runs_nothing_from_the_bundle(tmp_path):
    """A bundle of a tiny-6.1 run with the kernel in it, its reproduce.sh replaced by a script that
    writes a marker file: `krig reproduce --kernel bundled` reruns it and the marker never appears."""
    build_kernels("tiny-6.1")
    p = krig_run(tmp_path, "selftest-pass", "--kernel", "tiny-6.1")
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = run_dir_of(p)
    out = tmp_path / "b.tar.gz"
    b = subprocess.run(KRIG + ["bundle", str(run_dir), "--with-kernel", "-o", str(out)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert b.returncode == 0 and "with the kernel image" in b.stdout, b.stdout + b.stderr
    man = json.loads((run_dir / "manifest.json").read_text())
    top = unpack(out, tmp_path / "unpacked")
    sums = dict(reversed(ln.split("  ")) for ln in (top / "kernel/SHA256SUMS").read_text().splitlines())
    assert sums["image"] == hashlib.sha256(pathlib.Path(man["kernel"]["image"]).read_bytes()).hexdigest()
    assert sums["config"] == hashlib.sha256(pathlib.Path(man["kernel"]["config"]).read_bytes()).hexdigest()
    assert json.loads((top / "bundle.json").read_text())["kernel"]["debug_options"]["CONFIG_KASAN"] == "n"
    marker = tmp_path / "MARKER"
    (top / "reproduce.sh").write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as t:
        t.add(top, top.name)
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "rerun")}
    r = subprocess.run(KRIG + ["reproduce", str(evil), "--kernel", "bundled"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=900, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bundled: PASS" in r.stdout and "rerun:   PASS (rig qemu-default)" in r.stdout
    assert not marker.exists()
    (rerun,) = list((tmp_path / "rerun").glob("selftest-pass/*/qemu-default/*/manifest.json"))
    assert json.loads(rerun.read_text())["machine"]["release"] == man["machine"]["release"]
    assert not qemu_pids(str(tmp_path))
