/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The probe tables (what each program measures, as a records.h figure id), loading the BPF objects with the
 * best tier the kernel offers, the traced devices/filesystems/pids, attach and detach.
 */
#ifndef FSTRACE_PROBES_H
#define FSTRACE_PROBES_H

#include <stdbool.h>
#include <sys/types.h>
#include "tiers.h"

struct ring_buffer;

/* the work functions the programs tell apart (fst_cfg): a _61 one is the same function's name on older kernels,
 * used where the first is absent */
enum work_fn {
	WF_LOOP_ROOTCG,
	WF_LOOP,
	WF_EROFS_DECOMP,
	WF_BTRFS_ENDIO,
	WF_BTRFS_ENDIO_61,
	WF_BTRFS_WORK_HELPER,
	WF_BTRFS_COMPRESS_61,
	WF_BTRFS_COMPRESS,
	NR_WORK_FNS
};
extern const char *const work_fn_names[NR_WORK_FNS];

/* everything loaded: request tracing (reqs), the filesystems' and the sampling objects may be NULL */
struct tracer {
	struct block_bpf *blk;
	struct requests_bpf *reqs;
	struct erofs_bpf *ero;
	struct squashfs_bpf *sqf;
	struct btrfs_bpf *btr;
	struct sample_bpf *smp;
	char sample_why[160];  /* why sampling is off */
	struct tasks_bpf *tsk; /* --budget's windows: the traced threads' read and write counts (tasks.bpf.c) */
	char tasks_why[160];   /* why it is not loaded */
	bool plain;	       /* the plain build of the BPF objects is loaded (tiers.h bpf_build_plain) */
	char plain_why[160];   /* why: what the kernel lacks, "" for the full build */
	bool task_storage_on;  /* per-task state in task-local storage (else a pid hash) */
	char task_state_why[160];
	/* requests bounded at the traced filesystems' entry points (requests.bpf.c fs_bound_kinds: 1 << FST_REQ_*),
	 * 0: by the syscall tracepoints, bounds_why saying why */
	__u32 fs_bound_kinds;
	__u32 bounds_fs; /* the traced filesystems (1 << FST_FS_*) when bounds_why is "" */
	char bounds_why[256];
	bool ksyms_asked;			       /* the work functions' addresses came from the kernel (ksym_addrs) */
	unsigned long long work_fn_addrs[NR_WORK_FNS]; /* of work_fn_names, 0 = not in this kernel */
};

struct probe_group {
	struct probe *probes;
	int n;
};
extern const struct probe_group probe_groups[];
extern const int nr_probe_groups;

/* the configuration every object was loaded with (kernel_state.h struct fst_cfg) */
const struct fst_cfg *tracer_cfg(const struct tracer *t);

/* open, configure and load every object (dies when the required ones cannot load) */
void tracer_load(struct tracer *t);
/* the traced devices, filesystems and processes (child: the command's pid, or <= 0) into the maps */
void tracer_set_filters(struct tracer *t, pid_t child);
/* attach every loaded probe and the sampling events; 0, or the error that leaves nothing traced */
int tracer_attach(struct tracer *t);
/* the tiers that bounded requests of kind, "+"-separated: the boundary probes' (fentry, kprobe; "none" when no
 * traced filesystem has that kind's entry point) or sys_enter's */
void request_bound_tiers(const struct tracer *t, enum fst_req_kind kind, char *out, size_t len);
/* the kernel's and the programs' symbols for the stacks, read before detaching (trampolines leave kallsyms) */
void tracer_read_ksyms(struct tracer *t);
/* at the end of tracing: each probe's statistics read, every link and perf event detached */
void tracer_detach(void);
/* every object destroyed (programs, maps), and the ring buffer freed */
void tracer_destroy(struct tracer *t, struct ring_buffer *rb);

#endif
