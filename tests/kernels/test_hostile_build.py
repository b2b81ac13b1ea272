"""A hostile build tree: what a build leaves behind (a series from a mail runs its code in
kernels/sandbox.py) is taken by the host as data, never as a path to follow
(docs/security.md, the build tree after the build; kernels/fromtree.py).

The builds are krig's real ones (kernels.incremental.build_kernel: the tree made from a
source tarball, the series applied, configure, make and modules_install in the sandbox,
install()), but the source is a tarball of a few files whose Makefile is the hostile
part, so a build takes a second and no compiler. Each build plants something: a symlink
to a host key (the test's own file) as `.config` or `System.map`, a FIFO, a release that
walks out of the cache, symlinks among the installed modules, a symlinked directory on
the way to a file the next build puts back. Each is refused in one line or dropped, and
the key is copied nowhere, nothing outside the tree and krig's cache is touched.

Covers: kernels/fromtree.py."""
import difflib
import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading

import pytest

from conftest import build_kernels
from krig.errors import KrigError, RigError, UsageError, guarded
from kernels import derived, given
from kernels import incremental as kt
from kernels import patching
from kernels import sandbox
from kernels import trees
from kernels.fromtree import check_release
from kernels import spec as kspec
from kernels.digest import cache_key
from rigs import initramfs

SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- hostile-build-test-secret\n"
PATCH = "--- a/fs/f.c\n+++ b/fs/f.c\n@@ -1 +1 @@\n-a\n+b\n"

# The source's Makefile: every target krig's build runs, doing next to nothing; {plant} is what
# the build leaves behind after `make bzImage`, {install} what `make modules_install` writes.
MAKEFILE = """\
EXTRAVERSION = {extraversion}
KR := 6.1.0$(EXTRAVERSION)$(shell sed -n 's/^CONFIG_LOCALVERSION="\\(.*\\)"$$/\\1/p' .config 2>/dev/null | tail -1)
defconfig:
\t@: > .config
olddefconfig:
\t@:
bzImage:
\t@mkdir -p arch/x86/boot && echo image > arch/x86/boot/bzImage && echo "ffffffff81000000 T _text" > System.map
\t@cat fs/*.c >> System.map
\t@{plant}
modules:
\t@:
kernelrelease:
\t@echo '$(KR)'
modules_install:
\t@d='$(INSTALL_MOD_PATH)/lib/modules/$(KR)' && mkdir -p "$$d/kernel/fs" && echo module > "$$d/kernel/fs/ok.ko"
\t@{install}
"""
MERGE_CONFIG = """\
# merge_config.sh -m .config FRAGMENT...: the fragments appended, the last wins
shift 2
cat "$@" >> .config
"""


@pytest.fixture
def host(tmp_path, monkeypatch):
    """The host around krig: a key, a directory with a file a build would like to change, a
    $KRIG_CACHE and a temporary directory of the test's own."""
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    (tmp_path / "tmp" / "a" / "b").mkdir(parents=True)      # deep enough that ../../../.. stays in it
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp" / "a" / "b"))
    key = tmp_path / "home" / ".ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_bytes(SECRET)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.c").write_text("precious\n")
    return tmp_path


def source(host, plant=":", install=":", extraversion="", modules=False):
    """kernels/ with `base` (the source as it is), `mailed` (a one-patch series on it) and `evil`
    (a series touching a path outside the tree), all built from a tarball with this Makefile."""
    src = host / "src" / "linux"
    for rel, text in {"Makefile": MAKEFILE.format(plant=plant, install=install, extraversion=extraversion),
                      "scripts/kconfig/merge_config.sh": MERGE_CONFIG, "fs/f.c": "a\n"}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    tarball = host / "linux-source-hostile.tar.xz"
    with tarfile.open(tarball, "w:xz") as t:
        t.add(src, arcname="linux")
    kd, rd = host / "kernels", host / "reproducers"
    frag = "CONFIG_XFS_FS=y\n" + ("CONFIG_MODULES=y\n" if modules else "")
    for path, text in {kd / "fragments" / "guest.config": frag,
                       rd / "r1" / "config": "CONFIG_XFS_FS=y\n",
                       kd / "patches" / "mail" / "0001-a.patch": PATCH,
                       kd / "patches" / "evil" / "0001-out.patch":
                           "--- a/../../../../home/.ssh/id_ed25519\n+++ b/../../../../home/.ssh/id_ed25519\n"
                           "@@ -1 +1 @@\n-x\n+y\n",
                       kd / "base.toml": f'source = "linux-source"\ntarball = "{tarball}"\n'
                                         'base_config = ["defconfig"]\nfragments = ["fragments/guest.config"]\n',
                       kd / "mailed.toml": 'source = "linux-source"\nextends = "base"\npatches = ["mail"]\n',
                       kd / "evil.toml": 'source = "linux-source"\nextends = "base"\npatches = ["evil"]\n'}.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return lambda name: kspec.resolve_spec(name, kernel_dir=kd, repro_dir=rd)


