/* SPDX-License-Identifier: GPL-2.0 */
#ifndef FSTRACE_KSYMS_H
#define FSTRACE_KSYMS_H

#include <stdbool.h>

struct bpf_object;

/* fstrace's own programs in folded stacks: "[fstrace] <program>" (the results header carries the prefix) */
#define TRACER_FRAME_PREFIX "[fstrace] "

/* read /proc/kallsyms once (function symbols) */
void load_ksyms(void);
/* add the loaded BPF programs' symbols: objs' programs get TRACER_FRAME_PREFIX, other tools' keep their names */
void add_bpf_ksyms(struct bpf_object **objs, int nobjs);
/* the symbol at or below ip, "[unknown]" when none */
const char *ksym_name(unsigned long long ip);
/* a function's address by name, 0 when the kernel has none (from the whole /proc/kallsyms) */
unsigned long long ksym_addr(const char *name);
/* addresses of n functions by name, asked of the kernel where it can answer; true when it did */
bool ksym_addrs(const char *const *names, unsigned long long *addrs, int n);

#endif
