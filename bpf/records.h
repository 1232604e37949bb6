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
 *
 * What the kernel side keeps for itself (in-flight entries, the configuration it is loaded with) and no results
 * file holds is in kernel_state.h.
 */
#ifndef FSTRACE_RECORDS_H
#define FSTRACE_RECORDS_H

#ifndef __VMLINUX_H__
#include <linux/types.h> /* user space; BPF objects get the types from vmlinux.h */
#endif

#define FST_RECORDS_VERSION 3

/* the X-macro tables from here on are laid out by hand, an entry a line: clang-format leaves them */
/* clang-format off */
/* Every record starts with this, so one ring buffer carries all kinds. */
#define FST_REC_HEADER(F, S) \
	F(__u32, rec_type)    \
	F(__u32, rec_size)

/*
 * Enumerations, also X-macros so the collector can write their names into the
 * results header: E(C name, value, name in results)
 */
#define FST_REC_TYPES(E)                                                       \
	E(FST_REC_REQ, 1, "req")	/* one read/metadata syscall of a traced task */ \
	E(FST_REC_IO, 2, "io")		/* one completed block request on a traced device */ \
	E(FST_REC_DECOMP, 3, "decomp")	/* one decompression of a compressed unit */ \
	E(FST_REC_WORK, 4, "work")	/* one execution of a known filesystem work item */ \
	E(FST_REC_TASK, 5, "task")	/* a traced thread's exit, with the kernel's delay accounting */ \
	E(FST_REC_EROFS, 6, "erofs")	/* an erofs tracepoint in a traced thread: extent map, readahead, read_folio */ \
	E(FST_REC_FS_CACHE, 7, "fs_cache")	/* one lookup in a filesystem's own cache (squashfs) */ \
	E(FST_REC_COMPRESS, 8, "compress")	/* one compression of a chunk of file data on write (btrfs) */ \
	E(FST_REC_FS_READ, 9, "fs_read")	/* one block a filesystem read from its device: place and length (squashfs) */

#define FST_REQ_KINDS(E)                                                       \
	E(FST_REQ_READ, 1, "read")	/* read, pread64, readv, preadv, preadv2 */      \
	E(FST_REQ_STAT, 2, "stat")	/* stat family, statx */                         \
	E(FST_REQ_OPEN, 3, "open")	/* open, openat */                               \
	E(FST_REQ_GETDENTS, 4, "getdents")	/* getdents64 */      \
	E(FST_REQ_WRITE, 5, "write")	/* write, pwrite64, writev, pwritev, pwritev2 */ \
	E(FST_REQ_SYNC, 6, "sync")	/* fsync, fdatasync, sync, syncfs */
#define FST_NR_REQ_KINDS 6	/* numbered from 1 */

/* how a block request was charged to a traced task */
#define FST_CHARGES(E)                                                         \
	E(FST_CHARGE_NONE, 0, "none")	/* queued by an untraced task */                 \
	E(FST_CHARGE_DIRECT, 1, "direct")	/* queued by the traced task itself */       \
	E(FST_CHARGE_LOOP, 2, "loop")	/* queued by a loop worker serving the task's loop request */

/*
 * What a traced block device is to the traced filesystems (the results header's "level" of each device; the
 * collector's -d MAJ:MIN:UNIT:LEVEL).  A filesystem on a partition is traced on the partition: a request is named
 * by the partition it is for (the io record's dev).  The read amplification counts on each level what it says
 * there (analysis/amplification).
 */
#define FST_DEV_LEVELS(E)                                                      \
	E(FST_LEVEL_DEVICE, 0, "device")	/* named alone (--dev): under no traced filesystem */ \
	E(FST_LEVEL_DISK, 1, "disk")	/* the disk or partition a traced filesystem sits on directly */ \
	E(FST_LEVEL_LOOP, 2, "loop")	/* the loop device (or a partition of it) a traced filesystem sits on: an image */ \
	E(FST_LEVEL_BACKING, 3, "backing")	/* the disk holding a traced loop device's backing file */

#define FST_HIST_METRICS(E)                                                    \
	E(FST_H_IO_Q2C_US, 1, "io_q2c_us")	/* block request queue-to-complete; sub = op */ \
	E(FST_H_IO_D2C_US, 2, "io_d2c_us")	/* block request issue-to-complete; sub = op */ \
	E(FST_H_IO_BYTES, 3, "io_bytes")	/* block request size; sub = op */              \
	E(FST_H_RA_PAGES, 5, "ra_window_pages")	/* readahead window decided (pages); dev = file's sb, sub = 0 */

#define FST_FILESYSTEMS(E)          \
	E(FST_FS_EROFS, 1, "erofs")  \
	E(FST_FS_SQUASHFS, 2, "squashfs") \
	E(FST_FS_BTRFS, 3, "btrfs")

#define FST_ALGS(E)                  \
	E(FST_ALG_LZ4, 1, "lz4")     \
	E(FST_ALG_LZMA, 2, "lzma")   \
	E(FST_ALG_DEFLATE, 3, "deflate") \
	E(FST_ALG_ZSTD, 4, "zstd")   \
	E(FST_ALG_PLAIN, 5, "plain") \
	E(FST_ALG_ZLIB, 6, "zlib")   \
	E(FST_ALG_LZO, 7, "lzo")     \
	E(FST_ALG_XZ, 8, "xz")       \
	E(FST_ALG_UNKNOWN, 15, "unknown")

/* where a decompression ran */
#define FST_CONTEXTS(E)                                         \
	E(FST_CTX_TRACED, 1, "traced task")	/* in a traced task itself */ \
	E(FST_CTX_OTHER_TASK, 2, "other task")	/* in an untraced user task (or a softirq on it) */ \
	E(FST_CTX_KWORKER, 3, "kworker")	/* in a workqueue worker */ \
	E(FST_CTX_KTHREAD, 4, "kernel thread")	/* in another kernel thread (ksoftirqd, ...) */

/*
 * The ways a probe is attached, best first: the collector takes, per probe, the first the kernel offers (the
 * results header's probes name it), and a decompression record says which of the first two measured it.
 */
#define FST_TIERS(E)                                                                       \
	E(FST_TIER_NONE, 0, "unavailable")	/* not attached (the probe's "why" says why) */ \
	E(FST_TIER_FENTRY, 1, "fentry")		/* fentry/fexit */                             \
	E(FST_TIER_KPROBE, 2, "kprobe")		/* kprobe/kretprobe */                         \
	E(FST_TIER_TP_BTF, 3, "tp_btf")		/* BTF-typed tracepoint */                     \
	E(FST_TIER_RAW_TP, 4, "raw_tp")		/* raw tracepoint */
