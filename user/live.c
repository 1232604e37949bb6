// SPDX-License-Identifier: GPL-2.0
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <bpf/bpf.h>
#include "aggregates.h"
#include "records.h"
#include "live.h"

#define TOP_SLOTS 512
#define TOP_SHOWN 5

struct top_entry {
	uint64_t key; /* tgid, or sdev << 40 ^ ino */
	uint64_t io_wait_ns;
	uint64_t requests;
	uint32_t sdev;
	uint64_t ino;
	char comm[16];
	int used;
};

/* the last interval: recorded requests and, from the kernel's counts, the page-cache hits it only counted;
 * latencies of both in records.h's log-linear slots, so the percentiles are within 1/16 of the value */
static struct {
	uint64_t reqs, read_bytes, ios, io_bytes;
	uint64_t parts[FST_NR_PARTS];
	uint64_t lat_slots[FST_LAT_SLOTS];
	struct top_entry procs[TOP_SLOTS], files[TOP_SLOTS];
} L;

static struct top_entry *top_slot(struct top_entry *t, uint64_t key)
{
	for (unsigned i = 0, h = (unsigned)(key * 0x9E3779B97F4A7C15ull >> 40); i < TOP_SLOTS; i++) {
		struct top_entry *e = &t[(h + i) % TOP_SLOTS];
		if (!e->used) {
			e->used = 1;
			e->key = key;
			return e;
		}
		if (e->key == key)
			return e;
	}
	return NULL; /* table full for this interval: the tail is not shown */
}

void live_add(const void *data, size_t size)
{
	const uint32_t *hdr = data;
	if (size < 8)
		return;
	if (hdr[0] == FST_REC_IO && size >= sizeof(struct fst_io)) {
		const struct fst_io *io = data;
		L.ios++;
		L.io_bytes += io->bytes;
		return;
	}
	if (hdr[0] != FST_REC_REQ || size < sizeof(struct fst_req))
		return;
	const struct fst_req *r = data;
	L.reqs++;
	if (r->kind == FST_REQ_READ && r->ret > 0)
		L.read_bytes += r->ret;
#define PART_ADD(c, v, field, ...) L.parts[v] += r->field;
	FST_PARTS(PART_ADD)
#undef PART_ADD
	L.lat_slots[fst_loglin_slot(r->ts_end_ns - r->ts_start_ns)]++;

	struct top_entry *p = top_slot(L.procs, r->tgid);
	if (p) {
		p->io_wait_ns += r->io_wait_ns;
		p->requests++;
		memcpy(p->comm, r->comm, sizeof(p->comm));
	}
	if (r->ino) {
		struct top_entry *f = top_slot(L.files, ((uint64_t)r->sdev << 40) ^ r->ino);
		if (f) {
			f->io_wait_ns += r->io_wait_ns;
			f->requests++;
			f->sdev = r->sdev;
			f->ino = r->ino;
		}
	}
}

/* requests the kernel counted instead of recording, since the last call (read: they were reads) */
static void live_add_counted(const struct fst_req_agg *delta, bool read)
{
	L.reqs += delta->count;
	if (read)
		L.read_bytes += delta->bytes;
	for (int i = 0; i < FST_NR_PARTS; i++)
		L.parts[i] += delta->part_ns[i];
	for (int i = 0; i < FST_LAT_SLOTS; i++)
		L.lat_slots[i] += delta->wall_ns_loglin[i];
}

/* the latency (us, a slot's midpoint) below which a share q of the interval's requests fell */
static double lat_quantile_us(uint64_t n, double q)
{
	uint64_t want = (uint64_t)(q * (n - 1)) + 1, seen = 0;
	for (int i = 0; i < FST_LAT_SLOTS; i++) {
		seen += L.lat_slots[i];
		if (seen >= want) {
			if (i < (1 << FST_LAT_SUB_BITS))
				return i / 1e3;
			int e = i / (1 << FST_LAT_SUB_BITS) + FST_LAT_SUB_BITS - 1, m = i % (1 << FST_LAT_SUB_BITS);
			return ((double)((uint64_t)(2 * ((1 << FST_LAT_SUB_BITS) + m) + 1) << (e - FST_LAT_SUB_BITS)) / 2) / 1e3;
		}
	}
	return 0;
}

static int cmp_wait(const void *a, const void *b)
{
	const struct top_entry *x = a, *y = b;
	if (x->used != y->used)
		return y->used - x->used;
	return x->io_wait_ns < y->io_wait_ns ? 1 : (x->io_wait_ns > y->io_wait_ns ? -1 : 0);
}

