// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel's function symbols from /proc/kallsyms: work-function addresses the programs are configured
 * with, and the names of the frames of folded kernel stacks (fstrace's own programs marked).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "collect.h"
#include "ksyms.h"

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

/* the kernel's function symbols, read once: work-function addresses at start, stack symbols at the end */
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
		bpf_object__for_each_program(p, objs[i]) {
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
