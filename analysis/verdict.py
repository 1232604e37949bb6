"""The verdict: the first screen of every report (run, attach, report; the HTML page opens with it too).

About a dozen lines from a summary (pure functions: summary -> lines): what ran, how fast, where request
time went with the dominant part named, what each traced device did, decompression and how it was
measured, what the tracer cost, and anything lost or unavailable, one line each.  Every number comes from
summary.json as it is (tests/test_verdict.py reads them back); parts are the summary's own
(attribution.parts_ns, records.h FST_PARTS), never a list kept here.
"""
import re
import textwrap

from analysis import amplification
from analysis.baseline import THROUGHPUT_NAMES
from analysis.units import percent, size, us

WIDTH = 100  # wrapped lines (tiers, unavailable figures) fit a terminal of this many columns


def wrap(label, items, sep=", "):
    """'label: a, b, c' wrapped at WIDTH, continuation lines indented under the first item."""
    head = "  %s: " % label
    indent = " " * len(head) if len(head) <= 32 else "      "  # a long label: continue under it, not after it
    return textwrap.wrap(sep.join(items), WIDTH, initial_indent=head, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False) or [head.rstrip()]


def titled(title, items, sep=", "):
    """A title line (wrapped), then the items wrapped under it, six columns in: a long reason and its list."""
    return (textwrap.wrap(title + ":", WIDTH, initial_indent="  ", subsequent_indent="      ",
                          break_on_hyphens=False, break_long_words=False) +
            textwrap.wrap(sep.join(items), WIDTH, initial_indent="      ", subsequent_indent="      ",
                          break_on_hyphens=False, break_long_words=False))


def fold(line):
    """One verdict line wrapped at WIDTH, continued four columns in."""
    return textwrap.wrap(line, WIDTH, subsequent_indent="      ", break_on_hyphens=False,
                         break_long_words=False) or [line]


def short_figure(figure):
    """A figure's name without its explanation ('btrfs compression on write: time and ...' -> 'btrfs
    compression on write'): the verdict names it, the full report explains it."""
    return re.split(r": | \(", figure, 1)[0]


def headline(s):
    run = s["run"]
    if not run.get("workload"):
        return "fstrace: collector results (no run configuration), %.1f s, kernel %s" % (s["wall_s"], run["kernel"])
    if run.get("mode") == "attach":
        return "fstrace attach: %s, %.1f s, kernel %s" % (", ".join(run.get("mounts") or []) or "all filesystems",
                                                          s["wall_s"], run["kernel"])
    cache = run.get("cache") or ""
    if not cache.endswith("cache"):
        cache += " cache"
    return "fstrace: %s on %s (%s), dataset %s, kernel %s" % (run["workload"], run["label"], cache,
                                                              run["dataset_id"], run["kernel"])


def reads_line(s):
    r = s["reads"]
    st = ((s.get("metadata") or {}).get("stat") or {})
    if not r["count"] and st.get("count"):
        # a stat workload: its stat calls are its requests
        line = "  stat calls: %d in %.3f s wall = %.0f/s" % (st["count"], s["wall_s"], st["count"] / s["wall_s"]
                                                              if s["wall_s"] else 0)
        lat = st.get("latency_us")
    else:
        tput = s["throughput_bytes_per_s"]
        line = "  reads: %d requests, %s in %.3f s wall = %s/s" % (r["count"], size(r["bytes"]), s["wall_s"],
                                                                    size(tput) if tput else "n/a")
        lat = r["latency_us"]
    if lat:
        line += "; latency p50 %s, p99 %s" % (us(lat["p50"]), us(lat["p99"]))
    return line


def warm_misses_line(s):
    """A warm run whose reads still missed the page cache: said (their I/O is real and in the figures: not all of
    it is a warm figure), with the proactive reclaim the run found on the machine, which pages out memory it
    judges idle with no memory pressure."""
    run, misses = s["run"], s["reads"].get("pagecache_misses")
    if run.get("cache") != "warm" or not misses:
        return None
    why = run.get("proactive_reclaim")
    if why is None:  # results from before runs looked
        found = "whether this machine reclaims page cache on its own was not recorded"
    elif why:
        found = "this machine reclaims memory it judges idle on its own (%s)" % "; ".join(why)
    else:
        found = "no proactive reclaim found on this machine"
    return "  warm run, yet %d page-cache misses: %s" % (misses, found)


