"""The kernel build sandbox (kernels/sandbox.py) with the real bwrap: what a Makefile from a
series can and cannot reach, and the decisions of a build when the sandbox is off.
The real kernel builds of make test (CI's kernels, the validate end-to-end series)
run in it too.

Covers: kernels/overlay.py, kernels/patching.py, kernels/sandbox.py."""
import json
import os
import pathlib
import socket
import subprocess
import threading

import pytest

from conftest import require_program
from krig.errors import UsageError
from kernels import incremental as kt
from kernels import patching
from kernels import overlay, sandbox
from kernels import spec as kspec

# what a hostile series' Makefile tries: each line leaves a word in seen.txt
MAKEFILE = """\
all:
\t@echo built > ok
\t@(cat {secret} 2>/dev/null || echo no-secret) >> seen.txt
\t@(touch {outside}/marker 2>/dev/null && echo wrote-outside || echo no-outside) >> seen.txt
\t@(echo "env=[$$KRIG_TEST_SECRET]") >> seen.txt
\t@(python3 -c "import socket; socket.create_connection(('127.0.0.1', {port}), 3)" 2>/dev/null \\
\t   && echo connected || echo no-network) >> seen.txt
\t@(echo evil > .git/hooks/post-checkout 2>/dev/null && echo wrote-git || echo no-git) >> seen.txt
\t@(ls /root /home /work 2>/dev/null | head -1 | grep -q . && echo saw-homes || echo no-homes) >> seen.txt
"""


def test_the_sandbox_runs_here():
    """make setup installs bubblewrap; a host where it cannot run is said in one line."""
    assert sandbox.problem() is None


def test_a_makefile_from_a_series_reaches_nothing_of_the_host(tmp_path, monkeypatch):
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / ".git" / "hooks").mkdir(parents=True)
    outside.mkdir()
    secret = tmp_path / "id_ed25519"
    secret.write_text("SECRET-KEY-MATERIAL\n")
    monkeypatch.setenv("KRIG_TEST_SECRET", "hunter2-in-env")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.5)
    accepted, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                accepted.append(srv.accept()[0])
            except OSError:
                pass
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    (tree / "Makefile").write_text(MAKEFILE.format(secret=secret, outside=outside, port=srv.getsockname()[1]))
    logf = tmp_path / "build.log"
    try:
        rc = kt.run_logged(kt.boxed(["make"], tree, True), tree, logf)
    finally:
        stop.set()
        t.join(5)
        srv.close()
    assert rc == 0, logf.read_text()
    assert (tree / "ok").read_text() == "built\n"           # the tree itself is the build's to write
    seen = (tree / "seen.txt").read_text().split()
    assert seen == ["no-secret", "no-outside", "env=[]", "no-network", "no-git", "no-homes"], seen
    assert not (outside / "marker").exists() and not (tree / ".git" / "hooks" / "post-checkout").exists()
    assert accepted == []
    assert "SECRET-KEY-MATERIAL" not in logf.read_text() and "hunter2" not in logf.read_text()


