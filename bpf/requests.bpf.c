// SPDX-License-Identifier: GPL-2.0
/*
 * Requests and first-cut attribution.  A request is one read or metadata
 * syscall of a traced thread; its wall time is split by sched_switch and
 * sched_wakeup into on-CPU, I/O wait, other uninterruptible sleep,
 * interruptible sleep and runqueue time (see records.h).
 *
 * The traced set is the process tree the collector starts (children are added
 * at fork, in the kernel, so no early I/O is missed), or a cgroup.
 */
#include "common.bpf.h"
#include "syscalls.h"

char LICENSE[] SEC("license") = "GPL";

/* syscall argument n (from 1): in storage mode the programs are tp_btf, whose regs is a BTF pointer read
 * with plain loads; raw_tp's needs a helper call per read */
#define SYSCALL_ARG(regs, n) (cfg.task_storage ? PT_REGS_PARM##n##_SYSCALL(regs) : PT_REGS_PARM##n##_CORE_SYSCALL(regs))

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

/*
 * --budget: the collector attaches sys_enter/sys_exit only in windows (user/window.c) and numbers each window
 * here before attaching it.  A request belongs to the window its sys_enter ran in; a sys_exit in another
 * window (its request began before this window opened, or never ended in an earlier one) records nothing, so
 * no request is recorded half.  Windows are odd numbers; an even one (0 at the start) means the hooks are on only
 * for the collector's measurement of their cost, and nothing is recorded.  0 throughout when always on.
 */
volatile __u32 window_seq;

/* --budget: every syscall the hook saw (per CPU), for the system's syscall rate while a window is open */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} syscalls_seen SEC(".maps");

/*
 * The kinds of request bounded at the filesystems' entry points (bit 1 << kind; see "Requests bounded at the
 * filesystems' entry points" below), set by the collector once their programs are attached and before the
 * syscall tracepoints are: sys_enter leaves those kinds to them, and they act on no other kind.
 */
__u32 fs_bound_kinds;

static __always_inline bool kind_fs_bound(__u16 kind)
{
	return fs_bound_kinds & (1u << kind);
}

/*
 * The current thread's state (r: as looked up, maybe NULL) when the task filters trace it, created if it had
 * none; NULL when they do not, or no state could be had (counted).  cur: the thread's BTF pointer, taken once by
 * the caller for the lookups (storage mode).
 */
