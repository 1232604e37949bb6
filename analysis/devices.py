"""Block devices: each traced device's read requests (sizes, alignment, latency, origins, charges) beside the
kernel's /proc/diskstats, the requests each device level counts as the workload's, and the bytes read
outside every unit the filesystem looked up.
"""
import numpy as np

from analysis import sampling
from analysis.hist import log2_slots, percentiles
from analysis.intervals import covered_bytes, union_bytes
from analysis.selection import dev_name, enum_value, figure_probes, fs_devices, fs_records, probe_tier
from analysis.caches import pairing_windows, window_spans
from analysis.windows import completion_weights, in_windows, probe_windows, sampled_count


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


def reread_bytes(io, rows=None):
    """Bytes of these block requests that an earlier one of them (or another in the same place) had read.  rows:
    --budget's windows where the block requests were recorded only in them: the re-reads inside one window's
    span, summed (one whose first read was outside it is not seen)."""
    if rows is not None:
        return sum(reread_bytes(io[m]) for m in window_spans(rows, io["ts_complete_ns"]))
    start = io["sector"].astype(np.uint64) * np.uint64(512)
    end = start + io["bytes"].astype(np.uint64)
    return int(io["bytes"].astype(np.uint64).sum()) - union_bytes(start, end)


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


def workload_reads(res, reads, level, rows=None):
    """A device's read block requests its level counts as the workload's (LEVEL_CHARGES): requests, bytes, bytes
    read again (rows: under --budget's windows, inside one window: reread_bytes), and which charges counted."""
    charges = LEVEL_CHARGES.get(level, LEVEL_CHARGES["device"])
    mine = of_workload(res, reads, level)
    out = {"requests": int(len(mine)), "bytes": int(mine["bytes"].astype(np.uint64).sum()),
           "reread_bytes": reread_bytes(mine, rows), "charges": list(charges) if charges else "all"}
    if rows is not None:
        out["reread_basis"] = "paired in one window"
    return out


def device_stats(res):
    """Per traced device: records vs the kernel's own /proc/diskstats delta over the run.  Under --budget, where
    block_rq_complete was attached only in the windows, the records are the windows' sample (basis): their
    counts are what the windows saw, their shares and distributions the sample's; the read requests over the
    whole traced time are estimated (windowed.requests), and counted exactly where block_rq_done ran (exact)."""
    io = res.records.get("io")
    out = {}
    read_op, write_op = res.io_op("read"), res.io_op("write")
    rw, rows = probe_windows(res, "block_rq_complete")
    for slot, d in enumerate(res.header.get("devices", [])):
        rows_d = io[io["dev"] == d["dev"]] if io is not None else io
        reads = rows_d[res.io_ops(rows_d) == read_op]
        st = io_stats(reads, d["unit_bytes"], res.schema.hist_slots)
        st["basis"] = "every request" if rw is None else "windows' sample"
        st["level"] = device_level(d)
        st["workload_reads"] = workload_reads(res, reads, st["level"], rows)
        if rw is not None:
            # a re-read is paired with its first read only inside one window: the hooks were off between them
            st["reread_bytes"], st["reread_basis"] = reread_bytes(reads, rows), "paired in one window"
        st["all_ops_requests"] = int(len(rows_d))
        charge_none = enum_value(res.header, "charge", "none")
        st["charged_to_workload"] = int((reads["charge"] != charge_none).sum())
        writes = rows_d[res.io_ops(rows_d) == write_op]
        st["write_requests"] = int(len(writes))
        st["write_bytes"] = int(writes["bytes"].astype(np.uint64).sum())
        if res.header.get("io_stacks") is not None:
            st.update(origins(res, reads))
        st["by_charge"] = {
            name: {"requests": int((reads["charge"] == int(v)).sum()),
                   "bytes": int(reads["bytes"][reads["charge"] == int(v)].sum())}
            for v, name in res.header["enums"]["charge"].items()}
        st["exact"] = exact_reads(res, d)
        s0, s1 = d.get("diskstats_start"), d.get("diskstats_end")
        if s0 and s1:
            st.update(diskstats_compare(res, reads, s0, s1, st["exact"] if rw is not None else None))
        if rw is not None:
            # the reads the kernel counted over the snapshots' span past block_rq_done's count there
            unseen = st["unseen_requests"] if st.get("counted_over_diskstats_span") else None
            st["windowed"] = windowed_reads(rw, rows, slot, reads, res.header.get("request_records"), st["exact"],
                                            unseen)
        out[dev_name(d["dev"], res.minor_bits)] = st
    return out