def baseline_line(s):
    """The untraced run's throughput and latency first, then what tracing cost (analysis/baseline.py compare)."""
    b = s.get("baseline")
    if b is None:
        return None
    if b.get("traced_ratio") is None:
        return "  untraced baseline: unavailable (%s)" % b.get("why", "no figure to compare")
    cost = "tracing cost %s of throughput" % percent(1 - b["traced_ratio"])
    if b.get("throughput_bytes_per_s") is None:
        return "  untraced: %.3f s wall; traced: %.3f s (%s)" % (b["wall_s"], s["wall_s"], cost)
    # named for what it measures: fio's bandwidth is not the reads' bytes over the traced wall time (reads_line)
    line = "  untraced, %s: %s/s" % (THROUGHPUT_NAMES.get(b.get("method"), "throughput"),
                                    size(b["throughput_bytes_per_s"]))
    if b.get("latency_us"):
        line += ", p50 %s, p99 %s" % (us(b["latency_us"]["p50"]), us(b["latency_us"]["p99"]))
    # how each side was measured is in summary.json's baseline.method (fio's own figures, or bytes over wall)
    return line + "; traced: %s/s = %.3f of untraced (%s)" % (
        size(b["traced_throughput_bytes_per_s"]), b["traced_ratio"], cost)


def windows_line(s):
    """--budget: how much of the time the request hooks were on, and what the reads seen stand for."""
    w = s.get("request_windows") or {}
    if not w.get("active"):
        return None
    line = "  windows: request hooks attached %s of the time (%d windows, budget %g %%" % (
        percent(w["fraction"] or 0), w["windows"], w["budget_pct"])
    if w.get("always_on_share_in_windows") is not None:
        # the block, filesystem and workqueue programs stay attached: their cost is beside the budget, not in it
        line += "; the programs attached all the time took %s of busy CPU besides" % percent(
            w["always_on_share_in_windows"], digits=2)
    line += ")"
    lost = w.get("traced_reads_lost") or {}
    if "in_windows" in lost:
        # measured on the traced reads themselves, beside the budget's modelled share
        line += "; the traced reads slowed %s in the windows (95 %%: %s to %s), %s over the time" % (
            percent(lost["in_windows"]), percent(lost["interval95"][0]), percent(lost["interval95"][1]),
            percent(lost["over_time"], digits=2))
    if "estimate" not in w:
        return line + "; reads seen %d, no estimate (%s)" % (w["seen"], w.get("why", ""))
    line += "; reads seen %d, in all %s" % (w["seen"], estimate_text(w))
    return line + "; request counts and latencies below are of the windows"


def estimate_text(est):
    """A count the --budget windows sampled, weighted up to the whole traced time ({"estimate", "interval95"}:
    request_windows, analysis/windows.py sampled_count), for people: never printed as if it were exact."""
    if "estimate" not in est:
        return "no estimate (%s)" % est.get("why", "")
    if "interval95" not in est:
        return "≈ %.0f (no interval: %s; windows)" % (est["estimate"], est.get("why", ""))
    return "≈ %.0f (95 %%: %.0f–%.0f, windows)" % (est["estimate"], *est["interval95"])


def scaled_estimate(est, factor):
    """An estimate object (estimate_text's) in another unit: its estimate and interval times factor."""
    out = dict(est)
    if "estimate" in est:
        out["estimate"] = est["estimate"] * factor
    if "interval95" in est:
        out["interval95"] = [x * factor for x in est["interval95"]]
    return out


def work_text(wk):
    """A kind of kworker work's items and time (summary async_work): counted, or where the workqueue hooks were
    windowed, estimated over the whole traced time with what the windows saw."""
    if wk.get("basis") != "windows' sample":
        return "%.1f ms (%d work items)" % (wk["ns"] / 1e6, wk["items"])
    return "%s us (%s work items; seen in the windows: %.1f ms, %d items)" % (
        estimate_text(scaled_estimate(wk["ns"], 1e-3)), estimate_text(wk["items"]), wk["ns"]["seen"] / 1e6,
        wk["items"]["seen"])


def ground_truth_line(s):
    gt = s.get("ground_truth") or {}
    said = []
    if "read_bytes" in gt:
        said.append("%s read%s" % (size(gt["read_bytes"]), ", %d I/Os" % gt["ios"] if "ios" in gt else ""))
    if "write_bytes" in gt:
        said.append("%s written" % size(gt["write_bytes"]))
    return "  workload's own count: " + "; ".join(said) if said else None


def shares(s):
    """[(part name, share)] of request time, largest first, parts with none left out."""
    a = s["attribution"]
    return sorted(((p[:-3], v) for p, v in a["shares"].items() if v), key=lambda kv: -kv[1])


def attribution_lines(s):
    a = s["attribution"]
    if not a["wall_ns"]:
        return ["  time in requests: no requests on the traced filesystems"]
    sh = shares(s)
    head = "time in requests (%.1f ms)" % (a["wall_ns"] / 1e6)
    items = ["%s %s" % (name, percent(v)) for name, v in sh if v >= 0.0005]
    if items:
        items[0] += " (dominant)"
    small = [name for name, v in sh if v < 0.0005]
    if small:
        items.append("under 0.1 %%: %s" % " ".join(small))
    return wrap(head, items)


