"""The record a rig boots: an image, the matching modules tree and a release string."""
import dataclasses
import hashlib
import pathlib
import re
from typing import Any

# Kernel options that change how fast a kernel runs or how much memory it takes: numbers of
# two kernels that differ in one of them are not comparable (the 0-day robot's XFS_DEBUG
# episode). Recorded with every run (manifest.json kernel.debug_options), shown by
# `krig compare` and `krig validate` when the two sides differ.
DEBUG_OPTIONS = ("CONFIG_XFS_DEBUG", "CONFIG_XFS_WARN", "CONFIG_KASAN", "CONFIG_KCSAN", "CONFIG_KMSAN",
                 "CONFIG_UBSAN", "CONFIG_KFENCE", "CONFIG_LOCKDEP", "CONFIG_PROVE_LOCKING",
                 "CONFIG_DEBUG_LOCK_ALLOC", "CONFIG_LOCK_STAT", "CONFIG_DEBUG_PAGEALLOC",
                 "CONFIG_SLUB_DEBUG_ON", "CONFIG_DEBUG_KMEMLEAK", "CONFIG_DEBUG_OBJECTS", "CONFIG_DEBUG_VM",
                 "CONFIG_DEBUG_LIST", "CONFIG_DEBUG_ATOMIC_SLEEP", "CONFIG_PAGE_POISONING",
                 "CONFIG_DEBUG_SPINLOCK", "CONFIG_DEBUG_MUTEXES", "CONFIG_PREEMPT", "CONFIG_HZ")


def debug_options(config: pathlib.Path | None) -> dict | None:
    """{option: value} of DEBUG_OPTIONS in a .config ('n' when not set); None without a config."""
    try:
        text = config.read_text(errors="replace") if config else None
    except OSError:
        text = None
    if text is None:
        return None
    found = {}
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if eq and key in DEBUG_OPTIONS:
            found[key] = value.strip('"')
    return {k: found.get(k, "n") for k in DEBUG_OPTIONS}


@dataclasses.dataclass
class Kernel:
    name: str
    release: str
    image: pathlib.Path
    modules_dir: pathlib.Path | None     # /lib/modules/<release> or a build's staging dir
    config: pathlib.Path | None
    cmdline: list[str]
    description: str = ""
    arg: str | None = None             # what was given to --kernel, when not a kernels/<name>.toml name
    git: dict | None = None            # {"repository", "commit", "branch"} when it came from a git tree
    series: dict | None = None         # the provenance of a patch series applied on top (kernels/series.py)
    drivers: dict | None = None        # a server's drivers added (kernels/drivers.py record): what, from where

    @property
    def kernel_id(self) -> str:
        """Path-safe id used in result directories: <name>-<release>."""
        rel = re.sub(r"[^A-Za-z0-9._+-]", "_", self.release)
        return f"{self.name}-{rel}" if rel not in self.name else self.name

    def config_hash(self) -> str | None:
        if self.config and self.config.exists():
            return hashlib.sha256(self.config.read_bytes()).hexdigest()[:16]
        return None

    def to_json(self) -> dict:
        """The record itself as JSON (paths as text), what of_json reads back: a kernel loaded once
        and handed to another process (a qualification's workers)."""
        return {f.name: str(v) if isinstance(v, pathlib.Path) else v
                for f in dataclasses.fields(self) for v in (getattr(self, f.name),)}

    @classmethod
    def of_json(cls, data: dict) -> "Kernel":
        paths = ("image", "modules_dir", "config")
        fields: dict[str, Any] = {k: pathlib.Path(v) if k in paths and v is not None else v
                                  for k, v in data.items()}
        return cls(**fields)

    def describe(self) -> dict:
        return {
            "name": self.name, "release": self.release, "image": str(self.image),
            "modules_dir": str(self.modules_dir) if self.modules_dir else None,
            "config": str(self.config) if self.config else None,
            "config_sha256_16": self.config_hash(), "extra_cmdline": self.cmdline,
            "description": self.description, "arg": self.arg,
            "debug_options": debug_options(self.config),
            **({"git": self.git} if self.git else {}),
            **({"drivers": self.drivers} if self.drivers else {}),
        }
