/* SPDX-License-Identifier: GPL-2.0 */
#ifndef FSTRACE_RESULTS_H
#define FSTRACE_RESULTS_H

#include <stdio.h>
#include <stdint.h>
#include <linux/types.h>
#include "records.h"
#include "jsonw.h"

/*
 * Results file (format 2):
 *   8 bytes  "FSTRACE\0"
 *   u32      format version
 *   u32      header length in bytes
 *   u32      CRC32 (zlib) of the 16 bytes above and the header
 *   header   JSON: everything a reader needs, including the layout of every
 *            record type (name, type, offset, size of each field) and, per
 *            record type, its section (offset from the data start, count,
 *            CRC32 of the section's bytes)
 *   padding  zeros to 8 bytes
 *   data     one contiguous array of fixed-size records per record type,
 *            the sections back to back in header order, nothing after them
 * Results travel between machines: the checksums let a reader say that a
 * damaged file is damaged instead of reporting wrong figures.  Format 1 was
 * the same without the header CRC and the sections' crc32; format 2 the same
 * without the header's "schema" (records.h's parts, decompression figures and counted-histogram layout, which
 * readers of format 2 keep as those collectors had them).
 * The file is created unlinked and linked into place only when complete, so a
 * crash or Ctrl-C never leaves a half-written results file.
 */
#define FST_RESULTS_MAGIC "FSTRACE"
#define FST_RESULTS_FORMAT 3

struct spool {
	FILE *f;
	char *buf; /* f's stdio buffer (results.c SPOOL_BUFFER_BYTES) */
	uint64_t count;
	uint32_t rec_size;
	uint32_t crc; /* CRC32 of the spooled records, once finished */
};

struct results {
	const char *path;
	int dir_fd;	  /* path's directory, opened once (trusted_dir_open): every file is made and linked relative to it */
	const char *base; /* path's last component */
	struct spool spools[FST_MAX_REC_TYPES];
	uint64_t bad_records; /* records whose size did not match their type */
};

/*
 * dir opened for root to write in (O_DIRECTORY | O_NOFOLLOW on its last component): a directory this user owns and
 * no one else may write to, as fstrace makes its results directories, or root's sticky one (/tmp); or a negative
 * errno, with *why saying what is wrong with it when that is not an error of open().
 */
int trusted_dir_open(const char *dir, const char **why);
/* a negative errno; *why set when path's directory is not one to write in (trusted_dir_open) */
int results_open(struct results *r, const char *path, const char **why);
/* append one record from the ring buffer to its type's spool */
int results_add(struct results *r, const void *data, size_t size);
/* add the record layouts, enums and sections to header, write it and all spooled records; link into place */
int results_finish(struct results *r, json *header);
void results_discard(struct results *r);

#endif
