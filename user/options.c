// SPDX-License-Identifier: GPL-2.0
/*
 * The collector's command line: every option checked here, before anything is loaded, with one clear line
 * (die) for anything wrong.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <unistd.h>
#include "env.h"

struct options opt = { .ready_fd = -1, .record_over_us = 1000, .offcpu_sample_us = 1000, .exposition_interval = 5, .budget_pct = 100 };

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "fstrace-collect: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

/* the FST_DEV_LEVELS names, each after a space: the levels --dev takes */
#define DEV_LEVEL_NAME(c, v, n) " " n
#define DEV_LEVEL_NAMES FST_DEV_LEVELS(DEV_LEVEL_NAME)

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fstrace-collect -o FILE [options] [-- COMMAND [ARGS...]]\n"
		"  -o, --out FILE          results file to write (created only when complete)\n"
		"  -m, --meta FILE         JSON object stored as the results' \"config\"\n"
		"  -d, --dev MAJ:MIN[:UNIT[:LEVEL]]  trace this block device; UNIT = fs block/cluster bytes; LEVEL:\n"
		"                          what it is to the traced filesystems:" DEV_LEVEL_NAMES "\n"
		"  -p, --pid PID           trace this process (all threads) and its future children;\n"
		"                          without COMMAND, tracing ends when every such process has exited\n"
		"  -g, --cgroup PATH       trace the tasks of this cgroup v2 directory\n"
		"  -c, --comm NAME         trace tasks with this name\n"
		"  -s, --sdev MAJ:MIN[=SMAJ:SMIN]  keep requests only on files of this filesystem (its superblock's device,\n"
		"                          as mountinfo shows it; =SMAJ:SMIN: the device stat() reports for its files where\n"
		"                          that differs, a btrfs subvolume's); repeatable\n"
		"  -i, --interval SEC      print a live view every SEC seconds\n"
		"Task filters combine; with none, every task on the system is traced.\n"
		"  -D, --duration SEC      stop after SEC seconds (default: command exit or Ctrl-C)\n"
		"      --ready-fd FD       write \"ready\\n\" to FD once tracing is attached\n"
		"      --check             check the options and exit (0: all good) without loading anything;\n"
		"                          -o is not needed\n"
		"      --progress          print record counts to stderr every second\n"
		"      --no-tp-btf         use raw_tp where tp_btf would do (testing the fallback tier)\n"
		"      --block-only        block devices only: no requests, no attribution (cheapest)\n"
		"      --empty-programs    benchmark floor: the hooks these options choose, each with a program that\n"
		"                          only returns (what the hooks cost before fstrace does anything), --budget's\n"
		"                          windowed ones in its windows; no records\n"
		"      --no-fentry         use kprobes where fentry would do (testing the kprobe twins)\n"
		"      --syscall-boundaries  bound requests by the syscall tracepoints even where the traced\n"
		"                          filesystems' entry points could (comparing the two; those put every\n"
		"                          syscall of the system on its slow path)\n"
		"      --sample-hz HZ      sample kernel stacks of traced tasks inside requests (0: off)\n"
		"      --records MODE      slow (default): record requests that slept, did block I/O, missed the\n"
		"                          page cache, failed or took --record-over-us; count the rest (page-cache\n"
		"                          hits) in the kernel.  all: one record per request\n"
		"                          none: no request records, every request counted (for --exposition)\n"
		"      --record-over-us US record any request this slow (default 1000)\n"
		"      --no-io-records     no block request records: only the in-kernel histograms and counters\n"
		"      --per-comm          with --records none: also count requests per task name (at most 64\n"
		"                          name x filesystem x kind series; later ones together under an empty name)\n"
		"      --exposition FILE   rewrite FILE (atomically) with the in-kernel aggregates in Prometheus\n"
		"                          text format; SIGHUP rewrites it at once.  -o is then optional\n"
		"      --exposition-interval SEC  how often (default 5)\n"
		"      --exposition-on-demand  rewrite it only on SIGHUP (a scrape asking); every interval only\n"
		"                          its devices' labels follow their mounts\n"
		"      --budget PCT        where requests are bounded by the syscall tracepoints (every syscall of\n"
		"                          every task pays while they are attached), attach them only in randomly\n"
		"                          placed windows sized to cost PCT %% of busy CPU time on average, and weight\n"
		"                          what they saw (default 100: always attached)\n"
		"      --window-duty F     windows for a fixed share F (0 < F <= 1) of the time instead of --budget's\n"
		"      --openmetrics FILE  with --exposition: also rewrite FILE with the same figures in OpenMetrics\n"
		"                          1.0 text (what Prometheus asks for; fstrace serve serves it to them)\n"
		"      --io-stacks MODE    with --sample-hz: the kernel stack each bio was queued from; sampled\n"
		"                          (default: at most one per 10 ms per CPU) or all\n"
		"      --offcpu-sample-us US  with --sample-hz, where sched_switch is tp_btf: off-CPU intervals this\n"
		"                          long have their stack walked at the switch in; shorter ones with\n"
		"                          probability length/US, weighted US (default 1000; 0: every interval's\n"
		"                          stack at its switch out, exact)\n"
		"With COMMAND, it is started once tracing is attached and tracing ends when it exits.\n");
}

