"""A run planned once: the reproducer, the rig, the kernel and the parameters resolved into one
value before anything runs, and passed down from there.

`plan_run` reads each name once: the reproducer (reproducers/NAME), the rig file (load_rig), the
preset and --set values against the rig's CPUs (`resolve`), then checks the host before a kernel
is built (`checked`: workflows/preflight.py, the rig can boot what is asked, memory, disk,
programs) and resolves the kernel (`with_kernel`: kernels/catalog.py, built if it must be, its
config against the reproducer's). A validation takes the same steps with a check of its own
between them, and `with_kernel` again for its second side; `rechecked` is the same plan with the
host checked again (each run of a group after its first). The runner (workflows/run.py:
execute), a group (workflows/group.py) and a validation take a plan and resolve no name again:
a group of N runs loads its kernel once, a validation each of its two once, a qualification each
of its suite's kernels once (`with_loaded` in its workers).
"""
import dataclasses
import pathlib

from kernels.catalog import load_kernel
from kernels.kconfig import check_config
from kernels.kernel import Kernel
from krig import RESULTS_DIR
from krig.errors import UsageError
from krig.knobs import Knobs
from krig.reproducer import Reproducer, load_reproducer
from rigs import load_rig
from rigs.protocol import Rig
from .preflight import before_build, preflight
from .serverdrivers import server_drivers
from .serverreach import before_run


@dataclasses.dataclass(frozen=True)
class RunPlan:
    repro: Reproducer
    rig: Rig                    # the rig as loaded (rigs.load_rig); each run drives a fresh() one
    kernel: Kernel | None       # built (None until with_kernel: a validation's shared part)
    kernel_arg: str             # the kernel as asked (--kernel's text): what a group or a rerun names
    preset: str | None
    sets: dict                  # --set NAME=VALUE as given
    params: dict                # the preset and sets resolved against the rig
    collect: bool = True        # sampler and tracer (False: benchmarks)
    host: dict = dataclasses.field(default_factory=dict)     # the preflight's facts (the manifest's)
    knobs: Knobs = Knobs()      # --sysctl and --cmdline (krig/knobs.py), checked

    def checked(self, results_root: pathlib.Path, asked: list) -> "RunPlan":
        """The host checked before a kernel is built: the rig can boot the kernels asked ((option,
        text) pairs), then memory, a sparse guest's budget, CPUs, free space, programs."""
        return dataclasses.replace(self, host=before_build(self.rig, self.repro, results_root, asked, self.collect,
                                                           self.preset, self.params))

    def with_kernel(self, kernel_arg: str, log=print) -> "RunPlan":
        """The same run on this kernel (resolved, built if it must be, its config checked; the
        server ,drivers=RIG names read: workflows/serverdrivers.py)."""
        return self.with_loaded(load_kernel(kernel_arg, build=True, log=log, read_server=server_drivers), kernel_arg)

    def with_loaded(self, kernel: Kernel, kernel_arg: str) -> "RunPlan":
        """The same run on a kernel loaded already (a qualification's: by its suite), its config checked."""
        check_config(kernel, self.repro.name)
        before_run(self.rig, kernel)        # a kernel its lab server is known to be unreachable with
        return dataclasses.replace(self, kernel=kernel, kernel_arg=kernel_arg)

    def with_knobs(self, knobs: Knobs, option: str = "--cmdline") -> "RunPlan":
        """The same run with these knobs; a boot parameter on a rig that boots the machine's
        installed kernel (which no command line krig gives reaches) is refused, naming `option`."""
        only = self.rig.boots_installed_only() if knobs.cmdline else None
        if only:
            raise UsageError(f"{option} {knobs.cmdline[0]}: rig {self.rig.name} cannot give a kernel a boot parameter: "
                             f"{only}")
        return dataclasses.replace(self, knobs=knobs)

    def rechecked(self, results_root: pathlib.Path) -> "RunPlan":
        """The same plan with the host checked again (memory, disk, programs): a later run of a group."""
        return dataclasses.replace(self, host=preflight(self.rig, self.repro, results_root, self.collect, self.preset,
                                                        self.params))


def resolve(repro_name: str, rig_name: str, preset: str | None = None, sets: dict | None = None,
            collect: bool = True, rig_what: str = "--rig", knobs: Knobs = Knobs()) -> RunPlan:
    """The reproducer, the rig and the parameters, each name read once; no kernel yet."""
    repro = load_reproducer(repro_name)
    rig = load_rig(rig_name, rig_what)
    params = repro.resolve_params(preset, sets or {}, cpus=rig.host_needs().get("cpus"))
    return RunPlan(repro, rig, None, "", preset, dict(sets or {}), params, collect).with_knobs(knobs)


def plan_run(repro_name: str, rig_name: str, kernel_arg: str, preset: str | None = None, sets: dict | None = None,
             results_root: pathlib.Path = RESULTS_DIR, log=print, collect: bool = True,
             knobs: Knobs = Knobs()) -> RunPlan:
    """A run's plan: every name resolved once, the host checked before the kernel is built (bad
    input: UsageError before anything starts)."""
    plan = resolve(repro_name, rig_name, preset, sets, collect, knobs=knobs)
    return plan.checked(results_root, [("--kernel", kernel_arg)]).with_kernel(kernel_arg, log)
