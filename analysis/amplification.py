"""Read amplification: what the device and the decompressor did per byte the workload received.

Pure functions over a summary (analysis/summary.py builds the figures it reads: devices, decompression, erofs
lookups, squashfs cache lookups), so a comparison or a bench row can recompute them from summary.json.  The
figure ids are records.h's FST_AMPLIFICATION (a results file's schema lists them: figures() checks them there); a
figure that this run could not measure is {"available": False, "why": ...}, and one that does not apply (nothing to
decompress on an uncompressed image) is {"applies": False, "why": ...}: never a zero standing in for either.
"""
from analysis import schema

# the figures computed here, by records.h FST_AMPLIFICATION id
DEVICE_READ = "device_read_per_received"
DECOMPRESSED = "decompressed_per_received"
UNIT_LOOKUPS = "unit_lookups"
UNIT_READS = "unit_device_reads"
REREAD = "device_reread_share"
UNNEEDED = "device_unneeded_share"


def _ratio(n, received):
    return n / received if received else None


def uncompressed(run):
    """Why nothing is decompressed on this run's image, or None when something may be (or it is unknown)."""
    fs, opts = run.get("fs"), run.get("options")
    if fs in ("ext4", "xfs"):
        return "%s does not compress" % fs
    if opts is not None and opts.get("compress") == "none":
        return "uncompressed image"
    return None


def device_levels(s, received):
    """Per traced device level (loop: the image's device, all its reads; backing: the reads the loop device
    issued there for the workload, charge "loop"): bytes read and bytes per byte received; the kernel's own
    count where the device is the image's alone (loop)."""
    out = {}
    for name, d in sorted((s.get("devices") or {}).items(), key=lambda kv: kv[1].get("level") != "loop"):
        level = d.get("level")
        if level == "loop":
            n = d.get("bytes", 0)
            how = "every read block request on the image's loop device"
        else:
            n = ((d.get("by_charge") or {}).get("loop") or {}).get("bytes", 0)
            how = "read block requests the loop device issued on it for the workload (charge loop)"
        lv = {"device": name, "bytes": int(n), "per_received": _ratio(n, received), "method": how}
        delta = d.get("diskstats_delta")
        if level == "loop" and delta:
            lv["diskstats_bytes"] = delta["sectors_read"] * 512
        if d.get("unseen_sectors"):
            lv["unseen_bytes"] = d["unseen_sectors"] * 512  # completed without fstrace seeing them: a lower bound
        if d.get("requests"):
            lv["reread_bytes"] = d.get("reread_bytes")
        out[level] = lv
    return out


def decompressed(s, received):
    """Bytes decompressed: exact from the decompression probes, else at most the length each erofs pcluster
    lookup mapped (a bound), else unavailable; does not apply on an uncompressed image."""
    why = uncompressed(s["run"])
    if why:
        return {"applies": False, "why": why + ": nothing is decompressed"}
    dec = s.get("decompression") or {}
    if dec.get("available"):
        n = sum(g["out_bytes"] for g in dec.get("groups", []))
        return {"available": True, "method": "exact", "bytes": n, "per_received": _ratio(n, received),
                "note": "output of every decompression (and uncompressed-unit copy) the probes timed (%s)"
                        % ", ".join(sorted(set(dec["probes"].values())))}
    er = s.get("erofs") or {}
    if er.get("pcluster_lookups"):
        n = er["mapped_bytes"]
        return {"available": True, "method": "bound", "bytes": n, "per_received": _ratio(n, received),
                "note": "at most: %d pcluster lookups x the length each mapped (erofs_map_blocks); decompression "
                        "itself is only sampled on this kernel" % er["pcluster_lookups"]}
    if s["run"].get("fs") == "erofs" and er.get("extent_lookups") is not None:
        return {"available": True, "method": "bound", "bytes": 0, "per_received": _ratio(0, received),
                "note": "no compressed extent was looked up (every mapped extent was stored uncompressed)"}
    return {"available": False,
            "why": "no decompression probe attached (see unavailable) and no per-unit lookups on this tier (erofs "
                   "has tracepoints; squashfs and btrfs need fentry or kprobes)"}


def unit_counts(s):
    """How many times each compressed unit was looked up (decompressed) and read from the device."""
    if uncompressed(s["run"]):
        na = {"applies": False, "why": uncompressed(s["run"]) + ": no compressed units"}
        return na, na
    er = s.get("erofs") or {}
    if er.get("pclusters"):
        lookups = {"available": True, "units": er["pclusters"], "times": er["lookups_per_pcluster"],
                   "source": "erofs pclusters by erofs_map_blocks lookup"}
        reads = {"available": True, "units": er["pclusters"], "times": er["device_reads_per_pcluster"],
                 "source": "block requests overlapping each looked-up pcluster (0: already in memory)"}
        return lookups, reads
    caches = s.get("fs_caches") or {}
    if caches.get("available") and caches.get("groups"):
        units = sum(g["blocks_missed"] for g in caches["groups"])
        again = sum(g["blocks_missed_again"] for g in caches["groups"])
        lookups = {"available": True, "units": units, "more_than_once": again,
                   "source": "squashfs cache misses (metadata, fragment, data caches): blocks read and "
                             "decompressed, and those evicted and decompressed again"}
        reads = {"available": False, "why": "squashfs blocks are named by cache lookups only; their device "
                                            "reads are not matched to them"}
        return lookups, reads
    why = ("no per-unit lookups on this tier (erofs has tracepoints; squashfs's cache lookups need fentry or "
           "kprobes: %s; btrfs has none)" % (caches.get("why") or "no probe"))
    return {"available": False, "why": why}, {"available": False, "why": why}


