# fstrace build: CO-RE BPF objects, skeletons, and the collector.
# `make` builds everything; `make vmlinux` regenerates vmlinux/<arch>/vmlinux.h from BTF; `make ARCH=arm64`
# cross-builds the collector and its BPF objects into build/arm64/.

HOST_ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
ARCH ?= $(HOST_ARCH)
CLANG ?= clang
BPFTOOL ?= bpftool
BTF ?= /sys/kernel/btf/vmlinux
# The native build goes to build/; another architecture's (`make ARCH=arm64` on an x86 host) to build/<arch>/,
# with the cross compiler of Debian's gcc-<triplet> and the static libraries of the :<arch> -dev packages
# (scripts/setup.sh cross-arm64). CC given on the command line or in the environment wins.
ifeq ($(ARCH),$(HOST_ARCH))
OUT := build
else
OUT := build/$(ARCH)
CROSS_COMPILE := $(patsubst %,%-linux-gnu-,$(subst arm64,aarch64,$(subst x86,x86_64,$(ARCH))))
ifeq ($(origin CC),default)
CC := $(CROSS_COMPILE)gcc
endif
endif

BPF_SRCS := $(wildcard bpf/*.bpf.c)
BPF_OBJS := $(patsubst bpf/%.bpf.c,$(OUT)/%.bpf.o,$(BPF_SRCS))
SKELS := $(patsubst bpf/%.bpf.c,$(OUT)/%.skel.h,$(BPF_SRCS))
# the plain build of every object but ksyms (which has a fallback of its own): for kernels without BPF atomic
# exchange, compare-and-swap and fetch-and-add, bpf_loop and syscall programs (bpf/flight.bpf.h); the collector
# chooses it by a test load (user/tiers.c bpf_build_select) and loads its bytes through the same skeletons
PLAIN_SKELS := $(patsubst bpf/%.bpf.c,$(OUT)/%.plain.skel.h,$(filter-out bpf/ksyms.bpf.c,$(BPF_SRCS)))
BPF_HDRS := $(wildcard bpf/*.h) vmlinux/$(ARCH)/vmlinux.h
USER_SRCS := $(wildcard user/*.c)
USER_HDRS := $(wildcard user/*.h)

BPF_CFLAGS := -g -O2 -Wall -target bpf -mcpu=v3 -D__TARGET_ARCH_$(ARCH) -Ivmlinux/$(ARCH) -Ibpf
USER_CFLAGS := -g -O2 -Wall -Wextra -Wno-unused-parameter -I$(OUT) -Ibpf
# Static so the collector can be copied to a target box that has no libbpf (docs/usage.md, "The collector on
# a target box"); the results header records which it is. A failed static link is an error, not a silent dynamic
# collector: `make STATIC=0` asks for a dynamic one explicitly.
STATIC ?= 1
ifeq ($(STATIC),0)
LINK_LIBS := -ljson-c -lbpf -lelf -lz -lm
STATIC_FLAG := 0
else
LINK_LIBS := -static -ljson-c -lbpf -lelf -lz -lzstd -lm
STATIC_FLAG := 1
endif

.PHONY: all clean vmlinux test test-unit test-c install deb bench-overhead bench-helpers docs-overhead-run vmtest docs-seeds docs-vmtest docs-findings FORCE
all: $(OUT)/fstrace-collect

$(OUT):
	mkdir -p $@

$(OUT)/%.bpf.o: bpf/%.bpf.c $(BPF_HDRS) | $(OUT)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(OUT)/%.plain.bpf.o: bpf/%.bpf.c $(BPF_HDRS) | $(OUT)
	$(CLANG) $(BPF_CFLAGS) -DFST_PLAIN_BPF -c $< -o $@

$(OUT)/%.plain.skel.h: $(OUT)/%.plain.bpf.o
	$(BPFTOOL) gen skeleton $< name $*_bpf_plain > $@.tmp && mv $@.tmp $@

$(OUT)/%.skel.h: $(OUT)/%.bpf.o
	$(BPFTOOL) gen skeleton $< > $@.tmp && mv $@.tmp $@

# linked under a temporary name and renamed, so a collector that is running keeps its binary
$(OUT)/fstrace-collect: $(USER_SRCS) $(USER_HDRS) $(SKELS) $(PLAIN_SKELS) bpf/records.h bpf/kernel_state.h $(OUT)/link-mode | $(OUT)
	$(CC) $(USER_CFLAGS) -DFSTRACE_STATIC=$(STATIC_FLAG) $(USER_SRCS) -o $@.tmp $(LINK_LIBS) || { \
		rm -f $@.tmp; \
		if [ $(STATIC_FLAG) = 1 ]; then echo "make: linking the static collector failed (static json-c, libbpf, libelf," \
			"zlib, zstd and libc are in libjson-c-dev libbpf-dev libelf-dev zlib1g-dev libzstd-dev libc6-dev);" \
			"make STATIC=0 builds a dynamic one that cannot be copied to a box without libbpf" >&2; fi; \
		exit 1; }
	mv $@.tmp $@

FORCE:

# changes only when STATIC does, so switching it relinks the collector and nothing else
$(OUT)/link-mode: FORCE | $(OUT)
	@echo $(STATIC_FLAG) | cmp -s - $@ || echo $(STATIC_FLAG) > $@

# from BTF (default: the running kernel's), or with KERNEL_PKG=<a Debian linux-image package unpacked with dpkg-deb
# -x> from that kernel's image and the modules whose types bpf/ reads (scripts/vmlinux_h.py): another architecture's
vmlinux:
	mkdir -p vmlinux/$(ARCH)
ifdef KERNEL_PKG
	$(PYTHON) -m scripts.vmlinux_h $(KERNEL_PKG) vmlinux/$(ARCH)/vmlinux.h
else
	$(BPFTOOL) btf dump file $(BTF) format c > vmlinux/$(ARCH)/vmlinux.h.tmp
	mv vmlinux/$(ARCH)/vmlinux.h.tmp vmlinux/$(ARCH)/vmlinux.h
endif

clean:
	rm -rf $(OUT)

# `make install [PREFIX=/usr/local] [DESTDIR=]`: the collector, the fstrace command (scripts/fstrace-installed,
# which runs the Python package installed under $(LIBDIR) with Debian's Python), the manual pages and the bash
# completion and the systemd unit of `fstrace serve`. The package keeps the source tree's layout (cli/, bpf/records.h, build/fstrace-collect), so it runs
# unchanged; its collector is a relative link to the installed one.
PREFIX ?= /usr/local
BINDIR := $(PREFIX)/bin
LIBDIR := $(PREFIX)/lib/fstrace
MAN8DIR := $(PREFIX)/share/man/man8
COMPLETIONDIR := $(PREFIX)/share/bash-completion/completions
# the unit of `fstrace serve` (systemd/fstrace-serve.service.in, which gets the command's path); Debian's
# package puts it under /lib/systemd/system
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
PYTHON ?= /usr/bin/python3
PY_PACKAGES := analysis cli common workloads
# the package's files: its modules and what they read beside them (analysis/flamegraph.js)
PACKAGE_FILES := $(foreach d,$(PY_PACKAGES),$(wildcard $(d)/*.py $(d)/*.js))
MAN_PAGES := man/fstrace.8 man/fstrace-collect.8

# the completion is generated from the command line's parser (scripts/completion.py): it offers what it takes
$(OUT)/fstrace.bash: scripts/completion.py $(foreach d,$(PY_PACKAGES),$(wildcard $(d)/*.py)) | $(OUT)
	$(PYTHON) -m scripts.completion > $@.tmp && mv $@.tmp $@

install: $(OUT)/fstrace-collect $(OUT)/fstrace.bash
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/bpf $(DESTDIR)$(LIBDIR)/build $(DESTDIR)$(MAN8DIR) \
		$(DESTDIR)$(COMPLETIONDIR) $(DESTDIR)$(SYSTEMDUNITDIR)
	install -m 755 $(OUT)/fstrace-collect $(DESTDIR)$(BINDIR)/fstrace-collect
	install -m 755 scripts/fstrace-installed $(DESTDIR)$(BINDIR)/fstrace
	for f in $(PACKAGE_FILES); do install -D -m 644 $$f $(DESTDIR)$(LIBDIR)/$$f || exit 1; done
	install -m 644 bpf/records.h $(DESTDIR)$(LIBDIR)/bpf/records.h
	sed -n 's/^VENV_PACKAGES="\(.*\)"/\1/p' scripts/setup.sh > $(DESTDIR)$(LIBDIR)/timeline-packages
	chmod 644 $(DESTDIR)$(LIBDIR)/timeline-packages
	ln -sfn ../../../bin/fstrace-collect $(DESTDIR)$(LIBDIR)/build/fstrace-collect
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MAN8DIR)/
	install -m 644 $(OUT)/fstrace.bash $(DESTDIR)$(COMPLETIONDIR)/fstrace
	sed 's|@BINDIR@|$(BINDIR)|g' systemd/fstrace-serve.service.in > $(DESTDIR)$(SYSTEMDUNITDIR)/fstrace-serve.service
	chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/fstrace-serve.service

# `make deb [DEB_ARCH=amd64|arm64]`: the Debian package (debian/, debhelper) in build/deb/, built by
# dpkg-buildpackage from a copy of the sources (so the checkout's build/ and debian/ stay as they are), with
# debian/changelog written there for the collector's version (user/env.h, the one place it is set).
# DEB_ARCH other than the build machine's cross-builds (dpkg-buildpackage -a; debian/rules passes ARCH and CC);
# the package's tests are tests/test_deb.py (root, BPF), not the build's (nocheck).
DEB_ARCH ?= $(shell dpkg --print-architecture)
DEB_SOURCES := Makefile analysis bpf cli common debian man scripts systemd user vmlinux workloads
VERSION = $(shell sed -n 's/^\#define FSTRACE_VERSION "\(.*\)"/\1/p' user/env.h)
deb:
	rm -rf $(OUT)/deb/src && mkdir -p $(OUT)/deb/src/fstrace
	cp -a $(DEB_SOURCES) $(OUT)/deb/src/fstrace/
	find $(OUT)/deb/src/fstrace -name __pycache__ -prune -exec rm -rf {} +
	printf 'fstrace (%s) unstable; urgency=medium\n\n  * Built from the sources by make deb.\n\n -- %s  %s\n' \
		'$(VERSION)' "$$(sed -n 's/^Maintainer: //p' debian/control)" \
		"$$(date -R -d @$${SOURCE_DATE_EPOCH:-$$(date +%s)})" > $(OUT)/deb/src/fstrace/debian/changelog
	cd $(OUT)/deb/src/fstrace && DEB_BUILD_OPTIONS="noddebs nocheck $${DEB_BUILD_OPTIONS:-}" \
		CC=$$(dpkg-architecture -a$(DEB_ARCH) -qDEB_HOST_GNU_TYPE 2>/dev/null)-gcc dpkg-buildpackage -a$(DEB_ARCH) -b -us -uc
	mv $(OUT)/deb/src/fstrace_$(VERSION)_$(DEB_ARCH).deb $(OUT)/deb/
	@echo "make: $(OUT)/deb/fstrace_$(VERSION)_$(DEB_ARCH).deb"

test:
	./scripts/test.sh

# the unit lane alone (stored results and fixtures, no root, no BPF): what a change to the analysis needs first
test-unit:
	./scripts/test.sh --lane unit

# Benchmarks (not tests): tracing overhead, events/s, analysis speed. Writes bench-results/*.json.
# what each helper and map operation the handlers use costs (docs/overhead.md)
bench-helpers:
	./scripts/setup.sh collector
	$(MAKE) $(OUT)/bench-helpers
	$(OUT)/bench-helpers

$(OUT)/bench_helpers.bpf.o: scripts/bench_helpers.bpf.c vmlinux/$(ARCH)/vmlinux.h | $(OUT)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(OUT)/bench-helpers: scripts/bench_helpers.c $(OUT)/bench_helpers.skel.h $(OUT)/link-mode | $(OUT)
	$(CC) $(USER_CFLAGS) $< -o $@ $(LINK_LIBS)

# what tracing costs and whether the design targets are met (docs/overhead.md): prints it and writes BENCH_OUT
BENCH_OUT ?= bench-results/overhead.json
bench-overhead: all
	./scripts/setup.sh
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bpftrace libbpf-tools >/dev/null
	build/venv/bin/python3 -m scripts.bench_overhead --out $(BENCH_OUT) $(BENCH_ARGS)

# docs/generated/overhead-run.md, the report of a bench-overhead run linked from docs/overhead.md, and README's
# overhead table: rendered from the run's JSON (BENCH_OUT), whose copy is kept beside it (tests/test_overhead.py
# renders both again and compares)
docs-overhead-run:
	mkdir -p docs/generated
	cp $(BENCH_OUT) docs/generated/overhead-run.json.tmp && mv docs/generated/overhead-run.json.tmp docs/generated/overhead-run.json
	$(PYTHON) -m scripts.docs_generated overhead docs/generated/overhead-run.json --readme README.md \
		-o docs/generated/overhead-run.md

# The fentry/kprobe tier on the kernel matrix (Debian 6.1 and 6.12, x86_64 and arm64) under QEMU (one vCPU under TCG, two under KVM); prints the table of
# kernel x probe x tier chosen x fired / checked, the request boundaries' counts against fio's and each boundary
# program's bpf_stats beside the syscall tracepoints', and the ns per call of an untraced task's getppid and
# preads with nothing, fentry and the syscall tracepoints attached (the test suite runs the same guests through
# tests/test_vm.py).
# VMTEST_ARGS: e.g. --kernels 6.12, --guest-mode churn, --smp 2, --accel tcg.
vmtest: all
	./scripts/setup.sh --test
	build/venv/bin/python3 -m scripts.vmtest $(VMTEST_ARGS)

# Generated pages (docs/generated/, scripts/docs_generated.py): one run's whole output, rendered from its results,
# linked from the docs pages that quote a short table of it. The runs load BPF and mount images (root); their
# results stay in DOCS_RUNS, and DOCS_RERUN=0 renders the pages again from them without running.
# `make docs-seeds`: every seed preset at SEEDS_ARGS (a small dataset, one run per cell) -> docs/generated/seeds-*.md.
# `make docs-vmtest [VMTEST_ARGS=...]`: `make vmtest`'s guests -> docs/generated/vmtest-run.md.
# `make docs-findings`: docs/findings.md's commands (scripts/docs_generated.py FINDINGS) -> docs/generated/findings-run.md.
DOCS_RUNS ?= build/docs-runs
DOCS_RERUN ?= 1
SEEDS_PRESETS ?= seed000 seed001 seed002 seed004
SEEDS_ARGS ?= --runs 1 --no-baseline --scale 0.05
docs-seeds: all
	@for p in $(SEEDS_PRESETS); do \
		if [ "$(DOCS_RERUN)" = 1 ]; then rm -rf $(DOCS_RUNS)/$$p && mkdir -p $(DOCS_RUNS) && \
			./fstrace bench --preset $$p $(SEEDS_ARGS) -o $(DOCS_RUNS)/$$p > /dev/null || exit 1; fi; \
		build/venv/bin/python3 -m scripts.docs_generated seeds $(DOCS_RUNS)/$$p -o docs/generated/seeds-$$p.md \
			--command "sudo ./fstrace bench --preset $$p $(SEEDS_ARGS)" || exit 1; \
	done

docs-findings: all
	build/venv/bin/python3 -m scripts.docs_generated findings $(DOCS_RUNS)/findings $(if $(filter 1,$(DOCS_RERUN)),--run) \
		-o docs/generated/findings-run.md

docs-vmtest: all
	./scripts/setup.sh --test
	if [ "$(DOCS_RERUN)" = 1 ]; then mkdir -p $(DOCS_RUNS) && \
		build/venv/bin/python3 -m scripts.vmtest $(VMTEST_ARGS) --json $(DOCS_RUNS)/vmtest.json; fi
	build/venv/bin/python3 -m scripts.docs_generated vmtest $(DOCS_RUNS)/vmtest.json -o docs/generated/vmtest-run.md \
		--command 'sudo make vmtest VMTEST_ARGS="$(VMTEST_ARGS)"'

# The collector's pure parts tested alone, with cmocka, as any user (tests/test_collector_units.py runs them in
# the unit lane): `make test-c [TEST_C_OUT=DIR]` builds tests/c/NAME_test.c with the user/ sources it tests
# (below) and runs each.
TEST_C_OUT ?= $(OUT)/test-c
TEST_C_BINS := $(patsubst tests/c/%.c,$(TEST_C_OUT)/%,$(wildcard tests/c/*_test.c))
$(TEST_C_OUT)/jbuf_test: user/jbuf.c
$(TEST_C_OUT)/openmetrics_test: user/openmetrics.c user/jbuf.c
$(TEST_C_OUT)/options_test: user/options.c
$(TEST_C_OUT)/names_test: user/names.c
$(TEST_C_OUT)/%_test: tests/c/%_test.c $(USER_HDRS) bpf/records.h bpf/kernel_state.h
	@mkdir -p $(@D)
	$(CC) $(USER_CFLAGS) -Iuser $(filter %.c,$^) -o $@ -lcmocka

test-c: $(TEST_C_BINS)
	@for t in $(TEST_C_BINS); do $$t || exit 1; done

# The kernel side's handlers run by the kernel on forged inputs (BPF_PROG_TEST_RUN) through the collector's
# skeletons: tests/c/bpf_test_run.c, run as root by tests/test_bpf_test_run.py (bpf lane)
$(OUT)/bpf-test-run: tests/c/bpf_test_run.c $(OUT)/block.skel.h $(OUT)/requests.skel.h bpf/records.h bpf/kernel_state.h | $(OUT)
	$(CC) $(USER_CFLAGS) $< -o $@ -lbpf -lelf -lz -lcmocka
