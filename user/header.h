/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The results header (everything but the record layouts, enums and sections, which results.c adds): what
 * ran, on what, with which probes and tiers, the in-kernel aggregates and the folded stacks.
 */
#ifndef FSTRACE_HEADER_H
#define FSTRACE_HEADER_H

#include <stdbool.h>
#include <sys/types.h>
#include <linux/types.h>
#include "aggregates.h"
#include "jsonw.h"
#include "probes.h"
#include "procfs.h"

/* block_rq_done's counts of a device just before ([0]) and just after ([1]) its diskstats snapshot: the exact
 * count over two snapshots' span is known to within the completions the reads straddled.  ok: both were read */
struct diskstat_bracket {
	bool ok;
	struct dev_done_counts at[2];
};

/* how the run went, as main saw it */
struct run_info {
	__u64 t_load0, t_attached;	    /* CLOCK_MONOTONIC: load started, everything attached */
	__u64 t_start, t_end, t_start_real; /* the traced interval (and its start in CLOCK_REALTIME) */
	pid_t child;			    /* the command's pid, or <= 0 */
	int wstatus;
	__u64 t_child_go, t_child_exit; /* the command let go (after the attach and --budget's calibration), ended */
	bool interrupted;
	const struct diskstat *ds_start, *ds_end;	  /* per traced device */
	const struct diskstat_bracket *ex_start, *ex_end; /* per traced device, around ds_start and ds_end */
	struct expired expired;
	int delayacct_was;
	int poll_ms;	     /* the longest the tracing loop waits between drains of the ring buffer */
	int poll_ms_sampled; /* the same while --sample-hz's request records can come (their processes read), 0: never */
	/* the collector's own CPU time (every thread, user and system) at t_start, t_child_go and t_end */
	__u64 cpu_start_ns, cpu_go_ns, cpu_end_ns;
};

/* --meta FILE: a JSON object, stored as the header's "config" (dies when it is not one) */
json *header_meta(const char *path);
/* the header; takes meta (header_meta's) into it */
json *header_build(struct tracer *t, const struct run_info *ri, json *meta);

#endif
