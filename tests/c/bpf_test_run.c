// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel side's handlers run by the kernel on forged inputs (BPF_PROG_TEST_RUN), without attaching them: the
 * real objects, loaded through the collector's skeletons with only the program under test, and their maps read
 * back.  Only program types the kernel can test-run (net/bpf/test_run.c): BPF_PROG_TYPE_SYSCALL (expire_stale)
 * and raw tracepoints (ctx_in: the tracepoint's u64 arguments; the program runs in this process, so the current
 * task is this one).  tp_btf, perf_event and iterator programs have no test run.  Root (tests/test_bpf_test_run.py,
 * bpf lane); built by `make $(OUT)/bpf-test-run`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cmocka.h>
#include "records.h"
#include "kernel_state.h"
#include "block.skel.h"
#include "requests.skel.h"

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return level == LIBBPF_WARN ? vfprintf(stderr, fmt, ap) : 0;
}

/* every program of obj but keep left out of the load */
static void load_only(struct bpf_object *obj, const char *keep, const char *keep2)
{
	struct bpf_program *p;
	bpf_object__for_each_program (p, obj) {
		const char *n = bpf_program__name(p);
		bpf_program__set_autoload(p, !strcmp(n, keep) || (keep2 && !strcmp(n, keep2)));
	}
}

static int test_run(const struct bpf_program *prog, void *ctx, size_t ctx_size)
{
	LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = ctx, .ctx_size_in = ctx_size);
	int err = bpf_prog_test_run_opts(bpf_program__fd(prog), &o);
	assert_int_equal(err, 0);
	return (int)o.retval;
}

/* ---- block.bpf.c expire_stale (BPF_PROG_TYPE_SYSCALL) ---- */

/* a slot and a bucket of rq_starts as flight.bpf.h FST_FLIGHT_STORE lays them out */
struct rq_slot {
	__u64 key;
	struct fst_rq_start v;
};
struct rq_bucket {
	struct rq_slot s[FST_FLIGHT_WAYS];
};

static __u64 monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts); /* bpf_ktime_get_ns's clock */
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/*
 * A full bucket with one entry older than FST_STALE_NS loses that entry and keeps its fresh ones; a bucket with
 * a free slot keeps even its stale entry (age alone ends none: only a full bucket needs the room).
 */
static void expire_stale_frees_only_a_full_buckets_stale_entry(void **state)
{
	__u64 now = monotonic_ns();
	if (now < FST_STALE_NS + 2000000000ull)
		skip(); /* a machine up for less than the stale age has no time that old */
	struct block_bpf *skel = block_bpf__open();
	assert_non_null(skel);
	load_only(skel->obj, "expire_stale", NULL);
	assert_int_equal(block_bpf__load(skel), 0);

	__u64 stale = now - FST_STALE_NS - 1000000000ull, fresh = now;
	struct rq_bucket full = {}, partial = {};
	for (int i = 0; i < FST_FLIGHT_WAYS; i++) {
		full.s[i].key = 0x1000 + i;
		full.s[i].v.ts_issue = i == 1 ? stale : fresh;
		full.s[i].v.sector = 100 + i;
	}
	partial.s[0].key = 0x2000;
	partial.s[0].v.ts_issue = stale;
	/* buckets 0 and 1: both in the first slice, the one expire_stale's first run walks */
	__u32 b_full = 0, b_partial = 1;
	int fd = bpf_map__fd(skel->maps.rq_starts);
	assert_int_equal(bpf_map_update_elem(fd, &b_full, &full, BPF_ANY), 0);
	assert_int_equal(bpf_map_update_elem(fd, &b_partial, &partial, BPF_ANY), 0);

	test_run(skel->progs.expire_stale, NULL, 0);

	struct rq_bucket got;
	assert_int_equal(bpf_map_lookup_elem(fd, &b_full, &got), 0);
	for (int i = 0; i < FST_FLIGHT_WAYS; i++) {
		if (i == 1) {
			assert_int_equal(got.s[i].key, 0); /* freed */
			assert_int_equal(got.s[i].v.ts_issue, 0);
			assert_int_equal(got.s[i].v.sector, 0);
		} else {
			assert_int_equal(got.s[i].key, 0x1000 + i);
			assert_int_equal(got.s[i].v.sector, 100 + i);
		}
	}
	assert_int_equal(bpf_map_lookup_elem(fd, &b_partial, &got), 0);
	assert_int_equal(got.s[0].key, 0x2000);
	assert_int_equal(skel->bss->expired_requests, 1);
	assert_int_equal(skel->bss->expired_bios, 0);
	block_bpf__destroy(skel);
}

/* ---- requests.bpf.c sys_enter_raw / sys_exit_raw (raw tracepoints) ---- */

/*
 * The requests object as the collector loads it on a kernel without task-local storage (user/probes.c
 * setup_task_state_map: task_reqs a pid-keyed hash), with only the two syscall programs, and cfg as set_cfg
 * leaves it.
 */
static struct requests_bpf *load_syscall_bounds(void (*set_cfg)(struct fst_cfg *c))
{
	struct requests_bpf *skel = requests_bpf__open();
	assert_non_null(skel);
	load_only(skel->obj, "sys_enter_raw", "sys_exit_raw");
	assert_int_equal(bpf_map__set_type(skel->maps.task_reqs, BPF_MAP_TYPE_HASH), 0);
	assert_int_equal(bpf_map__set_map_flags(skel->maps.task_reqs, 0), 0);
	assert_int_equal(bpf_map__set_max_entries(skel->maps.task_reqs, 1024), 0);
	struct fst_cfg *c = (struct fst_cfg *)&skel->rodata->cfg;
	c->requests = 1;		   /* as the collector sets it when it loads requests.bpf.c */
	c->record_over_ns = 1000000000ull; /* a forged request is a page-cache hit: counted, not recorded */
	if (set_cfg)
		set_cfg(c);
	assert_int_equal(requests_bpf__load(skel), 0);
	return skel;
}

