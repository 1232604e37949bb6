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

#define TASK_UNINTERRUPTIBLE_BIT 0x2

const volatile struct fst_cfg cfg = {};

/*
 * A field of a kernel object the hook handed over.  A tp_btf (or fentry) argument is a BTF pointer: the field
 * is a plain load (btf true); a raw_tp or kprobe argument is only a number: a probe read (a helper call, about
 * 30-50 ns each on the hot handlers).  btf is a constant of each program's inlined handler, so clang drops the
 * other branch and a raw_tp program never holds a load the verifier would refuse.
 */
#define FST_FIELD(btf, ptr, field) ((btf) ? (ptr)->field : BPF_CORE_READ(ptr, field))

#include "compat.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, FST_RINGBUF_BYTES);
} events SEC(".maps");

/* dropped records per record type: ring buffer full */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FST_MAX_REC_TYPES);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* entries that could not be kept, by records.h FST_LOSSES */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FST_NR_LOSSES);
	__type(key, __u32);
	__type(value, __u64);
} losses SEC(".maps");

static __always_inline void loss_count(__u32 what)
{
	__u64 *n = bpf_map_lookup_elem(&losses, &what);
	if (n)
		(*n)++;
}

/*
 * In-flight tables: what the block layer and the kworkers hold from one event to the next (a bio from its
 * queueing to its request's issue, a request until it completes, the loop device a kworker is serving).
 * A BPF hash map insert and its delete cost about 330 ns together on the development machine (bucket lock
 * and element free list, preallocated, not preallocated and LRU alike; a lookup costs about 30 ns), and
 * there were three such pairs per block request per level: the largest part of a cold read's block-layer
 * cost.  A flight table is an array of buckets of FST_FLIGHT_WAYS slots: a slot is claimed with a
 * compare-and-swap of its key from 0, found by comparing the bucket's keys and freed by storing 0 (all
 * three about 6 ns).  Keys are never 0 (kernel pointers, thread ids; 0 finds nothing) nor FST_FLIGHT_BUSY.  A full bucket loses the entry,
 * counted in `losses`.  Stale entries (their end event never came) are removed by block.bpf.c's
 * expire_stale, which the collector runs.
 */
/* a slot being freed by expire_stale: held (claim skips it, no key matches it) until its value is cleared */
#define FST_FLIGHT_BUSY (~0ull)

static __always_inline __u32 flight_bucket_index(__u64 key, __u32 nbuckets)
{
	/*
	 * A tp_btf argument (a bio, a request) is a pointer to the verifier, which allows no arithmetic on it
	 * but does let a privileged program copy its low half into a 32-bit register as a plain number (a mov32,
	 * hence -mcpu=v3 in the Makefile); slab objects differ in their low 32 bits.  Fibonacci hashing of that
	 * half (Knuth's multiplier): the product's upper half mixes all of its bits.
	 */
	__u32 lo = (__u32)key;
	return ((lo * 2654435761u) >> 16) & (nbuckets - 1); /* 32-bit operations only */
}