#define FST_NR_TIERS 5

/* filesystem work done asynchronously in kworkers, recognised by work function */
#define FST_WORK_KINDS(E)                                                      \
	E(FST_WORK_EROFS_DECOMPRESS, 1, "erofs decompression")	/* z_erofs_decompressqueue_work */ \
	E(FST_WORK_BTRFS_ENDIO, 2, "btrfs read end-io")	/* checksums and decompression of read bios */ \
	E(FST_WORK_BTRFS_COMPRESS, 3, "btrfs write compression")	/* compress_file_range: one delalloc chunk */
/*
 * The kinds queued from a bio's end_io, inside a block request's completion: their work records name that
 * request (io_complete_ns, io_sector, io_dev; results header "work_kinds_from_completion"), and one that names
 * none, nor woke a traced request, is work fstrace's devices and requests did not cause (another device's).
 * btrfs write compression is queued by writeback.
 */
#define FST_WORK_KINDS_FROM_COMPLETION(E) E(FST_WORK_EROFS_DECOMPRESS) E(FST_WORK_BTRFS_ENDIO)

/* which erofs tracepoint an erofs record comes from */
#define FST_EROFS_EVENTS(E)                                                     \
	E(FST_EROFS_MAP, 1, "map")		/* erofs_map_blocks_exit (6.1: z_erofs_map_blocks_iter_exit) */ \
	E(FST_EROFS_READAHEAD, 2, "readahead")	/* erofs_readahead (6.1: erofs_readpages) */ \
	E(FST_EROFS_READ_FOLIO, 3, "read_folio")	/* erofs_read_folio: one folio read outside readahead */

/* the filesystem-internal caches a fs_cache record looked in (squashfs: struct squashfs_sb_info's
 * block_cache, fragment_cache and read_page, named "metadata", "fragment" and "data" by the kernel) */
#define FST_FS_CACHES(E)                                                         \
	E(FST_FS_CACHE_SQUASHFS_METADATA, 1, "squashfs metadata")	/* inodes, directories, fragment/id tables */ \
	E(FST_FS_CACHE_SQUASHFS_FRAGMENT, 2, "squashfs fragment")	/* fragment blocks: tails of small files */ \
	E(FST_FS_CACHE_SQUASHFS_DATA, 3, "squashfs data")	/* whole data blocks (CONFIG_SQUASHFS_FILE_CACHE) */ \
	E(FST_FS_CACHE_UNKNOWN, 15, "unknown")

/* struct erofs_map_blocks m_flags bits as fs/erofs/internal.h defines them since 6.3; compat.bpf.h
 * erofs_map_flags translates the buffer_head-based values of older kernels into these */
#define FST_EROFS_MAP_FLAGS(E)                                                  \
	E(FST_EROFS_MAP_MAPPED, 0x1, "mapped")                                  \
	E(FST_EROFS_MAP_META, 0x2, "meta")	/* inline in the metadata area */ \
	E(FST_EROFS_MAP_ENCODED, 0x4, "encoded")	/* compressed: [pa, pa + plen) is a pcluster */ \
	E(FST_EROFS_MAP_FULL_MAPPED, 0x8, "full_mapped")                        \
	E(FST_EROFS_MAP_FRAGMENT, 0x10, "fragment")                             \
	E(FST_EROFS_MAP_PARTIAL_REF, 0x20, "partial_ref")

/*
 * Attribution parts of a request: each is a field of the req record (and of the in-kernel aggregate of the
 * requests that are counted rather than recorded) and they partition the request's wall time exactly.  The
 * value is the part's index in fst_req_agg.part_ns (from 0), the name its record field.  The last three
 * columns are for the analysis (the results header's "schema" carries them to it): the bench tables' column a
 * part is summed into (oncpu, tracer, io_wait, kworker, lock, other), its colour in plots, and what it means.
 */
#define FST_PARTS(E)                                                           \
	E(FST_PART_ONCPU, 0, oncpu_ns, "oncpu", "#5aaa5a", "on-CPU in the request (syscall work, page-cache copy, in-task decompression)") \
	E(FST_PART_TRACER, 1, tracer_ns, "tracer", "#d0508c", "on-CPU in fstrace's own BPF programs inside the request (FST_TRACER_TIME_EVERY: 1 in 16 handler runs timed, the rest charged their site's mean)") \
	E(FST_PART_IO_WAIT, 2, io_wait_ns, "io_wait", "#285ac8", "off-CPU waiting for I/O (in io_schedule, or own block I/O in flight)") \
	E(FST_PART_WORKER, 3, worker_ns, "kworker", "#009696", "asleep while a kworker ran filesystem work that woke it (erofs decompression, btrfs end-io)") \
	E(FST_PART_WORKER_WAIT, 4, worker_wait_ns, "kworker", "#7fcaca", "asleep while that work waited for its kworker to get a CPU") \
	E(FST_PART_LOCK, 5, lock_ns, "lock", "#963caa", "off-CPU waiting for a contended sleeping lock (mutex, rwsem; lock:contention_begin/end)") \
	E(FST_PART_DSLEEP, 6, dsleep_ns, "other", "#8c6e50", "off-CPU, uninterruptible otherwise (work done by others, folio locks without own I/O)") \
	E(FST_PART_SLEEP, 7, sleep_ns, "other", "#aaaaaa", "off-CPU, interruptible sleep") \
	E(FST_PART_RUNQ, 8, runq_ns, "other", "#e0b040", "runnable, waiting for a CPU") \
	E(FST_PART_MISSED, 9, missed_ns, "other", "#ff4040", "not attributable: the kernel did not deliver a context-switch event for it")
#define FST_NR_PARTS 10

/*
 * Block operations as the analysis and the histograms split them: a request's op is cmd_flags & FST_OP_MASK
 * (the kernel's REQ_OP_MASK; REQ_OP_READ 0, REQ_OP_WRITE 1), and every other op counts as "other".  The value
 * is both the op and the index (sub) of its histograms and sums (fst_hist_key.sub, fst_dev_io.sums).
 * The results header carries the mask ("io_op": {"cmd_flags_mask"}) and the names (enums "io_op").
 */
