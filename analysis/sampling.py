"""Estimates from the sampling tier: kernel stacks of traced tasks sampled inside their requests.

Where no fentry/kprobe can time decompression (tracepoint-only kernels), the share of samples whose stack
passes through a decompressor estimates the CPU time spent decompressing in the reading tasks.  Each sample
stands for 1/hz seconds; the count is Poisson, so the 95 % interval is count +- 1.96 sqrt(count) samples.
"""
import math
import re

# functions that only run to decompress (filesystem front ends and the library decoders under them)
DECOMPRESSOR = re.compile(
    r"^(squashfs_decompress|squashfs_xz_uncompress|(zstd|lz4|lzo|zlib)_uncompress|z_erofs_\w*decompress\w*|"
    r"z_erofs_transform_plain|(zstd|lzo|zlib)_decompress_bio|btrfs_decompress\w*|LZ4_decompress\w*|"
    r"lz4_decompress\w*|lzo1x_decompress\w*|ZSTD_decompress\w*|ZSTD_\w*[dD]ecode\w*|HUF_decompress\w*|"
    r"FSE_decompress\w*|xz_dec_\w*|lzma_\w*|dict_repeat|zlib_inflate\w*|inflate_fast)$")


KWORKER_ROOT = "[kworker: "  # samples of kworkers running filesystem work start with this frame


def folded(header, kworkers=False):
    """{stack: samples}, summed over threads: the traced threads inside requests (user frames, then kernel
    frames), and with kworkers=True also the kworkers running filesystem work for them."""
    out = {}
    for stack, n in header.get("sampling", {}).get("folded", []):
        if kworkers or not stack.startswith(KWORKER_ROOT):
            out[stack] = out.get(stack, 0) + n
    return out


def kworker_samples(header):
    """{work kind: samples} of kworkers running filesystem work (on-CPU time done for the readers)."""
    out = {}
    for stack, n in folded(header, kworkers=True).items():
        if stack.startswith(KWORKER_ROOT):
            kind = stack[len(KWORKER_ROOT):stack.index("]")]
            out[kind] = out.get(kind, 0) + n
    return out


# spinning for a lock on-CPU (a mutex's optimistic spin, a contended spinlock): not work, even when the
# lock is the decompressor's (squashfs's single decompressor spins its waiters in squashfs_decompress)
LOCK_SPIN = re.compile(r"^(mutex_spin_on_owner|osq_lock|__mutex_lock\S*|rwsem_spin_on_owner|rwsem_optimistic_spin|"
                       r"native_queued_spin_lock_slowpath|__pv_queued_spin_lock_slowpath|queued_spin_lock_slowpath|"
                       r"queued_read_lock_slowpath|queued_write_lock_slowpath)$")


def is_lock_spin(stack):
    return any(LOCK_SPIN.match(f) for f in stack.split(";"))


def is_decompression(stack):
    return any(DECOMPRESSOR.match(f) for f in stack.split(";")) and not is_lock_spin(stack) and not \
        is_tracer(stack)


# the frame prefix the collector gives its own BPF programs (results header "tracer_frame_prefix")
TRACER_FRAME_PREFIX = "[fstrace] "


def is_tracer(stack, prefix=TRACER_FRAME_PREFIX):
    """A sample taken while one of fstrace's own programs ran (the stack passes through one of them)."""
    return any(f.startswith(prefix) for f in stack.split(";"))


def tracer_share(header):
    """The sampled share of the traced threads' on-CPU time inside requests that was fstrace's programs: an
    independent check of the timed tracer part (the samples also see the kernel's dispatch into the programs,
    which the handlers' own timing does not, and cannot see the sampling program itself)."""
    s = header.get("sampling") or {}
    if not s.get("hz"):
        return None
    prefix = header.get("tracer_frame_prefix", TRACER_FRAME_PREFIX)
    samples = folded(header)
    total = sum(samples.values())
    tracer = sum(n for st, n in samples.items() if is_tracer(st, prefix))
    lo, hi = max(tracer - 1.96 * math.sqrt(tracer), 0), tracer + 1.96 * math.sqrt(tracer)
    return {"samples": total, "tracer_samples": tracer, "share": tracer / total if total else None,
            "share_95": [lo / total, min(hi / total, 1.0)] if total else None,
            "method": "on-CPU samples of traced threads inside requests whose kernel stack passes through one "
                      "of fstrace's programs, over all such samples (Poisson 95 % interval)"}


