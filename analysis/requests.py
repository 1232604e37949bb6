"""The traced workload's requests: recorded ones on the traced filesystems, the ones the kernel counted instead
(page-cache hits), their counts, bytes, latencies, failures and where their time went (attribution).
"""
import errno as errnos
import numpy as np

from analysis import results
from analysis.hist import log2_slots, loglin_bounds, merged_percentiles, percentiles
from analysis.selection import _kind_values, enum_name, fs_devices


def fs_requests(res, kinds=("read", "getdents", "open")):
    """Recorded requests of the traced workload on the traced filesystem (file known: sdev matches).

    Read-only, and kept per kinds in res.request_selections: a selection copies every chosen record (about 200
    bytes each), and the summary and report ask for the same ones more than once."""
    memo = res.request_selections
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