#define FST_OP_MASK 0xff
#define FST_IO_OPS(E)                                   \
	E(FST_IO_READ, 0, "read")	/* REQ_OP_READ */  \
	E(FST_IO_WRITE, 1, "write")	/* REQ_OP_WRITE */ \
	E(FST_IO_OTHER, 2, "other")	/* any other op (flush, discard, ...) */
#define FST_IO_SUBS 3
/* the histogram index of an op (cmd_flags & FST_OP_MASK) */
#define FST_IO_SUB(op) ((op) == FST_IO_READ ? FST_IO_READ : (op) == FST_IO_WRITE ? FST_IO_WRITE : FST_IO_OTHER)

/*
 * Device numbers: the kernel's internal dev_t (major << FST_MINORBITS | minor), in every record's dev/sdev
 * field and in the results header ("dev_encoding": {"minor_bits"}).  Majors have 12 bits.
 */
#define FST_MINORBITS 20
#define FST_MAJORBITS 12
#define FST_MINORMASK ((1u << FST_MINORBITS) - 1)
#define FST_KDEV(major, minor) (((__u32)(major) << FST_MINORBITS) | (__u32)(minor))
#define FST_KDEV_MAJOR(kdev) ((__u32)(kdev) >> FST_MINORBITS)
#define FST_KDEV_MINOR(kdev) ((__u32)(kdev) & FST_MINORMASK)
/* loop devices' major (include/uapi/linux/major.h LOOP_MAJOR) */
#define FST_LOOP_MAJOR 7

/*
 * What each probe measures, one id per figure (the results header's "figure" of every probe): the analysis
 * and the tests find a figure's probes by this id, never by their "measures" text, which is for people.
 * Probes that are one figure's twins (another kernel's name for the same function or tracepoint) share it.
 * FST_DECOMP_FIGURES are the per-unit decompression (or copy) times.
 */
#define FST_DECOMP_FIGURES(E)                                                          \
	E(FST_FIG_EROFS_LZ4, 32, "erofs_lz4_decompress")                                \
	E(FST_FIG_EROFS_LZMA, 33, "erofs_lzma_decompress")                              \
	E(FST_FIG_EROFS_DEFLATE, 34, "erofs_deflate_decompress")                        \
	E(FST_FIG_EROFS_ZSTD, 35, "erofs_zstd_decompress")                              \
	E(FST_FIG_EROFS_PLAIN, 36, "erofs_plain_copy")	/* uncompressed pclusters: a copy */ \
	E(FST_FIG_SQUASHFS_DECOMPRESS, 37, "squashfs_decompress")                       \
	E(FST_FIG_BTRFS_ZSTD, 38, "btrfs_zstd_decompress")                              \
	E(FST_FIG_BTRFS_LZO, 39, "btrfs_lzo_decompress")                                \
	E(FST_FIG_BTRFS_ZLIB, 40, "btrfs_zlib_decompress")
#define FST_FIGURES(E)                                                                  \
	E(FST_FIG_BIO_QUEUE, 1, "bio_queue")		/* bio queue time, owner */       \
	E(FST_FIG_BIO_SPLIT, 2, "bio_split")		/* owner of split bios */         \
	E(FST_FIG_RQ_ISSUE, 3, "rq_issue")		/* issue time, merges */          \
	E(FST_FIG_RQ_COMPLETE, 4, "rq_complete")	/* completion, size, alignment */ \
	E(FST_FIG_WORK_EXEC, 5, "work_exec")		/* loop charging, fs work items */ \
	E(FST_FIG_WORK_QUEUE, 6, "work_queue")		/* queueing delay of fs work items */ \
	E(FST_FIG_REQ_START, 7, "req_start")                                            \
	E(FST_FIG_REQ_END, 8, "req_end")                                                \
	E(FST_FIG_CPU_SPLIT, 9, "cpu_split")		/* on-CPU / off-CPU */            \
	E(FST_FIG_WAKEUP, 10, "wakeup")			/* sleep vs runqueue */           \
	E(FST_FIG_PROCESS_TREE, 11, "process_tree")                                     \
	E(FST_FIG_PCACHE_MISSES, 12, "pcache_misses")                                   \
	E(FST_FIG_LOCK_WAIT, 13, "lock_wait")                                           \
	E(FST_FIG_READAHEAD, 14, "readahead_windows")                                   \
	E(FST_FIG_EROFS_EXTENTS, 15, "erofs_extents")                                   \
	E(FST_FIG_EROFS_READAHEAD, 16, "erofs_readahead")                               \
	E(FST_FIG_EROFS_READ_FOLIO, 17, "erofs_read_folio")                             \
	E(FST_FIG_SQUASHFS_CACHE, 18, "squashfs_cache_lookups")                         \
	E(FST_FIG_SQUASHFS_CACHE_MISS, 19, "squashfs_cache_misses")                     \
	E(FST_FIG_BTRFS_COMPRESS, 20, "btrfs_compress_write")	/* compression on write, per chunk */ \
	E(FST_FIG_REQ_BOUNDS, 21, "req_bounds")	/* request start and end at a filesystem entry point */ \
	E(FST_FIG_RQ_REQUEUE, 22, "rq_requeue")	/* requeues: a request issued again is the same request */ \
	E(FST_FIG_BIO_COMPLETE, 23, "bio_complete")	/* the end of a bio that ended outside a request */ \
	FST_DECOMP_FIGURES(E)

/*
 * The figures that belong to one filesystem (figure, FST_FILESYSTEMS member): the results' schema "figure_fs",
 * so that a run that traces other filesystems does not list them as unavailable.  Every other figure is any
 * filesystem's.
 */
#define FST_FS_FIGURES(E)                                                      \
	E(FST_FIG_EROFS_EXTENTS, FST_FS_EROFS)                                  \
	E(FST_FIG_EROFS_READAHEAD, FST_FS_EROFS)                                \
	E(FST_FIG_EROFS_READ_FOLIO, FST_FS_EROFS)                               \
	E(FST_FIG_EROFS_LZ4, FST_FS_EROFS)                                      \
	E(FST_FIG_EROFS_LZMA, FST_FS_EROFS)                                     \
	E(FST_FIG_EROFS_DEFLATE, FST_FS_EROFS)                                  \
	E(FST_FIG_EROFS_ZSTD, FST_FS_EROFS)                                     \
	E(FST_FIG_EROFS_PLAIN, FST_FS_EROFS)                                    \
	E(FST_FIG_SQUASHFS_CACHE, FST_FS_SQUASHFS)                              \
	E(FST_FIG_SQUASHFS_CACHE_MISS, FST_FS_SQUASHFS)                         \
	E(FST_FIG_SQUASHFS_DECOMPRESS, FST_FS_SQUASHFS)                         \
	E(FST_FIG_BTRFS_COMPRESS, FST_FS_BTRFS)                                 \
	E(FST_FIG_BTRFS_ZSTD, FST_FS_BTRFS)                                     \
	E(FST_FIG_BTRFS_LZO, FST_FS_BTRFS)                                      \
	E(FST_FIG_BTRFS_ZLIB, FST_FS_BTRFS)

