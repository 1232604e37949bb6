// SPDX-License-Identifier: GPL-2.0
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "jbuf.h"
#include "names.h"
#include "results.h"

/* Field tables generated from the X-macros in records.h: the one definition of each layout. */
static void field(json *a, const char *name, const char *type, size_t offset, size_t size)
{
	json *f = jpush(a, jobj());
	jset(f, "name", jstr(name));
	jset(f, "type", jstr(type));
	jset(f, "offset", ju64(offset));
	jset(f, "size", ju64(size));
}
#define FIELD_JSON(t, n) field(a, #n, #t, offsetof(rec_t, n), sizeof(((rec_t *)0)->n));
#define STRING_JSON(n, len) field(a, #n, "char", offsetof(rec_t, n), len);
#define DEFINE_LAYOUT(lname, rstruct, FIELDS)           \
	static json *layout_##lname(void)               \
	{                                               \
		typedef rstruct rec_t;                  \
		json *a = jarr();                       \
		FST_REC_HEADER(FIELD_JSON, STRING_JSON) \
		FIELDS(FIELD_JSON, STRING_JSON)         \
		return a;                               \
	}

DEFINE_LAYOUT(req, struct fst_req, FST_REQ_FIELDS)
DEFINE_LAYOUT(io, struct fst_io, FST_IO_FIELDS)
DEFINE_LAYOUT(decomp, struct fst_decomp, FST_DECOMP_FIELDS)
DEFINE_LAYOUT(work, struct fst_work, FST_WORK_FIELDS)
DEFINE_LAYOUT(task, struct fst_task, FST_TASK_FIELDS)
DEFINE_LAYOUT(erofs, struct fst_erofs, FST_EROFS_FIELDS)
DEFINE_LAYOUT(fs_cache, struct fst_fs_cache, FST_FS_CACHE_FIELDS)
DEFINE_LAYOUT(compress, struct fst_compress, FST_COMPRESS_FIELDS)
DEFINE_LAYOUT(fs_read, struct fst_fs_read, FST_FS_READ_FIELDS)

/* every record type the results file can hold: its size and field table */
static const struct rec_type {
	int type;
	size_t size;
	json *(*layout)(void);
} rec_types[] = {
	{ FST_REC_REQ, sizeof(struct fst_req), layout_req },
	{ FST_REC_IO, sizeof(struct fst_io), layout_io },
	{ FST_REC_DECOMP, sizeof(struct fst_decomp), layout_decomp },
	{ FST_REC_WORK, sizeof(struct fst_work), layout_work },
	{ FST_REC_TASK, sizeof(struct fst_task), layout_task },
	{ FST_REC_EROFS, sizeof(struct fst_erofs), layout_erofs },
	{ FST_REC_FS_CACHE, sizeof(struct fst_fs_cache), layout_fs_cache },
	{ FST_REC_COMPRESS, sizeof(struct fst_compress), layout_compress },
	{ FST_REC_FS_READ, sizeof(struct fst_fs_read), layout_fs_read },
};
#define NR_REC_TYPES (int)(sizeof(rec_types) / sizeof(rec_types[0]))

static void enum_value(json *e, int v, const char *name)
{
	char k[16];
	snprintf(k, sizeof(k), "%d", v);
	jset(e, k, jstr(name));
}
#define ENUM_JSON(c, v, n) enum_value(e, v, n);
#define ENUM_OBJ(name, X)                        \
	do {                                     \
		json *e = jset(o, name, jobj()); \
		X(ENUM_JSON)                     \
	} while (0)

