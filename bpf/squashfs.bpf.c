// SPDX-License-Identifier: GPL-2.0
/*
 * squashfs: time of every block decompression (data, fragment and metadata
 * blocks alike) and its sizes: input = compressed length, output = return
 * value.  fentry/fexit where the kernel allows, kprobe/kretprobe twin.
 * squashfs_decompress() is the single/multi/percpu front end in every build.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* squashfs compression ids (squashfs_fs.h) -> fstrace algorithms */
static __always_inline __u16 squashfs_alg(struct squashfs_sb_info *msblk)
{
	int id = BPF_CORE_READ(msblk, decompressor, id);
	switch (id) {
	case 1: return FST_ALG_ZLIB;
	case 2: return FST_ALG_LZMA;
	case 3: return FST_ALG_LZO;
	case 4: return FST_ALG_XZ;
	case 5: return FST_ALG_LZ4;
	case 6: return FST_ALG_ZSTD;
	}
	return FST_ALG_UNKNOWN;
}

static __always_inline void begin(struct squashfs_sb_info *msblk, struct bio *bio, int length, __u16 tier)
{
	/* squashfs reads its own block device: the bio's device is the superblock's */
	decomp_begin(FST_FS_SQUASHFS, squashfs_alg(msblk), length, 0, bio_dev(bio, false), tier);
}

DECOMP_PROBES(squashfs_decompress, begin(msblk, bio, length, tier), int, ret, struct squashfs_sb_info *msblk,
	      struct bio *bio, int offset, int length, void *output)

/*
 * Cache lookups: squashfs_cache_get() finds a block in one of the three
 * caches or evicts an entry and fills it through squashfs_read_data() in the
 * same thread, so a read_data inside a lookup is the lookup's miss.  The
 * lookup is timed whole: a hit that waited for another reader's fill (or for
 * a free entry) shows as a slow hit.
 */
struct cache_lookup {
	__u64 ts;
	__u64 block;
	__u32 dev;
	__u16 cache;
	__u16 tier;
	__u16 missed;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct cache_lookup);
} cache_lookups SEC(".maps");

static __always_inline __u16 cache_kind(struct super_block *sb, struct squashfs_cache *cache)
{
	struct squashfs_sb_info *msblk = BPF_CORE_READ(sb, s_fs_info);
	if (cache == BPF_CORE_READ(msblk, block_cache))
		return FST_FS_CACHE_SQUASHFS_METADATA;
	if (cache == BPF_CORE_READ(msblk, fragment_cache))
		return FST_FS_CACHE_SQUASHFS_FRAGMENT;
	if (cache == BPF_CORE_READ(msblk, read_page))
		return FST_FS_CACHE_SQUASHFS_DATA;
	return FST_FS_CACHE_UNKNOWN;
}

static __always_inline void lookup_begin(struct super_block *sb, struct squashfs_cache *cache, __u64 block,
					 __u16 tier)
{
	__u32 dev = BPF_CORE_READ(sb, s_dev);
	if (!sdev_is_traced(dev))
		return;
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct cache_lookup l = {
		.ts = bpf_ktime_get_ns(),
		.block = block,
		.dev = dev,
		.cache = cache_kind(sb, cache),
		.tier = tier,
	};
	bpf_map_update_elem(&cache_lookups, &pid, &l, BPF_ANY);
}

static __always_inline void lookup_end(struct squashfs_cache_entry *entry)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = (__u32)pid_tgid;
	struct cache_lookup *l = bpf_map_lookup_elem(&cache_lookups, &pid);
	if (!l)
		return;
	struct fst_fs_cache *rec = record_reserve(FST_REC_FS_CACHE, sizeof(*rec));
	if (rec) {
		int error = BPF_CORE_READ(entry, error);
		rec->ts_start_ns = l->ts;
		rec->ts_end_ns = now;
		rec->block = l->block;
		rec->pid = pid;
		rec->tgid = pid_tgid >> 32;
		rec->charged_pid = current_is_traced() ? pid : 0;
		rec->dev = l->dev;
		rec->bytes = error ? error : BPF_CORE_READ(entry, length);
		rec->fs = FST_FS_SQUASHFS;
		rec->cache = l->cache;
		rec->missed = l->missed;
		rec->tier = l->tier;
		rec->pad0 = 0;
		current_comm(rec->comm);
		record_submit(rec);
	}
	bpf_map_delete_elem(&cache_lookups, &pid);
}

