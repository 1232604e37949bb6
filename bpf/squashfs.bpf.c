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

SEC("fentry/squashfs_decompress")
int BPF_PROG(squashfs_decompress_fentry, struct squashfs_sb_info *msblk, struct bio *bio, int offset, int length)
{
	begin(msblk, bio, length, FST_TIER_FENTRY);
	return 0;
}

SEC("fexit/squashfs_decompress")
int BPF_PROG(squashfs_decompress_fexit, struct squashfs_sb_info *msblk, struct bio *bio, int offset, int length,
	     void *output, int ret)
{
	decomp_end(ret);
	return 0;
}

SEC("kprobe/squashfs_decompress")
int BPF_KPROBE(squashfs_decompress_kprobe, struct squashfs_sb_info *msblk, struct bio *bio, int offset, int length)
{
	begin(msblk, bio, length, FST_TIER_KPROBE);
	return 0;
}

SEC("kretprobe/squashfs_decompress")
int BPF_KRETPROBE(squashfs_decompress_kretprobe, int ret)
{
	decomp_end(ret);
	return 0;
}
