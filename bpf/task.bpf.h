/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Per-task state: the request a thread is in, what it keeps between requests, and the block I/O charged to it
 * (bios in flight, block requests issued for it by another context).
 */
#ifndef FSTRACE_TASK_BPF_H
#define FSTRACE_TASK_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */

/* the task filters' trace decision for a thread, kept in its state (storage mode: cached at its first read-family
 * syscall) */
#define FST_TRACE_DECISION_UNKNOWN 0
#define FST_TRACE_DECISION_TRACED 1
#define FST_TRACE_DECISION_UNTRACED 2

/*
 * Per-task state: the request a traced thread is in (in_req), kept between requests.  In task-local storage
 * (cfg.task_storage: a lookup is a pointer walk from the task, no hashing, and a task without state costs
 * one NULL test) or, where the kernel lacks it, in a pid-keyed hash the collector swaps in before load.
 */
/* an inode (struct inode *) looked up for a request, and what it said (requests.bpf.c note_file) */
struct file_keep {
	__u64 file;
	__u64 ino;
	__u32 sdev;
	__u16 ftype;
	__u8 sdev_traced;		  /* sdev passes the filesystem filter (sdev_is_traced) */
	__u8 agg_entry[FST_NR_REQ_KINDS]; /* per kind (from 1): req_agg entry + 1 (agg_entry_of), 0: not yet */
	__u8 pad[3];
};

/* what a thread's state keeps from one request to the next (task_req.keep) */
struct task_keep {
	/* the last two files: a thread that alternates between two (tar between a file and its pipe, cat between
	 * a pipe and /dev/null) finds both; the one not used last is replaced */
	struct file_keep files[2];
	__u8 file_last;	     /* files[file_last] was used last */
	__u8 trace_decision; /* FST_TRACE_DECISION_*: the task filters' answer, when it can be cached */
	__u8 pad2[2];
	__s32 user_stack;
	__u64 user_ip, user_sp; /* user registers when user_stack was taken (sample.bpf.c); 0: none yet */
};

struct task_req {
	__u64 start;
	__u64 last_on; /* when the thread last went on-CPU during the request */
	__u64 off_ts;  /* when it went off-CPU, 0 while running */
	__u64 wake_ts; /* first wakeup during the off-CPU interval */
	/* the attribution parts (records.h FST_PARTS) so far; oncpu holds the tracer's time too until the end,
	 * where the tracer's (part[FST_PART_TRACER], the handlers' own run time) is taken out of it */
	__u64 part[FST_NR_PARTS];
	__u64 waker_queue, waker_start; /* the work item whose kworker woke it, 0 = not woken by one */
	__u64 lock_addr;		/* the sleeping lock it is contending for, 0 = none */
	__u64 ino;
	__u64 count;
	__s64 pos;
	__u64 io_bytes;
	__u64 statbuf; /* a path-based stat call's buffer (user address): the file's device is read from it */
	__u32 off_state;
	__s32 off_stack;  /* kernel stack where it went off-CPU (when cfg.offcpu_stacks) */
	__s32 user_stack; /* its user stack (sample.bpf.c), taken once: it cannot change inside a syscall */
	__u32 sdev;
	__u32 nr;
	__u32 nr_ios;
	__u32 nr_switches;
	__u32 nr_missed;
	__u32 pcache_adds;
	__u32 ra_windows, ra_pages, ra_max_pages;
	__u32 nr_lock_waits;
	__u32 waker_seq; /* the last work item whose kworker woke it in this request (work record seq), 0 = none */
	__u16 kind;
	__u16 ftype;
	__u8 off_preempted;
	__u8 off_io;
	__u8 off_lock;	  /* switched out while waiting for a sleeping lock */
	__u8 in_req;	  /* the fields above describe a request in progress */
	__u32 window_seq; /* the request-hook window it began in (requests.bpf.c window_seq) */
	__u8 user_stack_taken;
	__u8 sdev_traced; /* sdev passes the filesystem filter: looked up once per request (or kept) */
	__u8 agg_entry;	  /* req_agg entry + 1 of (sdev, kind) (agg_entry_of), 0: not looked up yet */
	__u8 keep_file;	  /* keep.files index + 1 of its file, 0: none (a path-based stat call, a sync) */
	/* a request bounded at a filesystem entry point (requests.bpf.c, "Requests bounded at the filesystems'
	 * entry points") */
	__u8 bound; /* what began it: FST_BOUND_* */
	__u8 depth; /* boundary functions entered inside it and not returned yet */
	__u8 pad_req[2];
	__u32 dir_count;       /* a getdents64 directory read: the caller's buffer size (getdents_callback64.count) */
	__u64 result;	       /* what its end reads its result from: that read's callback state (struct
				* getdents_callback64 *), a stat call's struct kstat; 0 = none */
	__u64 frame_sp;	       /* begun by a kprobe: the kernel stack pointer there */
	struct task_keep keep; /* not reset at a request's start */
};

