"""krig: kernel reproducer rig."""
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPRO_DIR = ROOT / "reproducers"
RIG_DIR = ROOT / "rigs"
KERNEL_DIR = ROOT / "kernels"
RESULTS_DIR = pathlib.Path(os.environ.get("KRIG_RESULTS") or ROOT / "results")
# What a run uses when it is not told: the local QEMU rig, booting Debian's packaged kernel.
DEFAULT_RIG = "qemu-default"
DEFAULT_KERNEL = "distro"

# The layout: these modules are krig's vocabulary, which every part (the runner, rigs, kernels,
# analysis) may import and which imports only itself; every other krig module is the runner.
# tests/test_layout.py checks every import against this declaration.
VOCABULARY = ("krig", "krig.errors", "krig.config", "krig.paths", "krig.results", "krig.rundir",
              "krig.reproducer", "krig.verdict", "krig.junit", "krig.safeio", "krig.asked", "krig.record",
              "krig.version", "krig.tarbound", "krig.hashsize")