def device_line(name, d):
    if not d.get("requests"):
        return "  device %s (%s): no read requests" % (name, d["level"])
    own = d.get("workload_reads") or {}
    # a disk the whole system reads: how many of its reads were the traced tasks' (the amplification's)
    mine = " (%d the traced tasks')" % own["requests"] if d["level"] in ("disk", "device") and own else ""
    if mine and d.get("basis") == "windows' sample":
        # the windows' records: a count of the sample, said as such after the whole run's estimate
        mine = " (the traced tasks': %d of the %d seen in the windows)" % (own["requests"], d["requests"])
    line = "  device %s (%s): %s%s, mean %s, 4 KiB-aligned %.1f %%" % (
        name, d["level"], device_reads_text(d), mine, size(d["mean_bytes"]), d["aligned_4k_pct"])
    if d["unit_bytes"] != 4096:
        line += ", %s-unit-aligned %.1f %%" % (size(d["unit_bytes"]), d["aligned_unit_pct"])
    if d.get("q2c_us"):
        line += "; q2c p50 %s p99 %s" % (us(d["q2c_us"]["p50"]), us(d["q2c_us"]["p99"]))
    return line


def device_reads_text(d):
    """A device's read block requests: every one traced; or, recorded only in --budget's windows, the exact count
    where one was made, the windows' estimate, and that the figures after it are the windows' sample's."""
    if d.get("basis") != "windows' sample":
        return "%d reads" % d["requests"]
    ex = d.get("exact") or {}
    exact = "%d reads (exact, %s); " % (ex["requests"], ex["counted_by"]) if ex.get("available") else ""
    return "%s%s reads estimated from %d seen in the windows (mean, alignment, q2c: theirs)" % (
        exact, estimate_text(d["windowed"]["requests"]), d["requests"])


def decompression_line(s):
    dec = s.get("decompression") or {}
    wall = s["attribution"]["wall_ns"]

    def share(ns):
        return " = %s" % percent(ns / wall) if wall else ""
    kworkers = (s.get("async_work") or {}).get("erofs decompression")
    kw = "; in kworkers: %s" % work_text(kworkers) if kworkers else ""
    if dec.get("available"):
        tiers = ", ".join(sorted(set(dec["probes"].values())))
        return ("  decompression: %.1f ms in the readers' requests%s, %.1f ms elsewhere (measured: %s)%s"
                % (dec["in_requests_ns"] / 1e6, share(dec["in_requests_ns"]), dec["elsewhere_ns"] / 1e6, tiers, kw))
    est = dec.get("estimate")
    if est and est.get("samples"):
        return ("  decompression: %.1f ms in the readers' requests%s (sampled: 95%% %.1f-%.1f ms)%s"
                % (est["ns"] / 1e6, share(est["ns"]), est["ci95_ns"][0] / 1e6, est["ci95_ns"][1] / 1e6, kw))
    if kw:
        return "  decompression: none sampled in the readers' requests" + kw
    return None


def tracer_line(s):
    tr = s.get("tracer") or {}
    if tr.get("part_ns") is None:
        return None
    line = "  tracer: %.1f ms in requests" % (tr["part_ns"] / 1e6)
    col = tr.get("collector") or {}
    if tr.get("part_share") is not None:
        line += " = %s" % percent(tr["part_share"])
    est = tr.get("estimate") or {}
    if est.get("error_ns_95") is not None:
        line += " (+-%.1f ms, 1 in %d runs timed)" % (est["error_ns_95"] / 1e6, est["time_every"])
    smp = tr.get("sampled") or {}
    if smp.get("share") is not None:
        line += "; %s of on-CPU samples (95%% %.1f-%.1f %%)" % (percent(smp["share"]), 100 * smp["share_95"][0],
                                                               100 * smp["share_95"][1])
    if col.get("cpu_ms_per_s") is not None:
        line += "; its collector %.1f ms CPU/s" % col["cpu_ms_per_s"]
    return line


def lost_items(s):
    """What the run did not see: dropped records, full kernel tables, end events that never came, block requests
    the kernel completed unseen.  Empty: nothing lost."""
    out = ["%d %s records dropped (ring buffer full)" % (v, k) for k, v in sorted((s.get("drops") or {}).items())
           if v]
    # records.h FST_LOSSES: a full kernel table (*_full), or an end event that never came (*_missed)
    out += ["%d %s%s" % (v, k, " (kernel table full)" if k.endswith("_full") else
                         " (its end never seen)" if k.endswith("_missed") else "")
            for k, v in sorted((s.get("losses") or {}).items()) if v]
    unseen = sorted((s.get("unseen_block_requests") or {}).items())
    if unseen:
        out.append("%d block requests completed unseen (%s)" % (sum(v for _, v in unseen),
                                                               ", ".join("%d on %s" % (v, k) for k, v in unseen)))
    return out


