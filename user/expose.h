/* SPDX-License-Identifier: GPL-2.0 */
#ifndef FSTRACE_EXPOSE_H
#define FSTRACE_EXPOSE_H

/*
 * The in-kernel aggregates as a Prometheus text exposition (format 0.0.4) and, for scrapers that ask for it,
 * as OpenMetrics 1.0 text, each rewritten atomically (a temporary file in the same directory, then rename) so
 * a reader -- fstrace serve, node_exporter's textfile collector, a shell on a box without Python -- only ever
 * sees a complete one.  Counters are cumulative from the
 * collector's start and never reset; times in seconds, sizes in bytes.
 */
#include <stdbool.h>
#include <linux/types.h>
#include "records.h"
#include "tiers.h"

struct diskstat;

struct expose_maps {
	int req_agg;	   /* requests.bpf.c req_agg (per CPU), -1 without request tracing (--block-only) */
	int agg_keys;	   /* requests.bpf.c agg_keys: the (superblock, kind) of each of req_agg's entries */
	int dev_io, drops; /* dev_io: block.bpf.c, indexed by the devices' order in devs */
	int dev_done;	   /* block.bpf.c dev_done (per CPU, same index) where block_rq_done is attached, else -1 */
	int comm_agg;	   /* requests.bpf.c comm_agg (per CPU), -1 without --per-comm */
	int losses;	   /* block.bpf.c losses (per CPU, records.h FST_LOSSES) */
};

struct expose_probes {
	const struct probe *probes;
	int n;
};

/* request records that reached user space under --records none (req_agg was full): not in the counters */
extern unsigned long long expose_unaggregated_requests;
/* bios and block requests expired in flight (the collector's expire_stale) */
extern unsigned long long expose_expired_bios, expose_expired_requests;

/* every record the ring buffer delivers: decompressions are summed (the only figures taken from records) */
void expose_note_record(const void *data, size_t size);

/* what an exposition is made of */
struct expose_input {
	struct expose_maps maps;
	const struct expose_probes *groups;
	int ngroups;
	const __u32 *sdevs; /* the filesystems filtered on (kernel dev_t): their series are there from the start */
	int nr_sdevs;
	const __u32 *devs;	       /* the traced block devices (kernel dev_t), whose series are there from the start */
	const char *const *dev_levels; /* each one's level: what it is to the traced filesystems (FST_DEV_LEVELS) */
	int nr_devs;
	const struct diskstat *ds_start;      /* each device's /proc/diskstats when tracing began (NULL: none) */
	double start_time_s;		      /* the collector's start (realtime): counters start at 0 then */
	const volatile __u32 *agg_keys_given; /* requests.bpf.c's count of agg_keys handed out (its bss), or NULL */
};

/* Write path now, in the classic text format, and om_path (unless NULL) in OpenMetrics 1.0 text; 0, or a
 * negative errno (a file not written is left as it was). */
int expose_write(const char *path, const char *om_path, const struct expose_input *in);
/*
 * What an exposition does to the labels, without writing one (--exposition-on-demand, between scrapes): a device
 * seen for the first time labelled with the filesystem mounted on it now, and every label checked against the
 * mount table where it changed (a device seen unmounted keeps what it held then).  A filesystem mounted, read and
 * gone between two scrapes keeps its own labels, as with a rewrite every interval.  Where nothing changed it
 * costs a poll and a read of agg_keys_given (no system call for the rows).  A device known only to the
 * --per-comm rows (agg_keys full) is labelled at the next exposition.
 */
void expose_follow_labels(const struct expose_input *in);

#endif
