/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Maps and helpers shared by every fstrace BPF object.  Each .bpf.c includes
 * this; the collector loads block.bpf.o first and makes every later object
 * reuse its map file descriptors (same names), so all objects see one ring
 * buffer, one traced-task set and one in-flight I/O table.
 */
#ifndef FSTRACE_COMMON_BPF_H
#define FSTRACE_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "records.h"

#define MINORBITS 20
#define KDEV(major, minor) (((__u32)(major) << MINORBITS) | (__u32)(minor))
#define LOOP_MAJOR 7
#define TASK_UNINTERRUPTIBLE_BIT 0x2

const volatile struct fst_cfg cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events SEC(".maps");

/* dropped records per record type: ring buffer full */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FST_MAX_REC_TYPES);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* thread ids of the traced process tree (value unused) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} traced_pids SEC(".maps");

/* kernel dev_t of each traced block device */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct fst_dev_cfg);
} traced_devs SEC(".maps");

/* block I/O charged to a thread and not yet completed, in bios */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __s64);
} task_inflight SEC(".maps");

/* kernel-side histograms */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct fst_hist_key);
	__type(value, struct fst_hist);
} hists SEC(".maps");

/* a known filesystem work item a kworker is running now (block.bpf.c fills it; tasks.bpf.c reads it) */
struct work_start {
	__u64 ts_queue;
	__u64 ts_start;
	__u64 work;
	__u16 kind;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct work_start);
} work_running SEC(".maps");

/* kernel stacks: sampled on-CPU (sample.bpf.c) and at every off-CPU switch in a request (tasks.bpf.c) */
#define MAX_STACK_DEPTH 127

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct fst_offcpu_key);
	__type(value, __u64);
} offcpu SEC(".maps");

static __always_inline void offcpu_add(__s32 stack_id, __u32 reason, __u64 ns)
{
	if (!cfg.offcpu_stacks || !ns)
		return;
	struct fst_offcpu_key k = { .stack_id = stack_id, .reason = reason };
	__u64 *v = bpf_map_lookup_elem(&offcpu, &k);
	if (v)
		__sync_fetch_and_add(v, ns);
	else
		bpf_map_update_elem(&offcpu, &k, &ns, BPF_NOEXIST);
}

/* include/trace/events/lock.h: contention_begin flags */
#ifndef LCB_F_SPIN
#define LCB_F_SPIN (1U << 0)
#define LCB_F_RT (1U << 3)
#define LCB_F_PERCPU (1U << 4)
#define LCB_F_MUTEX (1U << 5)
#endif

/* the request a traced thread is in, while it is in one */
struct task_req {
	__u64 start;
	__u64 last_on;		/* when the thread last went on-CPU during the request */
	__u64 off_ts;		/* when it went off-CPU, 0 while running */
	__u64 wake_ts;		/* first wakeup during the off-CPU interval */
	__u64 oncpu, io_wait, dsleep, sleep, runq, missed, worker, worker_wait, lock;
	__u64 waker_queue, waker_start;	/* the work item whose kworker woke it, 0 = not woken by one */
	__u64 lock_addr;	/* the sleeping lock it is contending for, 0 = none */
	__u64 ino;
	__u64 count;
	__s64 pos;
	__u64 io_bytes;
	__u32 off_state;
	__s32 off_stack;	/* kernel stack where it went off-CPU (when cfg.offcpu_stacks) */
	__u32 sdev;
	__u32 nr;
	__u32 nr_ios;
	__u32 nr_switches;
	__u32 nr_missed;
	__u32 pcache_adds;
	__u32 ra_windows, ra_pages, ra_max_pages;
	__u32 nr_lock_waits;
	__u16 kind;
	__u16 ftype;
	__u8 off_preempted;
	__u8 off_io;
	__u8 off_lock;		/* switched out while waiting for a sleeping lock */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct task_req);
} task_reqs SEC(".maps");

/* the request the current thread is in, NULL outside one */
static __always_inline struct task_req *current_req(void)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	return bpf_map_lookup_elem(&task_reqs, &pid);
}

/* superblock devices (kernel dev_t) whose files' requests are kept when cfg.filter_sdev is on */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} traced_sdevs SEC(".maps");

