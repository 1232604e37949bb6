/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Block completions and the filesystem work they queue: a work item's cause (the block request whose completion
 * queued it), the known work items kworkers are running now, and the traced block request completing on this
 * CPU.  block.bpf.c fills them; requests.bpf.c reads them.
 */
#ifndef FSTRACE_COMPLETION_BPF_H
#define FSTRACE_COMPLETION_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */
#include "flight.bpf.h"

/* the block request whose completion queued a work item: the ts_complete_ns, sector and dev of its io record */
struct io_cause {
	__u64 ts_complete;
	__u64 sector;
	__u32 dev;
	__u32 pad;
};

/* a known filesystem work item a kworker is running now (block.bpf.c fills it; requests.bpf.c reads it) */
struct work_start {
	__u64 ts_queue;
	__u64 ts_start;
	__u64 work;
	__u16 kind;
	__u16 pad;
	__u32 seq; /* its work record's seq: what a request it woke records as waker_seq */
	struct io_cause io;
	__u32 window_seq; /* the window it began running in (flight.bpf.h) */
	__u32 pad1;
};

FST_FLIGHT_TABLE(work_running, struct work_start, FST_WORKER_BUCKETS, 0, FST_LOSS_WORK_TABLE)

/* the known work item thread pid is running now, NULL if none (an earlier window's entry, whose end came after
 * the hooks went off, is none) */
static __always_inline struct work_running_slot *work_running_now(__u32 pid)
{
	struct work_running_slot *ws = work_running_find(pid);
	return ws && !flight_stale(ws->v.window_seq) ? ws : NULL;
}

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

#endif
