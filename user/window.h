/* SPDX-License-Identifier: GPL-2.0 */
/*
 * --budget: the syscall tracepoints that bound requests on kernels without trampolines attached only in
 * windows (window.c says why and how), and what the analysis needs to weight what they saw.
 */
#ifndef FSTRACE_WINDOW_H
#define FSTRACE_WINDOW_H

#include <stdbool.h>
#include <linux/types.h>
#include "jsonw.h"

struct tracer;

/* after tracer_load, before the attach: when a budget is asked for, what is taken only in windows (the sampled
 * bio queue stacks) is held off from the attach on; window_init lets it go if there are no windows */
void window_prepare(struct tracer *t);
/* after tracer_attach: decide whether windows apply, measure the slow path, leave the hooks detached until
 * the first window; t_start: CLOCK_MONOTONIC ns of the traced interval's start */
void window_init(struct tracer *t, __u64 t_start);
/* each turn of the trace loop: open, close and account windows due by now; true when a window's last hooks went
 * off (everything it records is in the ring buffer then) */
bool window_tick(struct tracer *t, __u64 now);
/* whether --budget's windows hold every windowed hook off now (between two windows): the request records, and with
 * them the processes whose user stacks the collector must read while they run, come only in windows */
bool window_records_off(void);
/* how long the trace loop may sleep (ms) before the next window edge, at most max_ms */
int window_poll_ms(__u64 now, int max_ms);
/* at the end of tracing: close a window still open (before the probes are detached and their stats read) */
void window_finish(void);
/* the header's "request_windows" */
json *window_header(__u64 t_start, __u64 t_end);
/* serve: share of the traced time so far inside windows (1 when always on), and windows completed */
double window_fraction(__u64 now);
/* serve: the share of busy CPU time the programs attached all the time took in the windows (< 0: unknown) */
double window_always_on_share(void);
unsigned window_count(void);
bool window_active(void);
/* the sampled bio queue stacks were taken only in windows */
bool window_io_stacks(void);
/* serve: the requests of (sdev, kind) since the start estimated from the windows so far, with a 95 % interval
 * (as the analysis's request_windows), *by_calls: weighted by the traced processes' own calls of the kind (else
 * by the windows' time); false while there is no estimate (windows off, or fewer than two) */
bool window_estimate(__u32 sdev, __u16 kind, __u64 now, double *est, double *lo, double *hi, bool *by_calls);
/* a look at the traced threads' calls between the windows' own, at most once a second (an on-demand exposer's
 * interval, whose expositions look too): the exited threads' counts taken before exited_calls fills */
void window_calls_look(__u64 now);
/* serve: windows whose call counts are unknown (a look at an edge failed, or the counts were never readable),
 * which the estimates by calls leave out: it only grows, as a counter must; and the looks that failed */
unsigned window_calls_unknown(void);
unsigned window_failed_looks(void);

#endif
