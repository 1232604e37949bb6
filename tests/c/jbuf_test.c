// SPDX-License-Identifier: GPL-2.0
/* user/jbuf.c: appends land whole and in order however the buffer grows, and the text stays NUL-terminated. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "jbuf.h"

/* many appends of growing pieces against the same text written by snprintf into one large array */
static void appends_match_one_snprintf(void **state)
{
	struct jbuf b = { 0 };
	static char want[1 << 20];
	size_t at = 0;
	for (int i = 0; i < 5000; i++) {
		jb_add(&b, "%d:%.*s;", i, i % 97, "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz"
						  "0123456789abcdefghijklmnopqrstuvwxyz");
		at += snprintf(want + at, sizeof(want) - at, "%d:%.*s;", i, i % 97,
			       "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz"
			       "0123456789abcdefghijklmnopqrstuvwxyz");
	}
	assert_int_equal(b.len, at);
	assert_int_equal(strlen(b.s), at);
	assert_memory_equal(b.s, want, at + 1);
	free(b.s);
}

/* one piece larger than everything before it (the growth is by what is asked, not a fixed step) */
static void one_large_piece(void **state)
{
	struct jbuf b = { 0 };
	jb_add(&b, "x");
	char *big = malloc(300000);
	memset(big, 'y', 299999);
	big[299999] = 0;
	jb_add(&b, "%s", big);
	assert_int_equal(b.len, 300000);
	assert_true(b.s[0] == 'x' && b.s[1] == 'y' && b.s[299999] == 'y' && b.s[300000] == 0);
	free(big);
	free(b.s);
}

/* an empty append leaves an empty, terminated string (the exposition starts from one) */
static void empty_append(void **state)
{
	struct jbuf b = { 0 };
	jb_add(&b, "%s", "");
	assert_int_equal(b.len, 0);
	assert_non_null(b.s);
	assert_string_equal(b.s, "");
	free(b.s);
}

/* emptied by len = 0 and refilled, as the exposition does every interval */
static void reuse_after_emptying(void **state)
{
	struct jbuf b = { 0 };
	jb_add(&b, "first %d", 1);
	b.len = 0;
	jb_add(&b, "second");
	assert_string_equal(b.s, "second");
	free(b.s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(appends_match_one_snprintf),
		cmocka_unit_test(one_large_piece),
		cmocka_unit_test(empty_append),
		cmocka_unit_test(reuse_after_emptying),
	};
	return cmocka_run_group_tests_name("jbuf", tests, NULL, NULL);
}
