"""fstrace compare of two runs of one workload, whatever their configurations (erofs against squashfs, a cluster
size against another, a storage profile against none): both verdicts side by side, the difference in every
attribution part, the read amplification of each, and the parts that account for most of the difference.

Pure functions over two summaries (summary.json); every number is one summary's, or B's minus A's.
"""
import textwrap

from analysis import amplification, schema, tables, verdict
from analysis.units import percent, size

SIDE_WIDTH = 72  # each verdict's column: two side by side fit 150 columns


def _run_name(s):
    r = s["run"]
    extra = []
    if (r.get("storage") or {}).get("name"):
        extra.append("storage " + r["storage"]["name"])
    if r.get("iops_cap"):
        extra.append("IOPS cap %d" % r["iops_cap"])
    return "%s%s" % (r.get("label") or "?", " (%s)" % ", ".join(extra) if extra else "")


def pair(a, b):
    """The comparison of summary b against summary a: per part A, B and B - A (ns), the same for time in
    requests and wall time, both runs' amplification rows, and the parts that account for most of the
    difference."""
    pa, pb = tables.attribution_of(a), tables.attribution_of(b)
    # the parts as each run's collector had them, A's order first
    order = list(schema.of_summary(a).parts) + [p for p in schema.of_summary(b).parts
                                                if p not in schema.of_summary(a).parts]
    parts = [p for p in order if p in pa["parts_ns"] or p in pb["parts_ns"]]
    rows = [{"part": p[:-3], "a_ns": pa["parts_ns"].get(p), "b_ns": pb["parts_ns"].get(p),
             "delta_ns": (pb["parts_ns"][p] - pa["parts_ns"][p])
             if p in pa["parts_ns"] and p in pb["parts_ns"] else None} for p in parts]
    delta_wall = pb["wall_ns"] - pa["wall_ns"]
    amp_a = a.get("amplification") or amplification.figures(a)
    amp_b = b.get("amplification") or amplification.figures(b)
    return {"a": _run_name(a), "b": _run_name(b), "workload": a["run"].get("workload"),
            "same_workload": a["run"].get("workload") == b["run"].get("workload"),
            "wall_s": (a["wall_s"], b["wall_s"]), "requests_ns": (pa["wall_ns"], pb["wall_ns"]),
            "requests_delta_ns": delta_wall, "parts": rows,
            "amplification": (amplification.row(amp_a), amplification.row(amp_b)),
            "amplification_detail": (amp_a, amp_b),
            "received_bytes": (amp_a["received_bytes"], amp_b["received_bytes"]),
            "figures": (figures(a, amp_a), figures(b, amp_b)),
            "accounts_for": accounts_for(rows, delta_wall)}


def accounts_for(rows, delta_ns):
    """The one or two parts that account for most of the change in time in requests: the part that moved most
    in the direction of the change, and the next one too when the first covers less than two thirds of it."""
    if not delta_ns:
        return []
    sign = 1 if delta_ns > 0 else -1
    moved = sorted((r for r in rows if r["delta_ns"] and r["delta_ns"] * sign > 0),
                   key=lambda r: -abs(r["delta_ns"]))
    out = []
    for r in moved[:2]:
        out.append({"part": r["part"], "delta_ns": r["delta_ns"], "share_of_change": r["delta_ns"] / delta_ns})
        if r["delta_ns"] / delta_ns >= 2 / 3:
            break
    return out


def _side_by_side(left, right, width=SIDE_WIDTH):
    def rewrap(lines):
        joined = []
        for line in lines:  # a verdict line's continuations (4+ columns in) back onto it, then wrapped anew
            if joined and line.startswith("    "):
                joined[-1] += " " + line.strip()
            else:
                joined.append(line)
        return [p for line in joined for p in (textwrap.wrap(line, width, subsequent_indent="      ",
                                                              break_on_hyphens=False, break_long_words=True)
                                                or [""])]
    left, right = rewrap(left), rewrap(right)
    n = max(len(left), len(right))
    left += [""] * (n - len(left))
    right += [""] * (n - len(right))
    return ["%-*s | %s" % (width, a, b) for a, b in zip(left, right)]


def _ms(ns):
    return "-" if ns is None else "%.1f" % (ns / 1e6)


