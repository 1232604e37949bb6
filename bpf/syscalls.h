/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Syscall numbers of the requests fstrace times, per architecture.  The BPF
 * side sees raw syscall numbers at sys_enter, so the table must match the
 * architecture the object is built for (__TARGET_ARCH_*).
 */
#ifndef FSTRACE_SYSCALLS_H
#define FSTRACE_SYSCALLS_H

#include "records.h"

#if defined(__TARGET_ARCH_x86)
#define FST_NR_READ 0
#define FST_NR_PREAD64 17
#define FST_NR_READV 19
#define FST_NR_PREADV 295
#define FST_NR_PREADV2 327
#define FST_NR_STAT 4
#define FST_NR_FSTAT 5
#define FST_NR_LSTAT 6
#define FST_NR_NEWFSTATAT 262
#define FST_NR_STATX 332
#define FST_NR_OPEN 2
#define FST_NR_OPENAT 257
#define FST_NR_GETDENTS64 217
#elif defined(__TARGET_ARCH_arm64)
#define FST_NR_READ 63
#define FST_NR_PREAD64 67
#define FST_NR_READV 65
#define FST_NR_PREADV 69
#define FST_NR_PREADV2 286
#define FST_NR_STAT -1
#define FST_NR_FSTAT 80
#define FST_NR_LSTAT -1
#define FST_NR_NEWFSTATAT 79
#define FST_NR_STATX 291
#define FST_NR_OPEN -1
#define FST_NR_OPENAT 56
#define FST_NR_GETDENTS64 61
#else
#error "fstrace: add this architecture's syscall numbers to bpf/syscalls.h"
#endif

static __always_inline __u16 fst_syscall_kind(long nr)
{
	switch (nr) {
	case FST_NR_READ:
	case FST_NR_PREAD64:
	case FST_NR_READV:
	case FST_NR_PREADV:
	case FST_NR_PREADV2:
		return FST_REQ_READ;
	case FST_NR_FSTAT:
	case FST_NR_NEWFSTATAT:
	case FST_NR_STATX:
#if defined(__TARGET_ARCH_x86)
	case FST_NR_STAT:
	case FST_NR_LSTAT:
#endif
		return FST_REQ_STAT;
	case FST_NR_OPENAT:
#if defined(__TARGET_ARCH_x86)
	case FST_NR_OPEN:
#endif
		return FST_REQ_OPEN;
	case FST_NR_GETDENTS64:
		return FST_REQ_GETDENTS;
	}
	return 0;
}

/* pread64, preadv and preadv2 take the file position as the fourth argument */
static __always_inline bool fst_syscall_has_pos(long nr)
{
	return nr == FST_NR_PREAD64 || nr == FST_NR_PREADV || nr == FST_NR_PREADV2;
}

#endif
