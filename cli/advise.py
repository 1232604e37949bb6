"""fstrace advise: which filesystem, compressor and cluster size for this tree and this way of reading it.

It is fstrace bench (cli/bench.py: the same images, cache, runs and bench directories) over a candidate grid, then
a ranking by the mix's weighted time, the Pareto front of image size vs time, and cause sentences built from the
measured figures (analysis/advice.py).  With --iops-cap the grid is run a second time on the capped device.
"""
import argparse
import json
import os

from analysis.load import load_results
from analysis.render import write_html
from cli import bench, storage
from common.system import FstraceError, progress

# The named mixes: how a root filesystem is read, as seed workloads (workloads/catalog.py) and weights.
MIXES = {
    "boot": [("tar-data", 1)],   # boot reads (nearly) everything once, in a fixed order
    "app": [("cat-500", 1)],     # an application start reads a few files, scattered over the tree
    "update": [("stat-all", 1)],  # a package update stats every file
}
DEFAULT_MIX = "boot"

# Default grid: the seed 000 sizes (4 KiB, where request counts decide; 16 KiB; 128 KiB, where ratio and large
# reads do) for every compressor the installed mkfs.erofs offers, squashfs LZ4HC (the seed's) and zstd at its
# usual 128 KiB, each filesystem uncompressed, and btrfs's own compressors.  lz4 is left out when lz4hc is there:
# the same format and decompressor, only a larger image.
CLUSTERS = (4096, 16384, 131072)
SQUASHFS = [("lz4hc", c) for c in CLUSTERS] + [("zstd", 131072)]
BTRFS = ("none", "zstd:1", "lzo")


def default_grid():
    from workloads import images
    comps = images.erofs_compressors()
    if "lz4hc" in comps and "lz4" in comps:
        comps.remove("lz4")
    grid = [("erofs", {"compress": "none"})] + [("erofs", {"compress": c, "cluster": k}) for c in comps
                                                 for k in CLUSTERS]
    grid += [("squashfs", {"compress": "none", "block": 4096})]
    grid += [("squashfs", {"compress": c, "block": k}) for c, k in SQUASHFS]
    grid += [("btrfs", {"compress": c}) for c in BTRFS]
    return grid


def parse_mix(text):
    """--mix boot|app|update or name=weight,...: [(workload, weight)]."""
    from workloads import catalog
    text = text or DEFAULT_MIX
    if text in MIXES:
        return list(MIXES[text])
    out = []
    for entry in text.split(","):
        name, eq, weight = entry.partition("=")
        try:
            wl = catalog.get(name.strip())
        except KeyError as e:
            raise FstraceError("--mix: %s; or a named mix: %s" % (e.args[0], ", ".join(MIXES)))
        try:
            w = float(weight) if eq else 1.0
        except ValueError:
            w = -1
        if not w > 0:
            raise FstraceError("--mix: weight of %s must be a positive number, got %r" % (wl.name, weight))
        if wl.writes:
            raise FstraceError("--mix: %s writes into an empty image; advise compares read-only images of the "
                               "dataset" % wl.name)
        if any(n == wl.name for n, _ in out):
            raise FstraceError("--mix: %s given twice" % wl.name)
        out.append((wl.name, w))
    return out


def plan_configs(fs=None, compress=None, cluster=None):
    """The candidates: bench's grid of the comma-separated --fs, --compress and --cluster lists if fs is given;
    else the default grid, narrowed to the compress and cluster values given."""
    from workloads import images
    if fs:
        return bench.plan_configs(fs=fs, compress=compress, cluster=cluster)
    comps = bench._split(compress)
    try:
        clusters = [int(c) for c in bench._split(cluster)]
    except ValueError:
        raise FstraceError("--cluster takes sizes in bytes, comma-separated, got %r" % cluster)
    out = []
    for name, opts in default_grid():
        size = opts.get("cluster", opts.get("block"))
        if comps and opts["compress"] not in comps or clusters and size not in clusters:
            continue
        o = images.normalize(name, opts)
        if (name, o) not in out:
            out.append((name, o))
    if not out:
        raise FstraceError("no candidate of the default grid has --compress %s --cluster %s (give --fs to choose "
                           "the grid as for bench)" % (compress or "any", cluster or "any"))
    return out


