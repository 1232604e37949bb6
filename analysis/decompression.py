"""Compression work: decompression per filesystem and algorithm (and its share inside the readers' requests),
and btrfs's compression on write.
"""
import numpy as np

from analysis import sampling
from analysis.hist import log2_slots, percentiles
from analysis.intervals import records_in_requests
from analysis.probes import decompression_probes
from analysis.selection import by_context, by_thread, enum_name, fs_records


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
