/* SPDX-License-Identifier: GPL-2.0 */
#ifndef FSTRACE_TIERS_H
#define FSTRACE_TIERS_H

#include <stdbool.h>
#include <stddef.h>
#include <bpf/libbpf.h>
#include <bpf/btf.h>
#include "records.h"

/*
 * A probe: the programs that can attach it, one per tier (records.h FST_TIERS, best first), reached through the
 * skeleton's typed fields: prog_at[t] is the offset in the object's skeleton of its struct bpf_program pointer
 * (PROBE_PROG), so a program the object lacks does not compile; 0 = no program at that tier.
 */
struct probe {
	const char *name;		   /* kernel function or tracepoint */
	const char *hook;		   /* the tracepoint, where a second probe on it has a name of its own */
	enum fst_figure figure;		   /* the figure it measures (records.h FST_FIGURES): how it is found */
	const char *measures;		   /* that figure in words, for people */
	size_t prog_at[FST_NR_TIERS];	   /* its program at each tier, as an offset in the skeleton */
	size_t exit_prog_at[FST_NR_TIERS]; /* its exit twin (fexit, kretprobe), if the tier needs one */
	bool required;			   /* the run cannot go on without it */
	bool budget_only;		   /* loaded and attached only under --budget (attach, serve) */
	bool windowed;			   /* under --budget, attached only around the request windows (window.c) */
	/* filled by tier selection and attach */
	enum fst_tier tier;
	char why[256]; /* why better tiers were not used, or why it is unavailable */
	struct bpf_program *prog, *exit_prog;
	struct bpf_link *link, *exit_link;
	int empty_fd[2], empty_link_fd[2]; /* tiers_attach_empty: programs and links, 0 = none */
	unsigned long long misses;	   /* runs the kernel skipped (recursion guard), read at the end */
	unsigned long long runs;	   /* runs, counted only with kernel.bpf_stats_enabled=1 */
	unsigned long long run_ns;	   /* time in the program over those runs (same condition) */
};

/* the program of a skeleton struct (a bpf_object__open_skeleton skeleton) as struct probe keeps it */
#define PROBE_PROG(skel, prog) offsetof(struct skel, progs.prog)

/* Choose each probe's tier and set autoload of every candidate program of skel (the object's skeleton struct,
 * the one the probes' offsets are in) accordingly. */
void tiers_select(const void *skel, struct probe *probes, int n, bool no_btf_tp, bool no_fentry);

/* None of a probe's programs loaded (autoload off at every tier): it is unavailable, with why (NULL: the why it
 * has) */
void tiers_unload(const void *skel, struct probe *p, const char *why);

/* Attach the chosen programs; an optional probe that fails to attach becomes unavailable. */
int tiers_attach(struct probe *probes, int n);
void tiers_detach(struct probe *probes, int n);

/*
 * The benchmark floor (--empty-programs): attach, at every hook the chosen programs would use, a program of
 * the same type and attach point that only returns.  kprobe tiers are not covered (a kprobe needs a libbpf
 * program object per target); their probes are reported unavailable with that reason.
 */
int tiers_attach_empty(struct probe *probes, int n);

/* Whether a probe's entry hook is attached: its program, or (--empty-programs) its empty twin. */
bool tier_attached(const struct probe *p);
/* The fd of the program that runs at a probe's entry (k 0) or exit (k 1) hook: its own, or its empty twin;
 * -1 = none. */
int tier_run_fd(const struct probe *p, int k);
/* --budget's windows (user/window.c): a probe's entry hook off, and on again (0 or -errno), with whichever
 * program it had.  Windowed probes are tracepoints: they have no exit twin. */
void tier_unhook(struct probe *p);
int tier_rehook(struct probe *p);

/* Position (from 0) of func's parameter named param, from the BTF of vmlinux or a module; -1 = unknown. */
int func_param_index(const char *func, const char *param);
/* Does the kernel have func (in the BTF of vmlinux or a module: not inlined everywhere, not renamed)? */
bool kernel_has_func(const char *func);
/* The number of arguments of tracepoint tp (vmlinux BTF's btf_trace_<tp>), -1 = unknown */
int tp_nr_args(const char *tp);
/* Is the first argument of tracepoint tp (vmlinux BTF's btf_trace_<tp>) a pointer to struct name? */
bool tp_arg0_is_struct(const char *tp, const char *name);
/* Does vmlinux BTF carry the typed tracepoint btf_trace_<tp>? */
bool tp_btf_exists(const char *tp);

/*
 * Which build of the BPF objects this kernel loads: the full one (false), or the plain one (Makefile
 * PLAIN_SKELS, bpf/flight.bpf.h) when a test load finds no BPF atomic compare-and-swap, no bpf_loop or no syscall
 * programs; why says which.
 */
bool bpf_build_plain(char *why, size_t len);

#endif
