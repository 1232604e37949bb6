"""From records to the answers: small pure functions over a loaded Results.

summarize() builds the summary.json document (its fields: docs/outputs.md, "summary.json").  Enum
values and record layouts come from the results header, never from constants
kept here.
"""
import errno as errnos
import math
import numpy as np

from analysis import amplification, results, sampling, schema
from analysis.baseline import compare
from analysis.hist import linear_slots, loglin_bounds, log2_slots, merged_percentiles, percentiles

SCHEMA_VERSION = 1


def enum_value(header, enum, name):
    for k, v in header["enums"][enum].items():
        if v == name:
            return int(k)
    raise KeyError("%s has no %s in this results file" % (enum, name))


def enum_name(header, enum, value):
    return header["enums"][enum].get(str(int(value)), str(int(value)))


def dev_name(kdev, minor_bits=schema.MINORBITS):
    """MAJ:MIN of a kernel dev_t (minor_bits: the results header's, Results.minor_bits)."""
    return "%d:%d" % (kdev >> minor_bits, kdev & ((1 << minor_bits) - 1))


def fs_devices(res):
    """Kernel dev_t of the traced filesystems' superblocks, or None when the run traced all of them."""
    cfg = res.config
    return cfg.get("fs_kdevs") or ([cfg["fs_kdev"]] if cfg.get("fs_kdev") is not None else None)


def fs_records(res, name):
    """Records of one type (decomp, erofs, fs_cache, compress) on the traced filesystems; empty when the file
    has none of that type."""
    r = res.records.get(name)
    if r is None:
        return np.zeros(0)
    fs_devs = fs_devices(res)
    return results.select(r, np.isin(r["dev"], fs_devs)) if fs_devs else r


def by_context(header, records, ns, count_key):
    """{where it ran: {count_key: records, ns}} over the records' context field."""
    out = {}
    for c in np.unique(records["context"]):
        m = records["context"] == c
        out[enum_name(header, "context", c)] = {count_key: int(m.sum()), "ns": int(ns[m].sum())}
    return out


def _kind_values(res, kinds):
    return [enum_value(res.header, "req_kind", k) for k in kinds]


def fs_requests(res, kinds=("read", "getdents", "open")):
    """Recorded requests of the traced workload on the traced filesystem (file known: sdev matches).

    Read-only, and kept per kinds on res: a selection copies every chosen record (about 200 bytes each), and
    the summary and report ask for the same ones more than once."""
    memo = res.__dict__.setdefault("_fs_requests", {})
    key = tuple(kinds)
    if key in memo:
        return memo[key]
    req = res["req"]
    fs_devs = fs_devices(res)
    mask = np.isin(req["kind"], _kind_values(res, kinds))
    if fs_devs:
        mask &= np.isin(req["sdev"], fs_devs)
    sel = req if mask.all() else results.select(req, mask)  # every record chosen: no copy
    sel.flags.writeable = False  # shared by every caller that asks for these kinds
    memo[key] = sel
    return sel


def counted_requests(res, kinds=("read", "getdents", "open"), any_fs=False):
    """The requests of these kinds the kernel counted instead of recording (page-cache hits; records.h
    fst_req_agg), summed over the traced filesystems (any_fs: over all, as fs_requests' stat calls are):
    {count, bytes, wall_ns, part_ns, wall_hist, part_hist, wall_ns_loglin}, or None when there are none."""
    rows = (res.header.get("kernel_aggregates") or {}).get("requests_counted") or []
    fs_devs = None if any_fs else fs_devices(res)
    kv = set(_kind_values(res, kinds))
    rows = [r for r in rows if r["kind"] in kv and (not fs_devs or r["sdev"] in fs_devs) and r["count"]]
    if not rows:
        return None
    out = {"count": 0, "bytes": 0, "wall_ns": 0, "part_ns": {}, "part_hist": {},
           "wall_hist": np.zeros(len(rows[0]["wall_hist"]), dtype=np.int64),
           "wall_ns_loglin": np.zeros(len(rows[0]["wall_ns_loglin"]), dtype=np.int64)}
    for r in rows:
        for k in ("count", "bytes", "wall_ns"):
            out[k] += r[k]
        out["wall_hist"] += r["wall_hist"]
        out["wall_ns_loglin"] += r["wall_ns_loglin"]
        for p, v in r["part_ns"].items():
            out["part_ns"][p] = out["part_ns"].get(p, 0) + v
            out["part_hist"][p] = out["part_hist"].get(p, np.zeros(len(r["part_hist"][p]), dtype=np.int64)) + \
                r["part_hist"][p]
    return out


def counted_latencies_us(cnt, sch):
    """The counted requests' latencies as their log-linear slots' midpoints (within 1/16 of each value); sch: the
    results' schema (Results.schema)."""
    if not cnt:
        return np.zeros(0)
    mids = [sum(loglin_bounds(i, sch.lat_sub_bits)) / 2e3 for i in range(len(cnt["wall_ns_loglin"]))]
    return np.repeat(np.array(mids), cnt["wall_ns_loglin"])


def reads_of(res, ino=None):
    r = fs_requests(res, kinds=("read",))
    if ino is not None:
        r = r[r["ino"] == ino]
    return r


def latencies_us(res):
    """Latencies of the run's reads on the image, else of all its requests there (stat workloads: stat calls);
    counted requests by their histogram slot (see counted_latencies_us)."""
    kinds = ("read",)
    r = fs_requests(res, kinds=kinds)
    if not len(r) and not counted_requests(res, kinds):
        kinds = ("read", "write", "open", "getdents", "stat")
        r = fs_requests(res, kinds=kinds)
    exact = (r["ts_end_ns"] - r["ts_start_ns"]).astype(np.int64) / 1e3
    return np.concatenate([exact, counted_latencies_us(counted_requests(res, kinds), res.schema)])


