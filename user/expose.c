// SPDX-License-Identifier: GPL-2.0
/*
 * Prometheus text exposition of the in-kernel aggregates (expose.h), read through aggregates.c and written
 * atomically, with its OpenMetrics twin (openmetrics.c).  Model: Cloudflare's ebpf_exporter -- log2 histograms
 * stay in BPF maps and are converted when read, so nothing per request crosses to user space.
 *
 * Cardinality: request series are per (kind, filesystem) -- at most req_agg's 64 entries -- times the attribution
 * parts for the time counters; block series per (traced device, op) -- at most 16 devices x 3 ops; one info
 * series per probe.  Histograms have FST_HIST_SLOTS buckets each.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "aggregates.h"
#include "expose.h"
#include "names.h"
#include "openmetrics.h"
#include "window.h"
#include "procfs.h"
#include "jbuf.h"

unsigned long long expose_unaggregated_requests;
unsigned long long expose_expired_bios, expose_expired_requests;

#define MAX_AGG_KEYS FST_REQ_AGG_MAX

struct agg_row {
	struct fst_req_agg_key key;
	struct fst_req_agg sum;
};

struct comm_row {
	struct fst_comm_agg_key key;
	struct fst_comm_agg sum;
};

/*
 * Filesystem and mount point of a superblock device, from /proc/self/mountinfo.  A device number is labelled
 * by the first (fs, mount) seen on it, and keeps that label while it is unmounted (its series stay, with
 * fstrace_filesystem_mounted 0) or mounted again as the same.  When it turns up mounted as another filesystem
 * (a loop device set up again with another image, an anonymous device number the kernel handed out again),
 * the kernel's counters of the device go on, but they are the new filesystem's: the old label is retired with
 * what its series held when the device was first seen unmounted (or, never seen so, when the new one was seen),
 * and a new label of the device counts from there.  With --sdev filters the new filesystem is not one of those
 * chosen: its label is hidden (the kernel's filter is fixed when the programs load; what it still counts for
 * the device is left out of the exposition).
 */
#define MAX_FS_LABELS 64

static struct fs_label {
	__u32 kdev;
	bool known, mounted;
	bool current; /* the device's label now: the kernel's counts since its start are its own */
	bool parked;  /* current, but seen unmounted: its splits hold the device's counts as they were then */
	bool first;   /* the first label of its device */
	char fs[32];
	char mount[256];
} fs_labels[MAX_FS_LABELS];
static int nr_fs_labels;
static bool labels_filtered; /* --sdev filters: a later filesystem on a filtered device is hidden */

static bool label_hidden(const struct fs_label *l)
{
	return labels_filtered && !l->first;
}

/* the current label of kdev; the first one is made when a device is first seen, NULL when the table is full
 * or the device's last filesystem found it full */
static struct fs_label *fs_label(__u32 kdev)
{
	bool seen = false;
	for (int i = 0; i < nr_fs_labels; i++)
		if (fs_labels[i].kdev == kdev) {
			if (fs_labels[i].current)
				return &fs_labels[i];
			seen = true;
		}
	if (seen || nr_fs_labels == MAX_FS_LABELS)
		return NULL;
	struct fs_label *l = &fs_labels[nr_fs_labels++];
	memset(l, 0, sizeof(*l));
	l->kdev = kdev;
	l->current = l->first = true;
	return l;
}

/*
 * A label's share of one kernel row (a request kind of its device, or a task name and kind): the current
 * label's value is carried + (kernel row - base), a retired label's carried alone.  Kept only for the labels
 * of a device that was seen unmounted or taken over (the others have carried = base = 0: the kernel row).
 */
enum split_table { SPLIT_REQ,
		   SPLIT_COMM };
#define SPLIT_WORDS (sizeof(struct fst_req_agg) / sizeof(__u64))
_Static_assert(sizeof(struct fst_comm_agg) <= sizeof(struct fst_req_agg), "a split holds either row");

struct split {
	int label; /* index in fs_labels */
	enum split_table table;
	union {
		struct fst_req_agg_key req;
		struct fst_comm_agg_key comm;
	} key;
	__u64 carried[SPLIT_WORDS], base[SPLIT_WORDS], parked[SPLIT_WORDS];
	bool estimated, by_calls; /* --budget: the device's estimate when its only label was parked */
	double est, lo, hi;
};
static struct split **splits;
static int nr_splits;

static size_t key_size(enum split_table t)
{
	return t == SPLIT_REQ ? sizeof(struct fst_req_agg_key) : sizeof(struct fst_comm_agg_key);
}

static size_t row_words(enum split_table t)
{
	return (t == SPLIT_REQ ? sizeof(struct fst_req_agg) : sizeof(struct fst_comm_agg)) / sizeof(__u64);
}

/* the split of (label, table, key); made (zero) when create, NULL when absent (or out of memory) */
static struct split *split_of(int label, enum split_table t, const void *key, bool create)
{
	for (int i = 0; i < nr_splits; i++)
		if (splits[i]->label == label && splits[i]->table == t && !memcmp(&splits[i]->key, key, key_size(t)))
			return splits[i];
	if (!create)
		return NULL;
	struct split **grown = realloc(splits, (nr_splits + 1) * sizeof(*splits));
	if (!grown)
		return NULL;
	splits = grown;
	struct split *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->label = label;
	s->table = t;
	memcpy(&s->key, key, key_size(t));
	return splits[nr_splits++] = s;
}

/* the kernel's rows as read for this exposition: what a label's counts are split from */
struct kernel_rows {
	const struct agg_row *req;
	int nr_req;
	const struct comm_row *comm;
	int nr_comm;
};

static int labels_of(__u32 kdev)
{
	int n = 0;
	for (int i = 0; i < nr_fs_labels; i++)
		n += fs_labels[i].kdev == kdev;
	return n;
}

/* label l (current) seen unmounted, or taken over: what the device's rows hold now is parked in its splits */
static void park(int l, const struct kernel_rows *k)
{
	struct fs_label *fl = &fs_labels[l];
	__u64 now = now_ns(CLOCK_MONOTONIC);
	bool only = labels_of(fl->kdev) == 1;
	for (int i = 0; i < k->nr_req; i++) {
		if (k->req[i].key.sdev != fl->kdev)
			continue;
		struct split *s = split_of(l, SPLIT_REQ, &k->req[i].key, true);
		if (!s)
			continue;
		memcpy(s->parked, &k->req[i].sum, sizeof(k->req[i].sum));
		/* the windows estimate a device's requests since the start: while it had no other label, that is
		 * this label's; once another has followed, this one keeps the last estimate of its own */
		if (only && window_active())
			s->estimated = window_estimate(fl->kdev, k->req[i].key.kind, now, &s->est, &s->lo, &s->hi,
						       &s->by_calls);
	}
	for (int i = 0; i < k->nr_comm; i++) {
		if (k->comm[i].key.sdev != fl->kdev || !k->comm[i].key.comm[0])
			continue;
		struct split *s = split_of(l, SPLIT_COMM, &k->comm[i].key, true);
		if (s)
			memcpy(s->parked, &k->comm[i].sum, sizeof(k->comm[i].sum));
	}
	fl->parked = true;
}

