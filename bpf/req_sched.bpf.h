/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A request's time off the CPU (requests.bpf.c): sched_switch and sched_wakeup split its wall time into on-CPU,
 * I/O wait, other uninterruptible sleep, interruptible sleep, lock wait and runqueue time, and credit each
 * off-CPU interval to its kernel stack (--offcpu-stacks).
 */
#ifndef FSTRACE_REQ_SCHED_BPF_H
#define FSTRACE_REQ_SCHED_BPF_H

#ifndef FST_PLAIN_BPF
struct kstack_walk {
	struct fst_kstack *st;	 /* the frames just taken */
	struct fst_kstack *kept; /* for a compare: the frames kept under the same hash */
	__u32 h;
	__u32 differs;
};

/* the frame index as a 64-bit register: a __u32 is checked on its zero-extended copy and indexed with the
 * original, which the verifier rejects as unbounded (and barrier_var keeps clang from doing that anyway) */
static int kstack_hash_frame(__u32 i, struct kstack_walk *w)
{
	__u64 j = i;
	barrier_var(j);
	if (j >= MAX_STACK_DEPTH)
		return 1;
	__u64 ip = w->st->ips[j];
	w->h = (w->h ^ (__u32)ip ^ (__u32)(ip >> 32)) * 16777619; /* FNV-1a over the frames' halves */
	return 0;
}

static int kstack_cmp_frame(__u32 i, struct kstack_walk *w)
{
	__u64 j = i;
	barrier_var(j);
	if (j >= MAX_STACK_DEPTH)
		return 1;
	if (w->st->ips[j] != w->kept->ips[j]) {
		w->differs = 1;
		return 1;
	}
	return 0;
}

/* next's saved kernel stack (where it slept) as an offcpu_kstacks id; -1 when not kept (map full, a
 * different stack holds its hash, or no stack) */
static __always_inline __s32 offcpu_kstack_of(struct task_struct *next)
{
	__u32 zero = 0;
	struct fst_kstack *st = bpf_map_lookup_elem(&kstack_scratch, &zero);
	if (!st)
		return -1;
	long bytes = bpf_get_task_stack(next, st->ips, sizeof(st->ips), 0); /* zero-fills the rest */
	if (bytes <= 0)
		return -1;
	__u32 nr = bytes / sizeof(__u64);
	struct kstack_walk w = { .st = st, .h = 2166136261u };
	bpf_loop(nr, kstack_hash_frame, &w, 0);
	__u32 id = w.h & 0x7fffffff; /* stack ids are >= 0: the negative ones mean "not taken" */
	w.kept = bpf_map_lookup_elem(&offcpu_kstacks, &id);
	if (!w.kept) {
		if (bpf_map_update_elem(&offcpu_kstacks, &id, st, BPF_NOEXIST))
			return -1;
		return id;
	}
	/* frames 0..nr: the kept one's frame nr is 0 unless it is longer (both are zero-filled past their ends,
	 * and no frame of a stack is 0), so the rest of the tails need no compare (they were 127 calls a walk) */
	bpf_loop(nr < MAX_STACK_DEPTH ? nr + 1 : MAX_STACK_DEPTH, kstack_cmp_frame, &w, 0);
	return w.differs ? -1 : (__s32)id;
}
#else
/* the plain build has no bpf_loop (5.17): the collector walks off-CPU stacks at the switch out there
 * (cfg.offcpu_at_switch_in off), so this is never reached */
static __always_inline __s32 offcpu_kstack_of(struct task_struct *next)
{
	return -1;
}
#endif

/*
 * An off-CPU interval's time by reason, onto its stack.  With cfg.offcpu_at_switch_in the stack is walked
 * now, at the switch in, and only when the interval is at least cfg.offcpu_sample_ns long, or else with
 * probability length / offcpu_sample_ns, its parts then credited as if offcpu_sample_ns long (threshold
 * sampling: every stack's expected total is its exact total, the variance at most offcpu_sample_ns times it).
 * The parts of the request (io_wait, lock, ...) are exact either way; only their split by stack is sampled.
 */
static __always_inline void offcpu_credit(struct task_req *r, struct task_struct *next, __u64 worker_ns,
					  __u32 reason, __u64 reason_ns)
{
	if (!cfg.offcpu_stacks)
		return;
	__s32 stack = r->off_stack;
	if (cfg.offcpu_at_switch_in) {
		__u64 len = worker_ns + reason_ns, t = cfg.offcpu_sample_ns;
		if (!len)
			return;
		if (len < t) {
			if (bpf_get_prandom_u32() % t >= len)
				return;
			worker_ns = worker_ns * t / len;
			reason_ns = t - worker_ns;
		}
		stack = offcpu_kstack_of(next);
	}
	offcpu_add(stack, FST_OFF_WORKER, worker_ns);
	offcpu_add(stack, reason, reason_ns);
}

static __always_inline int handle_switch(void *ctx, bool preempt, struct task_struct *prev,
					 struct task_struct *next, unsigned int prev_state, bool btf)
{
	__u32 prev_pid = FST_FIELD(btf, prev, pid);
	__u32 next_pid = FST_FIELD(btf, next, pid);
	struct task_req *r = req_of(prev, prev_pid), *rn = req_of(next, next_pid);
	/* a switch between two tasks in no request (most of the system's) costs the two state lookups only:
	 * the clock (a helper call, dearer than a lookup: docs/overhead.md) is read once one of them is in a request */
	if (!r && !rn)
		return 0;
	__u64 now = bpf_ktime_get_ns();

