"""Kernels under test: the catalog (kernels/<name>.toml and the other forms --kernel takes),
building them from source with patch series and config fragments, and bisecting between them.

    catalog.py      load_kernel(name) -> Kernel: the text read once, passed to the loader of its kind
    given.py        the --kernel text, read here only: a name, a path, TREE@REF, their options, its
                    public and pinned forms; the Loader protocol
    prebuilt.py     a built tree or an image file, built elsewhere
    derived.py      TREE@REF, or a kernel with a series or a server's drivers on top, built on demand
    named.py        a plain name: the distro's kernel, or one krig built
    distro.py       Debian's packaged kernel, installed on this machine
    definition.py   kernels/<name>.toml: found, read, `extends` resolved, its fields
    spec.py         a definition made a build spec: what decides the build, its cache key
    kernel.py       the Kernel record a rig boots
    kconfig.py      fragments and .config files; a kernel's config against a reproducer's
    digest.py       the hashes naming things in the cache; gitrepo.py: git, a tree's origin
    incremental.py  one reused tree per source origin: patch, configure, make, install
    build.py        `make kernel` / `make kernels` / `make kernel-status`
    demo_repo.py    the small 6.1 history with one injected bad commit for the bisect demo

This package never imports krig's runner (workflows.run, workflows.check, workflows.cli):
bisect drives runs through the `krig run` command.
"""