def origins(res, reads):
    """Where a device's read block requests were queued from (their queue stacks), and how that was taken."""
    stacks = res.header["io_stacks"]
    out = {}
    sampled = res.header.get("io_stack_sampling") or {"mode": "all"}
    unsampled = sampled.get("unsampled_id")
    for sid, nbytes in zip(reads["queue_stack"].tolist(), reads["bytes"].tolist()):
        o = "not sampled" if sid == unsampled else \
            sampling.io_origin(stacks[str(sid)]) if str(sid) in stacks else "unknown"
        cur = out.setdefault(o, {"requests": 0, "bytes": 0})
        cur["requests"] += 1
        cur["bytes"] += int(nbytes)
    method = ("every block request's queue stack" if sampled["mode"] == "all" else
              "queue stacks of at most one bio per %g ms per CPU (the rest 'not sampled'): the origin shares "
              "of the sampled ones estimate the whole" % (sampled["every_ns"] / 1e6)) + (
              "; taken only in the request windows (--budget), which are placed at random"
              if sampled.get("windows_only") else "")
    return {"by_origin": out, "by_origin_method": method}


def exact_over_diskstats(d):
    """A device's exact counts (block_rq_done's) over the span of its two diskstats snapshots, each [low, high]
    (the header device's exact_around_diskstats: "{op}_requests" and "{op}_bytes"); None where they were not
    both read.  They were read just before and just after each snapshot, so a completion the reads straddled may
    lie on either side.  And the kernel counts a request completed (ios) only after its bios' end_io callbacks
    ran, a while after block_rq_complete fired: a request between the two at a snapshot (in diskstats' in_flight
    there) is on the kernel's side of it later than on block_rq_done's, so the request counts are widened by the
    requests in flight at each snapshot (the bytes are counted at the tracepoint's own call)."""
    b = d.get("exact_around_diskstats")
    if not b:
        return None
    s, e = b["start"], b["end"]
    out = {k: [e[k][0] - s[k][1], e[k][1] - s[k][0]] for k in s}
    lag_start = (d.get("diskstats_start") or {}).get("in_flight", 0)
    lag_end = (d.get("diskstats_end") or {}).get("in_flight", 0)
    for k in out:
        if k.endswith("_requests"):
            out[k] = [max(out[k][0] - lag_end, 0), out[k][1] + lag_start]
    return out


def exact_reads(res, d):
    """A device's read (and write) block requests and bytes over the traced time as the kernel aggregates counted
    every completion (kernel_aggregates.block_figures: exact), or why there are none; over_diskstats: the same
    counts over the diskstats snapshots' span, each [low, high] (exact_over_diskstats), where they were read."""
    figs = [f for f in (res.header.get("kernel_aggregates") or {}).get("block_figures") or [] if f["dev"] == d["dev"]]
    if not figs:
        return {"available": False, "why": "this collector wrote no exact block figures for the device"}
    ops = figs[0].get("ops") or {}
    rd, wr = ops.get("read") or {}, ops.get("write") or {}
    # an op the kernel saw no request of is not among ops: none of it
    out = {"available": True, "basis": "exact", "counted_by": figs[0].get("counted_by"),
           "requests": rd.get("requests", 0), "bytes": rd.get("bytes", 0 if not rd else None),
           "write_requests": wr.get("requests", 0), "write_bytes": wr.get("bytes", 0 if not wr else None)}
    over = exact_over_diskstats(d)
    if over is not None:
        out["over_diskstats"] = over
    return out


