// SPDX-License-Identifier: GPL-2.0
/* The results header (header.h), built with json-c (jsonw.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <bpf/libbpf.h>
#include "aggregates.h"
#include "env.h"
#include "header.h"
#include "window.h"
#include "ksyms.h"
#include "names.h"
#include "jbuf.h"
#include "results.h"
#include "stacks.h"

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

/* a device's block_rq_done counts around its two diskstats snapshots ({"counted_by", "start": {"read_requests":
 * [before, after], "read_bytes": [...], ... per op}, "end": ...}), or null where they were not all read */
static json *json_diskstat_brackets(const struct diskstat_bracket *b0, const struct diskstat_bracket *b1)
{
	if (!b0->ok || !b1->ok)
		return NULL;
	json *o = jobj();
	jset(o, "counted_by", jstr("block_rq_done"));
	const struct diskstat_bracket *at[] = { b0, b1 };
	for (int e = 0; e < 2; e++) {
		json *edge = jset(o, e ? "end" : "start", jobj());
		for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
			char key[64];
			__u64 n[2] = { at[e]->at[0].requests[sub], at[e]->at[1].requests[sub] };
			__u64 bytes[2] = { at[e]->at[0].bytes[sub], at[e]->at[1].bytes[sub] };
			snprintf(key, sizeof(key), "%s_requests", op_name(sub));
			jset(edge, key, ju64_array(n, 2));
			snprintf(key, sizeof(key), "%s_bytes", op_name(sub));
			jset(edge, key, ju64_array(bytes, 2));
		}
	}
	return o;
}

