// SPDX-License-Identifier: GPL-2.0
/*
 * user/options.c: what a command line sets, and the one line (exit 2) each wrong option gets, before anything is
 * loaded.  A failing parse exits, so each is run in a child whose standard error comes back through a pipe.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "env.h"

static struct options defaults;

static int parse(char **argv)
{
	int argc = 0;
	while (argv[argc])
		argc++;
	opt = defaults;
	optind = 0; /* glibc: start getopt afresh, as for a new process */
	parse_args(argc, argv);
	return argc;
}

/* run parse(argv) in a child: its exit status (99 when parse_args returned) and what it wrote on fd (stderr or
 * stdout) */
static int parse_in_child_fd(char **argv, int fd, char *err, size_t size)
{
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(fds[1], fd);
		close(fds[0]);
		parse(argv);
		_exit(99);
	}
	close(fds[1]);
	size_t got = 0;
	ssize_t n;
	while (got + 1 < size && (n = read(fds[0], err + got, size - 1 - got)) > 0)
		got += n;
	err[got] = 0;
	close(fds[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static int parse_in_child(char **argv, char *err, size_t size) { return parse_in_child_fd(argv, 2, err, size); }

static void a_full_command_line(void **state)
{
	char *argv[] = { "fstrace-collect", "-o", "/tmp/r.fst", "--duration", "2.5", "--budget", "1", "--records",
			 "none", "--per-comm", "--sample-hz", "99", "--sdev", "8:0=0:25", "--sdev", "7:3",
			 "--comm", "fio", "--exposition", "/tmp/e", "--openmetrics", "/tmp/o", "--", "cat", "x", NULL };
	parse(argv);
	assert_string_equal(opt.out, "/tmp/r.fst");
	assert_true(opt.duration == 2.5 && opt.budget_pct == 1);
	assert_true(opt.records_none && !opt.records_all && opt.per_comm);
	assert_int_equal(opt.sample_hz, 99);
	assert_int_equal(opt.nr_sdevs, 2);
	assert_true(opt.sdevs[0][0] == 8 && opt.sdevs[0][1] == 0 && opt.stat_devs[0][0] == 0 && opt.stat_devs[0][1] == 25);
	assert_true(opt.sdevs[1][0] == 7 && opt.sdevs[1][1] == 3 && opt.stat_devs[1][0] == 0 && opt.stat_devs[1][1] == 0);
	assert_string_equal(opt.comm, "fio");
	assert_string_equal(opt.exposition, "/tmp/e");
	assert_string_equal(opt.openmetrics, "/tmp/o");
	assert_non_null(opt.cmd);
	assert_string_equal(opt.cmd[0], "cat");
	assert_string_equal(opt.cmd[1], "x");
	assert_null(opt.cmd[2]);
}

/* the defaults a bare command line keeps */
static void defaults_stay(void **state)
{
	char *argv[] = { "fstrace-collect", "-o", "r.fst", "true", NULL };
	parse(argv);
	assert_true(opt.budget_pct == 100 && opt.record_over_us == 1000 && opt.exposition_interval == 5);
	assert_int_equal(opt.ready_fd, -1);
	assert_false(opt.records_none || opt.records_all || opt.check);
	assert_string_equal(opt.cmd[0], "true");
}

/* --empty-programs measures the hooks' floor: no sampling timer of fstrace's own */
static void empty_programs_turn_sampling_off(void **state)
{
	char *argv[] = { "fstrace-collect", "-o", "r", "--sample-hz", "99", "--empty-programs", "true", NULL };
	parse(argv);
	assert_int_equal(opt.sample_hz, 0);
	assert_true(opt.empty_programs);
}

static void check_exits_zero_and_loads_nothing(void **state)
{
	char err[512];
	char *argv[] = { "fstrace-collect", "--check", "--duration", "1", NULL };
	assert_int_equal(parse_in_child(argv, err, sizeof(err)), 0);
	assert_string_equal(err, "");
}

static const struct refused {
	const char *args[6];
	const char *line;
} refused[] = {
	{ { "-o", "r", "--duration", "0" }, "--duration wants a number of seconds above 0 (at most 1e+08), got '0'" },
	{ { "-o", "r", "--duration", "nan" }, "--duration wants a number of seconds above 0 (at most 1e+08), got 'nan'" },
	{ { "-o", "r", "--interval", "1e9" }, "--interval wants a number of seconds above 0 (at most 1e+08), got '1e9'" },
	{ { "-o", "r", "--budget", "0" }, "--budget wants a number above 0 and at most 100, got '0'" },
	{ { "-o", "r", "--window-duty", "1.5" }, "--window-duty wants a number above 0 and at most 1, got '1.5'" },
	{ { "-o", "r", "--sample-hz", "100001" }, "--sample-hz wants a whole number from 0 to 100000, got '100001'" },
	{ { "-o", "r", "--pid", "0" }, "--pid wants a whole number from 1 to 2147483647, got '0'" },
	{ { "-o", "r", "--records", "some" }, "--records wants all, slow or none, got 'some'" },
	{ { "-o", "r", "--io-stacks", "x" }, "--io-stacks wants all or sampled, got 'x'" },
	{ { "-o", "r", "--comm", "sixteen_chars_xx" },
	  "--comm 'sixteen_chars_x...' (16 bytes): a task name has 1 to 15 characters" },
	{ { "-o", "r", "--record-over-us", "-1" }, "--record-over-us wants a number of microseconds >= 0, got '-1'" },
	{ { "-o", "r", "--sdev", "4096:0" },
	  "--sdev wants MAJ:MIN or MAJ:MIN=MAJ:MIN (major < 4096, minor < 1048576), got '4096:0'" },
	{ { "-o", "r", "--sdev", "8:-1" },
	  "--sdev wants MAJ:MIN or MAJ:MIN=MAJ:MIN (major < 4096, minor < 1048576), got '8:-1'" },
	{ { "-o", "r", "--dev", "8:0:100" },
	  "--dev wants MAJ:MIN[:UNIT[:LEVEL]] (major < 4096, minor < 1048576, UNIT 512 to 1073741824 bytes, LEVEL "
	  "one of device disk loop backing), got '8:0:100'" },
	{ { "-o", "r", "--dev", "8:0:4096:tape" },
	  "--dev wants MAJ:MIN[:UNIT[:LEVEL]] (major < 4096, minor < 1048576, UNIT 512 to 1073741824 bytes, LEVEL "
	  "one of device disk loop backing), got '8:0:4096:tape'" },
	{ { "-o", "r", "--ready-fd", "1000000" }, "--ready-fd 1000000: not an open file descriptor" },
	{ { "-o", "r", "--cgroup", "/proc" }, "--cgroup /proc: not a cgroup v2 directory" },
	{ { "-o", "r", "--exposition", "" }, "--exposition wants a file name" },
	{ { "-o", "r", "--offcpu-sample-us", "4000001" },
	  "--offcpu-sample-us wants a whole number from 0 to 4000000, got '4000001'" },
	{ { "-o", "r", "--exposition-interval", "0" },
	  "--exposition-interval wants a number of seconds above 0 (at most 1e+08), got '0'" },
	{ { "-o", "r", "--per-comm" }, "--per-comm needs --records none" },
	{ { "--exposition", "e", "--openmetrics", "o" }, NULL }, /* accepted: see below */
	{ { "-o", "r", "--openmetrics", "o" }, "--openmetrics needs --exposition" },
	{ { "--duration", "1" }, "-o FILE is required (see --help)" },
	{ { "-o", "r", "--bogus" }, "unknown option --bogus (see --help)" },
	{ { "-o", "r", "-x" }, "unknown option -x (see --help)" },
	{ { "-o", "r", "--duration" }, "--duration needs a value (see --help)" },
};

/* each wrong option: exit 2 and exactly one line, "fstrace-collect: " and what is wrong */
static void wrong_options_get_one_line(void **state)
{
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char *argv[8] = { "fstrace-collect" };
		int n = 1;
		for (; refused[i].args[n - 1]; n++)
			argv[n] = (char *)refused[i].args[n - 1];
		argv[n] = NULL;
		char err[1024];
		int status = parse_in_child(argv, err, sizeof(err));
		if (!refused[i].line) {
			assert_int_equal(status, 99);
			continue;
		}
		char want[600];
		snprintf(want, sizeof(want), "fstrace-collect: %s", refused[i].line);
		if (status != 2 || strncmp(err, want, strlen(want)) || !strchr(err, '\n') ||
		    strchr(err, '\n')[1])
			fail_msg("case %zu (%s %s): exit %d, stderr '%s', wanted one line starting '%s'", i,
				 refused[i].args[0], refused[i].args[2] ? refused[i].args[2] : "", status, err, want);
	}
}

/* each option without a value sets its own field (the option table's flags) */
static void every_flag_sets_its_field(void **state)
{
	char *argv[] = { "fstrace-collect", "-o", "r", "--progress", "--no-tp-btf", "--block-only", "--no-fentry",
			 "--no-io-records", "--records", "none", "--per-comm", "--empty-programs",
			 "--syscall-boundaries", "true", NULL };
	parse(argv);
	assert_true(opt.progress && opt.no_btf_tp && opt.block_only && opt.no_fentry && opt.no_io_records);
	assert_true(opt.per_comm && opt.empty_programs && opt.syscall_bounds);
	assert_false(opt.check);
}

/* the short options and the values they set, as their long names do */
static void short_options_set_what_long_ones_do(void **state)
{
	char *argv[] = { "fstrace-collect", "-o", "r", "-m", "meta.json", "-c", "dd", "-i", "0.5", "-D", "3", "-s",
			 "259:1", "true", NULL };
	parse(argv);
	assert_string_equal(opt.meta_file, "meta.json");
	assert_string_equal(opt.comm, "dd");
	assert_true(opt.interval == 0.5 && opt.duration == 3);
	assert_true(opt.nr_sdevs == 1 && opt.sdevs[0][0] == 259 && opt.sdevs[0][1] == 1);
}

/* every --NAME the help text shows is one the parser takes: none of them is an unknown option */
static void help_names_only_options_the_parser_takes(void **state)
{
	static char help[16384];
	char *argv[] = { "fstrace-collect", "--help", NULL };
	assert_int_equal(parse_in_child_fd(argv, 1, help, sizeof(help)), 0);
	assert_true(!strncmp(help, "usage: fstrace-collect", 22));
	int names = 0;
	for (const char *p = strstr(help, "--"); p; p = strstr(p + 2, "--")) {
		char name[64] = "--";
		size_t n = strspn(p + 2, "abcdefghijklmnopqrstuvwxyz-");
		if (!n || n + 3 > sizeof(name))
			continue;
		memcpy(name + 2, p + 2, n);
		name[n + 2] = 0;
		char err[512];
		char *args[] = { "fstrace-collect", "--check", name, NULL };
		parse_in_child(args, err, sizeof(err));
		if (strstr(err, "unknown option"))
			fail_msg("--help shows %s, which the parser does not take: %s", name, err);
		names++;
	}
	assert_true(names >= 30);
}

int main(void)
{
	defaults = opt;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_full_command_line),
		cmocka_unit_test(defaults_stay),
		cmocka_unit_test(empty_programs_turn_sampling_off),
		cmocka_unit_test(check_exits_zero_and_loads_nothing),
		cmocka_unit_test(wrong_options_get_one_line),
		cmocka_unit_test(every_flag_sets_its_field),
		cmocka_unit_test(short_options_set_what_long_ones_do),
		cmocka_unit_test(help_names_only_options_the_parser_takes),
	};
	return cmocka_run_group_tests_name("options", tests, NULL, NULL);
}
