# krig: `make setup` then `make test`. Every target is listed by `make help`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
KRIG := $(VENV)/bin/krig
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

REPRO ?= selftest-pass
RIG ?= qemu-default
KERNEL ?= distro
PRESET ?=
SET ?=
RUN ?= results/latest
PYTEST_ARGS ?=
# make test's pytest-xdist workers: a file's tests stay on one worker (tests/conftest.py)
TEST_JOBS ?= 2
SUITE ?= qualify/smoke.toml qualify/ram-scaling.toml

APT_PACKAGES := qemu-system-x86 qemu-utils linux-image-amd64 trace-cmd kernelshark xfsprogs fio \
	ipmitool openipmi busybox-static inotify-tools gcc make libc6-dev kmod cpio zstd time file \
	python3 python3-venv python3-pip openssh-client openssh-server procps iproute2 git \
	bc bison flex libelf-dev libssl-dev dwarves linux-source-6.1 xz-utils patch rsync bubblewrap ccache \
	libopenipmi-dev libzstd-dev kexec-tools debconf \
	chromium xvfb xdotool \
	mmdebstrap ovmf grub-efi-amd64-bin mtools dosfstools fdisk e2fsprogs \
	libvirt-daemon libvirt-clients libvirt-dev pkg-config python3-dev ser2net openssl \
	postgresql