static __always_inline struct task_req *traced_state(struct task_struct *cur, struct task_req *r)
{
	if (verdict_cacheable()) {
		if (r && r->keep.verdict == FST_VERDICT_UNTRACED)
			return NULL;
		if (!r || r->keep.verdict != FST_VERDICT_TRACED) {
			bool traced = current_is_traced();
			if (!r)
				r = bpf_task_storage_get(&task_reqs, cur, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
			if (r)
				r->keep.verdict = traced ? FST_VERDICT_TRACED : FST_VERDICT_UNTRACED;
			if (!traced)
				return NULL;
		}
	} else if (!current_is_traced()) {
		return NULL;
	}

	if (!r && cfg.task_storage)
		r = bpf_task_storage_get(&task_reqs, cur, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!r && !cfg.task_storage) {
		__u32 pid = (__u32)bpf_get_current_pid_tgid();
		struct task_req n = {};
		bpf_map_update_elem(&task_reqs, &pid, &n, BPF_NOEXIST);
		r = bpf_map_lookup_elem(&task_reqs, &pid);
	}
	if (!r)
		loss_count(FST_LOSS_TASK_STATE); /* storage or map full: the thread's requests are not traced */
	return r;
}

/*
 * A new request of kind in syscall id, whose arguments are in regs: everything but what is kept across requests
 * starts at 0, and the byte count, position and stat buffer are the syscall's arguments.  Returns the file
 * descriptor argument (meaningful for the kinds fst_syscall_has_fd names).
 */
static __always_inline long req_begin(struct task_req *r, long id, __u16 kind, struct pt_regs *regs)
{
	__builtin_memset(r, 0, offsetof(struct task_req, keep));
	r->nr = id;
	r->kind = kind;
	r->pos = -1;
	r->window_seq = window_seq;
	/* until a file places it (its descriptor here, or a stat call's result at the exit), kept only without a
	 * filesystem filter; sync() writes back every filesystem, the traced ones too: kept when the traced tasks
	 * are a process tree's (run: the workload's cp && sync), not for every task of the system (attach) */
	r->sdev_traced = !cfg.filter_sdev || (id == FST_NR_SYNC && cfg.filter_pids);

	int count_arg = fst_syscall_count_arg(id);
	if (count_arg == 3)
		r->count = SYSCALL_ARG(regs, 3);
	else if (count_arg == 4)
		r->count = SYSCALL_ARG(regs, 4);
	if (fst_syscall_has_pos(id))
		r->pos = SYSCALL_ARG(regs, 4);
	int statbuf_arg = fst_syscall_statbuf_arg(id);
	if (statbuf_arg == 2)
		r->statbuf = SYSCALL_ARG(regs, 2);
	else if (statbuf_arg == 3)
		r->statbuf = SYSCALL_ARG(regs, 3);
	else if (statbuf_arg == 5)
		r->statbuf = SYSCALL_ARG(regs, 5);
	return fst_syscall_fd_arg(id) == 2 ? SYSCALL_ARG(regs, 2) : SYSCALL_ARG(regs, 1);
}

/*
 * The request starts now: the handler's last act, so that what it did before (lookups, the file) is in no
 * request's time and what follows the clock read inside the request is three stores and the program's return.
 * That tail is not charged to the tracer part: timing or estimating it (a per-CPU site lookup, the random pick,
 * a clock read 1 run in FST_TRACER_TIME_EVERY) cost more than the tail itself, on every request.
 */
static __always_inline void req_start(struct task_req *r)
{
	__u64 now = bpf_ktime_get_ns();
	r->start = r->last_on = now;
	r->in_req = 1;
}

static __always_inline int handle_sys_enter(struct pt_regs *regs, long id)
{
	if (cfg.windowed) { /* load-time constant: no instruction at all when always on */
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&syscalls_seen, &zero);
		if (n)
			(*n)++;
	}
	__u16 kind = fst_syscall_kind(id);
	if (!kind || kind_fs_bound(kind))
		return 0;
	/* storage mode: the current task's BTF pointer, taken once (a helper call) for the lookups below */
	struct task_struct *cur = cfg.task_storage ? bpf_get_current_task_btf() : NULL;
	struct task_req *r = cfg.task_storage ? bpf_task_storage_get(&task_reqs, cur, 0, 0) : current_state();
	r = traced_state(cur, r);
	if (!r)
		return 0;
	long fd = req_begin(r, id, kind, regs);
	if (fst_syscall_has_fd(id, kind)) {
		note_fd(r, cur, fd);
		if (!r->sdev_traced)
			return 0; /* a pipe, /dev/null, another filesystem: no request, and no clock read */
	}
	req_start(r);
	return 0;
}

/*
 * A request that never left the CPU, issued no block I/O, added nothing to the page cache and returned no
 * error (a page-cache hit) is counted in the kernel unless it took longer than cfg.record_over_ns: the
 * answer needs its parts and latency, not a record each (half a million a second when warm).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FST_REQ_AGG_MAX); /* 5.5 KiB each per CPU; the entry of each (superblock, kind): agg_keys */
	__type(key, __u32);
	__type(value, struct fst_req_agg);
} req_agg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, FST_COMM_AGG_MAX + 1); /* + the key of every other name */
	__type(key, struct fst_comm_agg_key);
	__type(value, struct fst_comm_agg);
} comm_agg SEC(".maps");

static const struct fst_comm_agg zero_comm_agg;

/* --per-comm: the request under its task name, or under the other names' key once FST_COMM_AGG_MAX are taken */
static __always_inline void comm_count(struct task_req *r, long ret, __u64 wall)
{
	struct fst_comm_agg_key k = { .sdev = r->sdev, .kind = r->kind };
	current_comm(k.comm);
	struct fst_comm_agg *c = bpf_map_lookup_elem(&comm_agg, &k);
	if (!c) {
		bpf_map_update_elem(&comm_agg, &k, &zero_comm_agg, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&comm_agg, &k);
	}
	if (!c) {
		struct fst_comm_agg_key other = {};
		c = bpf_map_lookup_elem(&comm_agg, &other);
		if (!c)
			return;
	}
	c->count++;
	c->bytes += ret > 0 ? ret : 0;
	c->wall_ns += wall;
	c->io_wait_ns += r->part[FST_PART_IO_WAIT];
}

static __always_inline bool req_is_countable(struct task_req *r, long ret, __u64 wall)
{
	if (cfg.records_none) /* fstrace serve: every request is counted, none recorded */
		return true;
	return !cfg.records_all && ret >= 0 && !r->nr_switches && !r->nr_missed && !r->nr_ios &&
	       !r->pcache_adds && !r->ra_windows && wall < cfg.record_over_ns;
}

