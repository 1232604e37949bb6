"""The filesystems' own caches and lookups: squashfs's metadata, fragment and data caches, erofs's extents and
pclusters, and the readahead windows the kernel sized.
"""
import numpy as np

from analysis.hist import log2_slots, percentiles
from analysis.intervals import overlap_counts, records_in_requests
from analysis.selection import (dev_name, enum_name, enum_value, figure_probes, fs_devices, fs_records, probe_tier,
                                times_hist, traced_fs_types)
from analysis.windows import in_windows, probe_windows, request_windows, sampled_count


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


def erofs_events(res, reqs):
    """erofs's tracepoints: extents and pclusters the reads needed, whether each pcluster came from the device
    once, more than once or not at all (already in memory), and readahead/read_folio calls per request.  Under
    --budget, where the erofs probes were attached only in the windows, the records are the windows' sample:
    the event counts are estimates over the whole traced time (erofs_windowed), the rest the sample's."""
    e = fs_records(res, "erofs")
    if not len(e):
        return None
    h = res.header
    ev = {name: int((e["event"] == int(v)).sum()) for v, name in h["enums"]["erofs_event"].items()}
    maps = e[e["event"] == enum_value(h, "erofs_event", "map")]
    enc = enum_value(h, "erofs_map_flag", "encoded")
    pcl = maps[((maps["map_flags"] & enc) != 0) & (maps["plen"] > 0)]
    out = {"events": ev, "extent_lookups": int(len(maps)), "pcluster_lookups": int(len(pcl)),
           "basis": "every event"}
    if len(pcl):
        out.update(pcluster_figures(res, pcl))
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
    rw, rows = erofs_windows(res)
    if rw is not None:
        out.update(erofs_windowed(res, rw, rows, e, maps, pcl))
    return out


def pcluster_counts(pcl, rd):
    """The distinct pclusters of the map records pcl, and how often each was looked up and how many of the read
    block requests rd read it: (pa, plen, lookups, reads)."""
    if not len(pcl):
        return (np.zeros(0, dtype=np.uint64),) * 2 + (np.zeros(0, dtype=np.int64),) * 2
    keys, first, lookups = np.unique(np.stack([pcl["dev"].astype(np.uint64), pcl["pa"]], axis=1), axis=0,
                                     return_index=True, return_counts=True)
    pa, plen, dev = pcl["pa"][first], pcl["plen"][first], pcl["dev"][first]
    reads = np.zeros(len(pa), dtype=np.int64)
    if rd is not None and len(rd):
        for d in np.unique(dev):
            rows = rd[rd["dev"] == d]
            m = dev == d
            if len(rows):
                st = rows["sector"].astype(np.uint64) * np.uint64(512)
                reads[m] = overlap_counts(st, st + rows["bytes"].astype(np.uint64), pa[m], pa[m] + plen[m])
    return pa, plen, lookups, reads


def pairing_windows(res):
    """--budget's window rows where the block or the erofs probes were attached only in them: a figure pairing two
    events (a lookup and the block read of its pcluster, a read and its re-read) pairs them only inside one
    window's span (window_spans), for the hooks of one of them were off between windows; None where both were
    attached all the time."""
    rw, rows = probe_windows(res, "block_rq_complete")
    return rows if rw is not None else erofs_windows(res)[1]


def window_spans(rows, ts):
    """Per window, which of the times ts fall in its span, from its open to sys_exit's detach."""
    ts = np.asarray(ts, dtype=np.int64)
    return [(ts >= w["open_ns"]) & (ts <= w["exit_closed_ns"]) for w in rows]


# what a paired figure is where its events were paired only inside one window (pairing_windows)
PAIRED_IN_WINDOWS = ("paired only inside one --budget window (the block or erofs probes were attached only in the "
                     "windows): a pcluster is counted once per window it was looked up in, its block reads those "
                     "completed in the same window; one looked up near a window's end whose read completed after "
                     "the hooks went off counts as without device read, and a read again in another window is not a "
                     "re-read: the windows' sample's, biased, not the run's")


