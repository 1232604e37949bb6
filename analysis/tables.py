"""Seed-style tables with causes: pure functions from run summaries (and bench documents) to rows and text."""
import csv
import functools
import io
import os
import statistics

from analysis import amplification, schema
from analysis.units import percent

SCHEMA_VERSION = 1


def row_from_summary(s):
    """The figures one run contributes to a bench table."""
    a = attribution_of(s)
    shares = a["shares"]
    loop = [d for d in s["devices"].values() if d.get("level") == "loop"]
    loop = loop[0] if loop else {}
    wrote = bool(s.get("writes", {}).get("count")) and not s["reads"]["count"]
    sch = schema.of_summary(s)
    other_parts = sch.parts_in("other")  # kworker, lock and tracer parts have their own columns
    other = [shares.get(k) for k in other_parts]
    amp = amplification.row(s.get("amplification") or amplification.figures(s))
    return dict(amp, **{
        "label": s["run"]["label"], "fs": s["run"]["fs"], "workload": s["run"]["workload"],
        "storage": (s["run"].get("storage") or {}).get("name"),
        "wall_s": s["wall_s"], "read_bytes": s["reads"]["bytes"], "requests": s["reads"]["count"],
        "write_bytes": (s.get("writes") or {}).get("bytes"),
        "workload_bw_bytes": (s.get("ground_truth") or {}).get("bw_bytes"),  # fio's own bandwidth
        "io_wait_share": shares.get("io_wait_ns"), "oncpu_share": shares.get("oncpu_ns"),
        "other_share": None if None in other else sum(other),
        "lock_share": shares.get("lock_ns"),
        "kworker_share": (None if not set(sch.parts_in("kworker")) <= set(a["parts_ns"]) or not a["wall_ns"] else
                          sum(a["parts_ns"][k] for k in sch.parts_in("kworker")) / a["wall_ns"]),
        "io_wait_s": a["parts_ns"]["io_wait_ns"] / 1e9, "oncpu_s": a["parts_ns"]["oncpu_ns"] / 1e9,
        "other_s": sum(a["parts_ns"][k] for k in other_parts) / 1e9,
        "decompression_share": _decompression_share(s.get("decompression", {}), a["wall_ns"]),
        "decompression_note": None if s.get("decompression", {}).get("available") else
        "unavailable: " + s.get("decompression", {}).get("why", "no decompression probes"),
        "loop_op": "write" if wrote else "read",
        "loop_requests": loop_requests(loop, "write_requests" if wrote else "requests"),
        "loop_mean_bytes": (loop["write_bytes"] / loop["write_requests"] if loop.get("write_requests") else None)
        if wrote else loop.get("mean_bytes"),
        "loop_aligned_4k_pct": None if wrote else loop.get("aligned_4k_pct"),
        "loop_unseen_requests": loop.get("unseen_requests"),
        "pagecache_misses": s["reads"].get("pagecache_misses", 0) + s["metadata"]["open_getdents"].get(
            "pagecache_misses", 0),
        # the same run untraced (runner.run_untraced): what the configuration does with no tracer attached
        "untraced_wall_s": (s.get("baseline") or {}).get("wall_s"),
        "untraced_throughput_bytes_per_s": (s.get("baseline") or {}).get("throughput_bytes_per_s"),
        "traced_ratio": (s.get("baseline") or {}).get("traced_ratio"),
    })


def loop_requests(loop, key="requests"):
    """The loop device's read (key "requests") or write ("write_requests") requests in a table: every one traced;
    recorded only in --budget's windows, its exact count where one was made, else none (the windows' count is not
    the run's)."""
    if loop.get("basis") != "windows' sample":
        return loop.get(key)
    exact = loop.get("exact") or {}
    return exact.get(key) if exact.get("available") else None


def attribution_of(s):
    """The attribution a run's table row shows: its requests on the image, or for stat workloads (no such
    requests) their stat calls, all paths."""
    a = s["attribution"]
    if not a["wall_ns"] and s["metadata"]["stat"].get("attribution", {}).get("wall_ns"):
        return s["metadata"]["stat"]["attribution"]
    return a


def _decompression_share(dec, wall_ns):
    """Measured (fentry/kprobe) decompression in the requests, else the sampling estimate, else None."""
    if not wall_ns:
        return None
    if dec.get("available"):
        return dec["in_requests_ns"] / wall_ns
    if dec.get("estimate"):
        return dec["estimate"]["ns"] / wall_ns
    return None


