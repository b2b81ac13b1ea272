"""Where the cost of collection goes: one guest, the xfs-ail-storm create (krig-mktree,
N writers, fresh XFS with the smoke's 2038m log each time) under several ways of
collecting, alternating, so every mode sees the same guest and the same host load.

    python bench/collect_breakdown.py [--kernel tiny-6.1] [--files 250000] [--rounds 2]
                                      [--modes bare,sampler,record-9p,...]

Modes:
  bare              nothing
  sampler           krig-sampler every second (the default SAMPLE_INTERVAL)
  record-9p         trace-cmd record -o <9p results share> (krig until this change)
  record-9p-s1      the same with -s 1000000 (readers wake once a second, not every 1 ms)
  record-tmpfs      trace-cmd record -o <guest tmpfs>, moved to the share afterwards
  ring              trace-cmd start (events into the kernel's ring buffer only, no reader),
                    trace-cmd extract to the share afterwards
  ring+sampler      ring plus the sampler (what the harness does now)
Tracing stays on through the sync after the create, as in the reproducer, and each traced
mode's xfs_ail_insert count is read back with krig's reader, so a mode that records
nothing shows (a smoke-sized create, 250,000 files, records ~260,000 in ~1.6 MB of
v7+zstd: the small files are compression, not lost events).
Prints each mode's create and sync seconds per round and the median ratio of each to bare
of the same round.
Runs the guest under `flock /tmp/krig-vm.lock` only if the caller does.
"""
import argparse
import os
import pathlib
import re
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.trace.tracedat import TraceFile  # noqa: E402
from kernels.catalog import load_kernel  # noqa: E402
from workflows.run import CLOCKSOURCE  # noqa: E402
from rigs import load_rig  # noqa: E402
from rigs.qemu.rig import GUEST_SHARE  # noqa: E402

EVENTS = "-e xfs:xfs_ail_insert -e xfs:xfs_ail_move -e xfs:xfs_log_force"
LIB = ROOT / "reproducers" / "lib"
START = {
    "bare": "",
    "sampler": f"{LIB}/bin/krig-sampler -i 1 -o $o/samples.tsv -m $mnt & smp=$!",
    "record-9p": f"trace-cmd record -q -C mono -b 65536 {EVENTS} -o $o/trace.dat > $o/tc.log 2>&1 & tc=$!",
    "record-9p-s1": f"trace-cmd record -q -s 1000000 -C mono -b 65536 {EVENTS} -o $o/trace.dat > $o/tc.log 2>&1 & tc=$!",
    "record-tmpfs": f"trace-cmd record -q -C mono -b 65536 {EVENTS} -o /run/krig/t.dat > $o/tc.log 2>&1 & tc=$!",
    "ring": f"trace-cmd start -C mono -b 65536 {EVENTS} > $o/tc.log 2>&1",
}
START["ring+sampler"] = START["ring"] + "; " + START["sampler"]
STOP = {
    "bare": "",
    "sampler": "kill $smp; wait $smp",
    "record-9p": "kill -INT $tc; wait $tc",
    "record-9p-s1": "kill -INT $tc; wait $tc",
    "record-tmpfs": "kill -INT $tc; wait $tc; mv /run/krig/t.dat $o/trace.dat",
    "ring": "trace-cmd stop; trace-cmd extract -o $o/trace.dat >> $o/tc.log 2>&1; trace-cmd reset >/dev/null 2>&1",
}
STOP["ring+sampler"] = STOP["sampler"] + "; " + STOP["ring"]
WAIT_TRACING = ("for i in $(seq 300); do [[ $(< /sys/kernel/tracing/events/xfs/xfs_ail_insert/enable)"
                " == 1* ]] && break; sleep 0.1; done")


