// SPDX-License-Identifier: GPL-2.0
/* The sampling tier and stack folding (stacks.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "aggregates.h"
#include "env.h"
#include "ksyms.h"
#include "names.h"
#include "progstats.h"
#include "jbuf.h"
#include "stacks.h"
#include "ustack.h"
#include "block.skel.h"
#include "sample.skel.h"

#define MAX_PERF_CPUS 1024
static struct bpf_link *perf_links[MAX_PERF_CPUS];
static int perf_fds[MAX_PERF_CPUS]; /* each link's event (the link owns it): for sampling_enable */
static int nr_perf_links;

int attach_sampling(struct sample_bpf *smp, int hz)
{
	int ncpu = libbpf_num_possible_cpus();
	for (int cpu = 0; cpu < ncpu && cpu < MAX_PERF_CPUS; cpu++) {
		struct perf_event_attr attr = {
			.type = PERF_TYPE_SOFTWARE,
			.config = PERF_COUNT_SW_CPU_CLOCK,
			.size = sizeof(attr),
			.freq = 1,
			.sample_freq = hz,
		};
		int fd = syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
		if (fd < 0) {
			if (errno == ENODEV) /* offline CPU */
				continue;
			return -errno;
		}
		struct bpf_link *l = bpf_program__attach_perf_event(smp->progs.sample_request_stack, fd);
		if (!l) {
			int err = -errno;
			close(fd);
			return err;
		}
		perf_fds[nr_perf_links] = fd;
		perf_links[nr_perf_links++] = l;
	}
	return nr_perf_links ? 0 : -ENODEV;
}

void sampling_enable(bool on)
{
	for (int i = 0; i < nr_perf_links; i++)
		ioctl(perf_fds[i], on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0);
}

void detach_sampling(void)
{
	for (int i = 0; i < nr_perf_links; i++)
		bpf_link__destroy(perf_links[i]);
	nr_perf_links = 0;
}

/* one kernel stack, root first, "a;b;c"; false if it was not recorded */
static bool fold_stack(int stacks_fd, __s32 id, struct jbuf *out)
{
	__u64 ips[FST_MAX_STACK_DEPTH] = {};
	if (id < 0 || bpf_map_lookup_elem(stacks_fd, &id, ips))
		return false;
	int depth = 0;
	while (depth < FST_MAX_STACK_DEPTH && ips[depth])
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
 * after the frames prefix() adds (if given), appended to rows: the values of
 * rows whose stack was not recorded go to *lost instead, the sum of all to *total.
 * With tids, the thread id at tid_off of each row's key goes to tids, in the
 * rows' order (so the rows keep the form older readers take).
 */
static void json_stack_rows(json *rows, int map_fd, size_t key_size, int stacks_fd, int stack_off,
			    int reason_off, stack_prefix_fn prefix, void *ctx, unsigned long long *total,
			    unsigned long long lost[FST_MAX_OFFCPU_REASONS], json *tids, int tid_off)
{
	__u8 key[64], next[64];
	void *prev = NULL;
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
		json *row = jpush(rows, jarr());
		jpush(row, jstr(st.s));
		if (reason_off >= 0)
			jpush(row, ju64(reason));
		jpush(row, ju64(v));
		if (tids) {
			__u32 tid;
			memcpy(&tid, key + tid_off, sizeof(tid));
			jpush(tids, ju64(tid));
		}
		free(st.s);
	}
}

