"""Building kernels from source: kernels/<name>.toml with source = "linux-source" or "git".

A built kernel lives in a cache directory keyed by a hash of everything that
goes into it (kernels/spec.py), so the same kernel is never built twice.

    krig kernel build NAME      (make kernel KERNEL=NAME; also python -m kernels.build build NAME)
    krig kernel status [NAME..] (make kernel-status)
"""
import argparse
import pathlib
import sys

from krig import KERNEL_DIR
from krig.config import load_toml
from krig.errors import UsageError, guarded, handler
from .buildargs import add_commands
from .definition import is_distro, kernel_toml
from .digest import cache_key
from .incremental import build_kernel
from .spec import build_inputs, build_meta, kernel_cache, resolve_spec


def status(name: str) -> dict:
    spec = resolve_spec(name)
    key = cache_key(build_inputs(spec))
    meta = build_meta(key)
    out = {"name": name, "key": key, "built": meta is not None, "dir": str(kernel_cache(key))}
    if meta is not None:
        out.update({k: v for k, v in meta.items() if k in ("release", "seconds", "finished", "incremental")})
    return out


def buildable_kernels(kernel_dir: pathlib.Path = KERNEL_DIR) -> list:
    out = []
    for p in sorted(kernel_dir.glob("*.toml")):
        try:
            data = load_toml(p)
        except UsageError:
            continue
        if not is_distro(data):
            out.append(p.stem)
    return out


def say(msg: str) -> None:
    print(msg, flush=True)


def buildable(name: str):
    """The spec of kernels/<name>.toml if krig builds it; one line naming it otherwise."""
    path = kernel_toml(name)
    if not path.exists():
        raise UsageError(f"{name}: unknown kernel (no kernels/{name}.toml); buildable: {', '.join(buildable_kernels()) or '(none)'}")
    data = load_toml(path)
    if is_distro(data):
        raise UsageError(f"{name}: kernels/{name}.toml is the distro's packaged kernel, nothing to "
                         f"build; buildable: {', '.join(buildable_kernels()) or '(none)'}")
    return resolve_spec(name)


def build(name: str, force: bool = False, log=say) -> dict:
    return build_kernel(buildable(name), force=force, log=log)


def cmd_build(a) -> int:
    for n in a.names:           # every name checked before the first build starts
        buildable(n)
    for n in a.names:
        meta = build(n, force=a.force)
        print(f"kernel {n}: {meta['release']} in {meta['dir']}")
    return 0


def cmd_status(a) -> int:
    for n in a.names:
        buildable(n)
    for n in a.names or buildable_kernels():
        st = status(n)
        state = f"built {st['release']}" if st["built"] else f"not built (krig kernel build {n})"
        print(f"{n:40s} {st['key']}  {state}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels.build", description=__doc__.split("\n\n")[0])
    add_commands(ap.add_subparsers(dest="cmd", required=True))
    a = ap.parse_args(argv)
    return guarded(lambda: handler(a.handler)(a))


if __name__ == "__main__":
    sys.exit(main())
