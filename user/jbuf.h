/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A growing string: folded stacks, the exposition's text and its OpenMetrics twin, the results header's text.
 * The header itself is built with jsonw.h; this only holds text as it is printed.
 */
#ifndef FSTRACE_JBUF_H
#define FSTRACE_JBUF_H

#include <stddef.h>

struct jbuf {
	char *s; /* NUL-terminated once anything was added; NULL before */
	size_t len, cap;
};

/* b += printf(fmt, ...); an allocation failure aborts, as the collector does for every allocation */
void jb_add(struct jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