def _estimate(header, matches, name_of, what):
    """CPU time of the sampled stacks that match, with its Poisson 95 % interval; None if sampling was off."""
    s = header.get("sampling") or {}
    hz = s.get("hz") or 0
    if not hz:
        return None
    stacks = folded(header)
    total = sum(stacks.values())
    by_fn = {}
    for st, n in stacks.items():
        if matches(st):
            fn = name_of(st.split(";"))
            by_fn[fn] = by_fn.get(fn, 0) + n
    k = sum(by_fn.values())
    half = 1.96 * math.sqrt(k) if k else 3.0  # with no sample, 3 samples bound the rate at 95 %
    per = 1e9 / hz
    return {
        "method": "perf cpu-clock sampling at %d Hz of kernel stacks of traced tasks inside requests; "
                  "samples whose stack contains %s" % (hz, what),
        "samples": int(k), "samples_in_requests": int(total), "stacks_lost": int(s.get("stacks_lost", 0)),
        "kworker_samples": kworker_samples(header),
        "ns": k * per, "ci95_ns": [max(0.0, (k - half) * per), (k + half) * per],
        "by_function": dict(sorted(by_fn.items(), key=lambda kv: -kv[1])),
    }


def decompression_estimate(header):
    """In-task decompression CPU, by the outermost decompressor function."""
    return _estimate(header, is_decompression, lambda fr: next(f for f in fr if DECOMPRESSOR.match(f)),
                     "a decompressor function and no lock spinning")


def lock_spin_estimate(header):
    """On-CPU spinning for contended locks, by the function that took the lock."""
    def taker(frames):
        i = next(i for i, f in enumerate(frames) if LOCK_SPIN.match(f))
        return frames[i - 1] if i else frames[i]
    return _estimate(header, is_lock_spin, taker, "a lock's spinning slow path")


# where a blocked thread's stack enters the scheduler: frames from here on (incl. fstrace's own BPF) are cut
_SCHED = {"schedule", "__schedule", "schedule_preempt_disabled", "preempt_schedule_common"}


def trim_offcpu(stack):
    frames = stack.split(";")
    for i, f in enumerate(frames):
        if f in _SCHED:
            return ";".join(frames[:i]) or "[scheduler]"
    return stack


def offcpu_folded(header):
    """{(reason, trimmed stack): ns} from the off-CPU stacks of traced tasks inside requests."""
    names = header.get("enums", {}).get("offcpu_reason", {})
    out = {}
    for stack, reason, ns in (header.get("offcpu") or {}).get("folded", []):
        key = (names.get(str(reason), str(reason)), trim_offcpu(stack))
        out[key] = out.get(key, 0) + ns
    return out


# the leaf frame the wall-clock graph adds to every stack: what the thread was doing there
WALL_CPU, WALL_DECOMP, WALL_SPIN = "[cpu]", "[cpu: decompression]", "[cpu: lock spin]"
WALL_TRACER = "[cpu: fstrace]"  # the tracer's own programs


def wallclock_folded(header):
    """{stack: microseconds}: where requests' wall time went, on- and off-CPU in one graph.

    On-CPU time comes from the samples (each worth 1/hz; an estimate), off-CPU time from the switch-out
    stacks weighted by the measured time blocked.  Each stack ends in a category frame ([cpu],
    [cpu: decompression], [cpu: lock spin], [io_wait], [lock_wait], ...) so a renderer can colour the categories apart.
    [cpu: lock spin] is on-CPU spinning for a contended lock.  Runqueue time has no stack of its own and is not in the
    graph."""
    out = {}
    hz = (header.get("sampling") or {}).get("hz") or 0
    if hz:
        per_us = 1e6 / hz
        for st, n in folded(header).items():
            cat = WALL_TRACER if is_tracer(st) else WALL_DECOMP if is_decompression(st) else \
                WALL_SPIN if is_lock_spin(st) else WALL_CPU
            key = "%s;%s" % (st, cat)
            out[key] = out.get(key, 0) + int(round(n * per_us))
    for (reason, st), ns in offcpu_folded(header).items():
        key = "%s;[%s]" % (st, reason)
        out[key] = out.get(key, 0) + ns // 1000
    return {k: v for k, v in out.items() if v > 0}


