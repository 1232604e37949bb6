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

static struct bench_helpers_bpf *s;
static struct ring_buffer *ring;
/* what a run for another process costs (it returns at once): taken out of each program's run time */
static double other_run_ns;

static int drop_record(void *ctx, void *data, size_t size) { return 0; }

/* the kernel's run time per run of this process (bpf_stats on) of one program, over a loop of syscalls; with
 * syscalls 0, the loop sleeps instead and other_run_ns is measured */
static double ns_per_run(struct bpf_program *p, int syscalls)
{
	struct bpf_link *l = bpf_program__attach(p);
	if (!l)
		return -1;
	struct bpf_prog_info a = {}, b = {};
	__u32 len = sizeof(a);
	__u64 own0 = s->bss->own_runs;
	bpf_obj_get_info_by_fd(bpf_program__fd(p), &a, &len);
	if (!syscalls)
		usleep(500000);
	for (int i = 0; i < syscalls; i++) {
		syscall(SYS_getppid);
		if (i % 1024 == 0) /* the ring read, so reservations keep succeeding (a full ring fails them) */
			ring_buffer__consume(ring);
	}
	len = sizeof(b);
	bpf_obj_get_info_by_fd(bpf_program__fd(p), &b, &len);
	__u64 own = s->bss->own_runs - own0;
	bpf_link__destroy(l);
	double runs = b.run_cnt - a.run_cnt, ns = b.run_time_ns - a.run_time_ns;
	if (!syscalls)
		return runs ? ns / runs : 0;
	return own ? (ns - (runs - own) * other_run_ns) / own : -1;
}

int main(void)
{
	s = bench_helpers_bpf__open();
	if (!s)
		return 1;
	s->rodata->tgid = getpid();
	if (bench_helpers_bpf__load(s)) {
		fprintf(stderr, "bench-helpers: loading the programs failed\n");
		return 1;
	}
	__u32 one = 1;
	static char zero[16 * 8 * 512]; /* a per-CPU value for up to 512 CPUs */
	bpf_map_update_elem(bpf_map__fd(s->maps.hash), &one, zero, BPF_ANY);
	bpf_map_update_elem(bpf_map__fd(s->maps.percpu_hash), &one, zero, BPF_ANY);
	ring = ring_buffer__new(bpf_map__fd(s->maps.ring), drop_record, NULL, NULL);
	int stats = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (stats < 0 || !ring) {
		fprintf(stderr, "bench-helpers: enabling BPF run-time statistics failed\n");
		return 1;
	}
	other_run_ns = ns_per_run(s->progs.empty, 0);
	double base = ns_per_run(s->progs.empty, SYSCALLS);
	printf("empty program on tp_btf/sys_enter: %.1f ns per run (the kernel's accounting included)\n", base);
	struct bpf_program *p;
	bpf_object__for_each_program (p, s->obj) {
		if (p == s->progs.empty)
			continue;
		double t = ns_per_run(p, SYSCALLS);
		if (t < 0)
			printf("%-24s attach failed\n", bpf_program__name(p));
		else
			printf("%-24s %6.1f ns per call\n", bpf_program__name(p), (t - base) / N_CALLS);
	}
	close(stats);
	ring_buffer__free(ring);
	bench_helpers_bpf__destroy(s);
	return 0;
}