def windowed_reads(rw, rows, slot, reads, h_records=None, exact=None, unseen=None):
    """--budget, block_rq_complete windowed: the read block requests of the device in header slot over the diskstats
    snapshots' span (the traced time but for its edges), estimated from those the windows recorded ({"requests":
    estimate object, "sample"}). Seen in a window: the requests completed in it, weighted by completion_weights (a
    request is recorded only if its bios were all queued once the window's block_bio_queue was on: block_on_ns); scaled
    by the reads block_rq_done counted completed on the device in the same spans against all of them (dev_reads), else
    by the windows' time. Counted at the same event as the auxiliary, a window's requests differ from it by those the
    edge cut off (a burst of requests straddling an edge moves both alike) and those a full in-flight bucket left
    unrecorded (counted among the losses). The total is block_rq_done's count over the diskstats snapshots' span (exact:
    exact_reads, its over_diskstats [low, high]), the windows lying inside it; where /proc/diskstats counted more
    over that span than its high end (unseen: diskstats_compare's unseen_requests there), the kernel's count, the
    high end and those: completions block_rq_done never ran for (docs/measuring.md, Lost events), which the windows'
    hook on the same tracepoint misses alike, so the windows' ratio is of the seen ones, the total must carry the
    rest, and the kernel's count over its own snapshots is exact.  Where the counts around a snapshot could not be
    read, the count up to the header's writing (older files: dev_reads_total, the same), with no unseen reads."""
    if (h_records or {}).get("io_records") is False:
        return {"requests": {"why": "the collector wrote no block request records (--no-io-records, as serve): "
                                    "the windows' count of the device's requests is in its exact count only"},
                "sample": "no block request was recorded"}
    c = reads["ts_complete_ns"].astype(np.int64)
    length = c - reads["ts_queue_ns"].astype(np.int64)
    # between the looks at dev_reads where the collector took them (a burst completing between a window's open and
    # that look would be counted on one side only), else the window's span
    masks = [(c >= w["dev_reads_from_ns"]) & (c < w["dev_reads_to_ns"]) if w.get("dev_reads_from_ns") else m
             for w, m in zip(rows, in_windows(rows, c))]
    # weighted over the span the masks cover, the hooks on from block_on_ns (older files: the window's span, the
    # hooks on as it opened)
    weighted = [float(completion_weights(length[m], *weight_span(w)).sum()) for m, w in zip(masks, rows)]
    seen = [int(m.sum()) for m in masks]
    totals = rw.get("dev_reads_total") or []
    per = [(w.get("dev_reads") or [])[slot] if slot < len(w.get("dev_reads") or []) else None for w in rows]
    span_reads = ((exact or {}).get("over_diskstats") or {}).get("read_requests")
    whole = totals[slot] if slot < len(totals) else (exact or {}).get("requests") if (exact or {}).get(
        "available") else None
    unseen = (unseen or 0) if span_reads else 0
    total = span_reads[1] + unseen if unseen else sum(span_reads) / 2.0 if span_reads else whole
    aux = None
    # a window whose look at the counts failed (dev_reads null) is left out alone, as pick_auxiliary does for calls
    keep = [p is not None for p in per]
    if rows and total is not None and keep.count(True) >= 2:
        rows, weighted, seen, per = ([x for x, kept in zip(v, keep) if kept] for v in (rows, weighted, seen, per))
        aux = (per, total, "the reads block_rq_done counted completed on the device (exact)")
    est = sampled_count(rw, rows, "read block requests of the device", weighted, seen, aux)
    if aux is not None and keep.count(False) and "method" in est:
        est["method"] += ("; %d more window%s left out: a look at the device's counts failed at an edge, leaving "
                          "its reads unknown" % (keep.count(False), "s" if keep.count(False) > 1 else ""))
    if aux is not None and "interval95" in est:
        widen_by_edge_cuts(est, per, seen, weighted)
        if span_reads:
            widen_by_span(est, span_reads, unseen, total, sum(seen))
    if aux is not None and not span_reads and not totals:
        est["method"] = est.get("method", "") + ("; the total is the count up to the results' writing: the counts "
                                                 "around a diskstats snapshot could not be read")
    if aux is None:
        est["method"] = est.get("method", "") + " (no exact count of the device's reads per window: %s)" % (
            "the completion counter block_rq_done was not attached" if total is None or not keep.count(True) else
            "the looks at its counts failed in all windows but %d" % keep.count(True))
    return {"requests": est,
            "sample": "the device's block requests were recorded only in --budget's windows: counts beside this "
                      "are what the windows saw, shares and distributions the windows' sample's"}


