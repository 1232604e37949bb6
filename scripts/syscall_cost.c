// SPDX-License-Identifier: GPL-2.0
/*
 * What a syscall costs a task fstrace does not trace: getppid (no file at all), and a 4 KiB pread of the first
 * page of each file named (a page-cache hit), in ns per call.  Each figure is the least of REPS batches (of N
 * getppid calls, of P preads): the batch least disturbed by the rest of the system, which is what the hooks
 * themselves add to.  scripts/vmtest.py runs it in the guests with nothing attached and with each
 * request-boundary tier attached.
 *
 * usage: syscall-cost [-n N] [-p P] [-r REPS] [FILE...]; prints "getppid NS" and "pread FILE NS" lines
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = 100000, p = 10000, reps = 5;
	int c;
	while ((c = getopt(argc, argv, "n:p:r:")) != -1) {
		if (c == 'n')
			n = atol(optarg);
		else if (c == 'p')
			p = atol(optarg);
		else if (c == 'r')
			reps = atol(optarg);
		else
			return 2;
	}
	if (n <= 0 || p <= 0 || reps <= 0) {
		fprintf(stderr, "syscall-cost: -n, -p and -r want positive numbers\n");
		return 2;
	}
	double best = -1;
	for (long r = 0; r < reps; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
		double per = (now_ns() - t0) / n;
		best = best < 0 || per < best ? per : best;
	}
	printf("getppid %.1f\n", best);
	static char buf[4096];
	for (int a = optind; a < argc; a++) {
		int fd = open(argv[a], O_RDONLY);
		if (fd < 0 || pread(fd, buf, sizeof(buf), 0) < 0) {
			fprintf(stderr, "syscall-cost: %s: %m\n", argv[a]);
			return 1;
		}
		best = -1;
		for (long r = 0; r < reps; r++) {
			double t0 = now_ns();
			for (long i = 0; i < p; i++)
				if (pread(fd, buf, sizeof(buf), 0) < 0)
					return 1;
			double per = (now_ns() - t0) / p;
			best = best < 0 || per < best ? per : best;
		}
		printf("pread %s %.1f\n", argv[a], best);
		close(fd);
	}
	return 0;
}