def snapshot(host) -> dict:
    """Everything below the test's directory but krig's cache and temporary directory:
    each path and what it is (a file's content hash, a link's target)."""
    out = {}
    for top, dirs, files, _ in os.fwalk(host):
        rel_top = os.path.relpath(top, host)
        if rel_top == ".":
            dirs[:] = [d for d in dirs if d not in ("cache", "tmp")]
        for name in dirs + files:
            p = os.path.join(top, name)
            if os.path.islink(p):
                out[os.path.relpath(p, host)] = "-> " + os.readlink(p)
            elif os.path.isfile(p):
                out[os.path.relpath(p, host)] = hashlib.sha256(pathlib.Path(p).read_bytes()).hexdigest()
            else:
                out[os.path.relpath(p, host)] = "dir"
    return out


def secret_in_cache(host) -> list:
    """Files under krig's cache (and its temporary directory) holding the key, no link followed."""
    hits = []
    for base in (host / "cache", host / "tmp"):
        for top, _, files in os.walk(base):
            for name in files:
                p = pathlib.Path(top, name)
                if p.is_file() and not p.is_symlink() and SECRET.strip() in p.read_bytes():
                    hits.append(str(p))
    return hits


def build_fails(spec, capsys) -> str:
    """build_kernel as the command line runs it: the one line it ends with (no traceback)."""
    capsys.readouterr()
    rc = guarded(lambda: kt.build_kernel(spec, log=lambda m: None))
    err = capsys.readouterr().err
    assert rc in (KrigError.exit_code, UsageError.exit_code), err
    assert err.startswith("krig: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("rel, plant, kind", [
    (".config", "ln -sf {key} .config", "a symlink"),
    ("System.map", "ln -sf {key} System.map", "a symlink"),
    ("System.map", "rm -f System.map && mkfifo System.map", "a FIFO"),
    ("arch/x86/boot/bzImage", "ln -sf {key} arch/x86/boot/bzImage", "a symlink"),
])
def test_a_file_the_build_left_as_a_link_is_refused_and_copied_nowhere(host, capsys, rel, plant, kind):
    layout = source(host, plant=plant.format(key=host / "home/.ssh/id_ed25519"))
    before = snapshot(host)
    err = build_fails(layout("base"), capsys)
    name = rel.rsplit("/", 1)[-1]
    assert f"/{rel}: refused: " in err and kind in err and "not a regular file" in err, err
    if kind == "a symlink":
        assert f"{name} is a symlink" in err, err
    assert secret_in_cache(host) == []
    assert not list((host / "cache" / "kernels").iterdir()), "nothing half-installed is left in the cache"
    assert snapshot(host) == before


@pytest.mark.parametrize("extraversion", ["/../../../../../../../escape", "-x/../../../../../../../escape"])
@pytest.mark.parametrize("modules", [False, True])
def test_a_release_that_walks_out_of_the_cache_is_refused(host, capsys, extraversion, modules):
    layout = source(host, extraversion=extraversion, modules=modules)
    before = snapshot(host)
    err = build_fails(layout("base"), capsys)
    assert "`make -s kernelrelease` in " in err and "refused: not a kernel release" in err, err
    assert not list(host.glob("escape*")) and snapshot(host) == before
    assert not list((host / "cache" / "kernels").iterdir())