/* the enumerations in records.h: {"req_kind": {"1": "read", ...}, ...} */
static json *enums_json(void)
{
	json *o = jobj();
	ENUM_OBJ("rec_type", FST_REC_TYPES);
	ENUM_OBJ("req_kind", FST_REQ_KINDS);
	ENUM_OBJ("charge", FST_CHARGES);
	ENUM_OBJ("dev_level", FST_DEV_LEVELS);
	ENUM_OBJ("hist_metric", FST_HIST_METRICS);
	ENUM_OBJ("fs", FST_FILESYSTEMS);
	ENUM_OBJ("alg", FST_ALGS);
	ENUM_OBJ("context", FST_CONTEXTS);
	ENUM_OBJ("tier", FST_TIERS);
	ENUM_OBJ("work_kind", FST_WORK_KINDS);
	ENUM_OBJ("offcpu_reason", FST_OFFCPU_REASONS);
	ENUM_OBJ("erofs_event", FST_EROFS_EVENTS);
	ENUM_OBJ("erofs_map_flag", FST_EROFS_MAP_FLAGS);
	ENUM_OBJ("fs_cache", FST_FS_CACHES);
	{
#define PART_JSON(c, v, field, ...) ENUM_JSON(c, v, #field)
#define FST_PARTS_JSON(E) FST_PARTS(PART_JSON)
		ENUM_OBJ("part", FST_PARTS_JSON);
#undef FST_PARTS_JSON
#undef PART_JSON
	}
	ENUM_OBJ("io_op", FST_IO_OPS);
	ENUM_OBJ("figure", FST_FIGURES);
	return o;
}

/*
 * What the analysis reads of records.h beyond the record layouts and the enumerations, so that it reads it from
 * the file rather than from a records.h of another day: the attribution parts in index order (the bench tables'
 * column each is summed into, its colour in plots, its meaning), the figures that are per-unit decompression (or
 * copy) times, the counted requests' histogram layout and how many (superblock, kind) pairs they can be counted
 * for, the figures that belong to one filesystem (FST_FS_FIGURES), and the read amplification figures the analysis
 * derives (FST_AMPLIFICATION).
 */
