"""Read amplification: what the device and the decompressor did per byte the workload received.

Pure functions over a summary (analysis/summary.py builds the figures it reads: devices, decompression, erofs
lookups, squashfs cache lookups), so a comparison or a bench row can recompute them from summary.json.  The
figure ids are records.h's FST_AMPLIFICATION (a results file's schema lists them: figures() checks them there); a
figure that this run could not measure is {"available": False, "why": ...}, and one that does not apply (nothing to
decompress on an uncompressed image) is {"applies": False, "why": ...}: never a zero standing in for either.
"""
from analysis import schema
from analysis.units import percent, size

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


# what each device level (records.h FST_DEV_LEVELS) counts, in the order the verdict names them
LEVEL_METHODS = {
    "loop": "every read block request on the image's loop device",
    "disk": "read block requests the traced tasks queued on the disk the filesystem sits on (charge direct), or a "
            "loop device queued there for them (charge loop): that disk's other reads are the rest of the system's",
    "backing": "read block requests the loop device issued on it for the workload (charge loop)",
    "device": "read block requests the traced tasks queued on it (charge direct or loop)",
}
# the levels a filesystem's own device can be: the reads the filesystem issued for the workload are there
FS_LEVELS = ("loop", "disk")


# --budget, the block or erofs probes attached only in the windows: their bytes against the reads received there
SAMPLE_FOOTING = ("recorded only in --budget's windows, as the reads received were: per byte received in the "
                  "windows (both the windows' sample)")


def received_footing(s):
    """The bytes received what is counted all the time is set against, on their footing, and how: with --budget
    windows, where the reads received were seen only in the windows, those bytes weighted up to all the time as
    the reads were (the windows' estimate over the reads they saw): both weighted (a device level recorded in
    the windows too is set against the windows' own bytes instead: SAMPLE_FOOTING).  (None, why) where there is
    no estimate; (bytes received, None) with the hooks always attached."""
    received = s["reads"]["bytes"]
    w = s.get("request_windows") or {}
    if not w.get("active"):
        return received, None
    if "estimate" not in w or not s["reads"]["count"]:
        return None, ("the reads received were seen only in the --budget windows, and no estimate of all of them "
                      "was made (%s): the device bytes of all the time make no ratio with them"
                      % (w.get("why") or "no reads seen"))
    return received * w["estimate"] / s["reads"]["count"], (
        "the device bytes of all the time per byte received weighted up to all the time as the reads were (the "
        "windows saw %d reads, estimated %.0f in all): both weighted" % (s["reads"]["count"], w["estimate"]))


def device_levels(s, received):
    """Per traced device level (records.h FST_DEV_LEVELS, LEVEL_METHODS: loop, the image's device, all its reads;
    disk, a disk a filesystem sits on, the traced tasks' reads there; backing, the reads a loop device issued
    there for the workload): bytes read and bytes per byte received (received: on the device bytes' footing,
    received_footing; None: no ratio); the kernel's own count where the device is the image's alone (loop)."""
    out = {}
    order = list(LEVEL_METHODS)
    for name, d in sorted((s.get("devices") or {}).items(),
                          key=lambda kv: order.index(kv[1].get("level")) if kv[1].get("level") in order else 9):
        level = d.get("level")
        own = d.get("workload_reads")
        if own is None:  # a summary from before it counted them: the loop and backing levels it had
            n = d.get("bytes", 0) if level == "loop" else \
                ((d.get("by_charge") or {}).get("loop") or {}).get("bytes", 0)
            reread = d.get("reread_bytes") if d.get("requests") else None
        else:
            n, reread = own["bytes"], own["reread_bytes"] if own["requests"] else None
        lv = {"device": name, "bytes": int(n), "per_received": _ratio(n, received),
              "method": LEVEL_METHODS.get(level, LEVEL_METHODS["device"])}
        if d.get("basis") == "windows' sample":
            # its block requests were recorded only in the windows, as the reads were: both the windows' sample
            lv.update(per_received=_ratio(n, s["reads"]["bytes"]), footing=SAMPLE_FOOTING)
        delta = d.get("diskstats_delta")
        if level == "loop" and delta:
            lv["diskstats_bytes"] = delta["sectors_read"] * 512
        if d.get("unseen_sectors"):
            lv["unseen_bytes"] = d["unseen_sectors"] * 512  # completed without fstrace seeing them: a lower bound
        if reread is not None:
            lv["reread_bytes"] = reread
            if (own or {}).get("reread_basis"):
                lv["reread_basis"] = own["reread_basis"]
        out[level if level not in out else "%s %s" % (level, name)] = lv
    return out


def reread(levels):
    """The share of the filesystem's own device's bytes (the image's loop device, or the disk it sits on) that
    the workload had read before in the run."""
    fs = [lv for level, lv in levels.items() if level.split(" ")[0] in FS_LEVELS]
    if not fs:
        return {"available": False, "why": "no filesystem's own device traced"}
    fs = [lv for lv in fs if lv["bytes"]]
    n = sum(lv["bytes"] for lv in fs)
    again = [lv.get("reread_bytes") for lv in fs]
    if not n or None in again:
        return {"available": False, "why": "no reads of the workload on the filesystem's device"}
    out = {"available": True, "share": sum(again) / n, "bytes": sum(again)}
    paired = [lv["reread_basis"] for lv in fs if lv.get("reread_basis")]
    if paired:
        out.update(basis=paired[0], method="bytes read again inside one --budget window (the block hooks were off "
                                           "between windows: a re-read of a byte first read in another window, or "
                                           "outside every window, is not seen): the windows' sample's, biased low")
    return out