/* parked label from retired, its device's counts since the park going to label to (current from now; -1:
 * none, the device's later counts are not exposed) */
static void take_over(int from, int to)
{
	for (int i = 0; to >= 0 && i < nr_splits; i++) /* a row to had before, absent from the park, was 0 then */
		if (splits[i]->label == to)
			memset(splits[i]->base, 0, sizeof(splits[i]->base));
	for (int i = 0, n = nr_splits; i < n; i++) {
		struct split *s = splits[i];
		if (s->label != from)
			continue;
		for (size_t w = 0; w < row_words(s->table); w++)
			s->carried[w] += s->parked[w] - s->base[w];
		struct split *t = to >= 0 ? split_of(to, s->table, &s->key, true) : NULL;
		if (t)
			memcpy(t->base, s->parked, sizeof(t->base));
	}
	fs_labels[from].current = fs_labels[from].parked = fs_labels[from].mounted = false;
	if (to >= 0) {
		fs_labels[to].current = true;
		fs_labels[to].parked = false;
	}
}

/* the label of (kdev, fs, mount): a former one of the device, or a new one; -1 when the table is full */
static int label_for(__u32 kdev, const char *fs, const char *mnt)
{
	for (int i = 0; i < nr_fs_labels; i++)
		if (fs_labels[i].kdev == kdev && fs_labels[i].known && !strcmp(fs_labels[i].fs, fs) &&
		    !strcmp(fs_labels[i].mount, mnt))
			return i;
	if (nr_fs_labels == MAX_FS_LABELS)
		return -1;
	struct fs_label *l = &fs_labels[nr_fs_labels];
	memset(l, 0, sizeof(*l));
	l->kdev = kdev;
	l->known = true;
	snprintf(l->fs, sizeof(l->fs), "%s", fs);
	snprintf(l->mount, sizeof(l->mount), "%s", mnt);
	return nr_fs_labels++;
}

static void refresh_fs_labels(const struct kernel_rows *k)
{
	for (int i = 0, n = nr_fs_labels; i < n; i++) {
		struct fs_label *l = &fs_labels[i];
		if (!l->current)
			continue;
		char fs[sizeof(l->fs)], mnt[sizeof(l->mount)];
		bool mounted = sdev_mount(l->kdev, fs, sizeof(fs), mnt, sizeof(mnt));
		if (mounted && l->known && (strcmp(fs, l->fs) || strcmp(mnt, l->mount))) {
			/* another filesystem on the device number */
			if (!l->parked)
				park(i, k);
			int to = label_for(l->kdev, fs, mnt);
			take_over(i, to);
			if (to < 0) /* no room for its label: its requests are not exposed */
				continue;
			l = &fs_labels[to];
		} else if (!mounted && l->mounted && !l->parked) {
			park(i, k);
		} else if (mounted) {
			l->parked = false; /* back as itself: its counts never stopped */
		}
		l->mounted = mounted;
		if (mounted && !l->known) {
			memcpy(l->fs, fs, sizeof(fs));
			memcpy(l->mount, mnt, sizeof(mnt));
			l->known = true;
		}
	}
}

/* label l's value of a kernel row (words u64 of it), in out */
static void split_value(int l, enum split_table t, const void *key, const __u64 *row, __u64 *out)
{
	size_t words = row_words(t);
	const struct split *s = split_of(l, t, key, false);
	for (size_t w = 0; w < words; w++) {
		__u64 v = s ? s->carried[w] : 0;
		if (fs_labels[l].current)
			v += row[w] - (s ? s->base[w] : 0);
		out[w] = v;
	}
}

/* whether retired label l has a series of the key (it had the row when it was retired) */
static bool retired_has(int l, enum split_table t, const void *key)
{
	return !fs_labels[l].current && split_of(l, t, key, false);
}

/* a label value: backslash, double quote and newline escaped (exposition format), and valid UTF-8 (a path or
 * task name is any bytes; Prometheus refuses a whole scrape for one invalid label): an invalid byte is U+FFFD */
static void label_value(struct jbuf *b, const char *s)
{
	for (int n; *s; s += n) {
		n = utf8_char_len(s);
		if (!n) {
			jb_add(b, "\xef\xbf\xbd");
			n = 1;
		} else if (*s == '\\' || *s == '"') {
			jb_add(b, "\\%c", *s);
		} else if (*s == '\n') {
			jb_add(b, "\\n");
		} else {
			jb_add(b, "%.*s", n, s);
		}
	}
}

/* the labels of a series of kdev under label l (-1: the device has none) */
static void fs_labels_of(struct jbuf *b, int l, __u32 kdev)
{
	const struct fs_label *fl = l >= 0 ? &fs_labels[l] : NULL;
	jb_add(b, "device=\"%u:%u\",fs=\"", FST_KDEV_MAJOR(kdev), FST_KDEV_MINOR(kdev));
	label_value(b, fl && fl->known ? fl->fs : "");
	jb_add(b, "\",mount=\"");
	label_value(b, fl && fl->known ? fl->mount : "");
	jb_add(b, "\"");
}

/* the labels a kernel row of kdev is exposed under, in labels (MAX_FS_LABELS): its current one and the retired
 * ones that had it, none hidden; -1 alone when the device has no label (the table was full); their count */
static int row_labels(enum split_table t, const void *key, __u32 kdev, int *labels)
{
	int n = 0;
	bool any = false;
	for (int i = 0; i < nr_fs_labels; i++) {
		if (fs_labels[i].kdev != kdev)
			continue;
		any = true;
		if (!label_hidden(&fs_labels[i]) && (fs_labels[i].current || retired_has(i, t, key)))
			labels[n++] = i;
	}
	if (!any)
		labels[n++] = -1;
	return n;
}

