// SPDX-License-Identifier: GPL-2.0
/* The results header (header.h), built with json-c (jsonw.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "collect.h"
#include "expose.h"
#include "header.h"
#include "window.h"
#include "ksyms.h"
#include "results.h"
#include "stacks.h"
#include "block.skel.h"
#include "tasks.skel.h"
#include "erofs.skel.h"
#include "squashfs.skel.h"
#include "btrfs.skel.h"
#include "sample.skel.h"

json *header_meta(const char *path)
{
	if (!path)
		return jobj();
	FILE *f = fopen(path, "r");
	if (!f)
		die("reading %s: %s", path, strerror(errno));
	struct jbuf b = {};
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		jb_add(&b, "%.*s", (int)n, buf);
	fclose(f);
	if (!b.s)
		return jobj();
	enum json_tokener_error err = json_tokener_success;
	json *meta = json_tokener_parse_verbose(b.s, &err);
	if (!meta || !json_object_is_type(meta, json_type_object))
		die("--meta %s: not a JSON object (%s)", path, meta ? "another JSON value" : json_tokener_error_desc(err));
	free(b.s);
	return meta;
}

static json *json_diskstat(const struct diskstat *s)
{
	if (!s->found)
		return NULL;
	static const char *names[] = { "reads", "reads_merged", "sectors_read", "ms_reading", "writes",
				       "writes_merged", "sectors_written", "ms_writing", "in_flight",
				       "ms_io", "ms_weighted" };
	json *o = jobj();
	for (int i = 0; i < N(names); i++)
		jset(o, names[i], ju64(s->v[i]));
	return o;
}

static void json_probes(json *a, const struct probe *probes, int n)
{
	for (int i = 0; i < n; i++) {
		const struct probe *p = &probes[i];
		json *o = jpush(a, jobj());
		jset(o, "probe", jstr(p->name));
		jset(o, "tier", jstr(tier_name(p->tier)));
		jset(o, "figure", jstr(figure_name(p->figure)));
		jset(o, "measures", jstr(p->measures));
		jset(o, "why", jstr(p->why));
		jset(o, "missed_runs", ju64(p->misses));
		jset(o, "runs", ju64(p->runs));
		jset(o, "run_ns", ju64(p->run_ns));
	}
}

/* the tracer part's sampled timing per site (records.h FST_TRACER_SITES), summed over CPUs */
static json *json_tracer_sites(struct block_bpf *blk)
{
	static const char *names[FST_NR_TRACER_SITES] = {
#define SITE_NAME(c, val, n) [val] = n,
		FST_TRACER_SITES(SITE_NAME)
#undef SITE_NAME
	};
	json *o = jobj();
	jset(o, "time_every", ju64(FST_TRACER_TIME_EVERY));
	json *sites = jset(o, "sites", jobj());
	for (__u32 k = 0; k < FST_NR_TRACER_SITES; k++) {
		struct fst_tracer_site sum; /* its counters summed (mean_ns and rng too, which mean nothing summed) */
		if (percpu_sum_value(bpf_map__fd(blk->maps.tracer_sites), &k, &sum, sizeof(sum)) || !sum.runs)
			continue;
		json *s = jset(sites, names[k], jobj());
		jset(s, "runs", ju64(sum.runs));
		jset(s, "timed", ju64(sum.timed));
		jset(s, "timed_ns", ju64(sum.timed_ns));
		jset(s, "timed_sq_ns", ju64(sum.timed_sq_ns));
		jset(s, "charged_ns", ju64(sum.charged_ns));
	}
	return o;
}

/*
 * "requests_counted": the requests tasks.bpf.c counted instead of recording, per (kind, superblock dev),
 * summed over CPUs; parts by name (records.h FST_PARTS), histograms as log2 slots of microseconds.
 */
static json *json_requests_counted(struct tasks_bpf *tsk)
{
	json *a = jarr();
	if (!tsk)
		return a;
	static const char *part_names[FST_NR_PARTS] = {
#define PART_NAME(c, v, field, ...) [v] = #field,
		FST_PARTS(PART_NAME)
#undef PART_NAME
	};
	struct fst_req_agg sum;
	struct fst_req_agg_key key;
	struct req_agg_iter it;
	req_agg_start(&it, bpf_map__fd(tsk->maps.req_agg), bpf_map__fd(tsk->maps.agg_keys));
	while (req_agg_next(&it, &key, &sum)) {
		json *o = jpush(a, jobj());
		jset(o, "kind", ju64(key.kind));
		jset(o, "sdev", ju64(key.sdev));
		jset(o, "count", ju64(sum.count));
		jset(o, "bytes", ju64(sum.bytes));
		jset(o, "wall_ns", ju64(sum.wall_ns));
		jset(o, "wall_hist", ju64_array(sum.wall_hist, FST_HIST_SLOTS));
		jset(o, "wall_ns_loglin", ju64_array(sum.wall_ns_loglin, FST_LAT_SLOTS));
		json *parts = jset(o, "part_ns", jobj());
		for (int p = 0; p < FST_NR_PARTS; p++)
			jset(parts, part_names[p], ju64(sum.part_ns[p]));
		json *hists = jset(o, "part_hist", jobj());
		for (int p = 0; p < FST_NR_PARTS; p++)
			jset(hists, part_names[p], ju64_array(sum.part_hist[p], FST_HIST_SLOTS));
	}
	return a;
}

