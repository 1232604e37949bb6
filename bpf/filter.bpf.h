/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What is traced: the process tree (pids), the task name, the cgroup, the block devices and the filesystems'
 * superblocks the collector chose, and the current task's name as the name filter compares it.
 */
#ifndef FSTRACE_FILTER_BPF_H
#define FSTRACE_FILTER_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */
#include "task.bpf.h"

/* the bytes of a little-endian word of a name before its first NUL, the rest zeroed; *ended once a NUL is seen
 * (the lowest byte the zero-byte test flags is always a real NUL: a borrow only flags bytes above one) */
static __always_inline __u64 comm_word(__u64 w, bool *ended)
{
	if (*ended)
		return 0;
	__u64 nul = (w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull;
	if (!nul)
		return w;
	*ended = true;
	return w & (((nul & -nul) >> 7) - 1);
}

/* the name of t, a BTF task pointer, NUL-padded: two typed loads, clipped at its NUL (a name once longer may leave
 * bytes after it) */
static __always_inline void task_comm(struct task_struct *t, char *comm)
{
	bool ended = false;
	__u64 w0 = comm_word(*(__u64 *)&t->comm[0], &ended);
	__u64 w1 = comm_word(*(__u64 *)&t->comm[8], &ended);
	w1 &= 0x00ffffffffffffffull; /* the last byte is always the terminator */
	__builtin_memcpy(comm, &w0, 8);
	__builtin_memcpy(comm + 8, &w1, 8);
}

/*
 * The current task's name, NUL-padded as bpf_get_current_comm() gives it.  That helper costs more than a
 * clock read (docs/overhead.md, "What each helper costs") and runs once per record and per bio; where the task is
 * a BTF pointer (storage mode, whose kernels all have bpf_get_current_task_btf) the name is task_comm's.
 */
static __always_inline void current_comm(char *comm)
{
	if (!cfg.task_storage) {
		bpf_get_current_comm(comm, 16);
		return;
	}
	task_comm(bpf_get_current_task_btf(), comm);
}

/* thread ids of the traced process tree (value unused) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} traced_pids SEC(".maps");

/* the traced block devices, each at its slot (kernel_state.h fst_dev_slot) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FST_DEV_SLOTS);
	__type(key, __u32);
	__type(value, struct fst_traced_dev);
} traced_devs SEC(".maps");

/* a traced device's configuration, NULL when the device is not traced */
static __always_inline struct fst_dev_cfg *dev_cfg(__u32 dev)
{
	__u32 slot = fst_dev_slot(dev, cfg.dev_hash_mul);
	struct fst_traced_dev *t = bpf_map_lookup_elem(&traced_devs, &slot);
	return t && dev && t->dev == dev ? &t->cfg : NULL;
}

/* the device stat() reports for a traced filesystem's files -> its superblock's, where they differ (a btrfs
 * subvolume's anonymous device): a path-based stat call is placed by the former (req_file.bpf.h note_statbuf) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} stat_devs SEC(".maps");

static __always_inline bool comm_matches(const char *comm)
{
#pragma unroll
	for (int i = 0; i < 16; i++) {
		if (comm[i] != cfg.comm[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

/*
 * The task filters (the traced process tree, --comm, --cgroup) of t, a BTF task pointer (tasks.bpf.c's iterator),
 * or of the current task when t is NULL: a constant at each call, so each caller's code holds only its side.
 */
static __always_inline bool task_passes_filters(struct task_struct *t)
{
	if (cfg.filter_pids) {
		__u32 pid = t ? t->pid : (__u32)bpf_get_current_pid_tgid();
		if (!bpf_map_lookup_elem(&traced_pids, &pid))
			return false;
	}
	if (cfg.filter_comm) {
		char comm[16];
		if (t)
			task_comm(t, comm);
		else
			current_comm(comm);
		if (!comm_matches(comm))
			return false;
	}
	/* the task's cgroup v2 (default hierarchy) id, what bpf_get_current_cgroup_id() gives for current; an
	 * iterator program walks the pointers under RCU */
	if (cfg.filter_cgroup_id &&
	    (t ? t->cgroups->dfl_cgrp->kn->id : bpf_get_current_cgroup_id()) != cfg.filter_cgroup_id)
		return false;
	return true;
}

static __always_inline bool current_is_traced(void) { return task_passes_filters(NULL); }

/* storage mode, pid-tree filter only: the filter's answer cannot change for a task (pids only join), so it is
 * kept in the task's state and an untraced task's read-family syscall costs one storage lookup */
static __always_inline bool trace_decision_cacheable(void)
{
	return cfg.task_storage && !cfg.filter_comm && !cfg.filter_cgroup_id;
}

/*
 * The current thread's state for a handler that asks whether it is traced (state_is_traced), created where the
 * process tree filter's trace decision can be kept in it: a thread that reaches the block and erofs handlers outside any
 * request (no sys_enter made its state: --budget between windows) then looks its pid up in traced_pids once, not
 * at each of its bios and erofs events.  Without a process tree filter the filters need no lookup at all.
 */
static __always_inline struct task_req *current_state_for_trace_decision(void)
{
	if (!trace_decision_cacheable() || !cfg.filter_pids)
		return current_state();
	return bpf_task_storage_get(&task_reqs, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* whether the current thread (whose state is r) is traced: the trace decision its state keeps where that can be
 * cached (no hash lookup of the pid), asked of the filters and kept the first time; else the filters.  Outside
 * --budget's windows no sys_enter keeps it, and a reader's every bio and erofs event would ask the filters. */
static __always_inline bool state_is_traced(struct task_req *r)
{
	if (trace_decision_cacheable() && r) {
		if (r->keep.trace_decision == FST_TRACE_DECISION_UNKNOWN)
			r->keep.trace_decision = current_is_traced() ? FST_TRACE_DECISION_TRACED : FST_TRACE_DECISION_UNTRACED;
		return r->keep.trace_decision == FST_TRACE_DECISION_TRACED;
	}
	return current_is_traced();
}

/*
 * whether a superblock is one of the traced ones, by comparing it with cfg.sdevs: a few instructions (the count
 * is a load-time constant, so the verifier and the JIT see only that many compares), cheaper than the hash
 * lookup a map of them took, on hooks every filesystem's calls reach (the entry points other filesystems share)
 * and on ones that run tens of thousands of times a second (erofs's block mapping)
 */
static __always_inline bool sdev_in_cfg(__u32 sdev)
{
#pragma unroll
	for (int i = 0; i < FST_CFG_SDEVS; i++)
		if (i < cfg.nr_sdevs && cfg.sdevs[i] == sdev)
			return true;
	return false;
}

/* a request on a file of superblock sdev is kept: no filesystem filter, or sdev is a traced one */
static __always_inline bool sdev_is_traced(__u32 sdev)
{
	return !cfg.filter_sdev || sdev_in_cfg(sdev);
}

#endif
