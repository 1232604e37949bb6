// SPDX-License-Identifier: GPL-2.0
/*
 * Probe tables, loading and attach (probes.h).  Each probe names the figure it measures by its records.h id
 * (FST_FIGURES): the header carries it, and the analysis finds a figure's probes by it, never by the
 * "measures" text, which is for people.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "env.h"
#include "ksyms.h"
#include "names.h"
#include "probes.h"
#include "procfs.h"
#include "progstats.h"
#include "stacks.h"
#include "block.skel.h"
#include "requests.skel.h"
#include "tasks.skel.h"
#include "erofs.skel.h"
#include "squashfs.skel.h"
#include "btrfs.skel.h"
#include "sample.skel.h"
#include "block.plain.skel.h"
#include "requests.plain.skel.h"
#include "tasks.plain.skel.h"
#include "erofs.plain.skel.h"
#include "squashfs.plain.skel.h"
#include "btrfs.plain.skel.h"
#include "sample.plain.skel.h"

/*
 * The probes of each object, its skeleton named first: a probe's programs are fields of that skeleton (tiers.h
 * PROBE_PROG), named after the probe, so a program the object lacks does not compile.  P: a tracepoint with
 * programs NAME_btf (tp_btf) and NAME_raw (raw_tp); PR: one with NAME_raw alone; D: a function timed by
 * NAME_fentry/NAME_fexit or NAME_kprobe/NAME_kretprobe.  What follows a tracepoint probe's arguments are more of
 * its fields (WINDOWED).
 */
