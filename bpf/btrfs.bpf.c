// SPDX-License-Identifier: GPL-2.0
/*
 * btrfs: time and sizes of every compressed extent decompressed on read
 * (btrfs_decompress_bio is inlined; the per-algorithm functions are not).
 * fentry/fexit where the kernel allows, kprobe/kretprobe twin.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* 6.1: compressed_bio carries the inode; 6.18 embeds a btrfs_bio that does */
struct compressed_bio___v61 {
	struct inode *inode;
};

static __always_inline __u32 cb_dev(struct compressed_bio *cb)
{
	struct compressed_bio___v61 *old = (void *)cb;
	if (bpf_core_field_exists(old->inode))
		return BPF_CORE_READ(old, inode, i_sb, s_dev);
	return BPF_CORE_READ(cb, bbio.inode, vfs_inode.i_sb, s_dev);
}

static __always_inline void begin(struct compressed_bio *cb, __u16 alg, __u16 tier)
{
	decomp_begin(FST_FS_BTRFS, alg, BPF_CORE_READ(cb, compressed_len), BPF_CORE_READ(cb, len), cb_dev(cb), tier);
}

#define BTRFS_PROBES(fn, alg) \
	DECOMP_PROBES(fn, begin(cb, alg, tier), int, ret, struct list_head *ws, struct compressed_bio *cb)

BTRFS_PROBES(zstd_decompress_bio, FST_ALG_ZSTD)
BTRFS_PROBES(lzo_decompress_bio, FST_ALG_LZO)
BTRFS_PROBES(zlib_decompress_bio, FST_ALG_ZLIB)
