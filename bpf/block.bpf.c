// SPDX-License-Identifier: GPL-2.0
/*
 * Block layer: one FST_REC_IO record per completed request on a traced device,
 * with queue/issue/complete times, merges, and the traced task it is charged
 * to.  Bios queued by a loop worker are charged to the task whose loop request
 * the worker is serving, so the backing device's I/O follows the reader.
 *
 * Every handler has a tp_btf program and a raw_tp twin; the collector enables
 * one of them per tracepoint.  Handlers read through FST_FIELD (a typed load in
 * the tp_btf program, BPF_CORE_READ in the raw_tp one) or BPF_CORE_READ, so the
 * same code is valid for both.
 */
#include "common.bpf.h"
#include "workqueue.bpf.h" /* the kworker hooks: loop workers and filesystem work items */

char LICENSE[] SEC("license") = "GPL";

/* bios queued on a traced device and not yet in an issued request, by struct bio address */
FST_FLIGHT_TABLE(bio_starts, struct fst_bio_start, FST_BIO_BUCKETS, FST_OBJ_RUN_SHIFT, FST_LOSS_BIO_TABLE)

/* issued block requests on a traced device, by struct request address */
FST_FLIGHT_TABLE(rq_starts, struct fst_rq_start, FST_RQ_BUCKETS, FST_OBJ_RUN_SHIFT, FST_LOSS_RQ_TABLE)

/*
 * traced loop device (its io_slot: device i of --dev is i) -> traced thread whose request it issued last, 0 = none yet.  A
 * loop worker serves requests in the order they were queued, so with one reader per device this is exact; with
 * several concurrent readers on one loop device the backing I/O is charged to the latest issuer
 * (docs/measuring.md, "Attribution").  An array: a lookup is a bounds check and an address, no helper call.
 */
struct loop_owner {
	__u32 pid;
	__u32 window_seq; /* the window it issued in (flight.bpf.h): an earlier window's owner is none */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FST_MAX_TRACED_DEVS);
	__type(key, __u32);
	__type(value, struct loop_owner);
} loop_owner SEC(".maps");

/* each traced device's histograms and alignment counters (records.h struct fst_dev_io), by its io_slot */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FST_MAX_TRACED_DEVS);
	__type(key, __u32);
	__type(value, struct fst_dev_io);
} dev_io SEC(".maps");

/*
 * --budget (serve, attach): each traced device's completed requests from block_rq_complete alone (block_rq_done),
 * by its io_slot, per CPU: no atomics, no hash lookup, no in-flight state (records.h struct fst_dev_done).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FST_MAX_TRACED_DEVS);
	__type(key, __u32);
	__type(value, struct fst_dev_done);
} dev_done SEC(".maps");

/* set by the collector where block_rq_done is attached: io_completed leaves it the sizes, bytes and alignment */
bool exact_io_on;

/* set by the collector where --budget windows these hooks (user/window.c window_prepare, no_windows): a block
 * request is then recorded only whole, inside one window (handle_rq_issue) */
bool windows_on;

static __always_inline __u32 rq_dev(struct request *rq, bool btf)
{
	__u32 part = request_part_dev(rq, btf);
	if (part)
		return part;
	struct gendisk *disk = request_disk(rq);
	return FST_KDEV(BPF_CORE_READ(disk, major), BPF_CORE_READ(disk, first_minor));
}

/*
 * Who a bio queued now is charged to: a loop worker's, to the traced thread whose loop request it serves (the
 * loop device's owner); else the current thread, where the task filters trace it.  Returns the current thread's
 * state where requests are traced, NULL for a loop worker: one is never a traced thread's request, so the
 * backing device's bios (half of a cold read's) need no state lookup and no filter.
 */
static __always_inline struct task_req *charge_current(struct fst_bio_start *s)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();

	s->queue_pid = pid;
	if (!cfg.no_io_records) /* the io record's only: serve writes none */
		current_comm(s->comm);
	struct loop_ctx_slot *lc = loop_ctx_find(pid);
	if (lc && !flight_stale(lc->v.window_seq)) {
		__u32 io_slot = lc->v.io_slot;
		struct loop_owner *owner = bpf_map_lookup_elem(&loop_owner, &io_slot);
		if (owner && owner->pid && !flight_stale(owner->window_seq)) {
			s->pid = owner->pid;
			s->charge = FST_CHARGE_LOOP;
		}
		return NULL;
	}
	struct task_req *st = cfg.requests ? current_state_for_trace_decision() : NULL;
	if (cfg.requests ? state_is_traced(st) : current_is_traced()) {
		s->pid = pid;
		s->charge = FST_CHARGE_DIRECT;
	}
	return st;
}

