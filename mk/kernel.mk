# Kernels built from source, and bisection with a reproducer as the oracle.
# Included by the top Makefile (which defines PY, KERNEL, REPRO, PRESET and
# the `python` and `helpers` targets). Builds run under `nice -n 10`.
#
#   make kernel KERNEL=linux-6.1      build one kernel (cached: never built twice)
#   make kernels                      build every kernels/*.toml that is not the distro's
#   make kernel-status                cache key and state of each buildable kernel
#   make ci-kernels                   the kernels `make test` builds first (tiny-6.1, also the simulated lab
#                                     server's kexec kernel, and its rmdir, cap and per-bucket variants)
#   make bisect GOOD=<ref> BAD=<ref> REPRO=<name> [PRESET=..] [TREE=<git tree>] [REPEAT=n] [LIKE=linux-6.1] [METRIC=<name>]
#   make bisect-demo [METRIC=<name>] [LIKE=..]   make a 6-commit 6.1 history with one bad commit and bisect it
#                                     (each step with LIKE's config; unless given: tiny-6.1 for the demo, linux-6.1 for
#                                     make bisect, the defaults in workflows/bisect.py)
TREE ?=
GOOD ?=
BAD ?=
REPEAT ?= 1
LIKE ?=
METRIC ?=

# The kernels `make test` builds and judges (tests/kernels/test_kbuild.py).
CI_KERNELS := tiny-6.1 tiny-6.1-rmdir-keeps-children tiny-6.1-negative-dentry-cap tiny-6.1-negative-dentry-per-bucket

.PHONY: kernel kernels kernel-status ci-kernels bisect bisect-demo

# thin aliases of `krig kernel ...` and `krig bisect ...`
kernel: python
	$(KRIG) kernel build $(KERNEL)

kernels: python
	$(KRIG) kernel build $$($(PY) -c 'from kernels.build import buildable_kernels as b; print(*[n for n in b() if not n.startswith("bisect-")])')

ci-kernels: python
	@$(KRIG) kernel build $(CI_KERNELS)

kernel-status: python
	$(KRIG) kernel status

bisect: helpers python
	@if [ -z "$(GOOD)" ] || [ -z "$(BAD)" ]; then \
		echo "usage: make bisect GOOD=<ref> BAD=<ref> REPRO=<name> [PRESET=..] [TREE=<git tree>] [REPEAT=n] [LIKE=<kernel>] [METRIC=<name>]"; exit 2; fi
	$(KRIG) bisect run --good "$(GOOD)" --bad "$(BAD)" --repro "$(REPRO)" --repeat "$(REPEAT)" \
		$(if $(LIKE),--like "$(LIKE)") $(if $(TREE),--tree "$(TREE)") $(if $(PRESET),--preset "$(PRESET)") $(if $(METRIC),--metric "$(METRIC)")

bisect-demo: helpers python
	$(KRIG) bisect demo --repeat "$(REPEAT)" $(if $(LIKE),--like "$(LIKE)") $(if $(METRIC),--metric "$(METRIC)")
