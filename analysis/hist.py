"""Histograms as libbpf-tools prints them (print_log2_hist), from values or from kernel slots.

Slot k of a log2 histogram holds values in [2^k, 2^(k+1) - 1], except slot 0
which holds 0 and 1: the same bucketing as log2_slot() in bpf/common.bpf.h, so
kernel-side and record-side histograms can be compared slot by slot.
"""
import numpy as np


def log2_slots(values, nslots=40):
    """Counts per log2 slot of non-negative integer values."""
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


def format_linear(values, step, unit, width=40, max_rows=40):
    """Linear histogram with buckets of `step` (print_linear_hist style)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return "     (no samples)\n"
    idx = (v // step).astype(np.int64)
    counts = np.bincount(idx - idx.min())
    base = int(idx.min())
    if len(counts) > max_rows:
        return format_log2(log2_slots(values), unit, width)
    peak = counts.max()
    lines = ["%*s : count    distribution" % (15, unit)]
    for i, c in enumerate(counts):
        lines.append("%15g : %-8d |%-*s|" % ((base + i) * step, c, width, "*" * int(round(c * width / peak))))
    return "\n".join(lines) + "\n"


def percentiles(values, ps=(50, 90, 99, 99.9)):
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return None
    out = {"p%g" % p: float(np.percentile(v, p)) for p in ps}
    out.update(mean=float(v.mean()), max=float(v.max()), min=float(v.min()))
    return out