/*
 * A task name as the terminal may show it: any process sets its own (prctl PR_SET_NAME), so every byte that is
 * not printable ASCII (control bytes, escape sequences, C1 controls in UTF-8) is written \xNN.
 */
static const char *printable_comm(const char *comm, char out[16 * 4 + 1])
{
	char *o = out;
	for (int i = 0; i < 16 && comm[i]; i++) {
		unsigned char c = comm[i];
		if (c < 0x20 || c >= 0x7f || c == '\\')
			o += sprintf(o, "\\x%02x", c);
		else
			*o++ = c;
	}
	*o = 0;
	return out;
}

void live_print(FILE *out, double interval_s, unsigned long long drops, int clear)
{
	char stamp[16];
	time_t now = time(NULL);
	strftime(stamp, sizeof(stamp), "%H:%M:%S", localtime(&now));
	if (clear)
		fprintf(out, "\033[H\033[2J");
	fprintf(out, "fstrace %s  requests/s %.0f  read MiB/s %.1f  block req/s %.0f (%.1f MiB/s)  dropped %llu\n", stamp,
		L.reqs / interval_s, L.read_bytes / interval_s / 1048576.0, L.ios / interval_s,
		L.io_bytes / interval_s / 1048576.0, drops);
	uint64_t n = 0;
	for (int i = 0; i < FST_LAT_SLOTS; i++)
		n += L.lat_slots[i];
	if (n)
		fprintf(out, "  latency p50 %.1f us  p99 %.1f us  max %.1f us\n", lat_quantile_us(n, 0.5),
			lat_quantile_us(n, 0.99), lat_quantile_us(n, 1.0));
	uint64_t total = 0;
	for (int i = 0; i < FST_NR_PARTS; i++)
		total += L.parts[i];
	if (total) {
		static const char *names[FST_NR_PARTS] = {
#define PART_NAME(c, v, field, ...) [v] = #field,
			FST_PARTS(PART_NAME)
#undef PART_NAME
		};
		fprintf(out, "  time in requests:");
		for (int i = 0; i < FST_NR_PARTS; i++)
			fprintf(out, " %.*s %.0f%%", (int)strlen(names[i]) - 3, names[i], 100.0 * L.parts[i] / total);
		fprintf(out, "\n");
	}
	qsort(L.procs, TOP_SLOTS, sizeof(L.procs[0]), cmp_wait);
	qsort(L.files, TOP_SLOTS, sizeof(L.files[0]), cmp_wait);
	fprintf(out, "  %-8s %-16s %12s %9s      %-9s %-12s %12s %9s\n", "TGID", "COMM", "IO_WAIT_MS", "REQS", "DEV",
		"INODE", "IO_WAIT_MS", "REQS");
	for (int i = 0; i < TOP_SHOWN; i++) {
		const struct top_entry *p = &L.procs[i], *f = &L.files[i];
		if (!p->used && !f->used)
			break;
		char comm[16 * 4 + 1];
		if (p->used)
			fprintf(out, "  %-8llu %-16s %12.1f %9llu", (unsigned long long)p->key, printable_comm(p->comm, comm),
				p->io_wait_ns / 1e6, (unsigned long long)p->requests);
		else
			fprintf(out, "  %-8s %-16s %12s %9s", "", "", "", "");
		if (f->used) {
			char dev[16];
			snprintf(dev, sizeof(dev), "%u:%u", FST_KDEV_MAJOR(f->sdev), FST_KDEV_MINOR(f->sdev));
			fprintf(out, "      %-9s %-12llu %12.1f %9llu", dev, (unsigned long long)f->ino,
				f->io_wait_ns / 1e6, (unsigned long long)f->requests);
		}
		fprintf(out, "\n");
	}
	fflush(out);
	memset(&L, 0, sizeof(L));
}

/* the live view's share of the counted requests: what each (kind, dev) count grew by since the last view */
void live_counted(int fd, int keys_fd)
{
	static struct {
		struct fst_req_agg_key key;
		struct fst_req_agg seen;
	} last[FST_REQ_AGG_MAX];
	static int nlast;
	if (fd < 0)
		return;
	struct fst_req_agg_key key;
	struct fst_req_agg sum;
	struct req_agg_iter it;
	req_agg_start(&it, fd, keys_fd);
	while (req_agg_next(&it, &key, &sum)) {
		int i = 0;
		while (i < nlast && memcmp(&last[i].key, &key, sizeof(key)))
			i++;
		if (i == FST_REQ_AGG_MAX)
			continue; /* more keys than the map holds: cannot happen */
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
