// SPDX-License-Identifier: GPL-2.0
/*
 * Requests and first-cut attribution.  A request is one read or metadata
 * syscall of a traced thread; its wall time is split by sched_switch and
 * sched_wakeup into on-CPU, I/O wait, other uninterruptible sleep,
 * interruptible sleep and runqueue time (see records.h).
 *
 * The traced set is the process tree the collector starts (children are added
 * at fork, in the kernel, so no early I/O is missed), or a cgroup.
 *
 * This file holds a request's life (its state, begin, start, end, and its count or record); each concern that
 * bounds or measures requests is a header of its own, included below, one per hook family:
 *   req_file.bpf.h          which file a request is on, and its counted entry
 *   req_syscalls.bpf.h      requests bounded by sys_enter/sys_exit
 *   req_sched.bpf.h         off-CPU time: sched_switch, sched_wakeup, off-CPU stacks
 *   req_fork_exit.bpf.h     threads joining (fork) and leaving (exit) the traced set
 *   req_pagecache.bpf.h     page-cache adds and readahead windows
 *   req_locks.bpf.h         sleeping-lock waits
 *   req_entry_points.bpf.h  requests bounded at the filesystems' entry points (fentry/fexit, kprobes)
 * Headers compiled into one object, not an object each (libbpf-tools' one .bpf.c per tool): every concern reads
 * and writes the same per-thread request state through the same inlined helpers, the collector loads, test-loads
 * and attaches these programs by name from one skeleton (requests.skel.h, and its plain build), and one object
 * is one load of the shared helpers' code rather than one per concern.
 */
#include "common.bpf.h"
#include "syscalls.h"

char LICENSE[] SEC("license") = "GPL";

/* syscall argument n (from 1): in storage mode the programs are tp_btf, whose regs is a BTF pointer read
 * with plain loads; raw_tp's needs a helper call per read */
#define SYSCALL_ARG(regs, n) (cfg.task_storage ? PT_REGS_PARM##n##_SYSCALL(regs) : PT_REGS_PARM##n##_CORE_SYSCALL(regs))

#include "req_file.bpf.h"

/* --budget's windows number the requests: flight.bpf.h window_seq */

/*
 * The kinds of request bounded at the filesystems' entry points (bit 1 << kind; see "Requests bounded at the
 * filesystems' entry points" below), set by the collector once their programs are attached and before the
 * syscall tracepoints are: sys_enter leaves those kinds to them, and they act on no other kind.
 */
__u32 fs_bound_kinds;

static __always_inline bool kind_fs_bound(__u16 kind)
{
	return fs_bound_kinds & (1u << kind);
}

/*
 * The current thread's state (r: as looked up, maybe NULL) when the task filters trace it, created if it had
 * none; NULL when they do not, or no state could be had (counted).  cur: the thread's BTF pointer, taken once by
 * the caller for the lookups (storage mode).
 */
