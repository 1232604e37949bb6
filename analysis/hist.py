"""Histograms as libbpf-tools prints them (print_log2_hist), from values or from kernel slots.

Slot k of a log2 histogram holds values in [2^k, 2^(k+1) - 1], except slot 0
which holds 0 and 1: the same bucketing as log2_slot() in bpf/hist.bpf.h, so
kernel-side and record-side histograms can be compared slot by slot.
"""
import numpy as np


def log2_slots(values, nslots):
    """Counts per log2 slot of non-negative integer values, nslots of them (the last takes every larger value;
    a results file's Results.schema.hist_slots, as its kernel-side histograms have)."""
    v = np.asarray(values, dtype=np.uint64)
    if v.size == 0:
        return [0] * nslots
    v = np.maximum(v, 1)
    # floor(log2(v)) exactly, via the bit length (no float rounding near powers of two)
    slots = np.zeros(v.shape, dtype=np.int64)
    x = v.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        big = x >= (np.uint64(1) << np.uint64(shift))
        slots[big] += shift
        x[big] >>= np.uint64(shift)
    slots = np.minimum(slots, nslots - 1)
    return np.bincount(slots, minlength=nslots)[:nslots].tolist()


def format_log2(counts, unit, width=40):
    """Text in the style of libbpf-tools' print_log2_hist."""
    counts = list(counts)
    last = max((i for i, c in enumerate(counts) if c), default=-1)
    if last < 0:
        return "     (no samples)\n"
    first = min(i for i, c in enumerate(counts) if c)
    peak = max(counts)
    lines = ["%*s : count    distribution" % (27, unit)]
    for i in range(first if first > 0 else 0, last + 1):
        low = (1 << (i + 1)) >> 1
        high = (1 << (i + 1)) - 1
        if i == 0:
            low = 0
        stars = int(round(counts[i] * width / peak)) if peak else 0
        lines.append("%12d -> %-12d : %-8d |%-*s|" % (low, high, counts[i], width, "*" * stars))
    return "\n".join(lines) + "\n"


def linear_slots(values, nrows=20):
    """Linear buckets over [0, p99] (the tail above p99 in the last row): {step_us, counts}, or None."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return None
    top = float(np.percentile(v, 99))
    raw = max(top / nrows, 1.0)
    mag = 10 ** np.floor(np.log10(raw))
    step = float(min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw)))  # a round step: 1, 2 or 5 x 10^k
    idx = np.minimum((v // step).astype(np.int64), int(top // step))
    return {"step_us": step, "counts": np.bincount(idx).tolist()}


def format_linear_counts(counts, step, unit, width=40):
    """Text of a linear histogram (print_linear_hist style); the last row holds everything above it."""
    if not counts or not max(counts):
        return "     (no samples)\n"
    peak = max(counts)
    lines = ["%*s : count    distribution" % (15, unit)]
    for i, c in enumerate(counts):
        label = "%g%s" % (i * step, "+" if i == len(counts) - 1 else "")
        lines.append("%15s : %-8d |%-*s|" % (label, c, width, "*" * int(round(c * width / peak))))
    return "\n".join(lines) + "\n"


def percentiles(values, ps=(50, 90, 99, 99.9)):
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return None
    out = {"p%g" % p: float(np.percentile(v, p)) for p in ps}
    out.update(mean=float(v.mean()), max=float(v.max()), min=float(v.min()))
    return out


def loglin_bounds(slot, sub_bits):
    """[low, high) ns of a log-linear slot (bpf/records.h fst_loglin_slot and FST_LAT_SLOTS)."""
    sub = 1 << sub_bits
    if slot < sub:
        return slot, slot + 1
    e, m = slot // sub + sub_bits - 1, slot % sub
    return (sub + m) << (e - sub_bits), (sub + m + 1) << (e - sub_bits)


def merged_percentiles(exact, slot_counts, sub_bits, slotted_sum_us, ps=(50, 90, 99, 99.9)):
    """Percentiles of exact values (us) together with values known only by log-linear slot (counts per slot
    of ns).  A percentile that falls among the slotted values is its slot's midpoint, so it is within half a
    slot (1/16 of the value) of the true one; max/min/mean are exact where the records hold them, and the
    slotted values' mean uses their exact sum (sum_ns)."""
    exact = np.asarray(exact, dtype=np.float64)
    slots = [(i, c) for i, c in enumerate(slot_counts) if c]
    if not slots:
        return percentiles(exact, ps)
    mids = np.array([sum(loglin_bounds(i, sub_bits)) / 2e3 for i, _ in slots])
    v = np.concatenate([exact, mids])
    w = np.concatenate([np.ones(exact.size), np.array([c for _, c in slots], dtype=np.float64)])
    order = np.argsort(v, kind="stable")
    v, cum = v[order], np.cumsum(w[order])
    total = cum[-1]
    # the inverted-CDF percentile (the smallest value with at least p % at or below it)
    out = {"p%g" % p: float(v[min(np.searchsorted(cum, p / 100.0 * total), v.size - 1)]) for p in ps}
    lo_slot, hi_slot = slots[0][0], slots[-1][0]
    out["mean"] = float((exact.sum() + slotted_sum_us) / total)
    out.update(min=float(min(exact.min() if exact.size else np.inf, loglin_bounds(lo_slot, sub_bits)[0] / 1e3)),
               max=float(max(exact.max() if exact.size else 0.0, loglin_bounds(hi_slot, sub_bits)[1] / 1e3)))
    return out
