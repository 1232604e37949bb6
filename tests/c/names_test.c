// SPDX-License-Identifier: GPL-2.0
/*
 * user/names.c: within each records.h enumeration every value has its own name (the analysis reads values back
 * by name from the results header, so two values of one name would merge there), and a value records.h does not
 * name gets the fallback the function promises, never another value's name.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>
#include "names.h"

#define MAX_VALUES 256

struct named {
	unsigned value[MAX_VALUES];
	int n;
};

#define VALUE_OF(c, v, ...) s.value[s.n++] = v;

/* the values of one records.h X-macro */
#define NAMED(xmacro)                   \
	({                              \
		struct named s = { 0 }; \
		xmacro(VALUE_OF) s;     \
	})

/*
 * every value's name: no two alike, and not the fallback except for the value records.h itself names so
 * (fallback_value; -1: none); a value past them all: the fallback
 */
static void check_names(const struct named *s, const char *(*name)(unsigned), const char *fallback,
			long fallback_value)
{
	assert_true(s->n > 0);
	unsigned past = 0;
	for (int i = 0; i < s->n; i++) {
		const char *a = name(s->value[i]);
		assert_non_null(a);
		assert_true(*a);
		if (!strcmp(a, fallback) && s->value[i] != fallback_value)
			fail_msg("value %u is named '%s', the fallback", s->value[i], a);
		for (int j = 0; j < i; j++)
			if (!strcmp(a, name(s->value[j])))
				fail_msg("values %u and %u are both named '%s'", s->value[j], s->value[i], a);
		if (s->value[i] >= past)
			past = s->value[i] + 1;
	}
	assert_string_equal(name(past), fallback);
	assert_string_equal(name(past + 1000), fallback);
}

static const char *tier_of(unsigned v) { return tier_name((enum fst_tier)v); }
static const char *figure_of(unsigned v) { return figure_name((enum fst_figure)v); }
static const char *op_of(unsigned v) { return op_name(v); }

static void tiers(void **state)
{
	struct named s = NAMED(FST_TIERS);
	check_names(&s, tier_of, "unknown", -1);
}

static void figures(void **state)
{
	struct named s = NAMED(FST_FIGURES);
	check_names(&s, figure_of, "unknown", -1);
}

static void request_kinds(void **state)
{
	struct named s = NAMED(FST_REQ_KINDS);
	check_names(&s, kind_name, "unknown", -1);
}

/* "other" is both an op's name and the fallback: an op records.h does not name is counted as other */
static void io_ops(void **state)
{
	assert_string_equal(op_of(FST_IO_READ), "read");
	assert_string_equal(op_of(FST_IO_WRITE), "write");
	assert_string_equal(op_of(FST_IO_OTHER), "other");
	assert_string_equal(op_of(FST_IO_OTHER + 1), "other");
}

static void levels_filesystems_algorithms_work_sites_parts(void **state)
{
	struct named levels = NAMED(FST_DEV_LEVELS), fs = NAMED(FST_FILESYSTEMS), algs = NAMED(FST_ALGS), work = NAMED(FST_WORK_KINDS),
		     sites = NAMED(FST_TRACER_SITES), parts = NAMED(FST_PARTS);
	check_names(&levels, dev_level_name, "device", FST_LEVEL_DEVICE);
	check_names(&fs, fs_name, "unknown", -1);
	check_names(&algs, alg_name, "unknown", FST_ALG_UNKNOWN);
	check_names(&work, work_kind_name, "filesystem work", -1);
	check_names(&sites, tracer_site_name, "unknown", -1);
	check_names(&parts, part_field_name, "unknown", -1);
	/* the request records' and aggregates' fields are nanoseconds, and say so */
	for (int i = 0; i < parts.n; i++) {
		const char *f = part_field_name(parts.value[i]);
		size_t len = strlen(f);
		if (len < 4 || strcmp(f + len - 3, "_ns"))
			fail_msg("part %u's field '%s' does not end in _ns", parts.value[i], f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tiers),
		cmocka_unit_test(figures),
		cmocka_unit_test(request_kinds),
		cmocka_unit_test(io_ops),
		cmocka_unit_test(levels_filesystems_algorithms_work_sites_parts),
	};
	return cmocka_run_group_tests_name("names", tests, NULL, NULL);
}
