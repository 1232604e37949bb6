/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The collector's environment, which every room of it may include: its options (options.c parses them into opt),
 * die() for the one line a bad input gets, and the small helpers over them.  It includes no other room: the
 * rooms depend on it, never it on them, and nothing includes main's file (collect.c).
 *
 * The rooms: collect.c (main: start the command, trace, stop), options.c, probes.c (probe tables, loading,
 * attach) and tiers.c (which tier a probe gets), progstats.c (a program's run statistics), window.c (--budget),
 * ksyms.c, stacks.c (sampling, stack folding) and ustack.c (user stacks), procfs.c (diskstats, mounts, pids,
 * delay accounting, expiry),
 * aggregates.c (the in-kernel aggregates read from their maps), header.c (the results header), results.c (the
 * results file), live.c (--interval), expose.c and openmetrics.c (the exposition), names.c (records.h's names
 * by value).
 */
#ifndef FSTRACE_ENV_H
#define FSTRACE_ENV_H

#include <stdbool.h>
#include <time.h>
#include <linux/types.h>
#include "records.h"
#include "kernel_state.h"

#define FSTRACE_VERSION "0.1.0"
#define MAX_DEVS 16
#define MAX_PIDS 64

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))

struct dev_arg {
	unsigned major, minor;
	unsigned unit;
	bool is_loop;
	enum fst_dev_level level; /* what it is to the traced filesystems (records.h FST_DEV_LEVELS) */
};

struct options {
	const char *out;
	const char *meta_file;
	const char *cgroup;
	const char *comm;
	unsigned sdevs[MAX_DEVS][2];
	unsigned stat_devs[MAX_DEVS][2]; /* per sdev: the device stat() reports for its files, {0, 0} = the same */
	int nr_sdevs;
	double interval;
	struct dev_arg devs[MAX_DEVS];
	int nr_devs;
	int pids[MAX_PIDS];
	int nr_pids;
	double duration;
	int ready_fd;
	bool progress;
	bool check; /* --check: parse and check the options, then exit */
	bool no_btf_tp;
	bool block_only;
	bool empty_programs; /* bench: the same hooks, programs that do nothing */
	bool no_fentry;
	bool syscall_bounds; /* requests bounded by the syscall tracepoints even where the filesystems' entry points
			      * could bound them */
	int sample_hz;
	bool records_all;
	bool io_stacks_all;
	double record_over_us;
	long offcpu_sample_us;
	bool records_none;
	bool no_io_records;
	bool per_comm;
	const char *exposition;
	const char *openmetrics;
	double exposition_interval;
	/* --exposition-on-demand: rewritten on SIGHUP; the interval's rewrite only where the mount table changed */
	bool exposition_on_demand;
	double budget_pct;  /* --budget: the syscall hooks' time-average cost (window.c), 100 = always on */
	double window_duty; /* --window-duty: a fixed share of time in windows instead of the budget's, 0 = none */
	char **cmd;
};

extern struct options opt;

/* parse and check the command line into opt; one line and exit 2 on anything wrong */
void parse_args(int argc, char **argv);
/* --budget below 100 or --window-duty: the syscall hooks are to be windowed where they bound requests (window.c) */
bool window_asked(void);
/* "fstrace-collect: <message>" on stderr, exit 2 */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static inline __u32 dev_arg_kdev(const struct dev_arg *d)
{
	return FST_KDEV(d->major, d->minor);
}

static inline __u32 sdev_kdev(int i)
{
	return FST_KDEV(opt.sdevs[i][0], opt.sdevs[i][1]);
}

static inline __u64 now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* CPU time this process has used (user and system, every thread; not its children's) */
static inline __u64 self_cpu_ns(void) { return now_ns(CLOCK_PROCESS_CPUTIME_ID); }

/* whole ms from now until due (a wait of it ends at or after due; 0 once due), at most cap */
static inline int ms_until(__u64 now, __u64 due, int cap)
{
	if (due <= now)
		return 0;
	__u64 ms = (due - now + 999999) / 1000000;
	return ms < (__u64)cap ? (int)ms : cap;
}

/* bytes of the well-formed UTF-8 character s starts with (RFC 3629: no overlong form, surrogate or value past
 * U+10FFFF), 0 when it starts none (an invalid byte, or a character cut short) */
static inline int utf8_char_len(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	int n = 0;
	if (u[0] < 0x80)
		n = 1;
	else if (u[0] >= 0xc2 && u[0] < 0xe0)
		n = 2;
	else if (u[0] >= 0xe0 && u[0] < 0xf0)
		n = 3;
	else if (u[0] >= 0xf0 && u[0] < 0xf5)
		n = 4;
	for (int i = 1; i < n; i++)
		if ((u[i] & 0xc0) != 0x80)
			return 0;
	if ((n == 3 && ((u[0] == 0xe0 && u[1] < 0xa0) || (u[0] == 0xed && u[1] >= 0xa0))) ||
	    (n == 4 && ((u[0] == 0xf0 && u[1] < 0x90) || (u[0] == 0xf4 && u[1] >= 0x90))))
		return 0;
	return n;
}

#endif
