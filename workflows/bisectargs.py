"""The arguments of `krig bisect ...` and `python -m workflows.bisect ...`, apart from the bisection
itself: `krig` builds its parser from this without importing the runner (workflows/bisect.py)."""
from krig import DEFAULT_RIG
from .argcheck import ascii_int, add_knobs
from .clihelp import RIG_HELP

# The demo builds every step with the kernel `make test` builds (tiny-6.1 carries every
# reproducer's fragment): on a machine that ran `make test` it needs no defconfig build.
DEMO_LIKE = "tiny-6.1"


def add_commands(sub, oracle_step: bool = False) -> None:
    """`run` and `demo`, as `krig bisect ...` and `python -m workflows.bisect ...` (which also has
    `oracle`, the one step `git bisect run` calls)."""
    r = sub.add_parser("run", help="bisect a git tree between a good and a bad commit with a reproducer")
    r.add_argument("--tree", metavar="DIR", help="git tree of the kernel (default: the demo repository, if made)")
    r.add_argument("--good", required=True, metavar="REF", help="a commit the reproducer passes on (required)")
    r.add_argument("--bad", required=True, metavar="REF", help="a commit the reproducer fails on (required)")
    r.add_argument("--repro", required=True, metavar="NAME", help="the reproducer that judges each step (required)")
    r.add_argument("--preset", metavar="NAME", help="the reproducer's preset (default: its defaults)")
    r.add_argument("--repeat", type=ascii_int, default=1, metavar="N",
                   help="runs per step; the step's answer is their strict majority (default 1)")
    r.add_argument("--like", default="linux-6.1", metavar="KERNEL",
                   help="kernel whose config and fragments each step uses (default linux-6.1)")
    r.add_argument("--rig", default=DEFAULT_RIG, metavar="RIG", help=f"{RIG_HELP} (default qemu-default)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a reproducer parameter (repeatable; default none)")
    r.add_argument("--metric", metavar="NAME",
                   help="bisect on this metric's value instead of the verdict (default: the verdict)")
    add_knobs(r, side=" of every step")
    r.set_defaults(handler="workflows.bisect:cmd_run")
    d = sub.add_parser("demo", help="make a small 6.1 history with one injected bad commit and bisect it")
    d.add_argument("--repro", default="unlink-dentry-growth", metavar="NAME",
                   help="the reproducer that judges each step (default unlink-dentry-growth)")
    d.add_argument("--preset", default="smoke", metavar="NAME", help="the reproducer's preset (default smoke)")
    d.add_argument("--repeat", type=ascii_int, default=1, metavar="N", help="runs per step (default 1)")
    d.add_argument("--like", default=DEMO_LIKE, metavar="KERNEL",
                   help=f"kernel whose config and fragments each step uses (default {DEMO_LIKE})")
    d.add_argument("--metric", metavar="NAME",
                   help="bisect on this metric's value instead of the verdict (default: the verdict)")
    d.set_defaults(handler="workflows.bisect:cmd_demo")
    if oracle_step:
        o = sub.add_parser("oracle", help="one step (called by git bisect run)")
        o.add_argument("state", help="the bisection's state.json")
        o.set_defaults(handler="workflows.bisect:cmd_oracle")
