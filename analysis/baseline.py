"""The untraced baseline beside the traced run: the same workload with nothing attached (cli/runner.py
run_untraced measures it), its throughput and latency next to the traced run's, measured alike."""

# how the two runs are compared (summary.json baseline.method), and what the verdict calls the throughput each
# compares: fio's bandwidth is over its jobs' run time, which leaves out its start and end, so it is not the reads'
# throughput over the traced wall time the verdict prints beside it
FIO_METHOD = "fio's own bandwidth and completion latency, untraced and traced"
WALL_METHOD = "bytes the workload read over its wall time, untraced and traced"
THROUGHPUT_NAMES = {FIO_METHOD: "fio's bandwidth", WALL_METHOD: "bytes read over wall time"}


def fio_latency_us(gt):
    """fio's own completion latency percentiles (p50, p99) in microseconds, or None."""
    pct = ((gt or {}).get("clat_ns") or {}).get("percentile") or {}
    p50, p99 = pct.get("50.000000"), pct.get("99.000000")
    return {"p50": p50 / 1e3, "p99": p99 / 1e3} if p50 is not None and p99 is not None else None


def compare(base, s):
    """The untraced run's throughput and latency beside the traced one's, measured alike: fio's own bandwidth and
    completion latency for fio, bytes the workload read over its wall time otherwise.

    base: the untraced run's measurement (cli/runner.py run_untraced), or a comparison made before (a stored
    summary.json's baseline, which holds that measurement): made again from it alike, so `run` and `report` show
    the same figures."""
    gt, bgt = s.get("ground_truth") or {}, base.get("ground_truth") or {}
    out = dict(base)
    if base.get("exit_status", 0) != 0:
        out["why"] = "the untraced run exited with status %d" % base["exit_status"]
        return out
    if "bw_bytes" in bgt and "bw_bytes" in gt:
        out["method"] = FIO_METHOD
        out["throughput_bytes_per_s"], traced = bgt["bw_bytes"], gt["bw_bytes"]
        out["latency_us"], out["traced_latency_us"] = fio_latency_us(bgt), fio_latency_us(gt)
    elif bgt.get("read_bytes") and gt.get("read_bytes") and s.get("wall_s"):
        out["method"] = WALL_METHOD
        out["throughput_bytes_per_s"] = bgt["read_bytes"] / base["wall_s"]
        traced = gt["read_bytes"] / s["wall_s"]
    elif s.get("wall_s"):
        out["method"] = "the workload's wall time, untraced and traced (it reports no bytes of its own)"
        out["throughput_bytes_per_s"] = None
        out["traced_ratio"] = base["wall_s"] / s["wall_s"]
        return out
    else:
        out["why"] = "the traced run has no wall time"
        return out
    out["traced_throughput_bytes_per_s"] = traced
    out["traced_ratio"] = traced / out["throughput_bytes_per_s"] if out["throughput_bytes_per_s"] else None
    return out
