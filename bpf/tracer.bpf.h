/* SPDX-License-Identifier: GPL-2.0 */
/* The tracer's own time inside the requests it traces (the tracer part). */
#ifndef FSTRACE_TRACER_BPF_H
#define FSTRACE_TRACER_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */
#include "task.bpf.h"

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

#endif
