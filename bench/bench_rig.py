"""Rig benchmarks on a real guest, each against the obvious alternative in the same run.

1. Rig overhead: boot the default kernel, run `true`, power off -- krig's QEMU
   rig vs virtme-ng (`vng --run <same kernel> --disable-kvm -- true`), in pairs
   (the order flipped every pair). Target: the median of the pairwise ratios
   krig/virtme-ng at most 0.4. krig's time is broken down from the console
   (firmware + kernel loading, kernel init, initramfs modules, 9p mounts + agent,
   the command, power-off).
2. Flood generator: negflood's lookup rate per process vs a bare C
   snprintf+stat() loop, in the same guest on XFS, in pairs (order alternating, each
   run in a fresh directory after dropping the dcache). Target: the median of the
   pairwise ratios >= 0.9.
Prints figures; a missed target is reported, not asserted.
"""
import argparse
import os
import threading
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
from rigs.qemu.rig import GUEST_SHARE  # noqa: E402


MARKS = {"kernel": "Linux version", "init": "Run /init as init process",
         "modules": "krig-init: modules loaded", "agent": "krig-agent: ready"}
KTS = re.compile(r"^\[\s*(\d+\.\d+)\]")


def watch_console(path: pathlib.Path, stamps: dict, stop: threading.Event):
    """Host time (CLOCK_MONOTONIC) at which each marker line first shows on the console,
    and the kernel's own time stamp of the `Run /init` line."""
    seen = ""
    while not stop.is_set():
        try:
            seen = path.read_text(errors="replace")
        except OSError:
            pass
        now = time.monotonic()
        for k, text in MARKS.items():
            if k not in stamps and text in seen:
                stamps[k] = now
                if k == "init":
                    line = next(ln for ln in seen.splitlines() if text in ln)
                    m = KTS.match(line.strip())
                    stamps["init_kts"] = float(m.group(1)) if m else None
        time.sleep(0.02)


def time_krig_once(kernel) -> dict:
    """One boot + `true` + power-off, with the phases."""
    rig = load_rig("qemu-default")
    rig.respec(accel="tcg")         # same accelerator as vng --disable-kvm
    stamps, stop = {}, threading.Event()
    with tempfile.TemporaryDirectory() as td, rig:
        t0 = time.monotonic()
        rig.prepare(pathlib.Path(td), kernel, {})
        w = threading.Thread(target=watch_console, args=(rig.console.log_path, stamps, stop), daemon=True)
        w.start()
        rig.boot.boot(kernel, [])
        t_up = time.monotonic()
        t_qemu = t_up - rig.facts()["boot_seconds"]  # boot_seconds counts from QEMU's start
        assert rig.command.run(["true"], timeout=60).returncode == 0
        t_cmd = time.monotonic()
        rig.shutdown()
        t_end = time.monotonic()
        stop.set()
        w.join()
    # The rig boots with loglevel=6, so the kernel's own `Run /init` (KERN_INFO) is not on
    # the console: without it, the kernel's first line splits firmware from the kernel.
    kstart = stamps["init"] - stamps["init_kts"] if stamps.get("init_kts") is not None else None
    ph = {"total": t_end - t0, "setup (work dir, initramfs, argv)": t_qemu - t0}
    if kstart is not None:
        ph["firmware + kernel loading"] = kstart - t_qemu
        ph["kernel init (to /init)"] = stamps["init_kts"]
    elif "kernel" in stamps:
        ph["firmware + kernel loading (to its first line)"] = stamps["kernel"] - t_qemu
    if "modules" in stamps:
        after = stamps.get("init", stamps.get("kernel", t_qemu))
        ph["initramfs modules" if "init" in stamps else "kernel init + initramfs modules"] = \
            stamps["modules"] - after
        ph["9p mounts + agent start"] = stamps.get("agent", t_up) - stamps["modules"]
    ph["host sees the agent"] = t_up - stamps.get("agent", t_up)
    ph["command `true`"] = t_cmd - t_up
    ph["power-off"] = t_end - t_cmd
    return ph


def ensure_vng() -> str | None:
    vng = shutil.which("vng") or str(pathlib.Path(sys.executable).parent / "vng")
    if not os.path.exists(vng):
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "virtme-ng"], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"virtme-ng could not be installed: {p.stderr.strip()[-200:]}")
            return None
    return vng