/*
 * Option values are checked here, before anything is loaded: atoi/atof read "x" as 0, which made
 * "--ready-fd x" write to stdin's fd and "--sample-hz x" turn sampling off without a word.
 */
static long parse_long(const char *what, const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		die("%s wants a whole number from %ld to %ld, got '%s'", what, lo, hi, s);
	return v;
}

/* at most ~3 years: seconds * 1e9 must fit the 64-bit nanosecond clocks it is compared with */
#define MAX_SECONDS 1e8

/* a number above 0 and at most max */
static double parse_fraction(const char *what, const char *s, double max)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > max)
		die("%s wants a number above 0 and at most %g, got '%s'", what, max, s);
	return v;
}

static double parse_seconds(const char *what, const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > MAX_SECONDS) /* !(v > 0) also rejects nan */
		die("%s wants a number of seconds above 0 (at most %g), got '%s'", what, MAX_SECONDS, s);
	return v;
}

/*
 * One unsigned decimal field of a colon-separated device argument, below limit; NULL when it is not one.
 * strtoul alone would take "-1" as 4294967295 and " 8" or "8x" without complaint.
 */
static const char *dev_field(const char *s, unsigned long limit, unsigned *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return NULL;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || v >= limit || (*end && *end != ':' && *end != '='))
		return NULL;
	*out = v;
	return end;
}

/* MAJ:MIN within the kernel's 32-bit dev_t (12-bit major, 20-bit minor); returns what follows, or NULL */
static const char *parse_majmin(const char *s, unsigned *major, unsigned *minor)
{
	s = dev_field(s, 1ul << FST_MAJORBITS, major);
	if (!s || *s != ':')
		return NULL;
	return dev_field(s + 1, 1ul << FST_MINORBITS, minor);
}

/* a records.h FST_DEV_LEVELS name ending the argument: the end of the string, or NULL when it is none */
static const char *parse_dev_level(const char *s, enum fst_dev_level *level)
{
#define DEV_LEVEL_MATCH(c, v, n)      \
	if (!strcmp(s, n)) {          \
		*level = c;           \
		return s + strlen(s); \
	}
	FST_DEV_LEVELS(DEV_LEVEL_MATCH)
#undef DEV_LEVEL_MATCH
	return NULL;
}

