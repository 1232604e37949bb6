/* SPDX-License-Identifier: GPL-2.0 */
/* Kernel stacks: sampled on-CPU and taken at off-CPU switches in requests, and the off-CPU time per stack. */
#ifndef FSTRACE_STACKS_BPF_H
#define FSTRACE_STACKS_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */

/* kernel stacks: sampled on-CPU (sample.bpf.c) and at every off-CPU switch in a request (requests.bpf.c) */
#define MAX_STACK_DEPTH FST_MAX_STACK_DEPTH

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, FST_MAX_STACKS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct fst_offcpu_key);
	__type(value, __u64);
} offcpu SEC(".maps");

/*
 * Off-CPU time of requests fstrace did not keep (found at their exit to be on no traced filesystem: a path-based
 * stat call elsewhere, an openat of a file elsewhere, a failed stat or open), per FST_OFFCPU_REASONS reason: it
 * is in the stacks already, credited while the call slept, so the stacks add up to the kept requests' parts
 * plus this.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FST_MAX_OFFCPU_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} offcpu_dropped SEC(".maps");

static __always_inline void offcpu_drop_add(__u32 reason, __u64 ns)
{
	__u64 *v = ns ? bpf_map_lookup_elem(&offcpu_dropped, &reason) : NULL;
	if (v)
		*v += ns;
}

static __always_inline void offcpu_add(__s32 stack_id, __u32 reason, __u64 ns)
{
	if (!cfg.offcpu_stacks || !ns)
		return;
	struct fst_offcpu_key k = { .stack_id = stack_id, .reason = reason };
	__u64 *v = bpf_map_lookup_elem(&offcpu, &k);
	if (!v && !bpf_map_update_elem(&offcpu, &k, &ns, BPF_NOEXIST))
		return;
	/* another CPU inserted the same stack and reason first (its NOEXIST insert won): add to its entry */
	if (!v)
		v = bpf_map_lookup_elem(&offcpu, &k);
	if (v)
		__sync_fetch_and_add(v, ns);
}

/*
 * Off-CPU stacks taken at the switch back in (cfg.offcpu_at_switch_in: storage mode, where sched_switch is
 * tp_btf and hands over the task about to run).  Its saved kernel stack is where it slept, and walking it
 * then, once the interval's length is known, lets the walk be skipped for most short intervals (threshold
 * sampling, see offcpu_credit in requests.bpf.c): a walk costs microseconds, more than the rest of a switch.
 * bpf_get_task_stack gives frames, not a stack id, so the frames are kept here under a 31-bit hash of them;
 * a different stack under the same hash is not merged but counted as lost, as the stack-trace map does.
 * The value layout is the stack-trace map's (frames, zero-filled), so the collector folds either alike.
 */
struct fst_kstack {
	__u64 ips[MAX_STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fst_kstack);
} kstack_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct fst_kstack);
} offcpu_kstacks SEC(".maps");

#endif