static void family(struct jbuf *b, const char *name, const char *type, const char *help)
{
	jb_add(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/*
 * A log2 histogram (bpf/hist.bpf.h log2_slot: slot i holds values in [2^i, 2^(i+1)), slot 0 also 0 and 1,
 * the last slot everything above) as cumulative buckets.  Integer values (bytes) are at most 2^(i+1) - 1 in
 * slot i; times were truncated to microseconds, so a time in slot i is below 2^(i+1) us.
 */
static void histogram(struct jbuf *b, const char *name, const char *labels, const __u64 *slots, double sum,
		      bool integer_bytes)
{
	/* the bounds' text, made once: formatting them as doubles was most of an exposition's own CPU time */
	static char bounds[2][FST_HIST_SLOTS - 1][24];
	static bool made;
	for (int i = 0; !made && i < FST_HIST_SLOTS - 1; i++) {
		snprintf(bounds[0][i], sizeof(bounds[0][i]), "%.9g", (double)(1ull << (i + 1)) * 1e-6);
		snprintf(bounds[1][i], sizeof(bounds[1][i]), "%.9g", (double)((1ull << (i + 1)) - 1));
	}
	made = true;
	unsigned long long cum = 0;
	for (int i = 0; i < FST_HIST_SLOTS - 1; i++) {
		cum += slots[i];
		jb_add(b, "%s_bucket{%s,le=\"%s\"} %llu\n", name, labels, bounds[integer_bytes][i], cum);
	}
	cum += slots[FST_HIST_SLOTS - 1];
	jb_add(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, cum);
	jb_add(b, "%s_sum{%s} %.9f\n", name, labels, sum);
	jb_add(b, "%s_count{%s} %llu\n", name, labels, cum);
}

/* row i of rows[0..n) for key, appended (zero) when absent and there is room; NULL otherwise */
static struct agg_row *agg_row(struct agg_row *rows, int *n, __u32 sdev, __u16 kind)
{
	for (int i = 0; i < *n; i++)
		if (rows[i].key.sdev == sdev && rows[i].key.kind == kind)
			return &rows[i];
	if (*n == MAX_AGG_KEYS)
		return NULL;
	memset(&rows[*n], 0, sizeof(rows[*n]));
	rows[*n].key.sdev = sdev;
	rows[*n].key.kind = kind;
	return &rows[(*n)++];
}

/* the kernel's request rows of this exposition (every label's counts are split from them) */
static struct agg_row kernel_req[MAX_AGG_KEYS];
static int nr_kernel_req;

static void read_requests(int fd, int keys_fd, const __u32 *sdevs, int nr_sdevs)
{
	struct agg_row *rows = kernel_req;
	int n = 0;
	struct req_agg_iter it;
	req_agg_start(&it, fd, keys_fd);
	while (n < MAX_AGG_KEYS && req_agg_next(&it, &rows[n].key, &rows[n].sum)) {
		fs_label(rows[n].key.sdev);
		n++;
	}
	/*
	 * Every (kind, filtered filesystem) is there from the first exposition on, at 0: Prometheus's increase()
	 * cannot count what a series held when it first appeared, so a series born at the first read would lose it.
	 */
	for (int i = 0; fd >= 0 && i < nr_sdevs; i++) {
		fs_label(sdevs[i]);
#define KIND_ROW(c, v, nm) agg_row(rows, &n, sdevs[i], v);
		FST_REQ_KINDS(KIND_ROW)
#undef KIND_ROW
	}
	nr_kernel_req = n;
}

struct req_series {
	int label; /* in fs_labels, -1: none */
	struct agg_row row;
	signed char by_calls; /* --budget: -1 without an estimate */
	char lab[1280];	      /* kind, device, fs (31 bytes), mount (255): at most 3 bytes each escaped (U+FFFD) */
};

/* the --budget estimate of a series: the windows estimate a device's requests since the start, so a device
 * that had another filesystem has none but its first label's, as it was when that was last mounted */
static bool series_estimate(const struct req_series *r, __u64 now, double *est, double *lo, double *hi, bool *calls)
{
	if (r->label < 0 || labels_of(r->row.key.sdev) == 1)
		return window_estimate(r->row.key.sdev, r->row.key.kind, now, est, lo, hi, calls);
	const struct split *s = split_of(r->label, SPLIT_REQ, &r->row.key, false);
	if (!fs_labels[r->label].first || !s || !s->estimated)
		return false;
	*est = s->est, *lo = s->lo, *hi = s->hi, *calls = s->by_calls;
	return true;
}

static void requests(struct jbuf *b)
{
	static struct req_series *rows; /* reused: its size settles at the exposition's */
	static int cap;
	int n = 0, labels[MAX_FS_LABELS];
	struct jbuf l = {};
	for (int k = 0; k < nr_kernel_req; k++) {
		const struct agg_row *kr = &kernel_req[k];
		int nl = row_labels(SPLIT_REQ, &kr->key, kr->key.sdev, labels);
		for (int j = 0; j < nl; j++) {
			if (n == cap) {
				struct req_series *grown = realloc(rows, (cap + MAX_AGG_KEYS) * sizeof(*rows));
				if (!grown)
					break;
				rows = grown, cap += MAX_AGG_KEYS;
			}
			struct req_series *r = &rows[n++];
			r->label = labels[j];
			r->row.key = kr->key;
			if (r->label < 0)
				r->row.sum = kr->sum;
			else
				split_value(r->label, SPLIT_REQ, &kr->key, (const __u64 *)&kr->sum, (__u64 *)&r->row.sum);
			l.len = 0;
			jb_add(&l, "kind=\"%s\",", kind_name(kr->key.kind));
			fs_labels_of(&l, r->label, kr->key.sdev);
			snprintf(r->lab, sizeof(r->lab), "%s", l.s);
		}
	}
	free(l.s);
	family(b, "fstrace_requests_total", "counter", "Requests (syscalls) of traced tasks on files of the filesystem.");
	for (int i = 0; i < n; i++)
		jb_add(b, "fstrace_requests_total{%s} %llu\n", rows[i].lab, (unsigned long long)rows[i].row.sum.count);
	if (window_active()) {
		family(b, "fstrace_requests_estimated", "gauge",
		       "--budget: requests since the start estimated from the windows the request hooks were attached "
		       "in (fstrace_requests_total counts only those), with the bounds of its 95 % interval.");
		__u64 now = now_ns(CLOCK_MONOTONIC);
		for (int i = 0; i < n; i++) {
			double est, lo, hi;
			bool calls;
			rows[i].by_calls = -1;
			if (!series_estimate(&rows[i], now, &est, &lo, &hi, &calls))
				continue;
			rows[i].by_calls = calls;
			jb_add(b, "fstrace_requests_estimated{%s,bound=\"estimate\"} %.1f\n", rows[i].lab, est);
			jb_add(b, "fstrace_requests_estimated{%s,bound=\"lower95\"} %.1f\n", rows[i].lab, lo);
			jb_add(b, "fstrace_requests_estimated{%s,bound=\"upper95\"} %.1f\n", rows[i].lab, hi);
		}
		family(b, "fstrace_requests_estimated_by_calls", "gauge",
		       "--budget: 1 where fstrace_requests_estimated is weighted by the traced processes' own calls of "
		       "its kind (reads, writes: they slow with tracing as the requests do), 0 where by the windows' "
		       "time (other kinds; the counts unreadable, or given up after a failed first or last look; fewer "
		       "than two windows whose calls are known, or none with calls of the kind).");
		for (int i = 0; i < n; i++)
			if (rows[i].by_calls >= 0)
				jb_add(b, "fstrace_requests_estimated_by_calls{%s} %d\n", rows[i].lab, rows[i].by_calls);
	}
	family(b, "fstrace_request_bytes_total", "counter", "Bytes the requests returned (sum of positive return values).");
	for (int i = 0; i < n; i++)
		jb_add(b, "fstrace_request_bytes_total{%s} %llu\n", rows[i].lab, (unsigned long long)rows[i].row.sum.bytes);
	family(b, "fstrace_request_duration_seconds", "histogram", "Wall time of each request, syscall entry to exit.");
	for (int i = 0; i < n; i++)
		histogram(b, "fstrace_request_duration_seconds", rows[i].lab, rows[i].row.sum.wall_hist,
			  rows[i].row.sum.wall_ns / 1e9, false);
	family(b, "fstrace_request_time_seconds_total", "counter",
	       "Time in requests by attribution part; the parts of a request add up to its wall time.");
	for (int i = 0; i < n; i++)
		for (int p = 0; p < FST_NR_PARTS; p++) {
			/* record field names end in _ns: the part is the name without it */
			int len = (int)strlen(part_field_name(p)) - 3;
			jb_add(b, "fstrace_request_time_seconds_total{%s,part=\"%.*s\"} %.9f\n", rows[i].lab, len,
			       part_field_name(p), rows[i].row.sum.part_ns[p] / 1e9);
		}
	family(b, "fstrace_pagecache_misses_total", "counter",
	       "Folios the requests added to the page cache (their page-cache misses, readahead included).");
	for (int i = 0; i < n; i++)
		jb_add(b, "fstrace_pagecache_misses_total{%s} %llu\n", rows[i].lab, (unsigned long long)rows[i].row.sum.pcache_adds);
}

/*
 * Decompressions, from their records (the fentry/kprobe tiers time them; no tracepoint can): summed here per
 * (superblock, fs, algorithm, tier) as they arrive, so the exposition has them without keeping the records.
 */
#define MAX_DECOMP_KEYS 64

static struct decomp_sum {
	__u32 dev;
	__u16 fs, alg, tier;
	unsigned long long n, errors, ns, in_bytes, out_bytes;
} decomp_sums[MAX_DECOMP_KEYS];
static int nr_decomp_sums;
static unsigned long long decomp_unsummed;

void expose_note_record(const void *data, size_t size)
{
	const struct fst_decomp *d = data;
	if (size < sizeof(*d) || d->rec_type != FST_REC_DECOMP)
		return;
	int i = 0;
	while (i < nr_decomp_sums && !(decomp_sums[i].dev == d->dev && decomp_sums[i].fs == d->fs &&
				       decomp_sums[i].alg == d->alg && decomp_sums[i].tier == d->tier))
		i++;
	if (i == MAX_DECOMP_KEYS) {
		decomp_unsummed++;
		return;
	}
	struct decomp_sum *s = &decomp_sums[i];
	if (i == nr_decomp_sums) {
		memset(s, 0, sizeof(*s));
		s->dev = d->dev, s->fs = d->fs, s->alg = d->alg, s->tier = d->tier;
		nr_decomp_sums++;
	}
	s->n++;
	s->errors += d->ret < 0;
	s->ns += d->ts_end_ns > d->ts_start_ns ? d->ts_end_ns - d->ts_start_ns : 0;
	s->in_bytes += d->in_bytes;
	s->out_bytes += d->out_bytes;
}

static void decompressions(struct jbuf *b)
{
	static const struct {
		const char *name, *type, *help;
	} fams[] = {
		{ "fstrace_decompressions_total", "counter", "Decompressions of a compressed unit (fentry/kprobe tiers only)." },
		{ "fstrace_decompress_errors_total", "counter", "Decompressions that returned an error." },
		{ "fstrace_decompress_seconds_total", "counter", "Time in decompression, wherever it ran." },
		{ "fstrace_decompress_in_bytes_total", "counter", "Compressed bytes decompressed." },
		{ "fstrace_decompress_out_bytes_total", "counter", "Bytes decompression produced." },
	};
	for (unsigned f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
		family(b, fams[f].name, fams[f].type, fams[f].help);
		for (int i = 0; i < nr_decomp_sums; i++) {
			const struct decomp_sum *s = &decomp_sums[i];
			jb_add(b, "%s{device=\"%u:%u\",fs=\"%s\",alg=\"%s\",tier=\"%s\"} ", fams[f].name, FST_KDEV_MAJOR(s->dev),
			       FST_KDEV_MINOR(s->dev), fs_name(s->fs), alg_name(s->alg), tier_name(s->tier));
			if (f == 2)
				jb_add(b, "%.9f\n", s->ns / 1e9);
			else
				jb_add(b, "%llu\n", f == 0 ? s->n : (f == 1 ? s->errors : (f == 3 ? s->in_bytes : s->out_bytes)));
		}
	}
	family(b, "fstrace_decompress_unsummed_total", "counter",
	       "Decompressions beyond the 64 (device, fs, algorithm, tier) series: not in the counters above.");
	jb_add(b, "fstrace_decompress_unsummed_total %llu\n", decomp_unsummed);
}

/* --per-comm: requests per task name (the bounded process label; requests.bpf.c comm_agg), as the kernel has them */
static struct comm_row kernel_comm[FST_COMM_AGG_MAX + 1];
static int nr_kernel_comm;

static void read_per_comm(int fd)
{
	int n = 0;
	struct fst_comm_agg_key key, next;
	void *prev = NULL;
	while (fd >= 0 && n < FST_COMM_AGG_MAX + 1 && !bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (percpu_sum_value(fd, &key, &kernel_comm[n].sum, sizeof(kernel_comm[n].sum)))
			continue;
		kernel_comm[n].key = key;
		if (key.comm[0])
			fs_label(key.sdev);
		n++;
	}
	nr_kernel_comm = n;
}

static void per_comm(struct jbuf *b, int fd)
{
	if (fd < 0)
		return;
	static struct {
		int label;
		struct comm_row row;
	} * rows; /* reused: its size settles at the exposition's */
	static int cap;
	int n = 0, labels[MAX_FS_LABELS];
	for (int k = 0; k < nr_kernel_comm; k++) {
		const struct comm_row *kr = &kernel_comm[k];
		/* comm "": every later name on every filesystem, under no filesystem's labels */
		int nl = kr->key.comm[0] ? row_labels(SPLIT_COMM, &kr->key, kr->key.sdev, labels) : 1;
		for (int j = 0; j < nl; j++) {
			if (n == cap) {
				void *grown = realloc(rows, (cap + FST_COMM_AGG_MAX + 1) * sizeof(*rows));
				if (!grown)
					break;
				rows = grown, cap += FST_COMM_AGG_MAX + 1;
			}
			rows[n].label = kr->key.comm[0] ? labels[j] : -1;
			rows[n].row.key = kr->key;
			if (rows[n].label < 0)
				rows[n].row.sum = kr->sum;
			else
				split_value(rows[n].label, SPLIT_COMM, &kr->key, (const __u64 *)&kr->sum,
					    (__u64 *)&rows[n].row.sum);
			n++;
		}
	}
	static const char *names[] = { "fstrace_comm_requests_total", "fstrace_comm_request_bytes_total",
				       "fstrace_comm_request_seconds_total", "fstrace_comm_io_wait_seconds_total" };
	static const char *helps[] = {
		"Requests per task name (at most 64 name x filesystem x kind series; later ones under comm=\"\" alone).",
		"Bytes the requests returned, per task name.",
		"Wall time in requests, per task name.",
		"I/O wait in requests, per task name.",
	};
	for (int f = 0; f < 4; f++) {
		family(b, names[f], "counter", helps[f]);
		for (int i = 0; i < n; i++) {
			char comm[17];
			memcpy(comm, rows[i].row.key.comm, 16);
			comm[16] = 0;
			jb_add(b, "%s{comm=\"", names[f]);
			label_value(b, comm);
			if (comm[0]) {
				jb_add(b, "\",kind=\"%s\",", kind_name(rows[i].row.key.kind));
				fs_labels_of(b, rows[i].label, rows[i].row.key.sdev);
				jb_add(b, "} ");
			} else {
				jb_add(b, "\"} ");
			}
			const struct fst_comm_agg *s = &rows[i].row.sum;
			if (f < 2)
				jb_add(b, "%llu\n", (unsigned long long)(f == 0 ? s->count : s->bytes));
			else
				jb_add(b, "%.9f\n", (f == 2 ? s->wall_ns : s->io_wait_ns) / 1e9);
		}
	}
}

static void filesystems(struct jbuf *b)
{
	family(b, "fstrace_filesystem_mounted", "gauge",
	       "1 while the traced filesystem is mounted, 0 once it is gone (its counters stay).");
	for (int i = 0; i < nr_fs_labels; i++) {
		if (label_hidden(&fs_labels[i]))
			continue;
		jb_add(b, "fstrace_filesystem_mounted{");
		fs_labels_of(b, i, fs_labels[i].kdev);
		jb_add(b, "} %d\n", fs_labels[i].mounted);
	}
}

struct hist_row {
	struct fst_hist_key key;
	struct fst_hist h;
	int dev_index; /* its device's dev_io entry (the order of devs) */
};

#define MAX_HIST_KEYS (MAX_EXPOSED_DEVS * DEV_IO_METRICS * FST_IO_SUBS)
#define MAX_EXPOSED_DEVS FST_MAX_TRACED_DEVS

/*
 * Block requests the kernel completed that fstrace did not see, per (device, op), from /proc/diskstats since
 * tracing began (the run report's comparison, analysis/summary.py device_stats).  diskstats is read first and
 * the traced count after it: a request's block_rq_complete runs before the completion is accounted in
 * diskstats, so every request diskstats has counted by then and fstrace saw is in that count, and the
 * difference is a lower bound of the unseen requests; the traced count taken before diskstats bounds the
 * traced-but-not-counted ones (completed between attach and the first snapshot) the same way.  Both are
 * kept as high-water marks, so a counter never shrinks, and neither goes negative.  The results file compares
 * over the span of its two snapshots, its counts read around each (analysis/devices.py exact_over_diskstats):
 * here the traced count runs from the attach, a looser bound that a scrape at any time can take.
 */
static const int diskstat_field[FST_IO_SUBS] = { [FST_IO_READ] = DISKSTAT_READS, [FST_IO_WRITE] = DISKSTAT_WRITES, [FST_IO_OTHER] = -1 };

static void block_unseen(struct jbuf *b, const struct expose_input *in, const struct fst_dev_io *seen_before)
{
	static unsigned long long unseen[FST_MAX_TRACED_DEVS][FST_IO_SUBS], excess[FST_MAX_TRACED_DEVS][FST_IO_SUBS];
	struct jbuf ex = {};
	family(b, "fstrace_block_requests_unseen_total", "counter",
	       "Block requests /proc/diskstats counted as completed since tracing began that fstrace did not see "
	       "(a lower bound; read and write).");
	for (int d = 0; d < in->nr_devs && d < FST_MAX_TRACED_DEVS && in->ds_start; d++) {
		if (!in->ds_start[d].found)
			continue;
		struct diskstat now;
		struct dev_arg dev = { .major = FST_KDEV_MAJOR(in->devs[d]), .minor = FST_KDEV_MINOR(in->devs[d]) };
		read_diskstat(&dev, &now);
		static struct fst_dev_io after; /* large: not on the stack */
		if (!now.found)
			continue;
		dev_figures_read(in->maps.dev_io, in->maps.dev_done, d, &after, NULL);
		for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
			int f = diskstat_field[sub];
			if (f < 0)
				continue;
			unsigned long long counted = now.v[f] - in->ds_start[d].v[f];
			unsigned long long seen = dev_io_requests(&after, sub), seen0 = dev_io_requests(&seen_before[d], sub);
			if (now.v[f] >= in->ds_start[d].v[f]) {
				if (counted > seen && counted - seen > unseen[d][sub])
					unseen[d][sub] = counted - seen;
				if (seen0 > counted && seen0 - counted > excess[d][sub])
					excess[d][sub] = seen0 - counted;
			}
			jb_add(b, "fstrace_block_requests_unseen_total{device=\"%u:%u\",op=\"%s\"} %llu\n",
			       FST_KDEV_MAJOR(in->devs[d]), FST_KDEV_MINOR(in->devs[d]), op_name(sub), unseen[d][sub]);
			jb_add(&ex, "fstrace_block_requests_beyond_diskstats_total{device=\"%u:%u\",op=\"%s\"} %llu\n",
			       FST_KDEV_MAJOR(in->devs[d]), FST_KDEV_MINOR(in->devs[d]), op_name(sub), excess[d][sub]);
		}
	}
	family(b, "fstrace_block_requests_beyond_diskstats_total", "counter",
	       "Block requests fstrace saw beyond what /proc/diskstats counted since tracing began (completed before "
	       "its first snapshot, or on a device diskstats does not count them on).");
	jb_add(b, "%s", ex.s ? ex.s : "");
	free(ex.s);
}

/* the histogram rows of the devices' figures (io: each device's, read into it): a device's read series exist
 * from the start, at 0 (see requests()); the number of rows */
static int block_rows(struct hist_row *rows, struct fst_dev_io *io, struct dev_sources *src,
		      const struct expose_input *in, int nr_devs)
{
	int n = 0;
	for (int d = 0; d < nr_devs; d++) {
		dev_figures_read(in->maps.dev_io, in->maps.dev_done, d, &io[d], &src[d]);
		for (int k = 0; k < DEV_IO_METRICS; k++)
			for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
				const __u64 *slots = dev_io_hist(&io[d], dev_io_metrics[k], sub);
				if (!hist_any(slots) && sub != FST_IO_READ)
					continue;
				rows[n].key =
				    (struct fst_hist_key){ .metric = dev_io_metrics[k], .dev = in->devs[d], .sub = sub };
				rows[n].dev_index = d;
				memcpy(rows[n].h.slots, slots, sizeof(rows[n].h.slots));
				n++;
			}
	}
	return n;
}

