"""The dcache and inode hash tables a machine's kernel sizes at boot (rigs/hashsize.py)."""
import pytest

from krig.config import parse_size
from rigs import hashsize


# -- the sizing rule ---------------------------------------------------------------------------

@pytest.mark.parametrize("ram,dentry,inode", [
    ("1G", 131072, 65536), ("4G", 524288, 262144), ("64G", 8388608, 4194304),
    ("256G", 16777216, 8388608), ("3T", 67108864, 33554432)])
def test_rule(ram, dentry, inode):
    """6.1's alloc_large_system_hash(): 2^24 dentry buckets at 256 GB, 2^26 at 3 TB (the seed
    report's servers), one per 8 KiB up to 64 GB."""
    n = parse_size(ram, "ram")
    assert (hashsize.dentry_entries(n), hashsize.inode_entries(n)) == (dentry, inode)


def test_like_memory_gives_a_big_machines_density():
    assert hashsize.like(4 << 30, 3 << 40) == {"dhash_entries": 65536, "ihash_entries": 32768}
    assert hashsize.like(4 << 30, 256 << 30) == {"dhash_entries": 262144, "ihash_entries": 131072}
    assert hashsize.like(4 << 30, 4 << 30) == {"dhash_entries": 524288, "ihash_entries": 262144}


def test_hash_tables_from_the_kernel_log():
    log = ("[    0.123] Dentry cache hash table entries: 16777216 (order: 15, 134217728 bytes, linear)\n"
           "[    0.124] Inode-cache hash table entries: 8388608 (order: 14, 67108864 bytes, linear)\n")
    assert hashsize.from_log(log) == {"dentry_hash_entries": 16777216, "inode_hash_entries": 8388608}
    assert hashsize.from_log("nothing here") == {}
