"""The kernel image QEMU is given: the bzImage, or its vmlinux booted through PVH.

A bzImage decompresses itself before it starts; under TCG that is seconds of
emulated xz (Debian's kernels, and ours, are xz-compressed). A kernel built with
CONFIG_PVH has an ELF note (Xen's PHYS32_ENTRY) that lets QEMU load the
uncompressed vmlinux ELF straight into guest memory and jump to its 32-bit entry,
so the same kernel code starts without decompressing. The vmlinux is taken out of
the bzImage once on the host (the payload is the compressed ELF), cached by the
bzImage's identity, and only used when it carries the note; otherwise (or for a
compression this module does not know) the bzImage is booted as before.
"""
from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import pathlib
import struct

from krig.paths import cache_dir

XEN_ELFNOTE_PHYS32_ENTRY = 18
PT_NOTE = 4
_XZ, _GZ = b"\xfd7zXZ\x00", b"\x1f\x8b\x08"


def _unxz(data: bytes) -> bytes:
    return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data)


def _payload(bz: bytes) -> bytes | None:
    """The uncompressed ELF inside a bzImage (setup header's payload_offset), or None."""
    if len(bz) < 0x260 or bz[0x202:0x206] != b"HdrS":
        return None
    setup_sects = bz[0x1F1] or 4
    off, length = struct.unpack_from("<II", bz, 0x248)
    start = (setup_sects + 1) * 512 + off
    blob = bz[start:start + length]
    try:
        if blob.startswith(_XZ):
            elf = _unxz(blob)
        elif blob.startswith(_GZ):
            elf = gzip.decompress(blob)
        else:
            return None
    except (lzma.LZMAError, OSError, EOFError):
        return None
    return elf if elf[:4] == b"\x7fELF" else None


def has_pvh_note(elf: bytes) -> bool:
    """A 64-bit little-endian ELF with Xen's PHYS32_ENTRY note (QEMU's PVH boot)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != PT_NOTE:
            continue
        q, end = p_offset, p_offset + p_filesz
        while q + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, q)
            name = elf[q + 12:q + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            q += 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3)
    return False


def pvh_image(bzimage: pathlib.Path) -> pathlib.Path | None:
    """The cached vmlinux of `bzimage` if it can be booted through PVH, else None.

    The answer is cached too (an empty marker file for "no"), keyed by the image's
    path, size and mtime, so each kernel is looked at once."""
    st = bzimage.stat()
    key = hashlib.sha256(f"{bzimage.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:20]
    d = cache_dir("vmlinux")
    elf_path, no_path = d / f"{key}.elf", d / f"{key}.no-pvh"
    if elf_path.exists():
        return elf_path
    if no_path.exists():
        return None
    elf = _payload(bzimage.read_bytes())
    if elf is None or not has_pvh_note(elf):
        no_path.touch()
        return None
    tmp = elf_path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(elf)
    tmp.rename(elf_path)
    return elf_path