#define FST_FLIGHT_TABLE(name, value_t, nbuckets, loss)                                                      \
	struct name##_slot {                                                                                 \
		__u64 key;                                                                                   \
		value_t v;                                                                                   \
	};                                                                                                   \
	struct name##_bucket {                                                                               \
		struct name##_slot s[FST_FLIGHT_WAYS];                                                       \
	};                                                                                                   \
	struct {                                                                                             \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                                            \
		__uint(max_entries, nbuckets);                                                               \
		__type(key, __u32);                                                                          \
		__type(value, struct name##_bucket);                                                         \
	} name SEC(".maps");                                                                                 \
	static __always_inline struct name##_bucket *name##_bucket_of(__u64 key)                             \
	{                                                                                                    \
		__u32 b = flight_bucket_index(key, nbuckets);                                                \
		return bpf_map_lookup_elem(&name, &b);                                                       \
	}                                                                                                    \
	/* the slot holding key, NULL if none */                                                             \
	static __always_inline struct name##_slot *name##_find(__u64 key)                                    \
	{                                                                                                    \
		_Static_assert((nbuckets) <= 65536 && ((nbuckets) & ((nbuckets)-1)) == 0,                    \
			       "flight_bucket_index: a power of two, at most 16 bits");                      \
		struct name##_bucket *bk = key ? name##_bucket_of(key) : NULL; /* 0: a free slot */          \
		if (!bk)                                                                                     \
			return NULL;                                                                         \
		_Pragma("unroll")                                                                            \
		for (int i = 0; i < FST_FLIGHT_WAYS; i++)                                                    \
			if (bk->s[i].key == key)                                                             \
				return &bk->s[i];                                                            \
		return NULL;                                                                                 \
	}                                                                                                    \
	/* the slot of key, claimed if it has none; NULL (and a loss counted) when its bucket is full */     \
	static __always_inline struct name##_slot *name##_claim(__u64 key)                                   \
	{                                                                                                    \
		struct name##_slot *held = name##_find(key);                                                 \
		if (held || !key)                                                                            \
			return held;                                                                         \
		struct name##_bucket *bk = name##_bucket_of(key); /* an array: inlined */                    \
		if (!bk)                                                                                     \
			return NULL;                                                                         \
		_Pragma("unroll")                                                                            \
		for (int i = 0; i < FST_FLIGHT_WAYS; i++)                                                    \
			if (!bk->s[i].key && __sync_val_compare_and_swap(&bk->s[i].key, 0, key) == 0)        \
				return &bk->s[i];                                                            \
		loss_count(loss);                                                                            \
		return NULL;                                                                                 \
	}                                                                                                    \
	/* free a slot found or claimed above: its value is zeroed first, so a slot just claimed again never \
	 * shows expire_stale its previous holder's times */                                                 \
	static __always_inline void name##_release(struct name##_slot *slot)                                 \
	{                                                                                                    \
		__builtin_memset(&slot->v, 0, sizeof(slot->v));                                              \
		__atomic_exchange_n(&slot->key, 0, __ATOMIC_SEQ_CST);                                        \
	}

/* the bytes of a little-endian word of a name before its first NUL, the rest zeroed; *ended once a NUL is seen
 * (the lowest byte the zero-byte test flags is always a real NUL: a borrow only flags bytes above one) */
static __always_inline __u64 comm_word(__u64 w, bool *ended)
{
	if (*ended)
		return 0;
	__u64 nul = (w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull;
	if (!nul)
		return w;
	*ended = true;
	return w & (((nul & -nul) >> 7) - 1);
}

/*
 * The current task's name, NUL-padded as bpf_get_current_comm() gives it.  That helper costs about 35 ns here
 * and runs once per record and per bio; where the task is a BTF pointer (storage mode, whose kernels all have
 * bpf_get_current_task_btf) the name is two typed loads, clipped at its NUL (a name once longer may leave
 * bytes after it).
 */
static __always_inline void current_comm(char *comm)
{
	if (!cfg.task_storage) {
		bpf_get_current_comm(comm, 16);
		return;
	}
	struct task_struct *t = bpf_get_current_task_btf();
	bool ended = false;
	__u64 w0 = comm_word(*(__u64 *)&t->comm[0], &ended);
	__u64 w1 = comm_word(*(__u64 *)&t->comm[8], &ended);
	w1 &= 0x00ffffffffffffffull; /* the last byte is always the terminator */
	__builtin_memcpy(comm, &w0, 8);
	__builtin_memcpy(comm + 8, &w1, 8);
}

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
	__uint(max_entries, FST_MAX_TRACED_DEVS);
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

/* the block request whose completion queued a work item: the ts_complete_ns, sector and dev of its io record */
struct io_cause {
	__u64 ts_complete;
	__u64 sector;
	__u32 dev;
	__u32 pad;
};

/* a known filesystem work item a kworker is running now (block.bpf.c fills it; tasks.bpf.c reads it) */
struct work_start {
	__u64 ts_queue;
	__u64 ts_start;
	__u64 work;
	__u16 kind;
	__u16 pad;
	__u32 seq; /* its work record's seq: what a request it woke records as waker_seq */
	struct io_cause io;
};

FST_FLIGHT_TABLE(work_running, struct work_start, FST_WORKER_BUCKETS, FST_LOSS_WORK_TABLE)

/* a kind queued from a bio's end_io, whose work names the traced block request that queued it (records.h) */
static __always_inline bool work_kind_from_completion(__u16 kind)
{
#define FROM_COMPLETION(c) || kind == c
	return 0 FST_WORK_KINDS_FROM_COMPLETION(FROM_COMPLETION);
#undef FROM_COMPLETION
}

/*
 * The block request on a traced device whose completion is running on this CPU: block_rq_complete fires in
 * blk_update_request (and blk_complete_request) before the request's bios are ended, and what a bio's end_io
 * does happens within that call, on this CPU: it queues filesystem work (erofs: z_erofs_endio ->
 * z_erofs_decompress_kickoff queues the decompression when it runs in softirq or interrupt context, as blk-mq
 * completions do; btrfs: its read end-io), or wakes the reader whose folios it unlocked, maybe on top of a
 * kworker.  block.bpf.c's completion handler sets the entry; it stands for a completion still running only
 * while its request is not idle (blk_mq_free_request makes it so once its bios have all ended) and still starts
 * at the sector it completes from (a partial completion moves __sector on), so an earlier completion's entry,
 * or one overwritten by a completion in an interrupt nested in this one, stands for none.  (__data_len is no
 * test: 6.18 has zeroed it by the time the last bio's end_io runs.)  A per-CPU array: a lookup and four stores
 * per completion, no hashing.
 */
struct completing_rq {
	__u64 rq;	    /* struct request address, 0 = none (issued before tracing started) */
	struct io_cause io; /* its io record's identity; ts_complete 0 when no io record was written */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct completing_rq);
} completing SEC(".maps");

/* the traced block request whose completion is running on this CPU now, NULL if none (two reads of it: only on
 * rare paths) */
static __always_inline struct completing_rq *completion_running(void)
{
	__u32 zero = 0;
	struct completing_rq *c = bpf_map_lookup_elem(&completing, &zero);
	if (!c || !c->rq)
		return NULL;
	struct request *rq = (void *)c->rq;
	if (BPF_CORE_READ(rq, state) == MQ_RQ_IDLE || BPF_CORE_READ(rq, __sector) != c->io.sector)
		return NULL;
	return c;
}

/* kernel stacks: sampled on-CPU (sample.bpf.c) and at every off-CPU switch in a request (tasks.bpf.c) */
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
 * sampling, see offcpu_credit in tasks.bpf.c): the walk was 1.7-2.3 us of every switch out of a request.
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

