/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Record layouts shared by the BPF programs, the collector and (through the
 * self-describing results file) the analysis side.  Each layout is written
 * once, as an X-macro: the BPF side and the collector expand it into a
 * struct, and the collector expands it again into the field table it writes
 * into the results header, so Python never keeps a copy of these offsets.
 *
 * F(type, name)       scalar field
 * S(name, len)        fixed-size NUL-padded string
 *
 * Fields are ordered largest first so no implicit padding appears.
 */
#ifndef FSTRACE_RECORDS_H
#define FSTRACE_RECORDS_H

#define FST_RECORDS_VERSION 1

/* Every record starts with this, so one ring buffer carries all kinds. */
#define FST_REC_HEADER(F, S) \
	F(__u32, rec_type)    \
	F(__u32, rec_size)

enum fst_rec_type {
	FST_REC_REQ = 1,	/* one read/metadata syscall of a traced task */
	FST_REC_IO = 2,		/* one completed block request on a traced device */
};

/* kind of request, from the syscall */
enum fst_req_kind {
	FST_REQ_READ = 1,	/* read, pread64, readv, preadv, preadv2 */
	FST_REQ_STAT = 2,	/* stat family, statx */
	FST_REQ_OPEN = 3,	/* open, openat */
	FST_REQ_GETDENTS = 4,	/* getdents64 */
};

/* how a block request was charged to a traced task */
enum fst_charge {
	FST_CHARGE_NONE = 0,	/* queued by an untraced task (background, other users) */
	FST_CHARGE_DIRECT = 1,	/* queued by the traced task itself */
	FST_CHARGE_LOOP = 2,	/* queued by a loop worker for a loop request the task issued */
};

/*
 * Request: wall time [ts_start_ns, ts_end_ns] is partitioned into
 *   oncpu_ns    running
 *   io_wait_ns  off-CPU, uninterruptible, own block I/O in flight
 *   dsleep_ns   off-CPU, uninterruptible, no own I/O in flight (locks, others' I/O)
 *   sleep_ns    off-CPU, interruptible
 *   runq_ns     runnable but not running (preempted, or woken and waiting for a CPU)
 * sdev is the kernel dev_t (major << 20 | minor) of the file's superblock.
 */
#define FST_REQ_FIELDS(F, S)   \
	F(__u64, ts_start_ns)  \
	F(__u64, ts_end_ns)    \
	F(__u64, oncpu_ns)     \
	F(__u64, io_wait_ns)   \
	F(__u64, dsleep_ns)    \
	F(__u64, sleep_ns)     \
	F(__u64, runq_ns)      \
	F(__u64, ino)          \
	F(__s64, ret)          \
	F(__u64, count)        \
	F(__s64, pos)          \
	F(__u64, io_bytes)     \
	F(__u32, pid)          \
	F(__u32, tgid)         \
	F(__u32, sdev)         \
	F(__u32, syscall_nr)   \
	F(__u32, nr_ios)       \
	F(__u32, nr_switches)  \
	F(__u16, kind)         \
	F(__u16, ftype)        \
	S(comm, 16)

/*
 * Block request, emitted at completion.  Q = first bio queued, D = issued to
 * the driver, C = completed.  dev is the kernel dev_t of the partition or
 * disk the request was issued to.  nr_bios - 1 is the number of merges.
 */
#define FST_IO_FIELDS(F, S)     \
	F(__u64, ts_queue_ns)   \
	F(__u64, ts_issue_ns)   \
	F(__u64, ts_complete_ns) \
	F(__u64, sector)        \
	F(__u32, bytes)         \
	F(__u32, dev)           \
	F(__u32, cmd_flags)     \
	F(__u32, nr_bios)       \
	F(__u32, pid)           \
	F(__u32, queue_pid)     \
	F(__s32, error)         \
	F(__u16, charge)        \
	F(__u16, pad0)          \
	S(comm, 16)

#define FST_DECLARE_FIELD(t, n) t n;
#define FST_DECLARE_STRING(n, len) char n[len];

struct fst_req {
	FST_REC_HEADER(FST_DECLARE_FIELD, FST_DECLARE_STRING)
	FST_REQ_FIELDS(FST_DECLARE_FIELD, FST_DECLARE_STRING)
};

struct fst_io {
	FST_REC_HEADER(FST_DECLARE_FIELD, FST_DECLARE_STRING)
	FST_IO_FIELDS(FST_DECLARE_FIELD, FST_DECLARE_STRING)
};

/* ---- in-kernel aggregates, read by the collector at the end ---- */

#define FST_HIST_SLOTS 40

enum fst_hist_metric {
	FST_H_IO_Q2C_US = 1,	/* block request queue-to-complete, microseconds */
	FST_H_IO_D2C_US = 2,	/* block request issue-to-complete, microseconds */
	FST_H_IO_BYTES = 3,	/* block request size, bytes */
	FST_H_REQ_US = 4,	/* request (syscall) latency, microseconds; sub = kind */
};

struct fst_hist_key {
	__u32 metric;
	__u32 dev;	/* device for IO metrics, 0 otherwise */
	__u32 sub;	/* op for IO metrics (0 read, 1 write, 2 other), kind for requests */
};

struct fst_hist {
	__u64 slots[FST_HIST_SLOTS];
};

/* alignment of completed block requests per device, counted in the kernel */
struct fst_align {
	__u64 nr;
	__u64 start_4k;		/* start offset % 4096 == 0 */
	__u64 end_4k;		/* end offset % 4096 == 0 */
	__u64 start_unit;	/* start offset % unit == 0 (unit = fs block/cluster size) */
	__u64 end_unit;
	__u64 cross_unit;	/* [start, end) spans a unit boundary it does not start on */
};

/* per traced device configuration, keyed by kernel dev_t */
struct fst_dev_cfg {
	__u32 unit_bytes;	/* fs block/cluster size for alignment (0 = 4096) */
	__u32 is_loop;
};

/* drop counters, one per record type (index = enum fst_rec_type) */
#define FST_MAX_REC_TYPES 8

/* configuration frozen into every program before load */
struct fst_cfg {
	__u64 loop_rootcg_workfn;	/* kernel addresses of loop work functions (kallsyms), 0 = unknown */
	__u64 loop_workfn;
	__u64 filter_cgroup_id;		/* 0 = filter by traced pid tree only */
};

#endif
