// SPDX-License-Identifier: GPL-2.0
/*
 * Sampling tier: a cpu-clock perf event on every CPU; a sample taken while a
 * traced thread is inside a request counts its kernel and user stacks, and a
 * sample in a kworker running a known filesystem work item (erofs
 * decompression, btrfs end-io: work done for the readers) counts its kernel
 * stack under that work kind.  The collector symbolizes the stacks and
 * estimates, e.g., in-task decompression CPU where no fentry/kprobe can time
 * it (with the method and a confidence interval).
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct fst_sample_key);
	__type(value, __u64);
} samples SEC(".maps");

/*
 * User stacks as (build id, file offset) per frame, resolved by the kernel at
 * sample time: short-lived processes (a cat per file) are gone, with their
 * mappings, before the collector could read them.
 */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 4096);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, FST_USER_STACK_DEPTH * sizeof(struct bpf_stack_build_id));
	__uint(map_flags, BPF_F_STACK_BUILD_ID);
} user_stacks SEC(".maps");

/*
 * Kernel stacks of the samples, apart from the off-CPU and bio stacks in
 * `stacks`: nearly every sample is a distinct stack (its own instruction
 * pointer), and in a shared map they would fill the buckets the few off-CPU
 * stacks need (bpf_get_stackid fails on a bucket held by another stack).
 */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, FST_MAX_STACKS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} sample_stacks SEC(".maps");

/*
 * The thread's user stack.  A thread that calls read() from the same place with the same stack pointer (fio's
 * loop, a cat) has the same user stack: with task storage, the user registers are compared with those of the
 * last stack taken, and a match reuses its id instead of walking the stack and looking up build ids again.
 */
static __always_inline __s32 user_stack(struct bpf_perf_event_data *ctx, struct task_req *r)
{
	if (!cfg.task_storage || !cfg.task_pt_regs)
		return bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK);
	struct pt_regs *uregs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	__u64 ip = PT_REGS_IP_CORE(uregs), sp = PT_REGS_SP_CORE(uregs);
	if (sp && r->keep.user_sp == sp && r->keep.user_ip == ip)
		return r->keep.user_stack;
	__s32 id = bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK);
	if (id >= 0) {
		r->keep.user_ip = ip;
		r->keep.user_sp = sp;
		r->keep.user_stack = id;
	}
	return id;
}

SEC("perf_event")
int sample_request_stack(struct bpf_perf_event_data *ctx)
{
	__u64 t0 = bpf_ktime_get_ns();
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	if (!pid)
		return 0;
	struct fst_sample_key key = { .pid = pid, .tgid = bpf_get_current_pid_tgid() >> 32, .user_stack_id = -1 };
	struct task_req *r = current_req();
	if (r) {
		/* a user stack with build ids costs microseconds, up to a millisecond when a build id is looked up
		 * for the first time; a thread's user stack is frozen while it is in a syscall, so once per request */
		if (!r->user_stack_taken) {
			r->user_stack = user_stack(ctx, r);
			r->user_stack_taken = 1;
		}
		key.user_stack_id = r->user_stack;
	} else {
		struct work_running_slot *ws = work_running_now(pid);
		if (!ws)
			return 0;
		/* a kind queued from completions that no traced block request's completion queued is another device's
		 * work (the summary's async_work_unlinked, which also keeps an item that woke a traced request) */
		if (work_kind_from_completion(ws->v.kind) && !ws->v.io.dev)
			return 0;
		key.work_kind = ws->v.kind;
	}
	key.stack_id = bpf_get_stackid(ctx, &sample_stacks, 0);
	__u64 one = 1, *n = bpf_map_lookup_elem(&samples, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&samples, &key, &one, BPF_NOEXIST);
	tracer_charge_from(r, FST_SITE_SAMPLE, t0); /* every run timed: rare, and costly */
	return 0;
}
