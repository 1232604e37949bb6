# fstrace build: CO-RE BPF objects, skeletons, and the collector.
# `make` builds everything; `make vmlinux` regenerates vmlinux/<arch>/vmlinux.h from BTF.

ARCH ?= $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
CLANG ?= clang
BPFTOOL ?= bpftool
CC ?= cc
BTF ?= /sys/kernel/btf/vmlinux
OUT := build

BPF_SRCS := $(wildcard bpf/*.bpf.c)
BPF_OBJS := $(patsubst bpf/%.bpf.c,$(OUT)/%.bpf.o,$(BPF_SRCS))
SKELS := $(patsubst bpf/%.bpf.c,$(OUT)/%.skel.h,$(BPF_SRCS))
BPF_HDRS := $(wildcard bpf/*.h) vmlinux/$(ARCH)/vmlinux.h
USER_SRCS := $(wildcard user/*.c)
USER_HDRS := $(wildcard user/*.h)

BPF_CFLAGS := -g -O2 -Wall -target bpf -D__TARGET_ARCH_$(ARCH) -Ivmlinux/$(ARCH) -Ibpf
USER_CFLAGS := -g -O2 -Wall -Wextra -Wno-unused-parameter -I$(OUT) -Ibpf
# Static so the collector can be copied to a target box without libbpf; fall back to dynamic.
STATIC_LIBS := -Wl,-Bstatic -lbpf -lelf -lz -lzstd -Wl,-Bdynamic
DYN_LIBS := -lbpf -lelf -lz

.PHONY: all clean vmlinux test bench-overhead vmtest
all: $(OUT)/fstrace-collect

$(OUT):
	mkdir -p $@

$(OUT)/%.bpf.o: bpf/%.bpf.c $(BPF_HDRS) | $(OUT)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(OUT)/%.skel.h: $(OUT)/%.bpf.o
	$(BPFTOOL) gen skeleton $< > $@.tmp && mv $@.tmp $@

# linked under a temporary name and renamed, so a collector that is running keeps its binary
$(OUT)/fstrace-collect: $(USER_SRCS) $(USER_HDRS) $(SKELS) bpf/records.h | $(OUT)
	$(CC) $(USER_CFLAGS) $(USER_SRCS) -o $@.tmp -static -lbpf -lelf -lz -lzstd 2>/dev/null || \
	$(CC) $(USER_CFLAGS) $(USER_SRCS) -o $@.tmp $(STATIC_LIBS) 2>/dev/null || \
	$(CC) $(USER_CFLAGS) $(USER_SRCS) -o $@.tmp $(DYN_LIBS)
	mv $@.tmp $@

vmlinux:
	mkdir -p vmlinux/$(ARCH)
	$(BPFTOOL) btf dump file $(BTF) format c > vmlinux/$(ARCH)/vmlinux.h.tmp
	mv vmlinux/$(ARCH)/vmlinux.h.tmp vmlinux/$(ARCH)/vmlinux.h

clean:
	rm -rf $(OUT)

test:
	./scripts/test.sh

# Benchmarks (not tests): tracing overhead, events/s, analysis speed. Writes bench-results/*.json.
bench-overhead: all
	./scripts/setup.sh
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bpftrace libbpf-tools >/dev/null
	/usr/bin/python3 scripts/bench_overhead.py $(BENCH_ARGS)

# The fentry/kprobe tier on a Debian 6.1 kernel under QEMU (part of the test suite too).
vmtest: all
	./scripts/setup.sh --test
	/usr/bin/python3 scripts/vmtest.py