/* when this CPU last took a bio queue stack (records.h FST_IO_STACK_EVERY_NS) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} io_stack_last SEC(".maps");

/*
 * Set by the collector outside --budget's windows (user/window.c attribution_on): the queue stacks are a sample,
 * taken where the other samples are.  A walk of a bio's queueing stack is the dearest thing the always-on block
 * handlers do (an unwind frame by frame, on a cold read's critical path).
 */
bool io_stacks_paused;

static __always_inline __s32 io_stack(void *ctx, __u64 now)
{
	if (!cfg.offcpu_stacks)
		return -1;
	if (io_stacks_paused)
		return FST_STACK_UNSAMPLED;
	if (!cfg.io_stacks_all) {
		__u32 zero = 0;
		__u64 *last = bpf_map_lookup_elem(&io_stack_last, &zero);
		if (!last)
			return FST_STACK_UNSAMPLED;
		if (*last && now - *last < FST_IO_STACK_EVERY_NS)
			return FST_STACK_UNSAMPLED;
		*last = now;
	}
	return bpf_get_stackid(ctx, &stacks, 0);
}

/*
 * The slot of a bio queued (or split off) now.  The kernel traces a bio's queueing once until its end (the
 * BIO_TRACE_COMPLETION flag: a split remainder submitted again is not traced again), so an entry already at its
 * address is an earlier bio whose end was never seen: counted, and what it held given back.
 */
static __always_inline struct bio_starts_slot *bio_slot_anew(__u64 bio)
{
	struct bio_starts_slot *slot = bio_starts_find(bio);
	if (!slot)
		return bio_starts_claim(bio); /* NULL: counted, its request will not be charged */
	if (flight_stale(slot->v.window_seq)) /* an earlier window's, whose end came after its hooks went off */
		return slot;
	loss_count(FST_LOSS_BIO_END_MISSED);
	inflight_add(slot->v.pid, -1);
	return slot;
}

static __always_inline int handle_bio_queue(void *ctx, struct bio *bio, bool btf)
{
	__u32 dev = bio_dev(bio, btf);
	if (!dev_cfg(dev))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct fst_bio_start s = { .ts_queue = now, .stack = io_stack(ctx, now), .window_seq = window_seq };
	struct task_req *st = charge_current(&s);
	struct bio_starts_slot *slot = bio_slot_anew((__u64)bio);
	if (!slot)
		return 0;
	slot->v = s;
	inflight_add(s.pid, 1);
	tracer_charge(st && st->in_req ? st : NULL, FST_SITE_BIO_QUEUE, s.ts_queue);
	return 0;
}

/* the front part split off a bio inherits the queue time and owner of its parent (bio_chain: bi_private) */
static __always_inline int handle_bio_split(struct bio *split, bool btf)
{
	__u32 dev = bio_dev(split, btf);
	if (!dev_cfg(dev))
		return 0;
	void *parent = BPF_CORE_READ(split, bi_private);
	struct bio_starts_slot *ps = bio_starts_find((__u64)parent);
	struct fst_bio_start s = { .stack = -1, .window_seq = window_seq };
	if (ps && !flight_stale(ps->v.window_seq)) {
		s = ps->v;
	} else if (windows_on) {
		/* its parent was queued before this window's hooks went on: its request is left out whole */
		return 0;
	} else {
		s.ts_queue = bpf_ktime_get_ns();
		charge_current(&s);
	}
	struct bio_starts_slot *slot = bio_slot_anew((__u64)split);
	if (!slot)
		return 0;
	slot->v = s;
	inflight_add(s.pid, 1);
	return 0;
}

/*
 * A bio that ended outside a request: failed before it got one, or on a bio-based device.  The kernel traces
 * this end only for such bios (a request's bios end with it, block_rq_complete), so a bio throttled or waiting
 * for a request stays in flight as long as it really does.
 */
static __always_inline int handle_bio_complete(struct bio *bio)
{
	struct bio_starts_slot *slot = bio_starts_find((__u64)bio);
	if (!slot)
		return 0;
	if (!flight_stale(slot->v.window_seq))
		inflight_add(slot->v.pid, -1);
	bio_starts_release(slot);
	return 0;
}

#define MAX_RQ_BIOS 256

struct rq_walk {
	struct bio *bio;
	struct fst_rq_start *r;
};