/*
 * Read amplification: figures the analysis derives per run from the records above (summary "amplification",
 * the verdict, bench rows, compare and advise all name them by these ids).  No program writes them; they are
 * here so that every figure id has one definition.  The last column says what the figure is, for people.
 */
#define FST_AMPLIFICATION(E)                                                   \
	E(FST_AMP_DEVICE_READ, 1, "device_read_per_received", "bytes read from the device level per byte the workload received") \
	E(FST_AMP_DECOMPRESSED, 2, "decompressed_per_received", "bytes decompressed per byte the workload received") \
	E(FST_AMP_UNIT_LOOKUPS, 3, "unit_lookups", "how many times each compressed unit was looked up (decompressed)") \
	E(FST_AMP_UNIT_READS, 4, "unit_device_reads", "how many times each compressed unit was read from the device") \
	E(FST_AMP_REREAD, 5, "device_reread_share", "share of the device bytes read that had been read before in the run") \
	E(FST_AMP_UNNEEDED, 6, "device_unneeded_share", "share of the device bytes read that belong to blocks the request did not need")

#define FST_ENUM_MEMBER(c, v, n) c = v,
enum fst_rec_type { FST_REC_TYPES(FST_ENUM_MEMBER) };
enum fst_req_kind { FST_REQ_KINDS(FST_ENUM_MEMBER) };
enum fst_charge { FST_CHARGES(FST_ENUM_MEMBER) };
enum fst_dev_level { FST_DEV_LEVELS(FST_ENUM_MEMBER) };
enum fst_hist_metric { FST_HIST_METRICS(FST_ENUM_MEMBER) };
enum fst_fs { FST_FILESYSTEMS(FST_ENUM_MEMBER) };
enum fst_alg { FST_ALGS(FST_ENUM_MEMBER) };
enum fst_context { FST_CONTEXTS(FST_ENUM_MEMBER) };
enum fst_tier { FST_TIERS(FST_ENUM_MEMBER) };
enum fst_work_kind { FST_WORK_KINDS(FST_ENUM_MEMBER) };
enum fst_erofs_event { FST_EROFS_EVENTS(FST_ENUM_MEMBER) };
enum fst_erofs_map_flag { FST_EROFS_MAP_FLAGS(FST_ENUM_MEMBER) };
enum fst_fs_cache_kind { FST_FS_CACHES(FST_ENUM_MEMBER) };
enum fst_io_op { FST_IO_OPS(FST_ENUM_MEMBER) };
enum fst_figure { FST_FIGURES(FST_ENUM_MEMBER) };
#define FST_PART_ENUM_MEMBER(c, v, field, ...) c = v,
enum fst_part { FST_PARTS(FST_PART_ENUM_MEMBER) };

/*
 * The tables checked where they are compiled (BPF objects and collector alike): values below 64 and each once,
 * and a count kept beside a table equal to its entries, numbered from 0 (or 1) without a gap, so an entry added
 * without its count, or a value given twice or skipped, does not compile.
 */
