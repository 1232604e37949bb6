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
#define FST_NR_WRITE 1
#define FST_NR_PWRITE64 18
#define FST_NR_WRITEV 20
#define FST_NR_PWRITEV 296
#define FST_NR_PWRITEV2 328
#define FST_NR_FSYNC 74
#define FST_NR_FDATASYNC 75
#define FST_NR_SYNC 162
#define FST_NR_SYNCFS 306
#define FST_NR_SENDFILE 40
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
#define FST_NR_WRITE 64
#define FST_NR_PWRITE64 68
#define FST_NR_WRITEV 66
#define FST_NR_PWRITEV 70
#define FST_NR_PWRITEV2 287
#define FST_NR_FSYNC 82
#define FST_NR_FDATASYNC 83
#define FST_NR_SYNC 81
#define FST_NR_SYNCFS 267
#define FST_NR_SENDFILE 71
#else
#error "fstrace: add this architecture's syscall numbers to bpf/syscalls.h"
#endif

/* the number of the syscall a thread is in, from its user registers (struct pt_regs; -1 outside a syscall) */
#if defined(__TARGET_ARCH_x86)
#define FST_SYSCALL_NR(regs) BPF_CORE_READ(regs, orig_ax)
#elif defined(__TARGET_ARCH_arm64)
#define FST_SYSCALL_NR(regs) BPF_CORE_READ(regs, syscallno)
#endif

static __always_inline __u16 fst_syscall_kind(long nr)
{
	switch (nr) {
	case FST_NR_READ:
	case FST_NR_PREAD64:
	case FST_NR_READV:
	case FST_NR_PREADV:
	case FST_NR_PREADV2:
	case FST_NR_SENDFILE: /* busybox cat reads files this way */
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
	case FST_NR_WRITE:
	case FST_NR_PWRITE64:
	case FST_NR_WRITEV:
	case FST_NR_PWRITEV:
	case FST_NR_PWRITEV2:
		return FST_REQ_WRITE;
	case FST_NR_FSYNC:
	case FST_NR_FDATASYNC:
	case FST_NR_SYNC:
	case FST_NR_SYNCFS:
		return FST_REQ_SYNC;
	}
	return 0;
}

/* the p-variants take the file position as the fourth argument */
static __always_inline bool fst_syscall_has_pos(long nr)
{
	return nr == FST_NR_PREAD64 || nr == FST_NR_PREADV || nr == FST_NR_PREADV2 ||
	       nr == FST_NR_PWRITE64 || nr == FST_NR_PWRITEV || nr == FST_NR_PWRITEV2;
}

/* which argument (1-based) is a byte count, 0 = none (readv & co. take an iovec count) */
static __always_inline int fst_syscall_count_arg(long nr)
{
	if (nr == FST_NR_READ || nr == FST_NR_PREAD64 || nr == FST_NR_WRITE || nr == FST_NR_PWRITE64)
		return 3;
	return nr == FST_NR_SENDFILE ? 4 : 0;
}

/* which argument is the file the request reads: sendfile(out_fd, in_fd, ...) reads its second */
static __always_inline int fst_syscall_fd_arg(long nr)
{
	return nr == FST_NR_SENDFILE ? 2 : 1;
}

/* path-based stat calls: which argument (1-based) is the caller's buffer the kernel fills, 0 = none */
static __always_inline int fst_syscall_statbuf_arg(long nr)
{
#if defined(__TARGET_ARCH_x86)
	if (nr == FST_NR_STAT || nr == FST_NR_LSTAT)
		return 2;
#endif
	if (nr == FST_NR_NEWFSTATAT)
		return 3;
	return nr == FST_NR_STATX ? 5 : 0;
}

/* the first argument is a file descriptor whose file the request is about */
static __always_inline bool fst_syscall_has_fd(long nr, __u16 kind)
{
	return kind == FST_REQ_READ || kind == FST_REQ_WRITE || kind == FST_REQ_GETDENTS || nr == FST_NR_FSTAT ||
	       nr == FST_NR_FSYNC || nr == FST_NR_FDATASYNC || nr == FST_NR_SYNCFS;
}

#endif
