"""The three nested records of a run's manifest, typed: the machine (what it said of itself once it
answered), the kernel (as built or packaged: kernels.kernel.Kernel.describe()) and the rig (its
describe(): name, kind, the --rig argument and the rig file's settings).

Each keeps a key it does not know (`extra`; for the rig, every rig-file setting is `spec`) and
writes it back as it was, so a manifest any krig wrote reads and writes back the same.
"""
import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Self

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def _known(cls: "type[DataclassInstance]", data: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the keys `cls` declares, the rest) of a manifest's object; None or a non-object reads as {}."""
    data = data if isinstance(data, dict) else {}
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    return {k: v for k, v in data.items() if k in names}, {k: v for k, v in data.items() if k not in names}


class KeepsExtra:
    """A record of a JSON object that keeps the keys it does not know (`extra`) and writes them back."""
    extra: dict[str, Any]

    if TYPE_CHECKING:       # each subclass is a dataclass: its own __init__ takes its fields and extra
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

        def __init__(self, **fields: Any) -> None: ...

    @classmethod
    def from_json(cls, data: object) -> Self:
        known, extra = _known(cls, data)
        return cls(**known, extra=extra)


@dataclasses.dataclass
class Machine(KeepsExtra):
    """What the machine said of itself (workflows/run.py asks it once it answers)."""
    release: str | None = None              # uname -r
    cmdline: str | None = None
    cpus: int | None = None
    mem_total_bytes: int | None = None      # MemTotal
    clocksource: str | None = None
    cpu: dict[str, Any] | None = None                 # model, governor, turbo, mhz
    dentry_hash_entries: int | None = None  # the hash tables the kernel sized at boot (rigs/hashsize.py)
    inode_hash_entries: int | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**{k: v for k, v in out.items() if v is not None}, **self.extra}


@dataclasses.dataclass
class KernelRecord(KeepsExtra):
    """The kernel as krig built, packaged or was given it (kernels.kernel.Kernel.describe())."""
    name: str | None = None
    release: str | None = None
    image: str | None = None
    modules_dir: str | None = None
    config: str | None = None
    config_sha256_16: str | None = None
    extra_cmdline: str | None = None
    description: str | None = None
    arg: str | None = None                  # the --kernel argument as given
    debug_options: dict[str, Any] | None = None
    git: dict[str, Any] | None = None                 # repository, commit, branch: a kernel from a git tree
    drivers: dict[str, Any] | None = None             # a server's drivers added: module -> symbol -> where it came from
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("extra", "git", "drivers")}
        return {**out, **({"git": self.git} if self.git else {}),
                **({"drivers": self.drivers} if self.drivers else {}), **self.extra}


@dataclasses.dataclass
class RigRecord:
    """The rig as it described itself: its name, kind, the --rig argument, and the rig file's settings."""
    name: str | None = None
    kind: str | None = None
    arg: str | None = None
    spec: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, data: object) -> "RigRecord":
        data = data if isinstance(data, dict) else {}
        return cls(data.get("name"), data.get("kind"), data.get("arg"),
                   {k: v for k, v in data.items() if k not in ("name", "kind", "arg")})

    def to_json(self) -> dict[str, Any]:
        head = {"name": self.name, "kind": self.kind, **({"arg": self.arg} if self.arg else {})}
        return {**{k: v for k, v in head.items() if v is not None}, **self.spec}

    @property
    def cpus(self) -> int | None:
        """The CPUs the rig file gives the machine (a QEMU guest's), or None."""
        return self.spec.get("cpus")

    @property
    def memory_bytes(self) -> int | None:
        """The RAM the rig file gives the machine (a QEMU guest's), or None."""
        return self.spec.get("memory_bytes")

    def table(self, name: str) -> dict[str, Any]:
        """A table of the rig file ([bmc], [ssh], ...), {} when it has none."""
        t = self.spec.get(name)
        return t if isinstance(t, dict) else {}
