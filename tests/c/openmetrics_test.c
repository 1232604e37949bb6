// SPDX-License-Identifier: GPL-2.0
/*
 * user/openmetrics.c against the OpenMetrics 1.0 specification: families named without _total or _info, info
 * and unit metadata, _created after every counter and histogram series, le labels as canonical numbers
 * (1e+06 as Go's and Python's clients print it), help with its double quotes escaped, # EOF last.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "openmetrics.h"

static void check(const char *classic, const char *want)
{
	struct jbuf om = { 0 };
	openmetrics_of(&om, classic, strlen(classic), 1700000000.25);
	assert_non_null(om.s);
	assert_string_equal(om.s, want);
	free(om.s);
}

static void counter_gets_family_name_and_created(void **state)
{
	check("# HELP fstrace_reads_total Reads \"seen\" by it.\n"
	      "# TYPE fstrace_reads_total counter\n"
	      "fstrace_reads_total{fs=\"erofs\"} 7\n"
	      "fstrace_reads_total{fs=\"a b\"} 8\n",
	      "# TYPE fstrace_reads counter\n"
	      "# HELP fstrace_reads Reads \\\"seen\\\" by it.\n"
	      "fstrace_reads_total{fs=\"erofs\"} 7\n"
	      "fstrace_reads_created{fs=\"erofs\"} 1700000000.250\n"
	      "fstrace_reads_total{fs=\"a b\"} 8\n"
	      "fstrace_reads_created{fs=\"a b\"} 1700000000.250\n"
	      "# EOF\n");
}

static void histogram_gets_unit_canonical_le_and_created(void **state)
{
	check("# HELP fstrace_read_seconds Read latency.\n"
	      "# TYPE fstrace_read_seconds histogram\n"
	      "fstrace_read_seconds_bucket{fs=\"erofs\",le=\"0.0001\"} 1\n"
	      "fstrace_read_seconds_bucket{fs=\"erofs\",le=\"1\"} 2\n"
	      "fstrace_read_seconds_bucket{fs=\"erofs\",le=\"1000000\"} 3\n"
	      "fstrace_read_seconds_bucket{fs=\"erofs\",le=\"+Inf\"} 4\n"
	      "fstrace_read_seconds_sum{fs=\"erofs\"} 0.5\n"
	      "fstrace_read_seconds_count{fs=\"erofs\"} 4\n",
	      "# TYPE fstrace_read_seconds histogram\n"
	      "# UNIT fstrace_read_seconds seconds\n"
	      "# HELP fstrace_read_seconds Read latency.\n"
	      "fstrace_read_seconds_bucket{fs=\"erofs\",le=\"0.0001\"} 1\n"
	      "fstrace_read_seconds_bucket{fs=\"erofs\",le=\"1.0\"} 2\n"
	      "fstrace_read_seconds_bucket{fs=\"erofs\",le=\"1e+06\"} 3\n"
	      "fstrace_read_seconds_bucket{fs=\"erofs\",le=\"+Inf\"} 4\n"
	      "fstrace_read_seconds_sum{fs=\"erofs\"} 0.5\n"
	      "fstrace_read_seconds_count{fs=\"erofs\"} 4\n"
	      "fstrace_read_seconds_created{fs=\"erofs\"} 1700000000.250\n"
	      "# EOF\n");
}

static void info_gauge_and_plain_gauge(void **state)
{
	check("# HELP fstrace_build_info What ran.\n"
	      "# TYPE fstrace_build_info gauge\n"
	      "fstrace_build_info{version=\"1\"} 1\n"
	      "# HELP fstrace_inflight_bytes Bytes in flight.\n"
	      "# TYPE fstrace_inflight_bytes gauge\n"
	      "fstrace_inflight_bytes 4096\n",
	      "# TYPE fstrace_build info\n"
	      "# HELP fstrace_build What ran.\n"
	      "fstrace_build_info{version=\"1\"} 1\n"
	      "# TYPE fstrace_inflight_bytes gauge\n"
	      "# UNIT fstrace_inflight_bytes bytes\n"
	      "# HELP fstrace_inflight_bytes Bytes in flight.\n"
	      "fstrace_inflight_bytes 4096\n"
	      "# EOF\n");
}

/* nothing exposed yet is still a whole exposition */
static void empty_text_is_just_eof(void **state)
{
	check("", "# EOF\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(counter_gets_family_name_and_created),
		cmocka_unit_test(histogram_gets_unit_canonical_le_and_created),
		cmocka_unit_test(info_gauge_and_plain_gauge),
		cmocka_unit_test(empty_text_is_just_eof),
	};
	return cmocka_run_group_tests_name("openmetrics", tests, NULL, NULL);
}