def widen_by_span(est, span_reads, unseen, total, seen):
    """A block estimate whose total is block_rq_done's count over the diskstats snapshots' span ([low, high]):
    its interval widened by that range (the completions the reads around the snapshots straddled, and the requests
    in flight at them: exact_over_diskstats), scaled as the estimate is to the total, never below the seen.  Where
    the kernel counted unseen reads past the high end the total is the kernel's count, exact: nothing to widen.
    The method says which."""
    if unseen:
        est["method"] += ("; the total is the kernel's count over the diskstats snapshots' span, %d more than "
                          "block_rq_done's at most: completions it never ran for" % unseen)
    elif span_reads[1] > span_reads[0]:
        half = (span_reads[1] - span_reads[0]) / 2.0 * est["estimate"] / total
        est["interval95"] = [max(est["interval95"][0] - half, float(seen)), est["interval95"][1] + half]
        est["method"] += ("; widened by the %d requests completed while the exact counts were read around "
                          "the diskstats snapshots, or in flight at them" % (span_reads[1] - span_reads[0]))


def weight_span(w):
    """A window's (span, lead) for completion_weights: between the collector's looks at dev_reads, with
    block_bio_queue on from block_on_ns, where the window row has them; else its span up to sys_enter's detach,
    the hooks on as it opened."""
    if w.get("dev_reads_from_ns") and w.get("dev_reads_to_ns"):
        start = w["dev_reads_from_ns"]
        return w["dev_reads_to_ns"] - start, start - (w.get("block_on_ns") or start)
    return w["enter_closed_ns"] - w["open_ns"], w["open_ns"] - (w.get("block_on_ns") or w["open_ns"])


def widen_by_edge_cuts(est, per, seen, weighted):
    """Widen a block estimate's interval by what the windows' edges cut off, which the windows' spread does not
    show: the completions counted in a window and not recorded (a request begun before its hooks went on), and
    the weights that stand for such requests elsewhere.  A cut comes in bursts (a request with the readahead
    merged into it, a device's queue of them): a run whose windows cut none is weighted up all the same, and one
    whose few windows cut a burst each is short, each by about this much."""
    cut = sum(max(a - s, 0) for a, s in zip(per, seen)) + abs(sum(weighted) - sum(seen))
    share = cut / max(sum(per), 1)
    lo, hi = est["interval95"]
    est["edge_share"] = share
    est["interval95"] = [max(lo - est["estimate"] * share, float(sum(seen))), hi + est["estimate"] * share]
    est["method"] += ("; widened by the windows' edge cuts (completions counted and not recorded, and the weights "
                      "for them: %.2f %% of the windows' completions)" % (100 * share))