static void parse_dev(const char *arg, struct dev_arg *d)
{
	const char *s = parse_majmin(arg, &d->major, &d->minor);
	d->unit = 0; /* 0: the block side measures alignment against 4 KiB */
	if (s && *s == ':') {
		s = dev_field(s + 1, (1ul << 30) + 1, &d->unit);
		if (s && d->unit < 512)
			s = NULL;
	}
	bool level_given = false;
	if (s && *s == ':') {
		s = parse_dev_level(s + 1, &d->level);
		level_given = s != NULL;
	}
	if (s && *s) /* anything after the fields ('=' ends a number for --sdev only) */
		s = NULL;
	if (!s)
		die("--dev wants MAJ:MIN[:UNIT[:LEVEL]] (major < 4096, minor < 1048576, UNIT 512 to 1073741824 "
		    "bytes, LEVEL one of" DEV_LEVEL_NAMES "), got '%s'",
		    arg);
	char sys[64];
	snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u", d->major, d->minor);
	if (access(sys, F_OK))
		die("--dev %s: no block device %u:%u", arg, d->major, d->minor);
	if (!level_given) /* a device named alone: a loop device is an image's, any other under no traced filesystem */
		d->level = d->major == FST_LOOP_MAJOR ? FST_LEVEL_LOOP : FST_LEVEL_DEVICE;
	d->is_loop = d->level == FST_LEVEL_LOOP || d->major == FST_LOOP_MAJOR;
}

/* the initial pid namespace's inode number (the kernel's PROC_PID_INIT_INO, fixed since 3.8) */
#define INIT_PID_NS_INO 0xEFFFFFFCu

/* why this process cannot trace from its pid namespace (a container's without the host's), NULL when it can */
static const char *pid_ns_refusal(void)
{
	struct stat st;
	if (stat("/proc/self/ns/pid", &st))
		return NULL; /* a kernel without namespaces: there is only the one */
	if (st.st_ino == INIT_PID_NS_INO)
		return NULL;
	/* the BPF side names threads by the host's ids (bpf_get_current_pid_tgid), and this side reads /proc, the
	 * process filters and user stacks by this namespace's: a run would trace the wrong threads or none, quietly */
	return "this process is in a pid namespace of its own (a container's): the kernel side names threads by "
	       "the host's ids, which /proc here does not show; run fstrace in the host's pid namespace (docker run "
	       "--pid=host, Kubernetes hostPID: true)";
}

bool window_asked(void) { return opt.budget_pct < 100 || opt.window_duty > 0; }

/* the value setters of the options that take one, each checking it (die) before it is kept */
static void set_out(const char *arg) { opt.out = arg; }
static void set_meta(const char *arg) { opt.meta_file = arg; }

static void set_cgroup(const char *arg)
{
	struct statfs fs;
	/* any other directory has an inode number too: it would filter on a cgroup that never runs */
	if (statfs(arg, &fs) || fs.f_type != CGROUP2_SUPER_MAGIC)
		die("--cgroup %s: not a cgroup v2 directory", arg);
	opt.cgroup = arg;
}

static void set_duration(const char *arg) { opt.duration = parse_seconds("--duration", arg); }

static void set_ready_fd(const char *arg)
{
	opt.ready_fd = parse_long("--ready-fd", arg, 0, INT_MAX);
	if (fcntl(opt.ready_fd, F_GETFD) < 0)
		die("--ready-fd %s: not an open file descriptor", arg);
}

static void set_budget(const char *arg) { opt.budget_pct = parse_fraction("--budget", arg, 100); }
static void set_window_duty(const char *arg) { opt.window_duty = parse_fraction("--window-duty", arg, 1); }
/* perf's default perf_event_max_sample_rate; the kernel may allow less, which the header reports */
static void set_sample_hz(const char *arg) { opt.sample_hz = parse_long("--sample-hz", arg, 0, 100000); }

static void set_comm(const char *arg)
{
	if (!*arg || strlen(arg) > 15) /* a long one shown in part: the message is one line */
		die("--comm '%.15s%s' (%zu bytes): a task name has 1 to 15 characters", arg, strlen(arg) > 15 ? "..." : "",
		    strlen(arg));
	opt.comm = arg;
}

static void set_interval(const char *arg) { opt.interval = parse_seconds("--interval", arg); }

static void set_records(const char *arg)
{
	if (strcmp(arg, "all") && strcmp(arg, "slow") && strcmp(arg, "none"))
		die("--records wants all, slow or none, got '%s'", arg);
	opt.records_all = !strcmp(arg, "all");
	opt.records_none = !strcmp(arg, "none");
}

