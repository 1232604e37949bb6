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
	decomp_begin(FST_FS_SQUASHFS, squashfs_alg(msblk), length, 0, BPF_CORE_READ(bio, bi_bdev, bd_dev), tier);
}

DECOMP_PROBES(squashfs_decompress, begin(msblk, bio, length, tier), int, ret, struct squashfs_sb_info *msblk,
	      struct bio *bio, int offset, int length, void *output)