def run_advise(mix, workloads, configs, droot, manifest, cache, outdir, runs, budget_bytes=None, iops_cap=None,
               throttle=None):
    """The advice into outdir (the advice directory's .partial): every candidate of configs under budget_bytes
    measured runs times on mix's workloads, and again capped at iops_cap IOPS if given, on the storage profile
    throttle (None: unthrottled); returns the advice's text."""
    from analysis import advice
    from workloads import images
    parts = sorted({w.part for w in workloads})
    progress("advise: mix %s; building %d candidate images" % (
        ", ".join("%s x%g" % m for m in mix), len(configs) * len(parts)))
    imgs = bench.image_table(configs, parts, droot, manifest, cache)
    sizes = {}
    for i in imgs:
        sizes[i["label"]] = sizes.get(i["label"], 0) + i["bytes"]
    over = []
    if budget_bytes is not None:
        over = sorted((s, label) for label, s in sizes.items() if s > budget_bytes)
        if len(over) == len(sizes):
            raise FstraceError("no candidate fits in --budget-bytes %d: the smallest, %s, is %d bytes"
                               % (budget_bytes, over[0][1], over[0][0]))
        configs = [(fs, o) for fs, o in configs if sizes[images.label(fs, o)] <= budget_bytes]
        imgs = [i for i in imgs if i["label"] in {images.label(fs, o) for fs, o in configs}]
        progress("advise: %d candidate(s) over the budget left out: %s"
                 % (len(over), ", ".join(label for _, label in over) or "none"))
    progress("advise: %d images ready; %d candidates x %d workloads x %d runs%s" % (
        len(imgs), len(configs), len(workloads), runs, " x 2 (uncapped, capped)" if iops_cap else ""))
    caps = [None] + ([iops_cap] if iops_cap else [])
    clock = bench.RunClock(len(configs) * len(workloads) * runs * len(caps))
    docs = {}
    for cap in caps:
        sub = "uncapped" if cap is None else "iops-%d" % cap
        os.makedirs(os.path.join(outdir, sub))
        docs[sub] = bench.measure(configs, workloads, droot, manifest, cache, os.path.join(outdir, sub), runs,
                                  iops_cap=cap, imgs=imgs, clock=clock, baseline=False, storage=throttle)
    adv = advice.advise(docs["uncapped"], mix, parts)
    capped = advice.advise(docs["iops-%d" % iops_cap], mix, parts) if iops_cap else None
    text = advice.render(adv, mix, capped, iops_cap, storage=throttle["name"] if throttle else None)
    doc = {"kind": "fstrace-advice", "dataset_id": manifest["id"], "mix": [list(m) for m in mix], "parts": parts,
           "runs": runs, "budget_bytes": budget_bytes, "storage": throttle,
           "over_budget": [{"label": label, "bytes": s} for s, label in over],
           "uncapped": dict(adv, bench="uncapped"),
           "capped": dict(capped, bench="iops-%d" % iops_cap, iops_cap=iops_cap) if capped else None,
           "flips": [list(f) for f in advice.flips(adv["ranking"], capped["ranking"])] if capped else None,
           "kernel": os.uname().release}
    with open(os.path.join(outdir, "advice.json.tmp"), "w") as f:
        json.dump(doc, f, indent=1)
    os.rename(os.path.join(outdir, "advice.json.tmp"), os.path.join(outdir, "advice.json"))
    with open(os.path.join(outdir, "advice.txt"), "w") as f:
        f.write(text)
    write_html(os.path.join(outdir, "advice.html"), page(doc, docs, text, outdir))
    return text


def page(doc, docs, text, outdir):
    """advice.html: the ranking and advice, the size/time scatter per device model (Pareto front highlighted),
    and for the two fastest candidates the differential flamegraph and attribution bars on the workload that
    separates them most."""
    from analysis import advice, flamegraph, html, plots, sampling, tables
    sets = [("uncapped", doc["uncapped"])] + ([("IOPS cap %d" % doc["capped"]["iops_cap"], doc["capped"])]
                                              if doc["capped"] else [])
    sections = [("Ranking and advice", html.pre(text)),
                ("Image size vs weighted time", html.inline_svg(advice.scatter(sets)))]
    adv = doc["uncapped"]
    if adv["causes"]:
        first = adv["causes"][0]
        wl, labels = first["workload"], [first["better"], first["worse"]]
        med = advice.medians(docs["uncapped"])
        folded, bars = [], []
        for label in labels:
            rundir = os.path.join(outdir, "uncapped", med[(wl, label)]["dir"])
            res = load_results(os.path.join(rundir, "results.fst"))
            folded.append(sampling.folded(res.header, kworkers=True))
            with open(os.path.join(rundir, "summary.json")) as f:
                bars.append((label, tables.attribution_of(json.load(f))["parts_ns"]))
        sections.append(("Attribution on %s: %s vs %s" % (wl, labels[0], labels[1]), html.inline_svg(
            plots.attribution_bars(bars, res.schema, "where request time went (median runs)"))))
        if folded[0] or folded[1]:
            svg = flamegraph.render(folded[1], "differential on-CPU flamegraph on %s: %s vs %s" % (wl, labels[1],
                                                                                                   labels[0]),
                                    "widths: %s's samples; red: more than in %s (share), blue: less"
                                    % (labels[1], labels[0]), base=folded[0])
            sections.append(("Differential flamegraph", html.inline_svg(svg)))
        else:
            sections.append(("Differential flamegraph", html.pre("no on-CPU samples in either run (runs too short "
                                                                 "for the sampling rate)")))
    return html.page("fstrace advise: dataset %s" % doc["dataset_id"], sections)


def add_arguments(p, default_cache):
    p.add_argument("--dataset", help="directory or tarball to advise on (default: the built-in dataset)")
    p.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--mix", help="named mix (%s; default %s) or workload=weight,... e.g. tar-data=1,cat-500=5"
                   % (", ".join("%s: %s" % (k, "+".join(n for n, _ in v)) for k, v in MIXES.items()), DEFAULT_MIX))
    p.add_argument("--budget-bytes", type=int, help="leave out candidates whose image is larger")
    p.add_argument("--iops-cap", type=int, help="also run capped at this many IOPS (3000: seed 000's cloud disk) "
                   "and say where the ranking changes")
    storage.add_argument(p)
    p.add_argument("--runs", type=int, default=3, help="runs of each (default %(default)s)")
    p.add_argument("--fs", help="comma-separated filesystems (the grid as for bench)")
    p.add_argument("--compress", help="comma-separated compressors (narrow the grid)")
    p.add_argument("--cluster", help="comma-separated cluster/block sizes, bytes (narrow the grid)")
    p.add_argument("-o", "--out", help="advice directory (default: fstrace-results/<time>-advise)")
    p.add_argument("--cache", default=default_cache)
