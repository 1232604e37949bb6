/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Requests bounded at the filesystems' entry points (requests.bpf.c), by fentry/fexit or kprobe/kretprobe.
 */
#ifndef FSTRACE_REQ_ENTRY_POINTS_BPF_H
#define FSTRACE_REQ_ENTRY_POINTS_BPF_H

/*
 * Requests bounded at the filesystems' entry points.  A program on sys_enter/sys_exit puts every thread of the
 * system on the syscall slow path (kernel/tracepoint.c syscall_regfunc), whatever it does; where the kernel
 * allows trampolines (fentry/fexit, or their kprobe/kretprobe twins where it has kprobes), a request of the
 * kinds in fs_bound_kinds begins and ends at the traced filesystems' own functions instead, and only the calls
 * they hook pay.  Functions other filesystems share (generic_file_read_iter, the splice readers,
 * vfs_fsync_range, sync_filesystem) compare the file's superblock with cfg.sdevs before anything else.
 *
 * The same requests as the syscall tracepoints': one begins only inside a syscall of its kind (the thread's
 * current syscall, from its user registers: execve reading a binary is no read request), with that syscall's
 * number, byte count and position; it returns what the function returned, which is what the syscall returns
 * (getdents64's bytes from its callback's state).  Stat calls and opens begin before the file is known (its
 * path is looked up inside them: vfs_statx, vfs_fstat, do_statx_fd, do_sys_openat2), by every thread the task
 * filters trace, and are placed at their end, as sys_exit places them: by the attributes returned, by the
 * descriptor opened.  Every part is kept as the syscall tracepoints keep it (sched_switch, sched_wakeup... see
 * the task state in task.bpf.h).
 *
 * Nesting: the thread's outermost boundary function bounds the request (sendfile's do_splice_direct, not the
 * splice_read and read_iter it calls; a stacked filesystem's read, not its backing file's); the ones entered
 * inside only count their depth.  fentry/fexit pairs are exact (the exit program is attached first and detached
 * last, so no call is seen entering without its exit).  A kretprobe can be missed (the kernel keeps a bounded
 * number of them in flight), so a kprobe-begun request keeps the stack pointer of its entry: an entry not
 * deeper in the stack than that one is not nested, and the request whose end was missed is dropped (counted).
 */

#define FST_MAX_NEST 32 /* deeper than any stacking: taken as ends that were missed */

/* what getdents64 returns (fs/readdir.c): the bytes its callback wrote when it wrote any, else the callback's
 * error or the directory read's */
static __always_inline long getdents_ret(struct task_req *r, long ret)
{
	struct getdents_callback64 *buf = (void *)r->result;
	if (ret >= 0)
		ret = BPF_CORE_READ(buf, error);
	if (BPF_CORE_READ(buf, prev_reclen))
		ret = (long)r->dir_count - dir_room((struct dir_context *)buf);
	return ret;
}

/*
 * A boundary function of kind was entered.  f, inode, sb: its file, inode and superblock as its arguments give
 * them (NULL where they do not: a path not looked up yet; sb alone for sync_filesystem); dir: a directory read's
 * callback state.  btf: they are BTF pointers (fentry), else numbers (kprobe, whose stack pointer sp is).
 */
static __always_inline void bound_enter(__u16 kind, struct file *f, struct inode *inode, struct super_block *sb,
					struct dir_context *dir, struct kstat *kst, bool btf, __u64 sp)
{
	if (!kind_fs_bound(kind))
		return;
	__u32 dev = sb ? FST_FIELD(btf, sb, s_dev) : 0;
	/* another filesystem's call on a shared function costs this much (its fexit's test is the same); a kprobe
	 * looks at the thread's state first, as its kretprobe, which has no arguments to test, counts it */
	if (btf && sb && !sdev_in_cfg(dev))
		return;
	struct task_struct *cur = bpf_get_current_task_btf();
	struct task_req *r = cfg.task_storage ? bpf_task_storage_get(&task_reqs, cur, 0, 0) : current_state();
	if (r && r->in_req) {
		if ((btf || r->bound != FST_BOUND_KPROBE || sp < r->frame_sp) && r->depth < FST_MAX_NEST) {
			__u64 t0 = tracer_clock(r, FST_SITE_FS_ENTER);
			r->depth++;
			tracer_charge_from(r, FST_SITE_FS_ENTER, t0);
			return;
		}
		loss_count(FST_LOSS_REQ_UNENDED); /* not inside it: its end was missed */
		r->in_req = 0;
	}
	if (!btf && sb && !sdev_in_cfg(dev))
		return;
	r = traced_state(cur, r);
	if (!r)
		return;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(cur);
	long id = FST_SYSCALL_NR(regs);
	if (fst_syscall_kind(id) != kind)
		return;
	req_begin(r, id, kind, regs);
	r->bound = btf ? FST_BOUND_FENTRY : FST_BOUND_KPROBE;
	r->frame_sp = sp;
	if (f) {
		note_file(r, f, btf);
	} else if (inode) {
		note_inode(r, inode, btf);
	} else if (sb) {
		r->sdev = dev;
		r->sdev_traced = 1;
	}
	if (dir && cfg.filldir64 && (__u64)BPF_CORE_READ(dir, actor) == cfg.filldir64) {
		r->result = (__u64)dir;
		r->dir_count = dir_room(dir);
	}
	if (kst)
		r->result = (__u64)kst;
	req_start(r);
}