/* include/trace/events/lock.h: contention_begin flags */
#ifndef LCB_F_SPIN
#define LCB_F_SPIN (1U << 0)
#define LCB_F_RT (1U << 3)
#define LCB_F_PERCPU (1U << 4)
#define LCB_F_MUTEX (1U << 5)
#endif

/* what the per-task state says of the task filters (storage mode: cached at its first read-family syscall) */
#define FST_VERDICT_UNKNOWN 0
#define FST_VERDICT_TRACED 1
#define FST_VERDICT_UNTRACED 2

/*
 * Per-task state: the request a traced thread is in (in_req), kept between requests.  In task-local storage
 * (cfg.task_storage: a lookup is a pointer walk from the task, no hashing, and a task without state costs
 * one NULL test) or, where the kernel lacks it, in a pid-keyed hash the collector swaps in before load.
 */
/* an inode (struct inode *) looked up for a request, and what it said (tasks.bpf.c note_file) */
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
	__u8 file_last; /* files[file_last] was used last */
	__u8 verdict;	/* FST_VERDICT_*: the task filters' answer, when it can be cached */
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
	__u32 window_seq; /* the request-hook window it began in (tasks.bpf.c window_seq) */
	__u8 user_stack_taken;
	__u8 sdev_traced; /* sdev passes the filesystem filter: looked up once per request (or kept) */
	__u8 agg_entry;	  /* req_agg entry + 1 of (sdev, kind) (agg_entry_of), 0: not looked up yet */
	__u8 keep_file;	  /* keep.files index + 1 of its file, 0: none (a path-based stat call, a sync) */
	/* a request bounded at a filesystem entry point (tasks.bpf.c, "Requests bounded at the filesystems'
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
 * The tracer's own time: a handler that ran on top of a request in progress (in its thread, or in an
 * interrupt on its CPU) charges its run time to the request's tracer part, measured on 1 in
 * FST_TRACER_TIME_EVERY runs and estimated on the rest (records.h FST_TRACER_SITES says why).  What the
 * kernel spends calling the program before its first clock read (tracepoint dispatch, a few tens of ns) is
 * not in it; the sampled stacks measure that share independently.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FST_NR_TRACER_SITES);
	__type(key, __u32);
	__type(value, struct fst_tracer_site);
} tracer_sites SEC(".maps");

/* whether to time this run of a site: at random (xorshift32), so that which runs are timed cannot follow a
 * pattern of the handlers' own; always until the site has a timed run on this CPU */
