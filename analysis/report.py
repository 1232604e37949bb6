"""Terminal report of one run, rendered from its summary (a pure function: summary -> text): the verdict, then with
--full one section per heading (SECTIONS), each a small function of the summary that returns its lines."""
import re

from analysis import schema, verdict
from analysis.hist import format_linear_counts, format_log2
from analysis.units import percent, size

# C0 controls but the newline, DEL, C1 controls (0x9b is CSI on its own) and the Unicode format
# characters that reorder or hide text (bidi overrides, zero-width): what could drive or fool a terminal
_UNPRINTABLE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def terminal_safe(text):
    """text with every control character shown as an escape (\\x1b) instead of sent to the terminal:
    strings in a results file (kernel release, labels, task names, stacks) come from other machines."""
    return _UNPRINTABLE.sub(lambda m: "\\x%02x" % ord(m.group()) if ord(m.group()) < 0x100
                            else "\\u%04x" % ord(m.group()), text)


def heading(title):
    return ["", "== %s" % title]


def histogram(slots, unit):
    """A log2 histogram's lines, as the report indents them."""
    return format_log2(slots, unit).rstrip("\n").split("\n")


def probes_text(probes):
    """'probe: tier, ...' of the probes that measured a section."""
    return ", ".join("%s: %s" % kv for kv in sorted(probes.items()))


def ran_in(threads, noun):
    """'ran in: comm[pid] N items T ms, ...' of the busiest four threads that ran some work."""
    return "ran in: " + ", ".join("%s[%d] %d %s %.1f ms" % (x["comm"], x["pid"], x["items"], noun, x["ns"] / 1e6)
                                  for x in threads[:4])


def requests_section(s):
    r, out = s["reads"], heading("requests")
    w = out.append
    if r.get("counted_in_kernel"):
        w("  %d reads recorded one by one; %d page-cache hits counted in the kernel: their latency percentiles "
          "are within 1/16" % (r["recorded"], r["counted_in_kernel"]))
    wr, sy = s.get("writes", {}), s.get("sync", {})
    if wr.get("count") or sy.get("count"):
        w("  writes: %d requests, %s; sync calls: %d, %.1f ms in all"
          % (wr.get("count", 0), size(wr.get("bytes", 0)), sy.get("count", 0),
             (sy["latency_us"]["mean"] * sy["count"] / 1000.0) if sy.get("latency_us") else 0.0))
    m = s["metadata"]
    w("  metadata: %d open/getdents on the image, %d stat calls"
      % (m["open_getdents"]["count"], m["stat"]["count"]))
    if r["latency_us"]:
        lat = r["latency_us"]
        w("  read latency: p50 %.1f us  p90 %.1f us  p99 %.1f us  max %.1f us"
          % (lat["p50"], lat["p90"], lat["p99"], lat["max"]))
        out += ["", "  read request latency"] + histogram(r["latency_hist_log2_us"], "usecs")
    return out


def parts_lines(s):
    """Each attribution part: its time, share and meaning; lock's reason where it was not measured."""
    a, out = s["attribution"], []
    sch = schema.of_summary(s)
    for p in sch.parts:
        if p not in a["parts_ns"]:  # results from a collector without that part
            continue
        if p == "lock_ns" and not (s.get("lock_wait") or {}).get("available"):
            out.append("    %-11s unavailable: %s" % ("lock", (s.get("lock_wait") or {}).get("why", "not measured")))
            continue
        out.append("    %-11s %9.1f ms  %s  %s" % (p[:-3], a["parts_ns"][p] / 1e6, percent(a["shares"][p], width=5),
                                                  sch.part_meaning[p]))
    if a["wall_ns"]:
        out.append("    parts sum to %.2f %% of request wall time; %d requests had a context switch the kernel did "
                   "not report to fstrace" % (100.0 * (a["wall_ns"] - a["unaccounted_ns"]) / a["wall_ns"],
                                              a["requests_with_missed_events"]))
    return out