static void json_hist_row(json *a, __u32 metric, __u32 dev, __u32 sub, const __u64 *slots)
{
	json *o = jpush(a, jobj());
	jset(o, "metric", ju64(metric));
	jset(o, "dev", ju64(dev));
	jset(o, "sub", ju64(sub));
	jset(o, "slots", ju64_array(slots, FST_HIST_SLOTS));
}

/* "histograms" and "alignment" of kernel_aggregates */
static void json_aggregates(json *agg, struct block_bpf *blk)
{
	int hfd = bpf_map__fd(blk->maps.hists);
	struct fst_hist_key key, next;
	struct fst_hist h;
	json *hists = jset(agg, "histograms", jarr());
	void *prev = NULL;
	while (!bpf_map_get_next_key(hfd, prev, &next)) {
		key = next;
		prev = &key;
		if (!bpf_map_lookup_elem(hfd, &key, &h))
			json_hist_row(hists, key.metric, key.dev, key.sub, h.slots);
	}
	/* the block request histograms: device i's are in dev_io entry i, a row for each (metric, op) seen */
	static struct fst_dev_io io[MAX_DEVS];
	for (int i = 0; i < opt.nr_devs; i++) {
		__u32 slot = i;
		if (bpf_map_lookup_elem(bpf_map__fd(blk->maps.dev_io), &slot, &io[i]))
			memset(&io[i], 0, sizeof(io[i]));
		for (int k = 0; k < DEV_IO_METRICS; k++)
			for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
				const __u64 *slots = dev_io_hist(&io[i], dev_io_metrics[k], sub);
				bool any = false;
				for (int s = 0; s < FST_HIST_SLOTS; s++)
					any |= slots[s] != 0;
				if (any)
					json_hist_row(hists, dev_io_metrics[k], dev_arg_kdev(&opt.devs[i]), sub, slots);
			}
	}
	json *align = jset(agg, "alignment", jarr());
	for (int i = 0; i < opt.nr_devs; i++) {
		const struct fst_align *a = &io[i].align;
		if (!a->nr)
			continue;
		json *o = jpush(align, jobj());
		jset(o, "dev", ju64(dev_arg_kdev(&opt.devs[i])));
		jset(o, "nr", ju64(a->nr));
		jset(o, "start_4k", ju64(a->start_4k));
		jset(o, "end_4k", ju64(a->end_4k));
		jset(o, "start_unit", ju64(a->start_unit));
		jset(o, "end_unit", ju64(a->end_unit));
		jset(o, "cross_unit", ju64(a->cross_unit));
	}
}

static json *json_filter(pid_t child)
{
	json *f = jobj();
	jset(f, "comm", jstr_or_null(opt.comm));
	json *sdevs = jset(f, "sdevs", jarr());
	for (int i = 0; i < opt.nr_sdevs; i++)
		jpush(sdevs, ju64(sdev_kdev(i)));
	/* the device stat() reports for a filesystem's files, where it is not its superblock's */
	json *stat_devs = jset(f, "stat_devs", jobj());
	for (int i = 0; i < opt.nr_sdevs; i++) {
		char k[16];
		if (!opt.stat_devs[i][0] && !opt.stat_devs[i][1])
			continue;
		snprintf(k, sizeof(k), "%u", FST_KDEV(opt.stat_devs[i][0], opt.stat_devs[i][1]));
		jset(stat_devs, k, ju64(sdev_kdev(i)));
	}
	jset(f, "all_tasks", jbool(!opt.cmd && !opt.nr_pids && !opt.cgroup && !opt.comm));
	jset(f, "cgroup", jstr_or_null(opt.cgroup));
	json *pids = jset(f, "pids", jarr());
	for (int i = 0; i < opt.nr_pids; i++)
		jpush(pids, ji64(opt.pids[i]));
	json *cmd = NULL;
	if (opt.cmd) {
		cmd = jarr();
		for (int i = 0; opt.cmd[i]; i++)
			jpush(cmd, jstr(opt.cmd[i]));
	}
	jset(f, "command", cmd);
	jset(f, "root_pid", ji64(child > 0 ? child : 0));
	return f;
}