CFLAGS := -O2 -Wall -static
HELPER_SRCS := $(wildcard reproducers/*/*.c)
HELPERS := $(foreach s,$(HELPER_SRCS),$(dir $(s))bin/$(basename $(notdir $(s))))
# the trace reader's page walk in C (analysis/trace/kbuffer.py loads it with ctypes)
KWALK := analysis/trace/_kwalk.so

.PHONY: help setup apt qemu-user lab-user python helpers lint test test-lab test-all test-prereqs test-fast test-bisect run list check bench clean qualify seed-scale docs-pictures

help:
	@echo "make setup                 install apt + Python dependencies (idempotent), build helpers"
	@echo "make qemu-user             the system user krig-qemu QEMU runs as when krig is root (in setup)"
	@echo "make lab-user              the system user krig-lab simulated lab servers run as when krig is root (in setup)"
	@echo "make test                  self-tests: every feature end to end on real guests and lab servers (CI's)"
	@echo "make test-lab              the long lab end-to-end runs make test leaves out (marked testlab)"
	@echo "make test-all              make test and make test-lab in one session"
	@echo "make test-fast             the inner loop (a few minutes): no guest, no build, no kernel source; the static checks"
	@echo "make lint                  the static checks alone: ruff, mypy, shellcheck (make test-fast runs them too)"
	@echo "make test-bisect           krig bisect end to end alone (also in make test; 10-20 min)"
	@echo "make run REPRO=.. [RIG=.. KERNEL=.. PRESET=.. SET='k=v ..']   one run, prints the verdict"
	@echo "make check [RUN=dir]       re-judge a run directory (default results/latest)"
	@echo "make list                  reproducers, presets, rigs, kernels"
	@echo "make qualify [SUITE=file..] qualification suites (default qualify/smoke.toml qualify/ram-scaling.toml)"
	@echo "make seed-scale [SCALE_RIG=name]   the seed reports' scale points (qualify/seed-scale.toml; hours of TCG, resumable)"
	@echo "make docs-pictures         the pictures and the example reply docs/ ships, made again from real runs"
	@echo "make bench                 benchmarks (rig overhead vs virtme-ng, trace reader vs trace-cmd, the results history)"
	@echo "make ci-kernels            build the small kernels make test boots (cached)"
	@echo "make test-prereqs          the CI kernels and, beside them, the lab server's disk image (cached)"
	@echo "make kernel KERNEL=name    build a kernel from kernels/<name>.toml (cached)"
	@echo "make kernels               build every buildable kernel; make kernel-status shows the cache"
	@echo "make bisect GOOD=.. BAD=.. REPRO=.. [PRESET=.. TREE=.. REPEAT=n METRIC=..]   git bisect with krig's verdict (or a metric)"
	@echo "make bisect-demo [METRIC=.. LIKE=..]   bisect a small local 6.1 history with one injected bad commit"
	@echo "make clean                 remove build outputs (keeps results/)"

setup: apt qemu-user lab-user python helpers

# QEMU's own user when krig runs as root (rigs/qemu/confine.py): a system user without a
# home or a login shell, made once, as Debian's own services do
QEMU_USER := krig-qemu
qemu-user:
	@getent passwd $(QEMU_USER) >/dev/null || $(SUDO) useradd --system --user-group --no-create-home \
		--home-dir /nonexistent --shell /usr/sbin/nologin --comment "krig's QEMU" $(QEMU_USER)

# the simulated lab servers' own user when krig runs as root (rigs/labsim/user.py): not
# krig-qemu, so that a QEMU rig guest that escapes reaches no simulated server
LAB_USER := krig-lab
lab-user:
	@getent passwd $(LAB_USER) >/dev/null || $(SUDO) useradd --system --user-group --no-create-home \
		--home-dir /nonexistent --shell /usr/sbin/nologin --comment "krig's simulated lab servers" $(LAB_USER)

apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		echo "kexec-tools kexec-tools/load_kexec boolean false" | $(SUDO) debconf-set-selections; \
		$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	else echo "apt packages: all installed"; fi

python: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

helpers: $(HELPERS) $(KWALK)

$(KWALK): analysis/trace/kwalk.c analysis/trace/kcount.c analysis/trace/kwalk.h
	$(CC) -O2 -Wall -shared -fPIC -pthread -o $@ $(filter %.c,$^) -lzstd

define helper_rule
$(dir $(1))bin/$(basename $(notdir $(1))): $(1)
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS) -o $$@ $$<
endef
$(foreach s,$(HELPER_SRCS),$(eval $(call helper_rule,$(s))))

# The suite's tiers (tests/tiers.py, tests/README.md): `--tier test` deselects the tests marked
# testlab, `--tier lab` runs only them; PYTEST_ARGS (a -m of its own included) narrows within the tier.
# pytest exit 5 means no test ran: that is a failure here, never a pass.
define run_tier
@$(PY) -m pytest -n $(TEST_JOBS) --dist loadgroup --no-loadscope-reorder --durations=60 --tier $(1) $(PYTEST_ARGS); \
rc=$$?; if [ $$rc -eq 5 ]; then echo "make $@: pytest collected no tests" >&2; exit 1; fi; exit $$rc
endef

test: helpers python test-prereqs
	$(call run_tier,test)

test-lab: helpers python test-prereqs
	$(call run_tier,lab)

test-all: helpers python test-prereqs
	$(call run_tier,all)

# Before the tests: the CI kernels (cached; a no-op the second time) and, beside them, the lab
# server's disk image (rigs/labsim/image.py, cached; mostly downloads and dpkg, so it costs the
# builds little). A kernel that fails to build stops `make test` with one line naming it and
# the error; an image that could not be built is one line (its log: build/labsim-image.log)
# and the tests go on: the lab server's tests then fail, saying why.
test-prereqs: helpers python
	@mkdir -p build; $(PY) rigs/labsim/image.py >build/labsim-image.log 2>&1 & img=$$!; \
	$(KRIG) kernel build $(CI_KERNELS); rc=$$?; \
	wait $$img || echo "make test: the lab server's image was not built: $$(tail -n 1 build/labsim-image.log)" >&2; \
	exit $$rc

# krig bisect end to end: real incremental builds of a short demo history and a guest per step
test-bisect: helpers python ci-kernels
	$(PY) -m pytest -m bisect $(PYTEST_ARGS)

lint: python
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/shellcheck -x $$(git ls-files '*.sh') .ci/run

# the inner loop: nothing that boots, builds, starts a BMC or a coordinator, or unpacks the kernel source
FAST_MARKS := not guest and not smoke and not ipmi and not kbuild and not labsim and not redfish and not labgrid and not ksource
test-fast: helpers python
	$(PY) -m pytest -n auto --tier test -m "$(FAST_MARKS)" $(PYTEST_ARGS)

run: helpers python
	$(KRIG) run $(REPRO) --rig $(RIG) --kernel $(KERNEL) $(if $(PRESET),--preset $(PRESET)) $(foreach s,$(SET),--set $(s))

check: python
	$(KRIG) check $(RUN)

list: python
	$(KRIG) list

# Each suite writes results/qualify/<suite>/ (suite.json, junit.xml, qualify.html, signoff.txt);
# interrupted, the same command finishes it without redoing finished runs.
qualify: helpers python
	@rc=0; for s in $(SUITE); do $(KRIG) qualify $$s || rc=$$?; done; exit $$rc

# The seed reports' scale points (qualify/seed-scale.toml), on its rigs or every entry on SCALE_RIG:
# hours of TCG here, minutes on a lab server; interrupted, the same command resumes. SCALE_RIG is
# read from the environment (one word, quoted: never options) and checked, with the suite's rigs
# and the host, before the kernel is built.
export SCALE_RIG
seed-scale: helpers python
	@if [[ -n "$$SCALE_RIG" && ! "$$SCALE_RIG" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$$ ]]; then \
		echo "make seed-scale: SCALE_RIG='$$SCALE_RIG' is not a rig name (letters, digits, . _ -;" \
			"a rig of rigs/, ~/.config/krig/rigs or KRIG_RIG_PATH)" >&2; exit 2; fi
	$(KRIG) qualify qualify/seed-scale.toml --check $${SCALE_RIG:+--rig "$$SCALE_RIG"}
	$(KRIG) kernel build tiny-6.1-negative-dentry-per-bucket
	$(KRIG) qualify qualify/seed-scale.toml $${SCALE_RIG:+--rig "$$SCALE_RIG"}

bench: helpers python
	$(PY) bench/run_all.py

# docs/report.png, docs/negative-dentry-flood-cap70.png and docs/examples/reply.* made again from real runs (docs/pictures.py)
docs-pictures: helpers python ci-kernels
	$(PY) docs/pictures.py

clean:
	rm -rf reproducers/*/bin build $(KWALK)

include mk/kernel.mk
