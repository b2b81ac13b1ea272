"""What the rig-check and Redfish tests share: a Redfish rig file's table on paper, `krig rig
check` run as a user runs it with the server's power compared before and after, and the one
FAIL line a bad field gives."""
import os
import subprocess

from conftest import KRIG, ROOT


def redfish_table(tmp_path, bmc_line: str = "bmc1", **top) -> dict:
    """A Redfish rig file's table for a BMC named bmc1 (nothing answers there): its key and its
    password in 0600 files, the password file naming `bmc_line`; `bmc=` and the other top-level
    fields given are merged in."""
    key = tmp_path / "key"
    key.write_text("k")
    key.chmod(0o600)
    pw = tmp_path / "pw"
    pw.write_text(f"secret\nbmc = {bmc_line}\n")
    pw.chmod(0o600)
    bmc = {"host": "bmc1", "user": "krig", "password_file": str(pw), **top.pop("bmc", {})}
    return {"driver": "redfish", "console": "telnet://ts1:7001", "bmc": bmc,
            "ssh": {"host": "s1", "key": str(key), "known_hosts": str(key)}, **top}


def rig_check(rig, tmp_path, power, secret: str | None = None) -> tuple[int, list[str]]:
    """(exit code, stdout lines) of `krig rig check RIG`; power() says the server's power, and it
    must be the same after the check as before; no traceback, and `secret` never said."""
    before = power()
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    p = subprocess.run(KRIG + ["rig", "check", str(rig)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env=env)
    out = p.stdout + p.stderr
    assert "Traceback" not in out, out
    assert power() == before, f"the check changed the server's power:\n{out}"
    assert secret is None or secret not in out
    return p.returncode, p.stdout.splitlines()


def only_bad(lines, what: str, field: str) -> str:
    """The one FAIL line, for `what`, naming `field`."""
    bad = [ln for ln in lines if ln.startswith("FAIL")]
    assert len(bad) == 1 and bad[0].startswith(f"FAIL {what}: ") and bad[0].endswith(f"(field: {field})"), lines
    return bad[0]


def domain_active(bench) -> bool:
    """Whether the Redfish bench's libvirt domain (its server) is running."""
    dom = bench.domain()
    try:
        return bool(dom.isActive())
    finally:
        dom.connect().close()