/* a boundary function of kind returned ret; sb as its entry had it (fexit), NULL (kretprobe, or none) */
static __always_inline void bound_exit(__u16 kind, struct super_block *sb, bool btf, long ret)
{
	if (!kind_fs_bound(kind))
		return;
	if (btf && sb && !sdev_in_cfg(FST_FIELD(btf, sb, s_dev)))
		return;
	struct task_req *r = current_state();
	if (!r || !r->in_req)
		return;
	if (r->depth) {
		__u64 t0 = tracer_clock(r, FST_SITE_FS_ENTER);
		r->depth--;
		tracer_charge_from(r, FST_SITE_FS_ENTER, t0);
		return;
	}
	if (r->bound != (btf ? FST_BOUND_FENTRY : FST_BOUND_KPROBE))
		return;
	__u64 now = bpf_ktime_get_ns();
	req_end(r, now);
	note_opened(r, ret);
	if (r->kind == FST_REQ_GETDENTS && r->result)
		ret = getdents_ret(r, ret);
	/* a stat call: the struct kstat the kernel filled, else (statx of a descriptor) the caller's buffer */
	if (r->kind == FST_REQ_STAT && ret == 0) {
		if (r->result)
			note_kstat(r);
		else if (r->statbuf)
			note_statbuf(r);
	}
	req_finish(r, ret, now);
}

/*
 * A boundary function's programs: fentry/fexit (FS_TRAMPOLINES), and the kprobe/kretprobe twins (FS_KPROBES; the
 * collector loads one pair).  LOCATE sets f, inode, sb and dir from the arguments, with `btf` in scope (true:
 * BTF pointers, fentry and fexit; false: numbers, kprobe); the kretprobe has no arguments and locates nothing.
 * fexit takes every argument (its return value comes after them); a kprobe takes at most five here.
 */
#define LOCATED(LOCATE)                 \
	struct file *f = NULL;          \
	struct inode *inode = NULL;     \
	struct super_block *sb = NULL;  \
	struct dir_context *dir = NULL; \
	struct kstat *kst = NULL;       \
	LOCATE;                         \
	(void)f, (void)inode, (void)dir, (void)kst

