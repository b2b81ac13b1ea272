"""Bundling a run and rerunning it elsewhere with reproduce.sh (tests/workflows/test_bundle.py, test_smoke.py)."""
import json
import os
import pathlib
import subprocess
import tarfile

from conftest import KRIG, ROOT


def unpack(tarball: pathlib.Path, where: pathlib.Path) -> pathlib.Path:
    where.mkdir()
    with tarfile.open(tarball) as t:
        t.extractall(where, filter="data")
    (top,) = list(where.iterdir())
    return top


def bundle_and_rerun(run_dir: pathlib.Path, tmp_path: pathlib.Path, timeout=1500, rig_file=None):
    """krig bundle RUN_DIR -o x.tar.gz, unpacked in an empty directory, reproduce.sh run there
    (on rig_file, found through KRIG_RIG_PATH, if given; else on reproduce.sh's default rig).
    Returns (unpacked bundle, the bundle command, reproduce.sh's CompletedProcess)."""
    out = tmp_path / "bundle.tar.gz"
    b = subprocess.run(KRIG + ["bundle", str(run_dir), "-o", str(out)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert b.returncode == 0, b.stdout + b.stderr
    top = unpack(out, tmp_path / "elsewhere")
    env = {k: v for k, v in os.environ.items() if k != "KRIG_RESULTS"}
    env["KRIG"] = str(ROOT)
    argv = ["./reproduce.sh"]
    if rig_file is not None:
        env["KRIG_RIG_PATH"] = str(rig_file.parent)
        argv += ["--rig", rig_file.stem]
    p = subprocess.run(argv, cwd=top, capture_output=True, text=True, timeout=timeout, env=env)
    return top, b, p


def check_rerun(top: pathlib.Path, p, verdict: str, rig: str = "qemu-default"):
    assert f"bundled: {verdict}" in p.stdout and f"rerun:   {verdict} (rig {rig})" in p.stdout, \
        p.stdout + p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    reruns = list((top / "rerun").glob(f"*/*/{rig}/*/verdict.json"))
    assert len(reruns) == 1 and json.loads(reruns[0].read_text())["verdict"] == verdict