/*
 * slots[slot]++ with the bound checked on the very register used to index: clang otherwise clamps a copy
 * (min()) and indexes with the original, which the 6.1 verifier rejects as an unbounded access
 */
static __always_inline void slot_inc(__u64 *slots, __u32 slot, __u32 nslots)
{
	barrier_var(slot);
	if (slot < nslots)
		slots[slot]++;
}

static __always_inline void agg_part_in(struct fst_req_agg *a, int part, __u64 ns, __u32 slot)
{
	a->part_ns[part] += ns;
	slot_inc(a->part_hist[part], slot, FST_HIST_SLOTS);
}

/* a part of a counted request */
static __always_inline void agg_part(struct fst_req_agg *a, int part, __u64 ns)
{
	if (ns)
		agg_part_in(a, part, ns, log2_slot_us(ns));
}

/*
 * The on-CPU part of a page-cache hit is as long as the request, so it takes the wall time's slot, already found.
 * Only this part gets the shortcut: one more branch per part doubles the verifier's states per part, and with
 * every part (cfg.records_none) the program exceeds the verifier's limits.
 */
static __always_inline void agg_part_oncpu(struct fst_req_agg *a, __u64 ns, __u64 wall, __u32 wall_slot)
{
	if (ns)
		agg_part_in(a, FST_PART_ONCPU, ns, ns == wall ? wall_slot : log2_slot_us(ns));
}

static __always_inline bool req_count(struct task_req *r, long ret, __u64 wall)
{
	if (!r->agg_entry) { /* not kept with its file (the first of its kind there, a path-based stat, a sync) */
		r->agg_entry = agg_entry_of(r->sdev, r->kind);
		struct file_keep *k = r->keep_file == 1 ? &r->keep.files[0] : (r->keep_file == 2 ? &r->keep.files[1] : NULL);
		__u8 *e = k ? kept_entry(k, r->kind) : NULL;
		if (e && r->agg_entry != FST_AGG_ENTRY_NONE) /* none may be a race for the last entry: asked again */
			*e = r->agg_entry;
	}
	if (r->agg_entry == FST_AGG_ENTRY_NONE)
		return false; /* every entry given: the request is recorded instead */
	__u32 idx = r->agg_entry - 1;
	struct fst_req_agg *a = bpf_map_lookup_elem(&req_agg, &idx);
	if (!a)
		return false;
	/* per-CPU: no other CPU writes this copy, so no atomics */
	a->count++;
	a->bytes += ret > 0 ? ret : 0;
	a->wall_ns += wall;
	__u32 wall_slot = log2_slot_us(wall);
	slot_inc(a->wall_hist, wall_slot, FST_HIST_SLOTS);
	slot_inc(a->wall_ns_loglin, fst_loglin_slot(wall), FST_LAT_SLOTS);
	agg_part_oncpu(a, r->part[FST_PART_ONCPU], wall, wall_slot);
#define AGG_PART(c, ...)         \
	if (c != FST_PART_ONCPU) \
		agg_part(a, c, r->part[c]);
	if (cfg.records_none) {
		/* every request is counted, and any part may be non-zero */
		FST_PARTS(AGG_PART)
	} else {
		/* a request counted while the others are recorded never left the CPU (req_is_countable): the parts
		 * added at a switch in, or for a switch not delivered, are 0 */
		AGG_PART(FST_PART_TRACER)
	}
#undef AGG_PART
	a->pcache_adds += r->pcache_adds;
	if (cfg.per_comm)
		comm_count(r, ret, wall);
	return true;
}

/* the request ends now: its last interval's part, and the thread is in no request from here on */
static __always_inline void req_end(struct task_req *r, __u64 now)
{
	if (r->off_ts) {
		/* the switch back in was never delivered: when it ran again is unknown */
		r->part[FST_PART_MISSED] += now - r->off_ts;
		r->nr_missed++;
	} else {
		r->part[FST_PART_ONCPU] += now - r->last_on;
	}
	r->in_req = 0;
}

/*
 * openat: the file is known only once the descriptor exists (and kept: the reads that follow find it).  A global
 * function, called at an open's end only: inlined, the verifier walked the rest of sys_exit once per case of
 * fd_file_btf's switch (most of its 44 ms of load time on a 2-core VM); a call costs every request it is on.
 */
FST_GLOBAL_FN int note_opened_fd(struct task_req *r, long fd)
{
	if (r)
		note_fd(r, cfg.task_storage ? bpf_get_current_task_btf() : NULL, fd);
	return 0;
}

static __always_inline void note_opened(struct task_req *r, long ret)
{
	if (r->kind == FST_REQ_OPEN && ret >= 0)
		note_opened_fd(r, ret);
}