#define FST_ONE(c, v, ...) +1
#define FST_BIT(c, v, ...) | (1ull << (v))
#define FST_ASSERT_DISTINCT(list) \
	_Static_assert((0 list(FST_ONE)) == __builtin_popcountll(0ull list(FST_BIT)), #list ": a value twice, or one above 63")
#define FST_ASSERT_NUMBERED(list, first, n) \
	_Static_assert((0 list(FST_ONE)) == (n) && (0ull list(FST_BIT)) == ((1ull << (n)) - 1) << (first), \
		       #list ": the values " #first " to " #first " + " #n " - 1, each once")
#define FST_ASSERT_BELOW(list, n) _Static_assert((0ull list(FST_BIT)) < (1ull << (n)), #list ": every value below " #n)
FST_ASSERT_DISTINCT(FST_REC_TYPES);
FST_ASSERT_NUMBERED(FST_REQ_KINDS, 1, FST_NR_REQ_KINDS);
FST_ASSERT_DISTINCT(FST_CHARGES);
FST_ASSERT_DISTINCT(FST_DEV_LEVELS);
FST_ASSERT_DISTINCT(FST_HIST_METRICS);
FST_ASSERT_DISTINCT(FST_FILESYSTEMS);
FST_ASSERT_DISTINCT(FST_ALGS);
FST_ASSERT_DISTINCT(FST_CONTEXTS);
FST_ASSERT_NUMBERED(FST_TIERS, 0, FST_NR_TIERS);
FST_ASSERT_DISTINCT(FST_WORK_KINDS);
FST_ASSERT_DISTINCT(FST_EROFS_EVENTS);
FST_ASSERT_DISTINCT(FST_FS_CACHES);
FST_ASSERT_DISTINCT(FST_EROFS_MAP_FLAGS);
FST_ASSERT_NUMBERED(FST_PARTS, 0, FST_NR_PARTS);
FST_ASSERT_NUMBERED(FST_IO_OPS, 0, FST_IO_SUBS);
FST_ASSERT_DISTINCT(FST_FIGURES);
FST_ASSERT_DISTINCT(FST_AMPLIFICATION);

/*
 * Request: wall time [ts_start_ns, ts_end_ns] is partitioned into
 *   oncpu_ns    running (the workload's code; fstrace's own programs excluded)
 *   tracer_ns   running fstrace's BPF programs while the request was on-CPU: each handler that
 *               runs in the request's thread (or in an interrupt on top of it) times itself
 *   io_wait_ns  off-CPU, uninterruptible, in io_schedule() (task->in_iowait) or with
 *               its own block I/O in flight
 *   lock_ns     off-CPU waiting for a sleeping lock (mutex, rwsem, rt-mutex, percpu-rwsem):
 *               switched out between the lock's contention_begin and contention_end
 *   dsleep_ns   off-CPU, uninterruptible otherwise (work done by others, folio locks
 *               without I/O of its own)
 *   sleep_ns    off-CPU, interruptible
 *   runq_ns     runnable but not running (preempted, or woken and waiting for a CPU)
 *   missed_ns   not attributable: the kernel did not run our scheduler programs for a
 *               context switch in this interval (nr_missed_events counts such gaps)
 *   worker_ns   asleep while a kworker ran the filesystem work item that woke it
 *               (erofs async decompression, btrfs read end-io): work done on its behalf
 *   worker_wait_ns  asleep while that work item waited for its kworker to run
 * A sleep ended by such a wakeup is split at the work item's queue and start
 * times: before the queueing it counts as I/O wait (or dsleep) as usual.
 * pcache_adds counts folios added to the page cache while the request ran in
 * its thread: its page-cache misses, readahead included.  ra_windows and
 * ra_pages count the readahead windows the kernel decided for it and their
 * pages (page_cache_ra_order; the kernel's readahead sizing, not what was
 * already cached), ra_max_pages the largest window.
 * waker_seq names the work item (the seq of its work record) whose kworker
 * woke the request last from a sleep in it, 0 when none did.
 * sdev is the kernel dev_t (FST_KDEV: major << FST_MINORBITS | minor) of the file's superblock.
 */
#define FST_REQ_FIELDS(F, S)   \
	F(__u64, ts_start_ns)  \
	F(__u64, ts_end_ns)    \
	F(__u64, oncpu_ns)     \
	F(__u64, io_wait_ns)   \
	F(__u64, dsleep_ns)    \
	F(__u64, sleep_ns)     \
	F(__u64, runq_ns)      \
	F(__u64, missed_ns)    \
	F(__u64, worker_ns)    \
	F(__u64, worker_wait_ns) \
	F(__u64, lock_ns)      \
	F(__u64, tracer_ns)    \
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
	F(__u32, nr_missed_events) \
	F(__u32, pcache_adds)  \
	F(__u32, ra_windows)   \
	F(__u32, ra_pages)     \
	F(__u32, ra_max_pages) \
	F(__u32, nr_lock_waits) \
	F(__u32, waker_seq)    \
	F(__u16, kind)         \
	F(__u16, ftype)        \
	S(comm, 16)

/*
 * Block request, emitted once, at its last completion.  Q = first bio queued,
 * D = issued to the driver (last issued, when it was requeued), C = completed.
 * dev is the kernel dev_t of the partition or disk the request was issued to.
 * sector and bytes are the whole request's: a driver may complete a request
 * in parts and requeue the rest (a short read, an error retried), and the
 * parts add up to one record, as /proc/diskstats counts one request.
 * nr_requeues counts the times it went back to the queue after an issue.
 * nr_bios - 1 is the number of merges.  queue_stack: kernel stack id (results
 * header "io_stacks") where its first bio was queued, -1 when stacks are off,
 * FST_STACK_UNSAMPLED when the rate limit skipped it: it tells which
 * filesystem path (metadata, fragment, data readahead, ...) had to go to the
 * device.
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
	F(__s32, queue_stack)   \
	F(__u32, nr_requeues)   \
	S(comm, 16)

/*
 * Decompression of one compressed unit (erofs pcluster, squashfs block,
 * btrfs extent).  dev is the kernel dev_t of the filesystem's superblock;
 * charged_pid is the traced thread it ran in (0 when it ran elsewhere).
 */
#define FST_DECOMP_FIELDS(F, S)  \
	F(__u64, ts_start_ns)    \
	F(__u64, ts_end_ns)      \
	F(__u32, in_bytes)       \
	F(__u32, out_bytes)      \
	F(__u32, pid)            \
	F(__u32, tgid)           \
	F(__u32, charged_pid)    \
	F(__u32, dev)            \
	F(__s32, ret)            \
	F(__u16, fs)             \
	F(__u16, alg)            \
	F(__u16, context)        \
	F(__u16, tier)           \
	F(__u32, pad0)           \
	S(comm, 16)

/*
 * One execution of a known work item (tracepoint tier: exact for erofs's async
 * decompression, which is all that work function does).  ts_queue_ns is 0 when
 * the work was queued before tracing started.  seq numbers the executions from
 * 1 (a req record's waker_seq names one).  io_complete_ns, io_sector and io_dev
 * are the ts_complete_ns, sector and dev of the io record of the block request
 * whose completion queued the work (from its bio end_io, in the same call on
 * the same CPU); all 0 when no completion on a traced device did, and
 * io_complete_ns alone 0 when that request's io record was not written (or
 * not by this completion: a request completed in parts has one record).
 */
#define FST_WORK_FIELDS(F, S)    \
	F(__u64, ts_queue_ns)    \
	F(__u64, ts_start_ns)    \
	F(__u64, ts_end_ns)      \
	F(__u64, work)           \
	F(__u64, io_complete_ns) \
	F(__u64, io_sector)      \
	F(__u32, pid)            \
	F(__u32, seq)            \
	F(__u32, io_dev)         \
	F(__u16, kind)           \
	F(__u16, pad0)           \
	S(comm, 16)

/*
 * A traced thread exits: the kernel's own task delay accounting for it
 * (blkio: time in io_schedule(), from entering it to running again), the
 * ground truth fstrace's I/O wait is checked against.
 */
#define FST_TASK_FIELDS(F, S)    \
	F(__u64, ts_exit_ns)     \
	F(__u64, blkio_delay_ns) \
	F(__u32, blkio_count)    \
	F(__u32, pid)            \
	F(__u32, tgid)           \
	F(__u32, pad0)           \
	S(comm, 16)

/*
 * erofs tracepoint in a traced thread (tracepoints exist on every kernel tier).
 * map: [la, la + llen) of file ino maps to [pa, pa + plen) on the device
 * (a pcluster when map_flags has "encoded"); lookup_flags are the caller's
 * EROFS_GET_BLOCKS_* (0x2 READMORE: readahead extending to whole pclusters).
 * readahead: la = first page index, llen = pages.  read_folio: la = page index.
 * dev is the kernel dev_t of the superblock.
 */
#define FST_EROFS_FIELDS(F, S)   \
	F(__u64, ts_ns)          \
	F(__u64, ino)            \
	F(__u64, la)             \
	F(__u64, llen)           \
	F(__u64, pa)             \
	F(__u64, plen)           \
	F(__u32, pid)            \
	F(__u32, dev)            \
	F(__u32, map_flags)      \
	F(__u32, lookup_flags)   \
	F(__u16, event)          \
	F(__u16, pad0)           \
	F(__u32, pad1)

/*
 * One lookup in a filesystem's own cache (squashfs_cache_get): missed = 1 when
 * the block was read and decompressed into the cache during the lookup (a
 * nested squashfs_read_data in the same thread), 0 for a hit, including a hit
 * that slept until another reader finished filling the entry.  block is the
 * block's byte address on the device; bytes its decompressed length, or a
 * negative error.  charged_pid is the traced thread it ran in, 0 elsewhere.
 */
#define FST_FS_CACHE_FIELDS(F, S) \
	F(__u64, ts_start_ns)    \
	F(__u64, ts_end_ns)      \
	F(__u64, block)          \
	F(__u32, pid)            \
	F(__u32, tgid)           \
	F(__u32, charged_pid)    \
	F(__u32, dev)            \
	F(__s32, bytes)          \
	F(__u16, fs)             \
	F(__u16, cache)          \
	F(__u16, missed)         \
	F(__u16, tier)           \
	F(__u32, pad0)           \
	S(comm, 16)

/*
 * One block a filesystem read from its device (squashfs_read_data: a data,
 * fragment or metadata block, read and then decompressed or copied):
 * [pos, pos + bytes) is where it lies on the device, a metadata block's 2-byte
 * length header included; ret is the function's (decompressed bytes, or a
 * negative error, when pos and bytes may be incomplete).  Every call on a
 * traced superblock, in any thread, as the image's device reads are.  dev is
 * the superblock's kernel dev_t.
 */
#define FST_FS_READ_FIELDS(F, S) \
	F(__u64, ts_start_ns)    \
	F(__u64, ts_end_ns)      \
	F(__u64, pos)            \
	F(__u32, bytes)          \
	F(__u32, pid)            \
	F(__u32, dev)            \
	F(__s32, ret)            \
	F(__u16, fs)             \
	F(__u16, tier)           \
	F(__u32, pad0)

/*
 * One call of the filesystem's compressor on write (btrfs_compress_folios /
 * btrfs_compress_pages: up to 128 KiB of one file from file_pos): in_bytes
 * consumed, out_bytes produced, ret < 0 when the data did not compress (it is
 * then written uncompressed).  dev is the superblock's kernel dev_t.
 */
#define FST_COMPRESS_FIELDS(F, S) \
	F(__u64, ts_start_ns)    \
	F(__u64, ts_end_ns)      \
	F(__u64, file_pos)       \
	F(__u64, ino)            \
	F(__u32, in_bytes)       \
	F(__u32, out_bytes)      \
	F(__u32, pid)            \
	F(__u32, tgid)           \
	F(__u32, dev)            \
	F(__s32, ret)            \
	F(__u16, fs)             \
	F(__u16, alg)            \
	F(__u16, context)        \
	F(__u16, tier)           \
	S(comm, 16)

/* clang-format on */
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

struct fst_decomp {
	FST_REC_HEADER(FST_DECLARE_FIELD, FST_DECLARE_STRING)
	FST_DECOMP_FIELDS(FST_DECLARE_FIELD, FST_DECLARE_STRING)
};

struct fst_work {
	FST_REC_HEADER(FST_DECLARE_FIELD, FST_DECLARE_STRING)
	FST_WORK_FIELDS(FST_DECLARE_FIELD, FST_DECLARE_STRING)
};

struct fst_task {
	FST_REC_HEADER(FST_DECLARE_FIELD, FST_DECLARE_STRING)
	FST_TASK_FIELDS(FST_DECLARE_FIELD, FST_DECLARE_STRING)
};

struct fst_erofs {
	FST_REC_HEADER(FST_DECLARE_FIELD, FST_DECLARE_STRING)
	FST_EROFS_FIELDS(FST_DECLARE_FIELD, FST_DECLARE_STRING)
};

struct fst_fs_cache {
	FST_REC_HEADER(FST_DECLARE_FIELD, FST_DECLARE_STRING)
	FST_FS_CACHE_FIELDS(FST_DECLARE_FIELD, FST_DECLARE_STRING)
};

struct fst_compress {
	FST_REC_HEADER(FST_DECLARE_FIELD, FST_DECLARE_STRING)
	FST_COMPRESS_FIELDS(FST_DECLARE_FIELD, FST_DECLARE_STRING)
};

struct fst_fs_read {
	FST_REC_HEADER(FST_DECLARE_FIELD, FST_DECLARE_STRING)
	FST_FS_READ_FIELDS(FST_DECLARE_FIELD, FST_DECLARE_STRING)
};

/*
 * A kernel stack walk costs microseconds (ORC unwinding, frame by frame): taken for every bio it is a large
 * share of a cold read's on-CPU time.  By default a CPU takes at most one bio queue stack per this
 * interval (every bio's when they come slower); the others carry FST_STACK_UNSAMPLED.
 */
#define FST_IO_STACK_EVERY_NS 10000000ull
#define FST_STACK_UNSAMPLED (-1000)

/* the ring buffer all records share (a power of two, page-aligned) */
#define FST_RINGBUF_BYTES (16u << 20)

/*
 * The last resort for a full in-flight table: an entry this old in a bucket with no free slot is taken as one
 * whose end event never came, and the collector expires it to make room.  Entries end at their real end (a bio
 * folded into its request at issue or ended outside one, a request's last completion, a work item's run), and
 * an end that never came shows when its address is used again (FST_LOSSES *_missed); a request can stay in
 * flight for minutes (a throttled bio, a device in error recovery), so age alone ends none.
 */
#define FST_STALE_NS (600ull * 1000000000ull)

/*
 * The collector runs the expiry every FST_EXPIRE_EVERY_NS, and each run walks one slice of every in-flight table,
 * so a whole pass takes FST_EXPIRE_SLICES runs: an entry is expired between FST_STALE_NS and FST_STALE_NS plus a
 * pass after its start.  A walk of the whole tables every second would be a large share of what an idle collector
 * spends, for entries that must be ten minutes old.  Every table's bucket count
 * is a multiple of it (block.bpf.c checks).
 */
#define FST_EXPIRE_SLICES 16
#define FST_EXPIRE_EVERY_NS 1000000000ull

/*
 * Entries the kernel side could not keep, by what was full or never came (the per-CPU map `losses`, summed into
 * the header's "losses"): each is work that went untraced, counted instead of silent.
 */
/* clang-format off */
#define FST_LOSSES(E)                                                          \
	E(FST_LOSS_BIO_TABLE, 0, "bio_table_full")	/* bios in flight: their block request is not charged */ \
	E(FST_LOSS_RQ_TABLE, 1, "request_table_full")	/* block requests in flight: no queue/issue times */ \
	E(FST_LOSS_WORK_TABLE, 2, "work_table_full")	/* kworker context (loop device served, fs work item) */ \
	E(FST_LOSS_TASK_STATE, 3, "task_state_full")	/* a thread's request state: its requests are not traced */ \
	E(FST_LOSS_REQ_UNENDED, 4, "request_end_missed")	/* its end never came (a kretprobe missed): dropped */ \
	E(FST_LOSS_BIO_END_MISSED, 5, "bio_end_missed")	/* a bio's end never seen: its address was queued again */ \
	E(FST_LOSS_RQ_COMPLETION_MISSED, 6, "request_completion_missed")	/* a block request's completion never seen: its address was issued again with no requeue between (it has no io record) */ \
	E(FST_LOSS_EXITED_CALLS, 7, "exited_calls_full")	/* --budget: an exited thread's read/write syscall counts (its calls are missing from the windows' weights) */ \
	E(FST_LOSS_INFLIGHT_TABLE, 8, "inflight_table_full")	/* a thread's count of block I/O in flight: its sleeps on that I/O are not told from other waits */
#define FST_NR_LOSSES 9
enum fst_loss { FST_LOSSES(FST_ENUM_MEMBER) };
FST_ASSERT_NUMBERED(FST_LOSSES, 0, FST_NR_LOSSES);
/* clang-format on */

/*
 * Where fstrace's handlers charge their own run time to the request they ran in (the tracer part), results
 * header "tracer_sites".  A clock read costs more than most handlers' own work (docs/overhead.md, "What each
 * helper costs"), so a handler's run is timed (a clock read at its start and one at its end) only 1 in
 * FST_TRACER_TIME_EVERY times, chosen at random; every other run is charged the mean of the timed runs of its
 * site on its CPU so far.  The sums below let the analysis give the estimate's error.  The sampling program
 * (rare, and costly) times every run.  A request's start is no site: its clock read is the start handler's last
 * act (requests.bpf.c req_start).
 */
/* clang-format off */
#define FST_TRACER_SITES(E)                                                    \
	E(FST_SITE_SWITCH_IN, 0, "sched_switch")                               \
	E(FST_SITE_PCACHE_ADD, 1, "mm_filemap_add_to_page_cache")              \
	E(FST_SITE_CONTENTION, 2, "contention_begin/end")                      \
	E(FST_SITE_RA_ORDER, 3, "page_cache_ra_order")                         \
	E(FST_SITE_BIO_QUEUE, 4, "block_bio_queue")                            \
	E(FST_SITE_RQ_ISSUE, 5, "block_rq_issue")                              \
	E(FST_SITE_RQ_COMPLETE, 6, "block_rq_complete")                        \
	E(FST_SITE_EROFS, 7, "erofs")                                          \
	E(FST_SITE_DECOMP, 8, "decompressors")                                 \
	E(FST_SITE_SAMPLE, 9, "perf_event sampling")                           \
	E(FST_SITE_FS_ENTER, 10, "filesystem entry point")	/* one entered or left inside a request (fentry, kprobe) */
#define FST_NR_TRACER_SITES 11
enum fst_tracer_site_id { FST_TRACER_SITES(FST_ENUM_MEMBER) };
FST_ASSERT_NUMBERED(FST_TRACER_SITES, 0, FST_NR_TRACER_SITES);
/* clang-format on */
#define FST_TRACER_TIME_EVERY 16

/* per CPU and site (tracer.bpf.h tracer_charge) */
struct fst_tracer_site {
	__u64 runs;	   /* handler runs charged to a request */
	__u64 timed;	   /* of them timed */
	__u64 timed_ns;	   /* their run times' sum */
	__u64 timed_sq_ns; /* and sum of squares (ns^2), for the estimate's error */
	__u64 charged_ns;  /* what was charged to requests in all: timed runs' times plus the means */
	__u64 mean_ns;	   /* timed_ns / timed, charged to an untimed run */
	__u32 rng;	   /* xorshift state choosing the timed runs */
	__u32 pad;
};

/* ---- in-kernel aggregates, read by the collector at the end ---- */

#define FST_HIST_SLOTS 40

/* frames of a kernel stack (BPF_MAP_TYPE_STACK_TRACE values) and stack ids one stack map holds */
#define FST_MAX_STACK_DEPTH 127
#define FST_MAX_STACKS 16384

/*
 * The counted requests' aggregate (requests.bpf.c req_agg, preallocated per CPU): an entry per (superblock, kind),
 * numbered the first time a request of that kind on that superblock is counted (agg_keys).  An array, not a hash
 * keyed by (kind, superblock): a thread keeps the numbers of the files it reads, and the array's lookup is a few
 * instructions the verifier inlines, where the hash's is a helper call that hashes the key on every counted
 * request.
 */
#define FST_REQ_AGG_MAX 64

struct fst_hist_key {
	__u32 metric;
	__u32 dev; /* device for IO metrics, 0 otherwise */
	__u32 sub; /* IO metrics: op (FST_IO_OPS: 0 read, 1 write, 2 other); requests: kind */
};

struct fst_hist {
	__u64 slots[FST_HIST_SLOTS];
};

/*
 * Requests counted in the kernel instead of recorded (unless --records all): those that never left the CPU,
 * issued no block I/O, added nothing to the page cache, returned no error and stayed under the latency
 * threshold (page-cache hits).  Per (kind, superblock dev), per CPU; with the records they add up to every
 * request, part by part.  Histograms use log2_slot() of microseconds, as the records' do in the analysis.
 */
struct fst_req_agg_key {
	__u32 sdev;
	__u16 kind;
	__u16 pad;
};

/*
 * Log-linear latency slots in ns for the counted requests' percentiles: 0..7 ns exactly, then 8 slots per
 * power of two (slot = (e - 2) * 8 + the 3 bits after the leading one, e = floor(log2 ns)), each at most
 * 1/8 of its value wide.  A slot's values: [(8 + m) << (e - 3), (9 + m) << (e - 3)).
 */
#define FST_LAT_SUB_BITS 3
#define FST_LAT_SLOTS 256

/* floor(log2(v)), 0 for 0 and 1: a binary search without loops or clz (BPF has neither to rely on; the
 * 6.1 verifier only takes loops whose back-edge is a jump, and clang decides that, not us) */
static inline __u32 fst_log2(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) {
		v >>= 32;
		r += 32;
	}
	if (v >> 16) {
		v >>= 16;
		r += 16;
	}
	if (v >> 8) {
		v >>= 8;
		r += 8;
	}
	if (v >> 4) {
		v >>= 4;
		r += 4;
	}
	if (v >> 2) {
		v >>= 2;
		r += 2;
	}
	if (v >> 1) {
		r += 1;
	}
	return r;
}

/* the log-linear slot of a latency in ns (the BPF side and the collector's live view) */
static inline __u32 fst_loglin_slot(__u64 ns)
{
	if (ns < (1u << FST_LAT_SUB_BITS))
		return (__u32)ns;
	__u32 e = fst_log2(ns);
	__u32 slot = (e - 2) * (1u << FST_LAT_SUB_BITS) + (__u32)((ns >> (e - FST_LAT_SUB_BITS)) & 7);
	return slot < FST_LAT_SLOTS ? slot : FST_LAT_SLOTS - 1;
}

struct fst_req_agg {
	__u64 count;
	__u64 bytes; /* sum of positive return values */
	__u64 wall_ns;
	__u64 part_ns[FST_NR_PARTS];
	__u64 wall_ns_loglin[FST_LAT_SLOTS];
	__u64 wall_hist[FST_HIST_SLOTS];
	__u64 part_hist[FST_NR_PARTS][FST_HIST_SLOTS]; /* over the requests with any of that part */
	__u64 pcache_adds;			       /* folios they added to the page cache (0 unless cfg.records_none: a counted
							* request otherwise added none) */
};

/*
 * Requests per task name, for the exposition's bounded process labels (--per-comm): per (comm, superblock,
 * kind) up to FST_COMM_AGG_MAX series; the requests of every later name go to the one key with an empty comm,
 * sdev 0 and kind 0 (the collector creates it first), so the totals stay whole.
 */
#define FST_COMM_AGG_MAX 64

struct fst_comm_agg_key {
	char comm[16];
	__u32 sdev;
	__u16 kind;
	__u16 pad;
};

struct fst_comm_agg {
	__u64 count;
	__u64 bytes;
	__u64 wall_ns;
	__u64 io_wait_ns;
};

/* alignment of completed block requests per device, counted in the kernel */
struct fst_align {
	__u64 nr;
	__u64 start_4k;	  /* start offset % 4096 == 0 */
	__u64 end_4k;	  /* end offset % 4096 == 0 */
	__u64 start_unit; /* start offset % unit == 0 (unit = fs block/cluster size) */
	__u64 end_unit;
	__u64 cross_unit; /* [start, end) spans a unit boundary it does not start on */
};

/*
 * Exact sums of a device's completed block requests of one op (fst_dev_io.sums), beside the log2 histograms
 * (which keep only counts): the exposition's histogram _sum, and the mean request size per device.  Kept only
 * for an exposition (cfg.io_sums): a run's records have these figures.
 */
struct fst_io_sum {
	__u64 bytes;
	__u64 q2c_ns; /* over the requests whose queueing was seen (the q2c histogram's) */
	__u64 d2c_ns;
};

/*
 * What a traced device's completed block requests add up to, in the dev_io array entry its fst_dev_cfg
 * names: the completion handler reaches it with no hash lookup (it would need four per completion).  Log2
 * histograms per op (FST_IO_SUBS: read, write, other) of size, queue-to-complete and issue-to-complete, the
 * alignment counters, and for an exposition the exact sums.  The results header carries them as the
 * "histograms" rows of metrics FST_H_IO_BYTES / FST_H_IO_Q2C_US / FST_H_IO_D2C_US and the "alignment" rows.
 */
#define FST_MAX_TRACED_DEVS 64
struct fst_dev_io {
	struct fst_align align;
	__u64 bytes[FST_IO_SUBS][FST_HIST_SLOTS];
	__u64 q2c_us[FST_IO_SUBS][FST_HIST_SLOTS];
	__u64 d2c_us[FST_IO_SUBS][FST_HIST_SLOTS];
	struct fst_io_sum sums[FST_IO_SUBS];
};

/*
 * --budget (serve, attach): a traced device's completed block requests from block_rq_complete alone, per CPU
 * (block.bpf.c dev_done, a per-CPU array the collector sums): io as in fst_dev_io, with sums always kept, its
 * q2c from the request's start_time_ns and its d2c from io_start_time_ns, the block layer's own timestamps
 * (set only where it keeps them: start_time_ns with iostats or an I/O scheduler, io_start_time_ns with queue
 * statistics); a request without one is left out of that histogram, so the collector tells per device and op
 * whether it covers every request (its count against the size histogram's; else the issue hook's takes its place).
 */
struct fst_dev_done {
	struct fst_dev_io io;
};

/* off-CPU time per (kernel stack, reason), accumulated in the kernel */
/* clang-format off */
#define FST_OFFCPU_REASONS(E)                     \
	E(FST_OFF_IO, 1, "io_wait")               \
	E(FST_OFF_DSLEEP, 2, "dsleep")            \
	E(FST_OFF_SLEEP, 3, "sleep")              \
	E(FST_OFF_WORKER, 4, "worker")            \
	E(FST_OFF_LOCK, 5, "lock_wait")

enum fst_offcpu_reason { FST_OFFCPU_REASONS(FST_ENUM_MEMBER) };
/* clang-format on */
#define FST_MAX_OFFCPU_REASONS 8
FST_ASSERT_DISTINCT(FST_OFFCPU_REASONS);
FST_ASSERT_BELOW(FST_OFFCPU_REASONS, FST_MAX_OFFCPU_REASONS);

/* frames kept of a sampled user stack (each a struct bpf_stack_build_id) */
#define FST_USER_STACK_DEPTH 32

/* one sampled stack, counted in the kernel (sample.bpf.c) */
struct fst_sample_key {
	__u32 pid;
	__u32 tgid;
	__s32 stack_id;	     /* kernel stack; negative: it could not be recorded */
	__s32 user_stack_id; /* user stack of a traced thread; negative: none (kworker) or not recorded */
	__u32 work_kind;     /* 0: a traced thread in a request; else the work kind its kworker was running */
};

struct fst_offcpu_key {
	__s32 stack_id;
	__u32 reason;
};

/* drop counters, one per record type (index = enum fst_rec_type) */
#define FST_MAX_REC_TYPES 16
FST_ASSERT_BELOW(FST_REC_TYPES, FST_MAX_REC_TYPES);

#endif
