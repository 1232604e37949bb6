// SPDX-License-Identifier: GPL-2.0
/*
 * --budget: request boundaries on the syscall tracepoints, attached only in windows.
 *
 * Why: registering any program on sys_enter/sys_exit sets SYSCALL_WORK_SYSCALL_TRACEPOINT on every thread of
 * the system (kernel/tracepoint.c syscall_regfunc), so every syscall of every task takes the slow path while
 * one is attached, whatever the program does.  On a kernel without trampolines that cost cannot be filtered
 * per task, so an always-on tracer (attach, serve) pays it only part of the time: the hooks are attached in
 * windows of WINDOW_NS, one placed at random in each period, the periods sized so that the time-average cost
 * stays inside the budget.
 *
 * The cost while attached is measured here, not assumed: the slow path's price per syscall (a getppid loop
 * with the hooks attached and not, alternating, less what the programs themselves ran), the system's syscall
 * rate (requests.bpf.c syscalls_seen) and its busy CPU time (/proc/stat) in each window, the kernel's run time
 * of every windowed program in it (BPF run-time statistics, turned on for the window and the calibration
 * only: they add a clock read pair to every program run of the system), and the collector's own CPU time per
 * window (attaching and detaching, whose registration walks every thread, and its looks at the counts and
 * statistics: a fixed price per window, first the calibration's attach and detach, then each window's own
 * measure).  The first window replaces the calibration's guess,
 * which sees no traced request; each later one refines the estimate for the next period.  The hooks of no use
 * while no request can be in flight (tiers.h struct probe windowed: the attribution hooks, the per-request block,
 * workqueue and erofs hooks) are windowed with them, inside the budget.  The programs that stay attached
 * (block_rq_done's exact per-device counts, the process tree, decompression timed at function entry) are outside
 * it; their run time in the windows is reported beside it.
 *
 * Edges: a window opens by numbering itself (flight.bpf.h window_seq) and attaching sys_exit, then sys_enter;
 * it closes by detaching sys_enter, then, GRACE_NS later, sys_exit.  A request is recorded only when both its
 * ends ran in the same window: one that began before the window opened records nothing (not half), and one
 * of length L <= GRACE_NS that began inside it always ends inside it, so such requests are seen with
 * probability W/P exactly and are weighted 1/fraction.  Longer ones are seen with probability (W + G - L)/P;
 * the analysis weights them by that (analysis/windows.py window_weights).  A block request is recorded likewise
 * only when every bio of it was queued, and it completed, while its window's hooks were on (block.bpf.c
 * handle_rq_issue); its window's share of each device's completions, which block_rq_done counts exactly
 * (dev_reads), weighs it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "aggregates.h"
#include "env.h"
#include "names.h"
#include "probes.h"
#include "procfs.h"
#include "progstats.h"
#include "stacks.h"
#include "window.h"
#include "block.skel.h"
#include "requests.skel.h"
#include "sample.skel.h"
#include "tasks.skel.h"

/* long enough that attaching and detaching (a walk of every thread, about a millisecond of CPU) is cheap beside
 * it, short enough that a run of seconds gets several windows */
#define WINDOW_NS 100000000ull
#define GRACE_NS 20000000ull /* sys_exit stays this long after sys_enter is gone: requests up to it end inside */
#define MAX_SERIES FST_REQ_AGG_MAX
#define MAX_PERIOD_NS 60000000000ull /* at least one window a minute, whatever the budget */
/* the first window opens within this: see window_init */
#define FIRST_PERIOD_NS 5000000000ull
#define CALIBRATION_CALLS 50000
#define MAX_WINDOWS (1u << 20) /* kept for the results header; beyond, only the totals (header says so) */

struct window {
	__u64 open, enter_closed, exit_closed; /* CLOCK_MONOTONIC ns, as the records' timestamps */
	__u64 syscalls;			       /* every syscall the hook saw while attached */
	__u64 busy_ns;			       /* busy CPU time of the system meanwhile (/proc/stat) */
	__u64 tracer_ns;		       /* the handlers' own time in the traced requests counted meanwhile */
	__u64 windowed_prog_ns;		       /* run time of the windowed programs (0: statistics unavailable) */
	__u64 always_prog_ns;		       /* run time of the programs attached all the time, meanwhile */
	struct io_calls calls;		       /* the traced processes' read and write syscalls, open to enter_closed */
	/* the traced processes' read calls since the baseline at its opening and at its closing look, and once every
	 * windowed hook is off (each known only where that look read them, *_look_ok; calls only where both the
	 * first two did: calls_known): with the previous window's last, the calls in the gap before it, whose rate
	 * beside the window's own is what the hooks cost the traced reads (analysis/windows.py windows_slowdown) */
	__u64 reads_at_open, reads_at_close, reads_at_exit_closed; /* the last: after the grace, sys_exit gone */
	bool open_look_ok, close_look_ok, exit_look_ok;
	__u64 exit_edge_ns;		     /* from exit_closed to the end of the last of those looks */
	__u64 open_edge_ns, close_edge_ns;   /* from sys_enter's (de)registration to the end of the look at the
					      * counts: calls then may be on the other side of the edge */
	__u64 counted[FST_NR_REQ_KINDS + 1]; /* requests counted in the kernel (req_agg), per kind */
	__u64 collector_ns;		     /* the collector's CPU time opening and closing it (the attaches and
					      * detaches with their thread walks, the looks at counts and statistics) */
	/* read requests completed on each traced device, open to enter_closed, as block_rq_done counted them: the
	 * windowed block figures' auxiliary (analysis/windows.py); dev_reads_known: both looks read them */
	__u64 dev_reads[MAX_DEVS];
	bool dev_reads_known;
	__u64 dev_reads_from, dev_reads_to; /* when the two looks at them were taken */
	/* when block_bio_queue's attach for it began (0: not windowed): no block request queued before is recorded, one
	 * whose bios were all queued since is if it completes before the hooks go off (the analysis's weights) */
	__u64 block_on;
};

/* per (filesystem, kind): the sums a ratio estimator over the windows needs (serve's estimated counts) */
struct series_sums {
	struct fst_req_agg_key key;
	__u64 before;	  /* its count when the window opened */
	double n, nn, nl; /* sum over windows of n, n^2, n*L (n: requests counted, L: window ns) */
	/* over the windows whose calls are known (calls_known): the sums of n, n^2 and n*A (A: the traced
	 * processes' calls of the series' kind, io_calls) */
	double nk, nnk, na;
};