/* a request that ended (req_end) and returned ret: counted or recorded when it was placed on a traced
 * filesystem, else its off-CPU time is set apart from the kept requests' */
static __always_inline void req_finish(struct task_req *r, long ret, __u64 now)
{
	/* a request not placed on a traced filesystem (a failed stat call has nothing to place it by) */
	if (!r->sdev_traced) {
		if (cfg.offcpu_stacks && r->nr_switches) {
			offcpu_drop_add(FST_OFF_IO, r->part[FST_PART_IO_WAIT]);
			offcpu_drop_add(FST_OFF_DSLEEP, r->part[FST_PART_DSLEEP]);
			offcpu_drop_add(FST_OFF_SLEEP, r->part[FST_PART_SLEEP]);
			offcpu_drop_add(FST_OFF_LOCK, r->part[FST_PART_LOCK]);
			offcpu_drop_add(FST_OFF_WORKER, r->part[FST_PART_WORKER] + r->part[FST_PART_WORKER_WAIT]);
		}
		return;
	}

	/* the handlers' time is in the on-CPU intervals; never more than them (the clamp is what keeps the
	 * parts an exact partition when a handler's end was timed after a switch) */
	__u64 *part = r->part;
	if (part[FST_PART_TRACER] > part[FST_PART_ONCPU])
		part[FST_PART_TRACER] = part[FST_PART_ONCPU];
	part[FST_PART_ONCPU] -= part[FST_PART_TRACER]; /* from here on, the workload's own on-CPU time */
	__u64 wall = now - r->start;
	if (req_is_countable(r, ret, wall) && req_count(r, ret, wall))
		return;

	struct fst_req *rec = record_reserve(FST_REC_REQ, sizeof(*rec));
	if (rec) {
		__u64 pid_tgid = bpf_get_current_pid_tgid();
		rec->ts_start_ns = r->start;
		rec->ts_end_ns = now;
#define REC_PART(c, v, field, ...) rec->field = r->part[c];
		FST_PARTS(REC_PART)
#undef REC_PART
		rec->nr_lock_waits = r->nr_lock_waits;
		rec->ra_windows = r->ra_windows;
		rec->ra_pages = r->ra_pages;
		rec->ra_max_pages = r->ra_max_pages;
		rec->waker_seq = r->waker_seq;
		rec->nr_missed_events = r->nr_missed;
		rec->pcache_adds = r->pcache_adds;
		rec->ino = r->ino;
		rec->ret = ret;
		rec->count = r->count;
		rec->pos = r->pos;
		rec->io_bytes = r->io_bytes;
		rec->pid = (__u32)pid_tgid;
		rec->tgid = pid_tgid >> 32;
		rec->sdev = r->sdev;
		rec->syscall_nr = r->nr;
		rec->nr_ios = r->nr_ios;
		rec->nr_switches = r->nr_switches;
		rec->kind = r->kind;
		rec->ftype = r->ftype;
		current_comm(rec->comm);
		record_submit(rec);
	}
}