def _amp_cells(r):
    return [amplification.ratio_text(r.get("loop_read_per_received")),
            amplification.ratio_text(r.get("backing_read_per_received")), amplification.decompressed_text(r),
            percent(r.get("reread_share"), none="-"), percent(r.get("unneeded_share"), none="-")]


def render(c, sa, sb, name_a="A", name_b="B"):
    """The text of a pair comparison (sa, sb: the two summaries, for their verdicts)."""
    out = ["compare: %s %s  vs  %s %s%s" % (name_a, c["a"], name_b, c["b"],
                                           "" if c["same_workload"] else "  (different workloads!)"), ""]
    out += _side_by_side(["%s: %s" % (name_a, c["a"])] + verdict.lines(sa),
                         ["%s: %s" % (name_b, c["b"])] + verdict.lines(sb))
    out += ["", "time per part of the requests (ms; %s - %s = difference)" % (name_b, name_a),
            "  %-12s %12s %12s %12s" % ("part", name_a, name_b, "difference")]
    for r in c["parts"]:
        out.append("  %-12s %12s %12s %12s" % (r["part"], _ms(r["a_ns"]), _ms(r["b_ns"]),
                                               "-" if r["delta_ns"] is None else "%+.1f" % (r["delta_ns"] / 1e6)))
    out.append("  %-12s %12s %12s %+12.1f" % ("in requests", _ms(c["requests_ns"][0]), _ms(c["requests_ns"][1]),
                                             c["requests_delta_ns"] / 1e6))
    out.append("  %-12s %12.1f %12.1f %+12.1f" % ("wall", 1e3 * c["wall_s"][0], 1e3 * c["wall_s"][1],
                                                  1e3 * (c["wall_s"][1] - c["wall_s"][0])))
    out += ["", "read amplification (per byte received: %s by %s, %s by %s)" % (
        size(c["received_bytes"][0]), name_a, size(c["received_bytes"][1]), name_b),
            "  %-6s %10s %10s %10s %10s %10s" % ("", "loop/B", "backing/B", "decomp/B", "re-read", "unneeded")]
    for name, r in zip((name_a, name_b), c["amplification"]):
        out.append("  %-6s %10s %10s %10s %10s %10s" % ((name,) + tuple(_amp_cells(r))))
    if c["accounts_for"]:
        said = ["%s %+.1f ms (%s of it)" % (x["part"], x["delta_ns"] / 1e6, percent(x["share_of_change"], digits=0))
                for x in c["accounts_for"]]
        out += ["", "most of the %s of %.1f ms in requests: %s" % (
            "increase" if c["requests_delta_ns"] > 0 else "decrease", abs(c["requests_delta_ns"]) / 1e6,
            ", ".join(said))]
        out += ["  with it: " + w for w in companions(c, name_a, name_b)]
    else:
        out += ["", "no difference in time in requests"]
    return "\n".join(out) + "\n"


# the figures that may go with a part's change, each with the parts it goes with: the image device's requests (their
# count, mean size and queue-to-complete latency) and its bytes with I/O wait (and the uninterruptible sleep that
# waits on others' I/O), decompression with the CPU parts
IO_PARTS = {"io_wait", "dsleep"}
CPU_PARTS = {"oncpu", "worker", "worker_wait"}
FIGURES = (("device_requests", "device requests", IO_PARTS, "%d"),
           ("device_mean_bytes", "mean request size", IO_PARTS, "%.1f KiB"),
           ("device_q2c_mean_us", "mean queue-to-complete", IO_PARTS, "%.0f us"),
           ("loop_read_per_received", "loop device bytes per byte received", IO_PARTS, "%.2f"),
           ("backing_read_per_received", "backing device bytes per byte received", IO_PARTS, "%.2f"),
           ("decompressed_per_received", "decompressed per byte received", CPU_PARTS, "%.2f"),
           ("unit_lookups", "compressed unit lookups", CPU_PARTS, "%d"))


