// SPDX-License-Identifier: GPL-2.0
/* The in-kernel aggregates read from their maps (aggregates.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "aggregates.h"
#include "env.h"
#include "names.h"
#include "block.skel.h"
#include "requests.skel.h"

int percpu_sum_value(int fd, const void *key, void *sum, size_t size)
{
	static __u64 *per_cpu; /* grown to the largest value read, kept: no allocation per scrape */
	static size_t have;
	int ncpu = libbpf_num_possible_cpus();
	if (have < size) {
		free(per_cpu);
		per_cpu = calloc(ncpu, size);
		if (!per_cpu)
			abort();
		have = size;
	}
	if (bpf_map_lookup_elem(fd, key, per_cpu))
		return -errno;
	__u64 *dst = sum;
	size_t words = size / sizeof(__u64);
	memset(sum, 0, size);
	for (int c = 0; c < ncpu; c++)
		for (size_t i = 0; i < words; i++) /* the kernel rounds each CPU's value up to 8 bytes */
			dst[i] += per_cpu[c * words + i];
	return 0;
}

void req_agg_start(struct req_agg_iter *it, int fd, int keys_fd)
{
	memset(it, 0, sizeof(*it));
	it->fd = fd;
	struct fst_req_agg_key key, next;
	__u32 n;
	void *prev = NULL;
	while (fd >= 0 && !bpf_map_get_next_key(keys_fd, prev, &next)) {
		key = next;
		prev = &key;
		if (!bpf_map_lookup_elem(keys_fd, &key, &n) && n < FST_REQ_AGG_MAX) {
			it->key_of[n] = key;
			it->given[n] = true;
		}
	}
}

bool req_agg_next(struct req_agg_iter *it, struct fst_req_agg_key *key, struct fst_req_agg *sum)
{
	for (; it->fd >= 0 && it->pos < FST_REQ_AGG_MAX; it->pos++) {
		if (!it->given[it->pos] || percpu_sum_value(it->fd, &it->pos, sum, sizeof(*sum)) || !sum->count)
			continue;
		*key = it->key_of[it->pos++];
		return true;
	}
	return false;
}

__u64 percpu_u64(int fd, __u32 idx)
{
	__u64 sum = 0;
	return percpu_sum_value(fd, &idx, &sum, sizeof(sum)) ? 0 : sum;
}

const __u32 dev_io_metrics[DEV_IO_METRICS] = { FST_H_IO_BYTES, FST_H_IO_Q2C_US, FST_H_IO_D2C_US };

const __u64 *dev_io_hist(const struct fst_dev_io *io, __u32 metric, __u32 sub)
{
	if (sub >= FST_IO_SUBS)
		return NULL;
	return metric == FST_H_IO_BYTES ? io->bytes[sub] : metric == FST_H_IO_Q2C_US ? io->q2c_us[sub] :
						       metric == FST_H_IO_D2C_US     ? io->d2c_us[sub] :
										       NULL;
}

void dev_io_read(int fd, __u32 slot, struct fst_dev_io *io)
{
	if (bpf_map_lookup_elem(fd, &slot, io))
		memset(io, 0, sizeof(*io));
}

const char *const dev_lat_source_names[] = {
	[LAT_ISSUE_HOOK] = "issue_hook",
	[LAT_START_TIME_NS] = "start_time_ns",
	[LAT_IO_START_TIME_NS] = "io_start_time_ns",
};

/* set by window.c where the per-request block hooks are windowed */
static bool issue_hook_sampled;

void dev_lat_windowed(bool on) { issue_hook_sampled = on; }

const char *dev_lat_basis(enum dev_lat_source s)
{
	return s == LAT_ISSUE_HOOK && issue_hook_sampled ? "windows_sample" : "exact";
}

const char *dev_count_basis(const struct dev_sources *src)
{
	return src->exact_path ? "exact" : dev_lat_basis(LAT_ISSUE_HOOK);
}

__u64 hist_count(const __u64 *slots)
{
	__u64 c = 0;
	for (int s = 0; s < FST_HIST_SLOTS; s++)
		c += slots[s];
	return c;
}

__u64 dev_io_requests(const struct fst_dev_io *io, __u32 sub) { return sub < FST_IO_SUBS ? hist_count(io->bytes[sub]) : 0; }

int dev_done_fd(struct block_bpf *blk) { return blk->bss->exact_io_on ? bpf_map__fd(blk->maps.dev_done) : -1; }

