// SPDX-License-Identifier: GPL-2.0
/*
 * fstrace-collect: loads the fstrace BPF programs, traces one workload (a
 * command it starts, existing pids, or a cgroup) and the block devices under
 * it, and writes one self-describing results file.  Small and static so it can
 * be copied onto a target box that has no Python.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "records.h"
#include "results.h"
#include "tiers.h"
#include "live.h"
#include "block.skel.h"
#include "tasks.skel.h"
#include "erofs.skel.h"
#include "squashfs.skel.h"
#include "btrfs.skel.h"
#include "sample.skel.h"
#include "ustack.h"
#include "expose.h"
#include <linux/perf_event.h>
#include <sys/syscall.h>

#define FSTRACE_VERSION "0.1.0"
#define MAX_DEVS 16
#define MAX_PIDS 64

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }
/* --exposition: SIGHUP rewrites the file at once (a daemon's "reopen") instead of ending the trace */
static volatile sig_atomic_t hup_signal;
static void on_hup(int sig) { hup_signal = 1; }
/* only here so SIGCHLD interrupts ring_buffer__poll and the exit time is taken promptly */
static void on_child(int sig) { }

struct dev_arg {
	unsigned major, minor;
	unsigned unit;
	bool is_loop;
};

static struct {
	const char *out;
	const char *meta_file;
	const char *cgroup;
	const char *comm;
	unsigned sdevs[MAX_DEVS][2];
	int nr_sdevs;
	double interval;
	struct dev_arg devs[MAX_DEVS];
	int nr_devs;
	int pids[MAX_PIDS];
	int nr_pids;
	double duration;
	int ready_fd;
	bool progress;
	bool no_btf_tp;
	bool block_only;
	bool no_fentry;
	int sample_hz;
	bool records_all;
	bool io_stacks_all;
	double record_over_us;
	long offcpu_sample_us;
	bool records_none;
	bool no_io_records;
	bool per_comm;
	const char *exposition;
	double exposition_interval;
	char **cmd;
} opt = { .ready_fd = -1, .record_over_us = 1000, .offcpu_sample_us = 1000, .exposition_interval = 5 };

#define P(nm, what, btf, raw, req) \
	{ .name = nm, .measures = what, .progs = { [TIER_TP_BTF] = btf, [TIER_RAW_TP] = raw }, .required = req }

static struct probe block_probes[] = {
	P("block_bio_queue", "bio queue time, owner", "block_bio_queue_btf", "block_bio_queue_raw", true),
	P("block_split", "owner of split bios", "block_split_btf", "block_split_raw", false),
	P("block_rq_issue", "issue time, merges", "block_rq_issue_btf", "block_rq_issue_raw", true),
	P("block_rq_complete", "completion, size, alignment", "block_rq_complete_btf", "block_rq_complete_raw", true),
	P("workqueue_execute_start", "loop worker -> reader charging; filesystem work items",
	  "workqueue_execute_start_btf", "workqueue_execute_start_raw", false),
	P("workqueue_execute_end", "loop worker -> reader charging; filesystem work items",
	  "workqueue_execute_end_btf", "workqueue_execute_end_raw", false),
	P("workqueue_queue_work", "queueing delay of filesystem work items", "workqueue_queue_work_btf",
	  "workqueue_queue_work_raw", false),
};

static struct probe task_probes[] = {
	P("sys_enter", "request start, file", "sys_enter_btf", "sys_enter_raw", true),
	P("sys_exit", "request end, bytes", "sys_exit_btf", "sys_exit_raw", true),
	P("sched_switch", "on-CPU / off-CPU split", "sched_switch_btf", "sched_switch_raw", true),
	P("sched_wakeup", "sleep vs runqueue split", "sched_wakeup_btf", "sched_wakeup_raw", false),
	P("sched_process_fork", "process tree", "sched_process_fork_btf", "sched_process_fork_raw", true),
	P("sched_process_exit", "process tree", "sched_process_exit_btf", "sched_process_exit_raw", false),
	P("mm_filemap_add_to_page_cache", "page-cache misses per request", "mm_filemap_add_to_page_cache_btf",
	  "mm_filemap_add_to_page_cache_raw", false),
	P("contention_begin", "lock wait per request", "contention_begin_btf", "contention_begin_raw", false),
	P("contention_end", "lock wait per request", "contention_end_btf", "contention_end_raw", false),
	P("page_cache_ra_order", "readahead window sizes per request", "page_cache_ra_order_btf",
	  "page_cache_ra_order_raw", false),
};

