"""Tar headers read with a bound: tarfile reads a pax or GNU long-name header whole into memory,
and a GNU sparse map as long as the stream says. A stream from a lab server (rigs/ipmi/pull.py) and
a bundle from a stranger (krig reproduce) are read with BoundedHeader, which stops at the first
header krig does not read on (HeaderRefused)."""
import tarfile
from typing import NoReturn

from .safeio import printable as _show

HEADER_CAP = 1 << 20            # one pax or GNU long-name header, read whole into memory
HEADERS_CAP = 64 << 20          # all of them together


class HeaderRefused(Exception):
    """A header krig does not read on: the rest of the stream is not taken."""


class BoundedHeader(tarfile.TarInfo):
    """tarfile's member header, refusing what would make it read without a bound (HeaderRefused)."""

    def _proc_member(self, tf: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise HeaderRefused(f"a GNU sparse file {_show(self.name)}")
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK,
                         tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE):
            seen: int = getattr(tf, "krig_headers", 0) + self.size
            setattr(tf, "krig_headers", seen)         # the total so far, kept on the archive read
            if self.size > HEADER_CAP or seen > HEADERS_CAP:
                raise HeaderRefused(f"an extended tar header of {self.size} bytes")
        # tarfile's private reader of one member, which its type stubs leave out
        return super()._proc_member(tf)     # type: ignore[misc,no-any-return]

    def _proc_gnusparse_10(self, next: tarfile.TarInfo, pax_headers: dict[str, str], tf: tarfile.TarFile) -> NoReturn:
        raise HeaderRefused(f"a GNU sparse file {_show(next.name)}")