static __always_inline bool tracer_pick(struct fst_tracer_site *ts)
{
	__u32 x = ts->rng ? ts->rng : 2463534242u;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	ts->rng = x;
	return !ts->timed || x % FST_TRACER_TIME_EVERY == 0;
}

/* a run of site charged to r: timed from t0 (not 0), else its site's mean.  Programs sharing a site (the
 * contention pair, erofs's three, the decompressors) can nest on a CPU (one in an interrupt on top of another):
 * a count may then be lost and the inner run fall in the outer's timed interval; rare, and no bias to speak of */
static __always_inline void tracer_account(struct task_req *r, struct fst_tracer_site *ts, __u64 t0)
{
	__u64 ns = ts->mean_ns;
	ts->runs++;
	if (t0) {
		ns = bpf_ktime_get_ns() - t0;
		ts->timed++;
		ts->timed_ns += ns;
		ts->timed_sq_ns += ns * ns;
		ts->mean_ns = ts->timed_ns / ts->timed;
	}
	ts->charged_ns += ns;
	r->part[FST_PART_TRACER] += ns;
}

/* the site's per-CPU state, for a handler that ran inside a request (r), else NULL */
static __always_inline struct fst_tracer_site *tracer_site(struct task_req *r, __u32 site)
{
	return r ? bpf_map_lookup_elem(&tracer_sites, &site) : NULL;
}

/* a handler that read the clock at its start (t0) for its own needs: this run is timed from there, or not */
static __always_inline void tracer_charge(struct task_req *r, __u32 site, __u64 t0)
{
	struct fst_tracer_site *ts = tracer_site(r, site);
	if (ts)
		tracer_account(r, ts, tracer_pick(ts) ? t0 : 0);
}

/* a handler with no clock of its own: at its start, the time to charge from if this run is to be timed, else
 * 0 (no clock read); its end passes that to tracer_charge_from */
static __always_inline __u64 tracer_clock(struct task_req *r, __u32 site)
{
	struct fst_tracer_site *ts = tracer_site(r, site);
	return ts && tracer_pick(ts) ? bpf_ktime_get_ns() : 0;
}

static __always_inline void tracer_charge_from(struct task_req *r, __u32 site, __u64 t0)
{
	struct fst_tracer_site *ts = tracer_site(r, site);
	if (ts)
		tracer_account(r, ts, t0);
}

