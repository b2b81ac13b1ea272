"""krig's vocabulary, the ground floor: errors, config, the safe reader, the run record, the
verdict rule, the reproducer schema, the results layout."""
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

# The layout: this package is krig's vocabulary (the ground floor: errors, config, the safe
# reader, the run record and run directory, the verdict rule, the reproducer schema, the results
# layout), which imports only itself; the parts (rigs/, kernels/, analysis/) stand on it and the
# workflows (workflows/: the commands) on top. tests/project/test_layout.py checks every import.
