/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Decompression and compression probes (erofs, squashfs, btrfs .bpf.c): the entry saves what it knows in a table
 * by thread, the exit writes the record.
 */
#ifndef FSTRACE_CODEC_BPF_H
#define FSTRACE_CODEC_BPF_H

/* part of common.bpf.h, which includes it (with cfg, FST_FIELD, the kernel and libbpf headers) */
#include "ring.bpf.h"
#include "filter.bpf.h"
#include "tracer.bpf.h"
#include "probes.bpf.h"

/* where the current code runs, for records of work done on behalf of readers and writers */
static __always_inline __u16 current_context(bool traced)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	unsigned int flags = BPF_CORE_READ(task, flags);
	return traced		      ? FST_CTX_TRACED :
	       (flags & PF_WQ_WORKER) ? FST_CTX_KWORKER :
	       (flags & PF_KTHREAD)   ? FST_CTX_KTHREAD :
					FST_CTX_OTHER_TASK;
}

/* what a decompression's or a compression's entry saved for its exit's record */
struct coder_start {
	__u64 ts;
	__u32 in_bytes;	 /* decompression: known at entry */
	__u32 out_bytes; /* decompression: known at entry (erofs, btrfs), else taken from the return value */
	__u32 dev;
	__u16 fs;
	__u16 alg;
	__u16 tier;
};

/* a btrfs compression's (btrfs.bpf.c): its sizes are read at exit through the function's total_in and total_out
 * pointers */
struct compress_start {
	struct coder_start c;
	__u64 file_pos;
	__u64 ino;
	__u64 total_in; /* kernel addresses of the function's unsigned long results */
	__u64 total_out;
};

/* per thread: decompressors do not nest within one thread */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct coder_start);
} decomp_starts SEC(".maps");

static __always_inline void decomp_begin(__u16 fs, __u16 alg, __u32 in_bytes, __u32 out_bytes, __u32 dev,
					 __u16 tier)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct coder_start d = {
		.ts = bpf_ktime_get_ns(),
		.in_bytes = in_bytes,
		.out_bytes = out_bytes,
		.dev = dev,
		.fs = fs,
		.alg = alg,
		.tier = tier,
	};
	bpf_map_update_elem(&decomp_starts, &pid, &d, BPF_ANY);
	tracer_charge(current_req(), FST_SITE_DECOMP, d.ts);
}

/* the fields a decompression's and a compression's records share (records.h), from their entry's state s: a
 * macro, the two records being different structures */
#define CODER_RECORD_FIELDS(rec, s, now, pid_tgid, ret_, traced) \
	do {                                                     \
		(rec)->ts_start_ns = (s)->ts;                    \
		(rec)->ts_end_ns = (now);                        \
		(rec)->pid = (__u32)(pid_tgid);                  \
		(rec)->tgid = (pid_tgid) >> 32;                  \
		(rec)->dev = (s)->dev;                           \
		(rec)->ret = (ret_);                             \
		(rec)->fs = (s)->fs;                             \
		(rec)->alg = (s)->alg;                           \
		(rec)->context = current_context(traced);        \
		(rec)->tier = (s)->tier;                         \
		current_comm((rec)->comm);                       \
	} while (0)

/*
 * The exit of a decompression (starts: decomp_starts) or a compression (compress: its map's values are struct
 * compress_start): the state its entry saved under the thread's id becomes its record and is dropped.  False
 * when there was none (a call that began before tracing, or that its entry did not trace).
 */
static __always_inline bool coder_end(void *starts, bool compress, __u64 now, long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = (__u32)pid_tgid;
	struct coder_start *s = bpf_map_lookup_elem(starts, &pid);
	if (!s)
		return false;
	if (compress) {
		struct compress_start *c = (void *)s;
		struct fst_compress *rec = record_reserve(FST_REC_COMPRESS, sizeof(*rec));
		if (rec) {
			unsigned long in = 0, out = 0;
			bpf_probe_read_kernel(&in, sizeof(in), (void *)c->total_in);
			bpf_probe_read_kernel(&out, sizeof(out), (void *)c->total_out);
			CODER_RECORD_FIELDS(rec, s, now, pid_tgid, ret, current_is_traced());
			rec->file_pos = c->file_pos;
			rec->ino = c->ino;
			rec->in_bytes = in;
			rec->out_bytes = out;
			record_submit(rec);
		}
	} else {
		struct fst_decomp *rec = record_reserve(FST_REC_DECOMP, sizeof(*rec));
		if (rec) {
			bool traced = current_is_traced();
			CODER_RECORD_FIELDS(rec, s, now, pid_tgid, ret, traced);
			rec->in_bytes = s->in_bytes;
			rec->out_bytes = s->out_bytes ? s->out_bytes : (ret > 0 ? (__u32)ret : 0);
			rec->charged_pid = traced ? pid : 0;
			rec->pad0 = 0;
			record_submit(rec);
		}
	}
	bpf_map_delete_elem(starts, &pid);
	return true;
}

static __always_inline void decomp_end(long ret)
{
	__u64 now = bpf_ktime_get_ns();
	if (coder_end(&decomp_starts, false, now, ret))
		tracer_charge(current_req(), FST_SITE_DECOMP, now);
}

/* a decompressor: RET turns `ret` into decomp_end()'s argument, negative on error */
#define DECOMP_PROBES(fn, BEGIN, RET_T, RET, ...) FUNC_PROBES(fn, BEGIN, decomp_end(RET), RET_T, __VA_ARGS__)

#endif
