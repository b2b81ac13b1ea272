"""`krig lab sim up NAME` never writes over a rig file or a secret it did not write, and `down`
removes only what it wrote (rigs/labsim/owned.py): through the real CLI, nothing started (the
refusals come before the simulator; `down` reads a server's state as a supervisor leaves it).

Covers: rigs/labsim/owned.py."""
import json
import os
import pathlib
import subprocess

import pytest

from conftest import KRIG, ROOT
from labsim_fixture import started_under
from rigs.labsim import owned


def _env(tmp_path):
    return {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "KRIG_LOCK_DIR": str(tmp_path / "locks")}


def _krig(tmp_path, *args):
    return subprocess.run(KRIG + ["lab", "sim", *args], capture_output=True, text=True, cwd=ROOT,
                          env=_env(tmp_path), timeout=120)


def _paths(tmp_path, name="mine1"):
    rigs, secrets = tmp_path / "config" / "krig" / "rigs", tmp_path / "config" / "krig" / "secrets"
    rigs.mkdir(parents=True)
    secrets.mkdir(mode=0o700)
    return rigs / f"{name}.toml", secrets / f"labsim-{name}-bmc"


MINE = '# my own server\ndriver = "ipmi"\n[bmc]\nhost = "10.0.0.9"\n'


@pytest.mark.parametrize("which", ["rig", "secret"])
def test_up_leaves_a_users_own_file_and_names_it(tmp_path, which):
    rig, secret = _paths(tmp_path)
    mine = rig if which == "rig" else secret
    mine.write_text(MINE)
    p = _krig(tmp_path, "up", "mine1")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"NAME: {mine} is there and krig lab sim did not write it" in p.stderr, p.stderr
    assert mine.read_text() == MINE
    assert not started_under(tmp_path / "state")
    assert not (tmp_path / "state" / "krig" / "labsim" / "mine1" / "state.json").exists()


def test_up_leaves_a_link_at_the_rig_files_name(tmp_path):
    rig, _ = _paths(tmp_path, "lab1")
    target = tmp_path / "victim"
    target.write_text("theirs\n")
    rig.symlink_to(target)
    p = _krig(tmp_path, "up", "lab1")
    assert p.returncode == 2 and f"NAME: {rig} is there" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert rig.is_symlink() and target.read_text() == "theirs\n"


def _state(tmp_path, name: str, written: list) -> pathlib.Path:
    """A stopped server's state as its supervisor leaves it (no process, its records)."""
    d = tmp_path / "state" / "krig" / "labsim" / name
    d.mkdir(parents=True)
    (d / "state.json").write_text(json.dumps({"name": name, "supervisor": None, "ready": True,
                                              "written": written}))
    return d


def test_down_removes_what_up_wrote_and_only_that(tmp_path):
    """Written by the simulator and untouched: removed. Written by it and then edited, or
    replaced by the user's own file, or never recorded: kept."""
    rig, secret = _paths(tmp_path, "lab1")
    written = [owned.write_new(rig, (owned.header("lab1") + 'driver = "ipmi"\n').encode()),
               owned.write_new(secret, b"pw\n", 0o600)]
    assert rig.read_text().startswith("# written by `krig lab sim up lab1`")
    _state(tmp_path, "lab1", written)
    p = _krig(tmp_path, "down", "lab1")
    assert p.returncode == 0 and "stopped" in p.stdout, p.stdout + p.stderr
    assert not rig.exists() and not secret.exists()

    rig2, secret2 = rig.with_name("lab2.toml"), secret.with_name("labsim-lab2-bmc")
    written = [owned.write_new(rig2, b'driver = "ipmi"\n'), owned.write_new(secret2, b"pw\n", 0o600)]
    rig2.write_text(MINE)                       # edited in place: the user's now
    secret2.unlink()
    secret2.write_text("their own secret\n")    # another file at the name
    other = rig.with_name("lab3.toml")
    other.write_text(MINE)                      # never recorded
    _state(tmp_path, "lab2", written)
    _state(tmp_path, "lab3", [])
    for name in ("lab2", "lab3"):
        p = _krig(tmp_path, "down", name)
        assert p.returncode == 0, p.stdout + p.stderr
    assert rig2.read_text() == MINE and secret2.read_text() == "their own secret\n" and other.read_text() == MINE


def test_up_again_after_a_crash_takes_back_only_its_own_files(tmp_path):
    """A supervisor that died left its files: they are the server's (recorded), so `up` does not
    refuse them; one the user edited since is refused."""
    rig, secret = _paths(tmp_path, "lab1")
    written = [owned.write_new(rig, b'driver = "ipmi"\n'), owned.write_new(secret, b"pw\n", 0o600)]
    _state(tmp_path, "lab1", written)
    owned.in_the_way("lab1", (rig, secret), written)            # no refusal
    rig.write_text(MINE)
    p = _krig(tmp_path, "up", "lab1")
    assert p.returncode == 2 and f"NAME: {rig} is there" in p.stderr, p.stderr
    assert rig.read_text() == MINE and secret.read_text() == "pw\n"


def test_a_file_that_appears_before_the_write_is_not_written_over(tmp_path):
    """The write itself never replaces: a file (or link) at the name by then is one line."""
    from krig.errors import KrigError
    path = tmp_path / "lab1.toml"
    path.write_text(MINE)
    with pytest.raises(KrigError, match=r"lab1\.toml: refused: a file krig lab sim did not write is there"):
        owned.write_new(path, b"ours\n")
    assert path.read_text() == MINE and [p.name for p in tmp_path.iterdir()] == ["lab1.toml"]
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(KrigError):
        owned.write_new(path, b"ours\n")
    assert not (tmp_path / "elsewhere").exists()
