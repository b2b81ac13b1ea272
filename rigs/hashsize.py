"""A QEMU rig's dcache and inode hash tables: the kernel command line giving a guest a big
machine's density of buckets (`like_memory`), the counts the kernel printed at boot, and
docs/rigs.md's table. The sizing rule itself is krig/hashsize.py.

`python -m rigs.hashsize` prints the table of docs/rigs.md.
"""
import re

from krig.config import parse_size
from krig.hashsize import DENTRY_BYTES, dentry_entries, inode_entries, like

CONSOLE_RE = {"dentry_hash_entries": re.compile(r"Dentry cache hash table entries: (\d+)"),
              "inode_hash_entries": re.compile(r"Inode-cache hash table entries: (\d+)")}
TABLE_SIZES = ("1G", "2G", "4G", "8G", "16G", "32G", "64G", "128G", "256G", "512G", "1T", "2T", "3T", "4T")
LIKE_GUEST = 4 << 30             # the guest the table's like_memory column is worked out for


def like_cmdline(guest_ram: int, like_ram: int) -> list:
    return [f"{k}={v}" for k, v in like(guest_ram, like_ram).items()]


def from_log(text: str) -> dict:
    """{dentry_hash_entries, inode_hash_entries} the kernel printed at boot (console or dmesg);
    a table it did not print is absent."""
    out = {}
    for key, pat in CONSOLE_RE.items():
        m = pat.search(text)
        if m:
            out[key] = int(m.group(1))
    return out


def _size(ram: int) -> str:
    return f"{ram >> 40} TB" if ram >= 1 << 40 else f"{ram >> 30} GB"


def _kib(n: float) -> str:
    return f"{n / 1024:.0f} KiB" if n >= 10 * 1024 else f"{n / 1024:.1f} KiB"


def table() -> str:
    """docs/rigs.md's density table, from 1 GB to 4 TB (tests/krig/test_hashsize.py holds the docs to it)."""
    rows = ["| RAM | dentry buckets | RAM per dentry bucket | inode buckets | 1 negative per bucket, % of RAM "
            "| 3 per bucket | `like_memory` on a 4 GB guest |",
            "|---|---|---|---|---|---|---|"]
    for s in TABLE_SIZES:
        ram = parse_size(s, "size")
        d, i = dentry_entries(ram), inode_entries(ram)
        pct = 100 * d * DENTRY_BYTES / ram
        cmd = " ".join(like_cmdline(LIKE_GUEST, ram))
        rows.append(f"| {_size(ram)} | {d:,} | {_kib(ram / d)} | {i:,} | {pct:.2f}% | {3 * pct:.1f}% | `{cmd}` |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