def lost_line(s):
    """The one verdict line for what was lost: every item where they fit, else their totals by kind (each item is
    in `fstrace report DIR --full`), so a run with many kinds of loss still has a verdict that fits a screen."""
    items = lost_items(s)
    unknown = sorted(s.get("unseen_block_requests_unknown") or {})
    if not items and unknown:
        return "  lost: none counted (no drops, no full tables); block requests unseen: unknown on %s (recorded " \
               "only in --budget's windows, no exact count)" % ", ".join(unknown)
    if not items:
        return "  lost: nothing (no drops, no full tables, block requests match /proc/diskstats)"
    line = "  LOST: " + "; ".join(items)
    if len(line) <= WIDTH:
        return line
    losses = s.get("losses") or {}  # records.h FST_LOSSES: each name ends in _full or _missed
    kinds = [("dropped", sum((s.get("drops") or {}).values())),
             ("table full", sum(v for k, v in losses.items() if k.endswith("_full"))),
             ("ends never seen", sum(v for k, v in losses.items() if not k.endswith("_full"))),
             ("block requests unseen", sum((s.get("unseen_block_requests") or {}).values()))]
    return "  LOST: " + ", ".join("%d %s" % (v, k) for k, v in kinds if v) + " (each: report --full)"


def expired_items(s):
    """In-flight state the collector expired: no end event came for it in after_ns (from full in-flight tables
    only, where the header says so; older collectors expired all of it that old, in flight or not).  Empty: none."""
    ex = s.get("expired_in_flight") or {}
    after = "%d s" % (ex["after_ns"] // 10**9) if ex.get("after_ns") else "a while"
    where = " from full in-flight tables" if ex.get("full_buckets_only") else ""
    out = []
    if ex.get("bios") or ex.get("requests"):
        out.append("%d bios, %d block requests with no end in %s expired%s" % (ex.get("bios", 0),
                                                                              ex.get("requests", 0), after, where))
    if ex.get("work_items"):
        out.append("%d filesystem work items queued and not seen to run in %s expired%s" % (ex["work_items"], after,
                                                                                           where))
    return out


def primary_reason(why, probes):
    """The reason a figure is unavailable, without what its other-kernel twins add ('; twin: why')."""
    clauses = why.split("; ")
    for i, c in enumerate(clauses[1:], 1):
        if c.split(": ", 1)[0] in probes:
            return "; ".join(clauses[:i])
    return why


def unavailable_groups(s):
    """{reason: [figure]} of the figures this run could not measure."""
    out = {}
    for u in s.get("unavailable") or []:
        out.setdefault(primary_reason(u["why"], s.get("tiers") or {}), []).append(u["figure"])
    return out


def tier_groups(s):
    """{tier: [probe]}; unavailable probes apart, by reason: {"unavailable (reason)": [probe]}."""
    out = {}
    for probe, t in sorted((s.get("tiers") or {}).items()):
        key = t["tier"] if t["tier"] != "unavailable" else "unavailable (%s)" % (t["why"] or "probe could not attach")
        out.setdefault(key, []).append(probe)
    return out


def lines(s):
    """The verdict, as lines (no trailing newlines)."""
    out = [headline(s)]
    base = baseline_line(s)
    if base:  # the truth first: what the workload does with nothing attached
        out.append(base)
    out.append(reads_line(s))
    warm = warm_misses_line(s)
    if warm:
        out.append(warm)
    win = windows_line(s)
    if win:
        out.append(win)
    gt = ground_truth_line(s)
    if gt:
        out.append(gt)
    out += attribution_lines(s)
    for name, d in s["devices"].items():
        out += fold(device_line(name, d))
    for line in amplification.lines(s):
        out += fold(line)
    for extra in (decompression_line(s), tracer_line(s)):
        if extra:
            out += fold(extra)
    failed = s.get("failed_requests") or {}
    if failed:  # named, so a run on a damaged image cannot pass for a fast one
        out += fold("  FAILED requests: %s" % ", ".join("%s x%d" % kv for kv in sorted(failed.items())))
    out.append(lost_line(s))
    expired = expired_items(s)
    if expired:
        out += wrap("expired", expired, "; ")
    groups = unavailable_groups(s)
    if groups:
        out += wrap("unavailable", ["%s [%s]" % (", ".join(short_figure(f) for f in figs), why)
                                    for why, figs in groups.items()], "; ")
    return [part for line in out for part in (fold(line) if len(line) > WIDTH else [line])]


def render(s):
    return "\n".join(lines(s)) + "\n"