static json *json_devices(const struct run_info *ri)
{
	json *a = jarr();
	for (int i = 0; i < opt.nr_devs; i++) {
		struct dev_arg *d = &opt.devs[i];
		json *o = jpush(a, jobj());
		jset(o, "major", ju64(d->major));
		jset(o, "minor", ju64(d->minor));
		jset(o, "dev", ju64(dev_arg_kdev(d)));
		jset(o, "unit_bytes", ju64(d->unit ? d->unit : 4096));
		jset(o, "is_loop", jbool(d->is_loop));
		jset(o, "diskstats_start", json_diskstat(&ri->ds_start[i]));
		jset(o, "diskstats_end", json_diskstat(&ri->ds_end[i]));
	}
	return a;
}

/*
 * "request_bounds": what bounded the requests, per kind (records.h FST_REQ_KINDS names): the tiers of the
 * traced filesystems' entry points, or of the syscall tracepoints, with why the entry points did not.
 */
static json *json_request_bounds(const struct tracer *t)
{
	json *o = jobj();
	jset(o, "at", jstr(opt.block_only ? "none" : t->fs_bound_kinds ? "filesystem entry points" :
									 "syscall tracepoints"));
	jset(o, "why", jstr(opt.block_only || t->fs_bound_kinds ? "" : t->bounds_why));
	json *kinds = jset(o, "kinds", jobj());
	char tiers[64];
#define KIND_TIERS(c, v, n)                                      \
	if (!opt.block_only) {                                   \
		request_bound_tiers(t, c, tiers, sizeof(tiers)); \
		jset(kinds, n, jstr(tiers));                     \
	}
	FST_REQ_KINDS(KIND_TIERS)
#undef KIND_TIERS
	return o;
}