def tracer_lines(s):
    """What fstrace cost inside the requests, how it was timed, and its collector process's CPU."""
    tr, out = s.get("tracer") or {}, []
    if tr.get("part_ns") is None:
        return out
    smp, est = tr.get("sampled") or {}, tr.get("estimate") or {}
    out.append("    fstrace's own cost inside the requests: %.1f ms of its handlers' run time (%s of their time)%s"
               % (tr["part_ns"] / 1e6, percent(tr.get("part_share"), width=5),
                  "; %s of their on-CPU samples (95 %%: %.1f-%.1f %%)" % (
                      percent(smp["share"]), 100 * smp["share_95"][0], 100 * smp["share_95"][1])
                  if smp.get("share") is not None else ""))
    if est.get("error_ns_95") is not None:
        out.append("      timing: %s; 95 %% error of the total +-%.2f ms" % (est["method"], est["error_ns_95"] / 1e6))
    elif est.get("method"):
        out.append("      timing: %s" % est["method"])
    col = tr.get("collector") or {}
    if col.get("cpu_ms_per_s") is not None:
        out.append("    the collector process itself: %.1f ms of CPU per second over %s (%.0f ms in all: reading and "
                   "filing the records, its windows and timers)" % (col["cpu_ms_per_s"], col["over"],
                                                                   col["cpu_ns"] / 1e6))
    elif col.get("why"):
        out.append("    the collector process itself: unavailable (%s)" % col["why"])
    return out


def spread_lines(s):
    """How the larger parts spread over the requests, and the read latency up to p99 on a linear scale."""
    a, r, out = s["attribution"], s["reads"], []
    for p, slots in sorted((a.get("part_hist_log2_us") or {}).items()):  # the parts the summary has
        if a["shares"].get(p) and a["shares"][p] >= 0.1 and p != "missed_ns":
            out += ["", "  %s per request (requests with any)" % p[:-3]] + histogram(slots, "usecs")
    if r["count"] and s.get("read_latency_linear_us"):
        lin = s["read_latency_linear_us"]
        out += ["", "  read request latency up to p99, linear (%g us steps)" % lin["step_us"],
                format_linear_counts(lin["counts"], lin["step_us"], "usecs").rstrip("\n")]
    return out


def lock_lines(s):
    lk, out = s.get("lock_wait") or {}, []
    if lk.get("available") and lk["waits"] and lk["wait_us"]:
        out.append("    lock waits: %d in %d requests, per request p50 %.1f us p99 %.1f us (%s)"
                   % (lk["waits"], lk["requests_waiting"], lk["wait_us"]["p50"], lk["wait_us"]["p99"], lk["tier"]))
    spin = lk.get("spin_estimate")
    if spin and spin["samples"]:
        out.append("    on-CPU lock spinning (in oncpu), estimated: %.1f ms (95 %% interval %.1f-%.1f ms), under: %s"
                   % (spin["ns"] / 1e6, spin["ci95_ns"][0] / 1e6, spin["ci95_ns"][1] / 1e6,
                      ", ".join("%s %d" % kv for kv in list(spin["by_function"].items())[:3])))
    return out


