// SPDX-License-Identifier: GPL-2.0
/*
 * erofs: time and sizes of every pcluster decompression, per algorithm.
 * 6.1 has a dispatcher (z_erofs_decompress) that 6.18 dropped; the
 * per-algorithm functions exist in both, so those are the probes.
 * fentry/fexit where the kernel allows, kprobe/kretprobe twin.
 *
 * And erofs's own tracepoints, in traced threads, on every tier: each extent
 * mapped (which pcluster a read needed), each readahead and read_folio call.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

static __always_inline void begin(struct z_erofs_decompress_req *rq, __u16 alg, __u16 tier)
{
	decomp_begin(FST_FS_EROFS, alg, BPF_CORE_READ(rq, inputsize), BPF_CORE_READ(rq, outputsize),
		     BPF_CORE_READ(rq, sb, s_dev), tier);
}

/* 6.1 returns an int error, 6.18 a const char * (NULL on success): either way, non-zero is a failure */
#define EROFS_PROBES(fn, alg)                                       \
	DECOMP_PROBES(fn, begin(rq, alg, tier), long, ret ? -1 : 0, \
		      struct z_erofs_decompress_req *rq, void *pagepool)

EROFS_PROBES(z_erofs_lz4_decompress, FST_ALG_LZ4)
EROFS_PROBES(z_erofs_lzma_decompress, FST_ALG_LZMA)
EROFS_PROBES(z_erofs_deflate_decompress, FST_ALG_DEFLATE)
EROFS_PROBES(z_erofs_zstd_decompress, FST_ALG_ZSTD)
EROFS_PROBES(z_erofs_transform_plain, FST_ALG_PLAIN)

/* a record of the current thread's, NULL when it is not traced or none is wanted; *rp: its state (NULL when none
 * was looked up) */
static __always_inline struct fst_erofs *erofs_record(struct task_req **rp, struct inode *inode, __u16 event,
						      bool btf)
{
	/* not loaded with --records none (user/probes.c unload_records_only): a record is all these events make */
	struct task_req *r = *rp = current_state_for_trace_decision();
	if (!state_is_traced(r))
		return NULL;
	struct super_block *sb = FST_FIELD(btf, inode, i_sb);
	__u32 sdev = FST_FIELD(btf, sb, s_dev);
	/* inside a request on this filesystem (a read's readahead and mapping): the request's answer, no lookup */
	bool in_req_fs = r && r->in_req && r->sdev == sdev;
	if (in_req_fs ? !r->sdev_traced : !sdev_is_traced(sdev))
		return NULL;
	struct fst_erofs *rec = record_reserve(FST_REC_EROFS, sizeof(*rec));
	if (!rec)
		return NULL;
	rec->ts_ns = bpf_ktime_get_ns();
	rec->ino = FST_FIELD(btf, inode, i_ino);
	rec->pid = (__u32)bpf_get_current_pid_tgid();
	rec->dev = sdev;
	rec->event = event;
	rec->la = rec->llen = rec->pa = rec->plen = 0;
	rec->map_flags = rec->lookup_flags = 0;
	rec->pad0 = 0;
	rec->pad1 = 0;
	return rec;
}

/* submit an erofs record; the handler's time from the record's timestamp on is the tracer's */
static __always_inline void erofs_submit(struct task_req *r, struct fst_erofs *rec)
{
	__u64 t0 = rec->ts_ns;
	record_submit(rec);
	tracer_charge(r && r->in_req ? r : NULL, FST_SITE_EROFS, t0);
}

static __always_inline int handle_map_exit(struct inode *inode, struct erofs_map_blocks *map, unsigned int flags,
					   int ret, bool btf)
{
	if (ret)
		return 0;
	struct task_req *r;
	struct fst_erofs *rec = erofs_record(&r, inode, FST_EROFS_MAP, btf);
	if (!rec)
		return 0;
	rec->la = FST_FIELD(btf, map, m_la);
	rec->llen = FST_FIELD(btf, map, m_llen);
	rec->pa = FST_FIELD(btf, map, m_pa);
	rec->plen = FST_FIELD(btf, map, m_plen);
	rec->map_flags = erofs_map_flags(FST_FIELD(btf, map, m_flags));
	rec->lookup_flags = flags;
	erofs_submit(r, rec);
	return 0;
}

static __always_inline int handle_readahead(struct inode *inode, unsigned long start, unsigned int nrpage, bool btf)
{
	struct task_req *r;
	struct fst_erofs *rec = erofs_record(&r, inode, FST_EROFS_READAHEAD, btf);
	if (!rec)
		return 0;
	rec->la = start;
	rec->llen = nrpage;
	erofs_submit(r, rec);
	return 0;
}

static __always_inline int handle_read_folio(struct inode *inode, unsigned long index, bool btf)
{
	struct task_req *r;
	struct fst_erofs *rec = erofs_record(&r, inode, FST_EROFS_READ_FOLIO, btf);
	if (!rec)
		return 0;
	rec->la = index;
	erofs_submit(r, rec);
	return 0;
}

SEC("tp_btf/erofs_map_blocks_exit")
int BPF_PROG(erofs_map_blocks_exit_btf, struct inode *inode, struct erofs_map_blocks *map, unsigned int flags,
	     int ret)
{
	return handle_map_exit(inode, map, flags, ret, true);
}
SEC("raw_tp/erofs_map_blocks_exit")
int BPF_PROG(erofs_map_blocks_exit_raw, struct inode *inode, struct erofs_map_blocks *map, unsigned int flags,
	     int ret)
{
	return handle_map_exit(inode, map, flags, ret, false);
}
/* 6.1: compressed files have their own map tracepoint (6.18 folded it into erofs_map_blocks_exit) */
SEC("raw_tp/z_erofs_map_blocks_iter_exit")
int BPF_PROG(z_erofs_map_blocks_iter_exit_raw, struct inode *inode, struct erofs_map_blocks *map,
	     unsigned int flags, int ret)
{
	return handle_map_exit(inode, map, flags, ret, false);
}

SEC("tp_btf/erofs_readahead")
int BPF_PROG(erofs_readahead_btf, struct inode *inode, unsigned long start, unsigned int nrpage, bool raw)
{
	return handle_readahead(inode, start, nrpage, true);
}
SEC("raw_tp/erofs_readahead")
int BPF_PROG(erofs_readahead_raw, struct inode *inode, unsigned long start, unsigned int nrpage, bool raw)
{
	return handle_readahead(inode, start, nrpage, false);
}
/* 6.1's name for the same event */
SEC("raw_tp/erofs_readpages")
int BPF_PROG(erofs_readpages_raw, struct inode *inode, unsigned long start, unsigned int nrpage, bool raw)
{
	return handle_readahead(inode, start, nrpage, false);
}

SEC("tp_btf/erofs_read_folio")
int BPF_PROG(erofs_read_folio_btf, struct folio *folio, bool raw)
{
	return handle_read_folio(folio->mapping->host, folio->index, true);
}
SEC("raw_tp/erofs_read_folio")
int BPF_PROG(erofs_read_folio_raw, struct folio *folio, bool raw)
{
	return handle_read_folio(BPF_CORE_READ(folio, mapping, host), BPF_CORE_READ(folio, index), false);
}
/* kernels older than 6.1: the same event, handed a page (compat.bpf.h page_index) */
SEC("raw_tp/erofs_readpage")
int BPF_PROG(erofs_readpage_raw, struct page___with_index *page, bool raw)
{
	return handle_read_folio(BPF_CORE_READ(page, mapping, host), page_index(page), false);
}
