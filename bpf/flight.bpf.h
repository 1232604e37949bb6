/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Flight tables: what the kernel side holds from one event to the next, keyed by a kernel pointer or a thread id,
 * in arrays of compare-and-swap slots instead of BPF hash maps (the comment below says why).
 */
#ifndef FSTRACE_FLIGHT_BPF_H
#define FSTRACE_FLIGHT_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */
#include "ring.bpf.h"

/*
 * In-flight tables: what the block layer and the kworkers hold from one event to the next (a bio from its
 * queueing to its request's issue, a request until it completes, the loop device a kworker is serving).
 * A BPF hash map insert and its delete cost about ten lookups together (bucket lock and element free list,
 * preallocated, not preallocated and LRU alike), and a block request needs three such pairs per level: in hash
 * maps they would be the largest part of a cold read's block-layer cost.  A flight table is an array of buckets
 * of FST_FLIGHT_WAYS slots: a slot is claimed with a compare-and-swap of its key from 0, found by comparing the
 * bucket's keys and freed by storing 0 (each a few instructions, no lock, no helper call).  Keys are never 0 (kernel pointers, thread ids; 0 finds nothing) nor FST_FLIGHT_BUSY.  A full bucket loses the entry,
 * counted in `losses`.  Stale entries of the block and kworker tables (their end event never came) are
 * removed by block.bpf.c's expire_stale, which the collector runs; a thread's (task.bpf.h task_inflight) go
 * when it exits.
 */
/*
 * --budget: the collector attaches sys_enter/sys_exit, and the hooks that only matter while a request can be in
 * flight (the per-request block, workqueue and erofs hooks, the attribution hooks), only in windows
 * (user/window.c), and numbers each window here, in each object that keeps or reads such state (block, requests,
 * sample: window.c window_seq_set), before attaching them.  A request belongs to
 * the window its sys_enter ran in; a sys_exit in another window (its request began before this window opened, or
 * never ended in an earlier one) records nothing, so no request is recorded half.  Windows are odd numbers; an
 * even one (0 at the start) means the hooks are on only for the collector's measurement of their cost, and
 * nothing is recorded.  0 throughout when always on.
 *
 * Every in-flight entry carries the window it began in: one left by an earlier window (its end came after the
 * hooks went off) is stale, and is freed without being counted, charged or recorded when it is met again
 * (flight_stale).  A block request, a work item and a thread's I/O in flight are so charged whole or not at all.
 */
volatile __u32 window_seq;

/* an entry begun in an earlier window: its end was never seen (0 throughout when always on: never stale) */
static __always_inline bool flight_stale(__u32 seq) { return seq != window_seq; }

/* a slot being freed by expire_stale: held (claim skips it, no key matches it) until its value is cleared */
#define FST_FLIGHT_BUSY (~0ull)

/*
 * The bytes of a kernel object's region per bucket of its run (flight_bucket_index): blk-mq lays a device's
 * requests out at least 256 bytes apart (struct request, its driver's command after it, rounded up to a cache
 * line) and a bio set's slab its bios 128 to 512, so a region puts at most one request or two bios in a bucket of
 * four ways, and two regions whose runs overlap still fit.
 */
#define FST_OBJ_RUN_SHIFT 8

static __always_inline __u32 flight_bucket_index(__u64 key, __u32 nbuckets, __u32 run_shift)
{
	/*
	 * A tp_btf argument (a bio, a request) is a pointer to the verifier, which allows no arithmetic on it
	 * but does let a privileged program copy its low half into a 32-bit register as a plain number (a mov32,
	 * hence -mcpu=v3 in the Makefile); slab objects differ in their low 32 bits.  Fibonacci hashing (Knuth's
	 * multiplier): the product's upper half mixes all of its bits.
	 */
	__u32 lo = (__u32)key;
	/* run_shift 0: thread ids (consecutive ones in buckets far apart), work items (small objects of any size) */
	if (!run_shift)
		return ((lo * 2654435761u) >> 16) & (nbuckets - 1); /* 32-bit operations only */
	/*
	 * Kernel objects: those of one 64 KiB region (a device's preallocated requests, a slab's bios) in a run of
	 * consecutive buckets, one per 1 << run_shift bytes, from a place hashed from the region.  The tables are
	 * megabytes of 4 KiB vmalloc pages, and the block handlers run with cold caches: keys hashed all over the
	 * table cost a TLB miss and a page walk per lookup (in a VM, a nested one), keys of one region a few pages.
	 */
	__u32 region = lo >> 16;
	return (((region * 2654435761u) >> 16) + ((lo & 0xffff) >> run_shift)) & (nbuckets - 1);
}