static json *schema_json(void)
{
	json *o = jobj(), *parts = jset(o, "parts", jarr()), *decomp = jset(o, "decomp_figures", jarr());
#define PART_JSON(c, v, field, group, colour, meaning) \
	do {                                           \
		json *p = jpush(parts, jobj());        \
		jset(p, "field", jstr(#field));        \
		jset(p, "group", jstr(group));         \
		jset(p, "colour", jstr(colour));       \
		jset(p, "meaning", jstr(meaning));     \
	} while (0);
	FST_PARTS(PART_JSON)
#undef PART_JSON
#define DECOMP_JSON(c, v, n) jpush(decomp, jstr(n));
	FST_DECOMP_FIGURES(DECOMP_JSON)
#undef DECOMP_JSON
	jset(o, "lat_sub_bits", ji64(FST_LAT_SUB_BITS));
	jset(o, "lat_slots", ji64(FST_LAT_SLOTS));
	jset(o, "hist_slots", ji64(FST_HIST_SLOTS));
	jset(o, "req_agg_max", ji64(FST_REQ_AGG_MAX)); /* (superblock, kind) pairs the kernel can count requests of */
	json *figure_fs = jset(o, "figure_fs", jobj());
#define FIGURE_FS_JSON(fig, fs) jset(figure_fs, figure_name(fig), jstr(fs_name(fs)));
	FST_FS_FIGURES(FIGURE_FS_JSON)
#undef FIGURE_FS_JSON
	json *amp = jset(o, "amplification", jarr());
#define AMP_JSON(c, v, n, meaning)                 \
	do {                                       \
		json *a = jpush(amp, jobj());      \
		jset(a, "name", jstr(n));          \
		jset(a, "meaning", jstr(meaning)); \
	} while (0);
	FST_AMPLIFICATION(AMP_JSON)
#undef AMP_JSON
	return o;
}

#define REC_NAME_CASE(c, v, n) \
	case c: return n;
static const char *rec_name(int type)
{
	switch (type) {
		FST_REC_TYPES(REC_NAME_CASE)
	}
	return NULL;
}

static uint32_t rec_size(int type)
{
	for (int i = 0; i < NR_REC_TYPES; i++)
		if (rec_types[i].type == type)
			return rec_types[i].size;
	return 0;
}

/* the record layouts: {"req": {"type": 1, "size": ..., "fields": [...]}, "io": {...}} */
static json *records_layout_json(void)
{
	json *o = jobj();
	for (int i = 0; i < NR_REC_TYPES; i++) {
		json *r = jset(o, rec_name(rec_types[i].type), jobj());
		jset(r, "type", ji64(rec_types[i].type));
		jset(r, "size", ju64(rec_types[i].size));
		jset(r, "fields", rec_types[i].layout());
	}
	return o;
}

/*
 * Each spool's stdio buffer.  stdio's own is a page: at tens of thousands of records a second that is a write(2)
 * per few dozen records, each a filesystem write path.  glibc and musl take a size only with a buffer, so it is
 * allocated here.
 */
#define SPOOL_BUFFER_BYTES (256 * 1024)

/* an unlinked file in the directory dir_fd, written through buf (SPOOL_BUFFER_BYTES) if not NULL: nothing is left
 * behind if we die */
static FILE *unlinked_file(int dir_fd, char *buf)
{
	int fd = openat(dir_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	for (int tries = 0; fd < 0 && tries < 100; tries++) { /* a filesystem without O_TMPFILE */
		char name[64];
		snprintf(name, sizeof(name), ".fstrace-spool-%d-%ld", getpid(), random());
		fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0)
			unlinkat(dir_fd, name, 0);
		else if (errno != EEXIST)
			return NULL;
	}
	if (fd < 0)
		return NULL;
	FILE *f = fdopen(fd, "w+");
	if (!f) {
		close(fd);
		return NULL;
	}
	if (buf && setvbuf(f, buf, _IOFBF, SPOOL_BUFFER_BYTES)) {
		fclose(f);
		return NULL;
	}
	return f;
}

int trusted_dir_open(const char *dir, const char **why)
{
	struct stat st;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		int err = -errno;
		close(fd);
		return err;
	}
	/* a sticky directory of root's (/tmp): no one else can rename or remove what is made in it, and nothing in it is
	 * followed (a temporary's name taken fails, results.fst is replaced, never written through) */
	bool sticky = st.st_uid == 0 && st.st_mode & S_ISVTX;
	*why = st.st_uid != geteuid() && !sticky	   ? "it is owned by another user" :
	       st.st_mode & (S_IWGRP | S_IWOTH) && !sticky ? "others may write to it" :
							     NULL;
	if (*why) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

int results_open(struct results *r, const char *path, const char **why)
{
	memset(r, 0, sizeof(*r));
	r->path = path;
	char *copy = strdup(path), *dir_copy = strdup(path);
	if (!copy || !dir_copy)
		abort();
	r->base = path + (strlen(path) - strlen(basename(copy)));
	r->dir_fd = trusted_dir_open(dirname(dir_copy), why);
	free(copy);
	free(dir_copy);
	if (r->dir_fd < 0)
		return r->dir_fd;
	for (int t = 1; t < FST_MAX_REC_TYPES; t++) {
		if (!rec_name(t))
			continue;
		r->spools[t].rec_size = rec_size(t);
		r->spools[t].buf = malloc(SPOOL_BUFFER_BYTES);
		r->spools[t].f = r->spools[t].buf ? unlinked_file(r->dir_fd, r->spools[t].buf) : NULL;
		if (!r->spools[t].f) {
			int err = -errno;
			results_discard(r);
			return err;
		}
	}
	return 0;
}

int results_add(struct results *r, const void *data, size_t size)
{
	const uint32_t *hdr = data;
	if (size < 8) {
		r->bad_records++;
		return 0;
	}
	uint32_t type = hdr[0];
	if (type >= FST_MAX_REC_TYPES || !r->spools[type].f || hdr[1] != r->spools[type].rec_size ||
	    size < r->spools[type].rec_size) {
		r->bad_records++;
		return 0;
	}
	if (fwrite(data, r->spools[type].rec_size, 1, r->spools[type].f) != 1)
		return -errno;
	r->spools[type].count++;
	return 0;
}

/* the spool's bytes to `to`, or with to == NULL their CRC32 into *crc (the header, written first, holds it) */
static int copy_spool(FILE *from, FILE *to, uint32_t *crc)
{
	char buf[1 << 16];
	size_t n;
	if (fflush(from) || fseek(from, 0, SEEK_SET))
		return -errno;
	while ((n = fread(buf, 1, sizeof(buf), from)) > 0) {
		if (!to)
			*crc = crc32(*crc, (const Bytef *)buf, n);
		else if (fwrite(buf, 1, n, to) != n)
			return -errno;
	}
	return ferror(from) ? -EIO : 0;
}

int results_finish(struct results *r, json *header)
{
	FILE *out = unlinked_file(r->dir_fd, NULL); /* written in large pieces (copy_spool) */
	if (!out) {
		int err = -errno;
		results_discard(r);
		return err;
	}

	/* sections: offsets are relative to the start of the data area */
	jset(header, "records", records_layout_json());
	jset(header, "enums", enums_json());
	jset(header, "schema", schema_json());
	json *sections = jset(header, "sections", jarr());
	uint64_t off = 0;
	int err = 0;
	for (int t = 1; t < FST_MAX_REC_TYPES; t++) {
		if (!r->spools[t].f)
			continue;
		/* summed here, once tracing is over, rather than per record while the ring buffer is drained */
		if (!err)
			err = copy_spool(r->spools[t].f, NULL, &r->spools[t].crc);
		json *sec = jpush(sections, jobj());
		jset(sec, "record", jstr(rec_name(t)));
		jset(sec, "offset", ju64(off));
		jset(sec, "count", ju64(r->spools[t].count));
		jset(sec, "size", ju64(r->spools[t].rec_size));
		jset(sec, "crc32", ju64(r->spools[t].crc));
		off += r->spools[t].count * r->spools[t].rec_size;
	}
	jset(header, "bad_records", ju64(r->bad_records));
	size_t hlen;
	const char *text = json_object_to_json_string_length(header, JSONW_FLAGS, &hlen);
	if (!text)
		abort();
	struct jbuf h = { .s = strdup(text), .len = hlen };
	if (!h.s)
		abort();

	/* magic, version, header length: the header CRC covers them too */
	unsigned char pre[16];
	uint32_t ver = FST_RESULTS_FORMAT, len = h.len;
	memcpy(pre, FST_RESULTS_MAGIC, 8);
	memcpy(pre + 8, &ver, 4);
	memcpy(pre + 12, &len, 4);
	uint32_t hcrc = crc32(crc32(0, pre, sizeof(pre)), (const Bytef *)h.s, h.len);
	static const char pad[8];
	size_t head = sizeof(pre) + 4 + h.len;
	if (!err && (fwrite(pre, sizeof(pre), 1, out) != 1 || fwrite(&hcrc, 4, 1, out) != 1 ||
		     fwrite(h.s, h.len, 1, out) != 1 || (head % 8 && fwrite(pad, 8 - head % 8, 1, out) != 1)))
		err = -errno;
	free(h.s);
	for (int t = 1; !err && t < FST_MAX_REC_TYPES; t++)
		if (r->spools[t].f)
			err = copy_spool(r->spools[t].f, out, NULL);
	/* 0640: results hold other users' commands, paths and stacks */
	if (!err && (fflush(out) || fchmod(fileno(out), 0640) || fsync(fileno(out))))
		err = -errno;
	if (!err) {
		char proc[64], tmp[4096];
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fileno(out));
		snprintf(tmp, sizeof(tmp), ".%s.tmp.%d", r->base, getpid());
		if (linkat(AT_FDCWD, proc, r->dir_fd, tmp, AT_SYMLINK_FOLLOW) ||
		    renameat(r->dir_fd, tmp, r->dir_fd, r->base)) {
			err = -errno;
			unlinkat(r->dir_fd, tmp, 0);
		}
	}
	fclose(out);
	results_discard(r);
	return err;
}

void results_discard(struct results *r)
{
	for (int t = 0; t < FST_MAX_REC_TYPES; t++) {
		if (r->spools[t].f)
			fclose(r->spools[t].f);
		free(r->spools[t].buf); /* after its stream, which writes out of it as it closes */
		r->spools[t].f = NULL;
		r->spools[t].buf = NULL;
	}
	if (r->dir_fd > 0)
		close(r->dir_fd);
	r->dir_fd = -1;
}
