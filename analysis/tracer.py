"""What fstrace itself cost: its handlers' run time inside requests (sampled timing, with its error), the
collector process's CPU, and the kernel's own run time per probe.
"""
import math

from analysis import sampling


def tracer_estimate(header):
    """How the tracer part was measured (records.h FST_TRACER_SITES): per site its runs inside requests and how
    many were timed, and the 95 % error of the total, from the untimed runs charged their site's mean (the
    timed runs' spread over the square root of their number, times the untimed runs, summed in quadrature)."""
    ts = header.get("tracer_sites")
    if not ts:
        return {"method": "unavailable: no requests traced (--block-only), or results older than the tracer's "
                          "sampled timing", "sites": {}}
    var, sites = 0.0, {}
    for name, st in ts["sites"].items():
        n = st["timed"]
        mean = st["timed_ns"] / n if n else 0.0
        sd2 = max(st["timed_sq_ns"] / n - mean * mean, 0.0) * n / (n - 1) if n > 1 else 0.0
        untimed = st["runs"] - n
        # the charged means' error (untimed^2 sd^2 / n) and the untimed runs' own spread about them (untimed sd^2)
        var += sd2 * (untimed * untimed / n + untimed) if n else 0.0
        sites[name] = {"runs": st["runs"], "timed": n, "mean_ns": mean, "charged_ns": st["charged_ns"]}
    return {"method": "1 in %d handler runs timed at random (a site's first on each CPU, and every sampling run, "
                      "always), the others charged the mean of their site's timed runs on their CPU" % ts["time_every"],
            "time_every": ts["time_every"], "error_ns_95": 1.96 * math.sqrt(var), "sites": sites}


def collector_cpu(header):
    """The collector process's own CPU time (reading and filing the records, --budget's windows, its timers): while
    the workload ran where it started one (--budget's calibration before it left out), else over the traced
    interval; or why unknown."""
    c, wl, t = header.get("collector") or {}, header.get("workload") or {}, header["time"]
    if wl.get("collector_cpu_ns") is not None and wl.get("start_ns"):
        ns, span, over = wl["collector_cpu_ns"], t["end_ns"] - wl["start_ns"], "the workload"
    elif c.get("cpu_ns") is not None:
        ns, span, over = c["cpu_ns"], t["end_ns"] - t["start_ns"], "the traced interval"
    else:
        return {"available": False, "why": "this collector did not record its own CPU time"}
    return {"available": True, "cpu_ns": ns, "span_ns": span, "over": over,
            "cpu_ms_per_s": ns / span * 1e3 if span > 0 else None,
            "method": "CLOCK_PROCESS_CPUTIME_ID of the collector (every thread, user and system) at the start and "
                      "end of %s; its BPF programs' time is not in it (per_probe)" % over}


def tracer_cost(res, attr):
    """What fstrace itself cost the requests: the tracer part (its handlers' run time, sampled timing), the
    sampled stacks' share as an independent check, and per probe the kernel's own run time when
    kernel.bpf_stats_enabled was on."""
    part = attr["parts_ns"].get("tracer_ns")
    per_probe = [{"probe": p["probe"], "tier": p["tier"], "runs": p["runs"], "run_ns": p.get("run_ns", 0),
                  "ns_per_run": p["run_ns"] / p["runs"]}
                 for p in res.header.get("probes", []) if p.get("runs") and p.get("run_ns") is not None]
    return {
        "part_ns": part,
        "part_share": part / attr["wall_ns"] if part is not None and attr["wall_ns"] else None,
        "collector": collector_cpu(res.header),
        "estimate": tracer_estimate(res.header),
        "sampled": sampling.tracer_share(res.header),
        "per_probe": per_probe or None,
        "per_probe_note": None if per_probe else "unavailable: kernel.bpf_stats_enabled was 0 during the run "
                                                 "(make bench-overhead turns it on)",
    }