/* decompression: fentry/fexit, or kprobe/kretprobe; no tracepoint tier can time it exactly */
#define D(fn, what)                                                                                 \
	{ .name = #fn, .measures = what,                                                           \
	  .progs = { [TIER_FENTRY] = #fn "_fentry", [TIER_KPROBE] = #fn "_kprobe" },               \
	  .exit_progs = { [TIER_FENTRY] = #fn "_fexit", [TIER_KPROBE] = #fn "_kretprobe" } }

static struct probe erofs_probes[] = {
	D(z_erofs_lz4_decompress, "erofs lz4 pcluster decompression time and sizes"),
	D(z_erofs_lzma_decompress, "erofs lzma pcluster decompression time and sizes"),
	D(z_erofs_deflate_decompress, "erofs deflate pcluster decompression time and sizes"),
	D(z_erofs_zstd_decompress, "erofs zstd pcluster decompression time and sizes"),
	D(z_erofs_transform_plain, "erofs uncompressed-pcluster copy time and sizes"),
	P("erofs_map_blocks_exit", "erofs extents mapped per request (pclusters needed)", "erofs_map_blocks_exit_btf",
	  "erofs_map_blocks_exit_raw", false),
	/* the same figures from the tracepoints' 6.1 names; "measures" matches so one attached twin suffices */
	P("z_erofs_map_blocks_iter_exit", "erofs extents mapped per request (pclusters needed)", NULL,
	  "z_erofs_map_blocks_iter_exit_raw", false),
	P("erofs_readahead", "erofs readahead calls per request", "erofs_readahead_btf", "erofs_readahead_raw", false),
	P("erofs_readpages", "erofs readahead calls per request", NULL, "erofs_readpages_raw", false),
	P("erofs_read_folio", "erofs single-folio reads per request", "erofs_read_folio_btf", "erofs_read_folio_raw",
	  false),
	P("erofs_readpage", "erofs single-folio reads per request", NULL, "erofs_readpage_raw", false),
};

/* entry only: fentry, or kprobe */
#define FE(fn, what)                                                                                \
	{ .name = #fn, .measures = what,                                                           \
	  .progs = { [TIER_FENTRY] = #fn "_fentry", [TIER_KPROBE] = #fn "_kprobe" } }

static struct probe squashfs_probes[] = {
	D(squashfs_decompress, "squashfs block decompression time and sizes"),
	D(squashfs_cache_get, "squashfs metadata/fragment/data cache lookups and their time"),
	FE(squashfs_read_data, "squashfs cache misses (the block read under a lookup)"),
};

#define BTRFS_COMPRESS_WHAT "btrfs compression on write: time and sizes per chunk, and the thread that ran it"

static struct probe btrfs_probes[] = {
	D(zstd_decompress_bio, "btrfs zstd extent decompression time and sizes"),
	D(lzo_decompress_bio, "btrfs lzo extent decompression time and sizes"),
	D(zlib_decompress_bio, "btrfs zlib extent decompression time and sizes"),
	/* one name per kernel generation; "measures" matches so one attached twin suffices */
	D(btrfs_compress_folios, BTRFS_COMPRESS_WHAT),
	D(btrfs_compress_pages, BTRFS_COMPRESS_WHAT),
};

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))

static const struct {
	struct probe *probes;
	int n;
} probe_groups[] = {
	{ block_probes, N(block_probes) },   { task_probes, N(task_probes) },
	{ erofs_probes, N(erofs_probes) },   { squashfs_probes, N(squashfs_probes) },
	{ btrfs_probes, N(btrfs_probes) },
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "fstrace-collect: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fstrace-collect -o FILE [options] [-- COMMAND [ARGS...]]\n"
		"  -o, --out FILE          results file to write (created only when complete)\n"
		"  -m, --meta FILE         JSON object stored as the results' \"config\"\n"
		"  -d, --dev MAJ:MIN[:UNIT[:loop]]  trace this block device; UNIT = fs block/cluster bytes\n"
		"  -p, --pid PID           trace this process (all threads) and its future children;\n"
		"                          without COMMAND, tracing ends when every such process has exited\n"
		"  -g, --cgroup PATH       trace the tasks of this cgroup v2 directory\n"
		"  -c, --comm NAME         trace tasks with this name\n"
		"  -s, --sdev MAJ:MIN      keep requests only on files of this filesystem (st_dev); repeatable\n"
		"  -i, --interval SEC      print a live view every SEC seconds\n"
		"Task filters combine; with none, every task on the system is traced.\n"
		"  -D, --duration SEC      stop after SEC seconds (default: command exit or Ctrl-C)\n"
		"      --ready-fd FD       write \"ready\\n\" to FD once tracing is attached\n"
		"      --progress          print record counts to stderr every second\n"
		"      --no-tp-btf         use raw_tp where tp_btf would do (testing the fallback tier)\n"
		"      --block-only        block devices only: no requests, no attribution (cheapest)\n"
		"      --no-fentry         use kprobes where fentry would do (testing the kprobe twins)\n"
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

static double parse_seconds(const char *what, const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > MAX_SECONDS)	/* !(v > 0) also rejects nan */
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
	if (errno || v >= limit || (*end && *end != ':'))
		return NULL;
	*out = v;
	return end;
}

/* MAJ:MIN within the kernel's 32-bit dev_t (12-bit major, 20-bit minor); returns what follows, or NULL */
static const char *parse_majmin(const char *s, unsigned *major, unsigned *minor)
{
	s = dev_field(s, 1ul << 12, major);
	if (!s || *s != ':')
		return NULL;
	return dev_field(s + 1, 1ul << 20, minor);
}

static void parse_dev(const char *arg, struct dev_arg *d)
{
	const char *s = parse_majmin(arg, &d->major, &d->minor);
	d->unit = 0;	/* 0: the block side measures alignment against 4 KiB */
	d->is_loop = false;
	if (s && *s == ':') {
		s = dev_field(s + 1, (1ul << 30) + 1, &d->unit);
		if (s && d->unit < 512)
			s = NULL;
	}
	if (s && *s == ':') {
		d->is_loop = !strcmp(s + 1, "loop");
		s = d->is_loop ? "" : NULL;
	}
	if (!s)
		die("--dev wants MAJ:MIN[:UNIT[:loop]] (major < 4096, minor < 1048576, UNIT 512 to 1073741824 "
		    "bytes), got '%s'", arg);
	char sys[64];
	snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u", d->major, d->minor);
	if (access(sys, F_OK))
		die("--dev %s: no block device %u:%u", arg, d->major, d->minor);
	d->is_loop = d->is_loop || d->major == 7;
}

static void parse_args(int argc, char **argv)
{
	static struct option longopts[] = {
		{ "out", required_argument, 0, 'o' },	   { "meta", required_argument, 0, 'm' },
		{ "dev", required_argument, 0, 'd' },	   { "pid", required_argument, 0, 'p' },
		{ "cgroup", required_argument, 0, 'g' },   { "duration", required_argument, 0, 'D' },
		{ "ready-fd", required_argument, 0, 'r' }, { "progress", no_argument, 0, 'P' },
		{ "no-tp-btf", no_argument, 0, 'B' },	   { "help", no_argument, 0, 'h' },
		{ "block-only", no_argument, 0, 'b' },	   { "comm", required_argument, 0, 'c' },
		{ "no-fentry", no_argument, 0, 'F' },	   { "sample-hz", required_argument, 0, 'S' },
		{ "sdev", required_argument, 0, 's' },	   { "interval", required_argument, 0, 'i' },
		{ "records", required_argument, 0, 'R' },  { "record-over-us", required_argument, 0, 'U' },
		{ "io-stacks", required_argument, 0, 'I' },  { "offcpu-sample-us", required_argument, 0, 'O' },
		{ "no-io-records", no_argument, 0, 'N' },  { "exposition", required_argument, 0, 'E' },
		{ "exposition-interval", required_argument, 0, 'e' }, { "per-comm", no_argument, 0, 'C' },
		{ 0 },
	};
	int c;
	struct statfs fs;
	opterr = 0;	/* its messages come on top of ours: one line, from die() */
	while ((c = getopt_long(argc, argv, "+:o:m:d:p:g:c:s:i:D:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': opt.out = optarg; break;
		case 'm': opt.meta_file = optarg; break;
		case 'g':
			/* any other directory has an inode number too: it would filter on a cgroup that never runs */
			if (statfs(optarg, &fs) || fs.f_type != CGROUP2_SUPER_MAGIC)
				die("--cgroup %s: not a cgroup v2 directory", optarg);
			opt.cgroup = optarg;
			break;
		case 'D': opt.duration = parse_seconds("--duration", optarg); break;
		case 'r':
			opt.ready_fd = parse_long("--ready-fd", optarg, 0, INT_MAX);
			if (fcntl(opt.ready_fd, F_GETFD) < 0)
				die("--ready-fd %s: not an open file descriptor", optarg);
			break;
		case 'P': opt.progress = true; break;
		case 'B': opt.no_btf_tp = true; break;
		case 'b': opt.block_only = true; break;
		case 'F': opt.no_fentry = true; break;
		/* perf's default perf_event_max_sample_rate; the kernel may allow less, which the header reports */
		case 'S': opt.sample_hz = parse_long("--sample-hz", optarg, 0, 100000); break;
		case 'c':
			if (!*optarg || strlen(optarg) > 15)
				die("--comm '%s': a task name has 1 to 15 characters", optarg);
			opt.comm = optarg;
			break;
		case 'i': opt.interval = parse_seconds("--interval", optarg); break;
		case 'R':
			if (strcmp(optarg, "all") && strcmp(optarg, "slow") && strcmp(optarg, "none"))
				die("--records wants all, slow or none, got '%s'", optarg);
			opt.records_all = !strcmp(optarg, "all");
			opt.records_none = !strcmp(optarg, "none");
			break;
		case 'N': opt.no_io_records = true; break;
		case 'C': opt.per_comm = true; break;
		case 'E':
			if (!*optarg)
				die("--exposition wants a file name");
			opt.exposition = optarg;
			break;
		case 'O': opt.offcpu_sample_us = parse_long("--offcpu-sample-us", optarg, 0, 4000000); break;
		case 'e': opt.exposition_interval = parse_seconds("--exposition-interval", optarg); break;
		case 'I':
			if (strcmp(optarg, "all") && strcmp(optarg, "sampled"))
				die("--io-stacks wants all or sampled, got '%s'", optarg);
			opt.io_stacks_all = !strcmp(optarg, "all");
			break;
		case 'U': {
			char *end;
			opt.record_over_us = strtod(optarg, &end);
			if (end == optarg || *end || !(opt.record_over_us >= 0) || opt.record_over_us > 1e12)
				die("--record-over-us wants a number of microseconds >= 0, got '%s'", optarg);
			break;
		}
		case 's': {
			if (opt.nr_sdevs == MAX_DEVS)
				die("too many --sdev (at most %d)", MAX_DEVS);
			const char *rest = parse_majmin(optarg, &opt.sdevs[opt.nr_sdevs][0], &opt.sdevs[opt.nr_sdevs][1]);
			if (!rest || *rest)
				die("--sdev wants MAJ:MIN (major < 4096, minor < 1048576), got '%s'", optarg);
			opt.nr_sdevs++;
			break;
		}
		case 'p': {
			if (opt.nr_pids == MAX_PIDS)
				die("too many --pid (at most %d)", MAX_PIDS);
			int pid = parse_long("--pid", optarg, 1, INT_MAX);
			char proc[32];
			snprintf(proc, sizeof(proc), "/proc/%d", pid);
			if (access(proc, F_OK))
				die("--pid %d: no such process", pid);
			opt.pids[opt.nr_pids++] = pid;
			break;
		}
		case 'd':
			if (opt.nr_devs == MAX_DEVS)
				die("too many --dev (at most %d)", MAX_DEVS);
			parse_dev(optarg, &opt.devs[opt.nr_devs++]);
			break;
		case 'h': usage(stdout); exit(0);
		case ':': die("%s needs a value (see --help)", argv[optind - 1]);
		default:
			if (optopt)
				die("unknown option -%c (see --help)", optopt);
			die("unknown option %s (see --help)", argv[optind - 1]);
		}
	}
	if (opt.per_comm && !opt.records_none)
		die("--per-comm needs --records none (it counts every request; recorded ones have their comm)");
	if (!opt.out && !opt.exposition)
		die("-o FILE is required (see --help)");	/* or --exposition FILE */
	if (optind < argc)
		opt.cmd = argv + optind;
	if (!opt.cmd && !opt.nr_pids && !opt.cgroup && !opt.comm)
		fprintf(stderr, "fstrace-collect: no command, pid, comm or cgroup filter: tracing every task\n");
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG || getenv("FSTRACE_QUIET_LIBBPF"))
		return 0;
	return vfprintf(stderr, fmt, args);
}


struct ksym {
	unsigned long long addr;
	char *name;
};
static struct ksym *ksyms;
static size_t nr_ksyms;

static int cmp_ksym(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* the kernel's function symbols, read once: work-function addresses at start, stack symbols at the end */
static void load_ksyms(void)
{
	if (ksyms)
		return;
	FILE *f = fopen("/proc/kallsyms", "r");
	if (!f)
		return;
	static char buf[1 << 16];
	setvbuf(f, buf, _IOFBF, sizeof(buf));
	char line[512], name[256], type;
	unsigned long long addr;
	size_t cap = 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || !addr)
			continue;
		if (type != 't' && type != 'T' && type != 'w' && type != 'W')
			continue;
		if (nr_ksyms == cap) {
			cap = cap ? cap * 2 : 65536;
			ksyms = realloc(ksyms, cap * sizeof(*ksyms));
			if (!ksyms)
				abort();
		}
		ksyms[nr_ksyms].addr = addr;
		ksyms[nr_ksyms++].name = strdup(name);
	}
	fclose(f);
	qsort(ksyms, nr_ksyms, sizeof(*ksyms), cmp_ksym);
}

/*
 * fstrace's own programs in the stacks: BPF programs are in kallsyms as bpf_prog_<tag>_<name> only once
 * loaded, after the first read of it; our programs (by tag) become "[fstrace] <name>" so the flamegraphs and
 * the sampled tracer share can tell the tracer's time apart, and other tools' programs keep their names.
 */
#define TRACER_FRAME_PREFIX "[fstrace] "

static void add_bpf_ksyms(struct bpf_object **objs, int nobjs)
{
	char tags[1024][17];
	int ntags = 0;
	for (int i = 0; i < nobjs; i++) {
		struct bpf_program *p;
		if (!objs[i])
			continue;
		bpf_object__for_each_program(p, objs[i]) {
			struct bpf_prog_info info = {};
			__u32 len = sizeof(info);
			int fd = bpf_program__fd(p);
			if (fd < 0 || ntags == N(tags) || bpf_obj_get_info_by_fd(fd, &info, &len))
				continue;
			for (int b = 0; b < 8; b++)
				sprintf(tags[ntags] + 2 * b, "%02x", info.tag[b]);
			ntags++;
		}
	}
	FILE *f = fopen("/proc/kallsyms", "r");
	if (!f)
		return;
	char line[512], name[256], type;
	unsigned long long addr;
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, "[bpf]") || sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || !addr ||
		    strncmp(name, "bpf_prog_", 9) || strlen(name) < 9 + 16 + 1)
			continue;
		char *sym = strdup(name);
		for (int t = 0; t < ntags; t++) {
			if (!strncmp(name + 9, tags[t], 16)) {
				free(sym);
				if (asprintf(&sym, TRACER_FRAME_PREFIX "%s", name + 9 + 17) < 0)
					sym = NULL;
				break;
			}
		}
		if (!sym)
			continue;
		ksyms = realloc(ksyms, (nr_ksyms + 1) * sizeof(*ksyms));
		if (!ksyms)
			abort();
		ksyms[nr_ksyms].addr = addr;
		ksyms[nr_ksyms++].name = sym;
	}
	fclose(f);
	qsort(ksyms, nr_ksyms, sizeof(*ksyms), cmp_ksym);
}

