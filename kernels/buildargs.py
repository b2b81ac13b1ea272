"""The arguments of `krig kernel ...` and `python -m kernels.build ...`, apart from the build
itself: `krig` builds its parser from this without importing the build (kernels/build.py)."""


def add_commands(sub) -> None:
    """`build` and `status`; each names its handler in kernels.build (krig.errors.handler)."""
    b = sub.add_parser("build", help="build kernels from kernels/<name>.toml (a no-op when the cache has them; "
                       "make runs in a bubblewrap sandbox, KRIG_BUILD_SANDBOX=off to build without it)")
    b.add_argument("names", nargs="+", metavar="NAME", help="kernel names (kernels/<NAME>.toml; see `krig list`)")
    b.add_argument("--force", action="store_true", help="rebuild even if the cache has it (default: use the cache)")
    b.set_defaults(handler="kernels.build:cmd_build")
    s = sub.add_parser("status", help="cache key and build state of buildable kernels")
    s.add_argument("names", nargs="*", metavar="NAME", help="kernel names (default: every buildable kernel)")
    s.set_defaults(handler="kernels.build:cmd_status")