static __always_inline void lookup_missed(void)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct cache_lookup *l = bpf_map_lookup_elem(&cache_lookups, &pid);
	if (l)
		l->missed = 1;
}

FUNC_PROBES(squashfs_cache_get, lookup_begin(sb, cache, block, tier), lookup_end(ret),
	    struct squashfs_cache_entry *, struct super_block *sb, struct squashfs_cache *cache, u64 block,
	    int length)

/*
 * Block reads: squashfs_read_data(sb, index, length, next_index, actor) reads
 * one block from [index, index + length) on the device (a data or fragment
 * block: length carries SQUASHFS_COMPRESSED_BIT_BLOCK), or, with length 0, a
 * metadata block whose length is in its first two bytes; it then sets
 * *next_index to the block's end, which its exit reads.  The device reads
 * whole device blocks around it (squashfs_bio_read rounds to devblksize):
 * the analysis sets the block's place against the block requests.
 */
#define SQUASHFS_COMPRESSED_BIT_BLOCK (1u << 24) /* squashfs_fs.h */

struct block_read {
	__u64 ts;
	__u64 index;
	__u64 *next_index;
	__u32 length;
	__u32 dev;
	__u16 tier;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct block_read);
} block_reads SEC(".maps");

static __always_inline void read_begin(struct super_block *sb, __u64 index, int length, __u64 *next_index,
				       __u16 tier)
{
	__u32 dev = BPF_CORE_READ(sb, s_dev);
	if (!sdev_is_traced(dev)) /* --records none does not load it (probes.c unload_records_only) */
		return;
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct block_read b = {
		.ts = bpf_ktime_get_ns(),
		.index = index,
		.next_index = next_index,
		.length = (__u32)length & ~SQUASHFS_COMPRESSED_BIT_BLOCK,
		.dev = dev,
		.tier = tier,
	};
	bpf_map_update_elem(&block_reads, &pid, &b, BPF_ANY);
}

static __always_inline void read_end(int ret)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct block_read *b = bpf_map_lookup_elem(&block_reads, &pid);
	if (!b)
		return;
	__u64 end = b->index + b->length;
	if (!b->length && b->next_index)
		bpf_probe_read_kernel(&end, sizeof(end), b->next_index);
	struct fst_fs_read *rec = record_reserve(FST_REC_FS_READ, sizeof(*rec));
	if (rec) {
		rec->ts_start_ns = b->ts;
		rec->ts_end_ns = now;
		rec->pos = b->index;
		rec->bytes = end > b->index ? (__u32)(end - b->index) : 0;
		rec->pid = pid;
		rec->dev = b->dev;
		rec->ret = ret;
		rec->fs = FST_FS_SQUASHFS;
		rec->tier = b->tier;
		rec->pad0 = 0;
		record_submit(rec);
	}
	bpf_map_delete_elem(&block_reads, &pid);
}

/* a block read: its place, and a miss of the cache lookup it runs under (if any) */
static __always_inline void read_data_begin(struct super_block *sb, __u64 index, int length, __u64 *next_index,
					    __u16 tier)
{
	read_begin(sb, index, length, next_index, tier);
	lookup_missed();
}

FUNC_PROBES(squashfs_read_data, read_data_begin(sb, index, length, next_index, tier), read_end(ret), int,
	    struct super_block *sb, u64 index, int length, u64 *next_index, struct squashfs_page_actor *output)
