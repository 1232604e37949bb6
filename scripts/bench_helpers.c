// SPDX-License-Identifier: GPL-2.0
/* make bench-helpers: each helper's cost, from bench_helpers.bpf.c programs (see there) */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "bench_helpers.skel.h"

#define N_CALLS 8
#define SYSCALLS 2000000

/* the kernel's run time of one program per run (bpf_stats on), over a loop of syscalls of this process */
static double ns_per_run(struct bpf_program *p)
{
	struct bpf_link *l = bpf_program__attach(p);
	if (!l)
		return -1;
	struct bpf_prog_info a = {}, b = {};
	__u32 len = sizeof(a);
	bpf_obj_get_info_by_fd(bpf_program__fd(p), &a, &len);
	for (int i = 0; i < SYSCALLS; i++)
		syscall(SYS_getppid);
	len = sizeof(b);
	bpf_obj_get_info_by_fd(bpf_program__fd(p), &b, &len);
	bpf_link__destroy(l);
	return b.run_cnt > a.run_cnt ? (double)(b.run_time_ns - a.run_time_ns) / (b.run_cnt - a.run_cnt) : -1;
}

int main(void)
{
	struct bench_helpers_bpf *s = bench_helpers_bpf__open();
	if (!s)
		return 1;
	s->rodata->tgid = getpid();
	if (bench_helpers_bpf__load(s)) {
		fprintf(stderr, "bench-helpers: loading the programs failed\n");
		return 1;
	}
	__u32 one = 1;
	static char zero[16 * 8 * 512];	/* a per-CPU value for up to 512 CPUs */
	bpf_map_update_elem(bpf_map__fd(s->maps.hash), &one, zero, BPF_ANY);
	bpf_map_update_elem(bpf_map__fd(s->maps.percpu_hash), &one, zero, BPF_ANY);
	int stats = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (stats < 0) {
		fprintf(stderr, "bench-helpers: enabling BPF run-time statistics failed\n");
		return 1;
	}
	double base = ns_per_run(s->progs.empty);
	printf("empty program on tp_btf/sys_enter: %.1f ns per run (the kernel's accounting included)\n", base);
	struct bpf_program *p;
	bpf_object__for_each_program(p, s->obj) {
		if (p == s->progs.empty)
			continue;
		double t = ns_per_run(p);
		if (t < 0)
			printf("%-24s attach failed\n", bpf_program__name(p));
		else
			printf("%-24s %6.1f ns per call\n", bpf_program__name(p), (t - base) / N_CALLS);
	}
	close(stats);
	bench_helpers_bpf__destroy(s);
	return 0;
}
