/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The in-kernel aggregates read from their maps: per-CPU values summed over CPUs, the counted requests of
 * requests.bpf.c req_agg, the block requests' histograms of block.bpf.c dev_io; and those of them the results
 * header carries.  The exposition (expose.c), the live view (live.c) and --budget (window.c) read the same maps
 * through the readers here.
 */
#ifndef FSTRACE_AGGREGATES_H
#define FSTRACE_AGGREGATES_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>
#include "records.h"
#include "jsonw.h"

struct block_bpf;
struct requests_bpf;

/* one key of a per-CPU map whose value is all __u64 counters, summed over CPUs; non-zero when it is gone */
int percpu_sum_value(int fd, const void *key, void *sum, size_t size);
/* a per-CPU array's __u64 at idx, summed over CPUs (0 when it cannot be read) */
__u64 percpu_u64(int fd, __u32 idx);

/* a walk over requests.bpf.c req_agg's entries that have counted a request (the array holds no keys: an entry's key
 * is the (superblock, kind) agg_keys gave it to) */
struct req_agg_iter {
	int fd;
	__u32 pos;					/* the next entry */
	struct fst_req_agg_key key_of[FST_REQ_AGG_MAX]; /* agg_keys inverted, as it was at the start */
	bool given[FST_REQ_AGG_MAX];
};
void req_agg_start(struct req_agg_iter *it, int fd, int keys_fd);
/* the next entry's key and its sum over CPUs; false after the last */
bool req_agg_next(struct req_agg_iter *it, struct fst_req_agg_key *key, struct fst_req_agg *sum);

/* the histograms of struct fst_dev_io (block.bpf.c dev_io), by their FST_H_IO_* metric */
#define DEV_IO_METRICS 3
extern const __u32 dev_io_metrics[DEV_IO_METRICS];
const __u64 *dev_io_hist(const struct fst_dev_io *io, __u32 metric, __u32 sub);
/* device slot's dev_io entry into *io, all zero when it has none yet */
void dev_io_read(int fd, __u32 slot, struct fst_dev_io *io);
/* where a device's latency histogram of one op came from (dev_figures_read) */
enum dev_lat_source {
	LAT_ISSUE_HOOK,	      /* block_rq_issue's time (and the bios' queue times) kept in flight: rq_starts */
	LAT_START_TIME_NS,    /* the request's own rq->start_time_ns, read at completion (q2c) */
	LAT_IO_START_TIME_NS, /* its rq->io_start_time_ns, read at completion (d2c) */
};
extern const char *const dev_lat_source_names[];
/* a latency figure's basis: "exact" (every completion), or "windows_sample" (the issue hook's, attached only in
 * --budget's windows: the distribution of the windows' requests, not the device's count) */
const char *dev_lat_basis(enum dev_lat_source s);
/* window.c: the issue hook is attached only in windows (on), or all the time */
void dev_lat_windowed(bool on);

/* a device's figures as dev_figures_read took them: per op, where each latency histogram came from, and the
 * requests that carried the block layer's timestamps */
struct dev_sources {
	bool exact_path; /* counts, bytes, sizes and alignment from block_rq_done (dev_done) */
	enum dev_lat_source q2c[FST_IO_SUBS], d2c[FST_IO_SUBS];
	__u64 requests[FST_IO_SUBS], start_kept[FST_IO_SUBS], io_start_kept[FST_IO_SUBS];
};
/* a device's counts' and bytes' basis: "exact" where block_rq_done counted them (or the in-flight completion hook
 * attached all the time), "windows_sample" where that hook counted them only in the windows */
const char *dev_count_basis(const struct dev_sources *src);

/*
 * Device slot's figures into *io: dev_io's (io_fd), or where block_rq_done is attached (done_fd >= 0) dev_done's
 * summed over CPUs, each op's q2c (d2c) histogram and sum from the completion where every request of that op
 * carried start_time_ns (io_start_time_ns), else dev_io's from the issue hook; *src (may be NULL) says which.
 */
void dev_figures_read(int io_fd, int done_fd, __u32 slot, struct fst_dev_io *io, struct dev_sources *src);
/* the requests of op sub a device's io holds: its size histogram's count */
__u64 dev_io_requests(const struct fst_dev_io *io, __u32 sub);
/* block.bpf.c dev_done's fd where block_rq_done is attached (blk->bss->exact_io_on), else -1 */
int dev_done_fd(struct block_bpf *blk);
/* requests of op sub completed on device slot so far, as block_rq_done counted them (done_fd: dev_done_fd); -1 where
 * it is not attached or its count could not be read */
__s64 dev_done_requests(int done_fd, __u32 slot, __u32 sub);
/* requests and bytes of each op completed on a device so far, as block_rq_done counted them */
struct dev_done_counts {
	__u64 requests[FST_IO_SUBS], bytes[FST_IO_SUBS];
};
/* device slot's into *c; false where block_rq_done is not attached (done_fd < 0) or its counts could not be read */
bool dev_done_read(int done_fd, __u32 slot, struct dev_done_counts *c);

/* whether a histogram holds any count */
bool hist_any(const __u64 *slots);
/* a histogram's count: its slots' sum */
__u64 hist_count(const __u64 *slots);

/* the results header's "drops" (records the ring buffer had no room for, per record type) */
json *aggregates_drops(struct block_bpf *blk);
/* its "losses" (entries a full kernel table could not keep, records.h FST_LOSSES) */
json *aggregates_losses(struct block_bpf *blk);
/* its "tracer_sites": the tracer part's sampled timing per site (records.h FST_TRACER_SITES), summed over CPUs */
json *aggregates_tracer_sites(struct block_bpf *blk);
/* its "kernel_aggregates": "histograms" and "alignment" (block.bpf.c hists and dev_io) and "requests_counted"
 * (requests.bpf.c req_agg; reqs NULL without request tracing: an empty array) */
json *aggregates_kernel(struct block_bpf *blk, struct requests_bpf *reqs);

#endif