static const char *ksym_name(unsigned long long ip)
{
	size_t lo = 0, hi = nr_ksyms;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (ksyms[mid].addr <= ip)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? ksyms[lo - 1].name : "[unknown]";
}

static unsigned long long ksym_addr(const char *name)
{
	load_ksyms();
	for (size_t i = 0; i < nr_ksyms; i++)
		if (!strcmp(ksyms[i].name, name))
			return ksyms[i].addr;
	return 0;
}

static __u64 cgroup_id(const char *path)
{
	struct stat st;
	if (stat(path, &st))
		die("cgroup %s: %s", path, strerror(errno));
	return st.st_ino;	/* cgroup v2 id is the kernfs inode number */
}

/* per-task state in task-local storage (else a pid hash), and why: see task_storage_usable() */
static bool task_storage_on;
static char task_state_why[160];

/* off-CPU stacks walked at the switch in, threshold-sampled (bpf_get_task_stack takes sched_switch's next only
 * as a tp_btf argument: storage mode's tier), else at every switch out (--offcpu-sample-us 0: exact, and with
 * the scheduler's own frames, which a blocked task's stack walk leaves out) */
static bool offcpu_at_switch_in(void)
{
	return task_storage_on && opt.sample_hz > 0 && opt.offcpu_sample_us > 0;
}

/* the same frozen configuration for every object; computed once (kallsyms is long) */
static void fill_cfg(struct fst_cfg *out)
{
	static struct fst_cfg cached;
	static bool done;
	if (done) {
		*out = cached;
		out->task_storage = task_storage_on;
		out->offcpu_at_switch_in = offcpu_at_switch_in();
		return;
	}
	struct fst_cfg *c = &cached;
	c->loop_rootcg_workfn = ksym_addr("loop_rootcg_workfn");
	c->loop_workfn = ksym_addr("loop_workfn");
	c->erofs_decomp_workfn = ksym_addr("z_erofs_decompressqueue_work");
	c->btrfs_endio_workfn = ksym_addr("simple_end_io_work");
	if (!c->btrfs_endio_workfn)
		c->btrfs_endio_workfn = ksym_addr("btrfs_end_bio_work");
	c->btrfs_work_helper = ksym_addr("btrfs_work_helper");
	c->btrfs_compress_fn = ksym_addr("async_cow_start");
	if (!c->btrfs_compress_fn)
		c->btrfs_compress_fn = ksym_addr("compress_file_range");
	const char *compress_fn = func_param_index("btrfs_compress_folios", "total_out") >= 0 ?
				  "btrfs_compress_folios" : "btrfs_compress_pages";
	c->btrfs_compress_owner_is_inode = func_param_index(compress_fn, "inode") >= 0;
	c->btrfs_compress_arg_owner = func_param_index(compress_fn, c->btrfs_compress_owner_is_inode ? "inode" : "mapping");
	c->btrfs_compress_arg_start = func_param_index(compress_fn, "start");
	c->btrfs_compress_arg_total_in = func_param_index(compress_fn, "total_in");
	c->btrfs_compress_arg_total_out = func_param_index(compress_fn, "total_out");
	c->filter_cgroup_id = opt.cgroup ? cgroup_id(opt.cgroup) : 0;
	c->filter_pids = opt.cmd || opt.nr_pids;
	c->filter_comm = opt.comm != NULL;
	if (opt.comm)
		strncpy(c->comm, opt.comm, sizeof(c->comm) - 1);
	c->filter_sdev = opt.nr_sdevs > 0;
	c->offcpu_stacks = opt.sample_hz > 0;
	c->requests = !opt.block_only;
	c->records_all = opt.records_all;
	c->records_none = opt.records_none;
	c->no_io_records = opt.no_io_records;
	c->io_sums = opt.exposition != NULL;
	c->per_comm = opt.per_comm;
	c->io_stacks_all = opt.io_stacks_all;
	c->record_over_ns = (__u64)(opt.record_over_us * 1000.0);
	c->offcpu_sample_ns = (__u32)(opt.offcpu_sample_us * 1000);
	/* a quarter of the ring buffer: the reader is woken well before a burst could fill it */
	c->wakeup_bytes = FST_RINGBUF_BYTES / 4;
	done = true;
	*out = cached;
	out->task_storage = task_storage_on;	/* decided per load attempt, after the cache was filled */
	out->offcpu_at_switch_in = offcpu_at_switch_in();
}

/* every later object shares the first object's maps of the same name */
static void reuse_maps(struct bpf_object *owner, struct bpf_object *obj)
{
	struct bpf_map *m;
	bpf_object__for_each_map(m, obj) {
		if (bpf_map__is_internal(m))
			continue;
		struct bpf_map *o = bpf_object__find_map_by_name(owner, bpf_map__name(m));
		if (o && bpf_map__reuse_fd(m, bpf_map__fd(o)))
			die("sharing map %s: %s", bpf_map__name(m), strerror(errno));
	}
}

/*
 * Per-task state lives in task-local storage where the kernel has it (a lookup from the task pointer, no
 * hashing: it is on every context switch of the system) and the programs that look up another task's state
 * (sched_switch's next, sched_wakeup's woken task) can be tp_btf, whose task pointers the helper takes.
 * Elsewhere it is a pid-keyed hash.  Decided from the kernel (map probe, BTF), never from its version.
 */

static bool task_storage_usable(void)
{
	const char *tps[] = { "sched_switch", "sched_wakeup", "sys_enter", "sys_exit" };
	if (opt.no_btf_tp) {
		snprintf(task_state_why, sizeof(task_state_why), "pid hash: --no-tp-btf (raw_tp cannot pass a task to task storage)");
		return false;
	}
	if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) != 1) {
		snprintf(task_state_why, sizeof(task_state_why), "pid hash: the kernel has no task-local storage maps");
		return false;
	}
	for (unsigned i = 0; i < N(tps); i++) {
		if (!tp_btf_exists(tps[i])) {
			snprintf(task_state_why, sizeof(task_state_why), "pid hash: no tp_btf for %s", tps[i]);
			return false;
		}
	}
	snprintf(task_state_why, sizeof(task_state_why), "task-local storage");
	return true;
}

/* the object that owns the shared maps: the per-task state map becomes a pid hash when storage is off */
static void setup_task_state_map(struct bpf_object *obj)
{
	struct bpf_map *k = bpf_object__find_map_by_name(obj, "offcpu_kstacks");
	if (k && !offcpu_at_switch_in() && bpf_map__set_max_entries(k, 1))
		die("sizing offcpu_kstacks: %s", strerror(errno));	/* 8 MiB preallocated, unused without storage */
	struct bpf_map *m = bpf_object__find_map_by_name(obj, "task_reqs");
	if (!m || task_storage_on)
		return;
	if (bpf_map__set_type(m, BPF_MAP_TYPE_HASH) || bpf_map__set_map_flags(m, 0) ||
	    bpf_map__set_max_entries(m, 65536))
		die("turning task_reqs into a hash: %s", strerror(errno));
}

/*
 * open+load a skeleton with the best tiers; if the kernel refuses tp_btf, fall back to raw_tp (with
 * attempts = 1, no fallback: skel is left NULL instead of dying)
 */
