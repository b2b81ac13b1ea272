"""What the guest can see: a root made for it, no host secrets.

Plants secret files where a host keeps them (/root, a home directory, krig's
config directory, an SSH key) and boots a real guest that tries to read them.

Covers: rigs/qemu/guestroot.py.
"""
import os
import pathlib
import secrets
import shutil

import pytest

from conftest import ROOT
from kernels.catalog import load_kernel
from krig.paths import cache_dir
from rigs import load_rig

pytestmark = pytest.mark.guest


@pytest.fixture
def planted(tmp_path):
    token = "krig-planted-" + secrets.token_hex(8)
    home = pathlib.Path(os.path.expanduser("~"))
    config = pathlib.Path(os.environ["XDG_CONFIG_HOME"])  # krig's, as the session set it (tests/hermetic.py)
    paths = [home / f".{token}", pathlib.Path("/home") / token / "secret",
             config / "krig" / f"{token}.pw", home / ".ssh" / f"id_{token}"]
    made = []
    for p in paths:
        for d in reversed([p.parent, *p.parent.parents]):
            if not d.exists():
                d.mkdir(mode=0o700)
                made.append(d)
        p.write_text(token + "\n")
        p.chmod(0o644)          # even a world-readable file there must stay out of reach
    try:
        yield token, [str(p) for p in paths]
    finally:
        for p in paths:
            p.unlink(missing_ok=True)
        for d in reversed(made):
            shutil.rmtree(d, ignore_errors=True)


def test_guest_cannot_read_host_secrets(tmp_path, planted, no_leftover_qemu):
    token, paths = planted
    kernel = load_kernel("distro")
    rig = load_rig("qemu-default")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    secret_files = [*paths, "/etc/gshadow", "/etc/shadow-", "/etc/ssh/ssh_host_ed25519_key",
                    "/etc/ssl/private/ssl-cert-snakeoil.key"]
    with rig:
        rig.prepare(run_dir, kernel, {})
        rig.boot.boot(kernel, [])
        script = ('for f in "$@"; do if [ -e "$f" ] || cat "$f" >/dev/null 2>&1; then echo "READABLE $f"; fi; done; '
                  'ls -a /root /home; cat /proc/mounts; grep -c . /etc/passwd; ls "$KRIG_TREE"; '
                  'echo "SHADOW:$(cut -d: -f2 /etc/shadow | sort -u | tr "\\n" " ")"')
        res = rig.command.run(["bash", "-c", script, "probe", *secret_files,
                               str(ROOT / ".venv"), str(ROOT / ".git"), str(ROOT / "results")],
                              env={"KRIG_TREE": str(ROOT / "reproducers")}, timeout=120)
        argv, workdir = rig.facts()["qemu_argv"], str(rig.workdir)
    out = res.stdout.decode(errors="replace")
    assert res.returncode == 0, res.stderr
    assert "READABLE" not in out, out
    assert token not in out
    assert "SHADOW:* \n" in out, out          # the guest's own shadow file: accounts, no passwords
    # Positive controls: the guest still has the system and the reproducers it needs.
    assert "selftest-pass" in out and " 9p " in out
    assert int([ln for ln in out.splitlines() if ln.isdigit()][0]) > 5      # /etc/passwd is there
    # Nothing shared with QEMU is the host's root or a home: only the run's share, the
    # skeleton (cached per state of /etc), /usr and reproducers/.
    shared = [a.split("path=")[1].split(",")[0] for a in argv if a.startswith("local,path=")]
    allowed = (workdir + "/", str(cache_dir("guest-root")) + "/", "/usr", str(ROOT / "reproducers"))
    assert shared and all(p.startswith(allowed) and p != "/" for p in shared), shared