/* one bio of a request's chain: fold its queue time and owner into the request */
static __always_inline void fold_bio(struct fst_rq_start *r, struct bio *bio)
{
	struct bio_starts_slot *slot = bio_starts_find((__u64)bio);
	r->nr_bios++;
	if (!slot)
		return;
	if (flight_stale(slot->v.window_seq)) { /* queued in an earlier window: its request is not this one's */
		bio_starts_release(slot);
		return;
	}
	r->bios_seen++;
	struct fst_bio_start *s = &slot->v;
	if (!r->ts_queue || s->ts_queue < r->ts_queue)
		r->ts_queue = s->ts_queue;
	if (!r->queue_pid) {
		r->queue_pid = s->queue_pid;
		r->stack = s->stack;
		__builtin_memcpy(r->comm, s->comm, sizeof(r->comm));
	}
	if (s->pid && !r->pid) {
		r->pid = s->pid;
		r->charge = s->charge;
	}
	if (s->pid) {
		/* move the bio's in-flight count onto the request's owner */
		if (s->pid != r->pid) {
			inflight_add(s->pid, -1);
			inflight_add(r->pid, 1);
		}
		r->charged_bios++;
	}
	bio_starts_release(slot);
}

#ifndef FST_PLAIN_BPF
/* bpf_loop's callback over the rest of the chain: the links are read by a helper (the callback's argument loses
 * the bio's BTF type) */
static int walk_bio(__u32 i, struct rq_walk *w)
{
	struct bio *bio = w->bio;
	if (!bio)
		return 1;
	w->bio = BPF_CORE_READ(bio, bi_next);
	fold_bio(w->r, bio);
	return 0;
}
#endif

/* a request's chain of bios as fold_bio_chain takes it: kernel addresses (0 = none), stored by the caller */
struct bio_chain {
	__u64 first; /* the request's first bio */
	__u64 next;  /* its bi_next */
};

/*
 * Fold a request's chain of bios (ch) into r.  A global function: the verifier checks it once, not once for each
 * way of every in-flight table lookup before and after it (the chain's bios' slots and their owners' in-flight
 * counts are such lookups).  Its pointers come as memory, not arguments: a global function takes no BTF pointer,
 * and a privileged program may store one where a plain number is read back.
 */
FST_GLOBAL_FN int fold_bio_chain(struct fst_rq_start *r, struct bio_chain *ch)
{
	if (!r || !ch || !ch->first)
		return 0;
	fold_bio(r, (struct bio *)ch->first);
#ifdef FST_PLAIN_BPF
	/* a bounded C loop, for kernels without bpf_loop (the plain build) */
	struct bio *bio = (struct bio *)ch->next;
	for (int i = 0; i < MAX_RQ_BIOS && bio; i++) {
		struct bio *next = BPF_CORE_READ(bio, bi_next);
		fold_bio(r, bio);
		bio = next;
	}
#else
	/* bpf_loop, not a C loop: the 6.1 verifier rejects loops that close on a fall-through edge */
	struct rq_walk w = { .bio = (struct bio *)ch->next, .r = r };
	if (w.bio)
		bpf_loop(MAX_RQ_BIOS, walk_bio, &w, 0);
#endif
	return 0;
}

/* fold the bios of rq's chain into r (their queue time, owner and in-flight counts), freeing their entries; the
 * first bio's link is read by a typed load where rq is a BTF pointer (most requests have one bio) */
static __always_inline void fold_bios(struct fst_rq_start *r, struct request *rq, bool btf)
{
	struct bio *first = FST_FIELD(btf, rq, bio);
	if (!first)
		return;
	struct bio_chain ch = { .first = (__u64)first, .next = (__u64)FST_FIELD(btf, first, bi_next) };
	fold_bio_chain(r, &ch);
}

/* a request requeued after an issue (the driver was busy, a part completed and the rest is retried): its next
 * issue is the same request's */
static __always_inline int handle_rq_requeue(struct request *rq)
{
	struct rq_starts_slot *slot = rq_starts_find((__u64)rq);
	if (slot && !flight_stale(slot->v.window_seq)) {
		slot->v.requeued = 1;
		slot->v.nr_requeues++;
	}
	return 0;
}