static __always_inline int handle_sys_exit(long ret)
{
	struct task_req *r = current_req();
	if (!r || r->bound != FST_BOUND_SYSCALL) /* a filesystem entry point's: it ends there */
		return 0;
	/* begun in another window (see window_seq), or the hooks are on for the collector's calibration (an even
	 * number; windows are odd): nothing recorded */
	if (r->window_seq != window_seq || (cfg.windowed && !(window_seq & 1))) {
		r->in_req = 0;
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	req_end(r, now);
	note_opened(r, ret);
	/* a path-based stat call: the file is the one whose device and inode the kernel wrote into the buffer */
	if (r->statbuf && ret == 0)
		note_statbuf(r);
	req_finish(r, ret, now);
	return 0;
}

#ifndef FST_PLAIN_BPF
struct kstack_walk {
	struct fst_kstack *st;	 /* the frames just taken */
	struct fst_kstack *kept; /* for a compare: the frames kept under the same hash */
	__u32 h;
	__u32 differs;
};

/* the frame index as a 64-bit register: a __u32 is checked on its zero-extended copy and indexed with the
 * original, which the verifier rejects as unbounded (and barrier_var keeps clang from doing that anyway) */
static int kstack_hash_frame(__u32 i, struct kstack_walk *w)
{
	__u64 j = i;
	barrier_var(j);
	if (j >= MAX_STACK_DEPTH)
		return 1;
	__u64 ip = w->st->ips[j];
	w->h = (w->h ^ (__u32)ip ^ (__u32)(ip >> 32)) * 16777619; /* FNV-1a over the frames' halves */
	return 0;
}

static int kstack_cmp_frame(__u32 i, struct kstack_walk *w)
{
	__u64 j = i;
	barrier_var(j);
	if (j >= MAX_STACK_DEPTH)
		return 1;
	if (w->st->ips[j] != w->kept->ips[j]) {
		w->differs = 1;
		return 1;
	}
	return 0;
}

/* next's saved kernel stack (where it slept) as an offcpu_kstacks id; -1 when not kept (map full, a
 * different stack holds its hash, or no stack) */
static __always_inline __s32 offcpu_kstack_of(struct task_struct *next)
{
	__u32 zero = 0;
	struct fst_kstack *st = bpf_map_lookup_elem(&kstack_scratch, &zero);
	if (!st)
		return -1;
	long bytes = bpf_get_task_stack(next, st->ips, sizeof(st->ips), 0); /* zero-fills the rest */
	if (bytes <= 0)
		return -1;
	__u32 nr = bytes / sizeof(__u64);
	struct kstack_walk w = { .st = st, .h = 2166136261u };
	bpf_loop(nr, kstack_hash_frame, &w, 0);
	__u32 id = w.h & 0x7fffffff; /* stack ids are >= 0: the negative ones mean "not taken" */
	w.kept = bpf_map_lookup_elem(&offcpu_kstacks, &id);
	if (!w.kept) {
		if (bpf_map_update_elem(&offcpu_kstacks, &id, st, BPF_NOEXIST))
			return -1;
		return id;
	}
	/* frames 0..nr: the kept one's frame nr is 0 unless it is longer (both are zero-filled past their ends,
	 * and no frame of a stack is 0), so the rest of the tails need no compare (they were 127 calls a walk) */
	bpf_loop(nr < MAX_STACK_DEPTH ? nr + 1 : MAX_STACK_DEPTH, kstack_cmp_frame, &w, 0);
	return w.differs ? -1 : (__s32)id;
}
#else
/* the plain build has no bpf_loop (5.17): the collector walks off-CPU stacks at the switch out there
 * (cfg.offcpu_at_switch_in off), so this is never reached */
static __always_inline __s32 offcpu_kstack_of(struct task_struct *next)
{
	return -1;
}
#endif

/*
 * An off-CPU interval's time by reason, onto its stack.  With cfg.offcpu_at_switch_in the stack is walked
 * now, at the switch in, and only when the interval is at least cfg.offcpu_sample_ns long, or else with
 * probability length / offcpu_sample_ns, its parts then credited as if offcpu_sample_ns long (threshold
 * sampling: every stack's expected total is its exact total, the variance at most offcpu_sample_ns times it).
 * The parts of the request (io_wait, lock, ...) are exact either way; only their split by stack is sampled.
 */
static __always_inline void offcpu_credit(struct task_req *r, struct task_struct *next, __u64 worker_ns,
					  __u32 reason, __u64 reason_ns)
{
	if (!cfg.offcpu_stacks)
		return;
	__s32 stack = r->off_stack;
	if (cfg.offcpu_at_switch_in) {
		__u64 len = worker_ns + reason_ns, t = cfg.offcpu_sample_ns;
		if (!len)
			return;
		if (len < t) {
			if (bpf_get_prandom_u32() % t >= len)
				return;
			worker_ns = worker_ns * t / len;
			reason_ns = t - worker_ns;
		}
		stack = offcpu_kstack_of(next);
	}
	offcpu_add(stack, FST_OFF_WORKER, worker_ns);
	offcpu_add(stack, reason, reason_ns);
}

static __always_inline int handle_switch(void *ctx, bool preempt, struct task_struct *prev,
					 struct task_struct *next, unsigned int prev_state, bool btf)
{
	__u32 prev_pid = FST_FIELD(btf, prev, pid);
	__u32 next_pid = FST_FIELD(btf, next, pid);
	struct task_req *r = req_of(prev, prev_pid), *rn = req_of(next, next_pid);
	/* a switch between two tasks in no request (most of the system's) costs the two state lookups only:
	 * the clock (a helper call, dearer than a lookup: docs/overhead.md) is read once one of them is in a request */
	if (!r && !rn)
		return 0;
	__u64 now = bpf_ktime_get_ns();

	if (r) {
		if (r->off_ts) { /* its last switch in was never delivered */
			r->part[FST_PART_MISSED] += now - r->off_ts;
			r->nr_missed++;
		} else {
			r->part[FST_PART_ONCPU] += now - r->last_on;
		}
		r->off_ts = now;
		r->wake_ts = 0;
		r->off_state = prev_state;
		/* the walk is deferred to the switch in where it can be: see offcpu_credit */
		r->off_stack = cfg.offcpu_stacks && !cfg.offcpu_at_switch_in ? bpf_get_stackid(ctx, &stacks, 0) : -1;
		/* preempted, or yielded while still runnable: waiting for a CPU, not sleeping */
		r->off_preempted = preempt || prev_state == 0;
		/* waiting for I/O: in io_schedule() (the kernel's own iowait, as delay accounting counts it,
		 * which also covers bios held back by block throttling), or its own block I/O is in flight */
		r->off_io = (btf ? BPF_CORE_READ_BITFIELD(prev, in_iowait) : BPF_CORE_READ_BITFIELD_PROBED(prev, in_iowait)) ||
			    inflight_get(prev_pid) > 0;
		r->off_lock = r->lock_addr != 0;
		r->nr_switches++;
	}

	r = rn;
	if (r && !r->off_ts) {
		/* switched in without a delivered switch out: the split since last_on is unknown */
		r->part[FST_PART_MISSED] += now - r->last_on;
		r->nr_missed++;
		r->last_on = now;
	} else if (r) {
		if (r->off_preempted) {
			r->part[FST_PART_RUNQ] += now - r->off_ts;
		} else {
			__u64 woke = r->wake_ts && r->wake_ts <= now ? r->wake_ts : now;
			__u64 slept = woke - r->off_ts, worker_ns = 0;
			__u32 reason;
			if (r->waker_start) {
				/* woken by a kworker's filesystem work: the work's run, its wait for the worker,
				 * and only the time before it was queued as ordinary sleep */
				__u64 start = r->waker_start < r->off_ts ? r->off_ts : (r->waker_start > woke ? woke : r->waker_start);
				__u64 queued = r->waker_queue ? r->waker_queue : r->waker_start;
				queued = queued < r->off_ts ? r->off_ts : (queued > start ? start : queued);
				r->part[FST_PART_WORKER] += woke - start;
				r->part[FST_PART_WORKER_WAIT] += start - queued;
				worker_ns = woke - queued;
				slept = queued - r->off_ts;
				r->waker_start = r->waker_queue = 0;
			}
			if (r->off_lock) {
				/* waiting for a lock, whatever the sleep state (mutex_lock_interruptible too);
				 * a wait whose sleep the waking kworker's work took whole is not a lock wait */
				r->part[FST_PART_LOCK] += slept;
				r->nr_lock_waits += slept > 0;
				reason = FST_OFF_LOCK;
			} else if (r->off_state & TASK_UNINTERRUPTIBLE_BIT) {
				if (r->off_io) {
					r->part[FST_PART_IO_WAIT] += slept;
					reason = FST_OFF_IO;
				} else {
					r->part[FST_PART_DSLEEP] += slept;
					reason = FST_OFF_DSLEEP;
				}
			} else {
				r->part[FST_PART_SLEEP] += slept;
				reason = FST_OFF_SLEEP;
			}
			offcpu_credit(r, next, worker_ns, reason, slept);
			r->part[FST_PART_RUNQ] += now - woke;
			req_fold_pending_ios(r, next_pid);
		}
		r->off_ts = 0;
		r->last_on = now;
		/* the rest of this handler runs in next's on-CPU interval, which starts at now */
		tracer_charge(r, FST_SITE_SWITCH_IN, now);
	}
	return 0;
}

static __always_inline int handle_wakeup(struct task_struct *p, bool btf)
{
	__u32 pid = FST_FIELD(btf, p, pid);
	struct task_req *r = req_of(p, pid);
	if (!r || !r->off_ts || r->wake_ts)
		return 0;
	r->wake_ts = bpf_ktime_get_ns();
	/*
	 * The waker is a kworker in the middle of a known filesystem work item: the hop back to the reader.  Not
	 * when a block completion that came in on top of that kworker wakes it (its bios' end_io unlocking the
	 * reader's folios): current names the kworker then, but the wakeup is the completion's.  (The CPU's
	 * preempt count would tell any interrupt, but the verifier finds a per-CPU variable such as
	 * __preempt_count only in a kernel built with CONFIG_KALLSYMS_ALL, which 6.18 here is not.)
	 */
	__u32 cur = (__u32)bpf_get_current_pid_tgid();
	struct work_running_slot *ws = work_running_find(cur);
	if (ws && !completion_running()) {
		r->waker_queue = ws->v.ts_queue;
		r->waker_start = ws->v.ts_start;
		r->waker_seq = ws->v.seq; /* the timeline's flow from the work item to this request */
	}
	return 0;
}

static __always_inline int handle_fork(struct task_struct *parent, struct task_struct *child)
{
	if (!cfg.filter_pids)
		return 0;
	/* clone() from any thread of a traced process: the parent passed here is the leader */
	__u32 cur = (__u32)bpf_get_current_pid_tgid();
	__u32 ppid = BPF_CORE_READ(parent, pid);
	if (!bpf_map_lookup_elem(&traced_pids, &cur) && !bpf_map_lookup_elem(&traced_pids, &ppid))
		return 0;
	__u32 pid = BPF_CORE_READ(child, pid);
	__u8 one = 1;
	bpf_map_update_elem(&traced_pids, &pid, &one, BPF_ANY);
	return 0;
}

/* --budget: records.h struct fst_task_calls of the traced threads that exited, by thread id and start, until the
 * collector takes them (user/procfs.c io_calls_step); kept only while it does (exited_calls_on, set by
 * user/window.c) */
__u32 exited_calls_on;
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FST_EXITED_CALLS_MAX);
	__type(key, struct fst_thread_key);
	__type(value, struct fst_task_calls);
} exited_calls SEC(".maps");

