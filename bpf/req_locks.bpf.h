/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A request's waits for sleeping locks (requests.bpf.c): lock:contention_begin/end mark the window in which a
 * switch out is a lock wait.
 */
#ifndef FSTRACE_REQ_LOCKS_BPF_H
#define FSTRACE_REQ_LOCKS_BPF_H

/*
 * Lock contention (lock:contention_begin/end, since 5.19): a request switched
 * out inside a sleeping lock's contention window waits for that lock.  Spinning
 * locks (qspinlock, rwlock) never sleep and are ignored, and the window closes
 * only at the end event of the same lock: the mutex slow path itself takes a
 * spinlock, whose contention must not end the mutex wait.
 */
static __always_inline int handle_contention_begin(void *lock, __u32 flags)
{
	if ((flags & LCB_F_SPIN) && !(flags & (LCB_F_MUTEX | LCB_F_RT | LCB_F_PERCPU)))
		return 0;
	struct task_req *r = current_req();
	if (!r)
		return 0;
	__u64 t0 = tracer_clock(r, FST_SITE_CONTENTION);
	r->lock_addr = (__u64)lock;
	tracer_charge_from(r, FST_SITE_CONTENTION, t0);
	return 0;
}

static __always_inline int handle_contention_end(void *lock)
{
	struct task_req *r = current_req();
	if (!r)
		return 0;
	__u64 t0 = tracer_clock(r, FST_SITE_CONTENTION);
	if (r->lock_addr == (__u64)lock)
		r->lock_addr = 0;
	tracer_charge_from(r, FST_SITE_CONTENTION, t0);
	return 0;
}

SEC("tp_btf/contention_begin")
int BPF_PROG(contention_begin_btf, void *lock, unsigned int flags) { return handle_contention_begin(lock, flags); }
SEC("raw_tp/contention_begin")
int BPF_PROG(contention_begin_raw, void *lock, unsigned int flags) { return handle_contention_begin(lock, flags); }
SEC("tp_btf/contention_end")
int BPF_PROG(contention_end_btf, void *lock, int ret) { return handle_contention_end(lock); }
SEC("raw_tp/contention_end")
int BPF_PROG(contention_end_raw, void *lock, int ret) { return handle_contention_end(lock); }

#endif