static void block_device_info(struct jbuf *b, const struct expose_input *in, int nr_devs)
{
	family(b, "fstrace_block_device_info", "gauge",
	       "1 for every traced block device, with its level: what it is to the traced filesystems (disk: one sits "
	       "on it, its block series count every task's requests; loop: an image's; backing: the disk behind a loop "
	       "device; device: named alone).");
	for (int d = 0; d < nr_devs; d++)
		jb_add(b, "fstrace_block_device_info{device=\"%u:%u\",level=\"%s\"} 1\n", FST_KDEV_MAJOR(in->devs[d]),
		       FST_KDEV_MINOR(in->devs[d]), in->dev_levels ? in->dev_levels[d] : "device");
}

/* the requests counted (the size histogram's total) and the three histograms, with their sums */
static void block_histograms(struct jbuf *b, const struct hist_row *rows, int n, const struct fst_dev_io *io)
{
	static const struct {
		__u32 metric;
		const char *name, *help;
	} fams[] = {
		{ FST_H_IO_BYTES, "fstrace_block_request_bytes", "Size of each completed block request." },
		{ FST_H_IO_Q2C_US, "fstrace_block_request_q2c_seconds",
		  "Block request time from its start to completion (queue and device): from the request's allocation "
		  "(start_time_ns) or its first bio queued (the issue hook), as fstrace_block_figure_info's source says; "
		  "from the issue hook under --budget, the windows' requests only (its basis: windows_sample)." },
		{ FST_H_IO_D2C_US, "fstrace_block_request_d2c_seconds",
		  "Block request time from issue to the driver to completion (device); from the issue hook under --budget, "
		  "the windows' requests only (fstrace_block_figure_info's basis)." },
	};
	family(b, "fstrace_block_requests_total", "counter", "Completed block requests on the traced devices.");
	for (int i = 0; i < n; i++) {
		if (rows[i].key.metric != FST_H_IO_BYTES)
			continue;
		jb_add(b, "fstrace_block_requests_total{device=\"%u:%u\",op=\"%s\"} %llu\n", FST_KDEV_MAJOR(rows[i].key.dev),
		       FST_KDEV_MINOR(rows[i].key.dev), op_name(rows[i].key.sub),
		       (unsigned long long)hist_count(rows[i].h.slots));
	}
	for (unsigned f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
		family(b, fams[f].name, "histogram", fams[f].help);
		for (int i = 0; i < n; i++) {
			if (rows[i].key.metric != fams[f].metric)
				continue;
			const struct fst_io_sum s = io[rows[i].dev_index].sums[rows[i].key.sub];
			double sum = fams[f].metric == FST_H_IO_BYTES  ? (double)s.bytes :
				     fams[f].metric == FST_H_IO_Q2C_US ? s.q2c_ns / 1e9 :
									 s.d2c_ns / 1e9;
			char lab[64];
			snprintf(lab, sizeof(lab), "device=\"%u:%u\",op=\"%s\"", FST_KDEV_MAJOR(rows[i].key.dev),
				 FST_KDEV_MINOR(rows[i].key.dev), op_name(rows[i].key.sub));
			histogram(b, fams[f].name, lab, rows[i].h.slots, sum, fams[f].metric == FST_H_IO_BYTES);
		}
	}
}