static void json_probes(json *a, const struct probe *probes, int n)
{
	for (int i = 0; i < n; i++) {
		const struct probe *p = &probes[i];
		json *o = jpush(a, jobj());
		jset(o, "probe", jstr(p->name));
		jset(o, "hook", jstr(p->hook ? p->hook : p->name)); /* two probes share block_rq_complete */
		jset(o, "tier", jstr(tier_name(p->tier)));
		jset(o, "figure", jstr(figure_name(p->figure)));
		jset(o, "measures", jstr(p->measures));
		jset(o, "why", jstr(p->why));
		jset(o, "missed_runs", ju64(p->misses));
		jset(o, "runs", ju64(p->runs));
		jset(o, "run_ns", ju64(p->run_ns));
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
		jset(o, "level", jstr(dev_level_name(d->level)));
		jset(o, "diskstats_start", json_diskstat(&ri->ds_start[i]));
		jset(o, "diskstats_end", json_diskstat(&ri->ds_end[i]));
		jset(o, "exact_around_diskstats",
		     ri->ex_start && ri->ex_end ? json_diskstat_brackets(&ri->ex_start[i], &ri->ex_end[i]) : NULL);
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

/* the collector itself: its version, its libbpf and how it was linked, and its own cost */
static json *json_collector(const struct run_info *ri)
{
	json *o = jobj();
	char libbpf[32];
	snprintf(libbpf, sizeof(libbpf), "%u.%u", libbpf_major_version(), libbpf_minor_version());
	jset(o, "version", jstr(FSTRACE_VERSION));
	jset(o, "libbpf", jstr(libbpf));
	jset(o, "static", jbool(FSTRACE_STATIC));
	/* its own cost beside its programs' (probes' run_ns): reading and filing the records, the windows, the
	 * expositions, over the traced interval (time.start_ns to end_ns) */
	jset(o, "cpu_ns", ju64(ri->cpu_end_ns - ri->cpu_start_ns));
	return o;
}

static json *json_kernel(const struct utsname *u)
{
	json *o = jobj();
	jset(o, "release", jstr(u->release));
	jset(o, "version", jstr(u->version));
	jset(o, "machine", jstr(u->machine));
	return o;
}

static json *json_time(const struct run_info *ri)
{
	json *o = jobj();
	jset(o, "start_ns", ju64(ri->t_start));
	jset(o, "end_ns", ju64(ri->t_end));
	jset(o, "start_realtime_ns", ju64(ri->t_start_real));
	jset(o, "load_attach_ns", ju64(ri->t_attached - ri->t_load0));
	return o;
}

static json *json_workload(const struct run_info *ri)
{
	json *o = jobj();
	jset(o, "start_ns", ju64(ri->child > 0 ? ri->t_child_go : ri->t_start));
	jset(o, "end_ns", ju64(ri->t_child_exit));
	/* the collector's own CPU time while the command ran (to the end of tracing): what it took beside the
	 * workload, --budget's calibration before it left out */
	jset(o, "collector_cpu_ns", ri->child > 0 ? ju64(ri->cpu_end_ns - ri->cpu_go_ns) : NULL);
	jset(o, "exit_status", ji64(ri->child > 0 && WIFEXITED(ri->wstatus) ? WEXITSTATUS(ri->wstatus) : -1));
	jset(o, "signal", ji64(ri->child > 0 && WIFSIGNALED(ri->wstatus) ? WTERMSIG(ri->wstatus) : 0));
	jset(o, "interrupted", jbool(ri->interrupted));
	return o;
}

/* how the work functions the programs tell apart were found */
static json *json_work_functions(const struct tracer *t)
{
	json *o = jobj();
	jset(o, "found_by", jstr(t->ksyms_asked ? "bpf_kallsyms_lookup_name" : "/proc/kallsyms"));
	/* which of them this kernel has, not where: a kernel address would give away its KASLR offset, and results
	 * files are made to be copied to other machines */
	json *found = jset(o, "found", jobj());
	for (int i = 0; i < NR_WORK_FNS; i++)
		jset(found, work_fn_names[i], jbool(t->work_fn_addrs[i] != 0));
	return o;
}

static json *json_io_stack_sampling(void)
{
	json *o = jobj();
	jset(o, "mode", jstr(!opt.sample_hz ? "off" : (opt.io_stacks_all ? "all" : "sampled")));
	jset(o, "every_ns", ju64(FST_IO_STACK_EVERY_NS));
	jset(o, "unsampled_id", ji64(FST_STACK_UNSAMPLED));
	/* --budget: taken only while the request hooks are attached, like the other samples (user/window.c) */
	jset(o, "windows_only", jbool(window_io_stacks()));
	return o;
}

/* the in-flight entries expired (block.bpf.c expire_stale) */
static json *json_expired_in_flight(const struct tracer *t, const struct run_info *ri)
{
	json *o = jobj();
	jset(o, "bios", ju64(ri->expired.bios));
	jset(o, "requests", ju64(ri->expired.requests));
	jset(o, "work_items", ju64(ri->expired.work_items));
	jset(o, "after_ns", ju64(FST_STALE_NS));
	/* a walk of one slice of every table per run: an entry goes between after_ns and after_ns + pass_ns */
	jset(o, "pass_ns", ju64(FST_EXPIRE_SLICES * FST_EXPIRE_EVERY_NS));
	/* from buckets with no free slot only (block.bpf.c expire_stale); older collectors expired every entry
	 * that old, in flight or not */
	jset(o, "full_buckets_only", jbool(true));
	jset(o, "run_failures", ju64(ri->expired.run_failures));
	if (t->plain) /* nothing walked: the counts are unavailable, not 0 */
		jset(o, "unavailable", jstr("the plain BPF build's in-flight tables are hash maps, not walked"));
	return o;
}

json *header_build(struct tracer *t, const struct run_info *ri, json *meta)
{
	const struct fst_cfg *cfg = tracer_cfg(t);
	struct utsname u;
	uname(&u);
	json *h = jobj(), *o;
	jset(h, "format", jstr("fstrace-results"));
	jset(h, "format_version", ji64(FST_RESULTS_FORMAT));
	jset(h, "records_version", ji64(FST_RECORDS_VERSION));
	jset(h, "collector", json_collector(ri));
	jset(h, "kernel", json_kernel(&u));
	jset(h, "host", jstr(u.nodename));
	jset(h, "tracer_frame_prefix", jstr(TRACER_FRAME_PREFIX));
	/* records.h's encodings, as numbers: kernel dev_t = major << minor_bits | minor; a block request's op */
	o = jset(h, "dev_encoding", jobj());
	jset(o, "minor_bits", ji64(FST_MINORBITS));
	o = jset(h, "io_op", jobj());
	jset(o, "cmd_flags_mask", ji64(FST_OP_MASK));
	jset(h, "clock", jstr("CLOCK_MONOTONIC ns (bpf_ktime_get_ns)"));
	jset(h, "time", json_time(ri));
	o = jset(h, "probes", jarr());
	for (int g = 0; g < nr_probe_groups; g++)
		json_probes(o, probe_groups[g].probes, probe_groups[g].n);
	jset(h, "loop_charging", jbool(cfg->loop_rootcg_workfn != 0));
	jset(h, "filter", json_filter(ri->child));
	jset(h, "workload", json_workload(ri));
	jset(h, "devices", json_devices(ri));
	jset(h, "drops", aggregates_drops(t->blk));
	jset(h, "losses", aggregates_losses(t->blk));
	if (!opt.block_only)
		jset(h, "tracer_sites", aggregates_tracer_sites(t->blk));
	/* path-based stat calls carry the file's device and inode (req_file.bpf.h note_statbuf): placed like reads */
	jset(h, "stat_calls_placed", jbool(true));
	o = jset(h, "work_kinds_from_completion", jarr());
#define FROM_COMPLETION_JSON(c) jpush(o, ju64(c));
	FST_WORK_KINDS_FROM_COMPLETION(FROM_COMPLETION_JSON)
#undef FROM_COMPLETION_JSON
	o = jset(h, "delayacct", jobj());
	jset(o, "was", ji64(ri->delayacct_was));
	jset(o, "enabled_for_tracing", jbool(delayacct_held && ri->delayacct_was == 0));
	jset(h, "request_bounds", json_request_bounds(t));
	o = jset(h, "bpf_build", jobj()); /* which build of the BPF objects loaded (tiers.h bpf_build_plain) */
	jset(o, "build", jstr(t->plain ? "plain" : "full"));
	jset(o, "why", jstr(t->plain_why));
	o = jset(h, "task_state", jobj());
	jset(o, "store", jstr(opt.block_only ? "none" : (t->task_storage_on ? "task_storage" : "pid_hash")));
	jset(o, "why", jstr(opt.block_only ? "--block-only: no requests" : t->task_state_why));
	jset(h, "work_functions", json_work_functions(t));
	o = jset(h, "request_records", jobj());
	jset(o, "mode", jstr(opt.records_all ? "all" : (opt.records_none ? "none" : "slow")));
	jset(o, "record_over_ns", ju64((__u64)(opt.record_over_us * 1000.0)));
	/* block requests only in the histograms (--no-io-records, serve's): no io record to estimate from */
	jset(o, "io_records", jbool(!opt.no_io_records));
	jset(h, "io_stack_sampling", json_io_stack_sampling());
	o = jset(h, "reader", jobj());
	jset(o, "wakeup_bytes", ju64(FST_RINGBUF_BYTES / 4));
	jset(o, "ringbuf_bytes", ju64(FST_RINGBUF_BYTES));
	jset(o, "poll_ms", ji64(ri->poll_ms));
	jset(o, "poll_ms_sampled", ri->poll_ms_sampled ? ji64(ri->poll_ms_sampled) : NULL);
	jset(h, "expired_in_flight", json_expired_in_flight(t, ri));
	jset(h, "sampling", json_sampling(t->smp, opt.sample_hz, t->sample_why));
	/* --budget: when the request hooks were attached, and what the analysis weights by */
	jset(h, "request_windows", window_header(ri->t_start, ri->t_end));
	if (cfg->offcpu_stacks) {
		jset(h, "offcpu", json_offcpu(t->blk));
		jset(h, "io_stacks", json_io_stacks(t->blk));
	}
	jset(h, "kernel_aggregates", aggregates_kernel(t->blk, t->reqs));
	jset(h, "config", meta);
	return h;
}