def diskstats_compare(res, reads, s0, s1, exact):
    """A device's reads as the kernel counted them (/proc/diskstats between the snapshots), and how many fstrace
    did not see: from the traced completions, or, where those were recorded only in windows, from the exact
    count (exact: exact_reads; unavailable where there is none)."""
    delta = {k: s1[k] - s0[k] for k in ("reads", "reads_merged", "sectors_read", "writes", "sectors_written")}
    out = {"diskstats_delta": delta}
    if exact is not None:
        if not exact["available"]:
            return dict(out, unseen_requests=None, unseen_sectors=None, traced_beyond_diskstats=None,
                        unseen_why="the block requests were recorded only in --budget's windows and no exact "
                                   "count was made (%s)" % exact["why"])
        over = exact.get("over_diskstats")
        if over is not None:
            # over the snapshots' own span: [low, high] for the completions their reads straddled
            (n_lo, n), nbytes = over["read_requests"], over["read_bytes"][1]
            out["unseen_method"] = ("the exact count (%s) over the diskstats snapshots' span against the kernel's"
                                    % exact["counted_by"])
            out["counted_over_diskstats_span"] = True
        else:
            n, nbytes = exact["requests"], exact["bytes"]
            n_lo = n
            out["unseen_method"] = "the exact count (%s) against the kernel's" % exact["counted_by"]
    else:
        # The kernel's own count is exact.  Completions it counted that our programs never saw are
        # lost events: on some kernels BPF is not run for block completions in certain softirq
        # contexts and no missed run is counted (docs/measuring.md, "Lost events").
        t = res.header["time"]
        inside = reads[(reads["ts_complete_ns"] >= t["start_ns"]) & (reads["ts_complete_ns"] <= t["end_ns"])]
        n, nbytes = int(len(inside)), int(inside["bytes"].astype(np.uint64).sum())
        n_lo = n
    out["requests_in_window"] = n
    # The window's edges are outside the snapshots: on a device shared with other I/O (two runs on
    # one backing disk), completions there are traced but not in the kernel's difference, so fstrace
    # can see more than the kernel counted.  Nothing is unseen then; the excess is said, not negated.
    out["unseen_requests"] = max(0, delta["reads"] - n)
    out["unseen_sectors"] = max(0, delta["sectors_read"] - nbytes // 512) if nbytes is not None else None
    out["traced_beyond_diskstats"] = max(0, n_lo - delta["reads"])
    return out


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
                "ts": m["ts_ns"] if len(m) else np.zeros(0, dtype=np.uint64),
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
                "ts": r["ts_start_ns"] if len(r) else np.zeros(0, dtype=np.uint64),
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
    windows = pairing_windows(res)
    for d in np.unique(rd["dev"]):
        rows = rd[rd["dev"] == d]
        # on a disk the whole system reads: the workload's reads there, as the amplification counts them (a
        # device named alone, -d without a level, is kept whole, as files from before levels were read)
        if levels.get(int(d)) == "disk":
            rows = of_workload(res, rows, "disk")
        m = places["dev"] == d
        # under --budget's windows, a window's requests against the units looked up in it (the hooks of one or
        # the other were off between windows); else every request against every unit
        pairs = [(rows, m)] if windows is None else [
            (rows[r], m & u) for r, u in zip(window_spans(windows, rows["ts_complete_ns"]),
                                            window_spans(windows, places["ts"]))]
        for q, u in pairs:
            qs = q["sector"].astype(np.int64) * 512
            qe = qs + q["bytes"].astype(np.int64)
            inside = covered_bytes(places["start"][u], places["end"][u], qs, qe)
            outside = (qe - qs) - inside
            total += int((qe - qs).sum())
            unneeded += int(outside[inside > 0].sum())
            no_unit += int(outside[inside == 0].sum())
            no_unit_requests += int((inside == 0).sum())
    if not total:
        return {"available": False, "why": "no reads of the workload on the filesystem's device"}
    paired = windows is not None
    return {"available": True, "basis": "paired in one window" if paired else "every request",
            "bytes": total, "unneeded_bytes": unneeded, "no_unit_bytes": no_unit,
            "no_unit_requests": no_unit_requests, "units_looked_up": int(len(places["start"])),
            "needed": places["units"], "apart": places["not_units"],
            "method": "every read block request of the workload%s on the filesystem's device (on a disk, the traced "
                      "tasks'), less its bytes inside the union of the units looked up in %s, over the requests "
                      "that carry a unit's byte%s" % (" recorded in a --budget window" if paired else "",
                                                      "the same window" if paired else "the run",
                                                      PAIRED_UNNEEDED if paired else "")}


# device_unneeded where the block requests or the lookups were recorded only in --budget's windows
PAIRED_UNNEEDED = ("; the bytes are the windows' sample's, the share theirs, and biased: a request whose unit was "
                   "looked up before its window opened counts as unneeded")