#define LOAD_SKEL_TRY(type, skel, probes, owner, attempts)                                          \
	do {                                                                                        \
		for (int attempt = 0; attempt < 2; attempt++) {                                     \
			skel = type##__open();                                                      \
			if (!skel)                                                                  \
				die("opening " #type ": %s", strerror(errno));                     \
			fill_cfg((struct fst_cfg *)&skel->rodata->cfg);                             \
			if (owner)                                                                  \
				reuse_maps(owner, skel->obj);                                       \
			else                                                                        \
				setup_task_state_map(skel->obj);                                    \
			tiers_select(skel->obj, probes, N(probes), opt.no_btf_tp || attempt, opt.no_fentry); \
			if (!type##__load(skel))                                                    \
				break;                                                              \
			int err_ = errno;                                                           \
			type##__destroy(skel);                                                      \
			skel = NULL;                                                                \
			if (attempt + 1 >= (attempts)) {                                            \
				if ((attempts) > 1)                                                 \
					die("loading " #type ": %s", strerror(err_));              \
				fprintf(stderr, "fstrace-collect: " #type " did not load with tp_btf (%s)\n", \
					strerror(err_));                                            \
				break;                                                              \
			}                                                                           \
			fprintf(stderr, "fstrace-collect: " #type " did not load with tp_btf (%s); "  \
					"retrying with raw_tp\n", strerror(err_));                  \
		}                                                                                   \
	} while (0)
#define LOAD_SKEL(type, skel, probes, owner) LOAD_SKEL_TRY(type, skel, probes, owner, 2)

static bool any_tier(struct probe *probes, int n)
{
	for (int i = 0; i < n; i++)
		if (probes[i].tier != TIER_NONE)
			return true;
	return false;
}

static void mark_unavailable(struct probe *probes, int n, const char *why)
{
	for (int i = 0; i < n; i++) {
		if (probes[i].tier == TIER_NONE)
			continue;
		size_t l = strlen(probes[i].why);
		snprintf(probes[i].why + l, sizeof(probes[i].why) - l, "%s%s: %s", l ? "; " : "",
			 tier_name(probes[i].tier), why);
		probes[i].tier = TIER_NONE;
		probes[i].prog = probes[i].exit_prog = NULL;
	}
}

/*
 * Optional probes of one filesystem: open, choose tiers, and load only if some
 * probe has a tier.  A load failure makes them unavailable (with the reason)
 * instead of ending the run.
 */
#define LOAD_OPTIONAL_SKEL(type, skel, probes, owner)                                               \
	do {                                                                                        \
		skel = type##__open();                                                              \
		if (!skel)                                                                          \
			die("opening " #type ": %s", strerror(errno));                             \
		fill_cfg((struct fst_cfg *)&skel->rodata->cfg);                                     \
		reuse_maps(owner, skel->obj);                                                       \
		tiers_select(skel->obj, probes, N(probes), opt.no_btf_tp, opt.no_fentry);           \
		if (!any_tier(probes, N(probes)) || opt.block_only) {                               \
			if (opt.block_only)                                                         \
				mark_unavailable(probes, N(probes), "not loaded: --block-only");   \
			type##__destroy(skel);                                                      \
			skel = NULL;                                                                \
		} else if (type##__load(skel)) {                                                    \
			char why_[128];                                                             \
			snprintf(why_, sizeof(why_), "load failed: %s", strerror(errno));           \
			mark_unavailable(probes, N(probes), why_);                                  \
			type##__destroy(skel);                                                      \
			skel = NULL;                                                                \
		}                                                                                   \
	} while (0)

/* ---- sampling tier: perf events, stacks folded with kallsyms ---- */

#define MAX_PERF_CPUS 1024
static struct bpf_link *perf_links[MAX_PERF_CPUS];
static int nr_perf_links;

static int attach_sampling(struct sample_bpf *smp, int hz)
{
	int ncpu = libbpf_num_possible_cpus();
	for (int cpu = 0; cpu < ncpu && cpu < MAX_PERF_CPUS; cpu++) {
		struct perf_event_attr attr = {
			.type = PERF_TYPE_SOFTWARE, .config = PERF_COUNT_SW_CPU_CLOCK, .size = sizeof(attr),
			.freq = 1, .sample_freq = hz,
		};
		int fd = syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
		if (fd < 0) {
			if (errno == ENODEV)	/* offline CPU */
				continue;
			return -errno;
		}
		struct bpf_link *l = bpf_program__attach_perf_event(smp->progs.sample_request_stack, fd);
		if (!l) {
			int err = -errno;
			close(fd);
			return err;
		}
		perf_links[nr_perf_links++] = l;
	}
	return nr_perf_links ? 0 : -ENODEV;
}

static void detach_sampling(void)
{
	for (int i = 0; i < nr_perf_links; i++)
		bpf_link__destroy(perf_links[i]);
	nr_perf_links = 0;
}

/* one kernel stack, root first, "a;b;c"; false if it was not recorded */
static bool fold_stack(int stacks_fd, __s32 id, struct jbuf *out)
{
	__u64 ips[127] = {};
	if (id < 0 || bpf_map_lookup_elem(stacks_fd, &id, ips))
		return false;
	int depth = 0;
	while (depth < 127 && ips[depth])
		depth++;
	for (int i = depth - 1; i >= 0; i--)
		jb_add(out, "%s%s", i == depth - 1 ? "" : ";", ksym_name(ips[i]));
	if (!depth)
		jb_add(out, "[empty]");
	return true;
}

/* frames a row's key puts before its kernel stack (a thread's user frames, a kworker's work kind) */
typedef void (*stack_prefix_fn)(const void *key, __u64 value, struct jbuf *st, void *ctx);

/*
 * Rows [stack, (reason,) value] of a map whose keys (key_size bytes) hold a
 * kernel stack id at stack_off (and a reason at reason_off, or -1), each stack
 * after the frames prefix() adds (if given): the values of rows whose stack
 * was not recorded go to *lost instead, the sum of all to *total.
 */
static void json_stack_rows(struct jbuf *b, int map_fd, size_t key_size, int stacks_fd, int stack_off,
			    int reason_off, stack_prefix_fn prefix, void *ctx, unsigned long long *total,
			    unsigned long long lost[FST_MAX_OFFCPU_REASONS])
{
	__u8 key[64], next[64];
	void *prev = NULL;
	bool first = true;
	if (key_size > sizeof(key))
		abort();
	while (!bpf_map_get_next_key(map_fd, prev, next)) {
		memcpy(key, next, key_size);
		prev = key;
		__u64 v;
		__s32 id;
		__u32 reason = 0;
		if (bpf_map_lookup_elem(map_fd, key, &v))
			continue;
		memcpy(&id, key + stack_off, sizeof(id));
		if (reason_off >= 0)
			memcpy(&reason, key + reason_off, sizeof(reason));
		*total += v;
		struct jbuf st = {};
		if (prefix)
			prefix(key, v, &st, ctx);
		if (!fold_stack(stacks_fd, id, &st)) {
			lost[reason < FST_MAX_OFFCPU_REASONS ? reason : 0] += v;
			free(st.s);
			continue;
		}
		/* one row per key: the same stack recurs for each thread (or reason) it was seen with */
		jb_add(b, "%s[", first ? "" : ",");
		first = false;
		jb_str(b, st.s);
		if (reason_off >= 0)
			jb_add(b, ",%u", reason);
		jb_add(b, ",%llu]", (unsigned long long)v);
		free(st.s);
	}
}

/* "offcpu": [stack, reason, ns] for every off-CPU interval of traced tasks inside requests */
static void json_offcpu(struct jbuf *b, struct block_bpf *blk)
{
	unsigned long long total = 0, lost_ns = 0, lost[FST_MAX_OFFCPU_REASONS] = {};
	const struct fst_cfg *c = &blk->rodata->cfg;
	bool sampled = c->offcpu_at_switch_in && c->offcpu_sample_ns;
	/* method and threshold first: the analysis says what the stacks' split of the off-CPU time is */
	jb_add(b, "\"offcpu\":{\"walked_at\":\"%s\",\"sampling\":\"%s\",\"threshold_ns\":%u,\"folded\":[",
	       c->offcpu_at_switch_in ? "switch_in" : "switch_out", sampled ? "threshold" : "every_interval",
	       sampled ? c->offcpu_sample_ns : 0);
	json_stack_rows(b, bpf_map__fd(blk->maps.offcpu), sizeof(struct fst_offcpu_key),
			bpf_map__fd(c->offcpu_at_switch_in ? blk->maps.offcpu_kstacks : blk->maps.stacks),
			offsetof(struct fst_offcpu_key, stack_id), offsetof(struct fst_offcpu_key, reason), NULL, NULL,
			&total, lost);
	/* a stack the kernel could not store (its bucket held another stack): time known, stack not */
	jb_add(b, "],\"stack_lost_ns_by_reason\":{");
	bool first = true;
	for (int r = 0; r < FST_MAX_OFFCPU_REASONS; r++) {
		lost_ns += lost[r];
		if (lost[r]) {
			jb_add(b, "%s\"%d\":%llu", first ? "" : ",", r, lost[r]);
			first = false;
		}
	}
	jb_add(b, "},\"stack_lost_ns\":%llu}", lost_ns);
}

#define WORK_KIND_CASE(c, v, n) case v: return n;
static const char *work_kind_name(unsigned kind)
{
	switch (kind) { FST_WORK_KINDS(WORK_KIND_CASE) }
	return "filesystem work";
}

struct sample_prefix {
	int ustacks_fd;
	unsigned long long with_user_stack;
};

/* a sample's frames above its kernel stack: "[kworker: <work kind>]", or the traced thread's user frames */
static void sample_prefix(const void *k, __u64 n, struct jbuf *st, void *ctx)
{
	const struct fst_sample_key *key = k;
	struct sample_prefix *sp = ctx;
	if (key->work_kind) {
		jb_add(st, "[kworker: %s];", work_kind_name(key->work_kind));
	} else if (ustack_fold(sp->ustacks_fd, key->user_stack_id, key->tgid, st)) {
		jb_add(st, ";");
		sp->with_user_stack += n;
	}
}

/* "sampling": folded stacks (root first) with counts, user or kworker frames above the kernel frames */
static void json_sampling(struct jbuf *b, struct sample_bpf *smp, int hz, const char *why_off)
{
	jb_add(b, "\"sampling\":{\"hz\":%d", smp ? hz : 0);
	if (!smp) {
		jb_add(b, ",\"why_off\":");
		jb_str(b, why_off);
		jb_add(b, "}");
		return;
	}
	unsigned long long total = 0, lost[FST_MAX_OFFCPU_REASONS] = {};
	struct sample_prefix sp = { .ustacks_fd = bpf_map__fd(smp->maps.user_stacks) };
	jb_add(b, ",\"folded\":[");
	json_stack_rows(b, bpf_map__fd(smp->maps.samples), sizeof(struct fst_sample_key), bpf_map__fd(smp->maps.sample_stacks),
			offsetof(struct fst_sample_key, stack_id), -1, sample_prefix, &sp, &total, lost);
	/* the sampling program's own cost (kernel.bpf_stats_enabled=1), as the probes' */
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	if (bpf_obj_get_info_by_fd(bpf_program__fd(smp->progs.sample_request_stack), &info, &len))
		memset(&info, 0, sizeof(info));
	jb_add(b, "],\"samples\":%llu,\"stacks_lost\":%llu,\"with_user_stack\":%llu,\"event\":\"cpu-clock\","
		  "\"runs\":%llu,\"run_ns\":%llu}",
	       total, lost[0], sp.with_user_stack, (unsigned long long)info.run_cnt,
	       (unsigned long long)info.run_time_ns);
}

/* stack ids block requests were queued from: folded into the header at the end */
#define MAX_IO_STACKS 16384
static __s32 io_stack_ids[MAX_IO_STACKS];
static bool io_stack_used[MAX_IO_STACKS];

static void note_io_stack(__s32 id)
{
	if (id < 0)
		return;
	for (unsigned i = 0, h = (unsigned)id * 2654435761u; i < MAX_IO_STACKS; i++) {
		unsigned k = (h + i) % MAX_IO_STACKS;
		if (!io_stack_used[k]) {
			io_stack_used[k] = true;
			io_stack_ids[k] = id;
			return;
		}
		if (io_stack_ids[k] == id)
			return;
	}
}

static void json_io_stacks(struct jbuf *b, struct block_bpf *blk)
{
	int kfd = bpf_map__fd(blk->maps.stacks);
	bool first = true;
	jb_add(b, "\"io_stacks\":{");
	for (int k = 0; k < MAX_IO_STACKS; k++) {
		if (!io_stack_used[k])
			continue;
		struct jbuf st = {};
		if (fold_stack(kfd, io_stack_ids[k], &st)) {
			jb_add(b, "%s\"%d\":", first ? "" : ",", io_stack_ids[k]);
			jb_str(b, st.s);
			first = false;
		}
		free(st.s);
	}
	jb_add(b, "}");
}

static int handle_record(void *ctx, void *data, size_t size)
{
	if (size >= sizeof(struct fst_io) && ((const __u32 *)data)[0] == FST_REC_IO)
		note_io_stack(((const struct fst_io *)data)->queue_stack);
	/* a process's mappings, for its user stacks, while it still runs */
	if (opt.sample_hz > 0 && size >= sizeof(struct fst_req) && ((const __u32 *)data)[0] == FST_REC_REQ)
		ustack_note_process(((const struct fst_req *)data)->tgid);
	struct results *r = ctx;
	if (opt.exposition)
		expose_note_record(data, size);
	if (!r) {	/* --exposition without -o: nothing is kept; a request here is missing from the counters */
		if (((const __u32 *)data)[0] == FST_REC_REQ)
			expose_unaggregated_requests++;
		return 0;
	}
	int err = results_add(r, data, size);
	if (opt.interval > 0)
		live_add(data, size);
	if (err)
		die("writing records: %s", strerror(-err));
	return 0;
}

struct diskstat {
	bool found;
	unsigned long long v[17];
};

static void read_diskstat(const struct dev_arg *d, struct diskstat *s)
{
	FILE *f = fopen("/proc/diskstats", "r");
	memset(s, 0, sizeof(*s));
	if (!f)
		return;
	char line[512], name[64];
	unsigned ma, mi;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long *v = s->v;
		int n = sscanf(line, "%u %u %63s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
			       &ma, &mi, name, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
			       &v[10], &v[11], &v[12], &v[13], &v[14], &v[15], &v[16]);
		if (n >= 14 && ma == d->major && mi == d->minor) {
			s->found = true;
			break;
		}
	}
	fclose(f);
}

static unsigned long long dev_inflight(const struct dev_arg *d)
{
	char path[128];
	unsigned long long r = 0, w = 0;
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/inflight", d->major, d->minor);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &r, &w) != 2)
		r = w = 0;
	fclose(f);
	return r + w;
}

static __u64 now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void add_pid_tree(int map_fd, int pid)
{
	/* all threads of pid now; children forked later are added by the kernel side */
	char path[64];
	__u8 one = 1;
	__u32 key = pid;
	/* a pid missing from the map is a process not traced at all: an error, not a smaller result */
	if (bpf_map_update_elem(map_fd, &key, &one, BPF_ANY))
		die("--pid %d: adding it to the traced pids: %s", pid, strerror(errno));
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		die("--pid %d: no such process", pid);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		key = atoi(e->d_name);	/* /proc's own names: always a number */
		if (bpf_map_update_elem(map_fd, &key, &one, BPF_ANY))
			die("--pid %d: adding its thread %u to the traced pids: %s", pid, key, strerror(errno));
	}
	closedir(d);
}

/* running or sleeping; a zombie waiting for its parent counts as gone */
static bool pid_alive(int pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *paren = strrchr(buf, ')');	/* comm may contain spaces and parentheses */
	return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

/* task delay accounting (the ground truth for I/O wait): on while tracing, then as it was */
static int delayacct_set(int on)
{
	int was = -1;
	FILE *f = fopen("/proc/sys/kernel/task_delayacct", "r+");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &was) != 1)
		was = -1;
	if (on >= 0 && was != on) {
		rewind(f);
		fprintf(f, "%d\n", on);
	}
	fclose(f);
	return was;
}

/* kernel.task_delayacct is system-wide, so concurrent collectors share it through a holder list in
 * DELAYACCT_REFS, under flock: "<value to restore>\n<pid>...".  The first holder in records the value,
 * the last one out restores it.  A holder that died without releasing (SIGKILL) is dropped by the next
 * collector or by fstrace's leftover sweep (user/system.py), which then restores the value itself. */
#define DELAYACCT_REFS "/run/fstrace/delayacct"
static bool delayacct_held;

static bool is_collector(pid_t pid)
{
	char path[64], comm[32] = "";
	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool ok = fgets(comm, sizeof(comm), f) && !strcmp(comm, "fstrace-collect\n");
	fclose(f);
	return ok && pid_alive(pid);	/* a zombie holds nothing */
}

static int delayacct_ref(bool acquire)
{
	mkdir("/run/fstrace", 0755);
	int fd = open(DELAYACCT_REFS, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0 || flock(fd, LOCK_EX)) {	/* no /run: unshared, as before */
		if (fd >= 0)
			close(fd);
		return delayacct_set(acquire ? 1 : -1);
	}
	FILE *f = fdopen(dup(fd), "r");
	int restore = -1, n = 0, p;
	pid_t holders[256];
	if (f) {
		if (fscanf(f, "%d", &restore) != 1)
			restore = -1;
		while (n < 255 && fscanf(f, "%d", &p) == 1)
			if (p != getpid() && is_collector(p))
				holders[n++] = p;
		fclose(f);
	}
	int was = delayacct_set(-1);
	if (acquire) {
		if (restore < 0)
			restore = was;
		holders[n++] = getpid();
		delayacct_set(1);
	} else if (n == 0 && restore >= 0) {
		delayacct_set(restore);
	}
	if (ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0 && n > 0) {	/* the read moved the shared offset */
		dprintf(fd, "%d\n", restore);
		for (int i = 0; i < n; i++)
			dprintf(fd, "%d\n", holders[i]);
	}
	close(fd);	/* releases the flock */
	return was;
}

static void delayacct_release(void)
{
	if (delayacct_held)
		delayacct_ref(false);
}

static void json_diskstat(struct jbuf *b, const struct diskstat *s)
{
	if (!s->found) {
		jb_add(b, "null");
		return;
	}
	static const char *names[] = { "reads", "reads_merged", "sectors_read", "ms_reading", "writes",
				       "writes_merged", "sectors_written", "ms_writing", "in_flight",
				       "ms_io", "ms_weighted" };
	jb_add(b, "{");
	for (int i = 0; i < 11; i++)
		jb_add(b, "%s\"%s\":%llu", i ? "," : "", names[i], s->v[i]);
	jb_add(b, "}");
}

/*
 * Runs the kernel skipped because the program was already active on that CPU
 * (lost events), and runs counted (only while kernel.bpf_stats_enabled=1).
 */
static void prog_stats(struct probe *p)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	p->misses = p->runs = p->run_ns = 0;
	if (!p->prog)
		return;
	if (bpf_obj_get_info_by_fd(bpf_program__fd(p->prog), &info, &len)) {
		fprintf(stderr, "fstrace-collect: cannot read statistics of %s: %s\n", p->name, strerror(errno));
		return;
	}
	p->misses = info.recursion_misses;
	p->runs = info.run_cnt;
	p->run_ns = info.run_time_ns;
}