/* per device and op, which program counted each figure and where each latency started */
static void block_figure_info(struct jbuf *b, const struct expose_input *in, const struct dev_sources *src,
			      int nr_devs)
{
	family(b, "fstrace_block_figure_info", "gauge",
	       "1 for each traced device's block figure of an op: its basis (exact: every completion counted; "
	       "windows_sample: the issue hook's, attached only in --budget's windows, so the histogram is the windows' "
	       "requests, a sample of the distribution whose counts are not the device's) and source (block_rq_done: "
	       "the completion alone, --budget; block_rq_complete: with the issue hook's in-flight state; a latency: "
	       "issue_hook, or the request's own start_time_ns / io_start_time_ns read at completion).");
	for (int d = 0; d < nr_devs; d++)
		for (__u32 sub = 0; sub < FST_IO_SUBS; sub++) {
			if (!src[d].requests[sub] && sub != FST_IO_READ)
				continue;
			const char *counted = src[d].exact_path ? "block_rq_done" : "block_rq_complete";
			const char *figs[][3] = {
				{ "requests", counted, dev_count_basis(&src[d]) },
				{ "bytes", counted, dev_count_basis(&src[d]) },
				{ "q2c", dev_lat_source_names[src[d].q2c[sub]], dev_lat_basis(src[d].q2c[sub]) },
				{ "d2c", dev_lat_source_names[src[d].d2c[sub]], dev_lat_basis(src[d].d2c[sub]) },
			};
			for (unsigned k = 0; k < sizeof(figs) / sizeof(figs[0]); k++)
				jb_add(b,
				       "fstrace_block_figure_info{device=\"%u:%u\",op=\"%s\",figure=\"%s\",basis=\"%s\","
				       "source=\"%s\"} 1\n",
				       FST_KDEV_MAJOR(in->devs[d]), FST_KDEV_MINOR(in->devs[d]), op_name(sub), figs[k][0],
				       figs[k][2], figs[k][1]);
		}
}

