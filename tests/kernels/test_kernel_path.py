"""`krig run --kernel PATH`: a built kernel tree and an image file, booted and judged.

The tree is laid out as `make bzImage` leaves one (arch/x86/boot/bzImage, .config,
System.map, include/config/kernel.release) from the tiny-6.1 kernel `make test`
builds, without its one module (a tree that built none: krig indexes its modules.builtin);
the image file is its bzImage with ,config=FILE and ,modules=DIR. A tree
missing an option of the reproducer is refused before booting (tests/workflows/test_validate.py).

Covers: kernels/prebuilt.py."""
import json
import pathlib
import shutil

import pytest

from conftest import build_kernels, krig_run, qemu_pids, run_dir_of
from kernels.build import status


@pytest.mark.guest
@pytest.mark.kbuild
def test_kernel_tree_and_image_file_boot_and_judge(tmp_path):
    build_kernels("tiny-6.1")
    st = status("tiny-6.1")
    built = pathlib.Path(st["dir"])
    tree = tmp_path / "linux"
    (tree / "arch/x86/boot").mkdir(parents=True)
    (tree / "include/config").mkdir(parents=True)
    shutil.copyfile(built / "bzImage", tree / "arch/x86/boot/bzImage")
    shutil.copyfile(built / "config", tree / ".config")
    shutil.copyfile(built / "System.map", tree / "System.map")
    (tree / "include/config/kernel.release").write_text(st["release"] + "\n")
    mods = built / "mod" / "lib" / "modules" / st["release"]
    for f in ("modules.builtin", "modules.builtin.modinfo"):     # as `make` leaves them
        shutil.copyfile(mods / f, tree / f)
    (tree / "modules.order").write_text("")      # no module built (tiny-6.1's one thermal module left out)
    img = tmp_path / "images" / "bzImage-test"
    img.parent.mkdir()
    shutil.copyfile(built / "bzImage", img)
    for arg in (str(tree), f"{img},config={built / 'config'},modules={mods}"):
        p = krig_run(tmp_path, "selftest-pass", "--kernel", arg)
        assert p.returncode == 0, p.stdout + p.stderr
        man = json.loads((run_dir_of(p) / "manifest.json").read_text())
        assert man["kernel"]["arg"] == arg and man["machine"]["release"] == st["release"]
        assert man["kernel"]["debug_options"]["CONFIG_XFS_DEBUG"] == "n"
        assert man["machine"]["cpu"]["model"] and man["host_cpu"]["model"]
    assert not qemu_pids(str(tmp_path))