static void json_probes(struct jbuf *b, struct probe *probes, int n, bool *first)
{
	for (int i = 0; i < n; i++) {
		jb_add(b, "%s{\"probe\":", *first ? "" : ",");
		*first = false;
		jb_str(b, probes[i].name);
		jb_add(b, ",\"tier\":\"%s\",\"measures\":", tier_name(probes[i].tier));
		jb_str(b, probes[i].measures);
		jb_add(b, ",\"why\":");
		jb_str(b, probes[i].why);
		jb_add(b, ",\"missed_runs\":%llu,\"runs\":%llu,\"run_ns\":%llu}", probes[i].misses, probes[i].runs,
		       probes[i].run_ns);
	}
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		die("reading %s: %s", path, strerror(errno));
	struct jbuf b = {};
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		jb_add(&b, "%.*s", (int)n, buf);
	fclose(f);
	return b.s ? b.s : strdup("{}");
}

static void json_slots_n(struct jbuf *b, const __u64 *slots, int n)
{
	jb_add(b, "[");
	for (int i = 0; i < n; i++)
		jb_add(b, "%s%llu", i ? "," : "", (unsigned long long)slots[i]);
	jb_add(b, "]");
}

static void json_slots(struct jbuf *b, const __u64 *slots)
{
	json_slots_n(b, slots, FST_HIST_SLOTS);
}

/*
 * "requests_counted": the requests tasks.bpf.c counted instead of recording, per (kind, superblock dev),
 * summed over CPUs; parts by name (records.h FST_PARTS), histograms as log2 slots of microseconds.
 */
static void json_requests_counted(struct jbuf *b, struct tasks_bpf *tsk)
{
	jb_add(b, "\"requests_counted\":[");
	if (!tsk) {
		jb_add(b, "]");
		return;
	}
	static const char *part_names[FST_NR_PARTS] = {
#define PART_NAME(c, v, field) [v] = #field,
		FST_PARTS(PART_NAME)
#undef PART_NAME
	};
	int fd = bpf_map__fd(tsk->maps.req_agg);
	struct fst_req_agg sum;
	struct fst_req_agg_key key, next;
	void *prev = NULL;
	bool first = true;
	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (req_agg_sum(fd, &key, &sum))
			continue;
		jb_add(b, "%s{\"kind\":%u,\"sdev\":%u,\"count\":%llu,\"bytes\":%llu,\"wall_ns\":%llu,\"wall_hist\":",
		       first ? "" : ",", key.kind, key.sdev, (unsigned long long)sum.count,
		       (unsigned long long)sum.bytes, (unsigned long long)sum.wall_ns);
		first = false;
		json_slots(b, sum.wall_hist);
		jb_add(b, ",\"wall_ns_loglin\":");
		json_slots_n(b, sum.wall_ns_loglin, FST_LAT_SLOTS);
		jb_add(b, ",\"part_ns\":{");
		for (int p = 0; p < FST_NR_PARTS; p++)
			jb_add(b, "%s\"%s\":%llu", p ? "," : "", part_names[p], (unsigned long long)sum.part_ns[p]);
		jb_add(b, "},\"part_hist\":{");
		for (int p = 0; p < FST_NR_PARTS; p++) {
			jb_add(b, "%s\"%s\":", p ? "," : "", part_names[p]);
			json_slots(b, sum.part_hist[p]);
		}
		jb_add(b, "}}");
	}
	jb_add(b, "]");
}

