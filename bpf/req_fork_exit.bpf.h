/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Threads joining and leaving the traced set (requests.bpf.c): a traced process tree's children are added at
 * fork, in the kernel, so no early I/O is missed; at exit a thread's state is dropped and its delay accounting
 * and (--budget) its read and write call counts are kept.
 */
#ifndef FSTRACE_REQ_FORK_EXIT_BPF_H
#define FSTRACE_REQ_FORK_EXIT_BPF_H

static __always_inline int handle_fork(struct task_struct *parent, struct task_struct *child)
{
	if (!cfg.filter_pids)
		return 0;
	/* clone() from any thread of a traced process: the parent passed here is the leader */
	__u32 cur = (__u32)bpf_get_current_pid_tgid();
	__u32 ppid = BPF_CORE_READ(parent, pid);
	if (!bpf_map_lookup_elem(&traced_pids, &cur) && !bpf_map_lookup_elem(&traced_pids, &ppid))
		return 0;
	__u32 pid = BPF_CORE_READ(child, pid);
	__u8 one = 1;
	bpf_map_update_elem(&traced_pids, &pid, &one, BPF_ANY);
	return 0;
}

/* --budget: kernel_state.h struct fst_task_calls of the traced threads that exited, by thread id and start, until the
 * collector takes them (user/procfs.c io_calls_step); kept only while it does (exited_calls_on, set by
 * user/window.c) */
__u32 exited_calls_on;
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FST_EXITED_CALLS_MAX);
	__type(key, struct fst_thread_key);
	__type(value, struct fst_task_calls);
} exited_calls SEC(".maps");

static __always_inline int handle_exit(void)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = (__u32)pid_tgid;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct task_delay_info *delays = BPF_CORE_READ(task, delays);
	bool traced = current_is_traced();
	if (exited_calls_on && traced) {
		/* its start tells the collector whether it counts whole: a thread it never saw may have joined the
		 * filters late (moved into the cgroup, renamed by an exec), its earlier reads not the traced ones */
		struct fst_task_calls c = { .start_ns = BPF_CORE_READ(task, start_boottime),
					    .tid = pid,
					    .tgid = pid_tgid >> 32,
					    .traced = 1 };
		struct fst_thread_key key = { .start_ns = c.start_ns, .tid = pid };
		if (task_io_calls(task, &c.calls) && bpf_map_update_elem(&exited_calls, &key, &c, BPF_ANY))
			loss_count(FST_LOSS_EXITED_CALLS);
	}
	if (delays && traced) {
		struct fst_task *rec = record_reserve(FST_REC_TASK, sizeof(*rec));
		if (rec) {
			rec->ts_exit_ns = bpf_ktime_get_ns();
			rec->blkio_delay_ns = BPF_CORE_READ(delays, blkio_delay);
			rec->blkio_count = BPF_CORE_READ(delays, blkio_count);
			rec->pid = pid;
			rec->tgid = pid_tgid >> 32;
			rec->pad0 = 0;
			current_comm(rec->comm);
			record_submit(rec);
		}
	}
	/* task-local storage goes with the task; the hash fallback's entry must be removed */
	if (!cfg.task_storage)
		bpf_map_delete_elem(&task_reqs, &pid);
	inflight_forget(pid);
	if (cfg.task_storage && !bpf_map_delete_elem(&ios_pending, &pid)) /* never folded now */
		ios_pending_entries_add(-1);
	/* the pid stays in traced_pids: its block I/O may still complete, and pids are not reused that fast */
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork_btf, struct task_struct *parent, struct task_struct *child)
{
	return handle_fork(parent, child);
}
SEC("raw_tp/sched_process_fork")
int BPF_PROG(sched_process_fork_raw, struct task_struct *parent, struct task_struct *child)
{
	return handle_fork(parent, child);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit_btf, struct task_struct *p) { return handle_exit(); }
SEC("raw_tp/sched_process_exit")
int BPF_PROG(sched_process_exit_raw, struct task_struct *p) { return handle_exit(); }

#endif