/* superblock devices (kernel dev_t) whose files' requests are kept when cfg.filter_sdev is on */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} traced_sdevs SEC(".maps");

/* the device stat() reports for a traced filesystem's files -> its superblock's, where they differ (a btrfs
 * subvolume's anonymous device): a path-based stat call is placed by the former (tasks.bpf.c note_statbuf) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} stat_devs SEC(".maps");

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

static __always_inline bool current_is_traced(void)
{
	if (cfg.filter_pids) {
		__u32 pid = (__u32)bpf_get_current_pid_tgid();
		if (!bpf_map_lookup_elem(&traced_pids, &pid))
			return false;
	}
	if (cfg.filter_comm) {
		char comm[16];
		current_comm(comm);
		if (!comm_matches(comm))
			return false;
	}
	if (cfg.filter_cgroup_id && bpf_get_current_cgroup_id() != cfg.filter_cgroup_id)
		return false;
	return true;
}

/* storage mode, pid-tree filter only: the filter's answer cannot change for a task (pids only join), so it is
 * kept in the task's state and an untraced task's read-family syscall costs one storage lookup */
static __always_inline bool verdict_cacheable(void)
{
	return cfg.task_storage && !cfg.filter_comm && !cfg.filter_cgroup_id;
}

/* whether the current thread (whose state is r) is traced: the verdict its state keeps where that can be
 * cached and is known (no hash lookup of the pid), else the filters */
static __always_inline bool state_is_traced(struct task_req *r)
{
	if (verdict_cacheable() && r && r->keep.verdict != FST_VERDICT_UNKNOWN)
		return r->keep.verdict == FST_VERDICT_TRACED;
	return current_is_traced();
}

static __always_inline bool sdev_is_traced(__u32 sdev)
{
	return !cfg.filter_sdev || bpf_map_lookup_elem(&traced_sdevs, &sdev) != NULL;
}

/* whether a superblock is one of the traced ones, by comparing it with cfg.sdevs: no map lookup, for the hooks
 * other filesystems' calls reach too (tasks.bpf.c, the filesystems' entry points) */