/* the live view's share of the counted requests: what each (kind, dev) count grew by since the last view */
static void live_counted(struct tasks_bpf *tsk)
{
	static struct {
		struct fst_req_agg_key key;
		struct fst_req_agg seen;
	} last[64];
	static int nlast;
	if (!tsk)
		return;
	int fd = bpf_map__fd(tsk->maps.req_agg);
	struct fst_req_agg_key key, next;
	struct fst_req_agg sum;
	void *prev = NULL;
	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (req_agg_sum(fd, &key, &sum))
			continue;
		int i = 0;
		while (i < nlast && memcmp(&last[i].key, &key, sizeof(key)))
			i++;
		if (i == N(last))
			continue;	/* more keys than the map holds: cannot happen */
		if (i == nlast) {
			memset(&last[nlast], 0, sizeof(last[0]));
			last[nlast++].key = key;
		}
		__u64 *d = (__u64 *)&sum, *l = (__u64 *)&last[i].seen;
		for (size_t w = 0; w < sizeof(sum) / sizeof(__u64); w++) {
			__u64 now = d[w];
			d[w] -= l[w];
			l[w] = now;
		}
		live_add_counted(&sum, key.kind == FST_REQ_READ);
	}
}

static void json_hist_row(struct jbuf *b, bool *first, __u32 metric, __u32 dev, __u32 sub, const __u64 *slots)
{
	jb_add(b, "%s{\"metric\":%u,\"dev\":%u,\"sub\":%u,\"slots\":[", *first ? "" : ",", metric, dev, sub);
	*first = false;
	for (int i = 0; i < FST_HIST_SLOTS; i++)
		jb_add(b, "%s%llu", i ? "," : "", (unsigned long long)slots[i]);
	jb_add(b, "]}");
}

static void json_aggregates(struct jbuf *b, struct block_bpf *blk)
{
	int hfd = bpf_map__fd(blk->maps.hists);
	struct fst_hist_key key, next;
	struct fst_hist h;
	bool first = true;
	jb_add(b, "\"histograms\":[");
	void *prev = NULL;
	while (!bpf_map_get_next_key(hfd, prev, &next)) {
		key = next;
		prev = &key;
		if (!bpf_map_lookup_elem(hfd, &key, &h))
			json_hist_row(b, &first, key.metric, key.dev, key.sub, h.slots);
	}
	/* the block request histograms: device i's are in dev_io entry i, a row for each (metric, op) seen */
	static struct fst_dev_io io[MAX_DEVS];
	__u32 kdevs[MAX_DEVS];
	for (int i = 0; i < opt.nr_devs; i++) {
		__u32 slot = i;
		kdevs[i] = (opt.devs[i].major << 20) | opt.devs[i].minor;
		if (bpf_map_lookup_elem(bpf_map__fd(blk->maps.dev_io), &slot, &io[i]))
			memset(&io[i], 0, sizeof(io[i]));
		for (int k = 0; k < DEV_IO_METRICS; k++)
			for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
				const __u64 *slots = dev_io_hist(&io[i], dev_io_metrics[k], sub);
				bool any = false;
				for (int s = 0; s < FST_HIST_SLOTS; s++)
					any |= slots[s] != 0;
				if (any)
					json_hist_row(b, &first, dev_io_metrics[k], kdevs[i], sub, slots);
			}
	}
	jb_add(b, "],\"alignment\":[");
	first = true;
	for (int i = 0; i < opt.nr_devs; i++) {
		const struct fst_align *a = &io[i].align;
		if (!a->nr)
			continue;
		jb_add(b, "%s{\"dev\":%u,\"nr\":%llu,\"start_4k\":%llu,\"end_4k\":%llu,\"start_unit\":%llu,"
			  "\"end_unit\":%llu,\"cross_unit\":%llu}",
		       first ? "" : ",", kdevs[i], (unsigned long long)a->nr, (unsigned long long)a->start_4k,
		       (unsigned long long)a->end_4k, (unsigned long long)a->start_unit,
		       (unsigned long long)a->end_unit, (unsigned long long)a->cross_unit);
		first = false;
	}
	jb_add(b, "]");
}

/*
 * Expire in-flight bios and requests older than FST_STALE_NS: their completion event was never delivered to
 * us, and left in place they would keep a task "waiting for its own I/O" for the rest of the run.  The BPF
 * side does it (block.bpf.c expire_stale): its in-flight tables are freed with a compare-and-swap, which only
 * a BPF program can do.
 */
struct expired {
	unsigned long long bios, requests;
};

static void expire_stale(struct block_bpf *blk, struct expired *ex)
{
	LIBBPF_OPTS(bpf_test_run_opts, run);
	if (bpf_prog_test_run_opts(bpf_program__fd(blk->progs.expire_stale), &run))
		fprintf(stderr, "fstrace-collect: expiring stale in-flight I/O: %s\n", strerror(errno));
	ex->bios = blk->bss->expired_bios;
	ex->requests = blk->bss->expired_requests;
}

/*
 * The BPF side wakes the reader only when a quarter of the ring buffer is waiting (common.bpf.h
 * record_submit): the reader's own timer drains the rest.  epoll reports the ring only after a wakeup, so a
 * poll that times out is followed by an explicit consume.  At 500 k records/s (warm randread, --records all)
 * 50 ms is 2-3 MiB, well under the wakeup threshold.
 */
#define RB_POLL_MS 50

static int drain_ring(struct ring_buffer *rb, int timeout_ms)
{
	int n = ring_buffer__poll(rb, timeout_ms);
	if (n < 0)
		return n;
	int m = ring_buffer__consume(rb);
	return m < 0 ? m : n + m;
}