def _median_row(rows):
    """The run whose time is the median (its causes are shown beside the min/median/max times)."""
    ordered = sorted(rows, key=lambda r: r["wall_s"])
    return ordered[(len(ordered) - 1) // 2]


def group(doc):
    """{(workload, label): [rows]} in the order the bench ran them."""
    out = {}
    for r in doc["rows"]:
        out.setdefault((r["workload"], r["label"]), []).append(r)
    return out


CAUSE_SHARES = (("io_wait_share", "I/O wait"), ("oncpu_share", "on-CPU"), ("kworker_share", "kworker"),
                ("lock_share", "lock"), ("other_share", "other"))


def cause(r):
    """The cause column of a seed table: the part of request time that dominates, and the figures that go with it
    (device requests and bytes per byte received, decompression) from one run's row."""
    shares = [(r.get(k), name) for k, name in CAUSE_SHARES if r.get(k) is not None]
    out = []
    if shares:
        v, name = max(shares)
        out.append("%s %s" % (name, percent(v, digits=0, space=False)))
    if r.get("decompression_share") is not None:
        out.append("decomp %s%s" % (percent(r["decompression_share"], digits=0, space=False),
                                    "" if r.get("decompression_note") is None else " (sampled)"))
    if r.get("loop_requests"):
        out.append("%d dev %s, %.1f KiB mean" % (r["loop_requests"], "writes" if r.get("loop_op") == "write"
                                                 else "reads", (r.get("loop_mean_bytes") or 0) / 1024))
    if r.get("loop_read_per_received") is not None:
        out.append("dev/B %.2f" % r["loop_read_per_received"])
    dec = amplification.decompressed_text(r)
    if dec not in ("-", "n/a"):
        out.append("dec/B %s" % dec)
    if r.get("reread_share"):
        out.append("reread %s" % percent(r["reread_share"], digits=0, space=False))
    return ", ".join(out)


# a share in a bench table's column: four columns and the sign, '  n/a' when unknown
_pct = functools.partial(percent, digits=0, width=4, space=False, none="  n/a")


def _time(t):
    return "%.3f" % t if t < 10 else "%.2f" % t


def render_bench(doc):
    out = []
    w = out.append
    w("fstrace bench: dataset %s, %s cache, %d run(s) each, kernel %s" % (doc["dataset_id"], doc["cache"],
                                                                          doc["runs"], doc["kernel"]))
    for part in sorted({i["part"] for i in doc["images"]}):
        w("")
        w("image sizes (%s)" % part)
        w("  %-26s %14s %10s %9s" % ("config", "bytes", "ratio", "build s"))
        for i in doc["images"]:
            if i["part"] == part:
                w("  %-26s %14d %10.3f %9.1f" % (i["label"], i["bytes"], i["ratio_to_uncompressed"],
                                                 i["build_seconds"]))
    groups = group(doc)
    for wl in dict.fromkeys(r["workload"] for r in doc["rows"]):
        w("")
        w("%s" % wl)
        w("  %-26s %-23s %6s %6s %6s %6s %6s %7s %9s %8s %7s %9s %6s %7s %6s" % (
            "config", "time s min/med/max", "ioWait", "onCPU", "kwork", "lock", "other", "decomp", "loop req",
            "mean KiB",
            "4K-al", "pc miss", "dev/B", "dec/B", "reread"))
        keyed = [(k, v) for k, v in groups.items() if k[0] == wl]
        keyed.sort(key=lambda kv: statistics.median(r["wall_s"] for r in kv[1]))
        for (_, label), rows in keyed:
            times = [r["wall_s"] for r in rows]
            m = _median_row(rows)
            w("  %-26s %7s %7s %7s %6s %6s %6s %6s %6s %7s %9s %8s %7s %9s %6s %7s %6s" % (
                label, _time(min(times)), _time(statistics.median(times)), _time(max(times)),
                _pct(m["io_wait_share"]), _pct(m["oncpu_share"]), _pct(m.get("kworker_share")),
                _pct(m.get("lock_share")), _pct(m["other_share"]),
                _pct(m["decompression_share"]),
                m["loop_requests"] if m["loop_requests"] is not None else "-",
                "%.1f" % (m["loop_mean_bytes"] / 1024) if m["loop_mean_bytes"] else "-",
                "%.0f%%" % m["loop_aligned_4k_pct"] if m["loop_aligned_4k_pct"] is not None else "-",
                m["pagecache_misses"], amplification.ratio_text(m.get("loop_read_per_received")),
                amplification.decompressed_text(m), _pct(m.get("reread_share"))))
    costs = [(k, [r.get("traced_ratio") for r in v]) for k, v in groups.items()]
    costs = [(k, [x for x in v if x is not None]) for k, v in costs]
    if any(v for _, v in costs):
        w("")
        w("untraced beside traced (each run also ran untraced, in the same cache state, order alternating)")
        w("  %-18s %-26s %16s %10s" % ("workload", "config", "untraced time s", "traced/untraced throughput"))
        for (wl, label), rows in groups.items():
            ratios = [r["traced_ratio"] for r in rows if r.get("traced_ratio") is not None]
            walls = [r["untraced_wall_s"] for r in rows if r.get("untraced_wall_s") is not None]
            w("  %-18s %-26s %16s %10s" % (wl, label, _time(statistics.median(walls)) if walls else "-",
                                           "%.3f" % statistics.median(ratios) if ratios else "-"))
    w("")
    w("ioWait/onCPU/kwork/lock/other: shares of the time spent in requests on the image (median run; stat workloads: "
      "in their stat calls, all paths); kwork: asleep while a kworker ran filesystem work that woke the "
      "request (erofs decompression, btrfs end-io), or waited to run it; lock: asleep on a contended mutex/rwsem; "
      "decomp: "
      "share of it decompressing in the requesting thread (n/a: no fentry/kprobe on this kernel); "
      "loop req: block requests on the image's loop device; "
      "pc miss: page-cache folios added during the workload's requests; dev/B: bytes read from the image's "
      "loop device per byte the workload received; dec/B: bytes decompressed per byte received (<=: a bound from "
      "the units looked up, n/a: uncompressed image, -: not measurable here); reread: share of the loop device's "
      "bytes read more than once.")
    return "\n".join(out) + "\n"


CSV_FIELDS = ["workload", "label", "fs", "run", "wall_s", "read_bytes", "requests", "loop_op", "io_wait_share",
              "oncpu_share",
              "other_share", "kworker_share", "lock_share", "io_wait_s", "oncpu_s", "other_s", "decompression_share",
              "loop_requests", "loop_mean_bytes", "loop_aligned_4k_pct",
              "loop_unseen_requests", "pagecache_misses", "loop_read_per_received", "backing_read_per_received",
              "decompressed_per_received", "decompressed_method", "reread_share", "unneeded_share", "storage", "dir"]


def render_csv(doc):
    buf = io.StringIO()
    wr = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore")
    wr.writeheader()
    for r in doc["rows"]:
        wr.writerow(r)
    return buf.getvalue()


def load_rows(path, summary_of):
    """Rows of a bench directory (bench.json, read as every file of a results directory is: results.load_json, a
    regular file, bounded in size) or of a single run directory: summary_of(path), its summary."""
    from analysis import results
    bench = os.path.join(path, "bench.json")
    if os.path.exists(bench):
        return results.load_json(bench)["rows"]
    return [dict(row_from_summary(summary_of(path)), run=1)]


COMPONENTS = ("io_wait_s", "oncpu_s", "other_s")


def compare(rows_a, rows_b):
    """For every (workload, config) in both: median times, their ratio, and the component that moved most."""
    ga, gb = group({"rows": rows_a}), group({"rows": rows_b})
    out = []
    for key in ga:
        if key not in gb:
            continue
        ta = statistics.median(r["wall_s"] for r in ga[key])
        tb = statistics.median(r["wall_s"] for r in gb[key])
        ma, mb = _median_row(ga[key]), _median_row(gb[key])
        # absolute seconds per component, so a share that grows only because another shrank is not blamed
        deltas = {c: mb[c] - ma[c] for c in COMPONENTS}
        moved = max(deltas, key=lambda c: abs(deltas[c]))
        out.append({"workload": key[0], "label": key[1], "time_a": ta, "time_b": tb, "ratio": tb / ta if ta else None,
                    "component_delta_s": deltas, "moved_most": moved,
                    "loop_requests": (ma["loop_requests"], mb["loop_requests"]),
                    "pagecache_misses": (ma["pagecache_misses"], mb["pagecache_misses"])})
    return out


def render_compare(rows):
    if not rows:
        return "nothing to compare: no (workload, configuration) is in both result sets\n"
    lines = ["%-14s %-26s %9s %9s %7s  %-14s %s" % ("workload", "config", "A s", "B s", "B/A", "moved most",
                                                     "component change (s): io_wait / on-CPU / other")]
    for r in rows:
        d = r["component_delta_s"]
        # "-": a collector run alone names neither workload nor configuration
        lines.append("%-14s %-26s %9.3f %9.3f %7.3f  %-14s %+.3f / %+.3f / %+.3f" % (
            r["workload"] or "-", r["label"] or "-", r["time_a"], r["time_b"], r["ratio"] or 0, r["moved_most"][:-2],
            d["io_wait_s"], d["oncpu_s"], d["other_s"]))
    return "\n".join(lines) + "\n"
