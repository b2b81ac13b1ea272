"""A hostile kernel under test: what the guest writes to its share is data, never a path.

reproducers/selftest-hostile plants symlinks to a host file (made here, holding a
secret), FIFOs, a device node and a fake manifest in its results and in the agent's
control directory. A real guest runs it through `krig run`; then the host file must be
unchanged, the run directory and its bundle must hold no link, FIFO, device or the
secret, and the verdict must be ERROR naming what was refused.
"""
import json
import os
import secrets
import stat
import subprocess
import tarfile

import pytest

from conftest import KRIG, ROOT, krig_run, run_dir_of

pytestmark = pytest.mark.guest


def test_hostile_guest_plants_links_fifos_and_devices(tmp_path, no_leftover_qemu):
    token = "krig-hostile-" + secrets.token_hex(8)
    host_file = tmp_path / "host-file"
    host_file.write_text(token + "\n")
    before = host_file.stat()

    p = krig_run(tmp_path, "selftest-hostile", "--rig", "qemu-default", "--kernel", "distro",
                 "--set", f"target={host_file}", timeout=900)
    run_dir = run_dir_of(p)
    assert "Traceback" not in p.stderr, p.stderr

    # the host file: never written through, never replaced
    after = host_file.stat()
    assert host_file.read_text() == token + "\n"
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)

    # the verdict: ERROR (exit 3), naming the refusal; the kernel is not blamed
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert verdict["verdict"] == "ERROR"
    assert "refused" in verdict["reason"] and "a symlink the guest made" in verdict["reason"], verdict["reason"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["reproducer"] == "selftest-hostile"          # krig's manifest, not the guest's
    assert manifest["rig_facts"]["share_security_model"] in ("mapped-xattr", "mapped-file")
    refused = "\n".join(manifest["rig_facts"]["refused_from_guest"])
    for what in ("trace.dat is a FIFO", "null-device is a character device", "sub/link is a symlink",
                 "etc-dir is a symlink", "manifest.json takes the name of krig's own"):
        assert what in refused, (what, refused)

    # the run directory: regular files and directories only, and no secret in any of them
    for dirpath, dirnames, filenames in os.walk(run_dir):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), os.path.join(dirpath, name)
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                assert token.encode() not in f.read(), os.path.join(dirpath, name)
    # this command's own output the guest swapped for a FIFO and a link: read as data
    assert (run_dir / "stdout").read_bytes() == b""
    assert token not in (run_dir / "stderr").read_text(errors="replace")

    # the bundle made from it carries no secret either
    out = tmp_path / "b.tar.gz"
    b = subprocess.run(KRIG + ["bundle", str(run_dir), "-o", str(out)], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert b.returncode == 0, b.stderr
    with tarfile.open(out) as tar:
        for m in tar.getmembers():
            assert m.isfile() or m.isdir(), m.name
            if m.isfile():
                assert token.encode() not in tar.extractfile(m).read(), m.name