static struct {
	bool active;
	char why[200];
	struct requests_bpf *reqs;
	struct probe *enter, *exit;
	/* the hooks of no use while no request can be in flight (tiers.h struct probe windowed: the attribution
	 * hooks, the per-request block, workqueue and erofs hooks), attached only around the windows, first on and
	 * last off */
	struct probe **attrib; /* room for every probe (window_probes_found): none windowed is ever left attached */
	int nr_attrib;
	int req_agg_fd, agg_keys_fd, syscalls_fd;
	double slow_ns;			      /* the slow path's price per syscall, hooks attached vs not, less the programs' run */
	double prog_ns_untraced;	      /* the two programs' run time per syscall of an untraced task (calibration) */
	int stats_fd;			      /* BPF run-time statistics held on (-1: off) */
	bool stats_ok;			      /* they could be turned on: the windows' program time is measured */
	char stats_why[160];		      /* why not */
	bool cost_measured;		      /* a window has measured the cost (the calibration sees no traced request) */
	int sample_fd;			      /* the sampling program, windowed with sampling (-1: none) */
	__u64 windowed_before, always_before; /* the programs' run time when the current window opened */
	__u64 calibration_prog_ns;	      /* the windowed programs' run time in the calibration */
	__u64 always_ns_sum, busy_ns_sum;     /* over the closed windows: the always-on programs' time, busy time */
	/* the traced processes' own read and write syscall counts (procfs.h io_calls_step), what the windows'
	 * request counts are weighted against: a window sees the workload slowed by tracing, and these counts
	 * slow with it */
	bool io_ok;
	char io_why[200];
	struct tasks_bpf *tsk;
	struct bpf_link *calls_iter; /* tasks.bpf.c's iterator, run at each look */
	bool io_done;		     /* tracing ended: no later call counts */
	unsigned io_failed;	     /* looks that could not read the counts: they fold into the next look's */
	char io_failed_why[160];     /* the first one's reason */
	unsigned long fail_looks;    /* test hook (FSTRACE_FAIL_CALL_LOOKS): bit n-1 fails edge look n */
	unsigned nlooks;	     /* looks at the windows' edges and the last one, after the baseline */
	struct io_calls io_total, io_at_open;
	__u64 io_from, io_to; /* the span io_total covers */
	double attach_cpu_ns; /* CPU time of one attach + detach of both hooks (the thread walks) */
	double window_cpu_ns; /* the collector's CPU time per window, as measured (first: attach_cpu_ns) */
	double cost_on;	      /* share of busy CPU time the hooks cost while attached (estimate) */
	double busy_per_s0;   /* the system's busy CPU ns per second before the first window */
	bool cost_known;
	bool sampling;	       /* perf sampling is on (enabled only in windows) */
	struct block_bpf *blk; /* its bio queue stacks are paused outside windows */
	struct sample_bpf *smp;
	int done_fd;			   /* block_rq_done's counts (aggregates.h dev_done_fd), -1: not attached */
	__u64 dev_reads_at_open[MAX_DEVS]; /* each device's read requests completed when the current window opened */
	double duty;			   /* share of time in windows this period */
	enum { W_CLOSED,
	       W_OPEN,
	       W_GRACE } phase;
	__u64 next_open, enter_close_at, exit_close_at, period_start, period_len;
	struct window cur;
	__u64 counted_before[FST_NR_REQ_KINDS + 1], syscalls_before, busy_before, tracer_before;
	struct series_sums series[MAX_SERIES];
	int nr_series;
	double sum_l, sum_ll; /* sum over windows of L and L^2 */
	/* [0] reads, [1] writes: sum over windows of A, A^2, and the calls the edges may have put on either side */
	double sum_a[2], sum_aa[2], edge_a[2];
	unsigned nwins_calls; /* windows whose calls are known: the sums above are over them */
	struct window *wins;
	unsigned nwins, nwins_total;
	__u64 in_windows_ns, t_start;
	__u32 seq;
	unsigned short rng[3];
	/* the plain build: the in-flight hash maps only windowed programs use (sweep_flight_maps), what each sweep
	 * took out of each, and the entries found in them right after a sweep */
	bool plain;
	struct {
		const struct bpf_map *map;
		__u64 swept;
	} flight[6];
	int nr_flight;
	unsigned sweeps;
	__u64 left_after_sweeps;
} w;

static __u64 busy_ns_now(void)
{
	FILE *f = fopen("/proc/stat", "r");
	unsigned long long v[8] = { 0 };
	if (!f)
		return 0;
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		       &v[6], &v[7]);
	fclose(f);
	if (n < 8)
		return 0;
	/* user nice system idle iowait irq softirq steal: all but idle and iowait are busy */
	unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
	return busy * (1000000000ull / sysconf(_SC_CLK_TCK));
}

/* requests counted in the kernel so far, per kind, and the handlers' own time in them (*tracer_ns) */
static struct series_sums *series_of(const struct fst_req_agg_key *key)
{
	for (int i = 0; i < w.nr_series; i++)
		if (w.series[i].key.sdev == key->sdev && w.series[i].key.kind == key->kind)
			return &w.series[i];
	if (w.nr_series == MAX_SERIES)
		return NULL;
	struct series_sums *x = &w.series[w.nr_series++];
	memset(x, 0, sizeof(*x));
	x->key = *key;
	return x;
}

/* the auxiliary calls of a kind in a window (io_calls): reads for read requests, writes for write requests */
static int calls_index(__u16 kind) { return kind == FST_REQ_READ ? 0 : kind == FST_REQ_WRITE ? 1 :
											       -1; }

static double calls_of(const struct window *x, int i) { return (double)(i ? x->calls.writes : x->calls.reads); }

/* both looks at its edges read the counts (else its calls are unknown) */
static bool calls_known(const struct window *x) { return x->open_look_ok && x->close_look_ok; }

/*
 * One pass over req_agg at a window's edge: the requests counted so far per kind (counted) and the handlers'
 * own time in them (*tracer_ns); and per series, at opening (win NULL) its count now, at closing (win: the
 * window) its count in the window into its sums.
 */
static void req_agg_note(__u64 *counted, __u64 *tracer_ns, const struct window *win)
{
	__u64 len_ns = win ? win->enter_closed - win->open : 0;
	static struct req_agg_iter it; /* large: not on the stack */
	struct fst_req_agg_key key;
	static struct fst_req_agg sum;
	memset(counted, 0, sizeof(__u64) * (FST_NR_REQ_KINDS + 1));
	*tracer_ns = 0;
	req_agg_start(&it, w.req_agg_fd, w.agg_keys_fd);
	while (req_agg_next(&it, &key, &sum)) {
		if (key.kind <= FST_NR_REQ_KINDS) {
			counted[key.kind] += sum.count;
			*tracer_ns += sum.part_ns[FST_PART_TRACER];
		}
		struct series_sums *x = series_of(&key);
		if (!x)
			continue;
		if (len_ns) {
			double n = (double)(sum.count - x->before), l = (double)len_ns;
			x->n += n;
			x->nn += n * n;
			x->nl += n * l;
			int c = calls_index(key.kind);
			if (c >= 0 && calls_known(win)) {
				x->nk += n;
				x->nnk += n * n;
				x->na += n * calls_of(win, c);
			}
		}
		x->before = sum.count;
	}
}

static __u64 thread_cpu_ns(void) { return now_ns(CLOCK_THREAD_CPUTIME_ID); }

/* read requests completed so far on each traced device, as block_rq_done counts them (exact); false where it is
 * not attached or a count could not be read */