def attribution_section(s):
    a = s["attribution"]
    return (heading("where request time went") +
            ["  where request time went (%d ms in requests; first-cut model)" % (a["wall_ns"] // 1000000)] +
            parts_lines(s) + tracer_lines(s) + spread_lines(s) + lock_lines(s))


def readahead_section(s):
    ra = s.get("readahead") or {}
    if ra.get("available") and ra["windows"]:
        return heading("readahead") + [
            "  readahead: %d windows, %d pages for %d of the reads; largest %d pages (device limit %s KiB)"
            % (ra["windows"], ra["pages"], ra["requests_with_readahead"], ra["max_window_pages"],
               ra["device_read_ahead_kb"] if ra["device_read_ahead_kb"] is not None else "?")] + \
            histogram(ra["window_hist_log2_pages"], "pages")
    if ra and not ra.get("available"):
        return heading("readahead") + ["  readahead windows: unavailable (%s)" % ra["why"]]
    return []


def decompression_section(s):
    dec = s.get("decompression") or {}
    est = dec.get("estimate")
    if dec.get("available"):
        out = heading("decompression") + ["  decompression (%s)" % probes_text(dec["probes"])]
        for g in dec["groups"]:
            u = g["unit_us"]
            out.append("    %-8s %-7s %7d units  in %s  out %s  %.1f ms  per unit p50 %.1f us p99 %.1f us  ran in: %s"
                       % (g["fs"], g["alg"], g["units"], size(g["in_bytes"]), size(g["out_bytes"]), g["ns"] / 1e6,
                          u["p50"], u["p99"],
                          ", ".join("%s %d" % (k, v["units"]) for k, v in sorted(g["contexts"].items()))))
        out.append("    inside the reading thread's requests: %.1f ms; elsewhere (kworkers, other tasks): %.1f ms"
                   % (dec["in_requests_ns"] / 1e6, dec["elsewhere_ns"] / 1e6))
        for g in dec["groups"]:
            out += ["    %s %s time per unit" % (g["fs"], g["alg"])] + histogram(g["unit_hist_log2_us"], "usecs")
        return out
    if not est:
        return []
    out = heading("decompression") + [
        "  decompression in the reading tasks, estimated: %.1f ms (95 %% interval %.1f-%.1f ms), %d of %d samples"
        % (est["ns"] / 1e6, est["ci95_ns"][0] / 1e6, est["ci95_ns"][1] / 1e6, est["samples"],
           est["samples_in_requests"]),
        "    method: " + est["method"]]
    if est["by_function"]:
        out.append("    by decompressor: " + ", ".join("%s %d" % kv for kv in list(est["by_function"].items())[:5]))
    return out


def delay_accounting_section(s):
    da = s.get("delay_accounting")
    if not (da and da["threads"]):
        return []
    return heading("I/O wait vs delay accounting") + [
        "  I/O wait vs the kernel's task delay accounting (blkio delay), per thread"] + [
        "    %-16s %7d  kernel %9.1f ms (%d waits)  fstrace %9.1f ms" % (
            t["comm"], t["pid"], t["blkio_delay_ns"] / 1e6, t["blkio_count"], t["fstrace_io_wait_ns"] / 1e6)
        for t in sorted(da["threads"], key=lambda t: -t["blkio_delay_ns"])[:5]]


def offcpu_section(s):
    off = s.get("offcpu")
    if not (off and off["by_reason"]):
        return []
    return heading("off-CPU stacks") + [
        "  off-CPU time by the function it blocked in (kernel stacks at every switch-out in a request)"] + [
        "    %-8s %9.1f ms: %s" % (reason, r["ns"] / 1e6, ", ".join("%s %.1f ms" % (f, ns / 1e6) for f, ns in r["top"]))
        for reason, r in sorted(off["by_reason"].items(), key=lambda kv: -kv[1]["ns"])]


def erofs_section(s):
    er = s.get("erofs")
    if not er:
        return []
    if er.get("basis") == "windows' sample":
        win = er["windowed"]
        out = heading("erofs") + ["  erofs tracepoints, over the whole traced time: %s" % ", ".join(
            "%s %s" % (k, verdict.estimate_text(v)) for k, v in er["events"].items()),
            "    seen in the windows: %s; the workload's reads erofs served: %s" % (
                ", ".join("%s %d" % kv for kv in win["seen"]["events"].items()),
                verdict.estimate_text(win["reads"])),
            "    the figures below are the windows' sample's"]
    else:
        out = heading("erofs") + ["  erofs tracepoints: %s" % ", ".join("%s %d" % kv for kv in er["events"].items())]
    if er.get("pclusters"):
        paired = er.get("pclusters_basis") == "paired in one window"
        out.append("    pclusters the reads needed%s: %d (%s); from the device once %d, more than once %d, "
                   "%s %d" % (" (per window, lookups and reads paired only inside it)" if paired else "",
                              er["pclusters"], size(er["pcluster_bytes"]), er["pclusters_read_once"],
                              er["pclusters_reread"], "no read in the window" if paired else "already in memory",
                              er["pclusters_without_device_read"]))
        if paired:
            out.append("      (biased: a read completing after a window's hooks went off, or again in another "
                       "window, is not seen; not the run's)")
    pr = er["per_request"]["map"]
    if pr["per_request"]:
        out.append("    extents mapped per request that mapped any: p50 %.0f, max %.0f (%d requests)"
                   % (pr["per_request"]["p50"], pr["per_request"]["max"], pr["requests_with"]))
    return out


def fs_caches_section(s):
    fc = s.get("fs_caches") or {}
    if fc and not fc.get("available") and s["run"].get("fs") in (None, "squashfs"):  # only squashfs has them
        return heading("filesystem caches") + ["  filesystem cache hits/misses: unavailable (%s)" % fc["why"]]
    if not (fc.get("available") and fc["groups"]):
        return []
    out = heading("filesystem caches") + ["  filesystem caches (%s)" % probes_text(fc["probes"])]
    for g in fc["groups"]:
        out.append("    %-18s %s %7d lookups  hits %d (%s)  misses %d (%d blocks, %d missed again, %s)"
                   % (g["cache"], g["dev"], g["lookups"], g["hits"], percent(g["hit_ratio"]), g["misses"],
                      g["blocks_missed"], g["blocks_missed_again"], size(g["miss_bytes"])))
        out.append("      per lookup: hit p50 %s p99 %s us, miss p50 %s p99 %s us; misses took %.1f ms" % (
            *(("%.1f" % g[k][q]) if g[k] else "-" for k in ("hit_us", "miss_us") for q in ("p50", "p99")),
            g["miss_ns"] / 1e6))
    if fc.get("misses_per_request"):
        out.append("    misses per request that missed: p50 %.0f, max %.0f (%d requests)"
                   % (fc["misses_per_request"]["p50"], fc["misses_per_request"]["max"], fc["requests_with_misses"]))
    return out


def write_compression_section(s):
    wc = s.get("write_compression") or {}
    if wc and not wc.get("available") and (s.get("writes") or {}).get("count"):
        return heading("compression on write") + ["  compression time per chunk on write: unavailable (%s)"
                                                  % wc["why"]]
    if not (wc.get("available") and wc["groups"]):
        return []
    out = heading("compression on write") + ["  compression on write (%s)" % probes_text(wc["probes"])]
    for g in wc["groups"]:
        out.append("    %-6s %-5s %6d chunks (%d not compressed)  %s -> %s (%s)  %.1f ms  per chunk p50 %.1f us p99 "
                   "%.1f us" % (g["fs"], g["alg"], g["chunks"], g["not_compressed"], size(g["in_bytes"]),
                                size(g["out_bytes"]), "%.2f" % g["ratio"] if g["ratio"] else "-", g["ns"] / 1e6,
                                g["chunk_us"]["p50"], g["chunk_us"]["p99"]))
        out.append("      " + ran_in(g["by_thread"], "chunks"))
    return out


def kworkers_section(s):
    if not (s.get("async_work") or s.get("async_work_unlinked")):
        return []
    out = heading("kworkers")
    for kind, wk in sorted((s.get("async_work") or {}).items()):
        out.append("  %s in kworkers: %s, per item p50 %.1f us p99 %.1f us, queued p50 %s us before running%s" % (
            kind, verdict.work_text(wk), wk["item_us"]["p50"], wk["item_us"]["p99"],
            "%.1f" % wk["queue_delay_us"]["p50"] if wk["queue_delay_us"] else "n/a",
            " (the windows' sample's)" if wk.get("basis") == "windows' sample" else ""))
        if wk.get("by_worker"):
            sampled = wk.get("basis") == "windows' sample"
            out.append("    " + ran_in(wk["by_worker"], "items") + (" (recorded in the windows)" if sampled else ""))
    for kind, wk in sorted((s.get("async_work_unlinked") or {}).items()):
        out.append("  %s in kworkers not caused by the traced devices or requests (another device's, or queued before"
                   " tracing): %s, not counted above" % (kind, verdict.work_text(wk)))
    return out


def diskstats_lines(d):
    """A device's reads as the kernel counted them (/proc/diskstats), and what fstrace did not see of them."""
    dd, out = d["diskstats_delta"], []
    out.append("    kernel diskstats over the run: %d reads, %d sectors, %d merges"
               % (dd["reads"], dd["sectors_read"], dd["reads_merged"]))
    if d.get("unseen_why"):
        out.append("    read requests fstrace's programs never saw: unavailable (%s)" % d["unseen_why"])
    if d.get("unseen_requests"):
        out.append("    LOST: the kernel completed %d read requests (%s sectors) that fstrace's programs never saw;"
                   % (d["unseen_requests"], "?" if d["unseen_sectors"] is None else d["unseen_sectors"]))
        out.append("          the figures for this device cover %d of %d requests" % (
            d["requests_in_window"] if d.get("basis") == "windows' sample" else d["requests"], dd["reads"]))
    if d.get("traced_beyond_diskstats") and d.get("counted_over_diskstats_span"):
        # counted over the same span as the kernel's, widened by what its edges leave uncertain: no edge explains it
        out.append("    %d more requests counted by block_rq_done than the kernel counted over the same span"
                   % d["traced_beyond_diskstats"])
    elif d.get("traced_beyond_diskstats"):
        out.append("    %d more requests traced than the kernel counted: the device is shared with other I/O, whose "
                   "completions at the window's edges are not in the kernel's difference"
                   % d["traced_beyond_diskstats"])
    return out


def write_lines(name, d):
    """A device's write requests: every one traced; recorded only in --budget's windows, the exact count where one
    was made, and what the windows recorded, said as theirs."""
    if d.get("basis") != "windows' sample":
        return ["  device %s (%s): %d write requests, %s" % (name, d["level"], d["write_requests"],
                                                            size(d["write_bytes"]))] if d.get("write_requests") else []
    ex = d.get("exact") or {}
    if ex.get("available") and ex.get("write_requests"):
        return ["  device %s (%s): %d write requests (exact, %s)%s; %d recorded in the windows" % (
            name, d["level"], ex["write_requests"], ex["counted_by"],
            "" if ex.get("write_bytes") is None else ", " + size(ex["write_bytes"]), d["write_requests"])]
    if d.get("write_requests"):
        return ["  device %s (%s): write requests over the whole traced time: unavailable (no exact count); %d "
                "recorded in the windows, %s" % (name, d["level"], d["write_requests"], size(d["write_bytes"]))]
    return []


def device_section(name, d):
    out = heading("device %s (%s)" % (name, d["level"]))
    w = out.append
    out.extend(write_lines(name, d))
    if d.get("basis") == "windows' sample":
        ex = d.get("exact") or {}
        w("  device %s (%s): read requests over the whole traced time: %s%s" % (
            name, d["level"], "%d (exact, %s); " % (ex["requests"], ex["counted_by"]) if ex.get("available") else "",
            verdict.estimate_text(d["windowed"]["requests"])))
        w("    the rest is the windows' sample (block requests recorded only in --budget's windows):")
    if not d.get("requests"):
        return out + ["  device %s (%s): no read requests" % (name, d["level"])]
    w("  device %s (%s): %d read requests, %s, mean %s, %d merges, %d charged to the workload"
      % (name, d["level"], d["requests"], size(d["bytes"]), size(d["mean_bytes"]), d["merges"],
         d["charged_to_workload"]))
    if d.get("by_origin"):
        w("    queued by: " + ", ".join("%s %d (%s)" % (k, v["requests"], size(v["bytes"]))
                                  for k, v in sorted(d["by_origin"].items(), key=lambda kv: -kv[1]["requests"])))
    if d.get("requeued"):
        w("    requeued by the driver and issued again: %d (each one request, its parts summed)" % d["requeued"])
    w("    charged: %s" % ", ".join("%s %d (%s)" % (k, v["requests"], size(v["bytes"]))
                                 for k, v in sorted(d["by_charge"].items()) if v["requests"]))
    w("    aligned: 4 KiB %.1f %% (start %.1f %%), %s unit %.1f %%, crossing a unit boundary %.1f %%"
      % (d["aligned_4k_pct"], d["aligned_4k_start_pct"], size(d["unit_bytes"]), d["aligned_unit_pct"],
         d["cross_unit_pct"]))
    if d.get("q2c_us"):
        w("    queue-to-complete: p50 %.1f us  p99 %.1f us" % (d["q2c_us"]["p50"], d["q2c_us"]["p99"]))
    if d.get("diskstats_delta"):
        out += diskstats_lines(d)
    return out + ["    block request size"] + histogram(d["size_hist_log2_bytes"], "bytes")


def devices_section(s):
    return [line for name, d in s["devices"].items() for line in device_section(name, d)]


def tiers_lines(s):
    """What bounded the requests, the probes by tier, and the figures unavailable with every probe's reason."""
    out = []
    rb = s.get("request_bounds")
    if rb:
        kinds = "; ".join("%s: %s" % (t, ", ".join(k)) for t, k in sorted(rb["groups"].items()))
        if rb["at"] == "filesystem entry points":
            out += verdict.fold("  requests bounded at the traced filesystems' entry points (%s)" % kinds)
        elif rb["at"] != "none":
            out += verdict.fold("  requests bounded by the syscall tracepoints (%s), not at the filesystems' "
                                "entry points: %s" % (kinds, rb["why"]))
    for tier, probes in verdict.tier_groups(s).items():
        out += verdict.titled("probes at tier %s" % tier, probes)
    for why, figs in verdict.unavailable_groups(s).items():
        out += verdict.titled("figures unavailable (%s)" % why, figs, "; ")
    twins = [u for u in s["unavailable"] if verdict.primary_reason(u["why"], s["tiers"]) != u["why"]]
    for u in twins:  # what the figure's other-kernel probes said, in full
        out += verdict.titled("%s: every probe's reason" % verdict.short_figure(u["figure"]), u["why"].split("; "),
                              "; ")
    return out


def losses_lines(s):
    """Dropped records, full kernel tables, expired in-flight state, block requests unseen."""
    d, out = s["drops"] or {}, []
    w = out.append
    w("  dropped records (ring buffer full): %s" % (", ".join("%s %d" % kv for kv in sorted(d.items())) or "none"))
    lost = {k: v for k, v in (s.get("losses") or {}).items() if v}
    if lost:  # a full in-kernel table, or an end event never seen: that work went untraced
        w("  LOST in the kernel (a table was full, or an end event never came): %s"
          % ", ".join("%s %d" % kv for kv in sorted(lost.items())))
    for item in verdict.expired_items(s):  # no end in a long while: not taken for lost, nor left in flight
        w("  in-flight state expired: %s" % item)
    unseen = s.get("unseen_block_requests") or {}
    beyond = s.get("traced_beyond_diskstats") or {}
    w("  block requests the kernel completed unseen by fstrace: %s"
      % (", ".join("%s %d" % kv for kv in sorted(unseen.items())) or
         ("none counted" if beyond or s.get("unseen_block_requests_unknown") else
          "none (records match /proc/diskstats)")))
    for name, why in sorted((s.get("unseen_block_requests_unknown") or {}).items()):
        w("  block requests unseen on %s: unknown (%s)" % (name, why))
    if beyond:  # a shared device: edge completions the kernel's difference lacks could offset lost ones
        w("  traced beyond the kernel's count (device shared with other I/O; losses there cannot be ruled out): %s"
          % ", ".join("%s %d" % kv for kv in sorted(beyond.items())))
    return out


def tiers_section(s):
    return heading("tiers, losses and what could not be measured") + tiers_lines(s) + losses_lines(s)


# the detail under headings, in the order the report prints them
SECTIONS = (requests_section, attribution_section, readahead_section, decompression_section,
            delay_accounting_section, offcpu_section, erofs_section, fs_caches_section, write_compression_section,
            kworkers_section, devices_section, tiers_section)


def render(s, full=True):
    """The verdict (analysis/verdict.py), then with full the detail under headings (SECTIONS)."""
    out = verdict.lines(s)
    if not full:
        out.append("  (detail under headings: fstrace report DIR --full, or report.html in the run directory)")
        return "\n".join(out) + "\n"
    for section in SECTIONS:
        out += section(s)
    return "\n".join(out) + "\n"
