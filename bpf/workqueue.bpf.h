/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Workqueue hooks: which kworker is running which work item.  A known filesystem work item (erofs
 * decompression, btrfs end-io and compression) is timed from queue to end into an FST_REC_WORK record, with the
 * traced block request whose completion queued it; its running entry (completion.bpf.h work_running) is what the
 * request and sampling objects charge a kworker's time to.  A loop worker's item names the loop device it serves
 * (loop_ctx), so block.bpf.c charges the backing device's bios to the reader.
 *
 * Compiled into block.bpf.o (its only includer): the hooks share its loop_ctx reader, its stale-entry expiry
 * (expire_stale) and its globals, and a separate object would be one more load and verification.
 */
#ifndef FSTRACE_WORKQUEUE_BPF_H
#define FSTRACE_WORKQUEUE_BPF_H

#include "common.bpf.h"

/* worker thread -> the traced loop device it is serving right now, by its io_slot (block.bpf.c loop_owner's
 * index) */
struct loop_ctx {
	__u32 io_slot;
	__u32 window_seq; /* the window its work began in (flight.bpf.h): an earlier window's serves nothing now */
};

FST_FLIGHT_TABLE(loop_ctx, struct loop_ctx, FST_WORKER_BUCKETS, 0, FST_LOSS_WORK_TABLE)

/* a known filesystem work item queued and not yet running */
struct work_queued {
	__u64 ts_queue;
	struct io_cause io; /* the block request whose completion queued it, 0s = none */
	__u32 window_seq;   /* the window it was queued in (flight.bpf.h) */
	__u32 pad;
};

/* known filesystem work items: queued -> struct work_queued by work pointer (running ones: completion.bpf.h
 * work_running); hashed, not placed by region: the objects holding them can be small, many to a bucket's run */
FST_FLIGHT_TABLE(work_queued, struct work_queued, FST_WORKER_BUCKETS, 0, FST_LOSS_WORK_TABLE)

/* numbers the executions of known work items (fst_work.seq), from 1 */
__u32 work_seq;

#ifdef FST_PLAIN_BPF
/* the plain build has no fetch-and-add (BPF_ATOMIC with BPF_FETCH, 5.12): each CPU numbers its own executions,
 * its number in the low 8 bits (unique while there are at most 256 CPUs) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} work_seq_cpu SEC(".maps");

static __always_inline __u32 next_work_seq(void)
{
	__u32 zero = 0, *n = bpf_map_lookup_elem(&work_seq_cpu, &zero);
	if (!n)
		return 0;
	return ++*n << 8 | (bpf_get_smp_processor_id() & 0xff);
}
#else
static __always_inline __u32 next_work_seq(void)
{
	return __sync_fetch_and_add(&work_seq, 1) + 1;
}
#endif

static __always_inline __u16 fs_work_kind(struct work_struct *work, __u64 fn)
{
	if (!fn)
		return 0;
	if (fn == cfg.erofs_decomp_workfn)
		return FST_WORK_EROFS_DECOMPRESS;
	if (fn == cfg.btrfs_endio_workfn)
		return FST_WORK_BTRFS_ENDIO;
	if (fn == cfg.btrfs_work_helper && cfg.btrfs_compress_fn) {
		/* btrfs's own workqueues run every item through one helper: the item says what it does */
		if (btrfs_work_func(work) == cfg.btrfs_compress_fn)
			return FST_WORK_BTRFS_COMPRESS;
	}
	return 0;
}

/*
 * The traced block request whose completion is queueing this work item now, into *io.  Only for kinds queued
 * from a bio end_io: btrfs compression is queued by writeback, never by a completion.
 */
static __always_inline void work_queued_by_completion(struct io_cause *io, __u16 kind)
{
	if (!work_kind_from_completion(kind))
		return;
	struct completing_rq *c = completion_running();
	if (c)
		*io = c->io; /* dev names the traced device; ts_complete is 0 when its io record was not written */
}

static __always_inline int handle_work_queue(struct work_struct *work, bool btf)
{
	__u16 kind = fs_work_kind(work, (__u64)FST_FIELD(btf, work, func));
	if (!kind)
		return 0;
	struct work_queued_slot *slot = work_queued_claim((__u64)work);
	if (!slot)
		return 0;
	struct work_queued q = { .ts_queue = bpf_ktime_get_ns(), .window_seq = window_seq };
	work_queued_by_completion(&q.io, kind);
	slot->v = q;
	return 0;
}

