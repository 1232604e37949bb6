/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A kernel function's probes on the function tiers: its fentry/fexit programs and their kprobe/kretprobe twins
 * (the collector attaches one of the two), and an argument read at a kprobe where only BTF knows its position.
 */
#ifndef FSTRACE_PROBES_BPF_H
#define FSTRACE_PROBES_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */

/*
 * A kernel function's fentry program and its kprobe twin (the collector
 * enables one).  The parameter list comes last; BEGIN is run at entry with
 * `tier` in scope.
 */
#define ENTRY_PROBES(fn, BEGIN, ...)             \
	SEC("fentry/" #fn)                       \
	int BPF_PROG(fn##_fentry, __VA_ARGS__)   \
	{                                        \
		__u16 tier = FST_TIER_FENTRY;    \
		(void)tier;                      \
		BEGIN;                           \
		return 0;                        \
	}                                        \
	SEC("kprobe/" #fn)                       \
	int BPF_KPROBE(fn##_kprobe, __VA_ARGS__) \
	{                                        \
		__u16 tier = FST_TIER_KPROBE;    \
		(void)tier;                      \
		BEGIN;                           \
		return 0;                        \
	}

/* entry and exit: ENTRY_PROBES plus fexit and the kretprobe twin, END run with the return value `ret` (of
 * type RET_T) in scope */
#define FUNC_PROBES(fn, BEGIN, END, RET_T, ...)          \
	ENTRY_PROBES(fn, BEGIN, __VA_ARGS__)             \
	SEC("fexit/" #fn)                                \
	int BPF_PROG(fn##_fexit, __VA_ARGS__, RET_T ret) \
	{                                                \
		END;                                     \
		return 0;                                \
	}                                                \
	SEC("kretprobe/" #fn)                            \
	int BPF_KRETPROBE(fn##_kretprobe, RET_T ret)     \
	{                                                \
		END;                                     \
		return 0;                                \
	}

/*
 * Argument n (from 0) of the probed function, at a kprobe on its entry, for
 * functions whose argument positions are only known at run time (from BTF).
 * Beyond the registers the calling convention passes arguments on the stack,
 * above the return address.  0 when it cannot be read.
 */
static __always_inline __u64 kprobe_arg(struct pt_regs *ctx, int n)
{
	__u64 v = 0;
#if defined(__TARGET_ARCH_x86)
	switch (n) {
	case 0: return BPF_CORE_READ(ctx, di);
	case 1: return BPF_CORE_READ(ctx, si);
	case 2: return BPF_CORE_READ(ctx, dx);
	case 3: return BPF_CORE_READ(ctx, cx);
	case 4: return BPF_CORE_READ(ctx, r8);
	case 5: return BPF_CORE_READ(ctx, r9);
	}
	if (n > 5 && n < 12)
		bpf_probe_read_kernel(&v, sizeof(v), (void *)(BPF_CORE_READ(ctx, sp) + 8 * (n - 5)));
#elif defined(__TARGET_ARCH_arm64)
	if (n >= 0 && n < 8)
		v = BPF_CORE_READ((struct user_pt_regs *)ctx, regs[n]);
#else
#error "kprobe_arg: add this architecture's calling convention"
#endif
	return v;
}

#endif