static __always_inline struct task_req *traced_state(struct task_struct *cur, struct task_req *r)
{
	if (trace_decision_cacheable()) {
		if (r && r->keep.trace_decision == FST_TRACE_DECISION_UNTRACED)
			return NULL;
		if (!r || r->keep.trace_decision != FST_TRACE_DECISION_TRACED) {
			bool traced = current_is_traced();
			if (!r)
				r = bpf_task_storage_get(&task_reqs, cur, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
			if (r)
				r->keep.trace_decision = traced ? FST_TRACE_DECISION_TRACED : FST_TRACE_DECISION_UNTRACED;
			if (!traced)
				return NULL;
		}
	} else if (!current_is_traced()) {
		return NULL;
	}

	if (!r && cfg.task_storage)
		r = bpf_task_storage_get(&task_reqs, cur, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!r && !cfg.task_storage) {
		__u32 pid = (__u32)bpf_get_current_pid_tgid();
		struct task_req n = {};
		bpf_map_update_elem(&task_reqs, &pid, &n, BPF_NOEXIST);
		r = bpf_map_lookup_elem(&task_reqs, &pid);
	}
	if (!r)
		loss_count(FST_LOSS_TASK_STATE); /* storage or map full: the thread's requests are not traced */
	return r;
}

/*
 * A new request of kind in syscall id, whose arguments are in regs: everything but what is kept across requests
 * starts at 0, and the byte count, position and stat buffer are the syscall's arguments.  Returns the file
 * descriptor argument (meaningful for the kinds fst_syscall_has_fd names).
 */
static __always_inline long req_begin(struct task_req *r, long id, __u16 kind, struct pt_regs *regs)
{
	__builtin_memset(r, 0, offsetof(struct task_req, keep));
	r->nr = id;
	r->kind = kind;
	r->pos = -1;
	r->window_seq = window_seq;
	/* until a file places it (its descriptor here, or a stat call's result at the exit), kept only without a
	 * filesystem filter; sync() writes back every filesystem, the traced ones too: kept when the traced tasks
	 * are a process tree's (run: the workload's cp && sync), not for every task of the system (attach) */
	r->sdev_traced = !cfg.filter_sdev || (id == FST_NR_SYNC && cfg.filter_pids);

	int count_arg = fst_syscall_count_arg(id);
	if (count_arg == 3)
		r->count = SYSCALL_ARG(regs, 3);
	else if (count_arg == 4)
		r->count = SYSCALL_ARG(regs, 4);
	if (fst_syscall_has_pos(id))
		r->pos = SYSCALL_ARG(regs, 4);
	int statbuf_arg = fst_syscall_statbuf_arg(id);
	if (statbuf_arg == 2)
		r->statbuf = SYSCALL_ARG(regs, 2);
	else if (statbuf_arg == 3)
		r->statbuf = SYSCALL_ARG(regs, 3);
	else if (statbuf_arg == 5)
		r->statbuf = SYSCALL_ARG(regs, 5);
	return fst_syscall_fd_arg(id) == 2 ? SYSCALL_ARG(regs, 2) : SYSCALL_ARG(regs, 1);
}

/*
 * The request starts now: the handler's last act, so that what it did before (lookups, the file) is in no
 * request's time and what follows the clock read inside the request is three stores and the program's return.
 * That tail is not charged to the tracer part: timing or estimating it (a per-CPU site lookup, the random pick,
 * a clock read 1 run in FST_TRACER_TIME_EVERY) cost more than the tail itself, on every request.
 */
static __always_inline void req_start(struct task_req *r)
{
	__u64 now = bpf_ktime_get_ns();
	r->start = r->last_on = now;
	r->in_req = 1;
}

/*
 * A request that never left the CPU, issued no block I/O, added nothing to the page cache and returned no
 * error (a page-cache hit) is counted in the kernel unless it took longer than cfg.record_over_ns: the
 * answer needs its parts and latency, not a record each (a warm reader makes them as fast as it copies memory).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FST_REQ_AGG_MAX); /* 5.5 KiB each per CPU; the entry of each (superblock, kind): agg_keys */
	__type(key, __u32);
	__type(value, struct fst_req_agg);
} req_agg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, FST_COMM_AGG_MAX + 1); /* + the key of every other name */
	__type(key, struct fst_comm_agg_key);
	__type(value, struct fst_comm_agg);
} comm_agg SEC(".maps");

static const struct fst_comm_agg zero_comm_agg;

/* --per-comm: the request under its task name, or under the other names' key once FST_COMM_AGG_MAX are taken */
static __always_inline void comm_count(struct task_req *r, long ret, __u64 wall)
{
	struct fst_comm_agg_key k = { .sdev = r->sdev, .kind = r->kind };
	current_comm(k.comm);
	struct fst_comm_agg *c = bpf_map_lookup_elem(&comm_agg, &k);
	if (!c) {
		bpf_map_update_elem(&comm_agg, &k, &zero_comm_agg, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&comm_agg, &k);
	}
	if (!c) {
		struct fst_comm_agg_key other = {};
		c = bpf_map_lookup_elem(&comm_agg, &other);
		if (!c)
			return;
	}
	c->count++;
	c->bytes += ret > 0 ? ret : 0;
	c->wall_ns += wall;
	c->io_wait_ns += r->part[FST_PART_IO_WAIT];
}