#define P(skel, nm, fig, what, req, ...)                                       \
	{                                                                      \
		.name = #nm, .figure = fig, .measures = what, .required = req, \
		.prog_at = { [FST_TIER_TP_BTF] = PROBE_PROG(skel, nm##_btf),   \
			     [FST_TIER_RAW_TP] = PROBE_PROG(skel, nm##_raw) }, \
		__VA_ARGS__                                                    \
	}
#define PR(skel, nm, fig, what, req, ...)                                      \
	{                                                                      \
		.name = #nm, .figure = fig, .measures = what, .required = req, \
		.prog_at = { [FST_TIER_RAW_TP] = PROBE_PROG(skel, nm##_raw) }, \
		__VA_ARGS__                                                    \
	}
/*
 * A hook that matters only while a request can be in flight: under --budget attached only around the request
 * windows (user/window.c), its figures then a sample of the windows (tiers.h struct probe windowed)
 */
#define WINDOWED .windowed = true
#define D(skel, fn, fig, what)                                                           \
	{                                                                                \
		.name = #fn, .figure = fig, .measures = what,                            \
		.prog_at = { [FST_TIER_FENTRY] = PROBE_PROG(skel, fn##_fentry),          \
			     [FST_TIER_KPROBE] = PROBE_PROG(skel, fn##_kprobe) },        \
		.exit_prog_at = { [FST_TIER_FENTRY] = PROBE_PROG(skel, fn##_fexit),      \
				  [FST_TIER_KPROBE] = PROBE_PROG(skel, fn##_kretprobe) } \
	}

/*
 * Attached in this order and detached in the reverse (tiers_detach): the hooks that end in-flight state before
 * those that begin it, so that no entry begins while its end could still go unseen (it would count as an end
 * missed when its address comes again).  Without block_rq_requeue a requeued request's next issue could not be
 * told from a completion missed.
 */
static struct probe block_probes[] = {
	/* --budget's exact per-device figures, on block_rq_complete beside the next (tracer_attach) */
	{ .name = "block_rq_done",
	  .hook = "block_rq_complete",
	  .budget_only = true,
	  .figure = FST_FIG_RQ_COMPLETE,
	  .measures = "exact per-device requests, bytes, sizes, alignment and latency from the completion alone",
	  .prog_at = { [FST_TIER_TP_BTF] = PROBE_PROG(block_bpf, block_rq_done_btf),
		       [FST_TIER_RAW_TP] = PROBE_PROG(block_bpf, block_rq_done_raw) } },
	P(block_bpf, block_rq_complete, FST_FIG_RQ_COMPLETE, "completion, size, alignment", true, WINDOWED),
	P(block_bpf, block_rq_requeue, FST_FIG_RQ_REQUEUE, "requeues: the next issue is the same request's", true, WINDOWED),
	P(block_bpf, block_bio_complete, FST_FIG_BIO_COMPLETE, "the end of a bio that ended outside a request",
	  false, WINDOWED),
	P(block_bpf, block_rq_issue, FST_FIG_RQ_ISSUE, "issue time, merges", true, WINDOWED),
	P(block_bpf, block_split, FST_FIG_BIO_SPLIT, "owner of split bios", false, WINDOWED),
	P(block_bpf, block_bio_queue, FST_FIG_BIO_QUEUE, "bio queue time, owner", true, WINDOWED),
	P(block_bpf, workqueue_execute_end, FST_FIG_WORK_EXEC, "loop worker -> reader charging; filesystem work items",
	  false, WINDOWED),
	P(block_bpf, workqueue_execute_start, FST_FIG_WORK_EXEC, "loop worker -> reader charging; filesystem work items",
	  false, WINDOWED),
	P(block_bpf, workqueue_queue_work, FST_FIG_WORK_QUEUE, "queueing delay of filesystem work items", false, WINDOWED),
};

static struct probe request_probes[] = {
	P(requests_bpf, sys_enter, FST_FIG_REQ_START, "request start, file", true),
	P(requests_bpf, sys_exit, FST_FIG_REQ_END, "request end, bytes", true),
	P(requests_bpf, sched_switch, FST_FIG_CPU_SPLIT, "on-CPU / off-CPU split", true, WINDOWED),
	P(requests_bpf, sched_wakeup, FST_FIG_WAKEUP, "sleep vs runqueue split", false, WINDOWED),
	P(requests_bpf, sched_process_fork, FST_FIG_PROCESS_TREE, "process tree", true),
	P(requests_bpf, sched_process_exit, FST_FIG_PROCESS_TREE, "process tree", false),
	P(requests_bpf, mm_filemap_add_to_page_cache, FST_FIG_PCACHE_MISSES, "page-cache misses per request", false, WINDOWED),
	P(requests_bpf, contention_end, FST_FIG_LOCK_WAIT, "lock wait per request", false, WINDOWED),
	P(requests_bpf, contention_begin, FST_FIG_LOCK_WAIT, "lock wait per request", false, WINDOWED),
	P(requests_bpf, page_cache_ra_order, FST_FIG_READAHEAD, "readahead window sizes per request", false, WINDOWED),
};

/*
 * Request boundaries at the traced filesystems' entry points (requests.bpf.c): fentry/fexit, or kprobe/kretprobe,
 * in place of sys_enter/sys_exit, which tax every syscall of the system.  All of them or none: with any one
 * missing, a kind of request would need the syscall tracepoints, and then every syscall pays anyway.
 */
#define B(fn, kind_name) D(requests_bpf, fn, FST_FIG_REQ_BOUNDS, kind_name " request start and end")

static struct probe bound_probes[] = {
	B(erofs_file_read_iter, "read"),
	B(btrfs_file_read_iter, "read"),
	B(generic_file_read_iter, "read"),
	B(do_splice_direct, "read"),
	B(filemap_splice_read, "read"),
	B(generic_file_splice_read, "read"),
	B(erofs_readdir, "getdents"),
	B(squashfs_readdir, "getdents"),
	B(btrfs_real_readdir, "getdents"),
	B(vfs_statx, "stat"),
	B(vfs_fstat, "stat"),
	B(do_statx_fd, "stat"),
	B(do_sys_openat2, "open"),
	B(btrfs_file_write_iter, "write"),
	B(vfs_fsync_range, "sync"),
	B(sync_filesystem, "sync"),
	B(ksys_sync, "sync"),
};

/* per bound_probes entry: the kind it bounds, the traced filesystems that need it (1 << FST_FS_*; 0: every one),
 * and whether some kernels lack it (then it is needed only where the kernel has it) */
#define FS(f) (1u << FST_FS_##f)
static const struct {
	enum fst_req_kind kind;
	__u32 fs;
	bool some_kernels;
} bound_info[] = {
#define BI(k, f, some)                                   \
	{                                                \
		.kind = k, .fs = f, .some_kernels = some \
	}
	BI(FST_REQ_READ, FS(EROFS), false),
	BI(FST_REQ_READ, FS(BTRFS), false),
	/* squashfs's read_iter, and erofs's for compressed files (generic_ro_fops) */
	BI(FST_REQ_READ, FS(EROFS) | FS(SQUASHFS), false),
	BI(FST_REQ_READ, 0, false),
	BI(FST_REQ_READ, 0, true) /* 6.5+ */,
	BI(FST_REQ_READ, 0, true) /* before 6.5 */,
	BI(FST_REQ_GETDENTS, FS(EROFS), false),
	BI(FST_REQ_GETDENTS, FS(SQUASHFS), false),
	BI(FST_REQ_GETDENTS, FS(BTRFS), false),
	BI(FST_REQ_STAT, 0, false),
	BI(FST_REQ_STAT, 0, false),
	BI(FST_REQ_STAT, 0, true) /* 6.10+ */,
	BI(FST_REQ_OPEN, 0, false),
	BI(FST_REQ_WRITE, FS(BTRFS), false),
	BI(FST_REQ_SYNC, 0, false),
	BI(FST_REQ_SYNC, 0, false),
	BI(FST_REQ_SYNC, 0, false),
#undef BI
};
_Static_assert(N(bound_info) == N(bound_probes), "bound_info: one entry per bound_probes entry");

/* decompression: fentry/fexit, or kprobe/kretprobe; no tracepoint tier can time it exactly */
static struct probe erofs_probes[] = {
	D(erofs_bpf, z_erofs_lz4_decompress, FST_FIG_EROFS_LZ4, "erofs lz4 pcluster decompression time and sizes"),
	D(erofs_bpf, z_erofs_lzma_decompress, FST_FIG_EROFS_LZMA, "erofs lzma pcluster decompression time and sizes"),
	D(erofs_bpf, z_erofs_deflate_decompress, FST_FIG_EROFS_DEFLATE,
	  "erofs deflate pcluster decompression time and sizes"),
	D(erofs_bpf, z_erofs_zstd_decompress, FST_FIG_EROFS_ZSTD, "erofs zstd pcluster decompression time and sizes"),
	D(erofs_bpf, z_erofs_transform_plain, FST_FIG_EROFS_PLAIN, "erofs uncompressed-pcluster copy time and sizes"),
	P(erofs_bpf, erofs_map_blocks_exit, FST_FIG_EROFS_EXTENTS, "erofs extents mapped per request (pclusters needed)",
	  false, WINDOWED),
	/* the same figures from the tracepoints' older names (6.1; erofs_readpage: older than 6.1): one attached twin
	 * suffices */
	PR(erofs_bpf, z_erofs_map_blocks_iter_exit, FST_FIG_EROFS_EXTENTS,
	   "erofs extents mapped per request (pclusters needed)", false, WINDOWED),
	P(erofs_bpf, erofs_readahead, FST_FIG_EROFS_READAHEAD, "erofs readahead calls per request", false, WINDOWED),
	PR(erofs_bpf, erofs_readpages, FST_FIG_EROFS_READAHEAD, "erofs readahead calls per request", false, WINDOWED),
	P(erofs_bpf, erofs_read_folio, FST_FIG_EROFS_READ_FOLIO, "erofs single-folio reads per request", false, WINDOWED),
	PR(erofs_bpf, erofs_readpage, FST_FIG_EROFS_READ_FOLIO, "erofs single-folio reads per request", false, WINDOWED),
};

static struct probe squashfs_probes[] = {
	D(squashfs_bpf, squashfs_decompress, FST_FIG_SQUASHFS_DECOMPRESS, "squashfs block decompression time and sizes"),
	D(squashfs_bpf, squashfs_cache_get, FST_FIG_SQUASHFS_CACHE,
	  "squashfs metadata/fragment/data cache lookups and their time"),
	D(squashfs_bpf, squashfs_read_data, FST_FIG_SQUASHFS_CACHE_MISS,
	  "squashfs block reads: each block's place and length on the device (one under a lookup: a cache miss)"),
};

#define BTRFS_COMPRESS_WHAT "btrfs compression on write: time and sizes per chunk, and the thread that ran it"

static struct probe btrfs_probes[] = {
	D(btrfs_bpf, zstd_decompress_bio, FST_FIG_BTRFS_ZSTD, "btrfs zstd extent decompression time and sizes"),
	D(btrfs_bpf, lzo_decompress_bio, FST_FIG_BTRFS_LZO, "btrfs lzo extent decompression time and sizes"),
	D(btrfs_bpf, zlib_decompress_bio, FST_FIG_BTRFS_ZLIB, "btrfs zlib extent decompression time and sizes"),
	/* one name per kernel generation: one attached twin suffices */
	D(btrfs_bpf, btrfs_compress_folios, FST_FIG_BTRFS_COMPRESS, BTRFS_COMPRESS_WHAT),
	D(btrfs_bpf, btrfs_compress_pages, FST_FIG_BTRFS_COMPRESS, BTRFS_COMPRESS_WHAT),
};

const struct probe_group probe_groups[] = {
	{ block_probes, N(block_probes) },
	{ request_probes, N(request_probes) },
	{ bound_probes, N(bound_probes) },
	{ erofs_probes, N(erofs_probes) },
	{ squashfs_probes, N(squashfs_probes) },
	{ btrfs_probes, N(btrfs_probes) },
};
const int nr_probe_groups = N(probe_groups);

/* the tracer being loaded: its per-task state choice goes into every object's configuration */
static struct tracer *T;

/* off-CPU stacks walked at the switch in, threshold-sampled (bpf_get_task_stack takes sched_switch's next only
 * as a tp_btf argument: storage mode's tier), else at every switch out (--offcpu-sample-us 0: exact, and with
 * the scheduler's own frames, which a blocked task's stack walk leaves out) */
static bool offcpu_at_switch_in(void)
{
	return T->task_storage_on && !T->plain && opt.sample_hz > 0 && opt.offcpu_sample_us > 0;
}

const char *const work_fn_names[NR_WORK_FNS] = {
	[WF_LOOP_ROOTCG] = "loop_rootcg_workfn",
	[WF_LOOP] = "loop_workfn",
	[WF_EROFS_DECOMP] = "z_erofs_decompressqueue_work",
	[WF_BTRFS_ENDIO] = "simple_end_io_work",
	[WF_BTRFS_ENDIO_61] = "btrfs_end_bio_work",
	[WF_BTRFS_WORK_HELPER] = "btrfs_work_helper",
	/* the btrfs_work->func of write compression: async_cow_start on 6.1, compress_file_range since 6.5 */
	[WF_BTRFS_COMPRESS_61] = "async_cow_start",
	[WF_BTRFS_COMPRESS] = "compress_file_range",
};

/*
 * The multiplier that puts every traced device in a slot of its own in traced_devs (kernel_state.h fst_dev_slot): the
 * first of a fixed sequence of odd numbers that does, so that every object's frozen configuration has the same.
 * At most MAX_DEVS devices among 256 slots: a few tries at most.
 */
static __u32 dev_hash_mul(void)
{
	_Static_assert(MAX_DEVS <= FST_MAX_TRACED_DEVS, "dev_io holds every --dev");
	for (__u32 k = 0; k < 1000000; k++) {
		__u32 mul = 2654435761u + 2 * k, taken[FST_DEV_SLOTS] = { 0 };
		bool ok = true;
		for (int i = 0; i < opt.nr_devs && ok; i++) {
			__u32 dev = dev_arg_kdev(&opt.devs[i]), s = fst_dev_slot(dev, mul);
			ok = !taken[s] || taken[s] == dev; /* the same device given twice shares its slot */
			taken[s] = dev;
		}
		if (ok)
			return mul;
	}
	die("--dev: no slot layout found for the %d devices", opt.nr_devs);
}

/* the same frozen configuration for every object; computed once (BTF lookups, a BPF program run) */
static void fill_cfg(struct fst_cfg *out)
{
	static struct fst_cfg cached;
	static bool done;
	if (done) {
		*out = cached;
		out->task_storage = T->task_storage_on;
		out->offcpu_at_switch_in = offcpu_at_switch_in();
		return;
	}
	struct fst_cfg *c = &cached;
	unsigned long long *a = T->work_fn_addrs;
	/* the work functions, and getdents64's callback (the filesystem entry points tell its directory reads by it) */
	const char *names[NR_WORK_FNS + 1];
	unsigned long long addrs[NR_WORK_FNS + 1];
	memcpy(names, work_fn_names, sizeof(work_fn_names));
	names[NR_WORK_FNS] = "filldir64";
	T->ksyms_asked = ksym_addrs(names, addrs, NR_WORK_FNS + 1);
	memcpy(a, addrs, NR_WORK_FNS * sizeof(*a));
	c->filldir64 = addrs[NR_WORK_FNS];
	c->loop_rootcg_workfn = a[WF_LOOP_ROOTCG];
	c->loop_workfn = a[WF_LOOP];
	c->erofs_decomp_workfn = a[WF_EROFS_DECOMP];
	c->btrfs_endio_workfn = a[WF_BTRFS_ENDIO] ? a[WF_BTRFS_ENDIO] : a[WF_BTRFS_ENDIO_61];
	c->btrfs_work_helper = a[WF_BTRFS_WORK_HELPER];
	c->btrfs_compress_fn = a[WF_BTRFS_COMPRESS_61] ? a[WF_BTRFS_COMPRESS_61] : a[WF_BTRFS_COMPRESS];
	const char *compress_fn = func_param_index("btrfs_compress_folios", "total_out") >= 0 ?
				      "btrfs_compress_folios" :
				      "btrfs_compress_pages";
	c->btrfs_compress_owner_is_inode = func_param_index(compress_fn, "inode") >= 0;
	c->btrfs_compress_arg_owner = func_param_index(compress_fn, c->btrfs_compress_owner_is_inode ? "inode" : "mapping");
	c->btrfs_compress_arg_start = func_param_index(compress_fn, "start");
	c->btrfs_compress_arg_total_in = func_param_index(compress_fn, "total_in");
	c->btrfs_compress_arg_total_out = func_param_index(compress_fn, "total_out");
	/* a test load: bpf_task_pt_regs came after task storage (sample.bpf.c, the entry points' syscall numbers) */
	c->task_pt_regs = libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_task_pt_regs, NULL) == 1;
	/* sched_switch's prev_state (5 parameters with __data), and the block tracepoints' arguments, from their BTF */
	c->sched_switch_prev_state = tp_nr_args("sched_switch") >= 4;
	/* kernel_state.h FST_TPQ_* */
	const struct {
		const char *tp;
		__u8 bit;
	} tpq[] = { { "block_bio_queue", FST_TPQ_BIO_QUEUE },
		    { "block_split", FST_TPQ_SPLIT },
		    { "block_rq_requeue", FST_TPQ_RQ_REQUEUE },
		    { "block_rq_issue", FST_TPQ_RQ_ISSUE } };
	for (unsigned i = 0; i < N(tpq); i++)
		if (tp_arg0_is_struct(tpq[i].tp, "request_queue"))
			c->block_tp_queue_first |= tpq[i].bit;
	c->filter_cgroup_id = opt.cgroup ? cgroup_id(opt.cgroup) : 0;
	c->filter_pids = opt.cmd || opt.nr_pids;
	c->filter_comm = opt.comm != NULL;
	if (opt.comm)
		strncpy(c->comm, opt.comm, sizeof(c->comm) - 1);
	c->filter_sdev = opt.nr_sdevs > 0;
	_Static_assert(MAX_DEVS <= FST_CFG_SDEVS, "fst_cfg.sdevs holds every --sdev");
	for (int i = 0; i < opt.nr_sdevs; i++)
		c->sdevs[i] = sdev_kdev(i);
	c->nr_sdevs = opt.nr_sdevs;
	c->dev_hash_mul = dev_hash_mul();
	c->offcpu_stacks = opt.sample_hz > 0;
	c->requests = !opt.block_only;
	c->records_all = opt.records_all;
	c->records_none = opt.records_none;
	c->windowed = window_asked();
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
	out->task_storage = T->task_storage_on; /* decided per load attempt, after the cache was filled */
	out->offcpu_at_switch_in = offcpu_at_switch_in();
}

/*
 * A skeleton opened with the bytes of the build this kernel loads (tracer.plain): the full build's (type##__open),
 * or the plain build's through the same skeleton (the plain objects have the same programs and globals, and a
 * few maps more)
 */
#define OPEN_BUILD(type)                                                                                      \
	({                                                                                                    \
		struct type *o_ = T->plain ? calloc(1, sizeof(struct type)) : type##__open();                 \
		if (o_ && T->plain) {                                                                         \
			int e_ = type##__create_skeleton(o_);                                                 \
			if (!e_) {                                                                            \
				o_->skeleton->data = (void *)type##_plain__elf_bytes(&o_->skeleton->data_sz); \
				e_ = bpf_object__open_skeleton(o_->skeleton, NULL);                           \
			}                                                                                     \
			if (e_) {                                                                             \
				type##__destroy(o_);                                                          \
				o_ = NULL;                                                                    \
				errno = -e_;                                                                  \
			}                                                                                     \
		}                                                                                             \
		o_;                                                                                           \
	})

/* every later object shares the first object's maps of the same name */
static void reuse_maps(struct bpf_object *owner, struct bpf_object *obj)
{
	struct bpf_map *m;
	bpf_object__for_each_map (m, obj) {
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
		snprintf(T->task_state_why, sizeof(T->task_state_why), "pid hash: --no-tp-btf (raw_tp cannot pass a task to task storage)");
		return false;
	}
	if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) != 1) {
		snprintf(T->task_state_why, sizeof(T->task_state_why), "pid hash: the kernel has no task-local storage maps");
		return false;
	}
	for (unsigned i = 0; i < N(tps); i++) {
		if (!tp_btf_exists(tps[i])) {
			snprintf(T->task_state_why, sizeof(T->task_state_why), "pid hash: no tp_btf for %s", tps[i]);
			return false;
		}
	}
	snprintf(T->task_state_why, sizeof(T->task_state_why), "task-local storage");
	return true;
}

/* the object that owns the shared maps: the per-task state map becomes a pid hash when storage is off */
static void setup_task_state_map(struct bpf_object *obj)
{
	struct bpf_map *k = bpf_object__find_map_by_name(obj, "offcpu_kstacks");
	if (k && !offcpu_at_switch_in() && bpf_map__set_max_entries(k, 1))
		die("sizing offcpu_kstacks: %s", strerror(errno)); /* 8 MiB preallocated, unused without storage */
	struct bpf_program *expire = bpf_object__find_program_by_name(obj, "expire_stale");
	if (expire && T->plain) /* the plain build's flight tables are not walked (bpf/block.bpf.c) */
		bpf_program__set_autoload(expire, false);
	struct bpf_map *m = bpf_object__find_map_by_name(obj, "task_reqs");
	if (!m || T->task_storage_on)
		return;
	if (bpf_map__set_type(m, BPF_MAP_TYPE_HASH) || bpf_map__set_map_flags(m, 0) ||
	    bpf_map__set_max_entries(m, 65536))
		die("turning task_reqs into a hash: %s", strerror(errno));
}

/*
 * A probe only --budget uses (block_rq_done: a run's block figures are exact from the in-flight state already) is
 * not loaded without it: its verification would lengthen every run's start, and a refusal would fail its object.
 */
static void unload_budget_only(const void *skel, struct probe *probes, int n)
{
	for (int i = 0; i < n; i++)
		if (probes[i].budget_only && !window_asked())
			tiers_unload(skel, &probes[i], "not loaded: without --budget the issue hook's figures are exact");
}

/*
 * open+load a skeleton with the best tiers; if the kernel refuses tp_btf, fall back to raw_tp (with
 * attempts = 1, no fallback: skel is left NULL instead of dying)
 */
#define LOAD_SKEL_TRY(type, skel, probes, owner, attempts)                                                    \
	do {                                                                                                  \
		for (int attempt = 0; attempt < 2; attempt++) {                                               \
			skel = OPEN_BUILD(type);                                                              \
			if (!skel)                                                                            \
				die("opening " #type ": %s", strerror(errno));                                \
			fill_cfg((struct fst_cfg *)&skel->rodata->cfg);                                       \
			if (owner)                                                                            \
				reuse_maps(owner, skel->obj);                                                 \
			else                                                                                  \
				setup_task_state_map(skel->obj);                                              \
			tiers_select(skel, probes, N(probes), opt.no_btf_tp || attempt, opt.no_fentry);       \
			unload_budget_only(skel, probes, N(probes));                                          \
			if (!type##__load(skel))                                                              \
				break;                                                                        \
			int err_ = errno;                                                                     \
			type##__destroy(skel);                                                                \
			skel = NULL;                                                                          \
			if (attempt + 1 >= (attempts)) {                                                      \
				if ((attempts) > 1)                                                           \
					die("loading " #type ": %s", strerror(err_));                         \
				fprintf(stderr, "fstrace-collect: " #type " did not load with tp_btf (%s)\n", \
					strerror(err_));                                                      \
				break;                                                                        \
			}                                                                                     \
			fprintf(stderr, "fstrace-collect: " #type " did not load with tp_btf (%s); "          \
					"retrying with raw_tp\n",                                             \
				strerror(err_));                                                              \
		}                                                                                             \
	} while (0)
#define LOAD_SKEL(type, skel, probes, owner) LOAD_SKEL_TRY(type, skel, probes, owner, 2)

static bool any_tier(struct probe *probes, int n)
{
	for (int i = 0; i < n; i++)
		if (probes[i].tier != FST_TIER_NONE)
			return true;
	return false;
}

static void mark_unavailable(struct probe *probes, int n, const char *why)
{
	for (int i = 0; i < n; i++) {
		if (probes[i].tier == FST_TIER_NONE)
			continue;
		size_t l = strlen(probes[i].why);
		snprintf(probes[i].why + l, sizeof(probes[i].why) - l, "%s%s: %s", l ? "; " : "",
			 tier_name(probes[i].tier), why);
		probes[i].tier = FST_TIER_NONE;
		probes[i].prog = probes[i].exit_prog = NULL;
	}
}

/*
 * --records none (serve): a probe whose events are only per-request records (erofs's extents, readahead and
 * single-folio reads, squashfs's cache lookups and block reads: nothing of them is counted in the kernel) is not
 * loaded.  Attached, its program would return at once on every event, or write a record nobody reads, and even
 * an empty program's run costs (an erofs extent map is tens of thousands a second on a cold read, and a squashfs
 * read takes a cache lookup per block and per metadata block).
 */
static void unload_records_only(const void *skel, struct probe *probes, int n)
{
	if (!opt.records_none)
		return;
	for (int i = 0; i < n; i++) {
		enum fst_figure f = probes[i].figure;
		bool records_only = f == FST_FIG_EROFS_EXTENTS || f == FST_FIG_EROFS_READAHEAD ||
				    f == FST_FIG_EROFS_READ_FOLIO || f == FST_FIG_SQUASHFS_CACHE ||
				    f == FST_FIG_SQUASHFS_CACHE_MISS;
		if (records_only && probes[i].tier != FST_TIER_NONE)
			tiers_unload(skel, &probes[i], "not loaded: --records none (its events are per-request records)");
	}
}

/* open a later object, configured and sharing owner's maps (dies when it cannot be opened) */
#define OPEN_SHARED_SKEL(type, skel, owner)                            \
	do {                                                           \
		skel = OPEN_BUILD(type);                               \
		if (!skel)                                             \
			die("opening " #type ": %s", strerror(errno)); \
		fill_cfg((struct fst_cfg *)&skel->rodata->cfg);        \
		reuse_maps(owner, skel->obj);                          \
	} while (0)

/*
 * Optional probes of one filesystem: open, choose tiers, and load only if some
 * probe has a tier.  A load failure makes them unavailable (with the reason)
 * instead of ending the run.
 */
#define LOAD_OPTIONAL_SKEL(type, skel, probes, owner)                                            \
	do {                                                                                     \
		OPEN_SHARED_SKEL(type, skel, owner);                                             \
		tiers_select(skel, probes, N(probes), opt.no_btf_tp, opt.no_fentry);             \
		unload_records_only(skel, probes, N(probes));                                    \
		if (!any_tier(probes, N(probes)) || opt.block_only) {                            \
			if (opt.block_only)                                                      \
				mark_unavailable(probes, N(probes), "not loaded: --block-only"); \
			type##__destroy(skel);                                                   \
			skel = NULL;                                                             \
		} else if (type##__load(skel)) {                                                 \
			char why_[128];                                                          \
			snprintf(why_, sizeof(why_), "load failed: %s", strerror(errno));        \
			mark_unavailable(probes, N(probes), why_);                               \
			type##__destroy(skel);                                                   \
			skel = NULL;                                                             \
		}                                                                                \
	} while (0)

/*
 * An object with no probes of its own to choose tiers for (sampling, the task iterator): open, configured and
 * sharing the first object's maps; NULL with why_buf saying why when it does not load.
 */
#define LOAD_HELPER_SKEL(type, skel, why_buf, what)                                          \
	do {                                                                                 \
		OPEN_SHARED_SKEL(type, skel, T->blk->obj);                                   \
		if (type##__load(skel)) {                                                    \
			snprintf(why_buf, sizeof(why_buf), "%s: %s", what, strerror(errno)); \
			type##__destroy(skel);                                               \
			skel = NULL;                                                         \
		}                                                                            \
	} while (0)

/*
 * Whether requests can be bounded at the filesystems' entry points in this run: the traced filesystems are
 * named and each is one whose entry points bound_probes has (t->bounds_fs: their 1 << FST_FS_*).  Else false,
 * and t->bounds_why says why the syscall tracepoints bound them.
 */
static bool bounds_wanted(struct tracer *t)
{
	static const char *const fs_names[] = {
#define FS_NAME(c, v, n) [v] = n,
		FST_FILESYSTEMS(FS_NAME)
#undef FS_NAME
	};
	char *why = t->bounds_why;
	size_t len = sizeof(t->bounds_why);
	t->bounds_fs = 0;
	why[0] = 0;
	if (opt.syscall_bounds) {
		snprintf(why, len, "asked for (--syscall-boundaries)");
		return false;
	}
	struct fst_cfg cfg;
	fill_cfg(&cfg);
	if (!cfg.task_pt_regs) {
		snprintf(why, len, "no bpf_task_pt_regs helper (test load refused): the entry points cannot read the "
				   "syscall's number");
		return false;
	}
	if (!opt.nr_sdevs) {
		snprintf(why, len, "no filesystem named (--sdev): requests on every file need the syscall tracepoints");
		return false;
	}
	for (int i = 0; i < opt.nr_sdevs; i++) {
		char type[32], mnt[256];
		int fs = 0;
		if (!sdev_mount(sdev_kdev(i), type, sizeof(type), mnt, sizeof(mnt))) {
			snprintf(why, len, "--sdev %u:%u is not mounted", opt.sdevs[i][0], opt.sdevs[i][1]);
			return false;
		}
		for (int k = 1; k < N(fs_names); k++)
			if (fs_names[k] && !strcmp(fs_names[k], type))
				fs = k;
		if (!fs) {
			snprintf(why, len, "--sdev %u:%u is %s, whose entry points fstrace does not hook", opt.sdevs[i][0],
				 opt.sdevs[i][1], type);
			return false;
		}
		t->bounds_fs |= 1u << fs;
	}
	return true;
}

static bool bound_needed(struct tracer *t, int i)
{
	return !bound_info[i].fs || (t->bounds_fs & bound_info[i].fs);
}

/* a needed boundary probe without a tier (none chosen, or it did not attach), else NULL */
static struct probe *bound_missing(struct tracer *t)
{
	for (int i = 0; i < N(bound_probes); i++)
		if (bound_needed(t, i) && bound_probes[i].tier == FST_TIER_NONE &&
		    (!bound_info[i].some_kernels || kernel_has_func(bound_probes[i].name)))
			return &bound_probes[i];
	return NULL;
}

/* the boundary programs of requests.bpf.c: a tier for each needed one (fentry or kprobe, by test loads), or all of
 * them off with t->bounds_why saying why */
static void select_bounds(struct tracer *t, const struct requests_bpf *skel, bool on)
{
	char why[320];
	/* "fentry: ": as every function probe's reasons begin, naming the best tier not used */
	snprintf(why, sizeof(why), "fentry: not tried: the syscall tracepoints bound the requests (%s)", t->bounds_why);
	for (int i = 0; i < N(bound_probes); i++) {
		struct probe *p = &bound_probes[i];
		if (!on)
			tiers_unload(skel, p, why);
		else if (bound_needed(t, i))
			tiers_select(skel, p, 1, opt.no_btf_tp, opt.no_fentry);
		else
			tiers_unload(skel, p, "fentry: not tried: no traced filesystem reaches it");
	}
	struct probe *miss = on ? bound_missing(t) : NULL;
	if (!miss)
		return;
	/* one missing: none of them (see bound_probes); the others keep their own reasons where they had one */
	snprintf(t->bounds_why, sizeof(t->bounds_why), "%s: %.200s", miss->name, miss->why);
	snprintf(why, sizeof(why), "fentry: not used: %s has no tier here", miss->name);
	for (int i = 0; i < N(bound_probes); i++)
		tiers_unload(skel, &bound_probes[i], bound_probes[i].tier == FST_TIER_NONE ? NULL : why);
}

/*
 * requests.bpf.c, loaded with the best tiers: tp_btf, else raw_tp (not in storage mode, which needs tp_btf); with
 * the boundary programs where they are wanted, and without them if the object does not load with them.  NULL
 * when it does not load in storage mode; dies when it does not load at all.
 */
static struct requests_bpf *load_requests(struct tracer *t)
{
	bool bounds = bounds_wanted(t);
	int attempts = t->task_storage_on ? 1 : 2;
	for (int attempt = 0; attempt < attempts; attempt++) {
		for (int with_bounds = bounds; with_bounds >= 0; with_bounds--) {
			struct requests_bpf *skel = OPEN_BUILD(requests_bpf);
			if (!skel)
				die("opening requests_bpf: %s", strerror(errno));
			fill_cfg((struct fst_cfg *)&skel->rodata->cfg);
			reuse_maps(t->blk->obj, skel->obj);
			tiers_select(skel, request_probes, N(request_probes), opt.no_btf_tp || attempt, opt.no_fentry);
			select_bounds(t, skel, with_bounds);
			with_bounds = with_bounds && !t->bounds_why[0];
			if (!requests_bpf__load(skel))
				return skel;
			int err = errno;
			requests_bpf__destroy(skel);
			if (with_bounds) {
				snprintf(t->bounds_why, sizeof(t->bounds_why), "request tracing did not load with them: %s",
					 strerror(err));
				fprintf(stderr, "fstrace-collect: requests_bpf did not load with the filesystem entry points "
						"(%s); retrying without\n",
					strerror(err));
				continue;
			}
			if (attempt + 1 >= attempts) {
				if (attempts > 1)
					die("loading requests_bpf: %s", strerror(err));
				fprintf(stderr, "fstrace-collect: requests_bpf did not load with tp_btf (%s)\n", strerror(err));
				return NULL;
			}
			fprintf(stderr, "fstrace-collect: requests_bpf did not load with tp_btf (%s); retrying with raw_tp\n",
				strerror(err));
			break;
		}
		bounds = false;
	}
	return NULL;
}

const struct fst_cfg *tracer_cfg(const struct tracer *t)
{
	return &t->blk->rodata->cfg;
}

void tracer_load(struct tracer *t)
{
	struct bpf_object *none = NULL;
	T = t;
	snprintf(t->sample_why, sizeof(t->sample_why), "off (--sample-hz 0)");
	t->plain = bpf_build_plain(t->plain_why, sizeof(t->plain_why));
	t->task_storage_on = !opt.block_only && task_storage_usable();
	for (;;) {
		LOAD_SKEL(block_bpf, t->blk, block_probes, none);
		if (opt.block_only)
			break;
		t->reqs = load_requests(t);
		if (t->reqs)
			break;
		block_bpf__destroy(t->blk);
		t->task_storage_on = false;
		snprintf(t->task_state_why, sizeof(t->task_state_why), "pid hash: request tracing did not load with tp_btf");
	}
	if (opt.block_only) {
		for (int i = 0; i < N(request_probes); i++) {
			request_probes[i].tier = FST_TIER_NONE;
			snprintf(request_probes[i].why, sizeof(request_probes[i].why), "not loaded: --block-only");
		}
		for (int i = 0; i < N(bound_probes); i++)
			snprintf(bound_probes[i].why, sizeof(bound_probes[i].why), "fentry: not tried: --block-only");
		snprintf(t->bounds_why, sizeof(t->bounds_why), "--block-only: no requests");
	}

	LOAD_OPTIONAL_SKEL(erofs_bpf, t->ero, erofs_probes, t->blk->obj);
	LOAD_OPTIONAL_SKEL(squashfs_bpf, t->sqf, squashfs_probes, t->blk->obj);
	LOAD_OPTIONAL_SKEL(btrfs_bpf, t->btr, btrfs_probes, t->blk->obj);
	struct fst_cfg frozen;
	fill_cfg(&frozen);
	if (frozen.btrfs_compress_arg_owner < 0 || frozen.btrfs_compress_arg_start < 0 ||
	    frozen.btrfs_compress_arg_total_in < 0 || frozen.btrfs_compress_arg_total_out < 0) {
		for (int i = 0; i < N(btrfs_probes); i++)
			if (btrfs_probes[i].figure == FST_FIG_BTRFS_COMPRESS)
				mark_unavailable(&btrfs_probes[i], 1, "argument positions unknown: no BTF for it");
	}

	/* only windows weigh their counts by the traced threads' own calls (window.c io_step) */
	snprintf(t->tasks_why, sizeof(t->tasks_why), "not loaded: %s",
		 !window_asked() ? "no --budget windows" : "no request tracing (--block-only)");
	if (window_asked() && t->reqs)
		LOAD_HELPER_SKEL(tasks_bpf, t->tsk, t->tasks_why, "the task iterator did not load");
	if (opt.sample_hz > 0 && t->reqs) {
		LOAD_HELPER_SKEL(sample_bpf, t->smp, t->sample_why, "load failed");
	} else if (opt.sample_hz > 0) {
		snprintf(t->sample_why, sizeof(t->sample_why), "needs request tracing (not with --block-only)");
	}
}

void tracer_set_filters(struct tracer *t, pid_t child)
{
	__u32 mul = tracer_cfg(t)->dev_hash_mul;
	for (int i = 0; i < opt.nr_devs; i++) {
		struct dev_arg *d = &opt.devs[i];
		__u32 slot = fst_dev_slot(dev_arg_kdev(d), mul);
		/* dev_io entry i: the exposition and the header find device i's figures there */
		struct fst_traced_dev td = { .dev = dev_arg_kdev(d),
					     .cfg = { .unit_bytes = d->unit, .is_loop = d->is_loop, .io_slot = i } };
		if (bpf_map_update_elem(bpf_map__fd(t->blk->maps.traced_devs), &slot, &td, BPF_ANY))
			die("--dev %u:%u: adding it to the traced devices: %s", d->major, d->minor, strerror(errno));
	}
	for (int i = 0; i < opt.nr_sdevs; i++) {
		__u32 kdev = sdev_kdev(i);
		__u32 stat_kdev = FST_KDEV(opt.stat_devs[i][0], opt.stat_devs[i][1]);
		if (stat_kdev && stat_kdev != kdev &&
		    bpf_map_update_elem(bpf_map__fd(t->blk->maps.stat_devs), &stat_kdev, &kdev, BPF_ANY))
			die("--sdev %u:%u=%u:%u: adding its stat() device: %s", opt.sdevs[i][0], opt.sdevs[i][1],
			    opt.stat_devs[i][0], opt.stat_devs[i][1], strerror(errno));
	}
	int pids_fd = bpf_map__fd(t->blk->maps.traced_pids);
	for (int i = 0; i < opt.nr_pids; i++)
		add_pid_tree(pids_fd, opt.pids[i]);
	if (child > 0) {
		__u32 key = child;
		__u8 one = 1;
		if (bpf_map_update_elem(pids_fd, &key, &one, BPF_ANY))
			die("tracing the command's pid %u: %s", key, strerror(errno));
	}
}

/* every kind of request requests.bpf.c knows (records.h FST_REQ_KINDS) */
static __u32 all_kinds(void)
{
	__u32 kinds = 0;
#define KIND_BIT(c, v, n) kinds |= 1u << c;
	FST_REQ_KINDS(KIND_BIT)
#undef KIND_BIT
	return kinds;
}

/*
 * The request programs: the boundary programs first, and if every needed one attached, requests.bpf.c told that
 * they bound every kind of request before the rest attaches without sys_enter/sys_exit; else those detached and
 * the syscall tracepoints attached with the rest.  The boundary programs act only once told, so no request is
 * bounded by both.
 */
static int attach_requests(struct tracer *t, int (*attach)(struct probe *, int))
{
	t->fs_bound_kinds = 0;
	if (!t->bounds_why[0]) {
		attach(bound_probes, N(bound_probes)); /* optional: a failure leaves the probe without a tier */
		struct probe *miss = bound_missing(t);
		if (miss) {
			snprintf(t->bounds_why, sizeof(t->bounds_why), "%s: %.200s", miss->name, miss->why);
			tiers_detach(bound_probes, N(bound_probes));
			mark_unavailable(bound_probes, N(bound_probes), "detached: another one did not attach");
		} else {
			t->fs_bound_kinds = all_kinds();
		}
	}
	t->reqs->bss->fs_bound_kinds = t->fs_bound_kinds;
	for (int i = 0; i < N(request_probes) && t->fs_bound_kinds; i++) {
		struct probe *p = &request_probes[i];
		if (p->figure != FST_FIG_REQ_START && p->figure != FST_FIG_REQ_END)
			continue;
		p->tier = FST_TIER_NONE;
		p->prog = p->exit_prog = NULL;
		snprintf(p->why, sizeof(p->why), "not attached: the filesystems' entry points bound every request");
	}
	return attach(request_probes, N(request_probes));
}

void request_bound_tiers(const struct tracer *t, enum fst_req_kind kind, char *out, size_t len)
{
	out[0] = 0;
	if (!t->fs_bound_kinds) { /* the syscall tracepoints: sys_enter's tier (sys_exit has the same) */
		for (int i = 0; i < N(request_probes); i++)
			if (request_probes[i].figure == FST_FIG_REQ_START)
				snprintf(out, len, "%s", tier_name(request_probes[i].tier));
		return;
	}
	for (int t_ = FST_TIER_NONE + 1; t_ < FST_NR_TIERS; t_++) {
		bool used = false;
		for (int i = 0; i < N(bound_probes); i++)
			used |= bound_info[i].kind == kind && bound_probes[i].tier == (enum fst_tier)t_;
		if (used) {
			size_t l = strlen(out);
			snprintf(out + l, len - l, "%s%s", l ? "+" : "", tier_name(t_));
		}
	}
	if (!out[0]) /* no traced filesystem has such requests (writes on a read-only one) */
		snprintf(out, len, "none");
}

int tracer_attach(struct tracer *t)
{
	/* --empty-programs: the chosen programs stay loaded, unattached, and do-nothing twins take their hooks */
	int (*attach)(struct probe *, int) = opt.empty_programs ? tiers_attach_empty : tiers_attach;
	/* block_rq_done (--budget's, else not loaded) attached alone first, and block_rq_complete told whether it did
	 * before that attaches: every completion is then sized by exactly one of them */
	struct probe *done = &block_probes[0];
	int err = attach(done, 1);
	t->blk->bss->exact_io_on = !err && done->prog != NULL; /* tiers_attach takes the prog of one that failed */
	if (!err)
		err = attach(block_probes + 1, N(block_probes) - 1);
	if (!err && t->reqs)
		err = attach_requests(t, attach);
	if (!err && t->ero)
		err = attach(erofs_probes, N(erofs_probes));
	if (!err && t->sqf)
		err = attach(squashfs_probes, N(squashfs_probes));
	if (!err && t->btr)
		err = attach(btrfs_probes, N(btrfs_probes));
	if (!err && t->smp) {
		int serr = attach_sampling(t->smp, opt.sample_hz);
		long long max_hz = proc_number("/proc/sys/kernel/perf_event_max_sample_rate");
		if (serr == -EINVAL && max_hz >= 0 && opt.sample_hz > max_hz)
			/* the kernel lowers it by itself when its sampling interrupts run long (dmesg says so) */
			snprintf(t->sample_why, sizeof(t->sample_why),
				 "--sample-hz %d is above kernel.perf_event_max_sample_rate (%lld)", opt.sample_hz, max_hz);
		else if (serr)
			snprintf(t->sample_why, sizeof(t->sample_why), "perf_event_open/attach failed: %s", strerror(-serr));
		if (serr) {
			detach_sampling();
			sample_bpf__destroy(t->smp);
			t->smp = NULL;
		}
	}
	if (err)
		for (int g = 0; g < nr_probe_groups; g++)
			tiers_detach(probe_groups[g].probes, probe_groups[g].n);
	return err;
}

static void prog_stats(struct probe *p)
{
	struct prog_run r;
	p->misses = p->runs = p->run_ns = 0;
	if (!p->prog)
		return;
	int err = prog_run_stats(bpf_program__fd(p->prog), &r);
	if (err) {
		fprintf(stderr, "fstrace-collect: cannot read statistics of %s: %s\n", p->name, strerror(-err));
		return;
	}
	p->misses = r.misses;
	p->runs = r.runs;
	p->run_ns = r.run_ns;
}

void tracer_detach(void)
{
	for (int g = 0; g < nr_probe_groups; g++) {
		for (int i = 0; i < probe_groups[g].n; i++)
			prog_stats(&probe_groups[g].probes[i]);
		tiers_detach(probe_groups[g].probes, probe_groups[g].n);
	}
	detach_sampling();
}

void tracer_destroy(struct tracer *t, struct ring_buffer *rb)
{
	ring_buffer__free(rb);
	if (t->reqs)
		requests_bpf__destroy(t->reqs);
	sample_bpf__destroy(t->smp);
	tasks_bpf__destroy(t->tsk);
	erofs_bpf__destroy(t->ero);
	squashfs_bpf__destroy(t->sqf);
	btrfs_bpf__destroy(t->btr);
	block_bpf__destroy(t->blk);
}

/*
 * The stacks' kernel and BPF symbols, read while every probe is still attached: a detached fentry's trampoline
 * leaves kallsyms after an RCU-tasks grace period, so read after detaching it can be gone and its frames
 * take the name of the program before it.
 */
void tracer_read_ksyms(struct tracer *t)
{
	load_ksyms();
	struct bpf_object *objs[] = { t->blk->obj, t->reqs ? t->reqs->obj : NULL, t->ero ? t->ero->obj : NULL,
				      t->sqf ? t->sqf->obj : NULL, t->btr ? t->btr->obj : NULL,
				      t->smp ? t->smp->obj : NULL };
	add_bpf_ksyms(objs, N(objs));
}
