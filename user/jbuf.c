// SPDX-License-Identifier: GPL-2.0
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "jbuf.h"

void jb_add(struct jbuf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		size_t room = b->cap - b->len;
		va_start(ap, fmt);
		int n = vsnprintf(b->s ? b->s + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < room) {
			b->len += n;
			return;
		}
		size_t cap = (b->cap + n + 1) * 2;
		char *s = realloc(b->s, cap);
		if (!s)
			abort();
		b->s = s;
		b->cap = cap;
	}
}
