"""The hashes that name things in krig's kernel cache: a file's sha256, a source tarball's
(remembered by path, size and mtime, it is large), and the short key of a table of inputs
(a built kernel's directory, $KRIG_CACHE/kernels/<key>/, a given tree's, a build tree's)."""
import hashlib
import json
import os
import pathlib

from krig.errors import UsageError
from krig.paths import cache_dir


def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tarball_sha256(path: pathlib.Path) -> str:
    """sha256 of a source tarball, remembered by (path, size, mtime)."""
    try:
        st = path.stat()
    except OSError:
        raise UsageError(f"{path}: source tarball not found (apt-get install linux-source-6.1, "
                         "or `make setup`)") from None
    memo = cache_dir("kbuild") / "tarball-sha256.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    tag = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    if tag not in known:
        known[tag] = sha256_file(path)
        tmp = memo.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(memo)
    return known[tag]


def cache_key(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