static __always_inline bool comm_matches(const char *comm)
{
#pragma unroll
	for (int i = 0; i < 16; i++) {
		if (comm[i] != cfg.comm[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

/* Is this task traced: it passes every task filter that is on (pid tree, comm, cgroup). */
static __always_inline bool task_is_traced(struct task_struct *task)
{
	if (cfg.filter_pids) {
		__u32 pid = BPF_CORE_READ(task, pid);
		if (!bpf_map_lookup_elem(&traced_pids, &pid))
			return false;
	}
	if (cfg.filter_comm) {
		char comm[16];
		BPF_CORE_READ_STR_INTO(&comm, task, comm);
		if (!comm_matches(comm))
			return false;
	}
	if (cfg.filter_cgroup_id && BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id) != cfg.filter_cgroup_id)
		return false;
	return true;
}

static __always_inline bool current_is_traced(void)
{
	if (cfg.filter_pids) {
		__u32 pid = (__u32)bpf_get_current_pid_tgid();
		if (!bpf_map_lookup_elem(&traced_pids, &pid))
			return false;
	}
	if (cfg.filter_comm) {
		char comm[16];
		bpf_get_current_comm(comm, sizeof(comm));
		if (!comm_matches(comm))
			return false;
	}
	if (cfg.filter_cgroup_id && bpf_get_current_cgroup_id() != cfg.filter_cgroup_id)
		return false;
	return true;
}

static __always_inline bool sdev_is_traced(__u32 sdev)
{
	return !cfg.filter_sdev || bpf_map_lookup_elem(&traced_sdevs, &sdev) != NULL;
}

/* Reserve a record in the ring buffer; a failed reservation is counted, never silent. */
static __always_inline void *record_reserve(__u32 type, __u32 size)
{
	void *rec = bpf_ringbuf_reserve(&events, size, 0);
	if (!rec) {
		__u32 idx = type < FST_MAX_REC_TYPES ? type : 0;
		__u64 *n = bpf_map_lookup_elem(&drops, &idx);
		if (n)
			(*n)++;
		return NULL;
	}
	((__u32 *)rec)[0] = type;
	((__u32 *)rec)[1] = size;
	return rec;
}

/* floor(log2(v)), 0 for 0 and 1; a binary search without loops (the 6.1 verifier only takes loops whose
 * back-edge is a jump, and clang decides that, not us) */
static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r < FST_HIST_SLOTS ? r : FST_HIST_SLOTS - 1;
}

static __always_inline void hist_add(__u32 metric, __u32 dev, __u32 sub, __u64 value)
{
	struct fst_hist_key key = { .metric = metric, .dev = dev, .sub = sub };
	struct fst_hist *h = bpf_map_lookup_elem(&hists, &key);
	if (!h) {
		struct fst_hist zero = {};
		bpf_map_update_elem(&hists, &key, &zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&hists, &key);
		if (!h)
			return;
	}
	__u32 slot = log2_slot(value);
	if (slot < FST_HIST_SLOTS)
		__sync_fetch_and_add(&h->slots[slot], 1);
}

static __always_inline void inflight_add(__u32 pid, __s64 delta)
{
	if (!pid)
		return;
	__s64 *n = bpf_map_lookup_elem(&task_inflight, &pid);
	if (n) {
		__sync_fetch_and_add(n, delta);
		return;
	}
	if (delta > 0)
		bpf_map_update_elem(&task_inflight, &pid, &delta, BPF_ANY);
}

/* a block request charged to pid was issued: count it in the request the thread is in */
static __always_inline void req_note_io(__u32 pid, __u32 bytes)
{
	struct task_req *r = bpf_map_lookup_elem(&task_reqs, &pid);
	if (r) {
		r->nr_ios++;
		r->io_bytes += bytes;
	}
}

static __always_inline __s64 inflight_get(__u32 pid)
{
	__s64 *n = bpf_map_lookup_elem(&task_inflight, &pid);
	return n ? *n : 0;
}

/* ---- decompression probes (erofs/squashfs/btrfs .bpf.c): entry saves, exit emits ---- */

#define PF_WQ_WORKER 0x00000020
#define PF_KTHREAD 0x00200000

/* where the current code runs, for records of work done on behalf of readers and writers */
static __always_inline __u16 current_context(bool traced)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	unsigned int flags = BPF_CORE_READ(task, flags);
	return traced ? FST_CTX_TRACED :
	       (flags & PF_WQ_WORKER) ? FST_CTX_KWORKER :
	       (flags & PF_KTHREAD) ? FST_CTX_KTHREAD : FST_CTX_OTHER_TASK;
}

struct decomp_start {
	__u64 ts;
	__u32 in_bytes;
	__u32 out_bytes;	/* known at entry (erofs, btrfs), else taken from the return value */
	__u32 dev;
	__u16 fs;
	__u16 alg;
	__u16 tier;
};

/* per thread: decompressors do not nest within one thread */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct decomp_start);
} decomp_starts SEC(".maps");