def unneeded(s):
    """The share of the image device's bytes that lie outside every unit the filesystem looked up (summary
    device_unneeded), with its method and what counted as needed; unavailable where the units' places are not
    known (btrfs; squashfs on the tracepoint tier)."""
    u = s.get("device_unneeded")
    if not u:
        return {"available": False,
                "why": "needs each unit's place on the device, which this results file does not record"}
    if not u.get("available"):
        return u
    return {"available": True, "share": u["unneeded_bytes"] / u["bytes"], "bytes": u["unneeded_bytes"],
            "device_bytes": u["bytes"], "no_unit_bytes": u["no_unit_bytes"], "needed": u["needed"],
            "apart": u["apart"], "method": u["method"]}


def figures(s, sch=None):
    """The amplification figures of a summary, by FST_AMPLIFICATION id (each checked against sch: the results'
    schema; a summary's own, or format 2's, when only the summary is at hand)."""
    sch = sch or schema.of_summary(s)
    for figure in (DEVICE_READ, DECOMPRESSED, UNIT_LOOKUPS, UNIT_READS, REREAD, UNNEEDED):
        sch.amp(figure)
    received = s["reads"]["bytes"]
    levels = device_levels(s, received)
    lookups, reads = unit_counts(s)
    loop = levels.get("loop") or {}
    out = {
        "received_bytes": received,
        DEVICE_READ: levels,
        DECOMPRESSED: decompressed(s, received),
        UNIT_LOOKUPS: lookups,
        UNIT_READS: reads,
        REREAD: ({"available": True, "share": loop["reread_bytes"] / loop["bytes"],
                  "bytes": loop["reread_bytes"]} if loop.get("bytes") and loop.get("reread_bytes") is not None
                 else {"available": False, "why": "no reads on the image's device"}),
        UNNEEDED: unneeded(s),
    }
    if not received:
        out["note"] = "the workload received no bytes (metadata only): per-byte figures are n/a, bytes are given"
    return out


def row(a):
    """The amplification columns of a bench row: loop/backing device bytes, decompressed bytes (and whether exact
    or a bound), per byte received; None where unavailable or not applicable."""
    levels = a.get(DEVICE_READ) or {}
    dec = a.get(DECOMPRESSED) or {}
    rr = a.get(REREAD) or {}
    return {"loop_read_per_received": (levels.get("loop") or {}).get("per_received"),
            "backing_read_per_received": (levels.get("backing") or {}).get("per_received"),
            "decompressed_per_received": dec.get("per_received") if dec.get("available") else None,
            "decompressed_method": dec.get("method") if dec.get("available") else
            ("n/a" if dec.get("applies") is False else None),
            "reread_share": rr.get("share"),
            "unneeded_share": (a.get(UNNEEDED) or {}).get("share")}


def ratio_text(v):
    return "-" if v is None else "%.2f" % v


def decompressed_text(r):
    """A bench cell: 2.31 (exact), <=2.31 (bound), n/a (uncompressed), - (unavailable)."""
    m = r.get("decompressed_method")
    if m == "n/a":
        return "n/a"
    v = r.get("decompressed_per_received")
    if v is None:
        return "-"
    return ("<=%.2f" if m == "bound" else "%.2f") % v


def lines(s):
    """The verdict's amplification line (one logical line; the verdict folds it): device bytes per level and bytes
    decompressed per byte received, how often each compressed unit was looked up and read, the share re-read."""
    a = s.get("amplification")
    if not a:
        return []
    from analysis.verdict import size
    received = a["received_bytes"]
    items = []
    for level, lv in a[DEVICE_READ].items():
        items.append("%s %s" % (level, "%.2f" % lv["per_received"] if lv["per_received"] is not None
                                else size(lv["bytes"])))
    txt = "  read amplification %s: %s" % (
        "per byte received (%s)" % size(received) if received else "(nothing received; device bytes)",
        ", ".join(items))
    dec = a[DECOMPRESSED]
    if dec.get("applies") is False:
        txt += "; decompressed: none (%s)" % dec["why"].split(":")[0]
    elif dec.get("available"):
        v = dec["per_received"]
        txt += "; decompressed %s (%s)" % (("<=%.2f" if dec["method"] == "bound" else "%.2f") % v if v is not None
                                          else size(dec["bytes"]),
                                          "bound" if dec["method"] == "bound" else "exact")
    else:
        txt += "; decompressed: unavailable"
    lk, rd = a[UNIT_LOOKUPS], a[UNIT_READS]
    if lk.get("available") and lk["units"]:
        txt += "; %d units" % lk["units"]
        if "times" in lk:
            txt += " looked up %.2fx" % mean_times(lk["times"])
        else:
            txt += ", %d decompressed again" % lk["more_than_once"]
        if rd.get("available"):
            txt += ", read %.2fx" % mean_times(rd["times"])
    rr = a[REREAD]
    if rr.get("available"):
        txt += "; re-read %.1f %%" % (100 * rr["share"])
    un = a.get(UNNEEDED) or {}
    if un.get("available"):
        txt += "; unneeded %.1f %%" % (100 * un["share"])
    return [txt]


def mean_times(hist):
    """Mean of a {times: units} histogram: how many times a unit was looked up (read), on average."""
    n = sum(hist.values())
    return sum(int(k) * v for k, v in hist.items()) / n if n else 0.0
