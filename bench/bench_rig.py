"""Rig benchmarks on a real guest, each against the obvious alternative in the same run.

1. Rig overhead: boot the default kernel, run `true`, power off -- krig's QEMU
   rig vs virtme-ng (`vng --run <same kernel> --disable-kvm -- true`).
   Target: krig's time at most half of virtme-ng's.
2. Flood generator: negflood's lookup rate per process vs a bare C
   snprintf+stat() loop, in the same guest on XFS. Target: >= 90%.
Prints figures; a missed target is reported, not asserted.
"""
import argparse
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.catalog import load_kernel  # noqa: E402
from rigs import load_rig  # noqa: E402


def time_krig(kernel, repeats):
    out = []
    for _ in range(repeats):
        rig = load_rig("qemu-default")
        rig.spec["accel"] = "tcg"       # same accelerator as vng --disable-kvm
        with tempfile.TemporaryDirectory() as td, rig:
            t0 = time.monotonic()
            rig.prepare(pathlib.Path(td), kernel, {})
            rig.boot.boot(kernel, [])
            assert rig.command.run(["true"], timeout=60).returncode == 0
            rig.shutdown()
            out.append(time.monotonic() - t0)
    return out


def ensure_vng() -> str | None:
    vng = shutil.which("vng") or str(pathlib.Path(sys.executable).parent / "vng")
    if not os.path.exists(vng):
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "virtme-ng"], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"virtme-ng could not be installed: {p.stderr.strip()[-200:]}")
            return None
    return vng


def time_vng(vng, kernel, repeats):
    out = []
    for _ in range(repeats):
        t0 = time.monotonic()
        env = {**os.environ, "PATH": f"{pathlib.Path(vng).parent}:{os.environ['PATH']}"}
        p = subprocess.run([vng, "--run", str(kernel.image), "--disable-kvm", "--", "true"], env=env,
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        took = time.monotonic() - t0
        if p.returncode != 0:
            print(f"vng failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()[-300:]}")
            return None
        out.append(took)
    return out


def bench_flood(kernel, seconds):
    subprocess.run(["make", "-s", "helpers"], cwd=ROOT, check=True)
    stat_loop = ROOT / "bench" / "bin" / "stat-loop"
    stat_loop.parent.mkdir(exist_ok=True)
    subprocess.run(["cc", "-O2", "-static", "-o", str(stat_loop), str(ROOT / "bench" / "stat-loop.c")], check=True)
    negflood = ROOT / "reproducers" / "neg-dentry-flood" / "bin" / "negflood"
    rig = load_rig("qemu-default")
    with tempfile.TemporaryDirectory() as td, rig:
        rig.prepare(pathlib.Path(td), kernel, {"scratch_size": 1 << 30})
        rig.boot.boot(kernel, [])
        script = (f'set -e; d=/dev/$(basename /sys/class/nvme/nvme0/nvme0n1); mkfs.xfs -q -f $d; '
                  f'mkdir -p /run/b; mount $d /run/b; mkdir /run/b/a /run/b/b; '
                  f'{stat_loop} /run/b/a {seconds}; {negflood} -d /run/b/b -m lookup -t {seconds}; '
                  f'{stat_loop} /run/b/a {seconds}; {negflood} -d /run/b/b -m lookup -t {seconds} -p again-')
        r = rig.command.run(["bash", "-c", script], timeout=seconds * 10 + 120)
        rig.shutdown()
    rates = [float(x) for x in re.findall(r"rate=(\d+)", r.stdout.decode())]
    if len(rates) != 4:
        print(f"flood benchmark failed: {r.stdout.decode()} {r.stderr.decode()}")
        return None
    bare, gen = statistics.mean(rates[0::2]), statistics.mean(rates[1::2])
    return bare, gen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flood-seconds", type=int, default=10)
    a = ap.parse_args()
    kernel = load_kernel("distro")
    print(f"== rig overhead: boot {kernel.release} under TCG, run `true`, power off ({a.repeats} runs each)")
    k = time_krig(kernel, a.repeats)
    print(f"krig qemu rig : {' '.join(f'{x:.1f}' for x in k)} s   median {statistics.median(k):.1f} s")
    vng = ensure_vng()
    v = time_vng(vng, kernel, a.repeats) if vng else None
    if v:
        ratio = statistics.median(k) / statistics.median(v)
        print(f"virtme-ng     : {' '.join(f'{x:.1f}' for x in v)} s   median {statistics.median(v):.1f} s")
        print(f"krig/virtme-ng: {ratio:.2f}  (target <= 0.50: {'met' if ratio <= 0.5 else 'NOT met'})")
    print(f"\n== flood generator vs bare C snprintf+stat loop, one process, XFS, {a.flood_seconds} s each, twice")
    f = bench_flood(kernel, a.flood_seconds)
    if f:
        bare, gen = f
        print(f"bare stat loop: {bare:,.0f} lookups/s")
        print(f"negflood      : {gen:,.0f} lookups/s")
        print(f"negflood/bare : {gen / bare:.2f}  (target >= 0.90: {'met' if gen / bare >= 0.9 else 'NOT met'})")


if __name__ == "__main__":
    main()