def test_modules_are_kept_as_regular_files_and_directories_only(host):
    key = host / "home/.ssh/id_ed25519"
    install = (f'd="$(INSTALL_MOD_PATH)/lib/modules/$(KR)"; ln -s {key} "$$d/kernel/fs/evil.ko"; '
               f'ln -s {host / "home"} "$$d/extra"; ln -s ../../../../.. "$$d/up"; mkfifo "$$d/fifo"; '
               f'ln -s /usr/src "$$d/build"; ln -s /usr/src "$$d/source"; '
               '(echo tampered > "$(INSTALL_MOD_PATH)/../config") 2>/dev/null; '
               f'(ln -sf {key} "$(INSTALL_MOD_PATH)/../System.map") 2>/dev/null; true')
    layout = source(host, install=install, modules=True)
    before = snapshot(host)
    meta = kt.build_kernel(layout("base"), log=lambda m: None)
    assert meta["sandbox"] is True, sandbox.problem()
    out = pathlib.Path(meta["dir"])
    mods = out / "mod" / "lib" / "modules" / meta["release"]
    left = sorted(str(p.relative_to(mods)) for p in mods.rglob("*"))
    assert left == ["kernel", "kernel/fs", "kernel/fs/ok.ko"], left
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert "CONFIG_MODULES=y" in (out / "config").read_text(), "modules_install may write nothing but mod/"
    assert not (out / "System.map").is_symlink() and (out / "System.map").read_text().startswith("ffffffff81000000")
    log = (out / "build.log").read_text()
    for name, what in (("kernel/fs/evil.ko", "a symlink"), ("extra", "a symlink"), ("up", "a symlink"),
                       ("fifo", "a FIFO")):
        assert f"krig: removed 'lib/modules/{meta['release']}/{name}'" in log and what in log, name
    assert "/build'" not in log and "/source'" not in log, "the links modules_install always makes go silently"
    assert secret_in_cache(host) == [] and snapshot(host) == before


def makefile_series(host, plant: str) -> pathlib.Path:
    """A one-patch series that changes only the Makefile: its bzImage step then runs `plant`."""
    old = MAKEFILE.format(plant=":", install=":", extraversion="")
    new = MAKEFILE.format(plant=plant, install=":", extraversion="")
    patch = host / "kernels" / "patches" / "stranger" / "0001-fs-build-tweak.patch"
    patch.parent.mkdir(parents=True, exist_ok=True)
    patch.write_text("".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/Makefile",
                                                  "b/Makefile")))
    (host / "kernels" / "stranger.toml").write_text('source = "linux-source"\nextends = "base"\n'
                                                    'patches = ["stranger"]\n')
    return patch


def test_what_a_series_build_writes_outside_its_patches_is_gone_for_the_next_kernel(host):
    """The series' patch touches only the Makefile, and its build appends a function to fs/f.c
    and leaves a new file: the kernel built next in the same tree (System.map: what the build
    compiled) carries neither, and the tree is as the base left it."""
    layout = source(host)
    makefile_series(host, "echo 'int stranger(void) { return 1; }' >> fs/f.c && echo 'int planted;' > fs/g.c "
                     "&& cat fs/f.c >> System.map")
    meta = kt.build_kernel(layout("stranger"), log=lambda m: None)
    assert meta["layer"] is True and meta["sandbox"] is True, meta
    assert "stranger" in (pathlib.Path(meta["dir"]) / "System.map").read_text(), "the series' build did run"
    tree = pathlib.Path(meta["tree"])
    base = kt.build_kernel(layout("base"), log=lambda m: None)
    assert base["layer"] is False and base["tree"] == meta["tree"]
    smap = (pathlib.Path(base["dir"]) / "System.map").read_text()
    assert "stranger" not in smap and "planted" not in smap, smap
    assert (tree / "fs" / "f.c").read_text() == "a\n" and not (tree / "fs" / "g.c").exists()
    assert "EXTRAVERSION = \n" in (tree / "Makefile").read_text() and "stranger" not in (tree / "Makefile").read_text()
    assert not list((host / "cache" / "kbuild" / "layers").iterdir()), "the layer is thrown away"


def test_a_series_build_that_links_a_directory_out_changes_nothing_there(host):
    """The series' build makes fs a link to a host directory: the next kernel built in the tree
    finds fs as it was, and the host directory is untouched."""
    layout = source(host)
    makefile_series(host, f"rm -rf fs && ln -s {host / 'outside'} fs && (echo changed > fs/f.c || true)")
    before = snapshot(host)
    kt.build_kernel(layout("stranger"), log=lambda m: None)
    base = kt.build_kernel(layout("base"), log=lambda m: None)
    tree = pathlib.Path(base["tree"])
    assert not (tree / "fs").is_symlink() and (tree / "fs" / "f.c").read_text() == "a\n"
    assert (host / "outside" / "f.c").read_text() == "precious\n" and snapshot(host) == before