json *header_build(struct tracer *t, const struct run_info *ri, json *meta)
{
	struct block_bpf *blk = t->blk;
	struct utsname u;
	uname(&u);
	json *h = jobj(), *o;
	jset(h, "format", jstr("fstrace-results"));
	jset(h, "format_version", ji64(FST_RESULTS_FORMAT));
	jset(h, "records_version", ji64(FST_RECORDS_VERSION));
	o = jset(h, "collector", jobj());
	char libbpf[32];
	snprintf(libbpf, sizeof(libbpf), "%u.%u", libbpf_major_version(), libbpf_minor_version());
	jset(o, "version", jstr(FSTRACE_VERSION));
	jset(o, "libbpf", jstr(libbpf));
	jset(o, "static", jbool(FSTRACE_STATIC));
	o = jset(h, "kernel", jobj());
	jset(o, "release", jstr(u.release));
	jset(o, "version", jstr(u.version));
	jset(o, "machine", jstr(u.machine));
	jset(h, "host", jstr(u.nodename));
	jset(h, "tracer_frame_prefix", jstr(TRACER_FRAME_PREFIX));
	/* records.h's encodings, as numbers: kernel dev_t = major << minor_bits | minor; a block request's op */
	o = jset(h, "dev_encoding", jobj());
	jset(o, "minor_bits", ji64(FST_MINORBITS));
	o = jset(h, "io_op", jobj());
	jset(o, "cmd_flags_mask", ji64(FST_OP_MASK));
	jset(h, "clock", jstr("CLOCK_MONOTONIC ns (bpf_ktime_get_ns)"));
	o = jset(h, "time", jobj());
	jset(o, "start_ns", ju64(ri->t_start));
	jset(o, "end_ns", ju64(ri->t_end));
	jset(o, "start_realtime_ns", ju64(ri->t_start_real));
	jset(o, "load_attach_ns", ju64(ri->t_attached - ri->t_load0));
	o = jset(h, "probes", jarr());
	for (int g = 0; g < nr_probe_groups; g++)
		json_probes(o, probe_groups[g].probes, probe_groups[g].n);
	jset(h, "loop_charging", jbool(blk->rodata->cfg.loop_rootcg_workfn != 0));
	jset(h, "filter", json_filter(ri->child));
	o = jset(h, "workload", jobj());
	jset(o, "start_ns", ju64(ri->t_start));
	jset(o, "end_ns", ju64(ri->t_child_exit));
	jset(o, "exit_status", ji64(ri->child > 0 && WIFEXITED(ri->wstatus) ? WEXITSTATUS(ri->wstatus) : -1));
	jset(o, "signal", ji64(ri->child > 0 && WIFSIGNALED(ri->wstatus) ? WTERMSIG(ri->wstatus) : 0));
	jset(o, "interrupted", jbool(ri->interrupted));
	jset(h, "devices", json_devices(ri));
	o = jset(h, "drops", jobj());
	int drops_fd = bpf_map__fd(blk->maps.drops);
#define DROPS_JSON(c, v, n) jset(o, n, ju64(percpu_u64(drops_fd, c)));
	FST_REC_TYPES(DROPS_JSON)
#undef DROPS_JSON
	o = jset(h, "losses", jobj());
	int losses_fd = bpf_map__fd(blk->maps.losses);
#define LOSSES_JSON(c, v, n) jset(o, n, ju64(percpu_u64(losses_fd, c)));
	FST_LOSSES(LOSSES_JSON)
#undef LOSSES_JSON
	if (!opt.block_only)
		jset(h, "tracer_sites", json_tracer_sites(blk));
	/* path-based stat calls carry the file's device and inode (tasks.bpf.c note_statbuf): placed like reads */
	jset(h, "stat_calls_placed", jbool(true));
	o = jset(h, "work_kinds_from_completion", jarr());
#define FROM_COMPLETION_JSON(c) jpush(o, ju64(c));
	FST_WORK_KINDS_FROM_COMPLETION(FROM_COMPLETION_JSON)
#undef FROM_COMPLETION_JSON
	o = jset(h, "delayacct", jobj());
	jset(o, "was", ji64(ri->delayacct_was));
	jset(o, "enabled_for_tracing", jbool(delayacct_held && ri->delayacct_was == 0));
	jset(h, "request_bounds", json_request_bounds(t));
	o = jset(h, "task_state", jobj());
	jset(o, "store", jstr(opt.block_only ? "none" : (t->task_storage_on ? "task_storage" : "pid_hash")));
	jset(o, "why", jstr(opt.block_only ? "--block-only: no requests" : t->task_state_why));
	o = jset(h, "work_functions", jobj()); /* how the work functions the programs tell apart were found */
	jset(o, "found_by", jstr(t->ksyms_asked ? "bpf_kallsyms_lookup_name" : "/proc/kallsyms"));
	/* which of them this kernel has, not where: a kernel address would give away its KASLR offset, and results
	 * files are made to be copied to other machines */
	json *found = jset(o, "found", jobj());
	for (int i = 0; i < NR_WORK_FNS; i++)
		jset(found, work_fn_names[i], jbool(t->work_fn_addrs[i] != 0));
	o = jset(h, "request_records", jobj());
	jset(o, "mode", jstr(opt.records_all ? "all" : (opt.records_none ? "none" : "slow")));
	jset(o, "record_over_ns", ju64((__u64)(opt.record_over_us * 1000.0)));
	o = jset(h, "io_stack_sampling", jobj());
	jset(o, "mode", jstr(!opt.sample_hz ? "off" : (opt.io_stacks_all ? "all" : "sampled")));
	jset(o, "every_ns", ju64(FST_IO_STACK_EVERY_NS));
	jset(o, "unsampled_id", ji64(FST_STACK_UNSAMPLED));
	o = jset(h, "reader", jobj());
	jset(o, "wakeup_bytes", ju64(FST_RINGBUF_BYTES / 4));
	jset(o, "ringbuf_bytes", ju64(FST_RINGBUF_BYTES));
	jset(o, "poll_ms", ji64(ri->poll_ms));
	o = jset(h, "expired_in_flight", jobj());
	jset(o, "bios", ju64(ri->expired.bios));
	jset(o, "requests", ju64(ri->expired.requests));
	jset(o, "work_items", ju64(ri->expired.work_items));
	jset(o, "after_ns", ju64(FST_STALE_NS));
	/* from buckets with no free slot only (block.bpf.c expire_stale); older collectors expired every entry
	 * that old, in flight or not */
	jset(o, "full_buckets_only", jbool(true));
	jset(o, "run_failures", ju64(ri->expired.run_failures));
	jset(h, "sampling", json_sampling(t->smp, opt.sample_hz, t->sample_why));
	/* --budget: when the request hooks were attached, and what the analysis weights by */
	jset(h, "request_windows", window_header(ri->t_start, ri->t_end));
	if (blk->rodata->cfg.offcpu_stacks) {
		jset(h, "offcpu", json_offcpu(blk));
		jset(h, "io_stacks", json_io_stacks(blk));
	}
	o = jset(h, "kernel_aggregates", jobj());
	json_aggregates(o, blk);
	jset(o, "requests_counted", json_requests_counted(t->tsk));
	jset(h, "config", meta);
	return h;
}
