"""Kernels under test: the catalog (kernels/<name>.toml), building them from
source with patch series and config fragments, and bisecting between them.

    catalog.py      load_kernel(name) -> Kernel: distro packages and built kernels
    kernel.py       the Kernel record a rig boots
    spec.py         a kernel toml resolved to a build spec, its config and cache key
    incremental.py  one reused tree per source origin: patch, configure, make, install
    build.py        `make kernel` / `make kernels` / `make kernel-status`
    bisect.py       `make bisect` / `make bisect-demo`, with a reproducer as the oracle
    demo_repo.py    the small 6.1 history with one injected bad commit for the demo

This package never imports krig's runner (workflows.run, workflows.check, workflows.cli):
bisect drives runs through the `krig run` command.
"""