def figures(s, amp):
    """The figures of FIGURES of one run (None: not measured on it): the requests of the device the filesystem sits
    on (its image's loop device, else its disk) from the summary's devices, the amplification row, the lookups of
    compressed units (erofs pclusters looked up, squashfs blocks read into its caches).  On a disk, which the rest
    of the system reads too, the count is the traced tasks' own reads (its workload_reads)."""
    devices = (s.get("devices") or {}).values()
    own = [d for d in devices if d.get("level") == "loop"] or [d for d in devices if d.get("level") == "disk"]
    own = own[0] if own else {}
    out = dict(amplification.row(amp))
    out["device_requests"], basis = device_requests(own)
    out["device_mean_bytes"] = own["mean_bytes"] / 1024 if own.get("mean_bytes") is not None else None
    out["device_q2c_mean_us"] = (own.get("q2c_us") or {}).get("mean")
    # what each device figure is where it is not every request's (--budget's windows)
    out["basis"] = {}
    if own.get("basis") == "windows' sample":
        out["basis"] = {"device_requests": basis, "device_mean_bytes": "the windows' sample's",
                        "device_q2c_mean_us": "the windows' sample's"}
    lookups = amp.get(amplification.UNIT_LOOKUPS) or {}
    out["unit_lookups"] = (None if not lookups.get("available") else
                           sum(int(k) * v for k, v in lookups["times"].items()) if "times" in lookups else
                           lookups["units"])
    er = s.get("erofs") or {}
    if out["unit_lookups"] is not None and er.get("basis") == "windows' sample":
        # erofs's lookups were recorded only in the windows: the estimate of all of them, not the sample's count
        est = er["pcluster_lookups"]
        out["unit_lookups"] = est.get("estimate")
        out["basis"]["unit_lookups"] = "estimated: %s" % verdict.estimate_text(est)
    return out


def device_requests(own):
    """The read requests over the whole run of the device the filesystem sits on (a summary's device), and what
    they are: every one recorded; where --budget recorded them only in its windows, the exact count where
    block_rq_done made one, else the windows' estimate, never the sample's count as a total.  On a disk, the
    traced tasks' own reads (workload_reads): the windows saw only a sample of them, and the exact count is the
    whole system's, so none then."""
    if own.get("basis") != "windows' sample":
        mine = own.get("workload_reads") if own.get("level") == "disk" else None
        return (mine["requests"] if mine else own.get("requests")), "every request"
    if own.get("level") == "disk":
        return None, "the traced tasks' own reads on the disk were recorded only in --budget's windows"
    ex = own.get("exact") or {}
    if ex.get("available"):
        return ex["requests"], "exact (%s)" % ex["counted_by"]
    est = (own.get("windowed") or {}).get("requests") or {}
    if "estimate" not in est:
        return None, "recorded only in --budget's windows, no estimate (%s)" % est.get("why", "")
    return est["estimate"], "estimated: %s" % verdict.estimate_text(est)


def _change(a, b):
    """How far a figure moved: the factor between A and B, either way (2 for double or half), infinite from or to
    zero."""
    if a == b:
        return 1.0
    if not a or not b:
        return float("inf")
    return max(abs(b / a), abs(a / b))


def moved_with(c):
    """The figures that go with the parts accounting for the difference, both runs having them, ranked by how
    far each moved (the one that moved most first): [(key, what, A, B, factor)]; and those a run lacks."""
    fa, fb = c["figures"]
    parts = {x["part"] for x in c["accounts_for"]}
    ranked, missing = [], []
    for key, what, goes_with, fmt in FIGURES:
        if not parts & goes_with:
            continue
        if fa.get(key) is None or fb.get(key) is None:
            missing.append(what)
            continue
        ranked.append((key, what, fmt, fa[key], fb[key], _change(fa[key], fb[key])))
    ranked.sort(key=lambda x: -x[5])
    return ranked, missing


def companions(c, name_a, name_b):
    """The figures that moved with the parts that account for the difference, most first: "what" A (A) -> B (B),
    and how many times over; then those one of the runs could not measure."""
    ranked, missing = moved_with(c)
    fa, fb = c["figures"]
    out = ["%s %s (%s) -> %s (%s), %s%s" % (what, fmt % a, name_a, fmt % b, name_b,
                                            "unchanged" if factor == 1 else "x%.2f" % (b / a) if a else "from 0",
                                            bases_text(key, fa, fb, name_a, name_b))
           for key, what, fmt, a, b, factor in ranked]
    if missing:
        out.append("not measured in both: " + ", ".join(missing))
    return out


def bases_text(key, fa, fb, name_a, name_b):
    """'; A: what, B: what' of a figure a run took from --budget's windows (figures' basis); '' where both
    counted every request."""
    said = ["%s: %s" % (name, f["basis"][key]) for name, f in ((name_a, fa), (name_b, fb))
            if key in (f.get("basis") or {})]
    return "; " + ", ".join(said) if said else ""
