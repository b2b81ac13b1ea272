"""rigs.kimage: the vmlinux inside a bzImage, booted through PVH when the kernel has the note.
Real images: Debian's kernel (xz, CONFIG_PVH=y) and anything that is not a bzImage."""
import pathlib

import pytest

from rigs.kimage import has_pvh_note, pvh_image

DISTRO = sorted(pathlib.Path("/boot").glob("vmlinuz-*"))


@pytest.mark.skipif(not DISTRO, reason="no distro kernel in /boot")
def test_distro_kernel_has_pvh_and_is_cached():
    elf = pvh_image(DISTRO[-1])
    assert elf is not None and elf.read_bytes()[:4] == b"\x7fELF"
    assert has_pvh_note(elf.read_bytes())
    assert pvh_image(DISTRO[-1]) == elf  # the second call takes the cached file
    assert elf.stat().st_size > 3 * DISTRO[-1].stat().st_size  # really uncompressed


def test_not_a_bzimage_boots_as_given(tmp_path):
    junk = tmp_path / "vmlinuz-junk"
    junk.write_bytes(b"\x00" * 4096)
    assert pvh_image(junk) is None
    assert not has_pvh_note(b"\x7fELF" + b"\x00" * 200)
