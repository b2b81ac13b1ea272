"""The record a rig boots: an image, the matching modules tree and a release string."""
import dataclasses
import hashlib
import pathlib
import re


@dataclasses.dataclass
class Kernel:
    name: str
    release: str
    image: pathlib.Path
    modules_dir: pathlib.Path | None     # /lib/modules/<release> or a build's staging dir
    config: pathlib.Path | None
    cmdline: list[str]
    description: str = ""

    @property
    def kernel_id(self) -> str:
        """Path-safe id used in result directories: <name>-<release>."""
        rel = re.sub(r"[^A-Za-z0-9._+-]", "_", self.release)
        return f"{self.name}-{rel}" if rel not in self.name else self.name

    def config_hash(self) -> str | None:
        if self.config and self.config.exists():
            return hashlib.sha256(self.config.read_bytes()).hexdigest()[:16]
        return None

    def describe(self) -> dict:
        return {
            "name": self.name, "release": self.release, "image": str(self.image),
            "modules_dir": str(self.modules_dir) if self.modules_dir else None,
            "config": str(self.config) if self.config else None,
            "config_sha256_16": self.config_hash(), "extra_cmdline": self.cmdline,
            "description": self.description,
        }
