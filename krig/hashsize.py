"""The dcache and inode hash tables a machine's kernel sizes at boot (Linux 6.1's rule).

`dcache_init()` and `inode_init()` size their tables with `alloc_large_system_hash()`
(mm/page_alloc.c): one bucket per 2^scale bytes of the kernel's pages (the pages left
once each page's `struct page` is charged, rounded up to a MiB), the scale growing by one
for every 4x of memory above 64 GB, the count rounded up to a power of two, the table at
most 1/16 of memory. The dentry table has scale 13 (one bucket per 8 KiB up to 64 GB),
the inode table scale 14; both have 8-byte buckets. `dhash_entries=N` / `ihash_entries=N`
on the kernel command line replace the computed count (still rounded up to a power of
two), which gives a small guest a big machine's density of buckets per GB (`like_memory`
of a QEMU rig).

Vocabulary: the rigs size a guest's memory with it, an analysis projects a run to machines
of other sizes with it. The console lines, the command line and docs/rigs.md's table are in
rigs/hashsize.py.
"""
PAGE_SHIFT = 12
BUCKET_BYTES = 8                 # hlist_bl_head / hlist_head
DENTRY_SCALE, INODE_SCALE = 13, 14
ADAPT_SCALE_BASE = 64 << 30      # above this, one more bit of scale per ADAPT_SCALE_SHIFT bits of memory
ADAPT_SCALE_SHIFT = 2
STRUCT_PAGE = 64                 # bytes of memmap per 4 KiB page (x86_64)
DENTRY_BYTES = 192               # one struct dentry (x86_64, names up to 32 bytes inline)



def _pow2_up(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def kernel_pages(ram: int) -> int:
    """The pages the rule counts for `ram` bytes of RAM: each page's struct page charged."""
    pages = ram >> PAGE_SHIFT
    return pages - pages * STRUCT_PAGE // (1 << PAGE_SHIFT)


def entries(ram: int, scale: int) -> int:
    """Buckets alloc_large_system_hash() gives a table of this scale on a machine with `ram` bytes."""
    pages = kernel_pages(ram)
    pages = -(-pages // (1 << (20 - PAGE_SHIFT))) << (20 - PAGE_SHIFT)    # up to a MiB
    adapt = ADAPT_SCALE_BASE >> PAGE_SHIFT
    while adapt < pages:
        scale += 1
        adapt <<= ADAPT_SCALE_SHIFT
    n = pages >> (scale - PAGE_SHIFT) if scale > PAGE_SHIFT else pages << (PAGE_SHIFT - scale)
    n = max(n, (1 << PAGE_SHIFT) // BUCKET_BYTES)
    return min(_pow2_up(n), (ram >> 4) // BUCKET_BYTES, 1 << 31)


def dentry_entries(ram: int) -> int:
    return entries(ram, DENTRY_SCALE)


def inode_entries(ram: int) -> int:
    return entries(ram, INODE_SCALE)


def table_bytes(ram: int) -> int:
    """Both tables' memory on a machine of `ram` bytes (what a guest touches at boot for them)."""
    return (dentry_entries(ram) + inode_entries(ram)) * BUCKET_BYTES


def like(guest_ram: int, like_ram: int) -> dict[str, int]:
    """dhash_entries/ihash_entries giving a guest of guest_ram bytes the buckets per GB of a
    machine of like_ram bytes: that machine's count scaled to the guest's RAM, to the nearest
    power of two (the kernel rounds any count up to one)."""
    out = {}
    for key, scale in (("dhash_entries", DENTRY_SCALE), ("ihash_entries", INODE_SCALE)):
        exact = entries(like_ram, scale) * kernel_pages(guest_ram) / kernel_pages(like_ram)
        lo = 1 << max(0, int(exact).bit_length() - 1)
        out[key] = lo if exact / lo <= 2 * lo / exact else 2 * lo
    return out
