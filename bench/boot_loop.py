"""Boot a kernel many times on the QEMU rig and count boot crashes (the TCG boot flake).

Each boot: the rig's own boot (initramfs, QEMU argv, wait for the agent), then
an orderly power-off. A boot counts as crashed when the guest died before the
agent answered or its console shows a panic/oops/BUG (krig.verdict.first_crash).

    python bench/boot_loop.py --kernel distro --boots 10 --tcg-thread multi
    python bench/boot_loop.py --image /path/vmlinuz --modules /path/lib/modules/<rel> --boots 10

Prints one line per boot and a summary; --json FILE appends the summary.
Wrap it in `flock /tmp/krig-vm.lock` on a shared machine.
"""
import argparse
import json
import pathlib
import re
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.catalog import load_kernel  # noqa: E402
from kernels.kernel import Kernel  # noqa: E402
from krig.errors import GuestCrashed, GuestHung, RigError  # noqa: E402
from krig.verdict import first_crash  # noqa: E402
from rigs import load_rig  # noqa: E402


def extra_kernel(image: pathlib.Path, modules: pathlib.Path) -> Kernel:
    """A Kernel record for an unpacked package (dpkg-deb -x), not installed system-wide."""
    release = re.sub(r"^vmlinuz-", "", image.name)
    return Kernel(name=f"extra-{release}", release=release, image=image, modules_dir=modules,
                  config=image.with_name(f"config-{release}"), cmdline=[])


def boot_once(kernel, tcg_thread: str, cmdline: list, timeout: float, keep: pathlib.Path | None = None,
              kernel_entry: str = "auto") -> dict:
    rig = load_rig("qemu-default")
    rig.respec(accel="tcg", tcg_thread=tcg_thread, kernel_entry=kernel_entry)
    with tempfile.TemporaryDirectory(prefix="krig-bootloop-") as td, rig:
        t0 = time.monotonic()
        outcome, detail = "ok", ""
        try:
            rig.prepare(pathlib.Path(td), kernel, {})
            rig.boot.boot(kernel, cmdline, timeout)
            rig.shutdown()
        except GuestCrashed as e:
            outcome, detail = "crashed", str(e)
        except GuestHung as e:
            outcome, detail = "hung", str(e)
        except RigError as e:
            outcome, detail = "error", str(e)
        console = rig.console.text()
        crash = first_crash(console)
        if crash:
            outcome, detail = "crashed", crash
        if keep and outcome != "ok":
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"console-{time.strftime('%H%M%S')}-{outcome}.log").write_text(console)
        return {"outcome": outcome, "detail": detail, "seconds": round(time.monotonic() - t0, 1),
                "boot_seconds": rig.facts().get("boot_seconds"), "entry": rig.facts().get("kernel_entry")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", help="a kernels/<name>.toml")
    ap.add_argument("--image", type=pathlib.Path, help="a vmlinuz outside /boot (with --modules)")
    ap.add_argument("--modules", type=pathlib.Path, help="its lib/modules/<release> directory")
    ap.add_argument("--boots", type=int, default=10)
    ap.add_argument("--tcg-thread", choices=("single", "multi"), default="multi")
    ap.add_argument("--append", action="append", default=[], help="extra kernel command-line argument")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--kernel-entry", default="auto",
                    help="auto (PVH when the kernel has it), bzimage, or both (alternating)")
    ap.add_argument("--json", type=pathlib.Path, help="append the summary as one JSON line")
    ap.add_argument("--keep", type=pathlib.Path, help="directory for the consoles of boots that failed")
    a = ap.parse_args(argv)
    if not 1 <= a.boots <= 100:
        ap.error("--boots: 1 to 100")
    kernel = extra_kernel(a.image, a.modules) if a.image else load_kernel(a.kernel or "distro")
    results = []
    for i in range(a.boots):
        entry = a.kernel_entry if a.kernel_entry != "both" else ("auto", "bzimage")[i % 2]
        r = boot_once(kernel, a.tcg_thread, a.append, a.timeout, a.keep, entry)
        results.append(r)
        print(f"boot {i + 1}/{a.boots} [{r['entry']}]: {r['outcome']} {r['seconds']}s (agent after {r['boot_seconds']}s) "
              f"{r['detail'][:160]}", flush=True)
    summary = {"kernel": kernel.release, "tcg_thread": a.tcg_thread, "append": a.append, "boots": len(results),
               **{k: sum(r["outcome"] == k for r in results) for k in ("ok", "crashed", "hung", "error")},
               "boot_seconds": [r["boot_seconds"] for r in results],
               "crashes": [r["detail"] for r in results if r["outcome"] != "ok"]}
    print(json.dumps({k: v for k, v in summary.items() if k != "boot_seconds"}))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
