"""`krig validate` and `krig reproduce` end to end on a lab server: the session's simulated
one (`krig lab sim up`, tests/labsim_fixture.py), real kernels, kexec, the real b4.

The series is the rmdir-keeps-children regression as a developer mails it: the demo
history's culprit commit (kernels/demo_repo.py) with `git format-patch --cover-letter
--thread`. The base is tiny-6.1 (Debian's linux-source-6.1, also the lab server's kexec
kernel); the patched kernel is built on the controller from it. unlink-dentry-growth's
smoke preset PASSes on the base and FAILs with the series: *regressed* (exit 5), every run
a kexec of its kernel (modules copied to the server): the first from the server's installed
system, each next one straight from the previous run's kernel (the server stays up between them),
the server's facts (firmware, RAM, CPU, BMC) in validate.json and the reply. Then a
patched run's bundle is reproduced on the same server with `krig reproduce --rig` (--kernel:
a bundle may name no series itself), its kernel loaded with kexec_file_load (`kexec -s`).
In `make test` these runs follow tests/rigs/labsim/test_labsim.py's on the same server (a server that
works again after a HUNG run's power cycle: tests/rigs/redfish/test_labsim_redfish.py).

CI budget: two runs a side (too few to be significant: the answer rests on the verdicts),
the first booted cold and the three after it warm, one reproduced run. The default N=4 is
measured in docs/validate.md.
"""
import json
import mailbox
import pathlib
import subprocess

import pytest

from conftest import KRIG, ROOT, build_kernels, judged_as
from kernels.catalog import load_kernel
from kernels.demo_repo import FIX_LIST, culprit_series
from labsim_fixture import GROUP, NAME
from test_ipmi import _wait_no_leftovers

# make test-lab's (testlab): make test's validation on a lab server is tests/rigs/redfish/test_labsim_redfish.py's
pytestmark = [pytest.mark.labsim, pytest.mark.kbuild, pytest.mark.testlab, GROUP, pytest.mark.long(11)]     # 10.4 min
TESTER = "Krig Tester <tester@example.org>"


def _krig(lab, tmp_path, *args, timeout=5400):
    env = {**lab.env, "KRIG_RESULTS": str(tmp_path / "results")}
    return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)


