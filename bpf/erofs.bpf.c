// SPDX-License-Identifier: GPL-2.0
/*
 * erofs: time and sizes of every pcluster decompression, per algorithm.
 * 6.1 has a dispatcher (z_erofs_decompress) that 6.18 dropped; the
 * per-algorithm functions exist in both, so those are the probes.
 * fentry/fexit where the kernel allows, kprobe/kretprobe twin.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

static __always_inline void begin(struct z_erofs_decompress_req *rq, __u16 alg, __u16 tier)
{
	decomp_begin(FST_FS_EROFS, alg, BPF_CORE_READ(rq, inputsize), BPF_CORE_READ(rq, outputsize),
		     BPF_CORE_READ(rq, sb, s_dev), tier);
}

/* 6.1 returns an int error, 6.18 a const char * (NULL on success): either way, non-zero is a failure */
#define EROFS_PROBES(fn, alg)                                                            \
	DECOMP_PROBES(fn, begin(rq, alg, tier), long, ret ? -1 : 0,                       \
		      struct z_erofs_decompress_req *rq, void *pagepool)

EROFS_PROBES(z_erofs_lz4_decompress, FST_ALG_LZ4)
EROFS_PROBES(z_erofs_lzma_decompress, FST_ALG_LZMA)
EROFS_PROBES(z_erofs_deflate_decompress, FST_ALG_DEFLATE)
EROFS_PROBES(z_erofs_zstd_decompress, FST_ALG_ZSTD)
EROFS_PROBES(z_erofs_transform_plain, FST_ALG_PLAIN)
