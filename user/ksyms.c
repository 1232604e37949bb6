// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel's function symbols: the work-function addresses the programs are configured with (asked of the
 * kernel, ksym_addrs, or from /proc/kallsyms where it cannot answer), and the names of the frames of folded
 * kernel stacks from /proc/kallsyms (fstrace's own programs marked).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "env.h"
#include "ksyms.h"
#include "ksyms.skel.h"

struct ksym {
	unsigned long long addr;
	char *name;
};
static struct ksym *ksyms;
static size_t nr_ksyms;

static int cmp_ksym(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* the kernel's function symbols from /proc/kallsyms, read once: for the stacks' symbols at the end, and for the
 * work-function addresses at start only where the kernel cannot be asked (ksym_addrs) */
void load_ksyms(void)
{
	if (ksyms)
		return;
	FILE *f = fopen("/proc/kallsyms", "r");
	if (!f)
		return;
	static char buf[1 << 16];
	setvbuf(f, buf, _IOFBF, sizeof(buf));
	char line[512], name[256], type;
	unsigned long long addr;
	size_t cap = 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || !addr)
			continue;
		if (type != 't' && type != 'T' && type != 'w' && type != 'W')
			continue;
		if (nr_ksyms == cap) {
			cap = cap ? cap * 2 : 65536;
			ksyms = realloc(ksyms, cap * sizeof(*ksyms));
			if (!ksyms)
				abort();
		}
		ksyms[nr_ksyms].addr = addr;
		ksyms[nr_ksyms++].name = strdup(name);
	}
	fclose(f);
	qsort(ksyms, nr_ksyms, sizeof(*ksyms), cmp_ksym);
}

/*
 * fstrace's own programs in the stacks: BPF programs are in kallsyms as bpf_prog_<tag>_<name> only once
 * loaded, after the first read of it; our programs (by tag) become "[fstrace] <name>" so the flamegraphs and
 * the sampled tracer share can tell the tracer's time apart, and other tools' programs keep their names.
 */

void add_bpf_ksyms(struct bpf_object **objs, int nobjs)
{
	char tags[1024][17];
	int ntags = 0;
	for (int i = 0; i < nobjs; i++) {
		struct bpf_program *p;
		if (!objs[i])
			continue;
		bpf_object__for_each_program (p, objs[i]) {
			struct bpf_prog_info info = {};
			__u32 len = sizeof(info);
			int fd = bpf_program__fd(p);
			if (fd < 0 || ntags == N(tags) || bpf_obj_get_info_by_fd(fd, &info, &len))
				continue;
			for (int b = 0; b < 8; b++)
				sprintf(tags[ntags] + 2 * b, "%02x", info.tag[b]);
			ntags++;
		}
	}
	FILE *f = fopen("/proc/kallsyms", "r");
	if (!f)
		return;
	char line[512], name[256], type;
	unsigned long long addr;
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, "[bpf]") || sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || !addr)
			continue;
		/*
		 * An fentry/fexit trampoline sits in the stack between the traced function and its body; without
		 * its own symbol its address took the name of whatever preceded it (a module function on 6.1, one
		 * of our programs on 6.12, which hid every sampled decompression under a traced function as tracer
		 * time). It is the kernel's, not a program of ours, and one name keeps the flamegraphs' stacks merged.
		 */
		if (!strncmp(name, "bpf_trampoline_", 15))
			strcpy(name, "[bpf trampoline]");
		else if (strncmp(name, "bpf_prog_", 9) || strlen(name) < 9 + 16 + 1)
			continue;
		char *sym = strdup(name);
		for (int t = 0; t < ntags; t++) {
			if (!strncmp(name + 9, tags[t], 16)) {
				free(sym);
				if (asprintf(&sym, TRACER_FRAME_PREFIX "%s", name + 9 + 17) < 0)
					sym = NULL;
				break;
			}
		}
		if (!sym)
			continue;
		ksyms = realloc(ksyms, (nr_ksyms + 1) * sizeof(*ksyms));
		if (!ksyms)
			abort();
		ksyms[nr_ksyms].addr = addr;
		ksyms[nr_ksyms++].name = sym;
	}
	fclose(f);
	qsort(ksyms, nr_ksyms, sizeof(*ksyms), cmp_ksym);
}

const char *ksym_name(unsigned long long ip)
{
	size_t lo = 0, hi = nr_ksyms;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (ksyms[mid].addr <= ip)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? ksyms[lo - 1].name : "[unknown]";
}

unsigned long long ksym_addr(const char *name)
{
	load_ksyms();
	for (size_t i = 0; i < nr_ksyms; i++)
		if (!strcmp(ksyms[i].name, name))
			return ksyms[i].addr;
	return 0;
}

/*
 * Addresses of a few functions by name (0: none), for the programs' configuration, which needs them before
 * load: asked of the kernel (ksyms.bpf.c, a syscall program: the kernel's kallsyms_lookup_name answers in
 * microseconds), else found in a read of all of /proc/kallsyms (tens of milliseconds).  Returns
 * whether the kernel answered.
 */
bool ksym_addrs(const char *const *names, unsigned long long *addrs, int n)
{
	/* a kernel without the helper (before 5.16) refuses the program: not an error, so not logged */
	libbpf_print_fn_t print = libbpf_set_print(NULL);
	/* FSTRACE_KSYMS_FROM_PROC: the fallback, on a kernel that has the helper (tests compare the two) */
	bool helper = n <= FST_KSYM_QUERIES && !getenv("FSTRACE_KSYMS_FROM_PROC");
	struct ksyms_bpf *s = helper ? ksyms_bpf__open_and_load() : NULL;
	libbpf_set_print(print);
	bool asked = false;
	if (s) {
		int fd = bpf_map__fd(s->maps.ksym_queries);
		asked = true;
		for (__u32 i = 0; i < (__u32)n && asked; i++) {
			struct fst_ksym_query q = {};
			strncpy(q.name, names[i], sizeof(q.name) - 1);
			asked = !bpf_map_update_elem(fd, &i, &q, BPF_ANY);
		}
		LIBBPF_OPTS(bpf_test_run_opts, run);
		asked = asked && !bpf_prog_test_run_opts(bpf_program__fd(s->progs.resolve_ksyms), &run);
		for (__u32 i = 0; i < (__u32)n && asked; i++) {
			struct fst_ksym_query q;
			asked = !bpf_map_lookup_elem(fd, &i, &q);
			addrs[i] = q.addr;
		}
		ksyms_bpf__destroy(s);
	}
	for (int i = 0; i < n && !asked; i++)
		addrs[i] = ksym_addr(names[i]);
	return asked;
}