static __always_inline int handle_rq_issue(struct request *rq, bool btf)
{
	__u32 dev = rq_dev(rq, btf);
	struct fst_dev_cfg *dc = dev_cfg(dev);
	if (!dc)
		return 0;
	__u64 now = bpf_ktime_get_ns();

	struct rq_starts_slot *old = rq_starts_find((__u64)rq);
	bool stale = old && flight_stale(old->v.window_seq);
	if (old && !stale && old->v.requeued) { /* keep its bios' accounting, take the new issue time */
		old->v.requeued = 0;
		old->v.ts_issue = now;
		return 0;
	}
	if (old && !stale) {
		/* issued again with no requeue between: a request in flight is never issued twice, so the
		 * completion of its previous issue was never seen; that one ends here, unrecorded */
		loss_count(FST_LOSS_RQ_COMPLETION_MISSED);
		inflight_add(old->v.pid, -(__s64)old->v.charged_bios);
	}
	if (old) /* stale: an earlier window's, whose completion came after its hooks went off */
		rq_starts_release(old);

	struct fst_rq_start r = { .ts_issue = now, .sector = FST_FIELD(btf, rq, __sector), .stack = -1, .window_seq = window_seq };
	fold_bios(&r, rq, btf);
	/* --budget: a request with a bio queued before this window's hooks went on began before it, and is left
	 * out whole (no record, no charge), as a request that began before a window is; so is every one while
	 * the number is even (the hooks on before the first window, flight.bpf.h window_seq) */
	bool whole = !windows_on || ((window_seq & 1) && r.nr_bios && r.bios_seen == r.nr_bios);
	struct rq_starts_slot *slot = whole ? rq_starts_claim((__u64)rq) : NULL;
	if (slot)
		slot->v = r;
	else /* counted (a full bucket) or left out; its bios' in-flight counts would never be taken back */
		inflight_add(r.pid, -(__s64)r.charged_bios);

	if (dc->is_loop && (r.pid || !whole)) {
		__u32 slot = dc->io_slot;
		struct loop_owner *owner = bpf_map_lookup_elem(&loop_owner, &slot);
		/* a request left out has no owner: the loop worker's backing I/O for it is charged to nobody */
		if (owner)
			*owner = (struct loop_owner){ .pid = whole ? r.pid : 0, .window_seq = window_seq };
	}
	struct task_req *cur = current_req();
	/* backing-device requests done for a loop request are the same I/O one level down: count it once */
	if (whole && r.charge == FST_CHARGE_DIRECT)
		req_note_io(r.pid, FST_FIELD(btf, rq, __data_len), cur);
	tracer_charge(cur, FST_SITE_RQ_ISSUE, now);
	return 0;
}

/* one more in *c: by an atomic add where other CPUs add to it too, else (a per-CPU map's value) a plain one */
static __always_inline void count_one(__u64 *c, bool percpu)
{
	if (percpu)
		(*c)++;
	else
		__sync_fetch_and_add(c, 1);
}

/* unit: the device's alignment unit (fst_dev_cfg unit_bytes, 0 = 4096); percpu: a is this CPU's alone */
static __always_inline void count_alignment(struct fst_align *a, __u64 unit, __u64 sector, __u32 bytes, bool percpu)
{
	__u64 start = sector << 9;
	__u64 end = start + bytes;
	if (!unit)
		unit = 4096;

	count_one(&a->nr, percpu);
	if ((start & 4095) == 0)
		count_one(&a->start_4k, percpu);
	if ((end & 4095) == 0)
		count_one(&a->end_4k, percpu);
	/* a unit of a power of two (every filesystem block size) by masks: a 64-bit division is tens of cycles, and
	 * this runs on every completion */
	bool pow2 = (unit & (unit - 1)) == 0;
	__u64 start_off = pow2 ? start & (unit - 1) : start % unit;
	if (start_off == 0)
		count_one(&a->start_unit, percpu);
	if ((pow2 ? end & (unit - 1) : end % unit) == 0)
		count_one(&a->end_unit, percpu);
	if (bytes && start_off && (pow2 ? (start ^ (end - 1)) >= unit : start / unit != (end - 1) / unit))
		count_one(&a->cross_unit, percpu);
}

/* a request's last completion as io_completed files it: what handle_rq_complete read and looked up */
struct rq_done {
	struct fst_rq_start rs; /* its issue state, when have_rs */
	__u64 now;
	__u64 sector; /* its first sector */
	__u32 bytes;  /* all its parts' bytes */
	__u32 dev;
	__u32 cmd_flags;
	__s32 error;
	__u32 have_rs;
	__u32 io_slot;	  /* the device's (struct fst_dev_cfg): looked up once, by handle_rq_complete */
	__u32 unit_bytes; /* the same */
};

/*
 * The io record, histograms, sums and alignment counters of a request's last completion (d); 1 when it wrote
 * the record.  A global function: the verifier checks it once, not once for each way the in-flight table
 * lookups before it went (each way multiplies the verifier's work, and every load is part of the collector's start).
 */