static bool dev_reads_now(__u64 *out)
{
	for (int i = 0; i < opt.nr_devs && w.done_fd >= 0; i++) {
		__s64 n = dev_done_requests(w.done_fd, i, FST_IO_READ);
		if (n < 0)
			return false;
		out[i] = (__u64)n;
	}
	return w.done_fd >= 0;
}

/* the window's number in every object whose programs keep state from one event to the next (flight.bpf.h
 * window_seq) */
static void window_seq_set(__u32 seq)
{
	w.reqs->bss->window_seq = seq;
	if (w.blk)
		w.blk->bss->window_seq = seq;
	if (w.smp)
		w.smp->bss->window_seq = seq;
}

static bool is_windowed(const struct probe *p)
{
	if (p == w.enter || p == w.exit)
		return true;
	for (int i = 0; i < w.nr_attrib; i++)
		if (p == w.attrib[i])
			return true;
	return false;
}

static __u64 run_ns_of(int fd)
{
	struct prog_run r;
	prog_run_stats(fd, &r); /* all zero when unreadable */
	return r.run_ns;
}

/* the kernel's cumulative run time of the windowed programs (*windowed) and of those attached all the time
 * (*always); it grows only while BPF run-time statistics are on */
static void run_ns_sums(__u64 *windowed, __u64 *always)
{
	*windowed = *always = 0;
	for (int g = 0; g < nr_probe_groups; g++)
		for (int i = 0; i < probe_groups[g].n; i++) {
			struct probe *p = &probe_groups[g].probes[i];
			if (!p->prog)
				continue;
			/* a probe with an exit twin (fexit, kretprobe) runs both */
			int exit_fd = tier_run_fd(p, 1);
			__u64 ns = run_ns_of(tier_run_fd(p, 0)) + (exit_fd >= 0 ? run_ns_of(exit_fd) : 0);
			if (is_windowed(p))
				*windowed += ns;
			else if (tier_attached(p))
				*always += ns;
		}
	if (w.sample_fd >= 0)
		*(w.sampling ? windowed : always) += run_ns_of(w.sample_fd);
}

/* BPF run-time statistics on for a window or the calibration (a reference: the kernel keeps them on while
 * anyone holds one) */
static void stats_on(void)
{
	if (!w.stats_ok || w.stats_fd >= 0)
		return;
	w.stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (w.stats_fd < 0) {
		w.stats_ok = false;
		snprintf(w.stats_why, sizeof(w.stats_why), "BPF run-time statistics could not be turned on: %s",
			 strerror(errno));
	}
}

static void stats_off(void)
{
	if (w.stats_fd >= 0)
		close(w.stats_fd);
	w.stats_fd = -1;
}

static void io_off(const char *why, const char *detail)
{
	w.io_ok = false;
	w.reqs->bss->exited_calls_on = 0;
	snprintf(w.io_why, sizeof(w.io_why), "%s%s", why, detail);
}

/*
 * The traced processes' read and write syscalls since the last look, into io_total; false when this look could
 * not read them.  Such a look changes nothing (procfs.h io_calls_step): the threads' counts are cumulative and
 * the exits wait in their map, so the next look takes what this one missed, and only the windows with this
 * look at an edge lose their own count (close_enter).
 */
static bool io_step(__u64 now, bool numbered)
{
	if (!w.io_ok || w.io_done)
		return false;
	struct io_calls d = { 0 };
	/* numbered: a look of the windows' own (at their edges, the baseline, the last), which the test hook
	 * numbers; serve's expositions look too, as often as they are written, and its collector every second
	 * between scrapes (window_calls_look): numbering those would make which windows a failure hits a matter of
	 * timing */
	bool baseline = !w.io_to /* set by the first look that read them */;
	bool fail = !baseline && numbered && w.nlooks < 64 && (w.fail_looks >> w.nlooks & 1);
	if (!baseline && numbered)
		w.nlooks++;
	bool read = !fail && io_calls_step(bpf_link__fd(w.calls_iter), bpf_map__fd(w.reqs->maps.exited_calls),
					   &w.tsk->bss->new_since_ns, &d);
	if (fail)
		errno = EIO;
	if (read && w.tsk->bss->no_io_accounting) {
		io_off("the threads' read counts could not be read: no task I/O accounting in this kernel", "");
		return false;
	}
	if (!read && baseline) {
		io_off("the threads' read counts could not be read at the start (the task iterator): ", strerror(errno));
		return false;
	}
	if (!read) {
		if (!w.io_failed++)
			snprintf(w.io_failed_why, sizeof(w.io_failed_why), "the task iterator: %s", strerror(errno));
		return false;
	}
	w.io_total.reads += d.reads;
	w.io_total.writes += d.writes;
	w.io_to = now;
	return true;
}

/* both hooks on (sys_exit first: every request whose start is seen can have its end seen) */
static int hooks_on(void)
{
	int err = tier_rehook(w.exit);
	if (!err && (err = tier_rehook(w.enter)))
		tier_unhook(w.exit);
	return err;
}