	if (r) {
		if (r->off_ts) { /* its last switch in was never delivered */
			r->part[FST_PART_MISSED] += now - r->off_ts;
			r->nr_missed++;
		} else {
			r->part[FST_PART_ONCPU] += now - r->last_on;
		}
		r->off_ts = now;
		r->wake_ts = 0;
		r->off_state = prev_state;
		/* the walk is deferred to the switch in where it can be: see offcpu_credit */
		r->off_stack = cfg.offcpu_stacks && !cfg.offcpu_at_switch_in ? bpf_get_stackid(ctx, &stacks, 0) : -1;
		/* preempted, or yielded while still runnable: waiting for a CPU, not sleeping */
		r->off_preempted = preempt || prev_state == 0;
		/* waiting for I/O: in io_schedule() (the kernel's own iowait, as delay accounting counts it,
		 * which also covers bios held back by block throttling), or its own block I/O is in flight */
		r->off_io = (btf ? BPF_CORE_READ_BITFIELD(prev, in_iowait) : BPF_CORE_READ_BITFIELD_PROBED(prev, in_iowait)) ||
			    inflight_get(prev_pid) > 0;
		r->off_lock = r->lock_addr != 0;
		r->nr_switches++;
	}

	r = rn;
	if (r && !r->off_ts) {
		/* switched in without a delivered switch out: the split since last_on is unknown */
		r->part[FST_PART_MISSED] += now - r->last_on;
		r->nr_missed++;
		r->last_on = now;
	} else if (r) {
		if (r->off_preempted) {
			r->part[FST_PART_RUNQ] += now - r->off_ts;
		} else {
			__u64 woke = r->wake_ts && r->wake_ts <= now ? r->wake_ts : now;
			__u64 slept = woke - r->off_ts, worker_ns = 0;
			__u32 reason;
			if (r->waker_start) {
				/* woken by a kworker's filesystem work: the work's run, its wait for the worker,
				 * and only the time before it was queued as ordinary sleep */
				__u64 start = r->waker_start < r->off_ts ? r->off_ts : (r->waker_start > woke ? woke : r->waker_start);
				__u64 queued = r->waker_queue ? r->waker_queue : r->waker_start;
				queued = queued < r->off_ts ? r->off_ts : (queued > start ? start : queued);
				r->part[FST_PART_WORKER] += woke - start;
				r->part[FST_PART_WORKER_WAIT] += start - queued;
				worker_ns = woke - queued;
				slept = queued - r->off_ts;
				r->waker_start = r->waker_queue = 0;
			}
			if (r->off_lock) {
				/* waiting for a lock, whatever the sleep state (mutex_lock_interruptible too);
				 * a wait whose sleep the waking kworker's work took whole is not a lock wait */
				r->part[FST_PART_LOCK] += slept;
				r->nr_lock_waits += slept > 0;
				reason = FST_OFF_LOCK;
			} else if (r->off_state & TASK_UNINTERRUPTIBLE_BIT) {
				if (r->off_io) {
					r->part[FST_PART_IO_WAIT] += slept;
					reason = FST_OFF_IO;
				} else {
					r->part[FST_PART_DSLEEP] += slept;
					reason = FST_OFF_DSLEEP;
				}
			} else {
				r->part[FST_PART_SLEEP] += slept;
				reason = FST_OFF_SLEEP;
			}
			offcpu_credit(r, next, worker_ns, reason, slept);
			r->part[FST_PART_RUNQ] += now - woke;
			req_fold_pending_ios(r, next_pid);
		}
		r->off_ts = 0;
		r->last_on = now;
		/* the rest of this handler runs in next's on-CPU interval, which starts at now */
		tracer_charge(r, FST_SITE_SWITCH_IN, now);
	}
	return 0;
}

static __always_inline int handle_wakeup(struct task_struct *p, bool btf)
{
	__u32 pid = FST_FIELD(btf, p, pid);
	struct task_req *r = req_of(p, pid);
	if (!r || !r->off_ts || r->wake_ts)
		return 0;
	r->wake_ts = bpf_ktime_get_ns();
	/*
	 * The waker is a kworker in the middle of a known filesystem work item: the hop back to the reader.  Not
	 * when a block completion that came in on top of that kworker wakes it (its bios' end_io unlocking the
	 * reader's folios): current names the kworker then, but the wakeup is the completion's.  (The CPU's
	 * preempt count would tell any interrupt, but the verifier finds a per-CPU variable such as
	 * __preempt_count only in a kernel built with CONFIG_KALLSYMS_ALL, which 6.18 here is not.)
	 */
	__u32 cur = (__u32)bpf_get_current_pid_tgid();
	struct work_running_slot *ws = work_running_now(cur);
	if (ws && !completion_running()) {
		r->waker_queue = ws->v.ts_queue;
		r->waker_start = ws->v.ts_start;
		r->waker_seq = ws->v.seq; /* the timeline's flow from the work item to this request */
	}
	return 0;
}

/*
 * sched_switch's prev_state: its fourth argument where the kernel passes it, else prev's state.  The argument is
 * loaded by an instruction of its own, only where it exists (a program reading past a tracepoint's arguments is
 * refused, at load for tp_btf, at attach for raw_tp).
 */
static __always_inline unsigned int switch_prev_state(__u64 *ctx, struct task_struct *prev)
{
	__u64 v;
	if (!cfg.sched_switch_prev_state)
		return task_run_state(prev);
	asm volatile("%0 = *(u64 *)(%1 + 24)"
		     : "=r"(v)
		     : "r"(ctx));
	return (unsigned int)v;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return handle_switch(ctx, preempt, prev, next, switch_prev_state(ctx, prev), true);
}
SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return handle_switch(ctx, preempt, prev, next, switch_prev_state(ctx, prev), false);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup_btf, struct task_struct *p) { return handle_wakeup(p, true); }
SEC("raw_tp/sched_wakeup")
int BPF_PROG(sched_wakeup_raw, struct task_struct *p) { return handle_wakeup(p, false); }

#endif
