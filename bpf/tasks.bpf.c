// SPDX-License-Identifier: GPL-2.0
/*
 * --budget: the traced threads' read and write syscall counts (task I/O accounting), what the windows' request
 * counts are weighted against.  A task iterator writes one struct fst_task_calls per live thread the task filters
 * pass, in one read of its file: the collector looks at every window edge and, under serve, every second, and a
 * walk of /proc opened two files per thread of the system, each look (an idle serve collector's CPU time grew with
 * every thread on the box; the iterator walks the task list in the kernel, in one read).  Exited threads left
 * their counts in exited_calls (requests.bpf.c); zombies are skipped here so that none is counted twice.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define PF_KTHREAD 0x00200000 /* include/linux/sched.h: a kernel thread makes no syscalls */

/* set when the kernel keeps no such counts (no ioac in struct task_struct): the collector says so */
__u32 no_io_accounting;

/*
 * Set by the collector before each read (CLOCK_BOOTTIME ns of its last look; all ones before the first): a thread
 * started since then is written even when the filters do not pass it, with traced 0.  It may pass them at the
 * next look, and all it read in between is the traced thread's: a child is in the task list before
 * sched_process_fork adds it to the traced tree and before it is moved into its parent's cgroup, and a forked
 * shell gets the --comm name only at its exec.
 */
__u64 new_since_ns;

SEC("iter/task")
int traced_task_calls(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task || (task->flags & PF_KTHREAD) || task->exit_state)
		return 0;
	/* the collector's own threads, which read the iterator (its tgid in the root pid namespace, as task's) */
	if (task->tgid == bpf_get_current_pid_tgid() >> 32)
		return 0;
	struct fst_task_calls c = {
		.start_ns = task->start_boottime, .tid = task->pid, .tgid = task->tgid, .traced = 1
	};
	if (!task_passes_filters(task)) {
		if (c.start_ns < new_since_ns)
			return 0;
		c.traced = 0;
	}
	if (!task_io_calls(task, &c.calls)) {
		no_io_accounting = 1;
		return 0;
	}
	bpf_seq_write(ctx->meta->seq, &c, sizeof(c));
	return 0;
}