static __always_inline int handle_exit(void)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = (__u32)pid_tgid;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct task_delay_info *delays = BPF_CORE_READ(task, delays);
	bool traced = current_is_traced();
	if (exited_calls_on && traced) {
		/* its start tells the collector whether it counts whole: a thread it never saw may have joined the
		 * filters late (moved into the cgroup, renamed by an exec), its earlier reads not the traced ones */
		struct fst_task_calls c = { .start_ns = BPF_CORE_READ(task, start_boottime),
					    .tid = pid,
					    .tgid = pid_tgid >> 32,
					    .traced = 1 };
		struct fst_thread_key key = { .start_ns = c.start_ns, .tid = pid };
		if (task_io_calls(task, &c.calls) && bpf_map_update_elem(&exited_calls, &key, &c, BPF_ANY))
			loss_count(FST_LOSS_EXITED_CALLS);
	}
	if (delays && traced) {
		struct fst_task *rec = record_reserve(FST_REC_TASK, sizeof(*rec));
		if (rec) {
			rec->ts_exit_ns = bpf_ktime_get_ns();
			rec->blkio_delay_ns = BPF_CORE_READ(delays, blkio_delay);
			rec->blkio_count = BPF_CORE_READ(delays, blkio_count);
			rec->pid = pid;
			rec->tgid = pid_tgid >> 32;
			rec->pad0 = 0;
			current_comm(rec->comm);
			record_submit(rec);
		}
	}
	/* task-local storage goes with the task; the hash fallback's entry must be removed */
	if (!cfg.task_storage)
		bpf_map_delete_elem(&task_reqs, &pid);
	inflight_forget(pid);
	if (cfg.task_storage && !bpf_map_delete_elem(&ios_pending, &pid)) /* never folded now */
		ios_pending_entries_add(-1);
	/* the pid stays in traced_pids: its block I/O may still complete, and pids are not reused that fast */
	return 0;
}