static void block_alignment(struct jbuf *b, const struct expose_input *in, const struct fst_dev_io *io, int nr_devs)
{
	struct jbuf al = {}, au = {}, ac = {};
	for (int d = 0; d < nr_devs; d++) {
		const struct fst_align a = io[d].align;
		if (!a.nr) /* as the counters come: a device's once it completed a request */
			continue;
		unsigned ma = FST_KDEV_MAJOR(in->devs[d]), mi = FST_KDEV_MINOR(in->devs[d]);
		jb_add(&al, "fstrace_block_aligned_4k_total{device=\"%u:%u\",edge=\"start\"} %llu\n", ma, mi,
		       (unsigned long long)a.start_4k);
		jb_add(&al, "fstrace_block_aligned_4k_total{device=\"%u:%u\",edge=\"end\"} %llu\n", ma, mi,
		       (unsigned long long)a.end_4k);
		jb_add(&au, "fstrace_block_aligned_unit_total{device=\"%u:%u\",edge=\"start\"} %llu\n", ma, mi,
		       (unsigned long long)a.start_unit);
		jb_add(&au, "fstrace_block_aligned_unit_total{device=\"%u:%u\",edge=\"end\"} %llu\n", ma, mi,
		       (unsigned long long)a.end_unit);
		jb_add(&ac, "fstrace_block_unit_crossing_total{device=\"%u:%u\"} %llu\n", ma, mi,
		       (unsigned long long)a.cross_unit);
	}
	family(b, "fstrace_block_aligned_4k_total", "counter",
	       "Completed block requests whose start (or end) offset is a multiple of 4 KiB.");
	jb_add(b, "%s", al.s ? al.s : "");
	family(b, "fstrace_block_aligned_unit_total", "counter",
	       "Completed block requests whose start (or end) is a multiple of the device's unit (--dev MAJ:MIN:UNIT).");
	jb_add(b, "%s", au.s ? au.s : "");
	family(b, "fstrace_block_unit_crossing_total", "counter",
	       "Completed block requests spanning a unit boundary they do not start on.");
	jb_add(b, "%s", ac.s ? ac.s : "");
	free(al.s);
	free(au.s);
	free(ac.s);
}