def test_a_series_patching_through_a_symlinked_directory_is_refused(host, capsys):
    layout = source(host, plant=f"rm -rf fs && ln -s {host / 'outside'} fs")
    kt.build_kernel(layout("base"), log=lambda m: None)
    before = snapshot(host)
    err = build_fails(layout("mailed"), capsys)
    assert "0001-a.patch touches fs/f.c: " in err and "fs is a symlink, not a directory" in err, err
    assert snapshot(host) == before


def test_restore_refuses_a_path_out_of_the_tree(host):
    tree, pristine = host / "cache" / "tree", host / "cache" / "pristine"
    (tree / "fs").mkdir(parents=True)
    (pristine / "fs").mkdir(parents=True)
    (pristine / "fs" / "f.c").write_text("a\n")
    before = snapshot(host)
    for state in ({"created": ["../../outside/f.c"]}, {"created": [str(host / "outside/f.c")]},
                  {"pristine": str(pristine), "modified": ["fs/../../../outside/f.c"]}):
        with pytest.raises(KrigError) as e:
            kt.restore(tree, state)
        assert "not a name below its directory" in str(e.value) and "\n" not in str(e.value)
    os.symlink(host / "outside", tree / "linked")
    with pytest.raises(KrigError, match="linked is a symlink, not a directory"):
        kt.restore(tree, {"created": ["linked/f.c"]})
    assert snapshot(host) == before


@pytest.mark.parametrize("target", ["../../../../home/.ssh/id_ed25519", "/home/.ssh/id_ed25519", ".."])
def test_a_series_touching_a_path_out_of_the_tree_is_refused_before_anything_is_read(host, target):
    patch = host / "mail" / "0001-out.patch"
    patch.parent.mkdir()
    patch.write_text(f"--- a/fs/f.c\n+++ b/fs/f.c\n@@ -1 +1 @@\n-a\n+b\n--- a/{target}\n+++ b/{target}\n"
                     "@@ -1 +1 @@\n-x\n+y\n")
    read = []
    before = snapshot(host)
    with pytest.raises(UsageError) as e:
        patching.apply_to_copies(lambda rel: read.append(rel) or b"a\n", [("mail.mbox", patch)])
    assert str(e.value).startswith("mail.mbox: patch 0001-out.patch touches ") and "\n" not in str(e.value)
    assert "not a path below the tree" in str(e.value)
    assert read == [] and snapshot(host) == before


def test_a_series_cannot_patch_through_a_link_it_made(host):
    """A series whose first patch makes a symlink (a git diff may) and whose second writes through it."""
    p1, p2 = host / "mail" / "0001-link.patch", host / "mail" / "0002-through.patch"
    p1.parent.mkdir()
    p1.write_text(f"diff --git a/d b/d\nnew file mode 120000\n--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n"
                  f"+{host / 'outside'}\n\\ No newline at end of file\n")
    p2.write_text("--- a/d/f.c\n+++ b/d/f.c\n@@ -1 +1 @@\n-precious\n+changed\n")
    before = snapshot(host)
    with pytest.raises(UsageError) as e:
        patching.apply_to_copies(lambda rel: None, [("mail.mbox", p1), ("mail.mbox", p2)])
    assert "0002-through.patch touches d/f.c: " in str(e.value) and "d is a symlink, not a directory" in str(e.value)
    assert snapshot(host) == before


def test_trial_apply_of_a_series_out_of_the_tree_reads_nothing_outside(host):
    """`--kernel NAME,series=` applies the series to copies first (kernels/derived.py: the files of
    the source read by kernels/trees.py source_files): a target outside the tree is refused
    before the pristine source is read for it."""
    layout = source(host)
    before = snapshot(host)
    spec = layout("evil")
    with pytest.raises(UsageError, match=r"^evil: patch 0001-out.patch touches '\.\./"):
        patching.apply_to_copies(trees.source_files(spec), spec.patches)
    assert secret_in_cache(host) == [] and snapshot(host) == before


