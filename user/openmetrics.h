/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The OpenMetrics 1.0 text of a Prometheus text exposition (format 0.0.4), for scrapers that ask for
 * OpenMetrics: made from the classic text the exposition wrote, so that both say the same numbers.
 */
#ifndef FSTRACE_OPENMETRICS_H
#define FSTRACE_OPENMETRICS_H

#include <stddef.h>
#include "jbuf.h"

/* om (emptied first) := the OpenMetrics text of the classic exposition text[0..len); created: the counters'
 * _created time (the collector's start, in seconds since the epoch: they start at 0 then) */
void openmetrics_of(struct jbuf *om, const char *text, size_t len, double created);

#endif
