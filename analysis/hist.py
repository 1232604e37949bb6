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