def test_the_initramfs_takes_module_files_only_from_below_the_modules_directory(host, monkeypatch):
    """modprobe names the files of a module from the kernel's modules.dep, which its own build
    wrote: a path out of the modules directory, or a link or FIFO in it, is refused."""
    mods = host / "cache" / "kernels" / "k" / "mod" / "lib" / "modules" / "6.1.0-krig"
    (mods / "kernel").mkdir(parents=True)
    (mods / "kernel" / "ok.ko").write_bytes(b"module")
    os.symlink(host / "home/.ssh/id_ed25519", mods / "kernel" / "link.ko")
    os.mkfifo(mods / "kernel" / "fifo.ko")
    named = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 0, f"insmod {named[-1]}\n", ""))
    named.append(mods / "kernel" / "ok.ko")
    assert initramfs.module_load_order("6.1.0-krig", mods, ["ok"]) == [mods / "kernel" / "ok.ko"]
    for path, why in ((host / "home/.ssh/id_ed25519", "not a name below its directory"),
                      (mods / "kernel/../../../../../../../home/.ssh/id_ed25519", "not a name below its directory"),
                      (mods / "kernel" / "link.ko", "a symlink, not a regular file"),
                      (mods / "kernel" / "fifo.ko", "a FIFO, not a regular file")):
        named.append(path)
        with pytest.raises(RigError) as e:
            initramfs.module_load_order("6.1.0-krig", mods, ["evil"])
        assert str(e.value).startswith(f"kernel 6.1.0-krig: module 'evil': modprobe names {path}: refused")
        assert why in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("release", ["6.1.0-test\n", "6.1.0\n\n", "\n6.1.0", "6.1.0 x", "../6.1"])
def test_a_release_with_a_newline_or_more_is_refused(release):
    """`make kernelrelease` printing a release and a newline (or more) names no directory."""
    with pytest.raises(UsageError, match="refused: not a kernel release"):
        check_release(release, "the tree's release", UsageError)
    assert check_release("6.1.0-test", "the tree's release", UsageError) == "6.1.0-test"
def test_a_build_beside_a_series_build_is_incremental_too(host):
    """A series builds in its layer over the tree (a shared lock, held 3 s by its Makefile): a
    kernel from a git tree started meanwhile (a bisection step's kind) seeds its new tree from
    that one at once, without waiting, instead of building from nothing."""
    layout = source(host)
    makefile_series(host, "sleep 3")
    assert kt.build_kernel(layout("base"), log=lambda m: None)["layer"] is False
    repo = host / "repo"
    shutil.copytree(host / "src" / "linux", repo)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "import"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, capture_output=True, env=env)
    (host / "kernels" / "step.toml").write_text(f'source = "git"\ntree = "{repo}"\nref = "HEAD"\n'
                                                'base_config = ["defconfig"]\nfragments = ["fragments/guest.config"]\n')
    in_layer, said, out = threading.Event(), {"series": [], "step": []}, {}

    def build(name):
        def log(m):
            said[name].append(m)
            if "throwaway layer" in m:
                in_layer.set()
        out[name] = kt.build_kernel(layout({"series": "stranger", "step": "step"}[name]), log=log)
    series = threading.Thread(target=build, args=("series",), daemon=True)
    series.start()
    assert in_layer.wait(120), said["series"]
    build("step")
    series.join(120)
    assert not series.is_alive()
    assert out["series"]["layer"] and out["series"]["incremental"], out["series"]
    assert out["step"]["incremental"] and out["step"]["seeded_from"] == out["series"]["tree"], out["step"]
    assert not any("waiting for" in m for m in said["step"]), said["step"]


