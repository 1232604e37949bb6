/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What a request adds to the page cache and the readahead it starts (requests.bpf.c).
 */
#ifndef FSTRACE_REQ_PAGECACHE_BPF_H
#define FSTRACE_REQ_PAGECACHE_BPF_H

/*
 * The handlers below (and req_locks.bpf.h's) run for every task of the system: an untraced one pays the state lookup and nothing
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

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(mm_filemap_add_to_page_cache_btf, struct folio *folio) { return handle_pcache_add(); }
SEC("raw_tp/mm_filemap_add_to_page_cache")
int BPF_PROG(mm_filemap_add_to_page_cache_raw, struct folio *folio) { return handle_pcache_add(); }

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

#endif