static void block(struct jbuf *b, const struct expose_input *in)
{
	static struct hist_row rows[MAX_HIST_KEYS];
	static struct fst_dev_io io[MAX_EXPOSED_DEVS];
	static struct dev_sources src[MAX_EXPOSED_DEVS];
	int nr_devs = in->nr_devs < MAX_EXPOSED_DEVS ? in->nr_devs : MAX_EXPOSED_DEVS;
	int n = block_rows(rows, io, src, in, nr_devs);
	block_device_info(b, in, nr_devs);
	block_histograms(b, rows, n, io);
	block_figure_info(b, in, src, nr_devs);
	block_alignment(b, in, io, nr_devs);
	block_unseen(b, in, io);
}

static void drops_and_probes(struct jbuf *b, const struct expose_maps *m, const struct expose_probes *groups,
			     int ngroups)
{
	family(b, "fstrace_request_window_fraction", "gauge",
	       "Share of the time since start that the request hooks were attached (--budget windows, window.c); 1 "
	       "when always attached. Request counts are of that share: divide their rates by it to estimate all.");
	jb_add(b, "fstrace_request_window_fraction %.6f\n", window_fraction(now_ns(CLOCK_MONOTONIC)));
	family(b, "fstrace_request_windows_total", "counter", "Windows the request hooks were attached in (--budget).");
	jb_add(b, "fstrace_request_windows_total %u\n", window_count());
	family(b, "fstrace_request_windows_without_calls_total", "counter",
	       "Windows whose traced processes' read and write counts are unknown (a look at them at one of its edges "
	       "failed, or they cannot be read: then every window), left out of the estimates weighted by calls.");
	jb_add(b, "fstrace_request_windows_without_calls_total %u\n", window_calls_unknown());
	family(b, "fstrace_call_count_looks_failed_total", "counter",
	       "Looks at the traced processes' read and write counts (--budget's weights) that failed; the next look "
	       "takes what one missed.");
	jb_add(b, "fstrace_call_count_looks_failed_total %u\n", window_failed_looks());
	double always = window_always_on_share();
	if (always >= 0) { /* known only from windows: nothing is written while none has closed */
		family(b, "fstrace_always_on_cpu_share", "gauge",
		       "Share of busy CPU time fstrace's programs attached all the time (block requests, filesystem and "
		       "workqueue events) took, by BPF run-time statistics in the --budget windows; beside the budget.");
		jb_add(b, "fstrace_always_on_cpu_share %.6f\n", always);
	}
	family(b, "fstrace_collector_cpu_seconds_total", "counter",
	       "CPU time the collector process itself used (user and system, every thread; not its BPF programs' "
	       "run in other tasks): reading the ring buffer, the --budget windows, writing this exposition.");
	jb_add(b, "fstrace_collector_cpu_seconds_total %.6f\n", self_cpu_ns() / 1e9);
	family(b, "fstrace_dropped_records_total", "counter",
	       "Records the kernel could not queue (ring buffer full), by record type.");
#define DROP_LINE(c, v, n) \
	jb_add(b, "fstrace_dropped_records_total{type=\"%s\"} %llu\n", n, (unsigned long long)percpu_u64(m->drops, c));
	FST_REC_TYPES(DROP_LINE)
#undef DROP_LINE
	family(b, "fstrace_losses_total", "counter",
	       "Work the kernel side left untraced, by why: an in-flight table was full, or an end event never "
	       "came (the results header's losses).");
#define LOSS_LINE(c, v, n) \
	jb_add(b, "fstrace_losses_total{what=\"%s\"} %llu\n", n, (unsigned long long)percpu_u64(m->losses, c));
	FST_LOSSES(LOSS_LINE)
#undef LOSS_LINE
	family(b, "fstrace_unaggregated_requests_total", "counter",
	       "Requests that reached user space as records because the in-kernel aggregate was full: not counted above.");
	jb_add(b, "fstrace_unaggregated_requests_total %llu\n", expose_unaggregated_requests);
	family(b, "fstrace_expired_in_flight_total", "counter",
	       "Bios and block requests expired from a full in-flight table: no end seen in FST_STALE_NS.");
	jb_add(b, "fstrace_expired_in_flight_total{what=\"bio\"} %llu\n", expose_expired_bios);
	jb_add(b, "fstrace_expired_in_flight_total{what=\"request\"} %llu\n", expose_expired_requests);
	family(b, "fstrace_probe_info", "gauge", "1 for every probe, with the tier it is attached at (or unavailable).");
	for (int g = 0; g < ngroups; g++)
		for (int i = 0; i < groups[g].n; i++)
			jb_add(b, "fstrace_probe_info{probe=\"%s\",tier=\"%s\"} 1\n", groups[g].probes[i].name,
			       tier_name(groups[g].probes[i].tier));
	/* events the kernel did not deliver to a program (its recursion guard: the program was already running
	 * on that CPU); an unseen context switch shows as the "missed" part of the requests */
	family(b, "fstrace_probe_missed_runs_total", "counter",
	       "Runs of an attached probe's programs the kernel skipped (events fstrace did not see).");
	for (int g = 0; g < ngroups; g++)
		for (int i = 0; i < groups[g].n; i++) {
			const struct probe *p = &groups[g].probes[i];
			if (p->tier == FST_TIER_NONE || !p->prog)
				continue;
			unsigned long long missed = 0;
			struct bpf_program *progs[2] = { p->prog, p->exit_prog };
			for (int k = 0; k < 2; k++) {
				struct bpf_prog_info info = {};
				__u32 len = sizeof(info);
				if (progs[k] && !bpf_obj_get_info_by_fd(bpf_program__fd(progs[k]), &info, &len))
					missed += info.recursion_misses;
			}
			jb_add(b, "fstrace_probe_missed_runs_total{probe=\"%s\"} %llu\n", p->name, missed);
		}
}