#define FS_TRAMPOLINES(fn, kind, LOCATE, RET_T, ...)               \
	SEC("fentry/" #fn)                                         \
	int BPF_PROG(fn##_fentry, __VA_ARGS__)                     \
	{                                                          \
		const bool btf = true;                             \
		LOCATED(LOCATE);                                   \
		bound_enter(kind, f, inode, sb, dir, kst, btf, 0); \
		return 0;                                          \
	}                                                          \
	SEC("fexit/" #fn)                                          \
	int BPF_PROG(fn##_fexit, __VA_ARGS__, RET_T ret)           \
	{                                                          \
		const bool btf = true;                             \
		LOCATED(LOCATE);                                   \
		bound_exit(kind, sb, btf, ret);                    \
		return 0;                                          \
	}

#define FS_KPROBES(fn, kind, LOCATE, RET_T, ...)                                 \
	SEC("kprobe/" #fn)                                                       \
	int BPF_KPROBE(fn##_kprobe, __VA_ARGS__)                                 \
	{                                                                        \
		const bool btf = false;                                          \
		LOCATED(LOCATE);                                                 \
		bound_enter(kind, f, inode, sb, dir, kst, btf, PT_REGS_SP(ctx)); \
		return 0;                                                        \
	}                                                                        \
	SEC("kretprobe/" #fn)                                                    \
	int BPF_KRETPROBE(fn##_kretprobe, RET_T ret)                             \
	{                                                                        \
		bound_exit(kind, NULL, false, ret);                              \
		return 0;                                                        \
	}

#define BOUND_PROBES(fn, kind, LOCATE, RET_T, ...)           \
	FS_TRAMPOLINES(fn, kind, LOCATE, RET_T, __VA_ARGS__) \
	FS_KPROBES(fn, kind, LOCATE, RET_T, __VA_ARGS__)

/* LOCATEs: from a file, a kiocb's file, a superblock */
#define FROM_FILE(file)                     \
	f = (file);                         \
	inode = FST_FIELD(btf, f, f_inode); \
	sb = FST_FIELD(btf, inode, i_sb)
#define FROM_IOCB(iocb) FROM_FILE(FST_FIELD(btf, iocb, ki_filp))
#define FROM_SB(s) sb = (s)
#define NOWHERE /* found later (placed inside), or never (sync) */

/* reads: the filesystems' own read_iter, the one squashfs (and older erofs) shares, and sendfile's splice */
BOUND_PROBES(erofs_file_read_iter, FST_REQ_READ, FROM_IOCB(iocb), long, struct kiocb *iocb, struct iov_iter *to)
BOUND_PROBES(btrfs_file_read_iter, FST_REQ_READ, FROM_IOCB(iocb), long, struct kiocb *iocb, struct iov_iter *to)
BOUND_PROBES(generic_file_read_iter, FST_REQ_READ, FROM_IOCB(iocb), long, struct kiocb *iocb, struct iov_iter *iter)
/* sendfile to a file (/dev/null): one call, splicing in pipe-sized pieces */
FS_TRAMPOLINES(do_splice_direct, FST_REQ_READ, FROM_FILE(in), long, struct file *in, loff_t *ppos, struct file *out,
	       loff_t *opos, size_t len, unsigned int flags)
FS_KPROBES(do_splice_direct, FST_REQ_READ, FROM_FILE(in), long, struct file *in, loff_t *ppos, struct file *out,
	   loff_t *opos, size_t len)
/* sendfile to a pipe: the filesystem's splice_read (6.5+ filemap_splice_read, before generic_file_splice_read) */
BOUND_PROBES(filemap_splice_read, FST_REQ_READ, FROM_FILE(in), long, struct file *in, loff_t *ppos,
	     struct pipe_inode_info *pipe, size_t len, unsigned int flags)
BOUND_PROBES(generic_file_splice_read, FST_REQ_READ, FROM_FILE(in), long, struct file *in, loff_t *ppos,
	     struct pipe_inode_info *pipe, size_t len, unsigned int flags)

/* directory reads: each filesystem's iterate_shared */
#define DIR_PROBES(fn) \
	BOUND_PROBES(fn, FST_REQ_GETDENTS, FROM_FILE(file); dir = dctx, int, struct file *file, struct dir_context *dctx)
DIR_PROBES(erofs_readdir)
DIR_PROBES(squashfs_readdir)
DIR_PROBES(btrfs_real_readdir)

/* stat: a path's lookup and getattr, a descriptor's getattr (6.10+: statx of a descriptor apart), each placed by
 * the attributes it returns (vfs_getattr, which they all call, is inlined into them) */
BOUND_PROBES(vfs_statx, FST_REQ_STAT, kst = stat, int, int dfd, struct filename *filename, int flags,
	     struct kstat *stat, u32 request_mask)
BOUND_PROBES(vfs_fstat, FST_REQ_STAT, kst = stat, int, int fd, struct kstat *stat)
BOUND_PROBES(do_statx_fd, FST_REQ_STAT, NOWHERE, int, int fd, unsigned int flags, unsigned int mask,
	     struct statx *buffer)

/* open: the lookup and open of open/openat/openat2, whose descriptor places it */
BOUND_PROBES(do_sys_openat2, FST_REQ_OPEN, NOWHERE, int, int dfd, const char *filename, struct open_how *how)

/* writes (btrfs is the traced filesystem that writes) */
BOUND_PROBES(btrfs_file_write_iter, FST_REQ_WRITE, FROM_IOCB(iocb), long, struct kiocb *iocb, struct iov_iter *from)

/* fsync and fdatasync, syncfs, and sync (every filesystem's: kept for a process tree, as sys_enter keeps it) */
BOUND_PROBES(vfs_fsync_range, FST_REQ_SYNC, FROM_FILE(file), int, struct file *file, loff_t start, loff_t end,
	     int datasync)
BOUND_PROBES(sync_filesystem, FST_REQ_SYNC, FROM_SB(s), int, struct super_block *s)

SEC("fentry/ksys_sync")
int BPF_PROG(ksys_sync_fentry)
{
	bound_enter(FST_REQ_SYNC, NULL, NULL, NULL, NULL, NULL, true, 0);
	return 0;
}
SEC("fexit/ksys_sync")
int BPF_PROG(ksys_sync_fexit)
{
	bound_exit(FST_REQ_SYNC, NULL, true, 0);
	return 0;
}
SEC("kprobe/ksys_sync")
int BPF_KPROBE(ksys_sync_kprobe)
{
	bound_enter(FST_REQ_SYNC, NULL, NULL, NULL, NULL, NULL, false, PT_REGS_SP(ctx));
	return 0;
}
SEC("kretprobe/ksys_sync")
int BPF_KRETPROBE(ksys_sync_kretprobe)
{
	bound_exit(FST_REQ_SYNC, NULL, false, 0);
	return 0;
}

#endif
