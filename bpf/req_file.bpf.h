/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which file a request is on (requests.bpf.c): its descriptor's, its inode's or a stat call's, noted in the
 * thread's request with its superblock, and the counted-requests entry (req_agg) of its superblock and kind.
 */
#ifndef FSTRACE_REQ_FILE_BPF_H
#define FSTRACE_REQ_FILE_BPF_H

/* (superblock, kind) -> its entry in req_agg, given the first time such a request is counted; the collector reads
 * it to name req_agg's entries */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FST_REQ_AGG_MAX);
	__type(key, struct fst_req_agg_key);
	__type(value, __u32);
} agg_keys SEC(".maps");

__u32 agg_keys_given; /* entries handed out (or tried: a lost race wastes one) */
#ifdef FST_PLAIN_BPF
/* the entries taken, each by the key it was given to (the plain build's claim: see agg_entry_of) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FST_REQ_AGG_MAX);
	__type(key, __u32);
	__type(value, struct fst_req_agg_key);
} agg_taken SEC(".maps");
#endif

/* the req_agg entry + 1 of (sdev, kind) (task_req.agg_entry), FST_AGG_ENTRY_NONE once all FST_REQ_AGG_MAX are
 * given: such requests are then recorded, none counted.  A hash lookup: once per kind of request on a file a
 * thread reads (kept with it), once per path-based stat call */
#define FST_AGG_ENTRY_NONE 0xff
static __always_inline __u8 agg_entry_of(__u32 sdev, __u16 kind)
{
	struct fst_req_agg_key key = { .sdev = sdev, .kind = kind };
	__u32 *n = bpf_map_lookup_elem(&agg_keys, &key);
	if (n)
		return *n + 1;
	if (agg_keys_given >= FST_REQ_AGG_MAX)
		return FST_AGG_ENTRY_NONE;
#ifdef FST_PLAIN_BPF
	/* no fetch-and-add (the plain build): an entry is claimed by the insert of its number into agg_taken, which
	 * fails when another CPU took it; a few tries, then the request is only recorded */
	for (int i = 0; i < 4; i++) {
		__u32 next = agg_keys_given;
		if (next >= FST_REQ_AGG_MAX)
			break;
		__sync_fetch_and_add(&agg_keys_given, 1);
		if (bpf_map_update_elem(&agg_taken, &next, &key, BPF_NOEXIST))
			continue;
		if (!bpf_map_update_elem(&agg_keys, &key, &next, BPF_NOEXIST))
			return next + 1;
		break;
	}
#else
	__u32 next = __sync_fetch_and_add(&agg_keys_given, 1);
	if (next < FST_REQ_AGG_MAX && !bpf_map_update_elem(&agg_keys, &key, &next, BPF_NOEXIST))
		return next + 1;
#endif
	n = bpf_map_lookup_elem(&agg_keys, &key); /* another CPU gave it one first */
	return n ? *n + 1 : FST_AGG_ENTRY_NONE;
}

/* the file's kept req_agg entry of kind (file_keep.agg_entry), NULL for a kind out of range; bounded on the
 * register that indexes (see slot_inc) */
static __always_inline __u8 *kept_entry(struct file_keep *k, __u16 kind)
{
	__u64 i = (__u64)kind - 1;
	barrier_var(i);
	return i < FST_NR_REQ_KINDS ? &k->agg_entry[i] : NULL;
}

/* the struct file behind fd in the current task's table, NULL if none: a number, read with helper calls */
static __always_inline struct file *fd_file(long fd)
{
	struct fdtable *fdt = BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), files, fdt);
	struct file **fds = BPF_CORE_READ(fdt, fd);
	unsigned int max = BPF_CORE_READ(fdt, max_fds);
	struct file *f = NULL;

	if (fd < 0 || fd >= max)
		return NULL;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

/*
 * The same as a BTF pointer, for a task whose descriptors are still in the table embedded in its
 * files_struct (fd_array: the first BITS_PER_LONG descriptors, until the table grows), NULL otherwise.  The
 * verifier types fdt->fd (a pointer to pointers) as a number, so fds[fd] needs a helper call, and so does
 * every field read behind it (five per request: most of sys_enter's cost, docs/overhead.md "What each helper
 * costs").  fd_array[i] at
 * a constant i is a typed load, and so is every field behind it: the switch turns the descriptor into one.
 */
#define FST_FD_CASE(i) \
	case i:        \
		return files->fd_array[i];
#define FST_FD_CASE8(i) FST_FD_CASE(i) FST_FD_CASE(i + 1) FST_FD_CASE(i + 2) FST_FD_CASE(i + 3) \
    FST_FD_CASE(i + 4) FST_FD_CASE(i + 5) FST_FD_CASE(i + 6) FST_FD_CASE(i + 7)
static __always_inline struct file *fd_file_btf(struct task_struct *cur, long fd)
{
	struct files_struct *files = cur->files;
	_Static_assert(sizeof(files->fd_array) / sizeof(files->fd_array[0]) == 64, "fd_array: 64 slots");
	if (!files || files->fdt != &files->fdtab) /* grown past the embedded table */
		return NULL;
	switch (fd) {
		FST_FD_CASE8(0)
		FST_FD_CASE8(8)
		FST_FD_CASE8(16)
		FST_FD_CASE8(24)
		FST_FD_CASE8(32)
		FST_FD_CASE8(40)
		FST_FD_CASE8(48)
		FST_FD_CASE8(56)
	}
	return NULL;
}
#undef FST_FD_CASE8
#undef FST_FD_CASE