/*
 * path, atomically (a temporary file in its directory, then rename); 0 or a negative errno.  The temporary
 * file is a new one of a random name (mkostemp: O_CREAT|O_EXCL), never an existing path: a fixed name would
 * follow a symlink someone who can write the directory planted there, and truncate its target as root.
 */
static int write_atomic(const char *path, const char *data, size_t len)
{
	char *tmp;
	if (asprintf(&tmp, "%s.tmp.XXXXXX", path) < 0)
		return -ENOMEM;
	int fd = mkostemp(tmp, O_CLOEXEC);
	int err = 0;
	if (fd < 0) {
		err = -errno;
	} else {
		if (fchmod(fd, 0644)) /* readable by the exporter that reads the directory, as the file was */
			err = -errno;
		size_t off = 0;
		while (!err && off < len) {
			ssize_t w = write(fd, data + off, len - off);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				err = -errno;
				break;
			}
			off += w;
		}
		if (close(fd) && !err)
			err = -errno;
		if (!err && rename(tmp, path))
			err = -errno;
		if (err)
			unlink(tmp);
	}
	free(tmp);
	return err;
}

/* the labels' part of an exposition: the kernel's rows read first, as a device's labels change
 * (refresh_fs_labels) against what they hold now */
static void labels_now(const struct expose_input *in)
{
	read_requests(in->maps.req_agg, in->maps.agg_keys, in->sdevs, in->nr_sdevs);
	read_per_comm(in->maps.comm_agg);
	labels_filtered = in->nr_sdevs > 0;
	refresh_fs_labels(&(struct kernel_rows){ .req = kernel_req, .nr_req = nr_kernel_req, .comm = kernel_comm, .nr_comm = nr_kernel_comm });
}

/* whether kdev has a label, current or retired (fs_label makes one only for a device with none) */
static bool labelled(__u32 kdev)
{
	for (int i = 0; i < nr_fs_labels; i++)
		if (fs_labels[i].kdev == kdev)
			return true;
	return false;
}

/*
 * Whether the kernel's request rows name a device that has no label yet, from their keys alone (no row's per-CPU
 * values copied), and those walked only where agg_keys_given moved at this look or the last: a key is handed out
 * before it is in agg_keys, so one handed out as this look walks them may show only at the next.
 */
static bool unlabelled_devices(const struct expose_input *in)
{
	static __u32 given_seen[2]; /* agg_keys_given at the last two looks */
	if (nr_fs_labels == MAX_FS_LABELS || in->maps.req_agg < 0)
		return false;
	if (in->agg_keys_given) {
		__u32 given = *in->agg_keys_given;
		bool same = given == given_seen[0] && given == given_seen[1];
		given_seen[1] = given_seen[0];
		given_seen[0] = given;
		if (same)
			return false;
	}
	struct fst_req_agg_key key, next;
	void *prev = NULL;
	while (!bpf_map_get_next_key(in->maps.agg_keys, prev, &next)) {
		key = next;
		prev = &key;
		if (!labelled(key.sdev))
			return true;
	}
	return false;
}

void expose_follow_labels(const struct expose_input *in)
{
	if (mount_table_changed() || unlabelled_devices(in))
		labels_now(in);
}

int expose_write(const char *path, const char *om_path, const struct expose_input *in)
{
	static struct jbuf b, om; /* reused: their sizes settle at the exposition's, so memory stays flat */
	b.len = 0;
	labels_now(in);
	requests(&b);
	per_comm(&b, in->maps.comm_agg);
	filesystems(&b);
	decompressions(&b);
	block(&b, in);
	drops_and_probes(&b, &in->maps, in->groups, in->ngroups);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	family(&b, "fstrace_start_time_seconds", "gauge", "When the collector started (its counters start at 0 then).");
	jb_add(&b, "fstrace_start_time_seconds %.3f\n", in->start_time_s);
	family(&b, "fstrace_last_update_time_seconds", "gauge", "When this exposition was written.");
	jb_add(&b, "fstrace_last_update_time_seconds %.3f\n", now.tv_sec + now.tv_nsec / 1e9);

	int err = write_atomic(path, b.s, b.len);
	if (!err && om_path) {
		openmetrics_of(&om, b.s, b.len, in->start_time_s);
		err = write_atomic(om_path, om.s, om.len);
	}
	return err;
}
