"""rigs.qemu.kimage: the vmlinux inside a bzImage, booted through PVH when the kernel has the note.
Real images: Debian's kernel (xz, CONFIG_PVH=y) and anything that is not a bzImage. Each case
runs on its own empty cache ($KRIG_CACHE), so what the cache holds is what these calls put there."""
import os
import pathlib

import pytest

from rigs.qemu.kimage import has_pvh_note, pvh_image

DISTRO = sorted(pathlib.Path("/boot").glob("vmlinuz-*"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "vmlinux"


def test_distro_kernel_has_pvh_and_is_cached(cache):
    assert DISTRO, "no distro kernel in /boot: run `make setup` (linux-image-amd64)"
    elf = pvh_image(DISTRO[-1])
    assert elf is not None and elf.parent == cache and elf.read_bytes()[:4] == b"\x7fELF"
    assert has_pvh_note(elf.read_bytes())
    assert elf.stat().st_size > 3 * DISTRO[-1].stat().st_size  # really uncompressed
    before = elf.stat()
    assert pvh_image(DISTRO[-1]) == elf
    after = elf.stat()
    # the second call took the cached file: not decompressed and written again (same inode, same mtime)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in cache.iterdir()) == [elf.name]


def test_not_a_bzimage_boots_as_given(cache, tmp_path):
    junk = tmp_path / "vmlinuz-junk"
    junk.write_bytes(b"\x00" * 4096)
    assert pvh_image(junk) is None
    markers = list(cache.glob("*.no-pvh"))
    assert len(markers) == 1, "the answer 'no' was not cached"
    os.utime(markers[0], ns=(1, 1))
    assert pvh_image(junk) is None and markers[0].stat().st_mtime_ns == 1     # answered from the marker
    junk.write_bytes(b"\x00" * 8192)              # another image at the same path: looked at anew
    assert pvh_image(junk) is None and len(list(cache.glob("*.no-pvh"))) == 2
    assert not has_pvh_note(b"\x7fELF" + b"\x00" * 200)
