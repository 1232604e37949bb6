/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The records' way to user space: one ring buffer every object shares, a record reserved and submitted on it,
 * and the count of what could not be kept (records the ring had no room for, entries a full table lost).
 */
#ifndef FSTRACE_RING_BPF_H
#define FSTRACE_RING_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */

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
 * record it cost more than everything else fstrace does): the reader drains when its own deadlines wake it
 * (user/collect.c RB_IDLE_POLL_MS), and is woken only by the record that brings the waiting data over
 * cfg.wakeup_bytes, so a burst cannot fill the buffer between two of its drains.
 */
static __always_inline void record_submit(void *rec)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u32 size = ((__u32 *)rec)[1];
	bool crossed = avail >= cfg.wakeup_bytes && avail - size < cfg.wakeup_bytes;
	bpf_ringbuf_submit(rec, crossed ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

#endif
