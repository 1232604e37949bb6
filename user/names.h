/* SPDX-License-Identifier: GPL-2.0 */
/*
 * records.h's names by value: each function is one switch generated from its X-macro, so a name is written once
 * (in records.h) and the collector's header, exposition and stacks print the same one.  A value records.h does
 * not name gets the fallback each function says.
 */
#ifndef FSTRACE_NAMES_H
#define FSTRACE_NAMES_H

#include <linux/types.h>
#include "records.h"

/* FST_TIERS; "unknown" */
const char *tier_name(enum fst_tier t);
/* FST_FIGURES: a figure's id as the results header names it; "unknown" */
const char *figure_name(enum fst_figure f);
/* FST_REQ_KINDS; "unknown" */
const char *kind_name(unsigned kind);
/* FST_IO_OPS: a block histogram's op (its sub); "other" */
const char *op_name(__u32 sub);
/* FST_FILESYSTEMS; "unknown" */
const char *fs_name(unsigned fs);
/* FST_DEV_LEVELS: what a traced block device is to the traced filesystems; "device" */
const char *dev_level_name(unsigned level);
/* FST_ALGS; "unknown" */
const char *alg_name(unsigned alg);
/* FST_WORK_KINDS; "filesystem work" (a work item of a kind records.h does not name) */
const char *work_kind_name(unsigned kind);
/* FST_TRACER_SITES; "unknown" */
const char *tracer_site_name(unsigned site);
/* FST_PARTS: a part's field in the request records and aggregates ("io_wait_ns"); "unknown" */
const char *part_field_name(unsigned part);

#endif
