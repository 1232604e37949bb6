/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The sampling tier (perf events running sample.bpf.c) and kernel stacks folded into the header's
 * "sampling", "offcpu" and "io_stacks" (root first, "a;b;c", symbols from ksyms.c).
 */
#ifndef FSTRACE_STACKS_H
#define FSTRACE_STACKS_H

#include <stdbool.h>
#include <linux/types.h>
#include "jsonw.h"

struct block_bpf;
struct sample_bpf;

int attach_sampling(struct sample_bpf *smp, int hz);
void detach_sampling(void);
/* --budget: sampling on only while the request hooks are (a sample outside a request is of no use) */
void sampling_enable(bool on);

/* a block request's queue stack id (from its record): its stack goes into "io_stacks" */
void note_io_stack(__s32 id);

/* "sampling": folded stacks with counts (smp NULL: {"hz": 0, "why_off": why_off}) */
json *json_sampling(struct sample_bpf *smp, int hz, const char *why_off);
/* "offcpu": [stack, reason, ns] for every off-CPU interval of traced tasks inside requests */
json *json_offcpu(struct block_bpf *blk);
/* "io_stacks": {stack id: folded stack} of the noted ids */
json *json_io_stacks(struct block_bpf *blk);

#endif