/*
 * The file's inode, superblock and type.  A thread reads the same file over and over (fio), or two by turns
 * (tar, a file and its pipe): what the last two inodes said is kept in its state and reused when the file's
 * inode is one of those objects with the same inode number (two reads instead of five, and no hash lookup).  A
 * struct file's address alone is no key: files are freed and their slab reused at once (a closed /sys file's
 * address came back as fio's data file).  btf: inode is a BTF pointer (fd_file_btf, fentry), its fields plain
 * loads; else a number read through helper calls.
 */
static __always_inline void note_inode(struct task_req *r, struct inode *inode, bool btf)
{
	if (!inode)
		return;
	struct task_keep *keep = &r->keep;
	r->ino = FST_FIELD(btf, inode, i_ino);
	struct file_keep *k = NULL;
	if (keep->files[0].file == (__u64)inode && keep->files[0].ino == r->ino) {
		k = &keep->files[0];
		keep->file_last = 0;
	} else if (keep->files[1].file == (__u64)inode && keep->files[1].ino == r->ino) {
		k = &keep->files[1];
		keep->file_last = 1;
	}
	if (k) {
		r->sdev = k->sdev;
		r->ftype = k->ftype;
		r->sdev_traced = k->sdev_traced;
		__u8 *e = kept_entry(k, r->kind);
		if (e)
			r->agg_entry = *e;
	} else {
		struct super_block *sb = FST_FIELD(btf, inode, i_sb);
		r->sdev = FST_FIELD(btf, sb, s_dev);
		r->ftype = (FST_FIELD(btf, inode, i_mode) >> 12) & 0xf;
		r->sdev_traced = sdev_is_traced(r->sdev);
		keep->file_last = !keep->file_last;
		k = keep->file_last ? &keep->files[1] : &keep->files[0];
		k->file = (__u64)inode;
		k->ino = r->ino;
		k->sdev = r->sdev;
		k->ftype = r->ftype;
		k->sdev_traced = r->sdev_traced;
		__builtin_memset(k->agg_entry, 0, sizeof(k->agg_entry)); /* found when first counted */
		r->agg_entry = 0;
	}
	r->keep_file = keep->file_last + 1;
}

/* the file a request is about: its inode (note_inode), and for a read or write without a position argument the
 * file's position */
static __always_inline void note_file(struct task_req *r, struct file *f, bool btf)
{
	if (!f)
		return;
	note_inode(r, FST_FIELD(btf, f, f_inode), btf);
	if (r->pos < 0 && (r->kind == FST_REQ_READ || r->kind == FST_REQ_WRITE))
		r->pos = FST_FIELD(btf, f, f_pos);
}

/*
 * A path-based stat call's file, from what the kernel copied to the caller (the call succeeded): its device
 * (the superblock's, in the user encoding of new_encode_dev, or statx's major and minor), inode and type.  One
 * user read per field, for stat calls only; the layouts are the kernel's own (CO-RE: struct stat is per
 * architecture).
 */
/* a stat call's file, by the device (kernel dev_t), inode and mode the kernel reported */
static __always_inline void note_stat(struct task_req *r, __u32 sdev, __u64 ino, __u16 mode)
{
	__u32 *sb = bpf_map_lookup_elem(&stat_devs, &sdev); /* a btrfs subvolume's device: its superblock's */
	r->sdev = sb ? *sb : sdev;
	r->ino = ino;
	r->ftype = (mode >> 12) & 0xf;
	r->sdev_traced = sdev_is_traced(r->sdev);
}

static __always_inline void note_statbuf(struct task_req *r)
{
	__u64 ino = 0;
	__u32 sdev;
	__u16 mode = 0;
	if (r->nr == FST_NR_STATX) {
		struct statx *sx = (void *)r->statbuf;
		__u32 major = 0, minor = 0;
		bpf_probe_read_user(&major, sizeof(major), &sx->stx_dev_major);
		bpf_probe_read_user(&minor, sizeof(minor), &sx->stx_dev_minor);
		bpf_probe_read_user(&ino, sizeof(ino), &sx->stx_ino);
		bpf_probe_read_user(&mode, sizeof(mode), &sx->stx_mode);
		sdev = FST_KDEV(major, minor);
	} else {
		struct stat *st = (void *)r->statbuf;
		__u64 udev = 0;
		__u32 m = 0;
		bpf_probe_read_user(&udev, sizeof(udev), &st->st_dev);
		bpf_probe_read_user(&ino, sizeof(ino), &st->st_ino);
		bpf_probe_read_user(&m, sizeof(m), &st->st_mode);
		mode = m;
		/* new_encode_dev: the minor's low 8 bits, the major's 12, then the minor's upper 12 */
		sdev = FST_KDEV((udev >> 8) & 0xfff, (udev & 0xff) | ((udev >> 12) & 0xfff00));
	}
	note_stat(r, sdev, ino, mode);
}

/* the same from the kernel's struct kstat (r->result), which the filesystem entry points see filled first */
static __always_inline void note_kstat(struct task_req *r)
{
	struct kstat *st = (void *)r->result;
	note_stat(r, BPF_CORE_READ(st, dev), BPF_CORE_READ(st, ino), BPF_CORE_READ(st, mode));
}

/* the file behind fd, noted in the request: through typed loads where it can be (storage mode: tp_btf, cur the
 * current task's BTF pointer) */
static __always_inline void note_fd(struct task_req *r, struct task_struct *cur, long fd)
{
	if (cfg.task_storage && fd >= 0 && fd < 64) {
		struct file *f = fd_file_btf(cur, fd);
		if (f) {
			note_file(r, f, true);
			return;
		}
	}
	note_file(r, fd_file(fd), false);
}

#endif
