/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Requests bounded by the syscall tracepoints (requests.bpf.c): sys_enter begins a request of the kinds
 * syscalls.h names (unless the filesystems' entry points bound that kind), sys_exit ends it.
 */
#ifndef FSTRACE_REQ_SYSCALLS_BPF_H
#define FSTRACE_REQ_SYSCALLS_BPF_H

/* --budget: every syscall the hook saw (per CPU), for the system's syscall rate while a window is open */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} syscalls_seen SEC(".maps");

static __always_inline int handle_sys_enter(struct pt_regs *regs, long id)
{
	if (cfg.windowed) { /* load-time constant: no instruction at all when always on */
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&syscalls_seen, &zero);
		if (n)
			(*n)++;
	}
	__u16 kind = fst_syscall_kind(id);
	if (!kind || kind_fs_bound(kind))
		return 0;
	/* storage mode: the current task's BTF pointer, taken once (a helper call) for the lookups below */
	struct task_struct *cur = cfg.task_storage ? bpf_get_current_task_btf() : NULL;
	struct task_req *r = cfg.task_storage ? bpf_task_storage_get(&task_reqs, cur, 0, 0) : current_state();
	r = traced_state(cur, r);
	if (!r)
		return 0;
	long fd = req_begin(r, id, kind, regs);
	if (fst_syscall_has_fd(id, kind)) {
		note_fd(r, cur, fd);
		if (!r->sdev_traced)
			return 0; /* a pipe, /dev/null, another filesystem: no request, and no clock read */
	}
	req_start(r);
	return 0;
}

static __always_inline int handle_sys_exit(long ret)
{
	struct task_req *r = current_req();
	if (!r || r->bound != FST_BOUND_SYSCALL) /* a filesystem entry point's: it ends there */
		return 0;
	/* begun in another window (see window_seq), or the hooks are on for the collector's calibration (an even
	 * number; windows are odd): nothing recorded */
	if (r->window_seq != window_seq || (cfg.windowed && !(window_seq & 1))) {
		r->in_req = 0;
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	req_end(r, now);
	note_opened(r, ret);
	/* a path-based stat call: the file is the one whose device and inode the kernel wrote into the buffer */
	if (r->statbuf && ret == 0)
		note_statbuf(r);
	req_finish(r, ret, now);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id) { return handle_sys_enter(regs, id); }
SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs *regs, long id) { return handle_sys_enter(regs, id); }

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit_btf, struct pt_regs *regs, long ret) { return handle_sys_exit(ret); }
SEC("raw_tp/sys_exit")
int BPF_PROG(sys_exit_raw, struct pt_regs *regs, long ret) { return handle_sys_exit(ret); }

#endif