/*
 * The handlers below run for every task of the system: an untraced one pays the state lookup and nothing
 * else (a clock read costs more than the rest: docs/overhead.md, "What each helper costs"); a request's pays the rest, and a clock read pair
 * on the 1 in FST_TRACER_TIME_EVERY runs that time the tracer part.
 */
static __always_inline int handle_pcache_add(void)
{
	struct task_req *r = current_req();
	if (!r)
		return 0;
	__u64 t0 = tracer_clock(r, FST_SITE_PCACHE_ADD);
	r->pcache_adds++;
	tracer_charge_from(r, FST_SITE_PCACHE_ADD, t0);
	return 0;
}

/*
 * Lock contention (lock:contention_begin/end, since 5.19): a request switched
 * out inside a sleeping lock's contention window waits for that lock.  Spinning
 * locks (qspinlock, rwlock) never sleep and are ignored, and the window closes
 * only at the end event of the same lock: the mutex slow path itself takes a
 * spinlock, whose contention must not end the mutex wait.
 */
static __always_inline int handle_contention_begin(void *lock, __u32 flags)
{
	if ((flags & LCB_F_SPIN) && !(flags & (LCB_F_MUTEX | LCB_F_RT | LCB_F_PERCPU)))
		return 0;
	struct task_req *r = current_req();
	if (!r)
		return 0;
	__u64 t0 = tracer_clock(r, FST_SITE_CONTENTION);
	r->lock_addr = (__u64)lock;
	tracer_charge_from(r, FST_SITE_CONTENTION, t0);
	return 0;
}