static void set_exposition(const char *arg)
{
	if (!*arg)
		die("--exposition wants a file name");
	opt.exposition = arg;
}

static void set_openmetrics(const char *arg)
{
	if (!*arg)
		die("--openmetrics wants a file name");
	opt.openmetrics = arg;
}

static void set_offcpu_sample_us(const char *arg)
{
	opt.offcpu_sample_us = parse_long("--offcpu-sample-us", arg, 0, 4000000);
}

static void set_exposition_interval(const char *arg)
{
	opt.exposition_interval = parse_seconds("--exposition-interval", arg);
}

static void set_io_stacks(const char *arg)
{
	if (strcmp(arg, "all") && strcmp(arg, "sampled"))
		die("--io-stacks wants all or sampled, got '%s'", arg);
	opt.io_stacks_all = !strcmp(arg, "all");
}

static void set_record_over_us(const char *arg)
{
	char *end;
	opt.record_over_us = strtod(arg, &end);
	if (end == arg || *end || !(opt.record_over_us >= 0) || opt.record_over_us > 1e12)
		die("--record-over-us wants a number of microseconds >= 0, got '%s'", arg);
}

static void add_sdev(const char *arg)
{
	if (opt.nr_sdevs == MAX_DEVS)
		die("too many --sdev (at most %d)", MAX_DEVS);
	const char *rest = parse_majmin(arg, &opt.sdevs[opt.nr_sdevs][0], &opt.sdevs[opt.nr_sdevs][1]);
	if (rest && *rest == '=')
		rest = parse_majmin(rest + 1, &opt.stat_devs[opt.nr_sdevs][0], &opt.stat_devs[opt.nr_sdevs][1]);
	if (!rest || *rest)
		die("--sdev wants MAJ:MIN or MAJ:MIN=MAJ:MIN (major < 4096, minor < 1048576), got '%s'", arg);
	opt.nr_sdevs++;
}

static void add_pid(const char *arg)
{
	if (opt.nr_pids == MAX_PIDS)
		die("too many --pid (at most %d)", MAX_PIDS);
	opt.pids[opt.nr_pids++] = parse_long("--pid", arg, 1, INT_MAX);
}

static void add_dev(const char *arg)
{
	if (opt.nr_devs == MAX_DEVS)
		die("too many --dev (at most %d)", MAX_DEVS);
	parse_dev(arg, &opt.devs[opt.nr_devs++]);
}

/*
 * Every option, once: its long name, the value getopt_long returns for it (the short option's letter where it
 * has one), and what it does: set takes the value of an option that has one, flag is set by one that has none.
 */
/* clang-format off */
#define VALUE(n, c, setter) { .name = n, .val = c, .set = setter }
#define FLAG(n, c, field) { .name = n, .val = c, .flag = &opt.field }
/* clang-format on */
static const struct option_spec {
	const char *name;
	int val;
	void (*set)(const char *arg);
	bool *flag;
} option_specs[] = {
	VALUE("out", 'o', set_out),
	VALUE("meta", 'm', set_meta),
	VALUE("dev", 'd', add_dev),
	VALUE("pid", 'p', add_pid),
	VALUE("cgroup", 'g', set_cgroup),
	VALUE("duration", 'D', set_duration),
	VALUE("ready-fd", 'r', set_ready_fd),
	FLAG("progress", 'P', progress),
	FLAG("no-tp-btf", 'B', no_btf_tp),
	{ .name = "help", .val = 'h' },
	FLAG("block-only", 'b', block_only),
	VALUE("comm", 'c', set_comm),
	FLAG("no-fentry", 'F', no_fentry),
	VALUE("sample-hz", 'S', set_sample_hz),
	VALUE("sdev", 's', add_sdev),
	VALUE("interval", 'i', set_interval),
	VALUE("records", 'R', set_records),
	VALUE("record-over-us", 'U', set_record_over_us),
	VALUE("io-stacks", 'I', set_io_stacks),
	VALUE("offcpu-sample-us", 'O', set_offcpu_sample_us),
	FLAG("no-io-records", 'N', no_io_records),
	VALUE("exposition", 'E', set_exposition),
	VALUE("exposition-interval", 'e', set_exposition_interval),
	FLAG("exposition-on-demand", 'H', exposition_on_demand),
	FLAG("per-comm", 'C', per_comm),
	VALUE("budget", 'Q', set_budget),
	VALUE("window-duty", 'W', set_window_duty),
	FLAG("empty-programs", 'Z', empty_programs),
	VALUE("openmetrics", 'M', set_openmetrics),
	FLAG("check", 'K', check),
	FLAG("syscall-boundaries", 'Y', syscall_bounds),
};