FST_GLOBAL_FN int io_completed(struct rq_done *d)
{
	if (!d)
		return 0;
	/* never NULL, its use tested on have_rs: a pointer NULL or not by have_rs, clang tested through a spilled copy
	 * of have_rs, whose value the 6.1 verifier does not keep in a 4-byte spill (it then saw a NULL dereference) */
	struct fst_rq_start *r = &d->rs;
	bool have_rs = d->have_rs;
	__u32 bytes = d->bytes;
	__u64 now = d->now, sector = d->sector;

	/* serve: the histograms, sums and alignment counters below are all it exports */
	struct fst_io *rec = cfg.no_io_records ? NULL : record_reserve(FST_REC_IO, sizeof(*rec));
	if (rec) {
		rec->ts_complete_ns = now;
		rec->sector = sector;
		rec->bytes = bytes;
		rec->dev = d->dev;
		rec->cmd_flags = d->cmd_flags;
		rec->error = d->error;
		rec->pad0 = 0;
		if (have_rs) {
			rec->ts_queue_ns = r->ts_queue ? r->ts_queue : r->ts_issue;
			rec->ts_issue_ns = r->ts_issue;
			rec->nr_bios = r->nr_bios;
			rec->pid = r->pid;
			rec->queue_pid = r->queue_pid;
			rec->charge = r->charge;
			rec->queue_stack = r->stack;
			rec->nr_requeues = r->nr_requeues;
			__builtin_memcpy(rec->comm, r->comm, sizeof(rec->comm));
		} else { /* issued before tracing started */
			rec->ts_queue_ns = 0;
			rec->ts_issue_ns = 0;
			rec->nr_bios = 0;
			rec->pid = 0;
			rec->queue_pid = 0;
			rec->charge = FST_CHARGE_NONE;
			rec->queue_stack = -1;
			rec->nr_requeues = 0;
			__builtin_memset(rec->comm, 0, sizeof(rec->comm));
		}
		record_submit(rec);
	}

	__u32 op = d->cmd_flags & FST_OP_MASK;
	__u32 sub = FST_IO_SUB(op);
	__u32 io_slot = d->io_slot;
	struct fst_dev_io *io = bpf_map_lookup_elem(&dev_io, &io_slot); /* an array: no hashing */
	/* with block_rq_done attached, the sizes, bytes and alignment are its (exact, per CPU): only the latencies
	 * from the issue hook are kept here, for devices whose requests carry no timestamps of their own */
	if (io && !exact_io_on) {
		slot_count(io->bytes[sub], log2_slot(bytes));
		count_alignment(&io->align, d->unit_bytes, sector, bytes, false);
	}
	/* only for an exposition: the records have these figures, and a run should not pay for them twice */
	struct fst_io_sum *sum = io && cfg.io_sums && sub < FST_IO_SUBS ? &io->sums[sub] : NULL;
	if (sum && !exact_io_on)
		__sync_fetch_and_add(&sum->bytes, bytes);
	if (have_rs) {
		__u64 q = r->ts_queue ? r->ts_queue : r->ts_issue;
		if (io) {
			slot_count(io->q2c_us[sub], log2_slot_us(now - q));
			slot_count(io->d2c_us[sub], log2_slot_us(now - r->ts_issue));
		}
		if (sum) {
			__sync_fetch_and_add(&sum->q2c_ns, now - q);
			__sync_fetch_and_add(&sum->d2c_ns, now - r->ts_issue);
		}
	}
	return rec != NULL;
}

static __always_inline int handle_rq_complete(struct request *rq, int error, unsigned int nr_bytes, bool btf)
{
	__u32 dev = rq_dev(rq, btf);
	struct fst_dev_cfg *dc = dev_cfg(dev);
	if (!dc)
		return 0;
	struct rq_done d = {
		.now = bpf_ktime_get_ns(), .dev = dev, .error = error, .io_slot = dc->io_slot, .unit_bytes = dc->unit_bytes
	};
	d.cmd_flags = FST_FIELD(btf, rq, cmd_flags);
	d.sector = FST_FIELD(btf, rq, __sector);
	__u32 data_len = FST_FIELD(btf, rq, __data_len);
	/* this completion ends the request (else a part of it: the driver requeues or completes the rest) */
	bool last = nr_bytes >= data_len;
	/*
	 * The request's state is copied out and, on its last completion, its slot freed here: a slot pointer
	 * kept live to the end makes the verifier walk the rest once per way of the bucket.  A part completed adds
	 * its bytes to the request.
	 */
	__u64 rq_addr = 0; /* the slot's key, a number: the pointer itself kept to the end made clang hash it with
			    * 32-bit arithmetic on the pointer register, which the verifier refuses */
	struct rq_starts_slot *slot = rq_starts_find((__u64)rq);
	if (slot && flight_stale(slot->v.window_seq)) { /* issued in an earlier window: not this one's to record */
		rq_starts_release(slot);
		slot = NULL;
	}
	if (slot) {
		d.rs = slot->v;
		d.have_rs = 1;
		rq_addr = slot->key;
		if (last) {
			inflight_add(d.rs.pid, -(__s64)d.rs.charged_bios);
			rq_starts_release(slot);
		} else {
			slot->v.bytes_done += nr_bytes;
			if (error && !slot->v.error)
				slot->v.error = error;
		}
	} else if (FST_FIELD(btf, rq, bio)) {
		/* never seen issued (ended unissued, or issued before tracing): its bios' entries end here */
		struct fst_rq_start unissued = { .stack = -1 };
		fold_bios(&unissued, rq, btf);
		inflight_add(unissued.pid, -(__s64)unissued.charged_bios);
	}

	/* running now: the work items its bios' end_io queue name its io record, the wakeups they make are not a
	 * kworker's (completion.bpf.h completion_running) */
	__u32 zero = 0;
	struct completing_rq *c = bpf_map_lookup_elem(&completing, &zero);
	if (c) {
		c->rq = rq_addr;
		c->io.ts_complete = 0;	 /* no io record yet, or none written */
		c->io.sector = d.sector; /* where this completion starts: what completion_running checks */
		c->io.dev = dev;
	}
	/* one record, histogram and sum per request: at its last completion; under --budget's windows only for a
	 * request issued in this one (have_rs), whole */
	if (d.have_rs ? last : !windows_on) {
		d.bytes = nr_bytes;
		if (d.have_rs) {
			d.sector = d.rs.sector;
			d.bytes += d.rs.bytes_done;
			d.error = error ? error : d.rs.error;
		}
		/* a request completed in parts has its record at its first sector, not this completion's: the work its
		 * last part queues names no record */
		if (io_completed(&d) && c && (!d.have_rs || !d.rs.bytes_done))
			c->io.ts_complete = d.now;
	}
	/* mostly in an interrupt: charged to the request it interrupted, whose on-CPU time it took */
	tracer_charge(current_req(), FST_SITE_RQ_COMPLETE, d.now);
	return 0;
}

