"""kernels/ (spec, incremental) without building a kernel: fragments, specs, cache keys, patches,
the git build tree, and the not-built error. Fast (no kernel source needed;
the merge_config.sh and real-patch checks run only when the extracted 6.1
source is already in the cache).

Covers: kernels/catalog.py, kernels/definition.py, kernels/digest.py, kernels/incremental.py,
kernels/kconfig.py, kernels/named.py, kernels/spec.py, kernels/trees.py."""
import os
import pathlib
import shutil
import subprocess

import pytest

from krig import KERNEL_DIR
from krig.config import load_toml
from krig.errors import UsageError
from kernels import kconfig
from kernels import spec as kspec
from kernels.build import buildable_kernels
from kernels.definition import DEFAULT_BASE_CONFIG, read
from kernels.digest import cache_key
from kernels import incremental as kt
from kernels import patching
from kernels import trees as kt_trees


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Every test gets its own $KRIG_CACHE."""
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def write(path: pathlib.Path, text: str) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def layout(tmp_path):
    """A fake kernels/ and reproducers/ with a tiny tarball standing in for linux-source."""
    kd, rd = tmp_path / "kernels", tmp_path / "reproducers"
    tarball = tmp_path / "linux-source-fake.tar.xz"
    tarball.write_bytes(b"not really a tarball")
    write(kd / "fragments" / "guest.config", "# guest\nCONFIG_XFS_FS=y\nCONFIG_9P_FS=y\n")
    write(rd / "r1" / "config", "CONFIG_XFS_FS=m\nCONFIG_FTRACE=y\n")
    write(rd / "r2" / "config", "# no options\n")
    write(kd / "patches" / "s1" / "0001-a.patch", "--- a/f.c\n+++ b/f.c\n@@ -1 +1 @@\n-a\n+b\n")
    write(kd / "base.toml", f'source = "linux-source"\ntarball = "{tarball}"\n'
                            'fragments = ["fragments/guest.config"]\n')
    write(kd / "var.toml", 'source = "linux-source"\nextends = "base"\npatches = ["s1"]\n')
    return kd, rd, tarball


def key(name, layout):
    kd, rd, _ = layout
    return cache_key(kspec.build_inputs(kspec.resolve_spec(name, kernel_dir=kd, repro_dir=rd)))


# -- fragments ---------------------------------------------------------------

def test_fragments_merge_last_wins(tmp_path):
    a = write(tmp_path / "a", "CONFIG_A=y\nCONFIG_B=m\n# CONFIG_C is not set\n\n# a comment\n")
    b = write(tmp_path / "b", "CONFIG_B=y\nCONFIG_C=y\nCONFIG_S=\"x y\"\n")
    values, origin, redefined = kconfig.merge_fragments([("a", a), ("b", b)])
    assert values == {"CONFIG_A": "y", "CONFIG_B": "y", "CONFIG_C": "y", "CONFIG_S": '"x y"'}
    assert origin["CONFIG_A"] == "a" and origin["CONFIG_B"] == "b"
    assert ("b", "CONFIG_C", "n", "y") in redefined


def test_fragment_bad_line_is_one_line(tmp_path):
    f = write(tmp_path / "frag", "CONFIG_A=y\nXFS=y\n")
    with pytest.raises(UsageError) as e:
        kconfig.parse_fragment(f, "reproducers/x/config")
    assert str(e.value).startswith("reproducers/x/config:2: not a kconfig line") and "\n" not in str(e.value)


def test_config_mismatches():
    wanted = {"CONFIG_A": "m", "CONFIG_B": "y", "CONFIG_C": "n", "CONFIG_D": "y"}
    final = {"CONFIG_A": "y", "CONFIG_B": "y", "CONFIG_D": "m"}
    assert kconfig.config_mismatches(wanted, final) == [("CONFIG_D", "y", "m")]


@pytest.mark.kbuild
def test_merge_matches_the_kernels_merge_config(tmp_path, linux_source):
    base = write(tmp_path / ".config", "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=m\n")
    f1 = write(tmp_path / "f1", "CONFIG_B=y\nCONFIG_D=\"-x\"\n")
    f2 = write(tmp_path / "f2", "# CONFIG_A is not set\nCONFIG_B=m\n")
    subprocess.run(["bash", str(linux_source / "scripts/kconfig/merge_config.sh"), "-m", ".config", str(f1), str(f2)], cwd=tmp_path,
                   check=True, capture_output=True)
    mine, _, _ = kconfig.merge_fragments([("base", base), ("f1", f1), ("f2", f2)])
    assert kconfig.read_dotconfig(tmp_path / ".config") == mine


# -- specs ---------------------------------------------------------------------

def test_extends_inherits_and_defaults(layout):
    kd, rd, tarball = layout
    s = kspec.resolve_spec("var", kernel_dir=kd, repro_dir=rd)
    assert s.source == "linux-source" and s.tarball == tarball
    assert s.localversion == "-krig-var"
    assert [label for label, _ in s.fragments] == ["reproducers/r1/config", "reproducers/r2/config",
                                                   "kernels/fragments/guest.config"]
    assert [(series, p.name) for series, p in s.patches] == [("s1", "0001-a.patch")]
    assert s.base_config == ["x86_64_defconfig", "kvm_guest.config"]


@pytest.mark.parametrize("body, field", [
    ('source = "linux-source"\npatches = ["nope"]\n', "patches: series 'nope' not found"),
    ('source = "linux-source"\nlocalversion = "-a b"\n', "localversion"),
    ('source = "git"\n', "missing required field 'tree'"),
    ('source = "linux-source"\ntree = "/x"\n', "tree: only for source = 'git'"),
    ('source = "tarball"\n', "source: 'tarball' is not one of"),
    ('source = "linux-source"\nfragments = ["missing.config"]\n', "fragments: 'missing.config' not found"),
    ('source = "linux-source"\nreproducers = ["r9"]\n', "reproducers: 'r9' has no"),
    ('source = "linux-source"\nextends = "bad"\n', "extends: 'bad' makes a cycle"),
    ('source = "linux-source"\nbogus = 1\n', "unknown field 'bogus'"),
    ('source = "linux-source"\nbase_config = []\n', "base_config: needs at least one config target"),
    ('source = "linux-source"\ncmdline = ["quiet", 1]\n', "cmdline: expected a list of strings, got 1"),
    ('source = "linux-source"\nreproducers = "some"\n', "reproducers: expected \"all\" or a list"),
    ('source = "linux-source"\ndescription = 3\n', "description: expected"),
])
def test_bad_kernel_toml_is_one_line(layout, body, field):
    kd, rd, _ = layout
    write(kd / "bad.toml", body)
    with pytest.raises(UsageError) as e:
        kspec.resolve_spec("bad", kernel_dir=kd, repro_dir=rd)
    msg = str(e.value)
    assert msg.startswith("kernels/bad.toml") and field in msg and "\n" not in msg


def test_real_kernel_tomls_resolve():
    names = buildable_kernels()
    assert {"linux-6.1", "linux-6.1-revert-cil-flush-limit", "linux-6.1-rmdir-keeps-children",
            "linux-6.1-negative-dentry-cap", "tiny-6.1", "tiny-6.1-rmdir-keeps-children",
            "tiny-6.1-negative-dentry-cap", "tiny-6.1-revert-cil-flush-limit"} <= set(names)
    for n in names:
        if n.startswith("bisect-"):
            continue
        s = kspec.resolve_spec(n)
        labels = [label for label, _ in s.fragments]
        guest = "tiny-guest" if n.startswith("tiny-") else "krig-guest"
        # the guest fragment wins over every reproducer's; only the kernel's own fragments
        # (kernels/fragments/, e.g. the lab server's needs in tiny-6.1) may follow it
        after = labels[labels.index(f"kernels/fragments/{guest}.config") + 1:]
        assert all(label.startswith("kernels/fragments/") for label in after), "the guest fragment must win"
        if s.cmdline:       # a boot-time variant of the kernel it extends: the same build
            parent = kspec.resolve_spec(load_toml(KERNEL_DIR / f"{n}.toml")["extends"])
            assert cache_key(kspec.build_inputs(s)) == cache_key(kspec.build_inputs(parent)), n
        else:
            assert s.localversion == f"-krig-{n}"
        data = load_toml(KERNEL_DIR / f"{n}.toml")
        if "extends" in data and "fragments" in data and "patches" not in data:
            # a config variant (tiny-6.1-deferred-page-init): its parent's fragments, then its own
            parent = [label for label, _ in kspec.resolve_spec(data["extends"]).fragments]
            assert labels[:len(parent)] == parent and len(labels) > len(parent), n
            assert not s.patches, n
        else:
            assert len(s.patches) == (0 if n in ("linux-6.1", "tiny-6.1") else 1), n


# -- cache key -------------------------------------------------------------------

def test_key_is_stable(layout):
    assert key("var", layout) == key("var", layout)
    assert key("base", layout) != key("var", layout)


def test_key_changes_with_each_input(layout):
    kd, rd, tarball = layout
    k0 = key("var", layout)
    patch = kd / "patches" / "s1" / "0001-a.patch"
    patch.write_text(patch.read_text().replace("+b", "+c"))
    k1 = key("var", layout)
    assert k1 != k0, "patch content"
    write(kd / "fragments" / "guest.config", "# guest\nCONFIG_XFS_FS=y\nCONFIG_9P_FS=m\n")
    k2 = key("var", layout)
    assert k2 != k1, "fragment value"
    write(rd / "r3" / "config", "CONFIG_NEW=y\n")
    k3 = key("var", layout)
    assert k3 != k2, "a new reproducer's config"
    write(kd / "var.toml", 'source = "linux-source"\nextends = "base"\npatches = ["s1"]\nlocalversion = "-x"\n')
    k4 = key("var", layout)
    assert k4 != k3, "local version"
    write(kd / "var.toml", 'source = "linux-source"\nextends = "base"\npatches = ["s1"]\nlocalversion = "-x"\n'
                           'base_config = ["x86_64_defconfig"]\n')
    k5 = key("var", layout)
    assert k5 != k4, "base config"
    tarball.write_bytes(b"another source")
    assert key("var", layout) != k5, "source tarball"


def test_key_ignores_comments_and_order_of_equal_settings(layout):
    kd, rd, _ = layout
    k0 = key("var", layout)
    write(kd / "fragments" / "guest.config", "CONFIG_9P_FS=y\n# reordered, commented\nCONFIG_XFS_FS=y\n")
    write(rd / "r2" / "config", "# still no options, other words\n")
    assert key("var", layout) == k0


def test_the_keys_of_kernels_already_built_stay_the_same(layout, monkeypatch):
    """The cache key is a kernel's address in $KRIG_CACHE/kernels/: a key that changes while its
    inputs do not sends every cached kernel to be built again. Pinned for a fixed compiler."""
    monkeypatch.setattr(kspec, "compiler_version", lambda: "gcc (Debian 12.2.0-14) 12.2.0")
    assert key("base", layout) == "06bfb08abf47125e"
    assert key("var", layout) == "29f82513a1c5b857"
    kd, rd, _ = layout
    spec = kspec.resolve_spec("var", kernel_dir=kd, repro_dir=rd)
    inputs = kspec.build_inputs(spec, {"kind": "git", "commit": "0" * 40})
    assert list(inputs) == ["recipe", "arch", "compiler", "source", "base_config", "config", "patches"]
    assert cache_key(inputs) == "17574f81d6a79d9b"
    assert cache_key({"image": "ab" * 32}) == "3ab9b06b2709b620"      # a given image's directory


def test_not_built_is_a_clear_error(layout):
    kd, rd, _ = layout
    with pytest.raises(kspec.KernelNotBuilt) as e:
        kspec.load_built_kernel("var", *read("var", kd), kd, rd)
    assert str(e.value).startswith("kernel var is not built; run `krig kernel build var`")


def test_built_kernel_loads(layout):
    kd, rd, _ = layout
    out = kspec.kernel_cache(key("var", layout))
    out.mkdir(parents=True)
    (out / "build.json").write_text('{"release": "6.1.192-krig-var"}')
    k = kspec.load_built_kernel("var", *read("var", kd), kd, rd)
    assert k.release == "6.1.192-krig-var" and k.image == out / "bzImage"
    assert k.modules_dir == out / "mod" / "lib" / "modules" / "6.1.192-krig-var"


def test_child_toml_without_source_is_a_built_kernel(layout, monkeypatch):
    """`extends` without `source`: the source comes from the parent (a child toml used to be
    taken for a distro kernel and refused with "unknown field 'extends'")."""
    import functools
    from kernels import catalog, named
    kd, rd, _ = layout
    write(kd / "child.toml", 'extends = "base"\npatches = ["s1"]\n')
    monkeypatch.setattr(named, "KERNEL_DIR", kd)
    monkeypatch.setattr(named, "load_built_kernel",
                        functools.partial(kspec.load_built_kernel, kernel_dir=kd, repro_dir=rd))
    with pytest.raises(kspec.KernelNotBuilt, match="kernel child is not built"):
        catalog.load_kernel("child")
    assert kspec.resolve_spec("child", kernel_dir=kd, repro_dir=rd).source == "linux-source"


# -- patches ------------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path):
    t = tmp_path / "tree"
    write(t / "fs" / "namei.c", "".join(f"line {i}\n" for i in range(1, 21)))
    return t


def mkpatch(tmp_path, old, new, path="fs/namei.c", name="0001-x.patch"):
    a, b = tmp_path / "pa" / path, tmp_path / "pb" / path
    write(a, old)
    write(b, new)
    d = subprocess.run(["diff", "-u", f"pa/{path}", f"pb/{path}"], cwd=tmp_path, capture_output=True, text=True).stdout
    d = d.replace(f"--- pa/{path}", f"--- a/{path}").replace(f"+++ pb/{path}", f"+++ b/{path}")
    return write(tmp_path / "series" / name, "Subject: test\n\nheader text\n---\n" + d)


def test_patch_applies_and_is_recorded(tmp_path, tree):
    orig = (tree / "fs/namei.c").read_text()
    p = mkpatch(tmp_path, orig, orig.replace("line 10\n", "line ten\n"))
    state = {}
    kt.apply_patch(tree, p, "kernels/patches/s/0001-x.patch", state)
    assert "line ten" in (tree / "fs/namei.c").read_text()
    assert state == {"modified": ["fs/namei.c"]}


def test_patch_that_does_not_apply_names_patch_file_and_hunk(tmp_path, tree):
    p = mkpatch(tmp_path, "".join(f"other {i}\n" for i in range(1, 21)), "changed\n")
    with pytest.raises(UsageError) as e:
        kt.apply_patch(tree, p, "kernels/patches/s/0001-x.patch", {})
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("kernels/patches/s/0001-x.patch does not apply: fs/namei.c: hunk #1 FAILED")
    assert (tree / "fs/namei.c").read_text().startswith("line 1\n"), "a failed patch leaves the tree alone"


def test_patch_on_missing_file(tmp_path, tree):
    p = mkpatch(tmp_path, "a\n", "b\n", path="fs/nope.c")
    with pytest.raises(UsageError) as e:
        kt.apply_patch(tree, p, "kernels/patches/s/0001-x.patch", {})
    assert "fs/nope.c: no such file in the source" in str(e.value)


def test_patch_already_applied(tmp_path, tree):
    orig = (tree / "fs/namei.c").read_text()
    p = mkpatch(tmp_path, orig, orig.replace("line 3\n", ""))
    kt.apply_patch(tree, p, "P", {})
    with pytest.raises(UsageError) as e:
        kt.apply_patch(tree, p, "P", {})
    assert "fs/namei.c: already applied" in str(e.value)


def test_restore_from_pristine_gives_fresh_mtime(tmp_path, tree):
    pristine = tmp_path / "pristine"
    subprocess.run(["cp", "-a", str(tree), str(pristine)], check=True)
    orig = (tree / "fs/namei.c").read_text()
    old_mtime = (pristine / "fs/namei.c").stat().st_mtime
    p = mkpatch(tmp_path, orig, orig.replace("line 5\n", "five\n"))
    state = {"pristine": str(pristine)}
    kt.apply_patch(tree, p, "P", state)
    kt.restore(tree, state)
    assert (tree / "fs/namei.c").read_text() == orig
    assert (tree / "fs/namei.c").stat().st_mtime > old_mtime, "make must see the restored file as new"
    assert state["applied"] == [] and state["modified"] == []


def test_rebase_paths_rewrites_text_keeps_mtime(tmp_path):
    old, new = tmp_path / "trees" / "src-1", tmp_path / "trees" / "git-2"
    cmd = write(new / "tools/objtool/.check.o.cmd", f"cmd := gcc -I{old}/tools/include -o {old}/tools/objtool/check.o\n")
    obj = new / "tools/objtool/check.o"
    obj.write_bytes(b"\0ELF" + str(old).encode())
    os.utime(cmd, (1000, 1000))
    assert kt_trees.rebase_paths(new, old, new) == 1
    assert cmd.read_text() == f"cmd := gcc -I{new}/tools/include -o {new}/tools/objtool/check.o\n"
    assert cmd.stat().st_mtime == 1000
    assert str(old).encode() in obj.read_bytes(), "binary objects are left alone"


def test_real_patch_series_headers_and_targets():
    for series, target in (("revert-cil-flush-limit", "fs/xfs/xfs_log_priv.h"),
                           ("rmdir-keeps-children", "fs/namei.c"), ("negative-dentry-cap", "fs/dcache.c")):
        [p] = sorted((KERNEL_DIR / "patches" / series).glob("*.patch"))
        text = p.read_text()
        assert text.startswith("Subject: ") and "Why:" in text and "Where from:" in text
        assert patching.patch_targets(p) == [target]


@pytest.mark.kbuild
def test_real_patches_apply_to_6_1(linux_source):
    for p in sorted((KERNEL_DIR / "patches").glob("*/*.patch")):
        r = subprocess.run(["patch", "--dry-run", "-p1", "--batch", "-d", str(linux_source), "-i", str(p)],
                           capture_output=True, text=True)
        assert r.returncode == 0, patching.patch_error(p.name, r.stdout)


# -- git build tree -------------------------------------------------------------

def test_git_tree_moves_between_commits_and_unpatches(tmp_path, layout, monkeypatch):
    kd, rd, _ = layout
    decoy = tmp_path / "decoy.git"
    subprocess.run(["git", "init", "-q", "--bare", str(decoy)], check=True)
    monkeypatch.setenv("GIT_DIR", str(decoy))     # what `git bisect run` exports to the oracle
    repo = tmp_path / "repo"
    write(repo / "f.c", "a\n")
    env = {k: v for k, v in os.environ.items() if k != "GIT_DIR"}
    g = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True,  # noqa: E731
                                  text=True, env={**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                                  "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout
    g("init", "-q")
    g("add", "f.c")
    g("commit", "-qm", "one")
    write(repo / "g.c", "g\n")
    g("add", "g.c")
    g("commit", "-qm", "two")
    write(kd / "gitk.toml", f'source = "git"\ntree = "{repo}"\nref = "HEAD~1"\npatches = ["s1"]\n')
    spec = kspec.resolve_spec("gitk", kernel_dir=kd, repro_dir=rd)
    ident = kspec.source_identity(spec)
    tree_id, origin = kt.origin_of(spec, ident)
    t = tmp_path / "cache" / "kbuild" / "trees" / tree_id
    t.parent.mkdir(parents=True)
    state = kt.create_tree(t, origin, log=lambda m: None)
    kt.sync_source(t, spec, ident, state, log=lambda m: None)
    assert (t / "f.c").read_text() == "b\n" and not (t / "g.c").exists()
    write(kd / "gitk.toml", f'source = "git"\ntree = "{repo}"\nref = "HEAD"\n')
    spec = kspec.resolve_spec("gitk", kernel_dir=kd, repro_dir=rd)
    ident2 = kspec.source_identity(spec)
    assert ident2 != ident
    kt.sync_source(t, spec, ident2, state, log=lambda m: None)
    assert (t / "f.c").read_text() == "a\n" and (t / "g.c").exists()
    read = kt_trees.source_files(spec)  # the source a series is tried on: the commit's, not GIT_DIR's
    assert read("g.c") == b"g\n" and read("f.c") == b"a\n" and read("none.c") is None
    assert g("status", "--porcelain") == "", "the user's repository is not touched"
    assert not list((decoy / "refs" / "heads").iterdir()), "GIT_DIR from the environment is ignored"


def test_build_that_waited_for_the_same_kernel_does_not_rebuild(layout, monkeypatch):
    """Two `krig kernel build` of one kernel at once: the one that waited for the build tree's lock
    finds what the other published and builds nothing (the kernel's own lock)."""
    import threading
    kd, rd, _ = layout
    spec = kspec.resolve_spec("var", kernel_dir=kd, repro_dir=rd)
    lock = kt.kernel_lock(key("var", layout))
    made = []
    monkeypatch.setattr(kt, "create_tree", lambda *a, **k: made.append("tree") or {})
    monkeypatch.setattr(kt, "make_kernel", lambda *a, **k: made.append("make"))
    waiting, result = threading.Event(), {}

    def log(msg):
        if "waiting for" in msg:
            waiting.set()

    with kt.locked(lock):                       # the other build holds the tree
        t = threading.Thread(target=lambda: result.update(meta=kt.build_kernel(spec, log=log)), daemon=True)
        t.start()
        assert waiting.wait(60), "the second build did not wait for the lock"
        out = kspec.kernel_cache(key("var", layout))
        out.mkdir(parents=True)
        (out / "build.json").write_text('{"release": "6.1.192-krig-var"}')   # ... and publishes it
    t.join(60)
    assert not t.is_alive() and made == []
    assert result["meta"]["release"] == "6.1.192-krig-var" and result["meta"]["dir"] == str(out)


def test_a_tainted_tree_seeds_no_other(tmp_path, cache):
    """A new git tree is copied from the most recent built tree of its family, but never from one
    a series was built in place in: it starts empty instead."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    trees = kspec.cache_dir("kbuild", "trees")
    for name, tainted in (("src-old", None), ("src-poisoned", "mail.mbox")):
        write(trees / name / "fs" / "f.c", f"{name}\n")
        kt.save_state(trees / name, {"built": True, "last_used": 2 if tainted else 1,
                                     **({"tainted": tainted} if tainted else {})})
    assert kt_trees._seed_candidates(trees / "git-new", DEFAULT_BASE_CONFIG) == [trees / "src-old"]
    kt.save_state(trees / "src-old", {"built": True, "last_used": 1, "tainted": "other.mbox"})
    state = kt.create_tree(trees / "git-new", {"kind": "git", "repo": str(repo)}, log=lambda m: None)
    assert state["seeded_from"] is None and not (trees / "git-new" / "fs").exists()


def test_a_seed_tree_in_use_is_waited_for_and_one_removed_meanwhile_gives_way_to_the_next(tmp_path, cache):
    """A new git tree is seeded from the most recent built tree even while another build holds
    that tree (it waits for its lock, saying what the holder does, then copies); when the tree it
    waited for is gone by then (removed, as kt_trees.remove_tree does, under that lock), it seeds
    from the next one, never from nothing."""
    import threading
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    trees = kspec.cache_dir("kbuild", "trees")
    for name, used in (("src-old", 1), ("src-busy", 2)):
        write(trees / name / "fs" / "f.c", f"{name}\n")
        kt.save_state(trees / name, {"built": True, "last_used": used})
    for new, remove in (("git-new", False), ("git-other", True)):
        waiting, out, said = threading.Event(), {}, []

        def log(msg):
            if "waiting for build tree src-busy (to copy it)" in msg:
                said.append(msg)
                waiting.set()
        with kt.locked(kt.tree_lock(trees / "src-busy"), doing="building kernel busy"):    # another build in it
            t = threading.Thread(target=lambda: out.update(state=kt.create_tree(
                trees / new, {"kind": "git", "repo": str(repo)}, log=log)), daemon=True)
            t.start()
            assert waiting.wait(60), "the new tree did not wait for the busy one"
            assert not (trees / new).exists()
            assert said[0].startswith("kbuild: waiting for build tree src-busy (to copy it): "
                                      f"pid {os.getpid()} building kernel busy since "), said
            if remove:
                (trees / "src-busy.json").unlink()
                shutil.rmtree(trees / "src-busy")
        t.join(60)
        assert not t.is_alive()
        seed = "src-old" if remove else "src-busy"
        assert out["state"]["seeded_from"] == str(trees / seed) and out["state"]["adopt"], out
        assert (trees / new / "fs" / "f.c").read_text() == f"{seed}\n"


def test_a_git_tree_whose_repository_is_gone_is_pruned_when_a_new_tree_is_made(tmp_path, cache):
    """A git origin's tree borrows its repository's objects: once the repository is gone no
    build can use it, so making a new tree removes it (after the new one is seeded from it).
    A tree whose repository is still there, a linux-source tree, the tree being made and a tree
    another build holds all stay."""
    trees = kspec.cache_dir("kbuild", "trees")
    live, gone = tmp_path / "live.git", tmp_path / "gone.git"
    for repo in (live, gone):
        subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    for name, origin in (("git-live", {"kind": "git", "repo": str(live)}),
                         ("git-gone", {"kind": "git", "repo": str(gone)}),
                         ("git-held", {"kind": "git", "repo": str(tmp_path / "held.git")}),
                         ("src-old", {"kind": "linux-source", "tarball": str(tmp_path / "gone.tar.xz")})):
        write(trees / name / "fs" / "f.c", f"{name}\n")
        kt.save_state(trees / name, {"origin": origin, "built": True, "last_used": 3 if name == "git-gone" else 1})
    shutil.rmtree(gone)
    removed, said = [], []
    with kt.locked(kt.tree_lock(trees / "git-held")):                     # another build in it
        state = kt.create_tree(trees / "git-new", {"kind": "git", "repo": str(live)}, log=said.append)
        kt.save_state(trees / "git-new", state)
        removed = kt_trees.prune_orphans(trees / "git-new", log=said.append)
    assert state["seeded_from"] == str(trees / "git-gone")                # the orphan seeded the new tree first
    assert removed == [trees / "git-gone"], said
    assert not (trees / "git-gone").exists() and not (trees / "git-gone.json").exists()
    assert [m for m in said if "git-gone" in m and str(gone) in m and "is gone" in m], said
    for name in ("git-live", "git-held", "src-old", "git-new"):
        assert (trees / name / "fs" / "f.c").exists(), name
    assert kt_trees.prune_orphans(trees / "git-new", log=said.append) == [trees / "git-held"]   # free now
