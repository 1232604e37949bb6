/* SPDX-License-Identifier: GPL-2.0 */
/* Kernel-side log2 histograms (records.h fst_hist), and the slot of a value in them. */
#ifndef FSTRACE_HIST_BPF_H
#define FSTRACE_HIST_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */

/* kernel-side histograms */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct fst_hist_key);
	__type(value, struct fst_hist);
} hists SEC(".maps");

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
	barrier_var(slot); /* bound checked on the register that indexes (see requests.bpf.c slot_inc) */
	if (slot < FST_HIST_SLOTS)
		__sync_fetch_and_add(&slots[slot], 1);
}

/* one more in slots[slot] of a per-CPU histogram: this CPU's copy only, so no atomic */
static __always_inline void slot_count_cpu(__u64 *slots, __u32 slot)
{
	barrier_var(slot);
	if (slot < FST_HIST_SLOTS)
		slots[slot]++;
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

#endif
