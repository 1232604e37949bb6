// SPDX-License-Identifier: GPL-2.0
/*
 * make bench-helpers: what each helper and map operation fstrace's handlers use costs on this machine.  Every
 * program sits on tp_btf/sys_enter, returns at once for other processes, and makes N_CALLS of one operation;
 * the driver (bench_helpers.c) attaches one at a time, runs a syscall loop, and takes the kernel's run time per run
 * of this process (own_runs counts them; other processes' quick returns are taken out) minus the empty program's,
 * over N_CALLS.  Hot (the same call back to back): a lower bound of what the same
 * call costs inside a handler that runs cold.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

#define N_CALLS 8
const volatile __u32 tgid = 0;
volatile __u64 sink;
__u64 own_runs; /* runs for this process: one program is attached at a time, and one thread makes them */

struct value {
	__u64 v[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct value);
} task_store SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct value);
} hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct value);
} percpu_hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct value);
} percpu_array SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} ring SEC(".maps");

/* key 1 is in both hashes (bench_helpers.c puts it there) */
#define OURS()                                          \
	if ((bpf_get_current_pid_tgid() >> 32) != tgid) \
		return 0;                               \
	own_runs++
#define TIMES(body)                         \
	_Pragma("unroll")                   \
	for (int i = 0; i < N_CALLS; i++) { \
		body;                       \
	}                                   \
	return 0

SEC("tp_btf/sys_enter")
int BPF_PROG(empty)
{
	OURS();
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(ktime_get_ns)
{
	OURS();
	TIMES(sink += bpf_ktime_get_ns());
}

SEC("tp_btf/sys_enter")
int BPF_PROG(get_current_pid_tgid)
{
	OURS();
	TIMES(sink += bpf_get_current_pid_tgid());
}

SEC("tp_btf/sys_enter")
int BPF_PROG(task_storage_get)
{
	OURS();
	TIMES(struct value *p = bpf_task_storage_get(&task_store, bpf_get_current_task_btf(), 0,
						     BPF_LOCAL_STORAGE_GET_F_CREATE);
	      if (p) sink += p->v[0]);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(probe_read_kernel)
{
	OURS();
	struct task_struct *t = bpf_get_current_task_btf();
	TIMES(__u64 x = 0; bpf_probe_read_kernel(&x, sizeof(x), &t->files); sink += x);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(typed_load)
{
	OURS();
	struct task_struct *t = bpf_get_current_task_btf();
	TIMES(sink += *(volatile int *)&t->pid); /* volatile: one load per call, not hoisted */
}

SEC("tp_btf/sys_enter")
int BPF_PROG(hash_lookup)
{
	OURS();
	TIMES(__u32 k = 1; struct value *p = bpf_map_lookup_elem(&hash, &k); if (p) sink += p->v[0]);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(percpu_hash_lookup)
{
	OURS();
	TIMES(__u32 k = 1; struct value *p = bpf_map_lookup_elem(&percpu_hash, &k); if (p) sink += p->v[0]);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(percpu_array_lookup)
{
	OURS();
	TIMES(__u32 k = i & 1; struct value *p = bpf_map_lookup_elem(&percpu_array, &k); if (p) sink += p->v[0]);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(ringbuf_reserve_submit)
{
	OURS();
	TIMES(__u64 *p = bpf_ringbuf_reserve(&ring, 128, 0); if (p) { p[0] = i; bpf_ringbuf_submit(p, BPF_RB_NO_WAKEUP); });
}

SEC("tp_btf/sys_enter")
int BPF_PROG(ringbuf_query)
{
	OURS();
	TIMES(sink += bpf_ringbuf_query(&ring, BPF_RB_AVAIL_DATA));
}

SEC("tp_btf/sys_enter")
int BPF_PROG(get_current_comm)
{
	OURS();
	TIMES(char c[16]; bpf_get_current_comm(c, sizeof(c)); sink += c[0]);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(get_prandom_u32)
{
	OURS();
	TIMES(sink += bpf_get_prandom_u32());
}