def round_script(mode: str, files: int, writers: int, out: str) -> str:
    per = files // writers
    writers_cmd = " ".join(f"{LIB}/bin/krig-mktree -d $mnt/dir{w} -n {per} -D 20 & pids+=($!);"
                           for w in range(writers))
    tracing = mode not in ("bare", "sampler")
    return f"""set -e
o={out}/{mode}; mkdir -p $o; mnt=/run/krig/b; mkdir -p $mnt
d=/dev/$(basename /sys/class/nvme/nvme0/nvme0n1)
echo 720000 > /proc/sys/fs/xfs/xfssyncd_centisecs
mkfs.xfs -f -q -l size=2038m $d; mount $d $mnt
{START[mode]}
{WAIT_TRACING if tracing else ''}
sync; sleep 1
t0=$EPOCHREALTIME
pids=(); {writers_cmd}
wait "${{pids[@]}}"
t1=$EPOCHREALTIME
sync
t2=$EPOCHREALTIME
{STOP[mode]}
umount $mnt
echo "create=$(echo "$t1 - $t0" | bc)"
echo "sync=$(echo "$t2 - $t1" | bc)"
[[ -e $o/trace.dat ]] && echo "trace_bytes=$(stat -c %s $o/trace.dat)" || true
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="tiny-6.1")
    ap.add_argument("--files", type=int, default=250000, help="default: the smoke preset's")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1,
                    help="unmeasured bare rounds first (the first create in a guest writes the "
                         "sparse disk image's blocks for the first time: 33.6 s against 27 s here)")
    ap.add_argument("--append", default="", help="extra kernel command line, e.g. tsc=reliable")
    ap.add_argument("--modes", default="bare,sampler,record-9p,record-9p-s1,record-tmpfs,ring,ring+sampler")
    a = ap.parse_args()
    modes = a.modes.split(",")
    for m in modes:
        if m not in START:
            raise SystemExit(f"--modes: {m!r} is not one of {', '.join(START)}")
    kernel = load_kernel(a.kernel)
    print(f"kernel {kernel.release}, {a.files} files, {a.writers} writers, load at start "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    times = {m: [] for m in modes}
    syncs = {m: [] for m in modes}
    rig = load_rig("qemu-default")
    with tempfile.TemporaryDirectory(prefix="krig-bench-") as td, rig:
        rig.prepare(pathlib.Path(td), kernel, {"scratch_size": 8 << 30})
        rig.boot.boot(kernel, a.append.split())
        cs = rig.command.run(["cat", CLOCKSOURCE], timeout=60).stdout.decode().strip()
        print(f"guest clocksource {cs}{' (kernel command line + ' + a.append + ')' if a.append else ''}",
              flush=True)
        for w in range(a.warmup):
            res = rig.command.run(["bash", "-c", round_script("bare", a.files, a.writers,
                                                              f"{GUEST_SHARE}/out/warmup{w}")],
                                  timeout=1800)
            print(f"warm-up {w + 1}: {res.stdout.decode().split()[-2:]} (not counted)", flush=True)
        for r in range(a.rounds):
            order = modes if r % 2 == 0 else modes[::-1]  # alternate the order
            for m in order:
                res = rig.command.run(["bash", "-c", round_script(m, a.files, a.writers,
                                                                  f"{GUEST_SHARE}/out/r{r}")],
                                      timeout=1800)
                out = res.stdout.decode()
                t = re.search(r"create=([\d.]+)", out)
                sy = re.search(r"sync=([\d.]+)", out)
                if res.returncode or not t or not sy:
                    raise SystemExit(f"mode {m} failed (exit {res.returncode}): {out} {res.stderr.decode()[-500:]}")
                size = re.search(r"trace_bytes=(\d+)", out)
                times[m].append(float(t.group(1)))
                syncs[m].append(float(sy.group(1)))
                trace = rig.share / "out" / f"r{r}" / m / "trace.dat"
                events = TraceFile(trace).counts().get("xfs:xfs_ail_insert", 0) if size else 0
                print(f"round {r + 1} {m:<14} create {times[m][-1]:6.1f} s  sync {syncs[m][-1]:5.1f} s"
                      + (f"  trace {int(size.group(1)) / 1e6:.1f} MB, {events} xfs_ail_insert"
                         if size else ""), flush=True)
        rig.shutdown()
    print(f"\nload at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if "bare" in times:
        for m in modes:
            rc = [x / b for x, b in zip(times[m], times["bare"])]
            rs = [x / b for x, b in zip(syncs[m], syncs["bare"])]
            print(f"{m:<14} create median {statistics.median(times[m]):6.1f} s (vs bare {statistics.median(rc):.3f})"
                  f"   sync median {statistics.median(syncs[m]):5.1f} s (vs bare {statistics.median(rs):.3f})")


if __name__ == "__main__":
    main()