json *json_offcpu(struct block_bpf *blk)
{
	unsigned long long total = 0, lost_ns = 0, lost[FST_MAX_OFFCPU_REASONS] = {};
	const struct fst_cfg *c = &blk->rodata->cfg;
	bool sampled = c->offcpu_at_switch_in && c->offcpu_sample_ns;
	/* method and threshold first: the analysis says what the stacks' split of the off-CPU time is */
	json *o = jobj();
	jset(o, "walked_at", jstr(c->offcpu_at_switch_in ? "switch_in" : "switch_out"));
	jset(o, "sampling", jstr(sampled ? "threshold" : "every_interval"));
	jset(o, "threshold_ns", ju64(sampled ? c->offcpu_sample_ns : 0));
	json_stack_rows(jset(o, "folded", jarr()), bpf_map__fd(blk->maps.offcpu), sizeof(struct fst_offcpu_key),
			bpf_map__fd(c->offcpu_at_switch_in ? blk->maps.offcpu_kstacks : blk->maps.stacks),
			offsetof(struct fst_offcpu_key, stack_id), offsetof(struct fst_offcpu_key, reason), NULL, NULL,
			&total, lost, NULL, 0);
	/* a stack the kernel could not store (its bucket held another stack): time known, stack not */
	json *by_reason = jset(o, "stack_lost_ns_by_reason", jobj());
	for (int r = 0; r < FST_MAX_OFFCPU_REASONS; r++) {
		lost_ns += lost[r];
		if (lost[r]) {
			char k[16];
			snprintf(k, sizeof(k), "%d", r);
			jset(by_reason, k, ju64(lost[r]));
		}
	}
	jset(o, "stack_lost_ns", ju64(lost_ns));
	/* credited to stacks, then not kept: a request found on no traced filesystem at its end */
	json *dropped = jset(o, "dropped_ns_by_reason", jobj());
	for (__u32 r = 0; r < FST_MAX_OFFCPU_REASONS; r++) {
		__u64 sum = percpu_u64(bpf_map__fd(blk->maps.offcpu_dropped), r);
		if (sum) {
			char k[16];
			snprintf(k, sizeof(k), "%u", r);
			jset(dropped, k, ju64(sum));
		}
	}
	return o;
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

json *json_sampling(struct sample_bpf *smp, int hz, const char *why_off)
{
	json *o = jobj();
	jset(o, "hz", ji64(smp ? hz : 0));
	if (!smp) {
		jset(o, "why_off", jstr(why_off));
		return o;
	}
	unsigned long long total = 0, lost[FST_MAX_OFFCPU_REASONS] = {};
	struct sample_prefix sp = { .ustacks_fd = bpf_map__fd(smp->maps.user_stacks) };
	json *rows = jset(o, "folded", jarr());
	/* each row's thread: per-thread profiles (a speedscope export) split the samples by it */
	json_stack_rows(rows, bpf_map__fd(smp->maps.samples), sizeof(struct fst_sample_key),
			bpf_map__fd(smp->maps.sample_stacks), offsetof(struct fst_sample_key, stack_id), -1,
			sample_prefix, &sp, &total, lost, jset(o, "tids", jarr()), offsetof(struct fst_sample_key, pid));
	/* the sampling program's own cost (kernel.bpf_stats_enabled=1), as the probes' */
	struct prog_run run;
	prog_run_stats(bpf_program__fd(smp->progs.sample_request_stack), &run); /* all zero when unreadable */
	jset(o, "samples", ju64(total));
	jset(o, "stacks_lost", ju64(lost[0]));
	jset(o, "with_user_stack", ju64(sp.with_user_stack));
	jset(o, "event", jstr("cpu-clock"));
	jset(o, "runs", ju64(run.runs));
	jset(o, "run_ns", ju64(run.run_ns));
	return o;
}

/* stack ids block requests were queued from (at most as many as the stacks map holds): folded at the end */
#define MAX_IO_STACKS FST_MAX_STACKS
static __s32 io_stack_ids[MAX_IO_STACKS];
static bool io_stack_used[MAX_IO_STACKS];

void note_io_stack(__s32 id)
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

json *json_io_stacks(struct block_bpf *blk)
{
	int kfd = bpf_map__fd(blk->maps.stacks);
	json *o = jobj();
	for (int k = 0; k < MAX_IO_STACKS; k++) {
		if (!io_stack_used[k])
			continue;
		struct jbuf st = {};
		if (fold_stack(kfd, io_stack_ids[k], &st)) {
			char id[16];
			snprintf(id, sizeof(id), "%d", io_stack_ids[k]);
			jset(o, id, jstr(st.s));
		}
		free(st.s);
	}
	return o;
}