def test_krigs_own_kernel_builds_in_the_tree_while_a_series_builds_over_its_copy(host):
    """A series holds the tree only while it copies it: its make then sleeps (`sleep 600.0625`,
    ended by the test) in a layer over the copy, and a kernel of krig's own built in the same
    tree meanwhile neither waits nor sees anything of the series; the copy goes with the layer."""
    layout = source(host)
    makefile_series(host, "echo 'int stranger;' >> fs/f.c && (sleep 600.0625 || true) && cat fs/f.c >> System.map")
    kt.build_kernel(layout("base"), log=lambda m: None)
    (host / "kernels" / "own.toml").write_text('source = "linux-source"\nextends = "base"\n'
                                               'localversion = "-own"\n')
    out, said = {}, []
    series = threading.Thread(target=lambda: out.update(series=kt.build_kernel(layout("stranger"), log=said.append)),
                              daemon=True)
    series.start()
    try:
        for _ in range(600):            # until the series' make sleeps in its layer
            if sleeping("600.0625"):
                break
            assert series.is_alive(), said
            threading.Event().wait(0.1)
        else:
            raise AssertionError(f"the series' build did not start: {said}")
        own_said, settled = [], threading.Event()

        def own_log(m):
            own_said.append(m)
            if "waiting for" in m:
                settled.set()           # it waits: the test fails at once, not when the series ends
        mine = threading.Thread(target=lambda: (out.update(own=kt.build_kernel(layout("own"), log=own_log)),
                                                settled.set()), daemon=True)
        mine.start()
        settled.wait(600)
        assert len(sleeping("600.0625")) == 1, "the series was still building while krig's own kernel built"
    finally:
        for pid in sleeping("600.0625"):
            os.kill(pid, signal.SIGTERM)
        series.join(120)
    mine.join(120)
    assert not any("waiting for" in m for m in own_said), own_said
    own = out["own"]
    assert own["layer"] is False and own["tree"] == out["series"]["tree"] and "stranger" not in \
        (pathlib.Path(own["dir"]) / "System.map").read_text()
    assert "stranger" in (pathlib.Path(out["series"]["dir"]) / "System.map").read_text()
    assert any("copied tree" in m and "the tree is free again" in m for m in said), said
    assert not list((host / "cache" / "kbuild" / "layers").iterdir()), "the copy goes with the layer"


def sleeping(mark: str) -> list:
    """The pids of the processes running `sleep MARK` (a test's own build started them)."""
    pids = []
    for p in pathlib.Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (p / "cmdline").read_bytes() == f"sleep\0{mark}\0".encode():
                pids.append(int(p.name))
        except OSError:
            pass
    return pids


# tiny-6.1 (linux-source-6.1), built for real: a series whose only change is a line in fs/Makefile
# that appends a function to fs/dcache.c each time kbuild reads it, and an unrelated one after it
STRANGER = """\
From: A Stranger <stranger@example.org>
Subject: [PATCH] fs: a build tweak

---
--- a/fs/Makefile
+++ b/fs/Makefile
@@ -7,6 +7,7 @@
 # 
 
 
+$(shell grep -q krig_stranger $(srctree)/fs/dcache.c || echo 'int krig_stranger(void) { return 42; }' >> $(srctree)/fs/dcache.c)
 obj-y :=	open.o read_write.o file_table.o super.o \\
 		char_dev.o stat.o exec.o pipe.o namei.o fcntl.o \\
 		ioctl.o readdir.o select.o dcache.o inode.o \\
"""
BENIGN = """\
From: A Neighbour <neighbour@example.org>
Subject: [PATCH] Documentation: a note

---
--- /dev/null
+++ b/Documentation/krig-note.txt
@@ -0,0 +1 @@
+A note that changes no code.
"""


@pytest.mark.kbuild
@pytest.mark.long(4)     # measured 3.1 min, 4.7 with an empty ccache
def test_a_real_series_editing_dcache_c_from_its_makefile_leaves_the_next_kernel_clean(tmp_path):
    """Both kernels are built by this test (their cache entries removed first), in tiny-6.1's tree."""
    build_kernels("tiny-6.1")
    built = {}
    for name, text in (("stranger", STRANGER), ("neighbour", BENIGN)):
        series = tmp_path / name
        series.mkdir()
        (series / "0001.patch").write_text(text)
        arg = f"tiny-6.1,series={series}"
        g = given.parse(arg)
        spec, _, _ = derived.derived_spec(g, log=lambda m: None)
        shutil.rmtree(kspec.kernel_cache(cache_key(kspec.build_inputs(spec))), ignore_errors=True)
        kernel = derived.derived_kernel(g, build=True, log=lambda m: None)
        built[name] = json.loads((kernel.image.parent / "build.json").read_text())
        built[name]["System.map"] = (kernel.image.parent / "System.map").read_text()
        shutil.rmtree(kernel.image.parent)          # nothing of this test stays in the kernel cache
    assert " T krig_stranger\n" in built["stranger"]["System.map"], "the series' build did edit dcache.c"
    assert "krig_stranger" not in built["neighbour"]["System.map"]
    assert built["stranger"]["tree"] == built["neighbour"]["tree"] and built["neighbour"]["layer"]
    assert "krig_stranger" not in (pathlib.Path(built["neighbour"]["tree"]) / "fs" / "dcache.c").read_text()
