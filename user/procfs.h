/* SPDX-License-Identifier: GPL-2.0 */
#ifndef FSTRACE_PROCFS_H
#define FSTRACE_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>
#include "env.h"

/* the filesystem type and mount point of a superblock device (kernel dev_t), from /proc/self/mountinfo: its
 * first mount; false when it is not mounted */
bool sdev_mount(__u32 kdev, char *fstype, size_t fstype_len, char *mnt, size_t mnt_len);
/* whether the mount table changed since the last of those lookups read it */
bool mount_table_changed(void);

/* cgroup v2 id of a cgroup directory (dies when it cannot be read) */
__u64 cgroup_id(const char *path);

/* one device's line of /proc/diskstats (found = false when it has none) */
struct diskstat {
	bool found;
	unsigned long long v[17];
};
/* fields of v (Documentation/admin-guide/iostats.rst, from its 4th column) */
#define DISKSTAT_READS 0  /* reads completed */
#define DISKSTAT_WRITES 4 /* writes completed */
void read_diskstat(const struct dev_arg *d, struct diskstat *s);
/* requests the device has in flight now (sysfs inflight) */
unsigned long long dev_inflight(const struct dev_arg *d);

/* pid and all its threads into the traced pids (dies when it cannot) */
void add_pid_tree(int map_fd, int pid);
/* running or sleeping; a zombie counts as gone */
bool pid_alive(int pid);
/* any thread of process pid runs: its leader may have exited (a zombie) while other threads go on */
bool process_alive(int pid);

/* a number in a /proc file (a sysctl), -1 when it cannot be read */
long long proc_number(const char *path);

/*
 * The kernel's own count of read and write syscalls of the traced threads (task I/O accounting: what /proc/PID/
 * task/TID/io shows as syscr and syscw), always kept and free: what --budget's windows are weighted against.
 * io_calls_step runs the task iterator of iter_link_fd (tasks.bpf.c: one record per live thread the task filters
 * pass, the collector's own left out, and per thread started since the previous call, a starting point) and adds
 * to *delta the calls made since its previous call by the traced threads; false when the iterator cannot be read.
 * *new_since_ns is the iterator's (tasks.bpf.c new_since_ns), set here.  A thread seen for the first time counts
 * whole when it started after the previous call, else from its first sighting; one that exited left its counts
 * in exited_fd (req_fork_exit.bpf.h exited_calls, kernel_state.h struct fst_task_calls by struct fst_thread_key), taken out
 * here.
 */
struct io_calls {
	__u64 reads, writes;
};
bool io_calls_step(int iter_link_fd, int exited_fd, __u64 *new_since_ns, struct io_calls *delta);

/* kernel.task_delayacct: set to on (-1: only read); returns what it was */
int delayacct_set(int on);
/* take (acquire) or drop this collector's hold on delay accounting, shared with concurrent collectors */
int delayacct_ref(bool acquire);
/* drop the hold if taken: registered with atexit, so every exit path restores it */
void delayacct_release(void);
extern bool delayacct_held;

/* in-flight block state expired so far */
struct expired {
	unsigned long long bios, requests, work_items; /* work items queued and never run */
	unsigned long long run_failures;	       /* runs of the expiry program that failed: stale entries stay */
};
struct block_bpf;
/* expire bios (bio_starts), requests (rq_starts) and queued work items older than FST_STALE_NS in full buckets,
 * releasing task_inflight */
void expire_stale(struct block_bpf *blk, struct expired *ex);

#endif