static __always_inline bool req_is_countable(struct task_req *r, long ret, __u64 wall)
{
	if (cfg.records_none) /* fstrace serve: every request is counted, none recorded */
		return true;
	return !cfg.records_all && ret >= 0 && !r->nr_switches && !r->nr_missed && !r->nr_ios &&
	       !r->pcache_adds && !r->ra_windows && wall < cfg.record_over_ns;
}

/*
 * slots[slot]++ with the bound checked on the very register used to index: clang otherwise clamps a copy
 * (min()) and indexes with the original, which the 6.1 verifier rejects as an unbounded access
 */
static __always_inline void slot_inc(__u64 *slots, __u32 slot, __u32 nslots)
{
	barrier_var(slot);
	if (slot < nslots)
		slots[slot]++;
}

static __always_inline void agg_part_in(struct fst_req_agg *a, int part, __u64 ns, __u32 slot)
{
	a->part_ns[part] += ns;
	slot_inc(a->part_hist[part], slot, FST_HIST_SLOTS);
}

/* a part of a counted request */
static __always_inline void agg_part(struct fst_req_agg *a, int part, __u64 ns)
{
	if (ns)
		agg_part_in(a, part, ns, log2_slot_us(ns));
}

/*
 * The on-CPU part of a page-cache hit is as long as the request, so it takes the wall time's slot, already found.
 * Only this part gets the shortcut: one more branch per part doubles the verifier's states per part, and with
 * every part (cfg.records_none) the program exceeds the verifier's limits.
 */
static __always_inline void agg_part_oncpu(struct fst_req_agg *a, __u64 ns, __u64 wall, __u32 wall_slot)
{
	if (ns)
		agg_part_in(a, FST_PART_ONCPU, ns, ns == wall ? wall_slot : log2_slot_us(ns));
}

static __always_inline bool req_count(struct task_req *r, long ret, __u64 wall)
{
	if (!r->agg_entry) { /* not kept with its file (the first of its kind there, a path-based stat, a sync) */
		r->agg_entry = agg_entry_of(r->sdev, r->kind);
		struct file_keep *k = r->keep_file == 1 ? &r->keep.files[0] : (r->keep_file == 2 ? &r->keep.files[1] : NULL);
		__u8 *e = k ? kept_entry(k, r->kind) : NULL;
		if (e && r->agg_entry != FST_AGG_ENTRY_NONE) /* none may be a race for the last entry: asked again */
			*e = r->agg_entry;
	}
	if (r->agg_entry == FST_AGG_ENTRY_NONE)
		return false; /* every entry given: the request is recorded instead */
	__u32 idx = r->agg_entry - 1;
	struct fst_req_agg *a = bpf_map_lookup_elem(&req_agg, &idx);
	if (!a)
		return false;
	/* per-CPU: no other CPU writes this copy, so no atomics */
	a->count++;
	a->bytes += ret > 0 ? ret : 0;
	a->wall_ns += wall;
	__u32 wall_slot = log2_slot_us(wall);
	slot_inc(a->wall_hist, wall_slot, FST_HIST_SLOTS);
	slot_inc(a->wall_ns_loglin, fst_loglin_slot(wall), FST_LAT_SLOTS);
	agg_part_oncpu(a, r->part[FST_PART_ONCPU], wall, wall_slot);
#define AGG_PART(c, ...)         \
	if (c != FST_PART_ONCPU) \
		agg_part(a, c, r->part[c]);
	if (cfg.records_none) {
		/* every request is counted, and any part may be non-zero */
		FST_PARTS(AGG_PART)
	} else {
		/* a request counted while the others are recorded never left the CPU (req_is_countable): the parts
		 * added at a switch in, or for a switch not delivered, are 0 */
		AGG_PART(FST_PART_TRACER)
	}
#undef AGG_PART
	a->pcache_adds += r->pcache_adds;
	if (cfg.per_comm)
		comm_count(r, ret, wall);
	return true;
}

/* the request ends now: its last interval's part, and the thread is in no request from here on */
static __always_inline void req_end(struct task_req *r, __u64 now)
{
	if (r->off_ts) {
		/* the switch back in was never delivered: when it ran again is unknown */
		r->part[FST_PART_MISSED] += now - r->off_ts;
		r->nr_missed++;
	} else {
		r->part[FST_PART_ONCPU] += now - r->last_on;
	}
	r->in_req = 0;
}