static double getppid_ns(void)
{
	__u64 t0 = now_ns(CLOCK_MONOTONIC);
	for (int i = 0; i < CALIBRATION_CALLS; i++)
		syscall(SYS_getppid);
	return (double)(now_ns(CLOCK_MONOTONIC) - t0) / CALIBRATION_CALLS;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* the slow path's price per syscall and one attach + detach's CPU time, median of three alternations; also a
 * first estimate of the cost while attached, from the syscalls others made during the calibration */
static int calibrate(__u64 busy0, __u64 t_busy0, __u64 cpu0)
{
	double d[3], a[3], p[3];
	__u64 others = 0, on_ns = 0;
	stats_on(); /* on in both halves: its own clock reads are in the "on" loop's time only through the programs */
	__u64 cal0 = 0, cal1 = 0, unused;
	run_ns_sums(&cal0, &unused);
	for (int r = 0; r < 3; r++) {
		double off = getppid_ns();
		__u64 c0 = thread_cpu_ns();
		int err = hooks_on();
		if (err) {
			stats_off();
			return err;
		}
		__u64 seen0 = percpu_u64(w.syscalls_fd, 0), t0 = now_ns(CLOCK_MONOTONIC), run0 = 0, run1 = 0;
		run_ns_sums(&run0, &unused);
		__u64 loop_cpu0 = thread_cpu_ns();
		double on = getppid_ns();
		__u64 loop_cpu = thread_cpu_ns() - loop_cpu0;
		__u64 seen1 = percpu_u64(w.syscalls_fd, 0), t1 = now_ns(CLOCK_MONOTONIC);
		run_ns_sums(&run1, &unused);
		tier_unhook(w.enter);
		tier_unhook(w.exit);
		/* the attach and detach alone: the loop's own CPU time taken out, not its wall time (on a busy machine
		 * the loop is preempted, and its wall time, longer than its CPU time, took the attach's away) */
		a[r] = (double)(thread_cpu_ns() - c0 - loop_cpu);
		/* the two programs' run per syscall (the attribution hooks are off): the slow path is the rest */
		p[r] = seen1 > seen0 ? (double)(run1 - run0) / (seen1 - seen0) : 0;
		d[r] = on - off - (w.stats_ok ? p[r] : 0);
		others += seen1 - seen0 > CALIBRATION_CALLS + 4 ? seen1 - seen0 - CALIBRATION_CALLS - 4 : 0;
		on_ns += t1 - t0;
	}
	run_ns_sums(&cal1, &unused);
	w.calibration_prog_ns = cal1 - cal0;
	stats_off();
	qsort(d, 3, sizeof(d[0]), cmp_double);
	qsort(a, 3, sizeof(a[0]), cmp_double);
	qsort(p, 3, sizeof(p[0]), cmp_double);
	w.slow_ns = d[1] > 0 ? d[1] : 0;
	w.prog_ns_untraced = w.stats_ok ? p[1] : 0;
	w.attach_cpu_ns = a[1] > 0 ? a[1] : 0;
	w.window_cpu_ns = w.attach_cpu_ns; /* until a window measures the whole of it */
	/* busy CPU per second since the first look, less this thread's calibration loops (they are not the
	 * system's work: counted in, they would make the hooks' share look smaller) */
	__u64 t = now_ns(CLOCK_MONOTONIC), busy = busy_ns_now() - busy0, own = thread_cpu_ns() - cpu0;
	busy = busy > own ? busy - own : 0;
	double busy_per_s = t > t_busy0 ? busy / ((t - t_busy0) / 1e9) : 0;
	double rate = on_ns ? others / (on_ns / 1e9) : 0;
	w.busy_per_s0 = busy_per_s;
	if (busy_per_s > 0) {
		w.cost_on = rate * (w.slow_ns + w.prog_ns_untraced) / busy_per_s;
		w.cost_known = true;
	}
	return 0;
}

static double busy_per_s_of(const struct window *x)
{
	__u64 len = x->exit_closed - x->open;
	return len ? x->busy_ns / (len / 1e9) : 0;
}

/* the share of time in windows that keeps the time-average inside the budget, from the estimate so far */
static void size_duty(double busy_per_s)
{
	if (opt.window_duty > 0) {
		w.duty = opt.window_duty;
		return;
	}
	double budget = opt.budget_pct / 100.0;
	/* the collector's own work per window (the attaches and detaches, the looks), spread over the window's time
	 * on the busy CPUs: a fixed price per window, whatever its length */
	double churn = busy_per_s > 0 ? w.window_cpu_ns / ((WINDOW_NS + GRACE_NS) / 1e9) / busy_per_s : 0;
	double cost = w.cost_known ? w.cost_on + churn : 1.0; /* unknown: as if tracing doubled the work */
	double duty = cost > 0 ? budget / cost : 1.0;
	double min_duty = (double)(WINDOW_NS + GRACE_NS) / MAX_PERIOD_NS;
	w.duty = duty > 1 ? 1 : duty < min_duty ? min_duty :
						  duty;
}

static double uniform(void) { return erand48(w.rng); }

/* the next period begins where this one ends (or now, if a window ran late); its window at a random place; a
 * period no longer than longest (0: as the duty makes it) */
static void schedule(__u64 now, __u64 longest)
{
	__u64 on = WINDOW_NS + GRACE_NS;
	w.period_start += w.period_len;
	if (w.period_start < now)
		w.period_start = now;
	w.period_len = (__u64)(on / w.duty);
	if (longest && w.period_len > longest)
		w.period_len = longest;
	w.next_open = w.period_start + (__u64)(uniform() * (double)(w.period_len - on));
}

/* whether the sampled bio queue stacks are taken only in windows (block.bpf.c io_stack); --io-stacks all: every
 * bio's, as asked */
static bool io_stacks_windowed(void) { return opt.sample_hz > 0 && !opt.io_stacks_all; }

/* the windowed hooks and sampling on, before a window's sys_exit and sys_enter; off after them.  On in the probe
 * tables' order, off in the reverse: the hooks that end in-flight state are on before and off after those that
 * begin it (probes.c block_probes), so an entry's end is watched whenever its beginning is */
static void attribution_on(bool on)
{
	for (int k = 0; k < w.nr_attrib; k++) {
		struct probe *p = w.attrib[on ? k : w.nr_attrib - 1 - k];
		if (!on) {
			tier_unhook(p);
			continue;
		}
		/* taken before the attach: the hook runs as soon as its registration is done, before the call returns */
		if (p->figure == FST_FIG_BIO_QUEUE)
			w.cur.block_on = now_ns(CLOCK_MONOTONIC);
		int err = tier_rehook(p);
		if (err)
			die("--budget: attaching %s for a window: %s", p->name, strerror(-err));
	}
	if (w.sampling)
		sampling_enable(on);
	if (w.blk && io_stacks_windowed()) /* the sampled bio queue stacks too */
		w.blk->bss->io_stacks_paused = !on;
}

/*
 * The plain build (tracer.plain, tiers.c bpf_build_plain): its flight tables are hash maps with no expiry walk
 * (flight.bpf.h; the full build's arrays have block.bpf.c expire_stale), so an entry whose end came after its
 * window's hooks went off would stay until its key came back, and a long attach or serve could fill a table
 * (losses: bio_table_full, request_table_full, work_table_full, inflight_table_full).  Once every windowed hook
 * is off (close_exit: sys_exit is the last), and before the next window numbers itself, every entry of those
 * maps is a closed window's: the next window would treat it as stale (flight_stale) and free it unseen, which is
 * what deleting it now does.  The maps, each used by windowed programs only (probes.c WINDOWED, sampling):
 *   bio_starts    block_bio_queue, block_split, block_bio_complete, block_rq_issue, block_rq_complete
 *   rq_starts     block_rq_requeue, block_rq_issue, block_rq_complete (not block_rq_done: dev_done alone)
 *   loop_ctx      workqueue_execute_start and _end; read by block_bio_queue, block_split
 *   work_queued   workqueue_queue_work, workqueue_execute_start
 *   work_running  workqueue_execute_start and _end; read by sched_switch, sched_wakeup and the sampling
 *                 program (sample.bpf.c), which is enabled only in windows (attribution_on)
 *   task_inflight the block hooks' inflight_add, sched_switch's inflight_get; the one program attached all the
 *                 time that touches it is sched_process_exit, and only to delete its thread's entry
 *                 (inflight_forget), which it does whether or not the sweep was first
 * Every reader treats an entry of another window as none, so what a later window records is the same.  Left
 * alone: what programs attached all the time use (the process tree's traced_pids, the per-task state task_reqs,
 * block_rq_done's dev_done, the function probes' per-thread starts: decomp_starts, compress_starts, squashfs's
 * cache_lookups and block_reads); the windowed hooks' arrays (loop_owner, completing: an entry per device or
 * CPU, they cannot fill); and ios_pending (storage mode: its entry goes when its thread next wakes inside a
 * request, in a window, or exits: at most one per live thread, in either build).
 */
static void flight_maps_init(struct tracer *t)
{
	w.plain = t->plain;
	if (!t->plain)
		return;
	const struct bpf_map *maps[] = { t->blk->maps.bio_starts, t->blk->maps.rq_starts, t->blk->maps.loop_ctx,
					 t->blk->maps.work_queued, t->blk->maps.work_running,
					 t->blk->maps.task_inflight };
	_Static_assert(N(maps) == N(w.flight), "w.flight: one per swept map");
	for (int i = 0; i < N(maps); i++)
		w.flight[w.nr_flight++].map = maps[i];
}

/* the entries of a hash map of 8-byte keys, each deleted (del) or only counted */
static __u64 flight_map_walk(int fd, bool del)
{
	__u64 key, next, n = 0;
	bool more = !bpf_map_get_next_key(fd, NULL, &key);
	while (more) {
		/* the next key before this one goes: a deleted key's next is the map's first again */
		more = !bpf_map_get_next_key(fd, &key, &next);
		n += del ? !bpf_map_delete_elem(fd, &key) : 1;
		key = next;
	}
	return n;
}

static void sweep_flight_maps(void)
{
	for (int i = 0; i < w.nr_flight; i++)
		w.flight[i].swept += flight_map_walk(bpf_map__fd(w.flight[i].map), true);
	/* nothing windowed runs now: a look right after finds them empty */
	for (int i = 0; i < w.nr_flight; i++)
		w.left_after_sweeps += flight_map_walk(bpf_map__fd(w.flight[i].map), false);
	w.sweeps += w.nr_flight > 0;
}

void window_prepare(struct tracer *t)
{
	if (window_asked() && io_stacks_windowed())
		t->blk->bss->io_stacks_paused = true;
	/* block requests recorded only whole inside a window from the attach on (none before the first window: its
	 * number is still even); no_windows lets every one be again */
	t->blk->bss->windows_on = window_asked();
}

/* no windows after all: what window_prepare held off is taken all the time */
static void no_windows(struct tracer *t)
{
	t->blk->bss->io_stacks_paused = false;
	t->blk->bss->windows_on = false;
}

/* the syscall hooks and the attribution hooks windowed with them: false (w.why says why) where nothing taxes every
 * syscall, so nothing is windowed */
static bool window_probes_found(struct tracer *t)
{
	int all = 0;
	for (int g = 0; g < nr_probe_groups; g++)
		all += probe_groups[g].n;
	w.attrib = calloc(all, sizeof(*w.attrib));
	if (!w.attrib)
		die("--budget: out of memory");
	for (int g = 0; g < nr_probe_groups; g++)
		for (int i = 0; i < probe_groups[g].n; i++) {
			struct probe *p = &probe_groups[g].probes[i];
			if (!strcmp(p->name, "sys_enter"))
				w.enter = p;
			else if (!strcmp(p->name, "sys_exit"))
				w.exit = p;
			else if (tier_attached(p) && p->windowed)
				w.attrib[w.nr_attrib++] = p;
		}
	if (!t->reqs || !w.enter || !w.exit || !tier_attached(w.enter) || !tier_attached(w.exit)) {
		snprintf(w.why, sizeof(w.why), "requests are not bounded by the syscall tracepoints here: nothing "
					       "taxes every syscall, so nothing is windowed");
		return false;
	}
	if (w.enter->tier != FST_TIER_TP_BTF && w.enter->tier != FST_TIER_RAW_TP) {
		snprintf(w.why, sizeof(w.why), "requests are bounded by %s, which costs only the hooked functions",
			 tier_name(w.enter->tier));
		return false;
	}
	return true;
}

/* the traced threads' read and write calls, which weigh the windows: the task iterator and its baseline look */
static void window_io_calls_init(struct tracer *t)
{
	w.reqs = t->reqs;
	w.tsk = t->tsk;
	if (!t->tsk)
		snprintf(w.io_why, sizeof(w.io_why), "%s", t->tasks_why);
	else if (!(w.calls_iter = bpf_program__attach_iter(t->tsk->progs.traced_task_calls, NULL)))
		snprintf(w.io_why, sizeof(w.io_why), "the task iterator did not attach: %s", strerror(errno));
	w.io_ok = w.calls_iter != NULL;
	w.io_from = now_ns(CLOCK_MONOTONIC);
	w.reqs->bss->exited_calls_on = w.io_ok; /* before the baseline: an exit after it is taken at the next look */
	/* the tests' way to make given looks fail as an unreadable iterator would: "3,6" fails the third and the
	 * sixth look at a window's edge after the baseline (the second window's opening look, the third's closing
	 * one) */
	for (const char *f = getenv("FSTRACE_FAIL_CALL_LOOKS"); f && *f; f += strcspn(f, ","), f += *f == ',') {
		long n = strtol(f, NULL, 10);
		if (n >= 1 && n <= 64)
			w.fail_looks |= 1ul << (n - 1);
	}
	io_step(w.io_from, true); /* the baseline: nothing before it counts */
	w.io_total = (struct io_calls){ 0 };
}

void window_init(struct tracer *t, __u64 t_start)
{
	if (!window_asked()) {
		snprintf(w.why, sizeof(w.why), "always attached (--budget 100)");
		no_windows(t);
		return;
	}
	if (!window_probes_found(t)) {
		no_windows(t);
		return;
	}
	window_io_calls_init(t);
	w.sampling = t->smp != NULL;
	w.blk = t->blk;
	flight_maps_init(t);
	w.smp = t->smp;
	w.done_fd = dev_done_fd(t->blk);
	w.sample_fd = t->smp ? bpf_program__fd(t->smp->progs.sample_request_stack) : -1;
	w.stats_fd = -1;
	w.stats_ok = true;
	w.req_agg_fd = bpf_map__fd(t->reqs->maps.req_agg);
	w.agg_keys_fd = bpf_map__fd(t->reqs->maps.agg_keys);
	w.syscalls_fd = bpf_map__fd(t->reqs->maps.syscalls_seen);
	__u64 seed = now_ns(CLOCK_REALTIME) ^ ((__u64)getpid() << 16);
	memcpy(w.rng, &seed, sizeof(w.rng));
	__u64 busy0 = busy_ns_now(), t0 = now_ns(CLOCK_MONOTONIC), cpu0 = thread_cpu_ns();
	tier_unhook(w.enter);
	tier_unhook(w.exit);
	/* off until the first window, the calibration included (its program time is the syscall hooks' alone); the
	 * bio queue stacks with them, taken from here on only in windows */
	attribution_on(false);
	usleep(100000); /* a first look at the system's busy time before the calibration adds to it */
	int err = calibrate(busy0, t0, cpu0);
	if (err)
		die("--budget: attaching the syscall hooks for calibration: %s", strerror(-err));
	w.active = true;
	/* the issue hook's latencies, recorded by the in-flight completion (block_rq_done, which is not windowed,
	 * measures the same figure from the request's own timestamps), are the windows' sample */
	for (int i = 0; i < w.nr_attrib; i++)
		if (w.attrib[i]->figure == FST_FIG_RQ_COMPLETE)
			dev_lat_windowed(true);
	w.period_start = t_start;
	w.period_len = 0;
	size_duty(w.busy_per_s0);
	/*
	 * The calibration saw the system as it was at the start, perhaps before the work to be traced (a command the
	 * collector runs is held until it is done): a cost measured against an idle system's few busy ns can stretch
	 * the first period to a minute, and a half-minute workload then got no window at all.  The first window, which
	 * measures the cost under the real work, opens within FIRST_PERIOD_NS (unless a fixed --window-duty says
	 * otherwise).
	 */
	schedule(now_ns(CLOCK_MONOTONIC), opt.window_duty > 0 ? 0 : FIRST_PERIOD_NS);
	w.t_start = t_start;
}

static void open_window(__u64 now)
{
	__u64 c0 = thread_cpu_ns();
	w.seq += 2;		   /* odd: a window (requests.bpf.c); calibration ran under 0 */
	window_seq_set(w.seq | 1); /* before any hook: a late end of an earlier window's request is not ours */
	req_agg_note(w.counted_before, &w.tracer_before, NULL);
	w.syscalls_before = percpu_u64(w.syscalls_fd, 0);
	w.busy_before = busy_ns_now();
	memset(&w.cur, 0, sizeof(w.cur));
	stats_on();
	run_ns_sums(&w.windowed_before, &w.always_before);
	attribution_on(true);
	int err = tier_rehook(w.exit);
	/* taken before sys_enter is attached: a request may begin as soon as its registration is done, before
	 * the attach returns (its end, enter_closed, is taken after the detach returns, for the same reason) */
	w.cur.open = now_ns(CLOCK_MONOTONIC);
	if (!err && (err = tier_rehook(w.enter)))
		tier_unhook(w.exit);
	if (err)
		die("--budget: attaching the syscall hooks for a window: %s", strerror(-err));
	/* right after sys_enter's attach, as the closing look right after its detach: the calls a look misses or
	 * counts beside the requests the window records are then alike at both edges (taken before the attach,
	 * the attribution hooks' attach time, a thread walk each, would be calls counted and never recorded); what
	 * is left is bounded by the edges' times (the analysis widens the interval by it) */
	w.cur.open_look_ok = io_step(now_ns(CLOCK_MONOTONIC), true); /* and the closing look's (close_enter) */
	w.cur.reads_at_open = w.io_total.reads;
	w.io_at_open = w.io_total;
	/* at the same edge, for the same reason; the span's start taken after the counts, its end (close_enter)
	 * before them: a completion recorded inside the span is always in the count (block_rq_done runs first) */
	w.cur.dev_reads_known = dev_reads_now(w.dev_reads_at_open);
	w.cur.dev_reads_from = now_ns(CLOCK_MONOTONIC);
	w.cur.open_edge_ns = now_ns(CLOCK_MONOTONIC) - w.cur.open;
	w.enter_close_at = now_ns(CLOCK_MONOTONIC) + WINDOW_NS;
	w.phase = W_OPEN;
	w.cur.collector_ns = thread_cpu_ns() - c0;
}

static void close_enter(void)
{
	__u64 c0 = thread_cpu_ns(), t0 = now_ns(CLOCK_MONOTONIC);
	tier_unhook(w.enter);
	w.cur.enter_closed = now_ns(CLOCK_MONOTONIC);
	/* a look that failed at either edge leaves the window's calls unknown: what it missed is taken by a later
	 * look, in another window's count or between windows */
	w.cur.close_look_ok = io_step(w.cur.enter_closed, true);
	w.cur.reads_at_close = w.io_total.reads;
	if (calls_known(&w.cur)) {
		w.cur.calls.reads = w.io_total.reads - w.io_at_open.reads;
		w.cur.calls.writes = w.io_total.writes - w.io_at_open.writes;
	}
	w.cur.dev_reads_to = now_ns(CLOCK_MONOTONIC);
	w.cur.dev_reads_known = w.cur.dev_reads_known && dev_reads_now(w.cur.dev_reads);
	for (int i = 0; i < opt.nr_devs && w.cur.dev_reads_known; i++)
		w.cur.dev_reads[i] -= w.dev_reads_at_open[i];
	w.cur.close_edge_ns = now_ns(CLOCK_MONOTONIC) - t0;
	w.exit_close_at = w.cur.enter_closed + GRACE_NS;
	w.phase = W_GRACE;
	w.cur.collector_ns += thread_cpu_ns() - c0;
}

static void close_exit(void)
{
	__u64 c0 = thread_cpu_ns();
	tier_unhook(w.exit);
	attribution_on(false); /* the last windowed hooks off */
	sweep_flight_maps();
	struct window *x = &w.cur;
	x->exit_closed = now_ns(CLOCK_MONOTONIC);
	/* not numbered: the failures the tests inject are at the windows' edges, which this look is not */
	x->exit_look_ok = io_step(x->exit_closed, false);
	x->reads_at_exit_closed = w.io_total.reads;
	x->exit_edge_ns = now_ns(CLOCK_MONOTONIC) - x->exit_closed;
	if (w.stats_fd >= 0) {
		__u64 windowed, always;
		run_ns_sums(&windowed, &always);
		x->windowed_prog_ns = windowed - w.windowed_before;
		x->always_prog_ns = always - w.always_before;
	}
	stats_off();
	x->syscalls = percpu_u64(w.syscalls_fd, 0) - w.syscalls_before;
	x->busy_ns = busy_ns_now() - w.busy_before;
	__u64 counted[FST_NR_REQ_KINDS + 1], tracer_ns;
	req_agg_note(counted, &tracer_ns, x);
	x->tracer_ns = tracer_ns - w.tracer_before;
	for (int k = 0; k <= FST_NR_REQ_KINDS; k++)
		x->counted[k] = counted[k] - w.counted_before[k];
	x->collector_ns += thread_cpu_ns() - c0; /* what follows is a few sums */
	w.in_windows_ns += x->enter_closed - x->open;
	double len = (double)(x->enter_closed - x->open);
	w.sum_l += len;
	w.sum_ll += len * len;
	w.nwins_calls += calls_known(x);
	for (int c = 0; c < 2 && calls_known(x); c++) {
		double a = calls_of(x, c);
		w.sum_a[c] += a;
		w.sum_aa[c] += a * a;
		/* at most the window's call rate times the time from each edge to the look at the counts after it */
		w.edge_a[c] += len > 0 ? a / len * (double)(x->open_edge_ns + x->close_edge_ns) : 0;
	}
	w.nwins_total++;
	if (w.nwins < MAX_WINDOWS) {
		if (!(w.nwins & (w.nwins - 1))) { /* grown at each power of two */
			struct window *n = realloc(w.wins, sizeof(*n) * (w.nwins ? 2 * w.nwins : 16));
			if (!n)
				die("--budget: out of memory for the windows");
			w.wins = n;
		}
		w.wins[w.nwins++] = *x;
	}
	/* this window's own measure of the cost while attached, folded into the estimate */
	double busy_per_s = busy_per_s_of(x);
	if (x->busy_ns > 0) {
		/* every task's slow path, and the windowed programs' run time (every syscall's, the attribution
		 * hooks', sampling's); without statistics, only the handlers' own time in traced tasks' requests */
		double prog = w.stats_ok ? (double)x->windowed_prog_ns : (double)x->tracer_ns;
		/* sys_exit alone keeps every syscall on the slow path through the grace, where sys_enter (which
		 * counts them) is gone: counted at the window's rate */
		double open_ns = (double)(x->enter_closed - x->open), syscalls = (double)x->syscalls;
		if (open_ns > 0)
			syscalls *= (double)(x->exit_closed - x->open) / open_ns;
		double cost = (syscalls * w.slow_ns + prog) / (double)x->busy_ns;
		w.cost_on = w.cost_measured ? 0.7 * w.cost_on + 0.3 * cost : cost;
		w.cost_known = w.cost_measured = true;
		w.always_ns_sum += x->always_prog_ns;
		w.busy_ns_sum += x->busy_ns;
	}
	w.window_cpu_ns = w.nwins_total > 1 ? 0.7 * w.window_cpu_ns + 0.3 * x->collector_ns : x->collector_ns;
	size_duty(busy_per_s);
	w.phase = W_CLOSED;
	schedule(x->exit_closed, 0);
}

bool window_tick(struct tracer *t, __u64 now)
{
	if (!w.active)
		return false;
	if (w.phase == W_CLOSED && now >= w.next_open)
		open_window(now);
	else if (w.phase == W_OPEN && now >= w.enter_close_at)
		close_enter();
	else if (w.phase == W_GRACE && now >= w.exit_close_at) {
		close_exit();
		return true;
	}
	return false;
}

bool window_records_off(void) { return w.active && w.phase == W_CLOSED; }

int window_poll_ms(__u64 now, int max_ms)
{
	if (!w.active)
		return max_ms;
	__u64 due = w.phase == W_CLOSED ? w.next_open : w.phase == W_OPEN ? w.enter_close_at :
									    w.exit_close_at;
	return ms_until(now, due, max_ms);
}

void window_finish(void)
{
	if (!w.active)
		return;
	/* a window cut short by the end of tracing: kept with its real edges (its sys_exit still gets the grace) */
	if (w.phase == W_OPEN)
		close_enter();
	if (w.phase == W_GRACE) {
		__u64 left = w.exit_close_at > now_ns(CLOCK_MONOTONIC) ? w.exit_close_at - now_ns(CLOCK_MONOTONIC) : 0;
		struct timespec ts = { .tv_sec = left / 1000000000ull, .tv_nsec = left % 1000000000ull };
		nanosleep(&ts, NULL);
		close_exit();
	}
	/* the last look: what it missed, no later one takes, so the total would fall short */
	if (w.io_ok && !io_step(now_ns(CLOCK_MONOTONIC), true) && w.io_ok)
		io_off("the last look at the threads' read counts failed (the task iterator): ", strerror(errno));
	w.io_done = true; /* serve's last exposition after this counts nothing more */
	w.reqs->bss->exited_calls_on = 0;
	bpf_link__destroy(w.calls_iter);
	w.calls_iter = NULL;
	/* the probes' link is gone: tracer_detach must find nothing left to detach, and its stats still read */
}

bool window_io_stacks(void) { return w.active && io_stacks_windowed(); }

bool window_active(void) { return w.active; }

unsigned window_calls_unknown(void) { return w.nwins_total - w.nwins_calls; }

unsigned window_failed_looks(void) { return w.io_failed; }

/* two-sided 95 % Student t quantile for df degrees of freedom (the analysis's table, analysis/summary.py t95) */
static double t95(unsigned df)
{
	static const double t[] = { 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
				    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
				    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042 };
	return df >= 1 && df <= (unsigned)N(t) ? t[df - 1] : 1.96;
}

bool window_estimate(__u32 sdev, __u16 kind, __u64 now, double *est, double *lo, double *hi, bool *by_calls)
{
	struct fst_req_agg_key key = { .sdev = sdev, .kind = kind };
	unsigned k = w.nwins_total;
	if (!w.active || k < 2 || w.sum_l <= 0 || now <= w.t_start)
		return false;
	struct series_sums zero = { .key = key }, *x = &zero;
	for (int i = 0; i < w.nr_series; i++)
		if (w.series[i].key.sdev == sdev && w.series[i].key.kind == kind)
			x = &w.series[i];
	/* the auxiliary, as the analysis's request_windows: the traced processes' own calls of the kind (they slow
	 * with tracing as the requests do), else the windows' time */
	int c = w.io_ok ? calls_index(kind) : -1;
	if (c >= 0 && now > w.io_to + 100000000ull) /* the calls up to now, looked at most ten times a second */
		io_step(now, false);
	/* by the calls: over the windows whose calls are known (a failed look left the others' unknown) */
	double total, sum, sum_sq, cross, n, nn, edge = 0;
	*by_calls = c >= 0 && w.io_ok && w.sum_a[c] > 0 && w.nwins_calls >= 2;
	if (*by_calls) {
		k = w.nwins_calls;
		total = (double)(c ? w.io_total.writes : w.io_total.reads);
		sum = w.sum_a[c];
		sum_sq = w.sum_aa[c];
		cross = x->na;
		n = x->nk;
		nn = x->nnk;
		edge = w.edge_a[c] / w.sum_a[c];
	} else {
		total = (double)(now - w.t_start);
		sum = w.sum_l;
		sum_sq = w.sum_ll;
		cross = x->nl;
		n = x->n;
		nn = x->nn;
	}
	double rate = n / sum;
	*est = rate * total;
	/* the ratio estimator's variance from the windows' spread, finite-population corrected (as the analysis) */
	double ss = nn - 2 * rate * cross + rate * rate * sum_sq;
	double mean = sum / k, fpc = total > 0 ? 1 - sum / total : 0;
	double var_rate = (ss > 0 ? ss : 0) / (k - 1) / k / (mean * mean);
	double half = t95(k - 1) * sqrt(var_rate * (fpc > 0 ? fpc : 0)) * total + *est * edge;
	*lo = *est - half > x->n ? *est - half : x->n;
	*hi = *est + half;
	return true;
}

void window_calls_look(__u64 now)
{
	if (w.active && w.io_ok && now > w.io_to + 1000000000ull)
		io_step(now, false);
}

unsigned window_count(void) { return w.nwins_total; }

double window_always_on_share(void)
{
	return w.active && w.stats_ok && w.busy_ns_sum ? (double)w.always_ns_sum / w.busy_ns_sum : -1;
}

double window_fraction(__u64 now)
{
	if (!w.active)
		return 1.0;
	__u64 in = w.in_windows_ns;
	if (w.phase != W_CLOSED)
		in += (w.phase == W_OPEN ? now : w.cur.enter_closed) - w.cur.open;
	return now > w.t_start ? (double)in / (now - w.t_start) : 0;
}

/* how a window's cost was measured: the slow path, the programs' run time, the collector's */
static void window_cost_json(json *o)
{
	jset(o, "slow_path_ns_per_syscall", jchk(json_object_new_double(w.slow_ns)));
	jset(o, "program_ns_per_untraced_syscall", w.stats_ok ? jchk(json_object_new_double(w.prog_ns_untraced)) : NULL);
	jset(o, "cost_method", jstr(w.stats_ok ? "the slow path per syscall times the syscalls, plus the windowed "
						 "programs' run time (BPF run-time statistics, on in each window), "
						 "plus the collector's own CPU time per window" :
						 "the slow path per syscall times the syscalls, plus the handlers' "
						 "sampled time in traced requests, plus the collector's own CPU time "
						 "per window"));
	jset(o, "cost_why", w.stats_ok ? NULL : jstr(w.stats_why));
	/* with the windows' windowed_prog_ns, all the windowed programs' run time the statistics counted */
	jset(o, "calibration_prog_ns", ju64(w.calibration_prog_ns));
}

/* the traced threads' read and write calls the windows are weighted by */
static void window_io_calls_json(json *o)
{
	json *io = jset(o, "io_calls", jobj());
	if (w.io_ok) {
		jset(io, "source", jstr("task I/O accounting: syscr and syscw (/proc/PID/task/TID/io) of the traced "
					"threads, read by a BPF task iterator, and at their exit"));
		jset(io, "reads_total", ju64(w.io_total.reads));
		jset(io, "writes_total", ju64(w.io_total.writes));
		jset(io, "from_ns", ju64(w.io_from));
		jset(io, "to_ns", ju64(w.io_to));
		/* each took nothing away (the next look took what it missed); the windows with one at an edge have
		 * their calls unknown (null) and are left out of the estimate by calls */
		jset(io, "failed_looks", ju64(w.io_failed));
		jset(io, "failed_why", w.io_failed ? jstr(w.io_failed_why) : NULL);
	} else {
		jset(io, "why", jstr(w.io_why));
	}
}

/* the plain build's sweeps of the windowed in-flight maps (sweep_flight_maps) */
static void window_sweep_json(json *o)
{
	json *sw = jset(o, "stale_sweep", jobj());
	if (!w.plain) {
		jset(sw, "why", jstr("not needed: the full BPF build's in-flight tables are arrays whose earlier "
				     "windows' entries the expiry walk takes back from a full bucket"));
		return;
	}
	json *by = jset(sw, "swept", jobj());
	__u64 total = 0;
	for (int i = 0; i < w.nr_flight; i++) {
		jset(by, bpf_map__name(w.flight[i].map), ju64(w.flight[i].swept));
		total += w.flight[i].swept;
	}
	jset(sw, "swept_total", ju64(total));
	jset(sw, "sweeps", ju64(w.sweeps));
	jset(sw, "left_after_sweeps", ju64(w.left_after_sweeps));
}

/* every window kept, a row each under the names of window_fields */
static void window_rows_json(json *o)
{
	json *fields = jset(o, "window_fields", jarr());
	const char *names[] = { "open_ns", "enter_closed_ns", "exit_closed_ns", "syscalls", "busy_ns", "tracer_ns",
				"windowed_prog_ns", "always_prog_ns", "read_calls", "write_calls", "open_edge_ns",
				"close_edge_ns", "counted_by_kind", "collector_cpu_ns", "dev_reads", "dev_reads_from_ns",
				"dev_reads_to_ns", "block_on_ns", "reads_at_open", "reads_at_close",
				"reads_at_exit_closed", "exit_edge_ns" };
	for (int i = 0; i < N(names); i++)
		jpush(fields, jstr(names[i]));
	json *wins = jset(o, "windows", jarr());
	for (unsigned i = 0; i < w.nwins; i++) {
		const struct window *x = &w.wins[i];
		json *row = jpush(wins, jarr());
		jpush(row, ju64(x->open));
		jpush(row, ju64(x->enter_closed));
		jpush(row, ju64(x->exit_closed));
		jpush(row, ju64(x->syscalls));
		jpush(row, ju64(x->busy_ns));
		jpush(row, ju64(x->tracer_ns));
		jpush(row, ju64(x->windowed_prog_ns));
		jpush(row, ju64(x->always_prog_ns));
		jpush(row, calls_known(x) ? ju64(x->calls.reads) : NULL);
		jpush(row, calls_known(x) ? ju64(x->calls.writes) : NULL);
		jpush(row, ju64(x->open_edge_ns));
		jpush(row, ju64(x->close_edge_ns));
		jpush(row, ju64_array(x->counted, FST_NR_REQ_KINDS + 1));
		jpush(row, ju64(x->collector_ns));
		jpush(row, x->dev_reads_known ? ju64_array(x->dev_reads, opt.nr_devs) : NULL);
		jpush(row, x->dev_reads_known ? ju64(x->dev_reads_from) : NULL);
		jpush(row, x->dev_reads_known ? ju64(x->dev_reads_to) : NULL);
		jpush(row, x->block_on ? ju64(x->block_on) : NULL);
		jpush(row, x->open_look_ok ? ju64(x->reads_at_open) : NULL);
		jpush(row, x->close_look_ok ? ju64(x->reads_at_close) : NULL);
		jpush(row, x->exit_look_ok ? ju64(x->reads_at_exit_closed) : NULL);
		jpush(row, ju64(x->exit_edge_ns));
	}
}

json *window_header(__u64 t_start, __u64 t_end)
{
	json *o = jobj();
	jset(o, "active", jbool(w.active));
	if (!w.active) {
		jset(o, "why", jstr(w.why));
		return o;
	}
	jset(o, "budget_pct", jchk(json_object_new_double(opt.budget_pct)));
	jset(o, "duty_fixed", opt.window_duty > 0 ? jchk(json_object_new_double(opt.window_duty)) : NULL);
	json *hooks = jset(o, "windowed_probes", jarr());
	jpush(hooks, jstr(w.enter->name));
	jpush(hooks, jstr(w.exit->name));
	for (int i = 0; i < w.nr_attrib; i++)
		jpush(hooks, jstr(w.attrib[i]->name));
	jset(o, "sampling_windowed", jbool(w.sampling));
	jset(o, "window_ns", ju64(WINDOW_NS));
	jset(o, "grace_ns", ju64(GRACE_NS));
	window_cost_json(o);
	window_io_calls_json(o);
	/* what the budget does not bound: the programs attached all the time, as a share of busy CPU time in the
	 * windows (their rate outside the windows taken as inside) */
	jset(o, "always_on_share_in_windows", w.stats_ok && w.busy_ns_sum ? jchk(json_object_new_double((double)w.always_ns_sum / w.busy_ns_sum)) : NULL);
	jset(o, "attach_detach_cpu_ns", jchk(json_object_new_double(w.attach_cpu_ns)));
	/* the collector's CPU time per window the duty was last sized with (each window's own: collector_cpu_ns) */
	jset(o, "window_cpu_ns", jchk(json_object_new_double(w.window_cpu_ns)));
	jset(o, "cost_share_while_attached", jchk(json_object_new_double(w.cost_on)));
	jset(o, "duty_last", jchk(json_object_new_double(w.duty)));
	jset(o, "t_start_ns", ju64(t_start));
	jset(o, "t_end_ns", ju64(t_end));
	jset(o, "in_windows_ns", ju64(w.in_windows_ns));
	jset(o, "windows_total", ju64(w.nwins_total));
	jset(o, "windows_kept", ju64(w.nwins));
	window_sweep_json(o);
	window_rows_json(o);
	return o;
}