/* loop worker context: which loop device a kworker is serving right now; filesystem work: its timing */
static __always_inline int handle_work_start(struct work_struct *work, bool btf)
{
	__u64 fn = (__u64)FST_FIELD(btf, work, func); /* every work item of the system: a typed load where it can be */
	struct loop_device *lo = NULL;

	if (!fn)
		return 0;
	__u16 kind = fs_work_kind(work, fn);
	if (kind) {
		struct work_queued_slot *q = work_queued_find((__u64)work);
		struct work_start ws = {
			.ts_start = bpf_ktime_get_ns(),
			.work = (__u64)work,
			.kind = kind,
			.seq = next_work_seq(),
			.window_seq = window_seq,
		};
		if (q && !flight_stale(q->v.window_seq)) {
			ws.ts_queue = q->v.ts_queue;
			ws.io = q->v.io;
		}
		if (q)
			work_queued_release(q);
		struct work_running_slot *slot = work_running_claim((__u32)bpf_get_current_pid_tgid());
		if (slot)
			slot->v = ws;
		return 0;
	}
	if (fn == cfg.loop_rootcg_workfn)
		lo = loop_rootcg_device(work);
	else if (fn == cfg.loop_workfn)
		lo = loop_worker_device(work);
	if (!lo)
		return 0;
	struct gendisk *disk = BPF_CORE_READ(lo, lo_disk);
	__u32 dev = FST_KDEV(BPF_CORE_READ(disk, major), BPF_CORE_READ(disk, first_minor));
	struct fst_dev_cfg *dc = dev_cfg(dev);
	if (!dc)
		return 0;
	struct loop_ctx_slot *slot = loop_ctx_claim((__u32)bpf_get_current_pid_tgid());
	if (slot)
		slot->v = (struct loop_ctx){ .io_slot = dc->io_slot, .window_seq = window_seq };
	return 0;
}

static __always_inline int handle_work_end(void)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct work_running_slot *slot = work_running_find(pid);
	if (slot && !flight_stale(slot->v.window_seq)) {
		struct work_start *ws = &slot->v;
		/* --records none (fstrace serve): the worker parts are in the counted requests; no record is read */
		struct fst_work *rec = cfg.records_none ? NULL : record_reserve(FST_REC_WORK, sizeof(*rec));
		if (rec) {
			rec->ts_queue_ns = ws->ts_queue;
			rec->ts_start_ns = ws->ts_start;
			rec->ts_end_ns = bpf_ktime_get_ns();
			rec->work = ws->work;
			rec->io_complete_ns = ws->io.ts_complete;
			rec->io_sector = ws->io.sector;
			rec->io_dev = ws->io.dev;
			rec->pid = pid;
			rec->seq = ws->seq;
			rec->kind = ws->kind;
			rec->pad0 = 0;
			current_comm(rec->comm);
			record_submit(rec);
		}
	}
	if (slot) /* ended; an earlier window's (its start seen, its end not) records nothing */
		work_running_release(slot);
	struct loop_ctx_slot *lc = loop_ctx_find(pid);
	if (lc)
		loop_ctx_release(lc);
	return 0;
}

SEC("tp_btf/workqueue_execute_start")
int BPF_PROG(workqueue_execute_start_btf, struct work_struct *work) { return handle_work_start(work, true); }
SEC("raw_tp/workqueue_execute_start")
int BPF_PROG(workqueue_execute_start_raw, struct work_struct *work) { return handle_work_start(work, false); }

SEC("tp_btf/workqueue_queue_work")
int BPF_PROG(workqueue_queue_work_btf, int req_cpu, void *pwq, struct work_struct *work)
{
	return handle_work_queue(work, true);
}
SEC("raw_tp/workqueue_queue_work")
int BPF_PROG(workqueue_queue_work_raw, int req_cpu, void *pwq, struct work_struct *work)
{
	return handle_work_queue(work, false);
}

SEC("tp_btf/workqueue_execute_end")
int BPF_PROG(workqueue_execute_end_btf, struct work_struct *work) { return handle_work_end(); }
SEC("raw_tp/workqueue_execute_end")
int BPF_PROG(workqueue_execute_end_raw, struct work_struct *work) { return handle_work_end(); }

#endif