/*
 * openat: the file is known only once the descriptor exists (and kept: the reads that follow find it).  A global
 * function, called at an open's end only: inlined, the verifier walked the rest of sys_exit once per case of
 * fd_file_btf's switch (most of its load time); a call costs every request it is on.
 */
FST_GLOBAL_FN int note_opened_fd(struct task_req *r, long fd)
{
	if (r)
		note_fd(r, cfg.task_storage ? bpf_get_current_task_btf() : NULL, fd);
	return 0;
}

static __always_inline void note_opened(struct task_req *r, long ret)
{
	if (r->kind == FST_REQ_OPEN && ret >= 0)
		note_opened_fd(r, ret);
}

/* a request that ended (req_end) and returned ret: counted or recorded when it was placed on a traced
 * filesystem, else its off-CPU time is set apart from the kept requests' */
static __always_inline void req_finish(struct task_req *r, long ret, __u64 now)
{
	/* a request not placed on a traced filesystem (a failed stat call has nothing to place it by) */
	if (!r->sdev_traced) {
		if (cfg.offcpu_stacks && r->nr_switches) {
			offcpu_drop_add(FST_OFF_IO, r->part[FST_PART_IO_WAIT]);
			offcpu_drop_add(FST_OFF_DSLEEP, r->part[FST_PART_DSLEEP]);
			offcpu_drop_add(FST_OFF_SLEEP, r->part[FST_PART_SLEEP]);
			offcpu_drop_add(FST_OFF_LOCK, r->part[FST_PART_LOCK]);
			offcpu_drop_add(FST_OFF_WORKER, r->part[FST_PART_WORKER] + r->part[FST_PART_WORKER_WAIT]);
		}
		return;
	}

	/* the handlers' time is in the on-CPU intervals; never more than them (the clamp is what keeps the
	 * parts an exact partition when a handler's end was timed after a switch) */
	__u64 *part = r->part;
	if (part[FST_PART_TRACER] > part[FST_PART_ONCPU])
		part[FST_PART_TRACER] = part[FST_PART_ONCPU];
	part[FST_PART_ONCPU] -= part[FST_PART_TRACER]; /* from here on, the workload's own on-CPU time */
	__u64 wall = now - r->start;
	if (req_is_countable(r, ret, wall) && req_count(r, ret, wall))
		return;

	struct fst_req *rec = record_reserve(FST_REC_REQ, sizeof(*rec));
	if (rec) {
		__u64 pid_tgid = bpf_get_current_pid_tgid();
		rec->ts_start_ns = r->start;
		rec->ts_end_ns = now;
#define REC_PART(c, v, field, ...) rec->field = r->part[c];
		FST_PARTS(REC_PART)
#undef REC_PART
		rec->nr_lock_waits = r->nr_lock_waits;
		rec->ra_windows = r->ra_windows;
		rec->ra_pages = r->ra_pages;
		rec->ra_max_pages = r->ra_max_pages;
		rec->waker_seq = r->waker_seq;
		rec->nr_missed_events = r->nr_missed;
		rec->pcache_adds = r->pcache_adds;
		rec->ino = r->ino;
		rec->ret = ret;
		rec->count = r->count;
		rec->pos = r->pos;
		rec->io_bytes = r->io_bytes;
		rec->pid = (__u32)pid_tgid;
		rec->tgid = pid_tgid >> 32;
		rec->sdev = r->sdev;
		rec->syscall_nr = r->nr;
		rec->nr_ios = r->nr_ios;
		rec->nr_switches = r->nr_switches;
		rec->kind = r->kind;
		rec->ftype = r->ftype;
		current_comm(rec->comm);
		record_submit(rec);
	}
}

#include "req_syscalls.bpf.h"
#include "req_sched.bpf.h"
#include "req_fork_exit.bpf.h"
#include "req_pagecache.bpf.h"
#include "req_locks.bpf.h"
#include "req_entry_points.bpf.h"