static __always_inline void decomp_begin(__u16 fs, __u16 alg, __u32 in_bytes, __u32 out_bytes, __u32 dev,
					 __u16 tier)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct decomp_start d = {
		.ts = bpf_ktime_get_ns(), .in_bytes = in_bytes, .out_bytes = out_bytes, .dev = dev,
		.fs = fs, .alg = alg, .tier = tier,
	};
	bpf_map_update_elem(&decomp_starts, &pid, &d, BPF_ANY);
}

static __always_inline void decomp_end(long ret)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = (__u32)pid_tgid;
	struct decomp_start *d = bpf_map_lookup_elem(&decomp_starts, &pid);
	if (!d)
		return;
	struct fst_decomp *rec = record_reserve(FST_REC_DECOMP, sizeof(*rec));
	if (rec) {
		bool traced = current_is_traced();
		rec->ts_start_ns = d->ts;
		rec->ts_end_ns = now;
		rec->in_bytes = d->in_bytes;
		rec->out_bytes = d->out_bytes ? d->out_bytes : (ret > 0 ? (__u32)ret : 0);
		rec->pid = pid;
		rec->tgid = pid_tgid >> 32;
		rec->charged_pid = traced ? pid : 0;
		rec->dev = d->dev;
		rec->ret = ret;
		rec->fs = d->fs;
		rec->alg = d->alg;
		rec->context = current_context(traced);
		rec->tier = d->tier;
		rec->pad0 = 0;
		bpf_get_current_comm(rec->comm, sizeof(rec->comm));
		bpf_ringbuf_submit(rec, 0);
	}
	bpf_map_delete_elem(&decomp_starts, &pid);
}

/*
 * A kernel function's fentry program and its kprobe twin (the collector
 * enables one).  The parameter list comes last; BEGIN is run at entry with
 * `tier` in scope.
 */
#define ENTRY_PROBES(fn, BEGIN, ...)                                                      \
	SEC("fentry/" #fn)                                                                \
	int BPF_PROG(fn##_fentry, __VA_ARGS__)                                            \
	{                                                                                 \
		__u16 tier = FST_TIER_FENTRY;                                             \
		(void)tier;                                                               \
		BEGIN;                                                                    \
		return 0;                                                                 \
	}                                                                                 \
	SEC("kprobe/" #fn)                                                                \
	int BPF_KPROBE(fn##_kprobe, __VA_ARGS__)                                          \
	{                                                                                 \
		__u16 tier = FST_TIER_KPROBE;                                             \
		(void)tier;                                                               \
		BEGIN;                                                                    \
		return 0;                                                                 \
	}

/* entry and exit: ENTRY_PROBES plus fexit and the kretprobe twin, END run with the return value `ret` (of
 * type RET_T) in scope */
#define FUNC_PROBES(fn, BEGIN, END, RET_T, ...)                                           \
	ENTRY_PROBES(fn, BEGIN, __VA_ARGS__)                                              \
	SEC("fexit/" #fn)                                                                 \
	int BPF_PROG(fn##_fexit, __VA_ARGS__, RET_T ret)                                  \
	{                                                                                 \
		END;                                                                      \
		return 0;                                                                 \
	}                                                                                 \
	SEC("kretprobe/" #fn)                                                             \
	int BPF_KRETPROBE(fn##_kretprobe, RET_T ret)                                      \
	{                                                                                 \
		END;                                                                      \
		return 0;                                                                 \
	}

/* a decompressor: RET turns `ret` into decomp_end()'s argument, negative on error */
#define DECOMP_PROBES(fn, BEGIN, RET_T, RET, ...) FUNC_PROBES(fn, BEGIN, decomp_end(RET), RET_T, __VA_ARGS__)

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
