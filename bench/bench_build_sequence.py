"""base -> series -> base -> other series, all in tiny-6.1's build tree: for each step, the
objects make compiled (CC lines of that build's log), the minutes it took and the load.

    KRIG_CACHE=<a cache whose tiny-6.1 tree is built> python bench/bench_build_sequence.py SERIES OTHER

SERIES and OTHER are series from outside krig's tree (an mbox or a directory of patches). The
base is rebuilt each time (--force); each series' kernel is removed from the cache first, so
every step builds (docs/measurements.md, kernel builds beside a series).
"""
import json
import os
import pathlib
import re
import shutil
import sys
import time

from kernels import derived, given
from kernels.digest import cache_key
from kernels.incremental import build_kernel
from kernels.spec import build_inputs, kernel_cache, resolve_spec

BASE = "tiny-6.1"


def compiled(log: str) -> int:
    return len(re.findall(r"(?m)^\s+CC\s", pathlib.Path(log).read_text(errors="replace")))


def step(label: str, series: str | None) -> dict:
    quiet = lambda m: None      # noqa: E731
    load0, t0 = os.getloadavg()[0], time.monotonic()
    if series is None:
        meta = build_kernel(resolve_spec(BASE), force=True, log=quiet)
    else:
        arg = f"{BASE},series={series}"
        g = given.parse(arg)
        spec, _, _ = derived.derived_spec(g, log=quiet)
        shutil.rmtree(kernel_cache(cache_key(build_inputs(spec))), ignore_errors=True)
        kernel = derived.derived_kernel(g, build=True, log=quiet)
        meta = json.loads((kernel.image.parent / "build.json").read_text())
    took = (time.monotonic() - t0) / 60
    return {"step": label, "compiled": compiled(meta["log"]), "minutes": round(took, 2),
            "load": f"{load0:.1f}-{os.getloadavg()[0]:.1f}", "layer": meta.get("layer", False)}


def main(argv) -> int:
    series, other = argv
    for label, s in (("base", None), ("series", series), ("base", None), ("other series", other)):
        print(json.dumps(step(label, s)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