bool dev_done_read(int done_fd, __u32 slot, struct dev_done_counts *c)
{
	static struct fst_dev_done done; /* large: not on the stack */
	if (done_fd < 0 || percpu_sum_value(done_fd, &slot, &done, sizeof(done)))
		return false;
	for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
		c->requests[sub] = dev_io_requests(&done.io, sub);
		c->bytes[sub] = done.io.sums[sub].bytes;
	}
	return true;
}

__s64 dev_done_requests(int done_fd, __u32 slot, __u32 sub)
{
	struct dev_done_counts c;
	return sub < FST_IO_SUBS && dev_done_read(done_fd, slot, &c) ? (__s64)c.requests[sub] : -1;
}

void dev_figures_read(int io_fd, int done_fd, __u32 slot, struct fst_dev_io *io, struct dev_sources *src)
{
	static struct fst_dev_done done; /* large: not on the stack */
	struct dev_sources none;
	if (!src)
		src = &none;
	memset(src, 0, sizeof(*src));
	dev_io_read(io_fd, slot, io);
	if (done_fd < 0 || percpu_sum_value(done_fd, &slot, &done, sizeof(done))) {
		for (__u32 sub = 0; sub < FST_IO_SUBS; sub++)
			src->requests[sub] = dev_io_requests(io, sub);
		return;
	}
	src->exact_path = true;
	/* the issue hook's latencies stay where the requests did not all carry the block layer's timestamps: a
	 * histogram of some requests only is not the device's */
	for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
		__u64 n = dev_io_requests(&done.io, sub);
		src->requests[sub] = n;
		src->start_kept[sub] = hist_count(done.io.q2c_us[sub]);
		src->io_start_kept[sub] = hist_count(done.io.d2c_us[sub]);
		src->q2c[sub] = n && src->start_kept[sub] == n ? LAT_START_TIME_NS : LAT_ISSUE_HOOK;
		src->d2c[sub] = n && src->io_start_kept[sub] == n ? LAT_IO_START_TIME_NS : LAT_ISSUE_HOOK;
		if (src->q2c[sub] == LAT_ISSUE_HOOK) {
			memcpy(done.io.q2c_us[sub], io->q2c_us[sub], sizeof(io->q2c_us[sub]));
			done.io.sums[sub].q2c_ns = io->sums[sub].q2c_ns;
		}
		if (src->d2c[sub] == LAT_ISSUE_HOOK) {
			memcpy(done.io.d2c_us[sub], io->d2c_us[sub], sizeof(io->d2c_us[sub]));
			done.io.sums[sub].d2c_ns = io->sums[sub].d2c_ns;
		}
	}
	*io = done.io;
}

bool hist_any(const __u64 *slots)
{
	for (int s = 0; s < FST_HIST_SLOTS; s++)
		if (slots[s])
			return true;
	return false;
}

json *aggregates_drops(struct block_bpf *blk)
{
	json *o = jobj();
	int fd = bpf_map__fd(blk->maps.drops);
#define DROPS_JSON(c, v, n) jset(o, n, ju64(percpu_u64(fd, c)));
	FST_REC_TYPES(DROPS_JSON)
#undef DROPS_JSON
	return o;
}

json *aggregates_losses(struct block_bpf *blk)
{
	json *o = jobj();
	int fd = bpf_map__fd(blk->maps.losses);
#define LOSSES_JSON(c, v, n) jset(o, n, ju64(percpu_u64(fd, c)));
	FST_LOSSES(LOSSES_JSON)
#undef LOSSES_JSON
	return o;
}

json *aggregates_tracer_sites(struct block_bpf *blk)
{
	json *o = jobj();
	jset(o, "time_every", ju64(FST_TRACER_TIME_EVERY));
	json *sites = jset(o, "sites", jobj());
	for (__u32 k = 0; k < FST_NR_TRACER_SITES; k++) {
		struct fst_tracer_site sum; /* its counters summed (mean_ns and rng too, which mean nothing summed) */
		if (percpu_sum_value(bpf_map__fd(blk->maps.tracer_sites), &k, &sum, sizeof(sum)) || !sum.runs)
			continue;
		json *s = jset(sites, tracer_site_name(k), jobj());
		jset(s, "runs", ju64(sum.runs));
		jset(s, "timed", ju64(sum.timed));
		jset(s, "timed_ns", ju64(sum.timed_ns));
		jset(s, "timed_sq_ns", ju64(sum.timed_sq_ns));
		jset(s, "charged_ns", ju64(sum.charged_ns));
	}
	return o;
}

