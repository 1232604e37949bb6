// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel function addresses by name, for the other programs' configuration (the work functions they tell
 * apart): a BPF_PROG_TYPE_SYSCALL program the collector runs once, before loading them, which asks the kernel's
 * own kallsyms_lookup_name (5.16+): it answers in microseconds, where reading and parsing all of /proc/kallsyms
 * for the same eight names takes tens of milliseconds, a large share of load and attach; where this program
 * does not load, the collector does that instead.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "kernel_state.h"

char LICENSE[] SEC("license") = "GPL";

/* the names asked (zero-padded), and their addresses once run (0: none) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FST_KSYM_QUERIES);
	__type(key, __u32);
	__type(value, struct fst_ksym_query);
} ksym_queries SEC(".maps");

SEC("syscall")
int resolve_ksyms(void *ctx)
{
	/* unrolled: a counter whose address the lookup takes lives on the stack, where the verifier loses its bound */
#pragma unroll
	for (__u32 k = 0; k < FST_KSYM_QUERIES; k++) {
		__u32 i = k;
		struct fst_ksym_query *q = bpf_map_lookup_elem(&ksym_queries, &i);
		__u64 addr = 0;
		if (!q)
			break;
		/* the helper wants the terminating NUL inside name_sz: the last byte of the zero-padded name */
		if (q->name[0] && !bpf_kallsyms_lookup_name(q->name, sizeof(q->name), 0, &addr))
			q->addr = addr;
	}
	return 0;
}