def request_stats(reqs, cnt, sch):
    """Counts, bytes, latency of recorded requests plus the counted ones (cnt: counted_requests(); sch: the
    results' schema)."""
    lat_ns = (reqs["ts_end_ns"] - reqs["ts_start_ns"]).astype(np.int64)
    ok = reqs["ret"] > 0
    hist = log2_slots(lat_ns // 1000, sch.hist_slots)
    if cnt:
        lat = merged_percentiles(lat_ns / 1e3, cnt["wall_ns_loglin"], sch.lat_sub_bits, cnt["wall_ns"] / 1e3)
        hist = (np.array(hist) + cnt["wall_hist"][:len(hist)]).tolist()
    else:
        lat = percentiles(lat_ns / 1e3)
    out = {
        "count": int(len(reqs)) + (cnt["count"] if cnt else 0),
        "recorded": int(len(reqs)),
        "counted_in_kernel": cnt["count"] if cnt else 0,
        "bytes": (int(reqs["ret"][ok].sum()) if len(reqs) else 0) + (cnt["bytes"] if cnt else 0),
        "latency_us": lat,
        "latency_method": "exact (every request recorded)" if not cnt else
        "records exact; counted requests by log-linear slot (8 per power of two): a percentile among them is "
        "its slot's midpoint, within 1/16 of the true value",
        "latency_hist_log2_us": hist,
        "pagecache_misses": int(reqs["pcache_adds"].sum()) if len(reqs) else 0,
    }
    return out


def attribution(reqs, cnt, sch):
    """Sum of each part (sch: the results' schema; a file from before a part existed lacks its field) over the
    requests (recorded and counted), their shares, and how far parts miss the wall time."""
    names = reqs.dtype.names
    wall = int((reqs["ts_end_ns"] - reqs["ts_start_ns"]).sum()) if len(reqs) else 0
    parts = {p: int(reqs[p].sum()) if len(reqs) else 0 for p in sch.parts if p in names}
    hists = {p: np.array(log2_slots(reqs[p][reqs[p] > 0] // 1000, sch.hist_slots)) for p in parts}
    if cnt:
        wall += cnt["wall_ns"]
        for p in parts:
            parts[p] += int(cnt["part_ns"].get(p, 0))
            if p in cnt["part_hist"]:
                hists[p] = hists[p] + cnt["part_hist"][p][:len(hists[p])]
    accounted = sum(parts.values())
    return {
        "wall_ns": wall,
        "parts_ns": parts,
        # per part, over the requests that had any of it: how it is spread (log2 slots of microseconds)
        "part_hist_log2_us": {p: hists[p].tolist() for p, v in parts.items() if v},
        "shares": {p: (v / wall if wall else None) for p, v in parts.items()},
        "unaccounted_ns": wall - accounted,
        "requests_with_missed_events": int((reqs["nr_missed_events"] > 0).sum()) if len(reqs) else 0,
        "requests_counted_in_kernel": cnt["count"] if cnt else 0,
        "method": "sched_switch/sched_wakeup intervals inside each syscall; I/O wait = off-CPU in "
                  "io_schedule (task->in_iowait) or uninterruptible with own block I/O in flight; tracer = "
                  "fstrace's handlers' run time inside the request's on-CPU time (taken out of oncpu; how it was "
                  "timed: tracer.estimate)",
    }


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


def probe_tier(res, probe):
    for p in res.header.get("probes", []):
        if p["probe"] == probe:
            return p
    return None


def readahead(res, reqs):
    """Readahead windows the kernel decided for the requests (page_cache_ra_order), or why unknown."""
    p = probe_tier(res, "page_cache_ra_order")
    if not p or p["tier"] == "unavailable" or "ra_windows" not in reqs.dtype.names:
        return {"available": False,
                "why": (p or {}).get("why") or "this collector has no readahead probe"}
    fs_devs = fs_devices(res)
    metric = enum_value(res.header, "hist_metric", "ra_window_pages")
    slots = [0] * res.schema.hist_slots
    for h in res.header.get("kernel_aggregates", {}).get("histograms", []):
        if h["metric"] == metric and (fs_devs is None or h["dev"] in fs_devs):
            slots = [a + b for a, b in zip(slots, h["slots"])]
    with_ra = reqs[reqs["ra_windows"] > 0]
    return {"available": True, "tier": p["tier"], "windows": int(reqs["ra_windows"].sum()),
            "pages": int(reqs["ra_pages"].astype(np.uint64).sum()),
            "requests_with_readahead": int(len(with_ra)),
            "max_window_pages": int(reqs["ra_max_pages"].max()) if len(reqs) else 0,
            "window_hist_log2_pages": slots,
            "device_read_ahead_kb": res.config.get("loop_read_ahead_kb"),
            "note": "windows the kernel sized for these requests (sync and async readahead); pages, not bytes "
                    "read: folios already cached are skipped"}


def lock_wait(res, reqs):
    """Time requests slept on contended sleeping locks, or why it is unknown."""
    p = probe_tier(res, "contention_begin")
    if not p or p["tier"] == "unavailable" or "lock_ns" not in reqs.dtype.names:
        return {"available": False, "why": (p or {}).get("why") or "this collector has no lock probe"}
    waited = reqs[reqs["lock_ns"] > 0]
    return {"available": True, "tier": p["tier"], "ns": int(reqs["lock_ns"].sum()),
            "spin_estimate": sampling.lock_spin_estimate(res.header),
            "waits": int(reqs["nr_lock_waits"].sum()), "requests_waiting": int(len(waited)),
            "wait_us": percentiles(waited["lock_ns"] / 1e3) if len(waited) else None,
            "method": "switched out between lock:contention_begin and contention_end (mutex, rwsem, "
                      "rt-mutex, percpu-rwsem); spin_estimate: on-CPU spinning for locks (part of oncpu_ns), "
                      "from samples"}


def io_stats(io, unit, hist_slots):
    """Block requests of one device: counts, sizes, alignment, latency (log2 histograms of hist_slots)."""
    if len(io) == 0:
        return {"requests": 0}
    start = io["sector"].astype(np.uint64) * np.uint64(512)
    nbytes = io["bytes"].astype(np.uint64)
    end = start + nbytes
    u = np.uint64(unit)
    crosses = (start % u != 0) & ((start // u) != ((end - np.uint64(1)) // u)) & (nbytes > 0)
    known = io["ts_issue_ns"] > 0
    q2c = (io["ts_complete_ns"][known] - io["ts_queue_ns"][known]) / 1e3
    d2c = (io["ts_complete_ns"][known] - io["ts_issue_ns"][known]) / 1e3
    return {
        "requests": int(len(io)),
        "bytes": int(nbytes.sum()),
        "sectors": int(nbytes.sum() // 512),
        "bios": int(io["nr_bios"].sum()),
        "merges": int(np.maximum(io["nr_bios"].astype(np.int64) - 1, 0).sum()),
        "mean_bytes": float(nbytes.mean()),
        "unit_bytes": int(unit),
        "aligned_4k_start_pct": 100.0 * float((start % np.uint64(4096) == 0).mean()),
        "aligned_4k_pct": 100.0 * float(((start % np.uint64(4096) == 0) & (end % np.uint64(4096) == 0)).mean()),
        "aligned_1k_pct": 100.0 * float(((start % np.uint64(1024) == 0) & (end % np.uint64(1024) == 0)).mean()),
        "aligned_unit_pct": 100.0 * float(((start % u == 0) & (end % u == 0)).mean()),
        "cross_unit_pct": 100.0 * float(crosses.mean()),
        "q2c_us": percentiles(q2c),
        "d2c_us": percentiles(d2c),
        "size_hist_log2_bytes": log2_slots(nbytes, hist_slots),
        "q2c_hist_log2_us": log2_slots(q2c.astype(np.uint64), hist_slots),
        "issued_before_tracing": int((~known).sum()),
        # requeued at least once (older collectors recorded each part of such a request apart, and no count)
        "requeued": int((io["nr_requeues"] > 0).sum()) if "nr_requeues" in io.dtype.names else None,
        "reread_bytes": reread_bytes(io),
    }


def reread_bytes(io):
    """Bytes of these block requests that an earlier one of them (or another in the same place) had read."""
    start = io["sector"].astype(np.uint64) * np.uint64(512)
    end = start + io["bytes"].astype(np.uint64)
    return int(io["bytes"].astype(np.uint64).sum()) - union_bytes(start, end)


def union_bytes(starts, ends):
    """Bytes covered by the union of the intervals [starts, ends): what was read at least once."""
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order].astype(np.int64), ends[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    # an interval adds what lies beyond the furthest end of those that start before it
    prev = np.concatenate([[s[0]], reach[:-1]])
    return int(np.maximum(e - np.maximum(s, prev), 0).sum())


# The read block requests each device level (records.h FST_DEV_LEVELS) counts as the workload's, by records.h
# FST_CHARGES name (None: every one): the image's loop device is the workload's alone; on the disk behind it,
# what the loop device issued for the traced tasks; a disk a traced filesystem sits on is the whole system's, and
# so is a device named alone: the traced tasks' own reads there (queued by them, or by a loop device for them).
LEVEL_CHARGES = {"loop": None, "backing": ("loop",), "disk": ("direct", "loop"), "device": ("direct", "loop")}


def device_level(d):
    """A header device's level; files from before the header said: the image's loop device, or the disk behind
    it (all that run traced then)."""
    return d.get("level") or ("loop" if d["is_loop"] else "backing")


def of_workload(res, rows, level):
    """The block requests of a device of this level that it counts as the workload's (LEVEL_CHARGES)."""
    charges = LEVEL_CHARGES.get(level, LEVEL_CHARGES["device"])
    return rows if charges is None else \
        rows[np.isin(rows["charge"], [enum_value(res.header, "charge", c) for c in charges])]


def workload_reads(res, reads, level):
    """A device's read block requests its level counts as the workload's (LEVEL_CHARGES): requests, bytes, bytes
    read again, and which charges counted."""
    charges = LEVEL_CHARGES.get(level, LEVEL_CHARGES["device"])
    mine = of_workload(res, reads, level)
    return {"requests": int(len(mine)), "bytes": int(mine["bytes"].astype(np.uint64).sum()),
            "reread_bytes": reread_bytes(mine), "charges": list(charges) if charges else "all"}


def device_stats(res):
    """Per traced device: records vs the kernel's own /proc/diskstats delta over the run."""
    io = res.records.get("io")
    out = {}
    read_op, write_op = res.io_op("read"), res.io_op("write")
    for d in res.header.get("devices", []):
        rows = io[io["dev"] == d["dev"]] if io is not None else io
        reads = rows[res.io_ops(rows) == read_op]
        st = io_stats(reads, d["unit_bytes"], res.schema.hist_slots)
        st["level"] = device_level(d)
        st["workload_reads"] = workload_reads(res, reads, st["level"])
        st["all_ops_requests"] = int(len(rows))
        charge_none = enum_value(res.header, "charge", "none")
        st["charged_to_workload"] = int((reads["charge"] != charge_none).sum())
        writes = rows[res.io_ops(rows) == write_op]
        st["write_requests"] = int(len(writes))
        st["write_bytes"] = int(writes["bytes"].astype(np.uint64).sum())
        stacks = res.header.get("io_stacks")
        if stacks is not None:
            origins = {}
            sampled = res.header.get("io_stack_sampling") or {"mode": "all"}
            unsampled = sampled.get("unsampled_id")
            for sid, nbytes in zip(reads["queue_stack"].tolist(), reads["bytes"].tolist()):
                o = "not sampled" if sid == unsampled else \
                    sampling.io_origin(stacks[str(sid)]) if str(sid) in stacks else "unknown"
                cur = origins.setdefault(o, {"requests": 0, "bytes": 0})
                cur["requests"] += 1
                cur["bytes"] += int(nbytes)
            st["by_origin"] = origins
            st["by_origin_method"] = (
                "every block request's queue stack" if sampled["mode"] == "all" else
                "queue stacks of at most one bio per %g ms per CPU (the rest 'not sampled'): the origin shares "
                "of the sampled ones estimate the whole" % (sampled["every_ns"] / 1e6)) + (
                "; taken only in the request windows (--budget), which are placed at random"
                if sampled.get("windows_only") else "")
        st["by_charge"] = {
            name: {"requests": int((reads["charge"] == int(v)).sum()),
                   "bytes": int(reads["bytes"][reads["charge"] == int(v)].sum())}
            for v, name in res.header["enums"]["charge"].items()}
        s0, s1 = d.get("diskstats_start"), d.get("diskstats_end")
        if s0 and s1:
            delta = {k: s1[k] - s0[k] for k in ("reads", "reads_merged", "sectors_read", "writes",
                                                "sectors_written")}
            st["diskstats_delta"] = delta
            # The kernel's own count is exact.  Completions it counted that our programs never saw are
            # lost events: on some kernels BPF is not run for block completions in certain softirq
            # contexts and no missed run is counted (docs/measuring.md, "Lost events").
            t = res.header["time"]
            inside = reads[(reads["ts_complete_ns"] >= t["start_ns"]) & (reads["ts_complete_ns"] <= t["end_ns"])]
            st["requests_in_window"] = int(len(inside))
            # The window's edges are outside the snapshots: on a device shared with other I/O (two runs on
            # one backing disk), completions there are traced but not in the kernel's difference, so fstrace
            # can see more than the kernel counted.  Nothing is unseen then; the excess is said, not negated.
            st["unseen_requests"] = max(0, delta["reads"] - len(inside))
            st["unseen_sectors"] = max(0, delta["sectors_read"] - int(inside["bytes"].astype(np.uint64).sum() // 512))
            st["traced_beyond_diskstats"] = max(0, len(inside) - delta["reads"])
        out[dev_name(d["dev"], res.minor_bits)] = st
    return out


def boundary_figures(h):
    """The figures of the probes that bound requests: the syscall tracepoints' and the filesystem entry points'
    (a header with request_bounds; before it, only the former's)."""
    sch = schema.of(h)
    return (sch.figure("req_start"), sch.figure("req_end")) + ((sch.figure("req_bounds"),)
                                                                 if h.get("request_bounds") else ())


def unused_boundary(h, p):
    """A request-boundary probe the run did not use (the syscall tracepoints', or a filesystem entry point's):
    the header's request_bounds says what bounded the requests and why, not each such probe."""
    return bool(h.get("request_bounds")) and p["tier"] == "unavailable" and p["figure"] in boundary_figures(h)


def tiers(res):
    return {p["probe"]: {"tier": p["tier"], "measures": p["measures"], "why": p["why"]}
            for p in res.header.get("probes", []) if not unused_boundary(res.header, p)}


def request_bounds(h):
    """What bounded the requests (the header's request_bounds) and each kind's tiers, grouped: {tiers: [kind]};
    None for files from before the filesystems' entry points could (the syscall tracepoints did)."""
    rb = h.get("request_bounds")
    if not rb:
        return None
    groups = {}
    for kind, tier in rb["kinds"].items():
        groups.setdefault(tier, []).append(kind)
    return {"at": rb["at"], "why": rb["why"], "kinds": rb["kinds"], "groups": groups}


def decompression_probes(res):
    """The probes that time decompression (or the copy of uncompressed units) per unit, by figure id."""
    return [p for p in res.header.get("probes", []) if p["figure"] in res.schema.decomp_figures]


def decompression_in_requests(reqs, d):
    """Decompression time spent inside each request, by the request's own thread (pid and time overlap)."""
    inside = np.zeros(len(reqs), dtype=np.int64)
    mine = d[d["charged_pid"] > 0]
    idx = records_in_requests(reqs, mine["charged_pid"], mine["ts_start_ns"])
    hit = idx >= 0
    np.add.at(inside, idx[hit], (mine["ts_end_ns"][hit] - mine["ts_start_ns"][hit]).astype(np.int64))
    return inside


def decompression(res, reqs):
    """Per (fs, algorithm): units, sizes, time and where it ran; or why it could not be measured."""
    probes = decompression_probes(res)
    attached = [p for p in probes if p["tier"] != "unavailable"]
    if not attached:
        reasons = sorted({p["why"] for p in probes}) or ["this collector has no decompression probes"]
        return {"available": False, "why": "; ".join(reasons),
                "estimate": sampling.decompression_estimate(res.header)}
    d = fs_records(res, "decomp")
    h = res.header
    groups = []
    if len(d):
        for fs, alg in sorted({(int(a), int(b)) for a, b in zip(d["fs"], d["alg"])}):
            g = d[(d["fs"] == fs) & (d["alg"] == alg)]
            dur = (g["ts_end_ns"] - g["ts_start_ns"]).astype(np.int64)
            groups.append({
                "fs": enum_name(h, "fs", fs), "alg": enum_name(h, "alg", alg), "units": int(len(g)),
                "in_bytes": int(g["in_bytes"].astype(np.uint64).sum()),
                "out_bytes": int(g["out_bytes"].astype(np.uint64).sum()),
                "ns": int(dur.sum()), "unit_us": percentiles(dur / 1e3),
                "unit_hist_log2_us": log2_slots(dur // 1000, res.schema.hist_slots),
                "in_hist_log2_bytes": log2_slots(g["in_bytes"], res.schema.hist_slots),
                "contexts": by_context(h, g, dur, "units"),
                "tiers": sorted({enum_name(h, "tier", t) for t in np.unique(g["tier"])}),
            })
    inside = decompression_in_requests(reqs, d) if len(d) else np.zeros(len(reqs), dtype=np.int64)
    return {"available": True, "groups": groups, "estimate": sampling.decompression_estimate(h),
            "in_requests_ns": int(inside.sum()),
            "elsewhere_ns": int(sum(gr["ns"] for gr in groups)) - int(inside.sum()),
            "probes": {p["probe"]: p["tier"] for p in attached},
            "note": "in_requests_ns: in the requesting thread, within its requests (part of on-CPU time); "
                    "elsewhere_ns: kworkers, other tasks and between requests"}


def by_thread(records, ns):
    """The threads that did the work of some records, busiest first: pid, comm, records, time.  Grouped by one
    sort, not a pass per thread: forks churned through by the million make as many threads."""
    pids, first, inv, items = np.unique(records["pid"], return_index=True, return_inverse=True, return_counts=True)
    total = np.zeros(len(pids), dtype=np.int64)
    np.add.at(total, inv.reshape(-1), np.asarray(ns, dtype=np.int64))
    comms = records["comm"][first]
    out = [{"pid": int(pid), "comm": bytes(c).rstrip(b"\0").decode(errors="replace"), "items": int(k), "ns": int(t)}
           for pid, c, k, t in zip(pids, comms, items, total)]
    return sorted(out, key=lambda x: -x["ns"])


def work_unlinked(res, w):
    """Which work items fstrace's devices and requests did not cause: of the kinds queued from a block request's
    completion (results header work_kinds_from_completion), those that name no traced block request and woke no
    traced request (another device's, or queued before tracing).  Older results: none."""
    from_completion = res.header.get("work_kinds_from_completion") or []
    names = w.dtype.names
    if not from_completion or "io_dev" not in names or "seq" not in names:
        return np.zeros(len(w), dtype=bool)
    reqs = res["req"]
    wakers = np.unique(reqs["waker_seq"][reqs["waker_seq"] > 0]) if "waker_seq" in reqs.dtype.names else []
    # io_dev: the traced device whose completion queued it (io_complete_ns is 0 when its io record was not written)
    return np.isin(w["kind"], from_completion) & (w["io_dev"] == 0) & ~np.isin(w["seq"], wakers)


def async_work(res):
    """Known filesystem work items run by kworkers for what fstrace traced (tracepoint tier): count, time,
    queueing delay.  Work the traced devices and requests did not cause is in async_work_unlinked."""
    w = res.records.get("work")
    if w is None or not len(w):
        return {}
    w = w[~work_unlinked(res, w)]
    out = {}
    for k in np.unique(w["kind"]):
        g = w[w["kind"] == k]
        run_ns = (g["ts_end_ns"] - g["ts_start_ns"]).astype(np.int64)
        queued = g[g["ts_queue_ns"] > 0]
        delay_us = (queued["ts_start_ns"] - queued["ts_queue_ns"]) / 1e3
        workers = by_thread(g, run_ns)
        out[enum_name(res.header, "work_kind", k)] = {
            "items": int(len(g)), "ns": int(run_ns.sum()), "item_us": percentiles(run_ns / 1e3),
            "queue_delay_us": percentiles(delay_us), "workers": int(len(workers)),
            "by_worker": workers[:8],
            "tier": "tp_btf workqueue_execute_start/end (exact time of the work function)",
        }
    return out


def async_work_unlinked(res):
    """Per kind, the work items kworkers ran that no traced block request queued and that woke no traced request
    (work_unlinked): items and time, kept apart so another device's work is not taken for the workload's."""
    w = res.records.get("work")
    if w is None or not len(w):
        return {}
    w = w[work_unlinked(res, w)]
    return {enum_name(res.header, "work_kind", k): {
        "items": int((w["kind"] == k).sum()),
        "ns": int((w["ts_end_ns"] - w["ts_start_ns"])[w["kind"] == k].astype(np.int64).sum())}
        for k in np.unique(w["kind"])}


def overlap_counts(starts, ends, qs, qe):
    """How many of the intervals [starts, ends) overlap each query [qs, qe)."""
    s, e = np.sort(starts), np.sort(ends)
    return np.searchsorted(s, qe, side="left") - np.searchsorted(e, qs, side="right")


def times_hist(counts):
    """{times: how many units} of per-unit counts, keys as strings (a JSON object)."""
    v, n = np.unique(np.asarray(counts, dtype=np.int64), return_counts=True)
    return {str(int(a)): int(b) for a, b in zip(v, n)}


def records_in_requests(reqs, pids, ts):
    """Index into reqs of the request each (pid, ts) event fell in, -1 outside any request.  One sort of requests
    and events together (by pid, then time, a request before an event at its start): an event's request is the
    last request before it in that order, if it is the event's thread's and has not ended -- no pass per thread,
    which forks churned through by the million would make quadratic."""
    n, m = len(reqs), len(ts)
    out = np.full(m, -1, dtype=np.int64)
    if not n or not m:
        return out
    pid = np.concatenate([reqs["pid"].astype(np.int64), np.asarray(pids, dtype=np.int64)])
    at = np.concatenate([reqs["ts_start_ns"].astype(np.uint64), np.asarray(ts, dtype=np.uint64)])
    is_event = np.concatenate([np.zeros(n, dtype=np.int8), np.ones(m, dtype=np.int8)])
    order = np.lexsort((is_event, at, pid))
    # the position in that order of the latest request at or before each position (-1 before any)
    last_req = np.maximum.accumulate(np.where(order < n, np.arange(n + m), -1))
    events = order >= n
    ev, at_req = order[events] - n, last_req[events]
    ok = at_req >= 0
    ev, k = ev[ok], order[at_req[ok]]
    hit = (reqs["pid"][k].astype(np.int64) == np.asarray(pids, dtype=np.int64)[ev]) & \
        (np.asarray(ts, dtype=np.uint64)[ev] <= reqs["ts_end_ns"][k].astype(np.uint64))
    out[ev[hit]] = k[hit]
    return out


def erofs_events(res, reqs):
    """erofs's tracepoints: extents and pclusters the reads needed, whether each pcluster came from the device
    once, more than once or not at all (already in memory), and readahead/read_folio calls per request."""
    e = fs_records(res, "erofs")
    if not len(e):
        return None
    h = res.header
    ev = {name: int((e["event"] == int(v)).sum()) for v, name in h["enums"]["erofs_event"].items()}
    maps = e[e["event"] == enum_value(h, "erofs_event", "map")]
    enc = enum_value(h, "erofs_map_flag", "encoded")
    pcl = maps[((maps["map_flags"] & enc) != 0) & (maps["plen"] > 0)]
    out = {"events": ev, "extent_lookups": int(len(maps)), "pcluster_lookups": int(len(pcl))}
    if len(pcl):
        keys, first, lookups = np.unique(np.stack([pcl["dev"].astype(np.uint64), pcl["pa"]], axis=1), axis=0,
                                         return_index=True, return_counts=True)
        pa, plen, dev = pcl["pa"][first], pcl["plen"][first], pcl["dev"][first]
        io = res.records.get("io")
        reads = np.zeros(len(pa), dtype=np.int64)
        if io is not None and len(io):
            rd = io[res.io_ops(io) == res.io_op("read")]
            for d in np.unique(dev):
                rows = rd[rd["dev"] == d]
                m = dev == d
                if len(rows):
                    st = rows["sector"].astype(np.uint64) * np.uint64(512)
                    reads[m] = overlap_counts(st, st + rows["bytes"].astype(np.uint64), pa[m], pa[m] + plen[m])
        out.update({
            "pclusters": int(len(pa)), "pcluster_bytes": int(plen.astype(np.uint64).sum()),
            "pclusters_read_once": int((reads == 1).sum()), "pclusters_reread": int((reads > 1).sum()),
            "pclusters_without_device_read": int((reads == 0).sum()),
            # per pcluster: how many times the reads looked it up (each lookup decompresses it, up to the length
            # mapped) and how many block requests read it; {times: pclusters}
            "lookups_per_pcluster": times_hist(lookups), "device_reads_per_pcluster": times_hist(reads),
            "mapped_bytes": int(pcl["llen"].astype(np.uint64).sum()),
            "plen_hist_log2_bytes": log2_slots(plen, res.schema.hist_slots),
        })
    idx = records_in_requests(reqs, e["pid"], e["ts_ns"])
    per = {}
    for v, name in h["enums"]["erofs_event"].items():
        sel = idx[(e["event"] == int(v)) & (idx >= 0)]
        counts = np.bincount(sel, minlength=len(reqs)) if len(reqs) else np.zeros(0, dtype=np.int64)
        per[name] = {"requests_with": int((counts > 0).sum()), "per_request": percentiles(counts[counts > 0])
                     if (counts > 0).any() else None}
    out["per_request"] = per
    out["outside_requests"] = int((idx < 0).sum())
    out["note"] = ("pclusters: distinct compressed extents the reads mapped; without device read: its compressed "
                   "data was already in memory (erofs's managed cache, or pages of an earlier read); re-read: read "
                   "from the device more than once in this run. Block requests the kernel did not show fstrace "
                   "(unseen_block_requests) count as no device read.")
    return out


def covered_bytes(starts, ends, qs, qe):
    """Bytes of each query [qs, qe) that lie inside the union of the intervals [starts, ends)."""
    qs, qe = np.asarray(qs, dtype=np.int64), np.asarray(qe, dtype=np.int64)
    if not len(starts):
        return np.zeros(len(qs), dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[order].astype(np.int64), np.asarray(ends)[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    first = np.concatenate([[True], s[1:] > reach[:-1]])  # each starts a disjoint piece of the union
    ms, me = s[first], np.maximum.reduceat(e, np.nonzero(first)[0])
    before = np.concatenate([[0], np.cumsum(me - ms)])  # the union's bytes in the pieces before each

    def upto(x):  # the union's bytes below x
        k = np.searchsorted(ms, x, side="right")
        j = np.maximum(k - 1, 0)
        return np.where(k > 0, before[j] + np.clip(x - ms[j], 0, me[j] - ms[j]), 0)
    return upto(qe) - upto(qs)


def figure_probes(res, name):
    """The probes of one figure (records.h FST_FIGURES id) and whether any of them is attached."""
    probes = [p for p in res.header.get("probes", []) if p["figure"] == res.schema.figure(name)]
    return probes, any(p["tier"] != "unavailable" for p in probes)


def unit_places(res):
    """Where the units the filesystem looked up for the workload lie on its device: {"dev", "start", "end"} byte
    arrays, what they are and what they leave out; or {"why"} when this run does not know them."""
    fs = res.config.get("fs")
    h = res.header
    if fs in ("btrfs", "ext4", "xfs"):
        return {"why": "%s's blocks are not looked up through a traced probe (btrfs maps its extents through its "
                       "chunk tree, which no probe records)" % fs if fs == "btrfs" else
                       "%s's block lookups are not traced (no per-block tracepoint)" % fs}
    if fs == "erofs" or (fs is None and len(fs_records(res, "erofs"))):
        probes, attached = figure_probes(res, "erofs_extents")
        if not attached:
            return {"why": "erofs_map_blocks_exit was not attached: %s" % "; ".join(p["why"] for p in probes)}
        e = fs_records(res, "erofs")
        mapped, meta = enum_value(h, "erofs_map_flag", "mapped"), enum_value(h, "erofs_map_flag", "meta")
        # inline data lies in a metadata block among inodes: that block is metadata, counted apart
        m = e[(e["event"] == enum_value(h, "erofs_event", "map")) & ((e["map_flags"] & mapped) != 0) &
              ((e["map_flags"] & meta) == 0) & (e["plen"] > 0)] if len(e) else e
        return {"dev": m["dev"] if len(m) else np.zeros(0, dtype=np.uint32),
                "start": m["pa"] if len(m) else np.zeros(0, dtype=np.uint64),
                "end": m["pa"] + m["plen"] if len(m) else np.zeros(0, dtype=np.uint64),
                "units": "the extents and pclusters in data blocks that erofs mapped for the workload's reads "
                         "(erofs_map_blocks_exit: [m_pa, m_pa + m_plen))",
                "not_units": "erofs metadata (superblock, inodes with their inline data, compression indexes) is "
                             "read through the block device's cache: requests that carry no mapped data byte are "
                             "counted apart (no_unit_bytes), not as unneeded"}
    if fs == "squashfs" or (fs is None and len(fs_records(res, "fs_read"))):
        p = probe_tier(res, "squashfs_read_data")
        if not p or p["tier"] == "unavailable":
            return {"why": "squashfs's block reads (squashfs_read_data) need fentry or kprobes: %s"
                           % ((p or {}).get("why") or "no probe")}
        if "fs_read" not in h["records"]:
            return {"why": "this results file has no squashfs block reads (its collector did not record them)"}
        r = fs_records(res, "fs_read")
        r = r[r["ret"] >= 0] if len(r) else r
        return {"dev": r["dev"] if len(r) else np.zeros(0, dtype=np.uint32),
                "start": r["pos"] if len(r) else np.zeros(0, dtype=np.uint64),
                "end": r["pos"] + r["bytes"] if len(r) else np.zeros(0, dtype=np.uint64),
                "units": "the blocks squashfs read for the workload (squashfs_read_data: data, fragment and "
                         "metadata blocks, each [index, index + its length on the device), a metadata block's "
                         "2-byte length header included)",
                "not_units": "squashfs reads every block through squashfs_read_data: a request that carries no "
                             "unit's byte was not read by squashfs for the workload"}
    return {"why": "no filesystem whose unit lookups fstrace records (erofs; squashfs on the fentry/kprobe tiers)"}


def device_unneeded(res):
    """Bytes the image's device read that lie outside every unit the filesystem looked up for the
    workload (unit_places), out of every byte it read: the bytes of neighbouring units that partial device
    blocks, readahead or merged requests brought along.  Block requests that carry no looked-up unit's byte at
    all are counted apart (no_unit_bytes): on erofs they are metadata read without a mapping."""
    places = unit_places(res)
    if "why" in places:
        return {"available": False, "why": places["why"]}
    io = res.records.get("io")
    # the image's device: the one its superblock is on (a loop device, or the disk itself)
    devs = fs_devices(res) or np.unique(places["dev"]).tolist()
    if io is None or not devs:
        return {"available": False, "why": "no block requests recorded on the filesystem's device"}
    rd = io[(res.io_ops(io) == res.io_op("read")) & np.isin(io["dev"], devs)]
    levels = {d["dev"]: device_level(d) for d in res.header.get("devices", [])}
    total = unneeded = no_unit = no_unit_requests = 0
    for d in np.unique(rd["dev"]):
        rows = rd[rd["dev"] == d]
        # on a disk the whole system reads: the workload's reads there, as the amplification counts them (a
        # device named alone, -d without a level, is kept whole, as files from before levels were read)
        if levels.get(int(d)) == "disk":
            rows = of_workload(res, rows, "disk")
        m = places["dev"] == d
        qs = rows["sector"].astype(np.int64) * 512
        qe = qs + rows["bytes"].astype(np.int64)
        inside = covered_bytes(places["start"][m], places["end"][m], qs, qe)
        outside = (qe - qs) - inside
        total += int((qe - qs).sum())
        unneeded += int(outside[inside > 0].sum())
        no_unit += int(outside[inside == 0].sum())
        no_unit_requests += int((inside == 0).sum())
    if not total:
        return {"available": False, "why": "no reads of the workload on the filesystem's device"}
    return {"available": True, "bytes": total, "unneeded_bytes": unneeded, "no_unit_bytes": no_unit,
            "no_unit_requests": no_unit_requests, "units_looked_up": int(len(places["start"])),
            "needed": places["units"], "apart": places["not_units"],
            "method": "every read block request of the workload on the filesystem's device (on a disk, the traced "
                      "tasks'), less its bytes inside the union of the units looked up in the run, over the requests "
                      "that carry a unit's byte"}


def fs_caches(res, reqs):
    """Lookups in the filesystems' own caches (squashfs metadata, fragment, data): hits, misses, blocks missed
    more than once, lookup time, misses per request; or why they could not be measured."""
    probes = [probe_tier(res, n) for n in ("squashfs_cache_get", "squashfs_read_data")]
    if not all(probes):
        return {"available": False, "why": "this collector has no filesystem cache probes"}
    down = [p for p in probes if p["tier"] == "unavailable"]
    if down:
        # both are needed: a lookup is a miss only if the read under it is seen
        return {"available": False, "why": "; ".join("%s: %s" % (p["probe"], p["why"]) for p in down)}
    h = res.header
    c = fs_records(res, "fs_cache")
    groups = []
    if len(c):
        for dev, kind in sorted({(int(a), int(b)) for a, b in zip(c["dev"], c["cache"])}):
            g = c[(c["dev"] == dev) & (c["cache"] == kind)]
            dur = (g["ts_end_ns"] - g["ts_start_ns"]).astype(np.int64)
            miss = g["missed"] != 0
            blocks, times = np.unique(g["block"][miss], return_counts=True)
            groups.append({
                "dev": dev_name(dev, res.minor_bits), "cache": enum_name(h, "fs_cache", kind), "lookups": int(len(g)),
                "hits": int((~miss).sum()), "misses": int(miss.sum()),
                "hit_ratio": float((~miss).mean()),
                "blocks_missed": int(len(blocks)), "blocks_missed_again": int((times > 1).sum()),
                "miss_bytes": int(g["bytes"][miss & (g["bytes"] > 0)].astype(np.int64).sum()),
                "errors": int((g["bytes"] < 0).sum()),
                "hit_ns": int(dur[~miss].sum()), "miss_ns": int(dur[miss].sum()),
                "hit_us": percentiles(dur[~miss] / 1e3) if (~miss).any() else None,
                "miss_us": percentiles(dur[miss] / 1e3) if miss.any() else None,
                "tiers": sorted({enum_name(h, "tier", t) for t in np.unique(g["tier"])}),
            })
    out = {"available": True, "groups": groups,
           "probes": {p["probe"]: p["tier"] for p in probes},
           "note": "miss: the block was read and decompressed into the cache during the lookup (time includes "
                   "both); a hit that slept until another reader filled the entry counts as a slow hit; "
                   "blocks_missed_again: evicted and read again in this run"}
    if len(c):
        idx = records_in_requests(reqs, c["pid"], c["ts_start_ns"])
        missed = idx[(c["missed"] != 0) & (idx >= 0)]
        counts = np.bincount(missed, minlength=len(reqs)) if len(reqs) else np.zeros(0, dtype=np.int64)
        out["requests_with_misses"] = int((counts > 0).sum())
        out["misses_per_request"] = percentiles(counts[counts > 0]) if (counts > 0).any() else None
        out["outside_requests"] = int((idx < 0).sum())
    return out


def write_compression(res):
    """Compression on write (btrfs): chunks, sizes, ratio, time, and the threads that ran it; or why it could
    not be measured.  None when the collector has no such probe."""
    probes = [p for p in res.header.get("probes", []) if p["figure"] == res.schema.figure("btrfs_compress_write")]
    if not probes:
        return None
    attached = [p for p in probes if p["tier"] != "unavailable"]
    if not attached:
        return {"available": False, "why": "; ".join(sorted({"%s: %s" % (p["probe"], p["why"]) for p in probes}))}
    h = res.header
    c = fs_records(res, "compress")
    groups = []
    if len(c):
        for fs, alg in sorted({(int(a), int(b)) for a, b in zip(c["fs"], c["alg"])}):
            g = c[(c["fs"] == fs) & (c["alg"] == alg)]
            dur = (g["ts_end_ns"] - g["ts_start_ns"]).astype(np.int64)
            ok = g["ret"] == 0
            in_ok = int(g["in_bytes"][ok].astype(np.int64).sum())
            out_ok = int(g["out_bytes"][ok].astype(np.int64).sum())
            groups.append({
                "fs": enum_name(h, "fs", fs), "alg": enum_name(h, "alg", alg), "chunks": int(len(g)),
                "compressed": int(ok.sum()), "not_compressed": int((~ok).sum()),
                "in_bytes": in_ok, "out_bytes": out_ok, "ratio": out_ok / in_ok if in_ok else None,
                "ns": int(dur.sum()), "chunk_us": percentiles(dur / 1e3),
                "chunk_hist_log2_us": log2_slots(dur // 1000, res.schema.hist_slots),
                "mb_per_s": in_ok / (dur[ok].sum() / 1e3) if dur[ok].sum() else None,
                "contexts": by_context(h, g, dur, "chunks"), "by_thread": by_thread(g, dur)[:8],
                "tiers": sorted({enum_name(h, "tier", t) for t in np.unique(g["tier"])}),
            })
    return {"available": True, "groups": groups, "probes": {p["probe"]: p["tier"] for p in attached},
            "note": "one chunk = one call of the compressor (up to 128 KiB of one file); not_compressed: the "
                    "compressor gave up (data did not shrink) and the chunk was written as it was; ratio and "
                    "MB/s over compressed chunks"}


def delay_accounting(res):
    """Per traced thread that exited: the kernel's blkio delay next to fstrace's I/O wait in its requests.  The
    requests' wait is summed per thread once (grouped by a sort) and looked up per task record: a pass over the
    requests per task record took minutes after fork churn's millions of task records."""
    t = res.records.get("task")
    if t is None or not len(t):
        return None
    req = res["req"]
    waited = (req["io_wait_ns"].astype(np.int64) + req["worker_ns"].astype(np.int64) +
              req["worker_wait_ns"].astype(np.int64))
    # a column, not the rows: requests are wide records
    req_pids, inv = np.unique(req["pid"], return_inverse=True)
    waited_by_pid = np.zeros(len(req_pids) + 1, dtype=np.int64)  # the last: threads without requests
    np.add.at(waited_by_pid, inv.reshape(-1), waited)
    ours = waited_by_pid[np.where(np.isin(t["pid"], req_pids), np.searchsorted(req_pids, t["pid"]), len(req_pids))]
    keep = np.nonzero((t["blkio_count"] != 0) | (ours != 0))[0]
    threads = [{"pid": int(x["pid"]), "comm": bytes(x["comm"]).rstrip(b"\0").decode(errors="replace"),
                "blkio_delay_ns": int(x["blkio_delay_ns"]), "blkio_count": int(x["blkio_count"]),
                "fstrace_io_wait_ns": int(o)} for x, o in zip(t[keep], ours[keep])]
    return {"threads": threads,
            "note": "blkio delay: the kernel's time in io_schedule() over the thread's life (task delay "
                    "accounting); fstrace: I/O wait (+ kworker time) inside its requests"}


def traced_fs_types(cfg):
    """The types of the filesystems a run traced (its image's; attach's mounts'), or None: all of them."""
    return cfg.get("fs_types") or ([cfg["fs"]] if cfg.get("fs") else None)


def others_figure(res, p):
    """A probe whose figure belongs to a filesystem this run did not trace (the schema's figure_fs): not this
    run's to miss."""
    traced, fs = traced_fs_types(res.config), res.schema.figure_fs.get(p["figure"])
    return traced is not None and fs is not None and fs not in traced


def unavailable(res):
    """Figures this run could not measure, with the reason; printed instead of zeros.  Only the traced
    filesystems' own figures (and those of any filesystem): an ext4 run does not miss squashfs's."""
    out = []
    all_dec = decompression_probes(res)
    dec = [p for p in all_dec if not others_figure(res, p)]
    # a figure some probe measured is available, even if its other-kernel twin (same figure id) is not
    measured = {p["figure"] for p in res.header.get("probes", []) if p["tier"] != "unavailable"}
    seen = {}
    for p in res.header.get("probes", []):
        if unused_boundary(res.header, p) or others_figure(res, p) or p in all_dec:
            continue
        if p["tier"] == "unavailable" and p["figure"] not in measured:
            why = p["why"] or "probe could not attach"
            if p["figure"] in seen:  # twins for other kernels: one line, each twin's reason
                seen[p["figure"]]["why"] += "; %s: %s" % (p["probe"], why)
                continue
            seen[p["figure"]] = {"figure": p["measures"], "why": why}  # the figure in words, for the report
            out.append(seen[p["figure"]])
    if dec and all(p["tier"] == "unavailable" for p in dec):
        order = {name: int(v) for v, name in res.header.get("enums", {}).get("fs", {}).items()}
        fss = sorted({res.schema.figure_fs.get(p["figure"]) for p in dec} - {None}, key=lambda f: order.get(f, 0))
        out.append({"figure": "decompression time (%s)" % (", ".join(fss) if fss else "erofs, squashfs, btrfs"),
                    "why": sorted({p["why"] for p in dec})[0]})
    # a loop device's backing-disk I/O charged to its reader: missed only where a loop device or the disk behind
    # one was traced
    loops = [d for d in res.header.get("devices", []) if device_level(d) in ("loop", "backing")]
    if not res.header.get("loop_charging") and loops:
        out.append({"figure": "backing-device I/O charged to the reader",
                    "why": "loop work function addresses not readable from /proc/kallsyms"})
    return out


# two-sided 95 % Student t quantiles by degrees of freedom (1-30); beyond, the normal's
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t95(df):
    return _T95[df - 1] if df <= len(_T95) else 1.96


def window_weights(length_ns, window_ns, grace_ns):
    """How many requests each seen one stands for, beyond 1/fraction (user/window.c says why): a request no
    longer than the grace is seen whenever it starts inside a window; a longer one only if it starts early
    enough to end before sys_exit is detached, W + G - L of W."""
    length = np.asarray(length_ns, dtype=np.float64)
    room = np.maximum(window_ns + grace_ns - length, 1.0)
    return np.where(length <= grace_ns, 1.0, window_ns / np.minimum(room, window_ns))


def window_auxiliary(rw, rows, kind):
    """The windows' auxiliary for requests of kind: the traced processes' own read (write) syscall counts in each
    window and over the whole traced time, as the collector took them from task I/O accounting, and what they
    are; (None, None, None) where it has none (another kind, an older file, or no such counts here).  A window
    whose count a failed look left unknown has None."""
    field = {"read": "read_calls", "write": "write_calls"}.get(kind)
    io = rw.get("io_calls") or {}
    if not field or "reads_total" not in io or any(field not in r or "open_edge_ns" not in r for r in rows):
        return None, None, None
    total = io["reads_total"] if kind == "read" else io["writes_total"]
    return [r[field] for r in rows], total, io["source"]


def request_windows(res, kind="read"):
    """--budget: the requests of kind the windows saw, weighted up to the whole traced time, with a 95 %
    interval; None-free figures only where the collector windowed its hooks."""
    rw = res.header.get("request_windows")
    if not rw:
        return {"active": False, "why": "this collector always attaches its request hooks"}
    if not rw.get("active"):
        return {"active": False, "why": rw.get("why", "")}
    rows = [dict(zip(rw["window_fields"], row)) for row in rw["windows"]]
    span = rw["t_end_ns"] - rw["t_start_ns"]
    kv = enum_value(res.header, "req_kind", kind)
    recorded = fs_requests(res, kinds=(kind,))
    start = recorded["ts_start_ns"].astype(np.int64)
    length = recorded["ts_end_ns"].astype(np.int64) - start
    weight = window_weights(length, rw["window_ns"], rw["grace_ns"])
    seen, weighted, lengths, inside, late = [], [], [], 0, 0
    for w in rows:
        m = (start >= w["open_ns"]) & (start < w["enter_closed_ns"])
        inside += int(m.sum())
        late += int((recorded["ts_end_ns"][m].astype(np.int64) > w["exit_closed_ns"]).sum())
        counted = w["counted_by_kind"][kv] if kv < len(w["counted_by_kind"]) else 0
        seen.append(counted + int(m.sum()))
        weighted.append(counted + float(weight[m].sum()))
        lengths.append(w["enter_closed_ns"] - w["open_ns"])
    out = {"active": True, "budget_pct": rw["budget_pct"], "duty_fixed": rw.get("duty_fixed"),
           "windows": rw["windows_total"], "window_ns": rw["window_ns"], "grace_ns": rw["grace_ns"],
           "fraction": (rw["in_windows_ns"] / span) if span > 0 else None,
           "slow_path_ns_per_syscall": rw["slow_path_ns_per_syscall"],
           "cost_share_while_attached": rw["cost_share_while_attached"],
           # the collector's own CPU time per window, part of the cost the windows were sized with (older files: none)
           "collector_cpu_per_window_ns": rw.get("window_cpu_ns"),
           # how the collector measured it, and what the budget does not bound (older files: not recorded)
           "cost_method": rw.get("cost_method"),
           "always_on_share_in_windows": rw.get("always_on_share_in_windows"),
           # records outside every window, or ending after their window's sys_exit was gone: none by design
           "recorded_outside_windows": int(len(start) - inside), "recorded_after_their_window": late,
           "kind": kind, "seen": int(sum(seen))}
    if rw["windows_kept"] < rw["windows_total"]:
        out["why"] = "only the first %d windows are kept: no estimate" % rw["windows_kept"]
        return out
    k = len(rows)
    total_len = float(sum(lengths))
    if not k or not total_len or span <= 0:
        out["why"] = "no window opened while tracing"
        return out
    aux, aux_total, aux_what = window_auxiliary(rw, rows, kind)
    if aux_what:
        # by the calls, over the windows whose calls are known: a look at the counts that failed at a window's
        # edge left its own unknown (what the look missed, a later one took: the total is whole)
        known = [a is not None for a in aux]
        out["windows_without_calls"] = known.count(False)
        if known.count(True) < 2:
            aux = aux_what = None
        else:
            rows, weighted, lengths, aux = ([x for x, keep in zip(v, known) if keep]
                                            for v in (rows, weighted, lengths, aux))
            k, total_len = len(rows), float(sum(lengths))
    if aux is None:
        aux, aux_total = lengths, span
    total_aux = float(sum(aux))
    out["auxiliary"] = aux_what or "window time"
    if aux_what and not total_aux:
        out["why"] = "the traced processes made no %s syscall in any window" % kind
        return out
    # a ratio estimator over the windows (each a random sample of the traced time): requests per unit of the
    # auxiliary in the windows, times its total; its error from the windows' spread, finite-population corrected
    rate = sum(weighted) / total_aux
    est = rate * aux_total
    out["estimate"] = est
    out["method"] = ("requests seen in %d random windows (%.1f %% of the time), weighted by window_weights for "
                     "requests longer than the grace, scaled by %s; 95 %% interval from the windows' spread "
                     "(ratio estimator, Student t)" % (
                         k, 100.0 * total_len / span,
                         "the time the windows covered" if not aux_what else
                         "the traced processes' own %s syscalls in the windows against all of theirs (%s: tracing "
                         "slows a window's requests, and these slow with them)" % (kind, aux_what)))
    if aux_what and out["windows_without_calls"]:
        out["method"] += ("; %d more windows left out: a look at the counts failed at an edge of each, leaving "
                          "its calls unknown" % out["windows_without_calls"])
    if k < 2:
        out["why"] = "one window: no interval"
        return out
    mean_aux = total_aux / k
    resid = [n - rate * a for n, a in zip(weighted, aux)]
    var_rate = sum(r * r for r in resid) / (k - 1) / k / mean_aux ** 2
    fpc = max(0.0, 1.0 - total_aux / aux_total) if aux_total else 0.0
    half = t95(k - 1) * math.sqrt(var_rate * fpc) * aux_total
    if aux_what:
        # the counts are looked at just after sys_enter's attach and detach: calls made between an edge and the
        # look may be on its other side; at most the window's call rate times that time, at both edges
        edge = sum(a / max(r["enter_closed_ns"] - r["open_ns"], 1) * (r["open_edge_ns"] + r["close_edge_ns"])
                   for a, r in zip(aux, rows))
        out["edge_share"] = edge / total_aux
        half += est * out["edge_share"]
    out["interval95"] = [max(est - half, float(out["seen"])), est + half]
    return out


def failed_requests(res):
    """Requests on the traced filesystems that returned an error: {"read errno 117 (EUCLEAN)": count}."""
    r = fs_requests(res, kinds=("read", "getdents", "open", "stat"))
    r = r[r["ret"] < 0]
    out = {}
    for kind, ret in zip(r["kind"], r["ret"]):
        e = -int(ret)
        key = "%s errno %d (%s)" % (enum_name(res.header, "req_kind", kind), e, errnos.errorcode.get(e, "?"))
        out[key] = out.get(key, 0) + 1
    return out


def summarize(res, ground_truth=None):
    h = res.header
    cfg = res.config
    wl = h.get("workload", {})
    wall_ns = (wl.get("end_ns") or h["time"]["end_ns"]) - (wl.get("start_ns") or h["time"]["start_ns"])
    reads = fs_requests(res, kinds=("read",))
    reads_cnt = counted_requests(res, kinds=("read",))
    meta_kinds = ("open", "getdents")
    meta = fs_requests(res, kinds=meta_kinds)
    if h.get("stat_calls_placed"):
        # path-based stat calls carry the device the kernel wrote into the caller's buffer: on the traced
        # filesystems like any request
        stats = fs_requests(res, kinds=("stat",))
        stats_cnt = counted_requests(res, kinds=("stat",))
        stat_note = "stat calls on the traced filesystems (a path-based one placed by the device in its result)"
        all_kinds = ("read", "write", "stat") + meta_kinds
    else:  # older results: a path-based stat call had no device
        stat_kind = enum_value(h, "req_kind", "stat")
        stats = res["req"][res["req"]["kind"] == stat_kind]
        stats_cnt = counted_requests(res, kinds=("stat",), any_fs=True)
        stat_note = "stat is path-based: counted for all paths the workload stat'ed"
        all_kinds = ("read", "write") + meta_kinds
    all_fs = fs_requests(res, kinds=all_kinds)
    sch = res.schema
    rs = request_stats(reads, reads_cnt, sch)
    # the parts as records.h had them when the file was written, for readers of the summary alone (tables, plots)
    attribution_all = dict(attribution(all_fs, counted_requests(res, kinds=all_kinds), sch), kinds=list(all_kinds),
                           part_info=sch.part_info())
    devices = device_stats(res)
    s = {
        "schema_version": SCHEMA_VERSION,
        "run": {
            "mode": cfg.get("mode", "run"), "mounts": cfg.get("mounts"),
            "fs": cfg.get("fs"), "label": cfg.get("label"), "workload": cfg.get("workload"),
            "dataset_id": cfg.get("dataset_id"), "cache": cfg.get("cache"), "loop_direct_io": cfg.get("loop_direct_io"),
            "image_bytes": cfg.get("image", {}).get("bytes"), "kernel": h["kernel"]["release"],
            "mkfs_argv": cfg.get("image", {}).get("mkfs_argv"),  # the exact command that built the image
            "iops_cap": cfg.get("iops_cap"), "storage": cfg.get("storage"),
            "options": cfg.get("options"),  # the image's options (compress "none": nothing to decompress)
            "collector": h["collector"], "tools": cfg.get("tools"), "workload_exit_status": wl.get("exit_status"),
            "workload_signal": wl.get("signal") or None,
            # what evicts page cache here with no memory pressure (cli/devices.proactive_reclaim); None: not looked
            "proactive_reclaim": cfg.get("proactive_reclaim"),
        },
        "wall_s": wall_ns / 1e9,
        "reads": rs,
        "request_windows": request_windows(res),
        "read_latency_linear_us": linear_slots(np.concatenate([
            (reads["ts_end_ns"] - reads["ts_start_ns"]).astype(np.int64) / 1e3, counted_latencies_us(reads_cnt, sch)])),
        "throughput_bytes_per_s": rs["bytes"] / (wall_ns / 1e9) if wall_ns > 0 else None,
        "writes": request_stats(fs_requests(res, kinds=("write",)), counted_requests(res, kinds=("write",)), sch),
        "sync": dict(request_stats(res["req"][res["req"]["kind"] == enum_value(h, "req_kind", "sync")],
                                   counted_requests(res, kinds=("sync",), any_fs=True), sch),
                     note="sync is counted for every fsync/fdatasync/sync/syncfs of the workload"),
        "metadata": {"open_getdents": request_stats(meta, counted_requests(res, kinds=meta_kinds), sch),
                     "stat": dict(request_stats(stats, stats_cnt, sch), attribution=attribution(stats, stats_cnt, sch),
                                  note=stat_note)},
        "attribution": attribution_all,
        "request_records": dict(h.get("request_records") or {"mode": "all"},
                                note="slow: requests that slept, did block I/O, missed the page cache, failed or "
                                     "took record_over_ns are recorded; the rest are counted in the kernel"),
        "task_state": h.get("task_state"),
        "tracer": tracer_cost(res, attribution_all),
        "decompression": decompression(res, all_fs),
        "lock_wait": lock_wait(res, all_fs),
        "erofs": erofs_events(res, all_fs),
        "device_unneeded": device_unneeded(res),
        "fs_caches": fs_caches(res, all_fs),
        "write_compression": write_compression(res),
        "readahead": readahead(res, reads),
        "async_work": async_work(res),
        "async_work_unlinked": async_work_unlinked(res),
        "offcpu": sampling.offcpu_summary(h),
        "delay_accounting": delay_accounting(res),
        "devices": devices,
        "tiers": tiers(res),
        "request_bounds": request_bounds(h),
        "unavailable": unavailable(res),
        "drops": h.get("drops"),
        "losses": h.get("losses"),  # kernel-side tables that were full (records.h FST_LOSSES); older files: None
        "expired_in_flight": h.get("expired_in_flight"),
        "unseen_block_requests": {name: d["unseen_requests"] for name, d in devices.items()
                                  if d.get("unseen_requests")},
        # an excess can hide as many lost completions: "none unseen" is not claimed for these devices
        "traced_beyond_diskstats": {name: d["traced_beyond_diskstats"] for name, d in devices.items()
                                    if d.get("traced_beyond_diskstats")},
        "bad_records": h.get("bad_records", 0),
        "ground_truth": ground_truth or {},
    }
    s["amplification"] = amplification.figures(s, sch)
    return s


def summarize_run(res, ground_truth=None, baseline=None):
    """summary.json's document of a run, as `run` writes it and `report` shows it: summarize()'s figures, the
    requests that failed, and the untraced baseline (analysis/baseline.py compare) where one was measured, or why
    none was."""
    s = summarize(res, ground_truth)
    s["failed_requests"] = failed_requests(res)
    if baseline is not None:  # the untraced run, kept in summary.json: the results file has no trace of it
        s["baseline"] = compare(baseline, s) if "wall_s" in baseline else baseline
    return s