#ifndef FST_PLAIN_BPF
#define FST_FLIGHT_STORE(name, value_t, nbuckets, run_shift, loss)                                             \
	struct name##_slot {                                                                                   \
		__u64 key;                                                                                     \
		value_t v;                                                                                     \
	};                                                                                                     \
	struct name##_bucket {                                                                                 \
		struct name##_slot s[FST_FLIGHT_WAYS];                                                         \
	};                                                                                                     \
	struct {                                                                                               \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                                              \
		__uint(max_entries, nbuckets);                                                                 \
		__type(key, __u32);                                                                            \
		__type(value, struct name##_bucket);                                                           \
	} name SEC(".maps");                                                                                   \
	static __always_inline struct name##_bucket *name##_bucket_of(__u64 key)                               \
	{                                                                                                      \
		__u32 b = flight_bucket_index(key, nbuckets, run_shift);                                       \
		return bpf_map_lookup_elem(&name, &b);                                                         \
	}                                                                                                      \
	/* the slot holding key, NULL if none */                                                               \
	static __always_inline struct name##_slot *name##_find(__u64 key)                                      \
	{                                                                                                      \
		_Static_assert((nbuckets) <= 65536 && ((nbuckets) & ((nbuckets)-1)) == 0,                      \
			       "flight_bucket_index: a power of two, at most 16 bits");                        \
		struct name##_bucket *bk = key ? name##_bucket_of(key) : NULL; /* 0: a free slot */            \
		if (!bk)                                                                                       \
			return NULL;                                                                           \
		_Pragma("unroll")                                                                              \
		for (int i = 0; i < FST_FLIGHT_WAYS; i++)                                                      \
			if (bk->s[i].key == key)                                                               \
				return &bk->s[i];                                                              \
		return NULL;                                                                                   \
	}                                                                                                      \
	/* a free slot of key's bucket claimed for key (not 0), whose caller found none held; NULL (and a loss \
	 * counted) when the bucket is full */                                                                 \
	static __always_inline struct name##_slot *name##_claim_free(__u64 key)                                \
	{                                                                                                      \
		struct name##_bucket *bk = name##_bucket_of(key); /* an array: inlined */                      \
		if (!bk)                                                                                       \
			return NULL;                                                                           \
		_Pragma("unroll")                                                                              \
		for (int i = 0; i < FST_FLIGHT_WAYS; i++)                                                      \
			if (!bk->s[i].key && __sync_val_compare_and_swap(&bk->s[i].key, 0, key) == 0)          \
				return &bk->s[i];                                                              \
		loss_count(loss);                                                                              \
		return NULL;                                                                                   \
	}                                                                                                      \
	/* free a slot found or claimed above: its value is zeroed first, so a slot just claimed again never   \
	 * shows expire_stale its previous holder's times */                                                   \
	static __always_inline void name##_release(struct name##_slot *slot)                                   \
	{                                                                                                      \
		__builtin_memset(&slot->v, 0, sizeof(slot->v));                                                \
		__atomic_exchange_n(&slot->key, 0, __ATOMIC_SEQ_CST);                                          \
	}
#else
/*
 * The plain build (Makefile PLAIN_SKELS, chosen by user/tiers.c bpf_build_plain): for kernels whose verifier has no atomic compare-and-swap
 * or exchange (BPF_ATOMIC, "bpf: Add instructions for atomic_[cmp]xchg", 5.12).  A flight table is then a hash
 * map of its slots, claimed by an insert that fails when the key is held (BPF_NOEXIST) and freed by a delete:
 * dearer (see above), and without expire_stale's walk (its entries' end events are all it has).
 */
#define FST_FLIGHT_STORE(name, value_t, nbuckets, run_shift, loss)                                        \
	struct name##_slot {                                                                              \
		__u64 key;                                                                                \
		value_t v;                                                                                \
	};                                                                                                \
	struct {                                                                                          \
		__uint(type, BPF_MAP_TYPE_HASH);                                                          \
		__uint(max_entries, (nbuckets)*FST_FLIGHT_WAYS);                                          \
		__type(key, __u64);                                                                       \
		__type(value, struct name##_slot);                                                        \
	} name SEC(".maps");                                                                              \
	static __always_inline struct name##_slot *name##_find(__u64 key)                                 \
	{                                                                                                 \
		return key ? bpf_map_lookup_elem(&name, &key) : NULL;                                     \
	}                                                                                                 \
	static __always_inline struct name##_slot *name##_claim_free(__u64 key)                           \
	{                                                                                                 \
		/* a key another CPU inserted first is shared, where the array gives each its own slot */ \
		struct name##_slot fresh = { .key = key };                                                \
		bpf_map_update_elem(&name, &key, &fresh, BPF_NOEXIST);                                    \
		struct name##_slot *slot = bpf_map_lookup_elem(&name, &key);                              \
		if (!slot)                                                                                \
			loss_count(loss);                                                                 \
		return slot;                                                                              \
	}                                                                                                 \
	static __always_inline void name##_release(struct name##_slot *slot)                              \
	{                                                                                                 \
		__u64 key = slot->key;                                                                    \
		__builtin_memset(&slot->v, 0, sizeof(slot->v));                                           \
		bpf_map_delete_elem(&name, &key);                                                         \
	}
#endif

/* a flight table in the build's store, and the claim of a key's slot, the same in both */
#define FST_FLIGHT_TABLE(name, value_t, nbuckets, run_shift, loss)                                       \
	FST_FLIGHT_STORE(name, value_t, nbuckets, run_shift, loss)                                       \
	/* the slot of key, claimed if it has none; NULL (and a loss counted) when its bucket is full */ \
	static __always_inline struct name##_slot *name##_claim(__u64 key)                               \
	{                                                                                                \
		struct name##_slot *held = name##_find(key);                                             \
		if (held || !key)                                                                        \
			return held;                                                                     \
		return name##_claim_free(key);                                                           \
	}

#endif