/* the end of tracing: every BPF object destroyed (programs, links, maps), the ring buffer freed */
static void detach_all(struct ring_buffer *rb, struct block_bpf *blk, struct tasks_bpf *tsk, struct erofs_bpf *ero,
		       struct squashfs_bpf *sqf, struct btrfs_bpf *btr, struct sample_bpf *smp)
{
	ring_buffer__free(rb);
	if (tsk)
		tasks_bpf__destroy(tsk);
	sample_bpf__destroy(smp);
	erofs_bpf__destroy(ero);
	squashfs_bpf__destroy(sqf);
	btrfs_bpf__destroy(btr);
	block_bpf__destroy(blk);
}

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	if (geteuid() != 0)
		die("must run as root (loading BPF programs needs CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN)");
	libbpf_set_print(libbpf_print);

	struct results res = {};
	int err = opt.out ? results_open(&res, opt.out) : 0;
	if (err)
		die("cannot create results next to %s: %s", opt.out, strerror(-err));
	char *meta = opt.meta_file ? read_file(opt.meta_file) : strdup("{}");

	/* start the command first, stopped on a pipe, so its pid can be traced from its first instruction */
	int go[2] = { -1, -1 };
	pid_t child = -1;
	if (opt.cmd) {
		if (pipe2(go, O_CLOEXEC))
			die("pipe: %s", strerror(errno));
		child = fork();
		if (child < 0)
			die("fork: %s", strerror(errno));
		if (child == 0) {
			char c;
			close(go[1]);
			/* its own process group, so the whole workload tree (tar | xargs ...) is signalled at the
			 * end, and killed with the collector should the collector die */
			setpgid(0, 0);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			if (read(go[0], &c, 1) != 1)
				_exit(126);	/* collector gave up before tracing started */
			execvp(opt.cmd[0], opt.cmd);
			fprintf(stderr, "fstrace-collect: cannot run %s: %s\n", opt.cmd[0], strerror(errno));
			_exit(127);
		}
		close(go[0]);
		setpgid(child, child);	/* either side may run first */
	}

	struct sigaction sc = { .sa_handler = on_child };
	sigaction(SIGCHLD, &sc, NULL);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	struct sigaction sh = { .sa_handler = on_hup };
	sigaction(SIGHUP, opt.exposition ? &sh : &sa, NULL);

	/* task records (what delay accounting is for) are not kept without -o: an exporter leaves it as it is */
	bool wants_delayacct = !opt.block_only && opt.out;
	int delayacct_was = wants_delayacct ? delayacct_ref(true) : delayacct_set(-1);
	delayacct_held = wants_delayacct;
	atexit(delayacct_release);	/* every exit, die() included */
	__u64 t_load0 = now_ns(CLOCK_MONOTONIC);
	struct block_bpf *blk = NULL;
	struct tasks_bpf *tsk = NULL;
	struct bpf_object *none = NULL;
	task_storage_on = !opt.block_only && task_storage_usable();
	for (;;) {
		LOAD_SKEL(block_bpf, blk, block_probes, none);
		if (opt.block_only)
			break;
		/* storage mode needs tasks.bpf.c on tp_btf: no raw_tp attempt in it */
		LOAD_SKEL_TRY(tasks_bpf, tsk, task_probes, blk->obj, task_storage_on ? 1 : 2);
		if (tsk)
			break;
		block_bpf__destroy(blk);
		task_storage_on = false;
		snprintf(task_state_why, sizeof(task_state_why), "pid hash: request tracing did not load with tp_btf");
	}
	if (opt.block_only) {
		for (int i = 0; i < N(task_probes); i++) {
			task_probes[i].tier = TIER_NONE;
			snprintf(task_probes[i].why, sizeof(task_probes[i].why), "not loaded: --block-only");
		}
	}

	struct erofs_bpf *ero = NULL;
	struct squashfs_bpf *sqf = NULL;
	struct btrfs_bpf *btr = NULL;
	LOAD_OPTIONAL_SKEL(erofs_bpf, ero, erofs_probes, blk->obj);
	LOAD_OPTIONAL_SKEL(squashfs_bpf, sqf, squashfs_probes, blk->obj);
	LOAD_OPTIONAL_SKEL(btrfs_bpf, btr, btrfs_probes, blk->obj);
	struct fst_cfg frozen;
	fill_cfg(&frozen);
	if (frozen.btrfs_compress_arg_owner < 0 || frozen.btrfs_compress_arg_start < 0 ||
	    frozen.btrfs_compress_arg_total_in < 0 || frozen.btrfs_compress_arg_total_out < 0) {
		for (int i = 0; i < N(btrfs_probes); i++)
			if (!strcmp(btrfs_probes[i].measures, BTRFS_COMPRESS_WHAT))
				mark_unavailable(&btrfs_probes[i], 1, "argument positions unknown: no BTF for it");
	}

	struct sample_bpf *smp = NULL;
	char sample_why[160] = "off (--sample-hz 0)";
	if (opt.sample_hz > 0 && tsk) {
		smp = sample_bpf__open();
		if (!smp)
			die("opening sample_bpf: %s", strerror(errno));
		fill_cfg((struct fst_cfg *)&smp->rodata->cfg);
		reuse_maps(blk->obj, smp->obj);
		if (sample_bpf__load(smp)) {
			snprintf(sample_why, sizeof(sample_why), "load failed: %s", strerror(errno));
			sample_bpf__destroy(smp);
			smp = NULL;
		}
	} else if (opt.sample_hz > 0) {
		snprintf(sample_why, sizeof(sample_why), "needs request tracing (not with --block-only)");
	}

	for (int i = 0; i < opt.nr_devs; i++) {
		struct dev_arg *d = &opt.devs[i];
		__u32 kdev = (d->major << 20) | d->minor;
		/* dev_io entry i: the exposition and the header find device i's figures there */
		struct fst_dev_cfg dc = { .unit_bytes = d->unit, .is_loop = d->is_loop, .io_slot = i };
		if (bpf_map_update_elem(bpf_map__fd(blk->maps.traced_devs), &kdev, &dc, BPF_ANY))
			die("--dev %u:%u: adding it to the traced devices: %s", d->major, d->minor, strerror(errno));
	}
	for (int i = 0; i < opt.nr_sdevs; i++) {
		__u32 kdev = (opt.sdevs[i][0] << 20) | opt.sdevs[i][1];
		__u8 one = 1;
		if (bpf_map_update_elem(bpf_map__fd(blk->maps.traced_sdevs), &kdev, &one, BPF_ANY))
			die("--sdev %u:%u: adding it to the traced filesystems: %s", opt.sdevs[i][0], opt.sdevs[i][1],
			    strerror(errno));
	}
	int pids_fd = bpf_map__fd(blk->maps.traced_pids);
	for (int i = 0; i < opt.nr_pids; i++)
		add_pid_tree(pids_fd, opt.pids[i]);
	if (child > 0) {
		__u32 key = child;
		__u8 one = 1;
		if (bpf_map_update_elem(pids_fd, &key, &one, BPF_ANY))
			die("tracing the command's pid %u: %s", key, strerror(errno));
	}

	struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(blk->maps.events), handle_record, opt.out ? &res : NULL,
						  NULL);
	if (!rb)
		die("ring buffer: %s", strerror(errno));

	err = tiers_attach(block_probes, N(block_probes));
	if (!err)
		err = tsk ? tiers_attach(task_probes, N(task_probes)) : 0;
	if (!err && ero)
		err = tiers_attach(erofs_probes, N(erofs_probes));
	if (!err && sqf)
		err = tiers_attach(squashfs_probes, N(squashfs_probes));
	if (!err && btr)
		err = tiers_attach(btrfs_probes, N(btrfs_probes));
	if (!err && smp) {
		int serr = attach_sampling(smp, opt.sample_hz);
		if (serr) {
			snprintf(sample_why, sizeof(sample_why), "perf_event_open/attach failed: %s", strerror(-serr));
			detach_sampling();
			sample_bpf__destroy(smp);
			smp = NULL;
		}
	}
	if (err) {
		if (child > 0) {
			close(go[1]);
			waitpid(child, NULL, 0);
		}
		for (unsigned g = 0; g < N(probe_groups); g++)
			tiers_detach(probe_groups[g].probes, probe_groups[g].n);
		if (opt.out)
			results_discard(&res);
		die("attach failed; nothing traced");
	}
	__u64 t_attached = now_ns(CLOCK_MONOTONIC);

	/* [t_start, t_end] encloses both diskstats snapshots: completions they count fall inside it */
	__u64 t_start = now_ns(CLOCK_MONOTONIC), t_start_real = now_ns(CLOCK_REALTIME);
	struct diskstat ds_start[MAX_DEVS], ds_end[MAX_DEVS];
	for (int i = 0; i < opt.nr_devs; i++)
		read_diskstat(&opt.devs[i], &ds_start[i]);

	struct expose_maps xm = {
		.req_agg = tsk ? bpf_map__fd(tsk->maps.req_agg) : -1, .dev_io = bpf_map__fd(blk->maps.dev_io),
		.drops = bpf_map__fd(blk->maps.drops),
		.io_sums = bpf_map__fd(blk->maps.io_sums), .comm_agg = tsk && opt.per_comm ? bpf_map__fd(tsk->maps.comm_agg) : -1,
	};
	if (xm.comm_agg >= 0) {	/* the key every name beyond the map's room is counted under (tasks.bpf.c) */
		struct fst_comm_agg_key other = {};
		struct fst_comm_agg *zero = calloc(libbpf_num_possible_cpus(), sizeof(*zero));
		if (!zero || bpf_map_update_elem(xm.comm_agg, &other, zero, BPF_NOEXIST))
			die("creating the other names' key of comm_agg: %s", strerror(errno));
		free(zero);
	}
	struct expose_probes xp[N(probe_groups)];
	for (unsigned g = 0; g < N(probe_groups); g++)
		xp[g] = (struct expose_probes){ probe_groups[g].probes, probe_groups[g].n };
	__u32 x_sdevs[MAX_DEVS], x_devs[MAX_DEVS];
	for (int i = 0; i < opt.nr_sdevs; i++)
		x_sdevs[i] = (opt.sdevs[i][0] << 20) | opt.sdevs[i][1];
	for (int i = 0; i < opt.nr_devs; i++)
		x_devs[i] = (opt.devs[i].major << 20) | opt.devs[i].minor;