static __always_inline bool sdev_in_cfg(__u32 sdev)
{
#pragma unroll
	for (int i = 0; i < FST_CFG_SDEVS; i++)
		if (i < cfg.nr_sdevs && cfg.sdevs[i] == sdev)
			return true;
	return false;
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

/*
 * Submit a record without waking the reader (a wakeup is an irq_work, on a VM a trapped self-IPI, and per
 * record it cost more than everything else fstrace does): the reader drains on its own timer, and is woken
 * only by the record that brings the waiting data over cfg.wakeup_bytes, so a burst cannot fill the buffer
 * between two timer ticks.
 */
static __always_inline void record_submit(void *rec)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u32 size = ((__u32 *)rec)[1];
	bool crossed = avail >= cfg.wakeup_bytes && avail - size < cfg.wakeup_bytes;
	bpf_ringbuf_submit(rec, crossed ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/* log2 histogram slot (records.h fst_log2), clamped to FST_HIST_SLOTS */
static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 r = fst_log2(v);
	return r < FST_HIST_SLOTS ? r : FST_HIST_SLOTS - 1;
}

/*
 * log2_slot(ns / 1000) without the division (a 64-bit divide is tens of cycles, and the request aggregate takes
 * three per page-cache hit): ns in [2^e, 2^(e+1)) puts ns / 1000 in [2^(e-10), 2^(e-8)), so its log2 is e - 9,
 * or e - 10 when 1000 << (e - 9) is past ns.  Exact for every ns.
 */
static __always_inline __u32 log2_slot_us(__u64 ns)
{
	if (ns < 2000)
		return 0; /* ns / 1000 is 0 or 1 */
	__u32 k = fst_log2(ns) - 9;
	if ((1000ull << k) > ns)
		k--;
	return k < FST_HIST_SLOTS ? k : FST_HIST_SLOTS - 1;
}

/* one more in slots[slot] of a histogram other CPUs add to as well */
static __always_inline void slot_count(__u64 *slots, __u32 slot)
{
	barrier_var(slot); /* bound checked on the register that indexes (see tasks.bpf.c slot_inc) */
	if (slot < FST_HIST_SLOTS)
		__sync_fetch_and_add(&slots[slot], 1);
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
	slot_count(h->slots, log2_slot(value));
}

static __always_inline void inflight_add(__u32 pid, __s64 delta)
{
	if (!pid || !cfg.requests) /* read only by sched_switch's I/O-wait test */
		return;
	__s64 *n = bpf_map_lookup_elem(&task_inflight, &pid);
	if (n) {
		__sync_fetch_and_add(n, delta);
		return;
	}
	if (delta > 0)
		bpf_map_update_elem(&task_inflight, &pid, &delta, BPF_ANY);
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
 * A map, not a global: each object's globals are its own, and the adding (block.bpf.c) and folding (tasks.bpf.c)
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
	__s64 *n = bpf_map_lookup_elem(&task_inflight, &pid);
	return n ? *n : 0;
}

/* ---- decompression and compression probes (erofs/squashfs/btrfs .bpf.c): entry saves, exit emits ---- */

#define PF_WQ_WORKER 0x00000020
#define PF_KTHREAD 0x00200000

/* where the current code runs, for records of work done on behalf of readers and writers */
static __always_inline __u16 current_context(bool traced)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	unsigned int flags = BPF_CORE_READ(task, flags);
	return traced		      ? FST_CTX_TRACED :
	       (flags & PF_WQ_WORKER) ? FST_CTX_KWORKER :
	       (flags & PF_KTHREAD)   ? FST_CTX_KTHREAD :
					FST_CTX_OTHER_TASK;
}

/* what a decompression's or a compression's entry saved for its exit's record */
struct coder_start {
	__u64 ts;
	__u32 in_bytes;	 /* decompression: known at entry */
	__u32 out_bytes; /* decompression: known at entry (erofs, btrfs), else taken from the return value */
	__u32 dev;
	__u16 fs;
	__u16 alg;
	__u16 tier;
};

/* a btrfs compression's (btrfs.bpf.c): its sizes are read at exit through the function's total_in and total_out
 * pointers */
struct compress_start {
	struct coder_start c;
	__u64 file_pos;
	__u64 ino;
	__u64 total_in; /* kernel addresses of the function's unsigned long results */
	__u64 total_out;
};

/* per thread: decompressors do not nest within one thread */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct coder_start);
} decomp_starts SEC(".maps");

static __always_inline void decomp_begin(__u16 fs, __u16 alg, __u32 in_bytes, __u32 out_bytes, __u32 dev,
					 __u16 tier)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct coder_start d = {
		.ts = bpf_ktime_get_ns(),
		.in_bytes = in_bytes,
		.out_bytes = out_bytes,
		.dev = dev,
		.fs = fs,
		.alg = alg,
		.tier = tier,
	};
	bpf_map_update_elem(&decomp_starts, &pid, &d, BPF_ANY);
	tracer_charge(current_req(), FST_SITE_DECOMP, d.ts);
}

/* the fields a decompression's and a compression's records share (records.h), from their entry's state s: a
 * macro, the two records being different structures */
#define CODER_RECORD_FIELDS(rec, s, now, pid_tgid, ret_, traced) \
	do {                                                     \
		(rec)->ts_start_ns = (s)->ts;                    \
		(rec)->ts_end_ns = (now);                        \
		(rec)->pid = (__u32)(pid_tgid);                  \
		(rec)->tgid = (pid_tgid) >> 32;                  \
		(rec)->dev = (s)->dev;                           \
		(rec)->ret = (ret_);                             \
		(rec)->fs = (s)->fs;                             \
		(rec)->alg = (s)->alg;                           \
		(rec)->context = current_context(traced);        \
		(rec)->tier = (s)->tier;                         \
		current_comm((rec)->comm);                       \
	} while (0)