/*
 * --budget's exact per-device figures (dev_done), from the completion alone: the request's count, bytes, size and
 * alignment, its queue-to-complete time from the start_time_ns the block layer set when it allocated the request
 * (where blk_mq_need_time_stamp: iostats on, an I/O scheduler) and its issue-to-complete time from the
 * io_start_time_ns blk_mq_start_request set (with QUEUE_FLAG_STATS); 0 where it keeps none, then the request is
 * left out of that histogram, whose count falls short of the size histogram's, and the collector takes the issue
 * hook's for that device and op.  No counter of the kept ones beside: the histograms' counts are those.  Every part's bytes count, the request itself at its last part: as
 * /proc/diskstats counts them.  A request completed in parts is sized and aligned by its last part.
 */
static __always_inline int handle_rq_done(struct request *rq, unsigned int nr_bytes, bool btf)
{
	struct fst_dev_cfg *dc = dev_cfg(rq_dev(rq, btf));
	if (!dc)
		return 0;
	__u32 io_slot = dc->io_slot;
	struct fst_dev_done *d = bpf_map_lookup_elem(&dev_done, &io_slot); /* this CPU's */
	if (!d)
		return 0;
	__u32 sub = FST_IO_SUB(FST_FIELD(btf, rq, cmd_flags) & FST_OP_MASK);
	if (sub >= FST_IO_SUBS)
		return 0;
	d->io.sums[sub].bytes += nr_bytes;
	__u32 left = FST_FIELD(btf, rq, __data_len);
	if (nr_bytes < left) /* a part: the request ends at a later completion */
		return 0;
	slot_count_cpu(d->io.bytes[sub], log2_slot(left));
	count_alignment(&d->io.align, dc->unit_bytes, FST_FIELD(btf, rq, __sector), left, true);
	__u64 now = bpf_ktime_get_ns();
	__u64 start = FST_FIELD(btf, rq, start_time_ns), io_start = FST_FIELD(btf, rq, io_start_time_ns);
	if (start && start <= now) {
		slot_count_cpu(d->io.q2c_us[sub], log2_slot_us(now - start));
		d->io.sums[sub].q2c_ns += now - start;
	}
	if (io_start && io_start <= now) {
		slot_count_cpu(d->io.d2c_us[sub], log2_slot_us(now - io_start));
		d->io.sums[sub].d2c_ns += now - io_start;
	}
	return 0;
}

/*
 * A block tracepoint's first argument, after the request_queue where the kernel still passes it (FST_TPQ_*).
 * Each load is its own instruction with a constant offset: merged into one load from ctx plus a chosen offset,
 * the verifier refuses it (a modified context pointer).
 */
static __always_inline void *block_tp_arg0(__u64 *ctx, __u8 tpq)
{
	void *p;
	if (cfg.block_tp_queue_first & tpq)
		asm volatile("%0 = *(u64 *)(%1 + 8)"
			     : "=r"(p)
			     : "r"(ctx));
	else
		asm volatile("%0 = *(u64 *)(%1 + 0)"
			     : "=r"(p)
			     : "r"(ctx));
	return p;
}

