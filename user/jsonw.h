/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The results header is built as a json-c object tree (libjson-c, linked statically) and written once: no
 * comma bookkeeping or splicing by hand.  These are the few shorthands the builders use; an allocation
 * failure aborts, as the collector does for every allocation.
 */
#ifndef FSTRACE_JSONW_H
#define FSTRACE_JSONW_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <linux/types.h>
#include <json-c/json.h>

typedef struct json_object json;

static inline json *jchk(json *o)
{
	if (!o)
		abort();
	return o;
}

static inline json *jobj(void) { return jchk(json_object_new_object()); }
static inline json *jarr(void) { return jchk(json_object_new_array()); }
static inline json *ju64(uint64_t v) { return jchk(json_object_new_uint64(v)); }
static inline json *ji64(int64_t v) { return jchk(json_object_new_int64(v)); }
static inline json *jstr(const char *s) { return jchk(json_object_new_string(s)); }
static inline json *jstr_or_null(const char *s) { return s ? jstr(s) : NULL; } /* NULL is JSON null */
static inline json *jbool(bool v) { return jchk(json_object_new_boolean(v)); }

/* o[key] = v (v NULL: null); keys are written in the order they are set */
static inline json *jset(json *o, const char *key, json *v)
{
	if (json_object_object_add(o, key, v))
		abort();
	return v;
}

/* a[] += v */
static inline json *jpush(json *a, json *v)
{
	if (json_object_array_add(a, v))
		abort();
	return v;
}

/* n 64-bit counters as an array */
static inline json *ju64_array(const __u64 *v, int n)
{
	json *a = jchk(json_object_new_array_ext(n));
	for (int i = 0; i < n; i++)
		jpush(a, ju64(v[i]));
	return a;
}

/* the header's text: compact, and "/" left as it is */
#define JSONW_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

#endif