/* what began a request: its end must be the same kind of program's */
#define FST_BOUND_SYSCALL 0 /* sys_enter */
#define FST_BOUND_FENTRY 1
#define FST_BOUND_KPROBE 2

/* task-local storage; the collector turns it into a pid-keyed hash (max_entries set) where the kernel has none */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_req);
} task_reqs SEC(".maps");

/*
 * The state of task (pid is its thread id).  task must be a BTF task pointer (tp_btf, fentry,
 * bpf_get_current_task_btf()) in storage mode: the collector only enables storage mode where every
 * program that passes another task's pointer here is a tp_btf program.
 */
static __always_inline struct task_req *task_state(struct task_struct *task, __u32 pid)
{
	if (cfg.task_storage)
		return bpf_task_storage_get(&task_reqs, task, 0, 0);
	return bpf_map_lookup_elem(&task_reqs, &pid);
}

/* the request task is in, NULL outside one */
static __always_inline struct task_req *req_of(struct task_struct *task, __u32 pid)
{
	struct task_req *r = task_state(task, pid);
	return r && r->in_req ? r : NULL;
}

/* branches before calling anything: in hash mode no task-BTF helper is called at all */
static __always_inline struct task_req *current_state(void)
{
	if (cfg.task_storage)
		return bpf_task_storage_get(&task_reqs, bpf_get_current_task_btf(), 0, 0);
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	return bpf_map_lookup_elem(&task_reqs, &pid);
}

/* the request the current thread is in, NULL outside one (and always with --block-only: no state exists,
 * and the block handlers' lookups of it were a hash lookup each for nothing) */
static __always_inline struct task_req *current_req(void)
{
	if (!cfg.requests)
		return NULL;
	struct task_req *r = current_state();
	return r && r->in_req ? r : NULL;
}

/*
 * Block I/O charged to a thread and not yet completed, in bios, by thread id: a flight table (flight.bpf.h), so
 * the two to four updates of every block request are inlined array accesses, not hash lookups (a quarter of
 * block_bio_queue's samples in a profile of a cold read).  A thread's slot is taken by its first charged bio and
 * given back when it exits (inflight_forget).
 */
/* a thread's bios in flight, counted in the window they began in (flight.bpf.h window_seq) */
struct inflight_count {
	__s32 n;
	__u32 window_seq;
};

FST_FLIGHT_TABLE(task_inflight, struct inflight_count, FST_INFLIGHT_BUCKETS, 0, FST_LOSS_INFLIGHT_TABLE)

static __always_inline void inflight_add(__u32 pid, __s64 delta)
{
	if (!pid || !cfg.requests) /* read only by sched_switch's I/O-wait test */
		return;
	struct task_inflight_slot *n = task_inflight_find(pid);
	if (n) {
		/* counted in an earlier window, whose ends went unseen: this window's count starts from none (a
		 * decrement never comes first: every entry whose end takes one back was counted in this window) */
		if (flight_stale(n->v.window_seq)) /* one store of both: no add lands between them */
			n->v = (struct inflight_count){ .n = 0, .window_seq = window_seq };
		__sync_fetch_and_add(&n->v.n, (__s32)delta);
		return;
	}
	if (delta <= 0)
		return;
	/*
	 * A slot claimed here is set, not added to: an add that found the slot of an exiting thread can land after
	 * inflight_forget cleared it, and must not pass to the next thread that takes it.  Two CPUs taking a first
	 * slot for one thread at once can each take one: inflight_get sums them, and the thread's exit frees both.
	 */
	n = task_inflight_claim_free(pid);
	if (n)
		n->v = (struct inflight_count){ .n = (__s32)delta, .window_seq = window_seq };
}