#define EXPOSE() expose_write(opt.exposition, &xm, xp, N(xp), x_sdevs, opt.nr_sdevs, x_devs, opt.nr_devs, \
			      t_start_real / 1e9)
	bool expose_failing = false;
	/* the first exposition exists before "ready": a reader started then finds a complete one */
	if (opt.exposition && (err = EXPOSE()))
		die("writing --exposition %s: %s", opt.exposition, strerror(-err));
	__u64 last_expose = t_start;

	if (opt.ready_fd >= 0) {
		if (write(opt.ready_fd, "ready\n", 6) != 6) { /* the reader went away: keep tracing */ }
		close(opt.ready_fd);
	}
	if (child > 0) {
		if (write(go[1], "g", 1) != 1)
			die("starting command: %s", strerror(errno));
		close(go[1]);
	}

	int wstatus = 0;
	bool child_done = child <= 0;
	__u64 t_child_exit = 0;
	__u64 last_progress = t_start, last_expire = t_start, last_live = t_start;
	int live_clear = isatty(STDOUT_FILENO);
	struct expired expired = {};
	while (!stop_signal) {
		err = drain_ring(rb, RB_POLL_MS);
		if (err < 0 && err != -EINTR)
			die("polling ring buffer: %s", strerror(-err));
		__u64 now = now_ns(CLOCK_MONOTONIC);
		if (opt.progress && now - last_progress >= 1000000000ull) {
			last_progress = now;
			fprintf(stderr, "fstrace-collect: %.0fs  requests %llu  block requests %llu  dropped %llu\n",
				(now - t_start) / 1e9, (unsigned long long)res.spools[FST_REC_REQ].count,
				(unsigned long long)res.spools[FST_REC_IO].count,
				(unsigned long long)(sum_drops(bpf_map__fd(blk->maps.drops), FST_REC_REQ) +
						     sum_drops(bpf_map__fd(blk->maps.drops), FST_REC_IO)));
		}
		if (opt.interval > 0 && now - last_live >= (__u64)(opt.interval * 1e9)) {
			live_counted(tsk);
			live_print(stdout, (now - last_live) / 1e9,
				   sum_drops(bpf_map__fd(blk->maps.drops), FST_REC_REQ) +
				   sum_drops(bpf_map__fd(blk->maps.drops), FST_REC_IO), live_clear);
			last_live = now;
		}
		if (opt.exposition && (hup_signal || now - last_expose >= (__u64)(opt.exposition_interval * 1e9))) {
			hup_signal = 0;
			last_expose = now;
			err = EXPOSE();
			/* a full disk must not end an always-on exporter: said once, and once when it recovers */
			if (err && !expose_failing)
				fprintf(stderr, "fstrace-collect: writing %s: %s (retrying every interval)\n",
					opt.exposition, strerror(-err));
			else if (!err && expose_failing)
				fprintf(stderr, "fstrace-collect: writing %s works again\n", opt.exposition);
			expose_failing = err != 0;
		}
		if (now - last_expire >= 1000000000ull) {
			last_expire = now;
			expire_stale(blk, &expired);
			expose_expired_bios = expired.bios;
			expose_expired_requests = expired.requests;
		}
		if (!child_done && waitpid(child, &wstatus, WNOHANG) == child) {
			child_done = true;
			t_child_exit = now_ns(CLOCK_MONOTONIC);
		}
		if (child > 0 && child_done)
			break;
		if (child <= 0 && opt.nr_pids) {	/* --pid: stop once every traced process is gone */
			bool any = false;
			for (int i = 0; i < opt.nr_pids && !any; i++)
				any = pid_alive(opt.pids[i]);
			if (!any)
				break;
		}
		if (opt.duration > 0 && now - t_start >= (__u64)(opt.duration * 1e9))
			break;
	}
	bool interrupted = stop_signal != 0;
	if (!child_done) {
		kill(-child, SIGTERM);	/* the whole workload tree, not only its shell */
		waitpid(child, &wstatus, 0);
		child_done = true;
		t_child_exit = now_ns(CLOCK_MONOTONIC);
	}

	/* let I/O the workload started finish, so every request it caused is counted */
	for (int tries = 0; tries < 50; tries++) {
		unsigned long long busy = 0;
		for (int i = 0; i < opt.nr_devs; i++)
			if (opt.devs[i].is_loop)
				busy += dev_inflight(&opt.devs[i]);
		if (!busy)
			break;
		drain_ring(rb, 20);
	}
	for (int i = 0; i < opt.nr_devs; i++)
		read_diskstat(&opt.devs[i], &ds_end[i]);
	__u64 t_end = now_ns(CLOCK_MONOTONIC);
	for (unsigned g = 0; g < N(probe_groups); g++) {
		for (int i = 0; i < probe_groups[g].n; i++)
			prog_stats(&probe_groups[g].probes[i]);
		tiers_detach(probe_groups[g].probes, probe_groups[g].n);
	}
	detach_sampling();
	while (ring_buffer__consume(rb) > 0)
		;
	if (opt.exposition && (err = EXPOSE()))
		fprintf(stderr, "fstrace-collect: writing %s: %s\n", opt.exposition, strerror(-err));
	if (!opt.out) {	/* an exporter: its file is the exposition, already final */
		detach_all(rb, blk, tsk, ero, sqf, btr, smp);
		fprintf(stderr, "fstrace-collect: detached\n");
		return 0;
	}

	struct utsname u;
	uname(&u);
	struct jbuf h = {};
	jb_add(&h, "{\"format\":\"fstrace-results\",\"format_version\":%d,\"records_version\":%d,",
	       FST_RESULTS_FORMAT, FST_RECORDS_VERSION);
	jb_add(&h, "\"collector\":{\"version\":\"%s\",\"libbpf\":\"%u.%u\",\"static\":%s},", FSTRACE_VERSION,
	       libbpf_major_version(), libbpf_minor_version(), FSTRACE_STATIC ? "true" : "false");
	jb_add(&h, "\"kernel\":{\"release\":");
	jb_str(&h, u.release);
	jb_add(&h, ",\"version\":");
	jb_str(&h, u.version);
	jb_add(&h, ",\"machine\":");
	jb_str(&h, u.machine);
	jb_add(&h, "},\"host\":");
	jb_str(&h, u.nodename);
	jb_add(&h, ",\"tracer_frame_prefix\":\"" TRACER_FRAME_PREFIX "\"");
	jb_add(&h, ",\"dev_encoding\":\"kernel dev_t: major << 20 | minor\",");
	jb_add(&h, "\"clock\":\"CLOCK_MONOTONIC ns (bpf_ktime_get_ns)\",");
	jb_add(&h, "\"time\":{\"start_ns\":%llu,\"end_ns\":%llu,\"start_realtime_ns\":%llu,"
		   "\"load_attach_ns\":%llu},",
	       (unsigned long long)t_start, (unsigned long long)t_end, (unsigned long long)t_start_real,
	       (unsigned long long)(t_attached - t_load0));
	jb_add(&h, "\"probes\":[");
	bool first = true;
	for (unsigned g = 0; g < N(probe_groups); g++)
		json_probes(&h, probe_groups[g].probes, probe_groups[g].n, &first);
	jb_add(&h, "],\"loop_charging\":%s,", blk->rodata->cfg.loop_rootcg_workfn ? "true" : "false");
	jb_add(&h, "\"filter\":{\"comm\":");
	jb_str_or_null(&h, opt.comm);
	jb_add(&h, ",\"sdevs\":[");
	for (int i = 0; i < opt.nr_sdevs; i++)
		jb_add(&h, "%s%u", i ? "," : "", (opt.sdevs[i][0] << 20) | opt.sdevs[i][1]);
	jb_add(&h, "],\"all_tasks\":%s,\"cgroup\":", !opt.cmd && !opt.nr_pids && !opt.cgroup && !opt.comm ? "true" : "false");
	jb_str_or_null(&h, opt.cgroup);
	jb_add(&h, ",\"pids\":[");
	for (int i = 0; i < opt.nr_pids; i++)
		jb_add(&h, "%s%d", i ? "," : "", opt.pids[i]);
	jb_add(&h, "],\"command\":");
	if (opt.cmd) {
		jb_add(&h, "[");
		for (int i = 0; opt.cmd[i]; i++) {
			jb_add(&h, "%s", i ? "," : "");
			jb_str(&h, opt.cmd[i]);
		}
		jb_add(&h, "]");
	} else {
		jb_add(&h, "null");
	}
	jb_add(&h, ",\"root_pid\":%d},", child > 0 ? child : 0);
	jb_add(&h, "\"workload\":{\"start_ns\":%llu,\"end_ns\":%llu,\"exit_status\":%d,\"signal\":%d,"
		   "\"interrupted\":%s},", (unsigned long long)t_start, (unsigned long long)t_child_exit,
	       child > 0 && WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1,
	       child > 0 && WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0, interrupted ? "true" : "false");
	jb_add(&h, "\"devices\":[");
	for (int i = 0; i < opt.nr_devs; i++) {
		struct dev_arg *d = &opt.devs[i];
		jb_add(&h, "%s{\"major\":%u,\"minor\":%u,\"dev\":%u,\"unit_bytes\":%u,\"is_loop\":%s,"
			   "\"diskstats_start\":",
		       i ? "," : "", d->major, d->minor, (d->major << 20) | d->minor, d->unit ? d->unit : 4096,
		       d->is_loop ? "true" : "false");
		json_diskstat(&h, &ds_start[i]);
		jb_add(&h, ",\"diskstats_end\":");
		json_diskstat(&h, &ds_end[i]);
		jb_add(&h, "}");
	}
	jb_add(&h, "],\"drops\":{");
	int drops_fd = bpf_map__fd(blk->maps.drops);
#define DROPS_JSON(c, v, n) \
	jb_add(&h, "%s\"%s\":%llu", c == FST_REC_REQ ? "" : ",", n, (unsigned long long)sum_drops(drops_fd, c));
	FST_REC_TYPES(DROPS_JSON)
	jb_add(&h, "},\"losses\":{");
	int losses_fd = bpf_map__fd(blk->maps.losses);
#define LOSSES_JSON(c, v, n) \
	jb_add(&h, "%s\"%s\":%llu", v ? "," : "", n, (unsigned long long)sum_drops(losses_fd, c));
	FST_LOSSES(LOSSES_JSON)
	jb_add(&h, "},");
	jb_add(&h, "\"delayacct\":{\"was\":%d,\"enabled_for_tracing\":%s},", delayacct_was,
	       delayacct_held && delayacct_was == 0 ? "true" : "false");
	jb_add(&h, "\"task_state\":{\"store\":\"%s\",\"why\":", opt.block_only ? "none" :
	       task_storage_on ? "task_storage" : "pid_hash");
	jb_str(&h, opt.block_only ? "--block-only: no requests" : task_state_why);
	jb_add(&h, "},\"request_records\":{\"mode\":\"%s\",\"record_over_ns\":%llu},",
	       opt.records_all ? "all" : opt.records_none ? "none" : "slow",
	       (unsigned long long)(opt.record_over_us * 1000.0));
	jb_add(&h, "\"io_stack_sampling\":{\"mode\":\"%s\",\"every_ns\":%llu,\"unsampled_id\":%d},",
	       !opt.sample_hz ? "off" : opt.io_stacks_all ? "all" : "sampled", FST_IO_STACK_EVERY_NS,
	       FST_STACK_UNSAMPLED);
	jb_add(&h, "\"reader\":{\"wakeup_bytes\":%u,\"ringbuf_bytes\":%u,\"poll_ms\":%d},",
	       FST_RINGBUF_BYTES / 4, FST_RINGBUF_BYTES, RB_POLL_MS);
	jb_add(&h, "\"expired_in_flight\":{\"bios\":%llu,\"requests\":%llu,\"after_ns\":%llu},",
	       expired.bios, expired.requests, FST_STALE_NS);
	if (opt.sample_hz > 0) {
		load_ksyms();
		struct bpf_object *objs[] = { blk->obj, tsk ? tsk->obj : NULL, ero ? ero->obj : NULL,
					      sqf ? sqf->obj : NULL, btr ? btr->obj : NULL, smp ? smp->obj : NULL };
		add_bpf_ksyms(objs, N(objs));
	}
	json_sampling(&h, smp, opt.sample_hz, sample_why);
	jb_add(&h, ",");
	if (blk->rodata->cfg.offcpu_stacks) {
		json_offcpu(&h, blk);
		jb_add(&h, ",");
		json_io_stacks(&h, blk);
		jb_add(&h, ",");
	}
	jb_add(&h, "\"kernel_aggregates\":{");
	json_aggregates(&h, blk);
	jb_add(&h, ",");
	json_requests_counted(&h, tsk);
	jb_add(&h, "},\"config\":%s}", meta);

	detach_all(rb, blk, tsk, ero, sqf, btr, smp);

	err = results_finish(&res, h.s);
	free(h.s);
	free(meta);
	if (err)
		die("writing %s: %s", opt.out, strerror(-err));
	fprintf(stderr, "fstrace-collect: wrote %s (%llu requests, %llu block requests)\n", opt.out,
		(unsigned long long)res.spools[FST_REC_REQ].count, (unsigned long long)res.spools[FST_REC_IO].count);
	return 0;
}