SEC("tp_btf/block_bio_queue")
int block_bio_queue_btf(__u64 *ctx) { return handle_bio_queue(ctx, block_tp_arg0(ctx, FST_TPQ_BIO_QUEUE), true); }
SEC("raw_tp/block_bio_queue")
int block_bio_queue_raw(__u64 *ctx) { return handle_bio_queue(ctx, block_tp_arg0(ctx, FST_TPQ_BIO_QUEUE), false); }

SEC("tp_btf/block_split")
int block_split_btf(__u64 *ctx) { return handle_bio_split(block_tp_arg0(ctx, FST_TPQ_SPLIT), true); }
SEC("raw_tp/block_split")
int block_split_raw(__u64 *ctx) { return handle_bio_split(block_tp_arg0(ctx, FST_TPQ_SPLIT), false); }

SEC("tp_btf/block_bio_complete")
int BPF_PROG(block_bio_complete_btf, struct request_queue *q, struct bio *bio) { return handle_bio_complete(bio); }
SEC("raw_tp/block_bio_complete")
int BPF_PROG(block_bio_complete_raw, struct request_queue *q, struct bio *bio) { return handle_bio_complete(bio); }

SEC("tp_btf/block_rq_requeue")
int block_rq_requeue_btf(__u64 *ctx) { return handle_rq_requeue(block_tp_arg0(ctx, FST_TPQ_RQ_REQUEUE)); }
SEC("raw_tp/block_rq_requeue")
int block_rq_requeue_raw(__u64 *ctx) { return handle_rq_requeue(block_tp_arg0(ctx, FST_TPQ_RQ_REQUEUE)); }

SEC("tp_btf/block_rq_issue")
int block_rq_issue_btf(__u64 *ctx) { return handle_rq_issue(block_tp_arg0(ctx, FST_TPQ_RQ_ISSUE), true); }
SEC("raw_tp/block_rq_issue")
int block_rq_issue_raw(__u64 *ctx) { return handle_rq_issue(block_tp_arg0(ctx, FST_TPQ_RQ_ISSUE), false); }

