/* SPDX-License-Identifier: GPL-2.0 */
/*
 * State the kernel side keeps and the configuration it is loaded with, shared by the BPF programs and the
 * collector but never written to the results file nor read by the analysis: the in-flight entries of the
 * flight tables and their sizes, the traced devices' table, the kernel-symbol queries, --budget's per-thread
 * call counts and the configuration frozen into every program (struct fst_cfg).  records.h keeps what a results
 * file holds or its header reports (record layouts, names, the aggregates' layouts, the constants the header
 * states); a change here changes no results file.
 */
#ifndef FSTRACE_KERNEL_STATE_H
#define FSTRACE_KERNEL_STATE_H

#include "records.h"

/* ---- in-flight block state, kept in maps and expired by the collector ---- */

/* a bio queued on a traced device, until the request carrying it is issued */
struct fst_bio_start {
	__u64 ts_queue;
	__u32 pid;	 /* charged traced thread, 0 = none */
	__u32 queue_pid; /* thread that queued the bio */
	__u16 charge;
	__u16 pad;
	__s32 stack; /* kernel stack at queueing, -1 = not taken */
	char comm[16];
	__u32 window_seq; /* --budget: the window it was queued in (flight.bpf.h window_seq) */
	__u32 pad1;
};

/* an issued request on a traced device, until its last completion */
struct fst_rq_start {
	__u64 ts_queue;
	__u64 ts_issue; /* its last issue */
	__u64 sector;	/* its first sector, at its first issue (a part completed moves the request's on) */
	__u32 pid;
	__u32 queue_pid;
	__u32 nr_bios;
	__u32 charged_bios; /* bios counted in task_inflight[pid] */
	__u32 bytes_done;   /* completed in parts before its last completion */
	__s32 error;	    /* the first error a part completed with */
	__u32 nr_requeues;
	__u16 charge;
	__u8 requeued; /* back in the queue (block_rq_requeue) and not issued since */
	__u8 pad;
	__s32 stack;
	__u32 window_seq; /* --budget: the window it was issued in (flight.bpf.h window_seq) */
	char comm[16];
	__u32 bios_seen; /* bios of its chain whose queueing was seen in its window */
	__u32 pad1;
};

/*
 * In-flight tables (flight.bpf.h FST_FLIGHT_TABLE): an array of buckets of FST_FLIGHT_WAYS slots each.  The
 * bucket counts are powers of two.  Four ways, not eight: every find and claim is unrolled over the ways, and
 * the block handlers run cold, so the length of that code costs more than its instruction count suggests
 * (block_rq_issue's bpf_stats run time most of all); with the buckets doubled the capacity is the same.  A
 * bucket overflows (a loss, counted) only with thousands of entries in flight at once, or, in the tables keyed
 * by block requests and bios, when the runs of three regions of memory with objects in flight overlap at that bucket
 * (flight.bpf.h flight_bucket_index).
 */
#define FST_FLIGHT_WAYS 4
#define FST_BIO_BUCKETS 16384	   /* 65536 bios */
#define FST_RQ_BUCKETS 4096	   /* 16384 block requests */
#define FST_WORKER_BUCKETS 512	   /* 2048 kworkers or work items */
#define FST_INFLIGHT_BUCKETS 16384 /* 65536 threads with block I/O charged to them; a bucket is one cache line */

/* a traced device's configuration */
struct fst_dev_cfg {
	__u32 unit_bytes; /* fs block/cluster size for alignment (0 = 4096) */
	__u32 is_loop;
	__u32 io_slot; /* its entry in dev_io (< FST_MAX_TRACED_DEVS): device i of --dev is entry i */
	__u32 pad0;
};

/*
 * The traced devices' table (filter.bpf.h traced_devs): an array of FST_DEV_SLOTS entries, each traced device at
 * the slot its kernel dev_t hashes to with the multiplier the collector chose so that no two of them share one
 * (struct fst_cfg dev_hash_mul).  A block event's device is then found with a multiply, an array access the
 * verifier inlines and a compare: no helper call, no bucket walk, on every bio, block request and loop work item
 * of the system; and one verifier state whichever device it is.
 */
#define FST_DEV_SLOT_BITS 8
#define FST_DEV_SLOTS (1u << FST_DEV_SLOT_BITS)
struct fst_traced_dev {
	__u32 dev; /* kernel dev_t, 0 = a free slot */
	struct fst_dev_cfg cfg;
};

static inline __u32 fst_dev_slot(__u32 dev, __u32 mul)
{
	return (dev * mul) >> (32 - FST_DEV_SLOT_BITS);
}

/* a kernel function the collector asks the kernel's address of (ksyms.bpf.c), for fst_cfg's work functions */
#define FST_KSYM_QUERIES 16
struct fst_ksym_query {
	char name[64]; /* zero-padded: its last byte is always 0 */
	__u64 addr;    /* 0 = no such function */
};

/* --budget: a thread's read and write syscall counts (task I/O accounting) */
struct fst_io_calls {
	__u64 reads, writes;
};

/*
 * A thread's counts as tasks.bpf.c's task iterator writes them, one after another, for a live thread; and as
 * req_fork_exit.bpf.h leaves them at a traced thread's exit in exited_calls, by struct fst_thread_key (they leave the
 * task list with it), until user/procfs.c io_calls_step takes them out.
 */
#define FST_EXITED_CALLS_MAX 16384
struct fst_task_calls {
	__u64 start_ns; /* task->start_boottime (CLOCK_BOOTTIME): a thread id reused starts later */
	struct fst_io_calls calls;
	__u32 tid, tgid;
	/* 0: a thread the task filters do not pass (yet), written only when it started since the collector's last
	 * look (tasks.bpf.c new_since_ns): what it has read by now is where its count starts if it passes later */
	__u32 traced;
	__u32 pad0;
};

