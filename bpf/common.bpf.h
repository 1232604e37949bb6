/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every fstrace BPF object includes: the configuration the collector fills in before load (cfg), the
 * kernel constants BTF does not carry, and the shared maps and helpers, one concern per header:
 *   compat.bpf.h      reads of kernel objects whose layout changed between kernels (CO-RE shims)
 *   ring.bpf.h        the ring buffer, records reserved and submitted, what could not be kept
 *   flight.bpf.h      flight tables: state held from one event to the next
 *   hist.bpf.h        log2 histograms
 *   task.bpf.h        per-task state: the request a thread is in, block I/O charged to it
 *   filter.bpf.h      what is traced: pids, task name, cgroup, devices, filesystems
 *   tracer.bpf.h      the tracer's own time inside requests
 *   completion.bpf.h  block completions and the filesystem work they queue
 *   stacks.bpf.h      kernel stacks and off-CPU time
 *   probes.bpf.h      fentry/fexit programs and their kprobe twins
 *   codec.bpf.h       decompression and compression probes
 * The collector loads block.bpf.o first and makes every later object reuse its map file descriptors (same
 * names), so all objects see one ring buffer, one traced-task set and one in-flight I/O table.
 */
#ifndef FSTRACE_COMMON_BPF_H
#define FSTRACE_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "records.h"
#include "kernel_state.h"

const volatile struct fst_cfg cfg = {};

/*
 * A field of a kernel object the hook handed over.  A tp_btf (or fentry) argument is a BTF pointer: the field
 * is a plain load (btf true); a raw_tp or kprobe argument is only a number: a probe read (a helper call, about
 * ten plain loads: docs/overhead.md, "What each helper costs").  btf is a constant of each program's inlined handler, so clang drops the
 * other branch and a raw_tp program never holds a load the verifier would refuse.
 */
#define FST_FIELD(btf, ptr, field) ((btf) ? (ptr)->field : BPF_CORE_READ(ptr, field))

/*
 * A global function: verified once, not at each call.  A global function taking pointers to memory needs "bpf:
 * Support pointers in global func args" (5.12); the plain build (flight.bpf.h), for kernels without 5.12's
 * atomics, makes it a static one, verified at each call as before.
 */
#ifdef FST_PLAIN_BPF
#define FST_GLOBAL_FN static __noinline
#else
#define FST_GLOBAL_FN __noinline
#endif

/* kernel #defines that BTF does not carry */
#define TASK_UNINTERRUPTIBLE_BIT 0x2 /* task state: TASK_UNINTERRUPTIBLE */
/* include/linux/sched.h: task flags */
#define PF_WQ_WORKER 0x00000020
#define PF_KTHREAD 0x00200000
/* include/trace/events/lock.h: contention_begin flags */
#ifndef LCB_F_SPIN
#define LCB_F_SPIN (1U << 0)
#define LCB_F_RT (1U << 3)
#define LCB_F_PERCPU (1U << 4)
#define LCB_F_MUTEX (1U << 5)
#endif

#include "compat.bpf.h"
#include "ring.bpf.h"
#include "flight.bpf.h"
#include "hist.bpf.h"
#include "task.bpf.h"
#include "filter.bpf.h"
#include "tracer.bpf.h"
#include "completion.bpf.h"
#include "stacks.bpf.h"
#include "probes.bpf.h"
#include "codec.bpf.h"

#endif