def test_a_patch_is_applied_in_the_sandbox(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f.c").write_text("a\n")
    p = tmp_path / "0001-x.patch"
    p.write_text("--- a/f.c\n+++ b/f.c\n@@ -1 +1 @@\n-a\n+b\n")
    state = {}
    kt.apply_patch(tree, p, "series.mbox: patch 0001-x.patch", state, box=True)
    assert (tree / "f.c").read_text() == "b\n" and state["modified"] == ["f.c"]


@pytest.mark.parametrize("value", ["maybe", "0"])
def test_bad_sandbox_setting_is_one_line(monkeypatch, value):
    monkeypatch.setenv("KRIG_BUILD_SANDBOX", value)
    with pytest.raises(UsageError, match=rf"^KRIG_BUILD_SANDBOX: expected on or off, got '{value}'$"):
        sandbox.usable()


# -- decisions of a build (the make steps faked; the layout of tests/kernels/test_kernels_build.py) --

@pytest.fixture
def layout(tmp_path, monkeypatch):
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    kd, rd = tmp_path / "kernels", tmp_path / "reproducers"
    tarball = tmp_path / "linux-source-fake.tar.xz"
    tarball.write_bytes(b"not really a tarball")
    for path, text in {kd / "fragments" / "guest.config": "CONFIG_XFS_FS=y\n",
                       rd / "r1" / "config": "CONFIG_XFS_FS=y\n",
                       kd / "patches" / "mail" / "0001-a.patch": "--- a/f.c\n+++ b/f.c\n@@ -1 +1 @@\n-a\n+b\n",
                       kd / "base.toml": f'source = "linux-source"\ntarball = "{tarball}"\n'
                                         'fragments = ["fragments/guest.config"]\n',
                       kd / "mailed.toml": 'source = "linux-source"\nextends = "base"\npatches = ["mail"]\n'}.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return lambda name: kspec.resolve_spec(name, kernel_dir=kd, repro_dir=rd)


@pytest.fixture
def steps(monkeypatch):
    """The build's steps, recorded instead of run."""
    done = []

    def install(tree, out, logf, box=False):
        done.append(("install", box))
        (out / "mod").mkdir(parents=True)
        return "6.1.0-krig"
    monkeypatch.setattr(kt, "create_tree", lambda tree, *a: (tree.mkdir(parents=True), done.append(("tree",)), {})[2])
    monkeypatch.setattr(kt, "sync_source", lambda *a, **k: done.append(("sync", a[-1] if len(a) > 5 else None)))
    monkeypatch.setattr(kt, "configure", lambda *a, **k: None)
    monkeypatch.setattr(kt, "make_kernel", lambda tree, spec, logf, log, box=False: done.append(("make", box)))
    monkeypatch.setattr(kt, "install", install)
    return done


def _tree(spec) -> tuple[pathlib.Path, dict]:
    tree_id, origin = kt.origin_of(spec, kt.source_identity(spec))
    return kspec.cache_dir("kbuild", "trees") / tree_id, origin


def test_krigs_own_patches_are_not_from_outside():
    spec = kspec.resolve_spec("tiny-6.1-negative-dentry-cap")
    assert spec.patches and kt.outside_series(spec) is None


def test_a_series_from_outside_is_built_in_a_layer_over_the_tree(layout, steps, monkeypatch):
    """Its base is built in the tree (krig's own code), the series only in the overlay."""
    monkeypatch.setattr(kt, "apply_patch", lambda tree, p, label, state, box=False: steps.append(("patch", box)))
    spec = layout("mailed")
    assert kt.outside_series(spec).endswith("0001-a.patch")
    meta = kt.build_kernel(spec, log=lambda m: None)
    assert meta["sandbox"] is True and meta["layer"] is True
    assert ("make", True) in steps, "the series' base, in the tree"
    assert [s[0] for s in steps if isinstance(s[-1], overlay.Layer)] == ["patch", "make", "install"], steps
    tree, _ = _tree(spec)
    assert "tainted" not in json.loads(tree.with_name(tree.name + ".json").read_text())


def test_without_the_sandbox_a_series_from_outside_is_refused(layout, steps, monkeypatch):
    monkeypatch.setenv("KRIG_BUILD_SANDBOX", "off")
    with pytest.raises(UsageError) as e:
        kt.build_kernel(layout("mailed"), log=lambda m: None)
    assert str(e.value).startswith("kernel mailed: ") and "built only in the build sandbox" in str(e.value)
    assert "\n" not in str(e.value) and "KRIG_BUILD_SANDBOX=off" in str(e.value)
    assert steps == []


def test_without_the_sandbox_a_tainted_tree_is_made_again(layout, steps, monkeypatch):
    spec = layout("base")
    tree, origin = _tree(spec)
    tree.mkdir(parents=True)
    (tree / "left-by-a-series").write_text("x")
    tree.with_name(tree.name + ".json").write_text(json.dumps({"origin": origin, "tainted": "a.patch",
                                                               "built": True}))
    monkeypatch.setenv("KRIG_BUILD_SANDBOX", "off")
    said = []
    meta = kt.build_kernel(spec, log=said.append)
    assert meta["sandbox"] is False and ("tree",) in steps and ("make", False) in steps
    assert not (tree / "left-by-a-series").exists()
    assert any("has built a series from outside" in m for m in said), said


def test_with_the_sandbox_too_a_tainted_tree_is_made_again(layout, steps):
    """A tree a series was once built in (in place) may carry anything of it."""
    spec = layout("base")
    tree, origin = _tree(spec)
    tree.mkdir(parents=True)
    tree.with_name(tree.name + ".json").write_text(json.dumps({"origin": origin, "tainted": "a.patch"}))
    kt.build_kernel(spec, log=lambda m: None)
    assert ("tree",) in steps and ("make", True) in steps and os.path.isdir(tree)


def test_without_the_sandbox_the_trial_apply_of_a_series_is_refused(tmp_path, monkeypatch):
    """`patch --dry-run` of a series from outside runs its input through GNU patch: not on the host."""
    monkeypatch.setenv("KRIG_BUILD_SANDBOX", "off")
    p = tmp_path / "0001-x.patch"
    p.write_text("--- a/f.c\n+++ b/f.c\n@@ -1 +1 @@\n-a\n+b\n")
    ran, read = [], []
    monkeypatch.setattr(kt.subprocess, "run", lambda *a, **k: ran.append(a))
    with pytest.raises(UsageError) as e:
        patching.apply_to_copies(lambda rel: read.append(rel) or b"a\n", [("mail.mbox", p)])
    assert "built only in the build sandbox" in str(e.value) and "\n" not in str(e.value)
    assert ran == [] and read == []


def test_a_series_build_cannot_write_the_compiler_cache(tmp_path, monkeypatch):
    """krig's own build writes the cache; the same step in a series' layer finds it read-only."""
    require_program("ccache", "ccache")
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "Makefile").write_text('all:\n\t@echo "$$CCACHE_DIR $$CCACHE_READONLY" > seen\n'
                                   '\t@(echo entry > $$CCACHE_DIR/planted && echo wrote || echo refused) >> seen\n')
    assert kt.run_logged(kt.boxed(["make"], tree, True), tree, tmp_path / "own.log") == 0
    assert (tree / "seen").read_text().split() == ["/ccache", "wrote"]
    assert (kt.ccache.directory() / "planted").read_text() == "entry\n"
    (kt.ccache.directory() / "planted").unlink()
    (tree / "seen").unlink()
    with overlay.Layer(tree, tmp_path / "layer") as layer:
        assert kt.run_logged(kt.boxed(["make"], layer.view, layer), tree, tmp_path / "series.log") == 0
        seen = (layer.view / "seen").read_text().split()
    assert seen == ["/ccache", "1", "refused"], seen
    assert not (kt.ccache.directory() / "planted").exists() and not (tree / "seen").exists()


def test_a_layer_left_by_a_killed_build_is_swept(tmp_path):
    layers = tmp_path / "layers"
    (layers / f"src-x-{os.getpid()}" / "upper").mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (layers / f"src-x-{dead.pid}" / "upper" / "fs").mkdir(parents=True)
    overlay.sweep(layers)
    assert [d.name for d in layers.iterdir()] == [f"src-x-{os.getpid()}"]
