"""Boot a QEMU guest of each size given and say what it cost the host: QEMU's RSS once the
guest is up (and its peak) against rigs/qemu/memory.fixed_cost(), the boot time, when the
kernel itself reached /init (its printk clock), what it said about deferred struct-page
initialisation, and the hash tables it printed against rigs/hashsize's rule.

    python bench/sparse_boot.py --kernel distro 4G 16G 64G 256G
    python bench/sparse_boot.py --backing ram 1G 2G
    python bench/sparse_boot.py --kernel tiny-6.1-deferred-page-init --repeat 3 4G 64G

One line per boot; --json FILE appends each as a JSON line. Wrap it in
`flock /tmp/krig-vm.lock` on a shared machine.
"""
import argparse
import json
import pathlib
import re
import shutil
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.catalog import load_kernel  # noqa: E402
from krig.config import parse_size  # noqa: E402
from rigs import hashsize, load_rig  # noqa: E402
from rigs.qemu import memory as qemu_memory  # noqa: E402

DMESG = ["dmesg"]
RUN_INIT_RE = re.compile(r"^\[\s*(\d+\.\d+)\] Run /init", re.M)
DEFERRED_RE = re.compile(r"^\[[^]]*\] (.*deferred pages initialised in .*)$", re.M)


def peak_rss(pid: int) -> int | None:
    """A process's peak resident memory (VmHWM) in bytes, None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:")), None)
    except (OSError, ValueError, IndexError):
        return None


def boot_once(kernel, size: str, backing: str, like: str | None = None, timeout: float = 300,
              logs: str | None = None, tcg_thread: str = "single") -> dict:
    """Boot a guest of `size` (a size like 64G), read its facts and hash tables, power it off;
    its console log and dmesg kept as `logs`.console.log and `logs`.dmesg when given."""
    rig = load_rig("qemu-default")
    ram = parse_size(size, "size")
    rig.respec(memory=size, memory_bytes=ram, memory_backing=backing, accel="tcg", disks=(), tcg_thread=tcg_thread,
               like_memory=like, like_memory_bytes=parse_size(like, "like") if like else None)
    with tempfile.TemporaryDirectory(prefix="krig-sparse-") as td, rig:
        t0 = time.monotonic()
        rig.prepare(pathlib.Path(td), kernel, {})
        rig.boot.boot(kernel, [], timeout)
        facts = rig.facts()
        out = rig.command.run(DMESG, timeout=60).stdout.decode(errors="replace")
        peak = peak_rss(rig.m.proc.pid)
        rig.shutdown()
        if logs:
            shutil.copyfile(pathlib.Path(td, "console.log"), f"{logs}.console.log")
            pathlib.Path(f"{logs}.dmesg").write_text(out)
    run_init = RUN_INIT_RE.search(out)
    seen = hashsize.from_log(out)
    want = hashsize.like(ram, parse_size(like, "like")) if like else \
        {"dhash_entries": hashsize.dentry_entries(ram), "ihash_entries": hashsize.inode_entries(ram)}
    return {"size": size, "backing": backing, "like_memory": like, "tcg_thread": tcg_thread, "boot_seconds": facts.get("boot_seconds"),
            "seconds": round(time.monotonic() - t0, 1), "qemu_rss_after_boot": facts.get("qemu_rss_after_boot"),
            "qemu_rss_peak": peak, "kernel_run_init_seconds": float(run_init.group(1)) if run_init else None,
            "deferred": DEFERRED_RE.findall(out),
            "fixed_cost_estimate": facts.get("fixed_cost_estimate") or qemu_memory.fixed_cost(ram)[0],
            "dentry_hash_entries": seen.get("dentry_hash_entries"), "rule_dentry": want["dhash_entries"],
            "inode_hash_entries": seen.get("inode_hash_entries"), "rule_inode": want["ihash_entries"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sizes", nargs="+", help="guest RAM sizes, e.g. 4G 64G")
    ap.add_argument("--kernel", default="distro")
    ap.add_argument("--backing", choices=qemu_memory.BACKINGS, default="sparse")
    ap.add_argument("--like", help="like_memory for every boot, e.g. 3T")
    ap.add_argument("--tcg-thread", choices=("single", "multi"), default="single",
                    help="TCG's vCPU threads (default single, as the rigs)")
    ap.add_argument("--repeat", type=int, default=1, help="boots of each size (default 1)")
    ap.add_argument("--json", type=pathlib.Path)
    ap.add_argument("--logs", type=pathlib.Path, help="a directory to keep each boot's console log and dmesg in")
    a = ap.parse_args(argv)
    kernel = load_kernel(a.kernel, build=False)
    if a.repeat < 1:
        ap.error(f"--repeat: {a.repeat} is not a count of boots (1 or more)")
    if a.logs:
        a.logs.mkdir(parents=True, exist_ok=True)
    for i, size in enumerate([s for s in a.sizes for _ in range(a.repeat)]):
        logs = f"{a.logs}/{kernel.name}-{size}-{time.strftime('%H%M%S')}-{i}" if a.logs else None
        r = boot_once(kernel, size, a.backing, a.like, logs=logs, tcg_thread=a.tcg_thread)
        r["kernel"] = kernel.name
        gib = lambda n: f"{n / 2**30:.2f} GiB" if n else "-"   # noqa: E731
        print(f"{size} {a.backing}: boot {r['boot_seconds']} s (/init at {r['kernel_run_init_seconds']} s "
              f"kernel time), QEMU RSS {gib(r['qemu_rss_after_boot'])} (peak {gib(r['qemu_rss_peak'])}, "
              f"formula {gib(r['fixed_cost_estimate'])}), {'; '.join(r['deferred']) or 'no deferred init'}, "
              f"dentry hash {r['dentry_hash_entries']} "
              f"(rule {r['rule_dentry']}), inode hash {r['inode_hash_entries']} (rule {r['rule_inode']})",
              flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
