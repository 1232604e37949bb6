/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A loaded BPF program's run statistics, as the kernel counts them (bpf_prog_info): a leaf the rooms that read
 * them include (probes.c at detach, window.c for the windows' cost, stacks.c for the sampling's), so that none
 * of them includes another for it.
 */
#ifndef FSTRACE_PROGSTATS_H
#define FSTRACE_PROGSTATS_H

#include <linux/types.h>

/* a program's counters from the kernel: runs skipped (recursion), and runs and their time (counted only while
 * BPF run-time statistics are on); 0 and all zero, or -errno */
struct prog_run {
	__u64 misses, runs, run_ns;
};
int prog_run_stats(int prog_fd, struct prog_run *out);

#endif