def decompressed(s, received):
    """Bytes decompressed: exact from the decompression probes, else at most the length each erofs pcluster
    lookup mapped (a bound), else unavailable; does not apply on an uncompressed image.  Per byte received on
    the footing of received_footing where the probes were attached all the time (decompression timed at function
    entry), per byte received in the windows where erofs's tracepoints were windowed (SAMPLE_FOOTING)."""
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
    sampled = er.get("basis") == "windows' sample"  # erofs's probes, as the reads, only in the windows
    lookups = er["windowed"]["seen"]["pcluster_lookups"] if sampled else er.get("pcluster_lookups")
    if lookups:
        n = er["mapped_bytes"]
        return {"available": True, "method": "bound", "bytes": n,
                "per_received": _ratio(n, s["reads"]["bytes"] if sampled else received),
                "note": "at most: %d pcluster lookups x the length each mapped (erofs_map_blocks); decompression "
                        "itself is only sampled on this kernel%s" % (lookups, "; " + SAMPLE_FOOTING if sampled else "")}
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
        if er.get("pclusters_basis") == "paired in one window":
            for fig in (lookups, reads):
                fig.update(basis=er["pclusters_basis"], method=er["pclusters_method"])
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
    out = {"available": True, "share": u["unneeded_bytes"] / u["bytes"], "bytes": u["unneeded_bytes"],
           "device_bytes": u["bytes"], "no_unit_bytes": u["no_unit_bytes"], "needed": u["needed"],
           "apart": u["apart"], "method": u["method"]}
    if u.get("basis") == "paired in one window":
        out["basis"] = u["basis"]
    return out


def figures(s, sch=None):
    """The amplification figures of a summary, by FST_AMPLIFICATION id (each checked against sch: the results'
    schema; a summary's own, or format 2's, when only the summary is at hand)."""
    sch = sch or schema.of_summary(s)
    for figure in (DEVICE_READ, DECOMPRESSED, UNIT_LOOKUPS, UNIT_READS, REREAD, UNNEEDED):
        sch.amp(figure)
    received = s["reads"]["bytes"]
    footing, how = received_footing(s)
    levels = device_levels(s, footing)
    for lv in levels.values():
        lv["method"] += "; " + (lv.pop("footing", None) or how or "per byte the workload received")
    lookups, reads = unit_counts(s)
    out = {
        "received_bytes": received,
        DEVICE_READ: levels,
        # the filesystems' probes stay attached through --budget windows too: on the device bytes' footing
        DECOMPRESSED: decompressed(s, footing),
        UNIT_LOOKUPS: lookups,
        UNIT_READS: reads,
        REREAD: reread(levels),
        UNNEEDED: unneeded(s),
    }
    if how:  # --budget windows: the device levels' per-byte figures are over the weighted bytes
        out["received_footing"] = {"bytes": footing, "method": how}
    if not received:
        out["note"] = "the workload received no bytes (metadata only): per-byte figures are n/a, bytes are given"
    return out


def row(a):
    """The amplification columns of a bench row: loop/backing device bytes, decompressed bytes (and whether exact
    or a bound), per byte received; None where unavailable or not applicable, or paired only inside --budget's
    windows (biased: the verdict says so, a table cell could not)."""
    levels = a.get(DEVICE_READ) or {}
    dec = a.get(DECOMPRESSED) or {}
    rr = a.get(REREAD) or {}
    return {"loop_read_per_received": (levels.get("loop") or {}).get("per_received"),
            "backing_read_per_received": (levels.get("backing") or {}).get("per_received"),
            "decompressed_per_received": dec.get("per_received") if dec.get("available") else None,
            "decompressed_method": dec.get("method") if dec.get("available") else
            ("n/a" if dec.get("applies") is False else None),
            "reread_share": None if rr.get("basis") else rr.get("share"),
            "unneeded_share": None if (a.get(UNNEEDED) or {}).get("basis") else (a.get(UNNEEDED) or {}).get("share")}


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
    received = a["received_bytes"]
    items = []
    for level, lv in a[DEVICE_READ].items():
        items.append("%s %s" % (level, "%.2f" % lv["per_received"] if lv["per_received"] is not None
                                else size(lv["bytes"])))
    footing = a.get("received_footing")
    if footing and footing["bytes"] is not None and received:
        # --budget windows: the device's bytes are of all the time, the received ones weighted up to it
        per = "per byte received (%s seen in the windows, %s estimated in all)" % (size(received),
                                                                                 size(footing["bytes"]))
    elif footing and received:
        per = "(reads seen only in the windows, no estimate: device bytes)"
    else:
        per = "per byte received (%s)" % size(received) if received else "(nothing received; device bytes)"
    txt = "  read amplification %s: %s" % (per, ", ".join(items))
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
        if lk.get("basis"):
            txt += " (%s, biased)" % IN_ONE_WINDOW
    rr = a[REREAD]
    if rr.get("available"):
        txt += "; re-read %s%s" % (percent(rr["share"]), " (%s, biased)" % IN_ONE_WINDOW if rr.get("basis") else "")
    un = a.get(UNNEEDED) or {}
    if un.get("available"):
        txt += "; unneeded %s%s" % (percent(un["share"]), " (%s, biased)" % IN_ONE_WINDOW if un.get("basis") else "")
    return [txt]


# how the verdict says a figure pairing two events was taken under --budget's windows (the summary's basis
# "paired in one window": caches.PAIRED_IN_WINDOWS)
IN_ONE_WINDOW = "paired within each window"


def mean_times(hist):
    """Mean of a {times: units} histogram: how many times a unit was looked up (read), on average."""
    n = sum(hist.values())
    return sum(int(k) * v for k, v in hist.items()) / n if n else 0.0