def stack_lost_by_reason(header):
    """{reason: ns} of off-CPU time whose stack the kernel could not store (counted, not drawn)."""
    names = header.get("enums", {}).get("offcpu_reason", {})
    lost = (header.get("offcpu") or {}).get("stack_lost_ns_by_reason", {})
    return {names.get(r, r): ns for r, ns in lost.items()}


def offcpu_dropped_by_reason(header):
    """{reason: ns} of off-CPU time in the stacks of requests not kept (found on no traced filesystem at their end:
    a path-based stat call elsewhere): the stacks add up to the kept requests' parts plus this."""
    names = header.get("enums", {}).get("offcpu_reason", {})
    dropped = (header.get("offcpu") or {}).get("dropped_ns_by_reason", {})
    return {names.get(r, r): ns for r, ns in dropped.items()}


def offcpu_summary(header, top=3):
    """Per reason: total ns and the blocking functions (leaf frames) that took most."""
    if not header.get("offcpu"):
        return None
    by_reason = {}
    for (reason, stack), ns in offcpu_folded(header).items():
        r = by_reason.setdefault(reason, {"ns": 0, "leaf": {}})
        r["ns"] += ns
        leaf = stack.split(";")[-1]
        r["leaf"][leaf] = r["leaf"].get(leaf, 0) + ns
    for r in by_reason.values():
        r["top"] = sorted(r.pop("leaf").items(), key=lambda kv: -kv[1])[:top]
    return {"by_reason": by_reason,
            "stack_lost_ns": header["offcpu"].get("stack_lost_ns", 0),
            "stack_lost_ns_by_reason": stack_lost_by_reason(header),
            "dropped_ns_by_reason": offcpu_dropped_by_reason(header),
            "threshold_ns": offcpu_threshold_ns(header),
            "method": offcpu_method(header)}


def offcpu_threshold_ns(header):
    """The off-CPU stacks' sampling threshold T (0: every interval's stack, exact)."""
    off = header.get("offcpu") or {}
    return off.get("threshold_ns", 0) if off.get("sampling") == "threshold" else 0


def offcpu_method(header):
    t = offcpu_threshold_ns(header)
    where = "switch back in" if (header.get("offcpu") or {}).get("walked_at") == "switch_in" else "switch-out"
    how = ("kernel stack where a traced thread slept inside a request, walked at its %s, weighted by the time "
           "until it ran again; lock_wait = switched out inside a lock's contention_begin/end" % where)
    if not t:
        return how + "; every interval (exact)"
    how += ("; the kernel's walk of a sleeping task leaves out scheduler functions (io_schedule, the mutex and "
            "rwsem slow paths, wait_for_completion), so a stack ends at the function that blocked")
    return how + ("; threshold-sampled: intervals of %d us or more always, shorter ones with probability "
                  "length/%d us and weighted %d us, so a stack's time is unbiased with standard error at most "
                  "sqrt(%d us x its time); each reason's total is exact in the attribution" % ((t // 1000,) * 4))


# which filesystem path queued a block request, from the kernel stack it was queued from (first match wins;
# squashfs's fragment readers are inlined on some kernels, so fragment misses can count as data there)
IO_ORIGINS = [
    ("loop worker (backing file I/O)", None, re.compile(r"^(lo_rw_aio\S*|loop_\w+|lo_\w+)$")),
    ("squashfs metadata", "squashfs_", re.compile(r"^squashfs_(read_metadata|read_inode|lookup|readdir)$")),
    ("squashfs fragment", "squashfs_", re.compile(r"fragment")),
    ("squashfs data", "squashfs_", re.compile(r"^squashfs_")),
    ("erofs metadata", "erofs_", re.compile(r"^erofs_(bread|read_metabuf|iget|lookup|readdir|fill_inode)$")),
    ("erofs compressed data", "z_erofs_", re.compile(r"^z_erofs_")),
    ("erofs plain data", "erofs_", re.compile(r"^(iomap_\w+|erofs_\w+)$")),
    ("btrfs", "btrfs_", re.compile(r"^btrfs_")),
    ("page cache readahead", None, re.compile(r"^(page_cache_ra_\w+|read_pages)$")),
]


def io_origin(stack):
    frames = stack.split(";")
    for name, needs, pat in IO_ORIGINS:
        if needs and not any(f.startswith(needs) for f in frames):
            continue
        if any(pat.search(f) for f in frames):
            return name
    return "other"
