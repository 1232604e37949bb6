"""Which probe measured what: the tiers, what bounded the requests, and the figures this run could not measure
with the reason (printed instead of zeros).
"""
from analysis import schema
from analysis.devices import device_level
from analysis.selection import traced_fs_types


def boundary_figures(h):
    """The figures of the probes that bound requests: the syscall tracepoints' and the filesystem entry points'
    (a header with request_bounds; before it, only the former's)."""
    sch = schema.of(h)
    return (sch.figure("req_start"), sch.figure("req_end")) + ((sch.figure("req_bounds"),)
                                                                 if h.get("request_bounds") else ())


def unused_boundary(h, p):
    """A request-boundary probe the run did not use (the syscall tracepoints', or a filesystem entry point's):
    the header's request_bounds says what bounded the requests and why, not each such probe."""
    return bool(h.get("request_bounds")) and p["tier"] == "unavailable" and p["figure"] in boundary_figures(h)


def tiers(res):
    return {p["probe"]: {"tier": p["tier"], "measures": p["measures"], "why": p["why"]}
            for p in res.header.get("probes", []) if not unused_boundary(res.header, p)}


def request_bounds(h):
    """What bounded the requests (the header's request_bounds) and each kind's tiers, grouped: {tiers: [kind]};
    None for files from before the filesystems' entry points could (the syscall tracepoints did)."""
    rb = h.get("request_bounds")
    if not rb:
        return None
    groups = {}
    for kind, tier in rb["kinds"].items():
        groups.setdefault(tier, []).append(kind)
    return {"at": rb["at"], "why": rb["why"], "kinds": rb["kinds"], "groups": groups}


def decompression_probes(res):
    """The probes that time decompression (or the copy of uncompressed units) per unit, by figure id."""
    return [p for p in res.header.get("probes", []) if p["figure"] in res.schema.decomp_figures]


def others_figure(res, p):
    """A probe whose figure belongs to a filesystem this run did not trace (the schema's figure_fs): not this
    run's to miss."""
    traced, fs = traced_fs_types(res.config), res.schema.figure_fs.get(p["figure"])
    return traced is not None and fs is not None and fs not in traced


def unavailable(res):
    """Figures this run could not measure, with the reason; printed instead of zeros.  Only the traced
    filesystems' own figures (and those of any filesystem): an ext4 run does not miss squashfs's."""
    out = []
    all_dec = decompression_probes(res)
    dec = [p for p in all_dec if not others_figure(res, p)]
    # a figure some probe measured is available, even if its other-kernel twin (same figure id) is not
    measured = {p["figure"] for p in res.header.get("probes", []) if p["tier"] != "unavailable"}
    seen = {}
    for p in res.header.get("probes", []):
        if unused_boundary(res.header, p) or others_figure(res, p) or p in all_dec:
            continue
        if p["tier"] == "unavailable" and p["figure"] not in measured:
            why = p["why"] or "probe could not attach"
            if p["figure"] in seen:  # twins for other kernels: one line, each twin's reason
                seen[p["figure"]]["why"] += "; %s: %s" % (p["probe"], why)
                continue
            seen[p["figure"]] = {"figure": p["measures"], "why": why}  # the figure in words, for the report
            out.append(seen[p["figure"]])
    if dec and all(p["tier"] == "unavailable" for p in dec):
        order = {name: int(v) for v, name in res.header.get("enums", {}).get("fs", {}).items()}
        fss = sorted({res.schema.figure_fs.get(p["figure"]) for p in dec} - {None}, key=lambda f: order.get(f, 0))
        out.append({"figure": "decompression time (%s)" % (", ".join(fss) if fss else "erofs, squashfs, btrfs"),
                    "why": sorted({p["why"] for p in dec})[0]})
    # a loop device's backing-disk I/O charged to its reader: missed only where a loop device or the disk behind
    # one was traced
    loops = [d for d in res.header.get("devices", []) if device_level(d) in ("loop", "backing")]
    if not res.header.get("loop_charging") and loops:
        out.append({"figure": "backing-device I/O charged to the reader",
                    "why": "loop work function addresses not readable from /proc/kallsyms"})
    return out
