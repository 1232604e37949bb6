// SPDX-License-Identifier: GPL-2.0
/* A loaded BPF program's run statistics (progstats.h). */
#include <errno.h>
#include <string.h>
#include <bpf/bpf.h>
#include "progstats.h"

/*
 * Runs the kernel skipped because the program was already active on that CPU
 * (lost events), and runs counted (only while kernel.bpf_stats_enabled=1).
 */
int prog_run_stats(int prog_fd, struct prog_run *out)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	memset(out, 0, sizeof(*out));
	if (prog_fd < 0)
		return -EBADF;
	if (bpf_obj_get_info_by_fd(prog_fd, &info, &len))
		return -errno;
	out->misses = info.recursion_misses;
	out->runs = info.run_cnt;
	out->run_ns = info.run_time_ns;
	return 0;
}
