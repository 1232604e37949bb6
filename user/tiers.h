/* SPDX-License-Identifier: GPL-2.0 */
#ifndef FSTRACE_TIERS_H
#define FSTRACE_TIERS_H

#include <stdbool.h>
#include <bpf/libbpf.h>
#include <bpf/btf.h>
#include "records.h"

/* Best first.  The collector picks, per probe, the first tier the running kernel offers. */
enum tier {
	TIER_FENTRY,
	TIER_KPROBE,
	TIER_TP_BTF,
	TIER_RAW_TP,
	TIER_MAX,
	TIER_NONE = TIER_MAX,
};

struct probe {
	const char *name;		  /* kernel function or tracepoint */
	enum fst_figure figure;		  /* the figure it measures (records.h FST_FIGURES): how it is found */
	const char *measures;		  /* that figure in words, for people */
	const char *progs[TIER_MAX];	  /* program name in the object per tier, NULL = no such variant */
	const char *exit_progs[TIER_MAX]; /* its exit twin (fexit, kretprobe), if the tier needs one */
	bool required;			  /* the run cannot go on without it */
	/* filled by tier selection and attach */
	enum tier tier;
	char why[256]; /* why better tiers were not used, or why it is unavailable */
	struct bpf_program *prog, *exit_prog;
	struct bpf_link *link, *exit_link;
	int empty_fd[2], empty_link_fd[2]; /* tiers_attach_empty: programs and links, 0 = none */
	unsigned long long misses;	   /* runs the kernel skipped (recursion guard), read at the end */
	unsigned long long runs;	   /* runs, counted only with kernel.bpf_stats_enabled=1 */
	unsigned long long run_ns;	   /* time in the program over those runs (same condition) */
};

const char *tier_name(enum tier t);

/* Choose each probe's tier and set autoload of every candidate program in obj accordingly. */
void tiers_select(struct bpf_object *obj, struct probe *probes, int n, bool no_btf_tp, bool no_fentry);

/* Attach the chosen programs; an optional probe that fails to attach becomes unavailable. */
int tiers_attach(struct probe *probes, int n);
void tiers_detach(struct probe *probes, int n);

/*
 * The benchmark floor (--empty-programs): attach, at every hook the chosen programs would use, a program of
 * the same type and attach point that only returns.  kprobe tiers are not covered (a kprobe needs a libbpf
 * program object per target); their probes are reported unavailable with that reason.
 */
int tiers_attach_empty(struct probe *probes, int n);

/* Position (from 0) of func's parameter named param, from the BTF of vmlinux or a module; -1 = unknown. */
int func_param_index(const char *func, const char *param);
/* Does vmlinux BTF carry the typed tracepoint btf_trace_<tp>? */
bool tp_btf_exists(const char *tp);

#endif