def pcluster_figures(res, pcl):
    """The distinct pclusters of the map records pcl: their bytes, how often each was looked up, and how many
    read block requests read each (none: already in memory).  Under --budget's windows (pairing_windows), per
    window: its lookups against the block reads completed in it (PAIRED_IN_WINDOWS)."""
    io = res.records.get("io")
    rd = io[res.io_ops(io) == res.io_op("read")] if io is not None and len(io) else None
    rows = pairing_windows(res)
    if rows is None:
        pa, plen, lookups, reads = pcluster_counts(pcl, rd)
    else:
        lk = window_spans(rows, pcl["ts_ns"])
        rk = window_spans(rows, rd["ts_complete_ns"]) if rd is not None else [None] * len(rows)
        per = [pcluster_counts(pcl[m], rd[r] if rd is not None else None) for m, r in zip(lk, rk)]
        pa, plen, lookups, reads = (np.concatenate([p[i] for p in per]) if per else np.zeros(0, dtype=np.int64)
                                    for i in range(4))
    return {
        "pclusters_basis": "every event" if rows is None else "paired in one window",
        **({} if rows is None else {"pclusters_method": PAIRED_IN_WINDOWS}),
        "pclusters": int(len(pa)), "pcluster_bytes": int(plen.astype(np.uint64).sum()),
        "pclusters_read_once": int((reads == 1).sum()), "pclusters_reread": int((reads > 1).sum()),
        "pclusters_without_device_read": int((reads == 0).sum()),
        # per pcluster: how many times the reads looked it up (each lookup decompresses it, up to the length
        # mapped) and how many block requests read it; {times: pclusters}
        "lookups_per_pcluster": times_hist(lookups), "device_reads_per_pcluster": times_hist(reads),
        "mapped_bytes": int(pcl["llen"].astype(np.uint64).sum()),
        "plen_hist_log2_bytes": log2_slots(plen, res.schema.hist_slots),
    }


# the figures of the erofs probes (records.h FST_FIGURES): extent maps, readahead and read_folio calls
EROFS_FIGURES = ("erofs_extents", "erofs_readahead", "erofs_read_folio")


def erofs_windows(res):
    """--budget's windows and their rows where the erofs probes were attached only in them; (None, None) where
    they were attached all the time."""
    for fig in EROFS_FIGURES:
        for p in figure_probes(res, fig)[0]:
            rw, rows = probe_windows(res, p["probe"])
            if rw is not None:
                return rw, rows
    return None, None


def erofs_windowed(res, rw, rows, e, maps, pcl):
    """The erofs figures of windowed probes: the counts (events, extent and pcluster lookups) as estimates over
    the whole traced time, from the records of each window (scaled as the requests are: the traced processes'
    read calls where known, else the windows' time), what they saw, and the workload's reads erofs served
    (erofs_reads)."""
    def estimated(what, ts):
        seen = [int(m.sum()) for m in in_windows(rows, ts)]
        return sampled_count(rw, rows, what, seen, seen, kind="read"), int(len(ts))
    names = res.header["enums"]["erofs_event"].items()
    events = {name: estimated("erofs %s events" % name, e["ts_ns"][e["event"] == int(v)]) for v, name in names}
    lookups = {k: estimated(what, r["ts_ns"]) for k, what, r in (
        ("extent_lookups", "erofs extent lookups", maps), ("pcluster_lookups", "erofs pcluster lookups", pcl))}
    out = {"events": {k: v[0] for k, v in events.items()}}
    out.update({k: v[0] for k, v in lookups.items()})
    out["basis"] = "windows' sample"
    out["windowed"] = {
        "reads": erofs_reads(res, rw, rows, e),
        "seen": dict({"events": {k: v[1] for k, v in events.items()}}, **{k: v[1] for k, v in lookups.items()}),
        "sample": "the erofs probes were attached only in --budget's windows: events, extent_lookups and "
                  "pcluster_lookups are estimates over the whole traced time (seen: what the windows recorded); "
                  "the pclusters, their reads and the per-request figures are the windows' sample's"}
    return out


def erofs_reads(res, rw, rows, e):
    """The estimate of the workload's read requests that erofs served (request_windows' estimator over the
    reads on the erofs filesystems), or why there is none."""
    sdevs = None
    if traced_fs_types(res.config) != ["erofs"]:
        # other filesystems traced beside: the reads on erofs's superblocks; the page-cache hits the kernel
        # counted apart are per window of every traced filesystem together
        kv = enum_value(res.header, "req_kind", "read")
        if any(kv < len(w["counted_by_kind"]) and w["counted_by_kind"][kv] for w in rows):
            return {"why": "the kernel counted the reads it served from the page cache for every traced filesystem "
                           "together in each window: erofs's own are not told apart"}
        sdevs = np.unique(e["dev"]).tolist()
    w = request_windows(res, "read", sdevs)
    out = {k: w[k] for k in ("estimate", "interval95", "seen", "auxiliary", "method", "why") if k in w}
    if sdevs is not None and "method" in out:
        out["method"] = "reads on the erofs filesystems only: " + out["method"]
    return out


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