SEC("tp_btf/block_rq_complete")
int BPF_PROG(block_rq_complete_btf, struct request *rq, int error, unsigned int nr_bytes)
{
	return handle_rq_complete(rq, error, nr_bytes, true);
}
SEC("raw_tp/block_rq_complete")
int BPF_PROG(block_rq_complete_raw, struct request *rq, int error, unsigned int nr_bytes)
{
	return handle_rq_complete(rq, error, nr_bytes, false);
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(block_rq_done_btf, struct request *rq, int error, unsigned int nr_bytes)
{
	return handle_rq_done(rq, nr_bytes, true);
}
SEC("raw_tp/block_rq_complete")
int BPF_PROG(block_rq_done_raw, struct request *rq, int error, unsigned int nr_bytes)
{
	return handle_rq_done(rq, nr_bytes, false);
}

/*
 * The last resort for a full in-flight table: an entry older than FST_STALE_NS in a bucket with no free slot is
 * expired, so that the bucket takes new entries again.  Entries end at their real end, and one whose end never
 * came (a completion the kernel did not deliver to BPF) is found when its address is used again; what is left
 * is a leak only a full bucket needs ended, while age alone cannot tell it from I/O really in flight that long.
 * Run by the collector every FST_EXPIRE_EVERY_NS (BPF_PROG_TEST_RUN), a slice of each table at a time (records.h
 * FST_EXPIRE_SLICES): the slots are taken back with the same compare-and-swap the handlers use, so a slot claimed
 * meanwhile is left.  Under --budget's windows an entry left by an earlier window (flight.bpf.h flight_stale) is
 * taken back from a full bucket whatever its age, and counted nowhere: its end came after the hooks went off.
 */
__u64 expired_bios, expired_requests, expired_work;
/* the slice the next run walks, counted up by each run (only the collector runs it, one run at a time) */
__u32 expire_next_slice;

_Static_assert(FST_BIO_BUCKETS % FST_EXPIRE_SLICES == 0 && FST_RQ_BUCKETS % FST_EXPIRE_SLICES == 0 &&
		   FST_WORKER_BUCKETS % FST_EXPIRE_SLICES == 0,
	       "every in-flight table splits into FST_EXPIRE_SLICES slices");

#ifndef FST_PLAIN_BPF
struct expire_walk {
	__u64 now;
	__u32 first; /* the slice's first bucket in the table walked */
};

/*
 * A stale slot is taken by swapping its key to FST_FLIGHT_BUSY, cleared, then freed: freed at once with its
 * old value in place, a handler could claim it and, before writing its own value, have this (sleepable,
 * preemptible) walk see the new key beside the old time and expire the new entry.
 */
static __always_inline bool expire_take(__u64 *key_at, __u64 key)
{
	return __sync_val_compare_and_swap(key_at, key, FST_FLIGHT_BUSY) == key;
}

static __always_inline void expire_free(__u64 *key_at)
{
	__atomic_exchange_n(key_at, 0, __ATOMIC_SEQ_CST);
}

/*
 * The bpf_loop callback expiring one bucket of a flight table: TS(v) is when a slot's entry began, DROP(v) gives
 * back what it held (its bios' in-flight counts), counter counts the expired entries.
 */
#define EXPIRE_BUCKET(table, TS, SEQ, DROP, counter)                                 \
	static int table##_expire_bucket(__u32 i, struct expire_walk *w)             \
	{                                                                            \
		__u32 b = w->first + i;                                              \
		struct table##_bucket *bk = bpf_map_lookup_elem(&table, &b);         \
		if (!bk)                                                             \
			return 1;                                                    \
		int used = 0;                                                        \
		_Pragma("unroll")                                                    \
		for (int j = 0; j < FST_FLIGHT_WAYS; j++)                            \
			used += bk->s[j].key != 0;                                   \
		if (used < FST_FLIGHT_WAYS)                                          \
			return 0;                                                    \
		_Pragma("unroll")                                                    \
		for (int j = 0; j < FST_FLIGHT_WAYS; j++) {                          \
			struct table##_slot *slot = &bk->s[j];                       \
			__u64 key = slot->key, ts = TS(slot->v);                     \
			bool stale = flight_stale(SEQ(slot->v));                     \
			if (!key || (!stale && (!ts || w->now < ts + FST_STALE_NS))) \
				continue;                                            \
			if (!expire_take(&slot->key, key))                           \
				continue;                                            \
			DROP(slot->v);                                               \
			__builtin_memset(&slot->v, 0, sizeof(slot->v));              \
			expire_free(&slot->key);                                     \
			if (!stale) /* an earlier window's is no loss */             \
				__sync_fetch_and_add(&counter, 1);                   \
		}                                                                    \
		return 0;                                                            \
	}

#define BIO_TS(v) ((v).ts_queue)
/* an entry of an earlier window counted its bios in no count of this one's (task.bpf.h inflight_add) */
#define BIO_SEQ(v) ((v).window_seq)
#define RQ_SEQ(v) ((v).window_seq)
#define WORK_SEQ(v) ((v).window_seq)
#define BIO_DROP(v)                                \
	do {                                       \
		if (!flight_stale((v).window_seq)) \
			inflight_add((v).pid, -1); \
	} while (0)
#define RQ_TS(v) ((v).ts_issue)
#define RQ_DROP(v)                                                       \
	do {                                                             \
		if (!flight_stale((v).window_seq))                       \
			inflight_add((v).pid, -(__s64)(v).charged_bios); \
	} while (0)
#define WORK_TS(v) ((v).ts_queue)
#define WORK_DROP(v) ((void)0)

EXPIRE_BUCKET(bio_starts, BIO_TS, BIO_SEQ, BIO_DROP, expired_bios)
EXPIRE_BUCKET(rq_starts, RQ_TS, RQ_SEQ, RQ_DROP, expired_requests)
/* work items queued and never run (cancelled) keep their slots until their work is queued again */
EXPIRE_BUCKET(work_queued, WORK_TS, WORK_SEQ, WORK_DROP, expired_work)

SEC("syscall")
int expire_stale(void *ctx)
{
	__u32 slice = expire_next_slice++ % FST_EXPIRE_SLICES;
	struct expire_walk w = { .now = bpf_ktime_get_ns() };

	w.first = slice * (FST_BIO_BUCKETS / FST_EXPIRE_SLICES);
	bpf_loop(FST_BIO_BUCKETS / FST_EXPIRE_SLICES, bio_starts_expire_bucket, &w, 0);
	w.first = slice * (FST_RQ_BUCKETS / FST_EXPIRE_SLICES);
	bpf_loop(FST_RQ_BUCKETS / FST_EXPIRE_SLICES, rq_starts_expire_bucket, &w, 0);
	w.first = slice * (FST_WORKER_BUCKETS / FST_EXPIRE_SLICES);
	bpf_loop(FST_WORKER_BUCKETS / FST_EXPIRE_SLICES, work_queued_expire_bucket, &w, 0);
	return 0;
}
#else
/* the plain build's flight tables are hash maps, whose entries go only at their end events: no walk.  A program
 * of the same name, which the collector does not load (BPF_PROG_TYPE_SYSCALL is 5.14's) */
SEC("raw_tp")
int expire_stale(void *ctx)
{
	expire_next_slice++; /* used as the full build does: the globals keep the full build's layout */
	return 0;
}
#endif