def time_vng_once(vng, kernel) -> float | None:
    t0 = time.monotonic()
    env = {**os.environ, "PATH": f"{pathlib.Path(vng).parent}:{os.environ['PATH']}"}
    p = subprocess.run([vng, "--run", str(kernel.image), "--disable-kvm", "--", "true"], env=env,
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    if p.returncode != 0:
        print(f"vng failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()[-300:]}")
        return None
    return took


def rig_overhead(kernel, pairs):
    """Pairs of (krig, vng), alternating which goes first; prints each pair and the phases."""
    vng = ensure_vng()
    load = os.getloadavg()
    print(f"== rig overhead: boot {kernel.release} under TCG, run `true`, power off ({pairs} pairs); "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cpus)", flush=True)
    ks, vs, phases = [], [], []
    for i in range(pairs):
        for side in (("krig", "vng") if i % 2 == 0 else ("vng", "krig")):
            if side == "krig":
                ph = time_krig_once(kernel)
                phases.append(ph)
                ks.append(ph["total"])
            elif vng:
                v = time_vng_once(vng, kernel)
                if v is None:
                    vng = None
                else:
                    vs.append(v)
        print(f"pair {i + 1}: krig {ks[-1]:.1f} s" + (f", virtme-ng {vs[-1]:.1f} s, ratio "
                                                    f"{ks[-1] / vs[-1]:.2f}" if vng and vs else ""),
              flush=True)
    print("krig's time, median of each phase:")
    for k in phases[0]:
        vals = [p[k] for p in phases if k in p]
        print(f"  {k:<36} {statistics.median(vals):6.2f} s")
    if vng and len(vs) == len(ks):
        ratios = [k / v for k, v in zip(ks, vs)]
        med = statistics.median(ratios)
        load = os.getloadavg()
        print(f"krig/virtme-ng pairwise: {' '.join(f'{r:.2f}' for r in ratios)}; median {med:.2f} "
              f"(target <= 0.40: {'met' if med <= 0.4 else 'NOT met'}); krig median "
              f"{statistics.median(ks):.1f} s, virtme-ng median {statistics.median(vs):.1f} s; "
              f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def bench_flood(kernel, seconds, rounds):
    subprocess.run(["make", "-s", "helpers"], cwd=ROOT, check=True)
    stat_loop_bin = ROOT / "bench" / "bin" / "stat-loop"
    stat_loop_bin.parent.mkdir(exist_ok=True)
    subprocess.run(["cc", "-O2", "-static", "-o", str(stat_loop_bin), str(ROOT / "bench" / "stat-loop.c")],
                   check=True)
    rig = load_rig("qemu-default")
    with tempfile.TemporaryDirectory() as td, rig:
        rig.prepare(pathlib.Path(td), kernel, {"scratch_size": 1 << 30})
        rig.boot.boot(kernel, [])
        root = rig.files.stage(ROOT)    # only reproducers/ of the krig tree is shared with the guest:
        shutil.copy(stat_loop_bin, rig.share / "stat-loop")    # the bare loop goes in the run's share
        stat_loop = f"{GUEST_SHARE}/stat-loop"
        negflood = f"{root}/reproducers/neg-dentry-flood/bin/negflood"
        # Each run gets a fresh directory and a dcache emptied of the previous runs'
        # negatives (drop_caches 2), and the order alternates (bare first, then negflood
        # first, ...), so neither side always runs on the fuller dcache.
        fresh = "sync; echo 2 > /proc/sys/vm/drop_caches"
        runs = []
        for r in range(rounds):
            pair = [f"{fresh}; mkdir /run/b/bare{r}; {stat_loop} /run/b/bare{r} {seconds}",
                    f"{fresh}; mkdir /run/b/neg{r}; {negflood} -d /run/b/neg{r} -m lookup -t {seconds}"]
            runs += pair if r % 2 == 0 else pair[::-1]
        script = ("set -e; d=/dev/$(basename /sys/class/nvme/nvme0/nvme0n1); mkfs.xfs -q -f $d; "
                  "mkdir -p /run/b; mount $d /run/b; " + "; ".join(runs))
        r = rig.command.run(["bash", "-c", script], timeout=rounds * (seconds * 10 + 60) + 120)
        rig.shutdown()
    rates = [float(x) for x in re.findall(r"rate=(\d+)", r.stdout.decode())]
    if len(rates) != 2 * rounds:
        print(f"flood benchmark failed: {r.stdout.decode()} {r.stderr.decode()}")
        return None
    pairs = [(rates[2 * i], rates[2 * i + 1]) if i % 2 == 0 else (rates[2 * i + 1], rates[2 * i])
             for i in range(rounds)]  # (bare, negflood) of each round
    return pairs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flood-seconds", type=int, default=10)
    ap.add_argument("--flood-rounds", type=int, default=4, help="pairs of runs, order alternating")
    ap.add_argument("--kernel", default="distro", help="kernel for both benchmarks (vng boots its image)")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-flood", action="store_true")
    a = ap.parse_args()
    kernel = load_kernel(a.kernel)
    if not a.skip_overhead:
        rig_overhead(kernel, a.repeats)
    if a.skip_flood:
        return
    print(f"\n== flood generator vs bare C snprintf+stat loop, one process, XFS, {a.flood_seconds} s each, "
          f"{a.flood_rounds} pairs")
    pairs = bench_flood(kernel, a.flood_seconds, a.flood_rounds)
    if pairs:
        for i, (bare, gen) in enumerate(pairs):
            print(f"round {i + 1} ({'bare first' if i % 2 == 0 else 'negflood first'}): bare stat loop "
                  f"{bare:,.0f} lookups/s, negflood {gen:,.0f} lookups/s, ratio {gen / bare:.2f}")
        med = statistics.median(g / b for b, g in pairs)
        print(f"negflood/bare : median of {len(pairs)} pairwise ratios {med:.2f}  "
              f"(target >= 0.90: {'met' if med >= 0.9 else 'NOT met'})")

if __name__ == "__main__":
    main()