def test_validate_and_reproduce_on_a_lab_server(lab_sim, tmp_path):
    build_kernels("tiny-6.1")
    base_release = load_kernel("tiny-6.1").release
    mbox = culprit_series(tmp_path / "rmdir.mbox", log=lambda *a: None)

    p = _krig(lab_sim, tmp_path, "validate", "unlink-dentry-growth", "--rig", NAME, "--base", "tiny-6.1",
              "--series", str(mbox), "--repeat", "2", "--preset", "smoke", "--from", TESTER, "-o", str(tmp_path / "v"))
    assert p.returncode == 5, p.stdout[-3000:] + p.stderr[-3000:]
    answer = [ln for ln in p.stdout.splitlines() if not ln.startswith(("krig: ", "kbuild: "))]
    assert answer[0].startswith("regressed: "), answer
    assert any(ln.startswith(f"server:  {NAME}: ") and "OVMF" in ln for ln in answer), answer
    vdir = tmp_path / "v"
    state = json.loads((vdir / "validate.json").read_text())
    assert state["answer"] == "regressed" and state["rig"] == NAME
    server = state["server"]
    assert "OVMF" in server["firmware"] or "EFI" in server["firmware"], server
    assert server["ram_bytes"] > 1 << 30 and server["cpus"] == 1 and "IPMI 2.0" in server["bmc"], server
    assert state["base_kernel"]["release"] == base_release
    new_release = state["new_kernel"]["release"]
    assert new_release == f"{base_release}-s{state['series_provenance']['patchset_hash'][:8]}", new_release
    image = json.loads((lab_sim.image_dir / "image.json").read_text())
    for side, release in (("base", base_release), ("new", new_release)):
        runs = sorted((vdir / side).glob("run-*"))     # a run the host's contention took is run again
        assert 2 <= len(runs) <= 3, runs
        for run in runs:
            m = json.loads((run / "manifest.json").read_text())
            f = m["rig_facts"]
            assert m["machine"]["release"] == release != image["release"]
            assert f["kexec"][0] == "kexec" and f["kexec_exec"] == ["systemctl", "kexec"], f
            assert f["kexec_modules"].startswith("copied"), f
            assert f["bmc_info"] == server["bmc"] and f["firmware"] == server["firmware"], f
            assert (run / "host.tsv").exists(), "the simulated server's emulator: the host sampled beside it"
        want = "PASS" if side == "base" else "FAIL"
        verdicts = [json.loads((r / "verdict.json").read_text()) for r in runs]
        assert all(judged_as(v, want, r) for v, r in zip(verdicts, runs)), (side, [v["reason"] for v in verdicts])
        assert verdicts[-1]["verdict"] == want, (side, verdicts[-1]["reason"])
    # the server stays up between the runs (rigs/ipmi/warm.py): the validation's first run boots cold,
    # each next one as the run before it said (next_boot): a kexec straight from the previous run's kernel
    order = sorted((json.loads((r / "manifest.json").read_text()) for side in ("base", "new")
                    for r in (vdir / side).glob("run-*")), key=lambda m: m["started"])
    booted = [m["rig_facts"]["booted_by"] for m in order]
    assert booted[0].startswith(("cold: ", "found on: ")), booted
    # warm after a healthy kernel; a kernel whose dmesg or taint says otherwise (a soft lockup under
    # a loaded emulator) makes the next one cold: the chain below holds either way
    assert len(order) >= 4 and any(b.startswith("warm: kexec from ") for b in booted[1:]), booted
    assert booted[1:] == [m["rig_facts"]["next_boot"] for m in order[:-1]], booted
    (reply,) = list(mailbox.mbox(str(vdir / "reply.mbox")))
    prov = state["series_provenance"]
    assert reply["In-Reply-To"] == f"<{prov['message_id']}>" and reply["Cc"] == FIX_LIST   # the list it went to
    text = reply.get_payload()
    assert "Tested-by" not in text and "regressed" in text and all(len(ln) <= 72 for ln in text.splitlines())
    assert "  server          " in text and "OVMF" in text

    # the patched kernel's run as a bug report, rerun from the bundle on the same server
    bundle = tmp_path / "rmdir-bundle.tar.gz"
    b = _krig(lab_sim, tmp_path, "bundle", str(runs[-1]), "-o", str(bundle))
    assert b.returncode == 0, b.stdout + b.stderr
    # the same server, its kernel loaded with kexec_file_load this time (`kexec -s`, what a locked-down server needs)
    lab_sim.rig_file("krig-test-lab-s", boot="kexec", kexec={"append": ["loglevel=6"], "syscall": "kexec_file_load"})
    r = _krig(lab_sim, tmp_path, "reproduce", str(bundle), "--rig", "krig-test-lab-s", "--kernel",
              f"tiny-6.1,series={mbox}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]        # the bundled verdict again
    assert "rerun:   FAIL (rig krig-test-lab-s)" in r.stdout.splitlines(), r.stdout
    rerun = pathlib.Path(next(ln for ln in r.stdout.splitlines() if ln.startswith("results: "))[9:])
    m = json.loads((rerun / "manifest.json").read_text())
    f = m["rig_facts"]
    assert m["machine"]["release"] == new_release and f["kexec_modules"].startswith("copied"), f
    assert f["kexec"][:2] == ["kexec", "-s"] and f["kexec_syscall"].startswith("kexec_file_load"), f
    assert f["shutdown"] == "soft" and f["booted_by"] == "cold: power on", f
    assert lab_sim.power_status() == "off"
    assert not _wait_no_leftovers(lab_sim)
