// SPDX-License-Identifier: GPL-2.0
/*
 * Sampling tier: a cpu-clock perf event on every CPU; a sample taken while a
 * traced thread is inside a request counts its kernel stack.  The collector
 * symbolizes the stacks and estimates, e.g., in-task decompression CPU where
 * no fentry/kprobe can time it (with the method and a confidence interval).
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct sample_key {
	__u32 pid;
	__s32 stack_id;		/* negative: the stack could not be recorded */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sample_key);
	__type(value, __u64);
} samples SEC(".maps");

SEC("perf_event")
int sample_request_stack(struct bpf_perf_event_data *ctx)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	if (!pid || !bpf_map_lookup_elem(&task_reqs, &pid))
		return 0;
	struct sample_key key = { .pid = pid, .stack_id = bpf_get_stackid(ctx, &stacks, 0) };
	__u64 one = 1, *n = bpf_map_lookup_elem(&samples, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&samples, &key, &one, BPF_NOEXIST);
	return 0;
}
