"""krig: kernel reproducer rig."""
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPRO_DIR = ROOT / "reproducers"
RIG_DIR = ROOT / "rigs"
KERNEL_DIR = ROOT / "kernels"
RESULTS_DIR = pathlib.Path(os.environ.get("KRIG_RESULTS") or ROOT / "results")