/* exited_calls' key: a thread id can be reused before the collector's next look (two threads of one id exiting
 * between two looks), the pair of it and the thread's start cannot */
struct fst_thread_key {
	__u64 start_ns;
	__u32 tid;
	__u32 pad0;
};

#define FST_CFG_SDEVS 16

/*
 * Configuration frozen into every program before load.  Task filters combine
 * (a task must pass every one that is on); with none on, every task is traced.
 */
/*
 * Block tracepoints that still took the request_queue as their first argument (fst_cfg.block_tp_queue_first,
 * read from the tracepoint's BTF, so the programs' arguments are found either way; Debian bullseye's 5.10 has
 * it).  A series of the 5.11 merge window dropped it: "block: remove the request_queue to argument request
 * based tracepoints" (commit a54895fa057c: block_rq_issue, block_rq_requeue), "block: remove the request_queue
 * argument to the block_split tracepoint" (eb6f7f7cd3af) and "block: simplify and extend the block_bio_merge
 * tracepoint class" (e8a676d61c07: block_bio_queue) - the ids and subjects in the mainline commit lists of
 * distribution changelogs; block_bio_complete keeps its request_queue (6.18 too).
 */
#define FST_TPQ_BIO_QUEUE 0x1
#define FST_TPQ_SPLIT 0x2
#define FST_TPQ_RQ_REQUEUE 0x4
#define FST_TPQ_RQ_ISSUE 0x8

struct fst_cfg {
	__u64 loop_rootcg_workfn; /* kernel addresses of loop work functions (kallsyms), 0 = unknown */
	__u64 loop_workfn;
	__u64 erofs_decomp_workfn; /* z_erofs_decompressqueue_work, 0 = not in this kernel */
	__u64 btrfs_endio_workfn;  /* simple_end_io_work (6.18) or btrfs_end_bio_work (6.1) */
	__u64 btrfs_work_helper;   /* the work function of every btrfs_work; the real one is btrfs_work->func */
	__u64 btrfs_compress_fn;   /* btrfs_work->func of write compression: async_cow_start (6.1) or
				    * compress_file_range (6.5+) */
	__u64 filter_cgroup_id;	   /* cgroup v2 id, 0 = off */
	__u8 filter_pids;	   /* task must be in traced_pids (a process tree) */
	__u8 filter_comm;	   /* task comm must equal comm */
	__u8 filter_sdev;	   /* requests only on files of the superblocks in sdevs */
	__u8 offcpu_stacks;	   /* record the kernel stack of every off-CPU interval in a request */
	/* argument positions of btrfs_compress_folios/_pages, looked up by name in its BTF: the signature
	 * changed twice (6.1: type_level, mapping, start, pages, out_pages, total_in, total_out; 6.18: type,
	 * level, inode, start, folios, ...); -1 = unknown */
	__s8 btrfs_compress_arg_owner; /* "mapping" (address_space) or "inode" (btrfs_inode) */
	__s8 btrfs_compress_arg_start;
	__s8 btrfs_compress_arg_total_in;
	__s8 btrfs_compress_arg_total_out;
	__u8 btrfs_compress_owner_is_inode;
	__u8 task_storage;    /* per-task state in BPF_MAP_TYPE_TASK_STORAGE (else a pid-keyed hash) */
	__u8 records_all;     /* record every request (else page-cache hits are only counted) */
	__u8 io_stacks_all;   /* every bio's queue stack (else at most one per FST_IO_STACK_EVERY_NS per CPU) */
	__u32 wakeup_bytes;   /* wake the reader when this much is waiting in the ring buffer */
	__u8 records_none;    /* count every request in req_agg, record none (fstrace serve) */
	__u8 no_io_records;   /* block requests only in the histograms, sums and alignment counters */
	__u8 io_sums;	      /* keep fst_dev_io.sums (the collector writes an exposition) */
	__u8 per_comm;	      /* with records_none: also count requests per task name (comm_agg) */
	__u64 record_over_ns; /* a request this slow is recorded even when it was a page-cache hit */
	__u8 windowed;	      /* --budget: the syscall hooks are attached in windows (requests.bpf.c window_seq) */
	char comm[16];
	__u8 offcpu_at_switch_in;  /* off-CPU stacks walked at the switch back in (tp_btf), threshold-sampled */
	__u8 requests;		   /* requests.bpf.c is loaded: requests are traced (not --block-only) */
	__u8 task_pt_regs;	   /* the kernel has bpf_task_pt_regs (a test load): a task's user registers */
	__u8 block_tp_queue_first; /* FST_TPQ_* bits: block tracepoints whose first argument is the request_queue */
	__u32 offcpu_sample_ns;	   /* with it: intervals this long always walked; shorter ones with probability
				    * length / offcpu_sample_ns, credited offcpu_sample_ns (0: every interval) */
	/* the traced superblocks (--sdev): a file's superblock is compared with these, a few instructions
	 * (filter.bpf.h sdev_in_cfg), before anything else on the entry points other filesystems share
	 * (generic_file_read_iter, the splice readers, ...), so that those filesystems' calls cost no map lookup */
	__u32 sdevs[FST_CFG_SDEVS];
	__u32 nr_sdevs;
	__u32 pad_cfg2;
	__u64 filldir64;	      /* getdents64's callback (kallsyms), 0 = unknown: a directory read with it is the
				       * syscall's, whose byte count the request takes */
	__u32 dev_hash_mul;	      /* the traced devices' slots in traced_devs: fst_dev_slot(dev, dev_hash_mul) */
	__u8 sched_switch_prev_state; /* sched_switch passes prev_state (its BTF), else it is read from prev */
	__u8 pad_cfg3[3];
};

#endif