/* one read(2) of this thread, as the syscall tracepoints see it: no registers (every argument reads 0, so its
 * file is descriptor 0's), returning ret */
static void forged_read(struct requests_bpf *skel, long ret)
{
	__u64 enter[2] = { 0, SYS_read }, exit_[2] = { 0, (__u64)ret };
	test_run(skel->progs.sys_enter_raw, enter, sizeof(enter));
	test_run(skel->progs.sys_exit_raw, exit_, sizeof(exit_));
}

/* what the requests counted in the kernel add up to: the number of (superblock, kind) keys given, the one key
 * when there is one, and its entry's count and bytes summed over CPUs */
struct counted {
	int keys;
	struct fst_req_agg_key key;
	__u64 count, bytes;
};

static struct counted counted(struct requests_bpf *skel)
{
	struct counted out = {};
	int keys_fd = bpf_map__fd(skel->maps.agg_keys);
	struct fst_req_agg_key k, *prev = NULL;
	__u32 entry = 0;
	while (!bpf_map_get_next_key(keys_fd, prev, &k)) {
		out.key = k;
		assert_int_equal(bpf_map_lookup_elem(keys_fd, &k, &entry), 0);
		out.keys++;
		prev = &out.key;
	}
	if (out.keys != 1)
		return out;
	int ncpu = libbpf_num_possible_cpus();
	struct fst_req_agg *per_cpu = calloc(ncpu, sizeof(*per_cpu));
	assert_non_null(per_cpu);
	assert_int_equal(bpf_map_lookup_elem(bpf_map__fd(skel->maps.req_agg), &entry, per_cpu), 0);
	for (int i = 0; i < ncpu; i++) {
		out.count += per_cpu[i].count;
		out.bytes += per_cpu[i].bytes;
	}
	free(per_cpu);
	return out;
}

static struct stat stdin_file; /* what descriptor 0 is during these tests: this program's own file */

static int stdin_is_this_program(void **state)
{
	int fd = open("/proc/self/exe", O_RDONLY);
	if (fd < 0 || dup2(fd, 0) < 0 || fstat(0, &stdin_file))
		return -1;
	close(fd);
	return 0;
}

/* a read on a file with no filter on: one request counted, of its file's superblock, kind read, the bytes the
 * syscall returned */
static void a_read_is_counted_on_its_files_superblock(void **state)
{
	struct requests_bpf *skel = load_syscall_bounds(NULL);
	forged_read(skel, 4321);
	struct counted c = counted(skel);
	assert_int_equal(c.keys, 1);
	assert_int_equal(c.key.kind, FST_REQ_READ);
	assert_int_equal(c.key.sdev, FST_KDEV(major(stdin_file.st_dev), minor(stdin_file.st_dev)));
	assert_int_equal(c.count, 1);
	assert_int_equal(c.bytes, 4321);
	forged_read(skel, 10);
	c = counted(skel);
	assert_true(c.keys == 1 && c.count == 2 && c.bytes == 4331);
	requests_bpf__destroy(skel);
}

static void filter_other_comm(struct fst_cfg *c)
{
	c->filter_comm = 1;
	strcpy(c->comm, "no-such-task");
}

static void filter_other_superblock(struct fst_cfg *c)
{
	c->filter_sdev = 1;
	c->sdevs[0] = FST_KDEV(major(stdin_file.st_dev), minor(stdin_file.st_dev)) + 1;
	c->nr_sdevs = 1;
}

static void filter_this_superblock(struct fst_cfg *c)
{
	c->filter_sdev = 1;
	c->sdevs[0] = FST_KDEV(major(stdin_file.st_dev), minor(stdin_file.st_dev));
	c->nr_sdevs = 1;
}

/* a thread the task filters do not trace, or a file on a filesystem not traced: nothing counted */
static void a_read_the_filters_leave_out_counts_nothing(void **state)
{
	void (*filters[])(struct fst_cfg *) = { filter_other_comm, filter_other_superblock };
	for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
		struct requests_bpf *skel = load_syscall_bounds(filters[i]);
		forged_read(skel, 4321);
		assert_int_equal(counted(skel).keys, 0);
		requests_bpf__destroy(skel);
	}
	/* and the superblock filter passes its own superblock's read */
	struct requests_bpf *skel = load_syscall_bounds(filter_this_superblock);
	forged_read(skel, 7);
	struct counted c = counted(skel);
	assert_true(c.keys == 1 && c.count == 1 && c.bytes == 7);
	requests_bpf__destroy(skel);
}

/* a syscall of no request kind begins nothing: its exit counts nothing */
static void a_syscall_of_no_request_kind_counts_nothing(void **state)
{
	struct requests_bpf *skel = load_syscall_bounds(NULL);
	__u64 enter[2] = { 0, SYS_getppid }, exit_[2] = { 0, 1 };
	test_run(skel->progs.sys_enter_raw, enter, sizeof(enter));
	test_run(skel->progs.sys_exit_raw, exit_, sizeof(exit_));
	assert_int_equal(counted(skel).keys, 0);
	requests_bpf__destroy(skel);
}

int main(void)
{
	libbpf_set_print(quiet);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(expire_stale_frees_only_a_full_buckets_stale_entry),
		cmocka_unit_test(a_read_is_counted_on_its_files_superblock),
		cmocka_unit_test(a_read_the_filters_leave_out_counts_nothing),
		cmocka_unit_test(a_syscall_of_no_request_kind_counts_nothing),
	};
	return cmocka_run_group_tests_name("bpf test runs", tests, stdin_is_this_program, NULL);
}