static __always_inline int handle_contention_end(void *lock)
{
	struct task_req *r = current_req();
	if (!r)
		return 0;
	__u64 t0 = tracer_clock(r, FST_SITE_CONTENTION);
	if (r->lock_addr == (__u64)lock)
		r->lock_addr = 0;
	tracer_charge_from(r, FST_SITE_CONTENTION, t0);
	return 0;
}

SEC("tp_btf/contention_begin")
int BPF_PROG(contention_begin_btf, void *lock, unsigned int flags) { return handle_contention_begin(lock, flags); }
SEC("raw_tp/contention_begin")
int BPF_PROG(contention_begin_raw, void *lock, unsigned int flags) { return handle_contention_begin(lock, flags); }
SEC("tp_btf/contention_end")
int BPF_PROG(contention_end_btf, void *lock, int ret) { return handle_contention_end(lock); }
SEC("raw_tp/contention_end")
int BPF_PROG(contention_end_raw, void *lock, int ret) { return handle_contention_end(lock); }

/* the readahead window the kernel decided (readahead:page_cache_ra_order, 6.10+), charged to the request */
static __always_inline int handle_ra_order(struct inode *inode, struct file_ra_state *ra)
{
	struct task_req *r = current_req();
	if (!r)
		return 0;
	__u64 t0 = tracer_clock(r, FST_SITE_RA_ORDER);
	__u32 pages = BPF_CORE_READ(ra, size);
	r->ra_windows++;
	r->ra_pages += pages;
	if (pages > r->ra_max_pages)
		r->ra_max_pages = pages;
	hist_add(FST_H_RA_PAGES, BPF_CORE_READ(inode, i_sb, s_dev), 0, pages);
	tracer_charge_from(r, FST_SITE_RA_ORDER, t0);
	return 0;
}

SEC("tp_btf/page_cache_ra_order")
int BPF_PROG(page_cache_ra_order_btf, struct inode *inode, unsigned long index, struct file_ra_state *ra)
{
	return handle_ra_order(inode, ra);
}
SEC("raw_tp/page_cache_ra_order")
int BPF_PROG(page_cache_ra_order_raw, struct inode *inode, unsigned long index, struct file_ra_state *ra)
{
	return handle_ra_order(inode, ra);
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(mm_filemap_add_to_page_cache_btf, struct folio *folio) { return handle_pcache_add(); }
SEC("raw_tp/mm_filemap_add_to_page_cache")
int BPF_PROG(mm_filemap_add_to_page_cache_raw, struct folio *folio) { return handle_pcache_add(); }

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id) { return handle_sys_enter(regs, id); }
SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs *regs, long id) { return handle_sys_enter(regs, id); }

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit_btf, struct pt_regs *regs, long ret) { return handle_sys_exit(ret); }
SEC("raw_tp/sys_exit")
int BPF_PROG(sys_exit_raw, struct pt_regs *regs, long ret) { return handle_sys_exit(ret); }

/*
 * sched_switch's prev_state: its fourth argument where the kernel passes it, else prev's state.  The argument is
 * loaded by an instruction of its own, only where it exists (a program reading past a tracepoint's arguments is
 * refused, at load for tp_btf, at attach for raw_tp).
 */
static __always_inline unsigned int switch_prev_state(__u64 *ctx, struct task_struct *prev)
{
	__u64 v;
	if (!cfg.sched_switch_prev_state)
		return task_run_state(prev);
	asm volatile("%0 = *(u64 *)(%1 + 24)"
		     : "=r"(v)
		     : "r"(ctx));
	return (unsigned int)v;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return handle_switch(ctx, preempt, prev, next, switch_prev_state(ctx, prev), true);
}
SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return handle_switch(ctx, preempt, prev, next, switch_prev_state(ctx, prev), false);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup_btf, struct task_struct *p) { return handle_wakeup(p, true); }
SEC("raw_tp/sched_wakeup")
int BPF_PROG(sched_wakeup_raw, struct task_struct *p) { return handle_wakeup(p, false); }

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork_btf, struct task_struct *parent, struct task_struct *child)
{
	return handle_fork(parent, child);
}
SEC("raw_tp/sched_process_fork")
int BPF_PROG(sched_process_fork_raw, struct task_struct *parent, struct task_struct *child)
{
	return handle_fork(parent, child);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit_btf, struct task_struct *p) { return handle_exit(); }
SEC("raw_tp/sched_process_exit")
int BPF_PROG(sched_process_exit_raw, struct task_struct *p) { return handle_exit(); }

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
