/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Reads of kernel objects whose layout differs between the kernels fstrace runs on: every CO-RE shim (a field
 * that may be absent, a ___flavour of a structure, a value read from the running kernel's BTF) is here, so the
 * programs read one name and a change in the kernel is fixed in one place.
 *
 * Each shim names the kernel change it follows: its subject line, the first release that has it, and its
 * commit id where an upstream commit list confirmed it.  Every before and after was checked in the BTF of
 * Debian bookworm's 6.1 and bookworm-backports' 6.12 kernels (vmlinux and the erofs and btrfs modules) and of
 * a 6.18 kernel: `bpftool btf dump file ... format c`.
 */
#ifndef FSTRACE_COMPAT_BPF_H
#define FSTRACE_COMPAT_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */

/*
 * A bio's device.  Until "block: store a block_device pointer in struct bio" (5.12, commit 309dca309fc3) a bio
 * named its disk and partition number (bi_disk, bi_partno: Debian bullseye's 5.10), since then its block_device
 * (bi_bdev: 6.1, 6.12, 6.18).
 */
struct bio___with_disk {
	struct gendisk *bi_disk;
	__u8 bi_partno;
} __attribute__((preserve_access_index));

static __always_inline __u32 bio_dev(struct bio *bio, bool btf)
{
	if (bpf_core_field_exists(bio->bi_bdev)) {
		struct block_device *bdev = FST_FIELD(btf, bio, bi_bdev); /* FST_FIELD does not nest */
		return FST_FIELD(btf, bdev, bd_dev);
	}
	struct bio___with_disk *old = (void *)bio;
	struct gendisk *disk = BPF_CORE_READ(old, bi_disk);
	return FST_KDEV(BPF_CORE_READ(disk, major), BPF_CORE_READ(disk, first_minor) + BPF_CORE_READ(old, bi_partno));
}

/*
 * The disk of a block request.  Its request_queue names it (6.1, 6.12, 6.18); before "block: remove the ->rq_disk
 * field in struct request" (5.17, commit f3fa33acca9f: its LTTng fix and a mainline commit list say so) the
 * request did, and a 5.10 request_queue has no disk (Debian bullseye's).
 */
struct request___with_rq_disk {
	struct gendisk *rq_disk;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *request_disk(struct request *rq)
{
	if (bpf_core_field_exists(struct request___with_rq_disk, rq_disk))
		return BPF_CORE_READ((struct request___with_rq_disk *)rq, rq_disk);
	return BPF_CORE_READ(rq, q, disk);
}

/*
 * The device of the partition a block request is accounted to, 0 when it has none (its disk stands for it then).
 * struct request has part in 5.10, 6.1, 6.12 and 6.18 alike, but until "block: merge struct block_device and
 * struct hd_struct" (5.11: the subject in linux-next's reports on the block tree) it was a struct hd_struct,
 * whose device number is in its struct device (Debian bullseye's 5.10); the test of part's existence keeps a kernel without it loading the block
 * programs, on the disk's device.
 */
struct hd_struct___old {
	struct device __dev;
} __attribute__((preserve_access_index));

struct request___with_hd_struct {
	struct hd_struct___old *part;
} __attribute__((preserve_access_index));

static __always_inline __u32 request_part_dev(struct request *rq, bool btf)
{
	if (!bpf_core_field_exists(rq->part))
		return 0;
	if (bpf_core_type_exists(struct hd_struct___old)) {
		struct hd_struct___old *hd = BPF_CORE_READ((struct request___with_hd_struct *)rq, part);
		return hd ? BPF_CORE_READ(hd, __dev.devt) : 0;
	}
	struct block_device *part = FST_FIELD(btf, rq, part);
	return part ? FST_FIELD(btf, part, bd_dev) : 0;
}

/*
 * A thread's read and write syscall counts (task I/O accounting, what /proc/PID/task/TID/io shows as syscr and
 * syscw) into *c; false when the kernel keeps none.  Not a kernel change: struct task_struct has ioac only with
 * CONFIG_TASK_XACCT (Debian's 6.1 and 6.12 kernels and the 6.18 one have it).
 */
static __always_inline bool task_io_calls(struct task_struct *task, struct fst_io_calls *c)
{
	if (!bpf_core_field_exists(task->ioac))
		return false;
	c->reads = BPF_CORE_READ(task, ioac.syscr);
	c->writes = BPF_CORE_READ(task, ioac.syscw);
	return true;
}

/*
 * btrfs: the superblock device of the inode a compressed extent belongs to.  compressed_bio held the inode
 * itself (6.1); the btrfs_bio it embeds since "btrfs: embed a btrfs_bio into struct compressed_bio" (6.4, commit
 * 544fe4a903ce: the subject and id in greg k-h's stable mails' lists of upstream commits, and in linux-next's
 * list of the 6.4 merge window) holds it (6.12, 6.18: compressed_bio.bbio.inode).  Not checked: that this
 * commit, rather than another of its series, dropped compressed_bio.inode.
 */
struct compressed_bio___with_inode {
	struct inode *inode;
};

static __always_inline __u32 compressed_bio_dev(struct compressed_bio *cb)
{
	struct compressed_bio___with_inode *old = (void *)cb;
	if (bpf_core_field_exists(old->inode))
		return BPF_CORE_READ(old, inode, i_sb, s_dev);
	return BPF_CORE_READ(cb, bbio.inode, vfs_inode.i_sb, s_dev);
}

/*
 * btrfs write compression: the compression type from btrfs_compress_pages/_folios' first argument, which
 * carried the level in bits 4-7 too (type_level) until the level became an argument of its own (the patch
 * "btrfs/zstd: enable negative compression levels mount option", January 2025; its release was not checked:
 * 6.12's BTF has type_level, 6.18's type and level).  The low four bits are the type either way.
 */
static __always_inline __u32 btrfs_compress_type(__u64 type_or_type_level)
{
	return type_or_type_level & 0xf;
}

/*
 * btrfs write compression: the inode whose data btrfs_compress_folios compresses.  It took the file's
 * address_space until "btrfs: pass btrfs_inode pointer directly into btrfs_compress_folios()" (posted August
 * 2025; 6.12's BTF has mapping, 6.18's inode), the btrfs_inode since.  Which one this kernel passes the
 * collector reads from its BTF (cfg.btrfs_compress_owner_is_inode, with the argument positions).
 */
static __always_inline struct inode *btrfs_compress_inode(__u64 owner)
{
	if (cfg.btrfs_compress_owner_is_inode)
		return __builtin_preserve_access_index(&((struct btrfs_inode *)owner)->vfs_inode);
	return BPF_CORE_READ((struct address_space *)owner, host);
}

/*
 * erofs: struct erofs_map_blocks m_flags in records.h's FST_EROFS_MAP_* bits.  Until "erofs: remove
 * linux/buffer_head.h dependency" (6.3) they were buffer_head state bits: 1 << BH_Mapped, 1 << BH_Meta and
 * 1 << (BH_PrivateStart + 0..3) for encoded, full-mapped, fragment and partial-ref; since then 0x1..0x20, the
 * values records.h names.  (The patch on linux-erofs shows both, a kernel.org push log of the 6.3 merge window
 * lists it among mainline's commits; 6.1's erofs module has the BH_Encoded enum, 6.12's has not.)  BH_PrivateStart is read from the kernel: 6.1 and 6.12 have 16, 6.18 has 17.  The old
 * encoding never sets bit 0 (BH_Uptodate) and always sets BH_Mapped on a mapped extent, so a value tells which
 * encoding it is in.
 */
static __always_inline __u32 erofs_map_flags(__u32 f)
{
	__u32 mapped = 1u << bpf_core_enum_value(enum bh_state_bits, BH_Mapped);
	__u32 meta = 1u << bpf_core_enum_value(enum bh_state_bits, BH_Meta);
	__u32 priv = bpf_core_enum_value(enum bh_state_bits, BH_PrivateStart);
	if ((f & 0x1) || !(f & mapped))
		return f;
	return FST_EROFS_MAP_MAPPED | (f & meta ? FST_EROFS_MAP_META : 0) |
	       (f & (1u << priv) ? FST_EROFS_MAP_ENCODED : 0) | (f & (2u << priv) ? FST_EROFS_MAP_FULL_MAPPED : 0) |
	       (f & (4u << priv) ? FST_EROFS_MAP_FRAGMENT : 0) | (f & (8u << priv) ? FST_EROFS_MAP_PARTIAL_REF : 0);
}

/*
 * A page's index in its file, for the erofs_readpage tracepoint, which hands over a struct page: kernels older
 * than 6.1 have it (6.1, 6.12 and 6.18 have erofs_read_folio instead).  struct page lost index in "mm: rename
 * page->index to page->__folio_index" (6.16: Andrew Morton's "Additional MM updates for 6.16-rc1" pull lists it;
 * 6.1 and 6.12 have page.index, 6.18 page.__folio_index), so the field is read through a flavour that only has
 * to load where it is gone: 0 there (where the tracepoint is long gone too).
 */
struct page___with_index {
	struct address_space *mapping;
	unsigned long index;
} __attribute__((preserve_access_index));

static __always_inline unsigned long page_index(struct page___with_index *page)
{
	return bpf_core_field_exists(page->index) ? BPF_CORE_READ(page, index) : 0;
}

/*
 * getdents64: the room left in the caller's buffer.  The callback state (struct getdents_callback64) kept it as
 * count until "readdir: supply dir_context.count as readdir buffer size hint" (6.16, commit 467e245d47e6: the
 * subject and id in a bisection of the mainline merge of fuse-update-6.16 quoted on linux-fsdevel); since then
 * the dir_context the filesystem is handed keeps it (6.12: getdents_callback64.count; 6.18: dir_context.count).
 */
struct getdents_callback64___with_count {
	int count;
};
struct dir_context___with_count {
	int count;
};

static __always_inline int dir_room(struct dir_context *dir)
{
	struct getdents_callback64___with_count *buf = (void *)dir; /* its first member is the dir_context */
	if (bpf_core_field_exists(buf->count))
		return BPF_CORE_READ(buf, count);
	return BPF_CORE_READ((struct dir_context___with_count *)dir, count);
}

/*
 * Types of kernel modules (btrfs_work; loop_device and loop_worker: btrfs and loop are modules in Debian's
 * kernels) are in BTF only where modules have BTF of their own: since "bpf: Load and verify kernel module BTFs"
 * (5.11, commit 36e68442d1af; Debian bullseye's 5.10 has no /sys/kernel/btf/<module>).  Without them these
 * give 0 or NULL and the work item is not told apart (its kworker's time stays unattributed).  The loop
 * device's work items are newer still: "loop: use worker per cgroup instead of kworker" brought loop_worker
 * and rootcg_work (its release not checked; 6.1 has both, a 5.10 loop device runs a kthread worker instead).
 */
static __always_inline __u64 btrfs_work_func(struct work_struct *work)
{
	if (!bpf_core_field_exists(struct btrfs_work, normal_work))
		return 0;
	struct btrfs_work *bw = (void *)work - bpf_core_field_offset(struct btrfs_work, normal_work);
	return (__u64)BPF_CORE_READ(bw, func);
}

static __always_inline struct loop_device *loop_rootcg_device(struct work_struct *work)
{
	if (!bpf_core_field_exists(struct loop_device, rootcg_work))
		return NULL;
	return (void *)work - bpf_core_field_offset(struct loop_device, rootcg_work);
}

static __always_inline struct loop_device *loop_worker_device(struct work_struct *work)
{
	if (!bpf_core_field_exists(struct loop_worker, work))
		return NULL;
	struct loop_worker *w = (void *)work - bpf_core_field_offset(struct loop_worker, work);
	return BPF_CORE_READ(w, lo);
}

/*
 * A task's state, for sched_switch's prev_state where the tracepoint does not pass it: "sched/tracing: Append
 * prev_state to tp args instead" (5.18) added it as the last argument (fst_cfg.sched_switch_prev_state, read from
 * the tracepoint's BTF), with the value of prev->__state, read here instead.  task_struct.state became __state in
 * "sched: Change task_struct::state" (5.14, commit 2f064a59a11f); Debian bullseye's 5.10 has state.
 */
struct task_struct___with_state {
	long state;
} __attribute__((preserve_access_index));

static __always_inline unsigned int task_run_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___with_state *)t, state);
}

#endif