/*
 * "requests_counted": the requests requests.bpf.c counted instead of recording, per (kind, superblock dev),
 * summed over CPUs; parts by name (records.h FST_PARTS), histograms as log2 slots of microseconds.
 */
static json *requests_counted(struct requests_bpf *reqs)
{
	json *a = jarr();
	if (!reqs)
		return a;
	struct fst_req_agg sum;
	struct fst_req_agg_key key;
	struct req_agg_iter it;
	req_agg_start(&it, bpf_map__fd(reqs->maps.req_agg), bpf_map__fd(reqs->maps.agg_keys));
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
			jset(parts, part_field_name(p), ju64(sum.part_ns[p]));
		json *hists = jset(o, "part_hist", jobj());
		for (int p = 0; p < FST_NR_PARTS; p++)
			jset(hists, part_field_name(p), ju64_array(sum.part_hist[p], FST_HIST_SLOTS));
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

/*
 * One device's "block_figures": how its block figures were taken.  The counts, bytes, sizes and alignment are exact
 * (every completion seen, "basis"); "counted_by" names the program that counted them, and per op the source and
 * basis of each latency histogram (the issue hook's is the windows' sample where --budget windows it).  With block_rq_done, the issue hook's q2c histogram of the same requests is kept
 * beside it ("issue_hook_q2c_us"), what the completion's can be compared with.
 */
static json *block_figures_json(struct block_bpf *blk, __u32 kdev, __u32 slot, const struct fst_dev_io *io,
				const struct dev_sources *src)
{
	json *o = jobj();
	jset(o, "dev", ju64(kdev));
	jset(o, "basis", jstr(dev_count_basis(src)));
	jset(o, "counted_by", jstr(src->exact_path ? "block_rq_done" : "block_rq_complete"));
	static struct fst_dev_io issue; /* large: not on the stack */
	if (src->exact_path)
		dev_io_read(bpf_map__fd(blk->maps.dev_io), slot, &issue);
	json *ops = jset(o, "ops", jobj());
	for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
		if (!src->requests[sub])
			continue;
		json *x = jset(ops, op_name(sub), jobj());
		jset(x, "requests", ju64(src->requests[sub]));
		/* the bytes are summed only by block_rq_done, or for an exposition */
		jset(x, "bytes", src->exact_path || opt.exposition ? ju64(io->sums[sub].bytes) : NULL);
		enum dev_lat_source q2c = src->exact_path ? src->q2c[sub] : LAT_ISSUE_HOOK;
		enum dev_lat_source d2c = src->exact_path ? src->d2c[sub] : LAT_ISSUE_HOOK;
		jset(x, "q2c_source", jstr(dev_lat_source_names[q2c]));
		jset(x, "d2c_source", jstr(dev_lat_source_names[d2c]));
		jset(x, "q2c_basis", jstr(dev_lat_basis(q2c)));
		jset(x, "d2c_basis", jstr(dev_lat_basis(d2c)));
		if (!src->exact_path)
			continue;
		jset(x, "start_kept", ju64(src->start_kept[sub]));
		jset(x, "io_start_kept", ju64(src->io_start_kept[sub]));
		jset(x, "issue_hook_q2c_us", ju64_array(issue.q2c_us[sub], FST_HIST_SLOTS));
	}
	return o;
}

json *aggregates_kernel(struct block_bpf *blk, struct requests_bpf *reqs)
{
	json *agg = jobj();
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
	/* the block request histograms: device i's are in dev_io (dev_done) entry i, a row for each (metric, op) seen */
	static struct fst_dev_io io[MAX_DEVS];
	json *figs = jarr();
	for (int i = 0; i < opt.nr_devs; i++) {
		struct dev_sources src;
		dev_figures_read(bpf_map__fd(blk->maps.dev_io), dev_done_fd(blk), i, &io[i], &src);
		jpush(figs, block_figures_json(blk, dev_arg_kdev(&opt.devs[i]), i, &io[i], &src));
		for (int k = 0; k < DEV_IO_METRICS; k++)
			for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
				const __u64 *slots = dev_io_hist(&io[i], dev_io_metrics[k], sub);
				if (hist_any(slots))
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
	jset(agg, "block_figures", figs);
	jset(agg, "requests_counted", requests_counted(reqs));
	return agg;
}