/* the short options: the letters -h and those with a value, "+" to stop at the command, ":" to tell a
 * missing value from an unknown option */
#define SHORT_OPTIONS "+:o:m:d:p:g:c:s:i:D:h"

static const struct option_spec *option_spec_of(int val)
{
	for (int i = 0; i < N(option_specs); i++)
		if (option_specs[i].val == val)
			return &option_specs[i];
	return NULL;
}

/* one option getopt_long returned (c) with its value: set, or die with the one line for what was wrong */
static void apply_option(int c, char **argv)
{
	if (c == 'h') {
		usage(stdout);
		exit(0);
	}
	if (c == ':')
		die("%s needs a value (see --help)", argv[optind - 1]);
	const struct option_spec *s = option_spec_of(c);
	if (!s) {
		if (optopt)
			die("unknown option -%c (see --help)", optopt);
		die("unknown option %s (see --help)", argv[optind - 1]);
	}
	if (s->flag)
		*s->flag = true;
	else
		s->set(optarg);
}

/* what the options say together, once all are read: the pids exist, and no option lacks the one it needs */
static void check_options(void)
{
	/* before the pids are looked for: in a container's namespace they would be the wrong ones */
	const char *ns = pid_ns_refusal();
	if (ns)
		die("%s", ns);
	for (int i = 0; i < opt.nr_pids; i++) {
		char proc[32];
		snprintf(proc, sizeof(proc), "/proc/%d", opt.pids[i]);
		if (access(proc, F_OK))
			die("--pid %d: no such process", opt.pids[i]);
	}
	if (opt.openmetrics && !opt.exposition)
		die("--openmetrics needs --exposition (it is the same figures in another format)");
	if (opt.exposition_on_demand && !opt.exposition)
		die("--exposition-on-demand needs --exposition");
	if (opt.per_comm && !opt.records_none)
		die("--per-comm needs --records none (it counts every request; recorded ones have their comm)");
	if (!opt.out && !opt.exposition && !opt.check)
		die("-o FILE is required (see --help)"); /* or --exposition FILE */
}

void parse_args(int argc, char **argv)
{
	struct option longopts[N(option_specs) + 1];
	for (int i = 0; i < N(option_specs); i++) {
		const struct option_spec *s = &option_specs[i];
		longopts[i] = (struct option){ s->name, s->set ? required_argument : no_argument, NULL, s->val };
	}
	longopts[N(option_specs)] = (struct option){ 0 };
	int c;
	opterr = 0; /* its messages come on top of ours: one line, from die() */
	while ((c = getopt_long(argc, argv, SHORT_OPTIONS, longopts, NULL)) != -1)
		apply_option(c, argv);
	check_options();
	/* the floor is the hooks' cost: sampling is a timer fstrace adds, not a hook its programs sit on */
	if (opt.empty_programs)
		opt.sample_hz = 0;
	/* fstrace checks the options it will run the collector with before it sets anything up (a mount) */
	if (opt.check)
		exit(0);
	if (optind < argc)
		opt.cmd = argv + optind;
	if (!opt.cmd && !opt.nr_pids && !opt.cgroup && !opt.comm)
		fprintf(stderr, "fstrace-collect: no command, pid, comm or cgroup filter: tracing every task\n");
}