/*
 * The exit of a decompression (starts: decomp_starts) or a compression (compress: its map's values are struct
 * compress_start): the state its entry saved under the thread's id becomes its record and is dropped.  False
 * when there was none (a call that began before tracing, or that its entry did not trace).
 */
static __always_inline bool coder_end(void *starts, bool compress, __u64 now, long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = (__u32)pid_tgid;
	struct coder_start *s = bpf_map_lookup_elem(starts, &pid);
	if (!s)
		return false;
	if (compress) {
		struct compress_start *c = (void *)s;
		struct fst_compress *rec = record_reserve(FST_REC_COMPRESS, sizeof(*rec));
		if (rec) {
			unsigned long in = 0, out = 0;
			bpf_probe_read_kernel(&in, sizeof(in), (void *)c->total_in);
			bpf_probe_read_kernel(&out, sizeof(out), (void *)c->total_out);
			CODER_RECORD_FIELDS(rec, s, now, pid_tgid, ret, current_is_traced());
			rec->file_pos = c->file_pos;
			rec->ino = c->ino;
			rec->in_bytes = in;
			rec->out_bytes = out;
			record_submit(rec);
		}
	} else {
		struct fst_decomp *rec = record_reserve(FST_REC_DECOMP, sizeof(*rec));
		if (rec) {
			bool traced = current_is_traced();
			CODER_RECORD_FIELDS(rec, s, now, pid_tgid, ret, traced);
			rec->in_bytes = s->in_bytes;
			rec->out_bytes = s->out_bytes ? s->out_bytes : (ret > 0 ? (__u32)ret : 0);
			rec->charged_pid = traced ? pid : 0;
			rec->pad0 = 0;
			record_submit(rec);
		}
	}
	bpf_map_delete_elem(starts, &pid);
	return true;
}

static __always_inline void decomp_end(long ret)
{
	__u64 now = bpf_ktime_get_ns();
	if (coder_end(&decomp_starts, false, now, ret))
		tracer_charge(current_req(), FST_SITE_DECOMP, now);
}

/*
 * A kernel function's fentry program and its kprobe twin (the collector
 * enables one).  The parameter list comes last; BEGIN is run at entry with
 * `tier` in scope.
 */
#define ENTRY_PROBES(fn, BEGIN, ...)             \
	SEC("fentry/" #fn)                       \
	int BPF_PROG(fn##_fentry, __VA_ARGS__)   \
	{                                        \
		__u16 tier = FST_TIER_FENTRY;    \
		(void)tier;                      \
		BEGIN;                           \
		return 0;                        \
	}                                        \
	SEC("kprobe/" #fn)                       \
	int BPF_KPROBE(fn##_kprobe, __VA_ARGS__) \
	{                                        \
		__u16 tier = FST_TIER_KPROBE;    \
		(void)tier;                      \
		BEGIN;                           \
		return 0;                        \
	}

/* entry and exit: ENTRY_PROBES plus fexit and the kretprobe twin, END run with the return value `ret` (of
 * type RET_T) in scope */
#define FUNC_PROBES(fn, BEGIN, END, RET_T, ...)          \
	ENTRY_PROBES(fn, BEGIN, __VA_ARGS__)             \
	SEC("fexit/" #fn)                                \
	int BPF_PROG(fn##_fexit, __VA_ARGS__, RET_T ret) \
	{                                                \
		END;                                     \
		return 0;                                \
	}                                                \
	SEC("kretprobe/" #fn)                            \
	int BPF_KRETPROBE(fn##_kretprobe, RET_T ret)     \
	{                                                \
		END;                                     \
		return 0;                                \
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
