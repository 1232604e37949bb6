// SPDX-License-Identifier: GPL-2.0
/*
 * btrfs: time and sizes of every compressed extent decompressed on read
 * (btrfs_decompress_bio is inlined; the per-algorithm functions are not).
 * fentry/fexit where the kernel allows, kprobe/kretprobe twin.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

static __always_inline void begin(struct compressed_bio *cb, __u16 alg, __u16 tier)
{
	decomp_begin(FST_FS_BTRFS, alg, BPF_CORE_READ(cb, compressed_len), BPF_CORE_READ(cb, len), compressed_bio_dev(cb), tier);
}

#define BTRFS_PROBES(fn, alg) \
	DECOMP_PROBES(fn, begin(cb, alg, tier), int, ret, struct list_head *ws, struct compressed_bio *cb)

BTRFS_PROBES(zstd_decompress_bio, FST_ALG_ZSTD)
BTRFS_PROBES(lzo_decompress_bio, FST_ALG_LZO)
BTRFS_PROBES(zlib_decompress_bio, FST_ALG_ZLIB)

/*
 * Compression on write: one call per chunk of up to 128 KiB of a file,
 * normally in a btrfs-delalloc kworker.  The function was renamed
 * (btrfs_compress_pages -> _folios) and its arguments changed (compat.bpf.h
 * btrfs_compress_type, btrfs_compress_inode), so their positions come from
 * the running kernel's BTF (cfg.btrfs_compress_arg_*), and the sizes are read
 * at exit through the total_in/total_out pointers.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct compress_start);
} compress_starts SEC(".maps");

/* enum btrfs_compression_type */
static __always_inline __u16 btrfs_alg(__u32 type)
{
	switch (type) {
	case 1: return FST_ALG_ZLIB;
	case 2: return FST_ALG_LZO;
	case 3: return FST_ALG_ZSTD;
	}
	return FST_ALG_UNKNOWN;
}

static __always_inline void compress_begin(__u64 type, __u64 owner, __u64 start, __u64 total_in, __u64 total_out,
					   __u16 tier)
{
	struct inode *inode = btrfs_compress_inode(owner);
	__u32 dev = BPF_CORE_READ(inode, i_sb, s_dev);
	if (!sdev_is_traced(dev))
		return;
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct compress_start c = {
		.c = {
		    .ts = bpf_ktime_get_ns(),
		    .dev = dev,
		    .fs = FST_FS_BTRFS,
		    .alg = btrfs_alg(btrfs_compress_type(type)),
		    .tier = tier,
		},
		.file_pos = start,
		.ino = BPF_CORE_READ(inode, i_ino),
		.total_in = total_in,
		.total_out = total_out,
	};
	bpf_map_update_elem(&compress_starts, &pid, &c, BPF_ANY);
}

/* the record of a compression, written at its exit (codec.bpf.h coder_end, as decompressions are) */
static __always_inline void compress_end(long ret)
{
	coder_end(&compress_starts, true, bpf_ktime_get_ns(), ret);
}

static __always_inline bool compress_args_known(void)
{
	return cfg.btrfs_compress_arg_owner >= 0 && cfg.btrfs_compress_arg_start >= 0 &&
	       cfg.btrfs_compress_arg_total_in >= 0 && cfg.btrfs_compress_arg_total_out >= 0;
}

static __always_inline __u64 func_arg(void *ctx, int n)
{
	__u64 v = 0;
	bpf_get_func_arg(ctx, n, &v);
	return v;
}

/* ARG(ctx, n): the tier's way to read argument n */
#define COMPRESS_BEGIN(ARG, tier)                                                           \
	do {                                                                                \
		if (compress_args_known())                                                  \
			compress_begin(ARG(ctx, 0), ARG(ctx, cfg.btrfs_compress_arg_owner), \
				       ARG(ctx, cfg.btrfs_compress_arg_start),              \
				       ARG(ctx, cfg.btrfs_compress_arg_total_in),           \
				       ARG(ctx, cfg.btrfs_compress_arg_total_out), tier);   \
	} while (0)

#define BTRFS_COMPRESS_PROBES(fn)                            \
	SEC("fentry/" #fn)                                   \
	int BPF_PROG(fn##_fentry)                            \
	{                                                    \
		COMPRESS_BEGIN(func_arg, FST_TIER_FENTRY);   \
		return 0;                                    \
	}                                                    \
	SEC("fexit/" #fn)                                    \
	int BPF_PROG(fn##_fexit)                             \
	{                                                    \
		__u64 ret = 0;                               \
		bpf_get_func_ret(ctx, &ret);                 \
		compress_end((int)ret);                      \
		return 0;                                    \
	}                                                    \
	SEC("kprobe/" #fn)                                   \
	int fn##_kprobe(struct pt_regs *ctx)                 \
	{                                                    \
		COMPRESS_BEGIN(kprobe_arg, FST_TIER_KPROBE); \
		return 0;                                    \
	}                                                    \
	SEC("kretprobe/" #fn)                                \
	int BPF_KRETPROBE(fn##_kretprobe, int ret)           \
	{                                                    \
		compress_end(ret);                           \
		return 0;                                    \
	}

BTRFS_COMPRESS_PROBES(btrfs_compress_folios)
BTRFS_COMPRESS_PROBES(btrfs_compress_pages)
