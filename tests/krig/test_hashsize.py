"""The dcache and inode hash tables a machine's kernel sizes at boot (krig/hashsize.py, the
rule; rigs/hashsize.py, the command line and console lines): the rule, the docs' table, what a run records and what krig compare says; the guest cases hold the rule to
the console of real guests (distro kernel).

Covers: rigs/hashsize.py."""
import types

import pytest

from conftest import ROOT
from kernels.catalog import load_kernel
from krig import hashsize
from workflows import compare
from krig.config import parse_size
from krig.record import Manifest
from rigs import hashsize as rig_hashsize, load_rig
from test_sparse import rig_file


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


def test_docs_table_is_the_rules():
    assert rig_hashsize.table() in (ROOT / "docs" / "rigs.md").read_text(), \
        "docs/rigs.md's density table differs from `python -m rigs.hashsize`"


def test_hash_tables_from_the_kernel_log():
    log = ("[    0.123] Dentry cache hash table entries: 16777216 (order: 15, 134217728 bytes, linear)\n"
           "[    0.124] Inode-cache hash table entries: 8388608 (order: 14, 67108864 bytes, linear)\n")
    assert rig_hashsize.from_log(log) == {"dentry_hash_entries": 16777216, "inode_hash_entries": 8388608}
    assert rig_hashsize.from_log("nothing here") == {}


# -- krig compare --------------------------------------------------------------------------------

def test_compare_notes_different_hash_tables():
    def man(d):         # a run's record as compare reads it: its typed manifest
        return types.SimpleNamespace(manifest=Manifest.from_json(
            {"machine": {"dentry_hash_entries": d, "inode_hash_entries": d // 2}}))
    diff = compare.differences([("a", "FAIL", man(524288))], [("b", "FAIL", man(65536))])
    assert "machine dentry_hash_entries: BASE 524288, NEW 65536" in diff
    assert not compare.differences([("a", "FAIL", man(524288))], [("b", "FAIL", man(524288))])


@pytest.mark.guest
# every size from 1 to 256 GB was checked once (docs/measurements.md, "Sparse guests"); the
# suite keeps the two ends of the flat 8 KiB-per-bucket range and a big machine's density on a
# small guest (a guest larger than the host: tests/rigs/qemu/test_sparse.py, whose 64 GB run records them)
@pytest.mark.parametrize("memory,like,backing", [("1G", None, "ram"), ("16G", None, "ram"), ("4G", "3T", "ram")])
def test_hash_tables_of_real_guests(tmp_path, memory, like, backing, no_leftover_qemu):
    """The kernel's own console line against the rule, at the sizes this host can boot (64 GB as
    a sparse guest, more than this host has); like_memory gives the table of the nearest power
    of two."""
    rig = load_rig(str(rig_file(tmp_path, memory=memory, backing=backing,
                                extra=f'like_memory = "{like}"' if like else "")))
    rig.respec(disks=())
    kernel = load_kernel("distro", build=False)
    (tmp_path / "run").mkdir()
    with rig:
        rig.prepare(tmp_path / "run", kernel, {})
        rig.boot.boot(kernel, ["loglevel=7"])      # KERN_INFO on the console
        rig.shutdown()
        seen = rig_hashsize.from_log(rig.console.text())
    ram = parse_size(memory, "memory")
    want = hashsize.like(ram, parse_size(like, "like")) if like else \
        {"dhash_entries": hashsize.dentry_entries(ram), "ihash_entries": hashsize.inode_entries(ram)}
    assert seen == {"dentry_hash_entries": want["dhash_entries"], "inode_hash_entries": want["ihash_entries"]}
