/* SPDX-License-Identifier: GPL-2.0 */
#ifndef FSTRACE_LIVE_H
#define FSTRACE_LIVE_H

#include <stdio.h>
#include <linux/types.h>

/*
 * A top-like view of the last interval, computed in the collector from the
 * records it is writing anyway, so it works on a target box without Python.
 */
#include <stdbool.h>
#include "records.h"

void live_add(const void *rec, size_t size);
/* the counted requests (requests.bpf.c req_agg and agg_keys, req_agg_fd < 0: none) since the last call join the
 * view's interval */
void live_counted(int req_agg_fd, int agg_keys_fd);
void live_print(FILE *out, double interval_s, unsigned long long drops, int clear);

#endif