/* a thread exits: every slot it holds is given back */
static __always_inline void inflight_forget(__u32 pid)
{
#ifdef FST_PLAIN_BPF /* one slot per key */
	struct task_inflight_slot *n = task_inflight_find(pid);
	if (n)
		task_inflight_release(n);
#else
	struct task_inflight_bucket *bk = pid ? task_inflight_bucket_of(pid) : NULL;
	if (!bk)
		return;
#pragma unroll
	for (int i = 0; i < FST_FLIGHT_WAYS; i++)
		if (bk->s[i].key == pid)
			task_inflight_release(&bk->s[i]);
#endif
}

/*
 * Block requests issued for a traced thread by another context (kblockd running a stopped queue) in storage
 * mode, where another task's state cannot be reached by pid: held here until the thread is switched back in
 * (it is then usually waiting for them), and dropped if they predate the request it is in.
 */
struct io_pending {
	__u64 ts_first;
	__u32 nr;
	__u32 pad;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct io_pending);
} ios_pending SEC(".maps");

/* entries in ios_pending: while 0 (nearly always: an entry is folded at its thread's next switch in, or deleted
 * when the thread exits), a switch in skips its hash lookup.  An entry added on another CPU just before a switch
 * in that still reads 0 waits for the thread's next switch in (and counts if that is still in the same request).
 * A map, not a global: each object's globals are its own, and the adding (block.bpf.c) and folding (requests.bpf.c)
 * objects differ. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ios_pending_entries SEC(".maps");

static __always_inline void ios_pending_entries_add(__s64 delta)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&ios_pending_entries, &zero);
	if (n)
		__sync_fetch_and_add(n, delta);
}

/* a block request charged to pid was issued: count it in the request the thread is in (cur: the current
 * thread's state, which the caller has looked up already) */
static __always_inline void req_note_io(__u32 pid, __u32 bytes, struct task_req *cur)
{
	struct task_req *r;
	if (!cfg.requests)
		return;
	if (!cfg.task_storage) {
		r = bpf_map_lookup_elem(&task_reqs, &pid);
	} else if (pid == (__u32)bpf_get_current_pid_tgid()) {
		r = cur;
	} else {
		struct io_pending *p = bpf_map_lookup_elem(&ios_pending, &pid);
		if (p) {
			__sync_fetch_and_add(&p->nr, 1);
			__sync_fetch_and_add(&p->bytes, bytes);
		} else {
			struct io_pending n = { .ts_first = bpf_ktime_get_ns(), .nr = 1, .bytes = bytes };
			if (!bpf_map_update_elem(&ios_pending, &pid, &n, BPF_NOEXIST))
				ios_pending_entries_add(1);
		}
		return;
	}
	if (r && r->in_req) {
		r->nr_ios++;
		r->io_bytes += bytes;
	}
}

/* storage mode: fold the block requests issued for this thread elsewhere into its request */
static __always_inline void req_fold_pending_ios(struct task_req *r, __u32 pid)
{
	if (!cfg.task_storage)
		return;
	__u32 zero = 0;
	__u64 *entries = bpf_map_lookup_elem(&ios_pending_entries, &zero);
	if (!entries || !*entries)
		return;
	struct io_pending *p = bpf_map_lookup_elem(&ios_pending, &pid);
	if (!p)
		return;
	if (p->ts_first >= r->start) {
		r->nr_ios += p->nr;
		r->io_bytes += p->bytes;
	}
	if (!bpf_map_delete_elem(&ios_pending, &pid))
		ios_pending_entries_add(-1);
}

static __always_inline __s64 inflight_get(__u32 pid)
{
#ifdef FST_PLAIN_BPF /* one slot per key */
	struct task_inflight_slot *n = task_inflight_find(pid);
	return n && !flight_stale(n->v.window_seq) ? n->v.n : 0;
#else
	struct task_inflight_bucket *bk = pid ? task_inflight_bucket_of(pid) : NULL;
	__s64 n = 0;
	if (!bk)
		return 0;
#pragma unroll
	for (int i = 0; i < FST_FLIGHT_WAYS; i++)
		if (bk->s[i].key == pid && !flight_stale(bk->s[i].v.window_seq))
			n += bk->s[i].v.n;
	return n;
#endif
}

#endif
