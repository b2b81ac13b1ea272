"""Boot a QEMU guest of each size given and say what it cost the host: QEMU's RSS once the
guest is up against rigs/qemu_memory.fixed_cost(), the boot time, and the hash tables the
kernel printed against rigs/hashsize's rule.

    python bench/sparse_boot.py --kernel distro 4G 16G 64G 256G
    python bench/sparse_boot.py --backing ram 1G 2G

One line per boot; --json FILE appends each as a JSON line. Wrap it in
`flock /tmp/krig-vm.lock` on a shared machine.
"""
import argparse
import json
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.catalog import load_kernel  # noqa: E402
from krig.config import parse_size  # noqa: E402
from rigs import hashsize, load_rig, qemu_memory  # noqa: E402

HASH_LINES = ["bash", "-c", "dmesg | grep -E 'hash table entries'"]


def boot_once(kernel, size: str, backing: str, like: str | None = None, timeout: float = 300) -> dict:
    """Boot a guest of `size` (a size like 64G), read its facts and hash tables, power it off."""
    rig = load_rig("qemu-default")
    ram = parse_size(size, "size")
    rig.spec.update(memory=size, memory_bytes=ram, memory_backing=backing, accel="tcg", disks=[],
                    like_memory=like, like_memory_bytes=parse_size(like, "like") if like else None)
    with tempfile.TemporaryDirectory(prefix="krig-sparse-") as td, rig:
        t0 = time.monotonic()
        rig.prepare(pathlib.Path(td), kernel, {})
        rig.boot.boot(kernel, [], timeout)
        facts = rig.facts()
        out = rig.command.run(HASH_LINES, timeout=60).stdout.decode(errors="replace")
        rig.shutdown()
    seen = hashsize.from_log(out)
    want = hashsize.like(ram, parse_size(like, "like")) if like else \
        {"dhash_entries": hashsize.dentry_entries(ram), "ihash_entries": hashsize.inode_entries(ram)}
    return {"size": size, "backing": backing, "like_memory": like, "boot_seconds": facts.get("boot_seconds"),
            "seconds": round(time.monotonic() - t0, 1), "qemu_rss_after_boot": facts.get("qemu_rss_after_boot"),
            "fixed_cost_estimate": facts.get("fixed_cost_estimate") or qemu_memory.fixed_cost(ram)[0],
            "dentry_hash_entries": seen.get("dentry_hash_entries"), "rule_dentry": want["dhash_entries"],
            "inode_hash_entries": seen.get("inode_hash_entries"), "rule_inode": want["ihash_entries"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sizes", nargs="+", help="guest RAM sizes, e.g. 4G 64G")
    ap.add_argument("--kernel", default="distro")
    ap.add_argument("--backing", choices=qemu_memory.BACKINGS, default="sparse")
    ap.add_argument("--like", help="like_memory for every boot, e.g. 3T")
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args(argv)
    kernel = load_kernel(a.kernel, build=False)
    for size in a.sizes:
        r = boot_once(kernel, size, a.backing, a.like)
        gib = lambda n: f"{n / 2**30:.2f} GiB" if n else "-"   # noqa: E731
        print(f"{size} {a.backing}: boot {r['boot_seconds']} s, QEMU RSS {gib(r['qemu_rss_after_boot'])} "
              f"(formula {gib(r['fixed_cost_estimate'])}), dentry hash {r['dentry_hash_entries']} "
              f"(rule {r['rule_dentry']}), inode hash {r['inode_hash_entries']} (rule {r['rule_inode']})",
              flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
