"""The run a user asked for, as one value: what `krig run` was given (reproducer, rig, kernel
argument, preset, the --set overrides, the --sysctl and --cmdline knobs). Every command line krig prints or runs for a run is
made here (summary.txt's "reproduce", a bundle's run-args, bisect's steps), and read back
here (`krig reproduce`), so the same run always reads as the same command.
"""
import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import DEFAULT_KERNEL, DEFAULT_RIG
from .errors import UsageError

if TYPE_CHECKING:
    from .record import Manifest
    from .reproducer import Reproducer

OPTIONS = ("--rig", "--kernel", "--preset", "--set", "--sysctl", "--cmdline")
_REPEATED = ("--set", "--sysctl", "--cmdline")


@dataclasses.dataclass(frozen=True)
class AskedRun:
    reproducer: str
    rig: str = DEFAULT_RIG
    kernel: str | None = DEFAULT_KERNEL      # None: a bundle's run-args that name none (krig reproduce picks)
    preset: str | None = None
    sets: tuple[str, ...] = ()             # "KEY=VALUE", in the order given
    knobs: tuple[str, ...] = ()            # ("--sysctl", "NAME=VALUE", "--cmdline", "ARG", ...): krig/knobs.py Knobs.args()

    def settings(self) -> list[str]:
        """--preset and the --set overrides, as every command that makes this run takes them."""
        out = ["--preset", self.preset] if self.preset else []
        for s in self.sets:
            out += ["--set", s]
        return out + list(self.knobs)

    def args(self, rig: bool = True) -> list[str]:
        """The arguments after `krig run` (without --rig for a bundle: its user picks the rig)."""
        kernel = ["--kernel", self.kernel] if self.kernel is not None else []
        return [self.reproducer] + (["--rig", self.rig] if rig else []) + kernel + self.settings()

    def validate_argv(self, series: str | os.PathLike[str] | None, repeat: int | None = None, program: str = "krig",
                      sides: Sequence[str] = ()) -> list[str]:
        """`krig validate` of a series against this run's kernel as the base (the reply's command):
        --repeat when not the default (None), --rig when not the default rig; sides: the options of
        one side's knobs (--series-sysctl ...); no series: a knob-only A/B."""
        out = [program, "validate", self.reproducer, *(["--base", self.kernel] if self.kernel is not None else [])]
        out += ["--series", str(series)] if series else []
        out += ["--repeat", str(repeat)] if repeat is not None else []
        out += ["--rig", self.rig] if self.rig != DEFAULT_RIG else []
        return out + self.settings() + list(sides)

    def argv(self, program: str = "krig") -> list[str]:
        """The whole command line: `krig run REPRODUCER --rig .. --kernel .. [--preset ..] [--set ..]`."""
        return [program, "run", *self.args()]

    @classmethod
    def from_args(cls, args: list[str], where: str, allowed: tuple[str, ...] = OPTIONS,
                  kernel: str | None = DEFAULT_KERNEL) -> "AskedRun":
        """The arguments after `krig run` (or a bundle's run-args, with allowed options only) back
        into a value (`kernel` when they give no --kernel); anything else is refused in one line
        naming `where`."""
        if not args or not args[0] or args[0].startswith("-"):
            raise UsageError(f"{where}: the reproducer's name must come first (got {args[0] if args else '(empty)'!r})")
        out: dict[str, str] = {}           # --rig, --kernel, --preset
        sets, knobs = [], []
        i = 1
        while i < len(args):
            opt = args[i]
            if opt not in allowed or i + 1 >= len(args):
                raise UsageError(f"{where}: {opt!r} is not an argument krig takes here (allowed: "
                                 f"{', '.join(a + (' KEY=VALUE' if a == '--set' else '') for a in allowed)})")
            if opt == "--set":
                sets.append(args[i + 1])
            elif opt in _REPEATED:
                knobs += [opt, args[i + 1]]
            else:
                out[opt[2:]] = args[i + 1]
            i += 2
        return cls(args[0], out.get("rig", DEFAULT_RIG), out.get("kernel", kernel), out.get("preset"), tuple(sets),
                   tuple(knobs))

    @classmethod
    def from_manifest(cls, manifest: "Manifest", repro: "Reproducer") -> "AskedRun":
        """The run a manifest (krig.record.Manifest) records: its rig, its kernel argument (or
        name), its preset, and as --set every parameter the preset (or the default) does not give."""
        preset = manifest.preset
        base = {k: p["default"] for k, p in repro.params.items()}
        if preset and preset in repro.presets:
            base.update(repro.presets[preset])
        else:
            preset = None
        sets = tuple(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in (manifest.params or {}).items() if base.get(k) != v)
        kernel, rig = manifest.kernel, manifest.rig
        knobs = [w for s in (manifest.knobs or {}).get("sysctl") or [] for w in ("--sysctl", f"{s['name']}={s['set']}")]
        knobs += [w for c in (manifest.knobs or {}).get("cmdline") or [] for w in ("--cmdline", c["arg"])]
        return cls(repro.name, rig.arg or rig.name or DEFAULT_RIG, kernel.arg or kernel.name or DEFAULT_KERNEL,
                   preset, sets, tuple(knobs))
