"""fstrace bench: the seed tables, fs x compressor x cluster size x workload x runs, with causes beside each time.

Runs alternate between configurations (for run i: every configuration once, in a fixed order), so a noisy,
shared machine affects all configurations alike; tables report min/median/max like hyperfine.
"""
import datetime
import json
import os
import sys
import time

from analysis.render import sets_html, write_html
from user.runner import check_ready, check_workload_ok, resolve_dataset, run_once, tool_versions
from user.system import FstraceError, ResultsDir, progress

PRESETS = {
    # seed 000: erofs vs squashfs, uncompressed and LZ4HC at 4K/16K/64K/128K, all tree and fio workloads
    "seed000": {
        "fs": ["erofs", "squashfs"],
        "variants": [("none", None), ("lz4hc", 4096), ("lz4hc", 16384), ("lz4hc", 65536), ("lz4hc", 131072)],
        # the seed builds its compressed erofs images with -Efragments (its tree table; its silesia table omits it)
        "erofs_features": ["fragments"],
        "workloads": ["tar-data", "tar-meta", "cat-500", "stat-500", "cat-all", "stat-all", "seqread", "randread",
                      "randread-10m"],
    },
}


def _split(text):
    return [x for x in (text or "").split(",") if x]


def plan_configs(args):
    """[(fs, normalized options)] from a preset or from --fs/--compress/--cluster lists."""
    from workloads import images
    if args.preset:
        if args.preset not in PRESETS:
            raise FstraceError("unknown preset %r (choose from %s)" % (args.preset, ", ".join(PRESETS)))
        p = PRESETS[args.preset]
        fss, variants, erofs_features = p["fs"], p["variants"], p.get("erofs_features")
    else:
        fss = _split(args.fs)
        comps = _split(args.compress) or [None]
        try:
            clusters = [int(c) for c in _split(args.cluster)] or [None]
        except ValueError:
            raise FstraceError("--cluster takes sizes in bytes, comma-separated, got %r" % args.cluster)
        variants = [(c, k) for c in comps for k in clusters]
        erofs_features = _split(getattr(args, "features", None)) or None
    if not fss:
        raise FstraceError("bench needs --preset or --fs")
    out = []
    for fs in fss:
        if fs not in images.FILESYSTEMS:
            raise FstraceError("unknown filesystem %r (choose from %s)" % (fs, ", ".join(images.FILESYSTEMS)))
        for comp, cluster in variants:
            opts = {"compress": comp}
            if cluster is not None and fs in ("erofs", "squashfs"):
                opts["cluster" if fs == "erofs" else "block"] = cluster
            if fs == "erofs" and comp != "none" and erofs_features:
                opts["features"] = erofs_features
            o = images.normalize(fs, opts)
            if (fs, o) not in out:  # uncompressed images ignore the cluster size: one each
                out.append((fs, o))
    return out


def plan_workloads(args):
    from workloads import catalog
    names = PRESETS[args.preset]["workloads"] if args.preset and not args.workload else _split(args.workload)
    if not names:
        raise FstraceError("bench needs --workload (comma-separated) or --preset")
    try:
        return [catalog.get(n) for n in names]
    except KeyError as e:
        raise FstraceError(e.args[0])


def image_table(configs, parts, droot, manifest, cache):
    """Every image of the matrix, with size, ratio to the same fs uncompressed, and build time."""
    from workloads import catalog, images
    rows = []
    for part in parts:
        ctx = catalog.context(droot, "single" if part == "single" else "tree", manifest)
        base = {}
        for fs, opts in configs:
            rec = images.ensure_image(fs, opts, ctx["source"], "%s/%s" % (manifest["id"], part), cache, progress)
            if fs not in base:
                none = images.normalize(fs, {"compress": "none"})
                base[fs] = images.ensure_image(fs, none, ctx["source"], "%s/%s" % (manifest["id"], part), cache,
                                               progress)
            size_key = "bytes" if fs in ("erofs", "squashfs") else "allocated_bytes"
            rows.append({"part": part, "fs": fs, "label": rec["label"], "bytes": rec[size_key],
                         "ratio_to_uncompressed": rec[size_key] / base[fs][size_key],
                         "build_seconds": rec["build_seconds"], "tool": rec["tool"],
                         "verified": rec.get("verified")})
    return rows


def prepare(command, args):
    """Root and collector checked, the results directory claimed (before any work), the dataset resolved:
    (ResultsDir, dataset root, manifest, absolute cache path)."""
    check_ready("fstrace " + command)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    results = ResultsDir(args.out or os.path.join("fstrace-results", "%s-%s" % (stamp, command)))
    droot, manifest = resolve_dataset(args)
    return results, droot, manifest, os.path.abspath(args.cache)


def cmd_bench(args):
    configs = plan_configs(args)
    workloads = plan_workloads(args)
    results, droot, manifest, cache = prepare("bench", args)
    with results as outdir:
        _bench(args, configs, workloads, droot, manifest, cache, outdir)
    progress("bench results in %s" % results.outdir)
    return 0


class RunClock:
    """Progress of a plan of runs: "[i/n]" and the time left, from the mean time of the runs done so far."""

    def __init__(self, total):
        self.total, self.done, self.t0 = total, 0, time.monotonic()

    def next(self):
        self.done += 1
        if self.done == 1:
            return "[1/%d]" % self.total
        left = (time.monotonic() - self.t0) / (self.done - 1) * (self.total - self.done + 1)
        return "[%d/%d, ~%s left]" % (self.done, self.total, _duration(left))


def _duration(s):
    return "%d s" % s if s < 120 else "%d min" % round(s / 60)


def measure(configs, workloads, droot, manifest, cache, outdir, runs, warm=False, iops_cap=None, imgs=None,
            clock=None, baseline=True):
    """Every workload on every configuration, runs times, into the bench directory outdir (bench.json, bench.csv,
    tables.txt and one results directory per run); returns the bench document.  imgs: the image table, if the
    caller has built it already; clock: a RunClock shared by several matrices (advise's uncapped and capped);
    baseline: each run also runs untraced, before the traced run in odd runs and after it in even ones, so that
    neither order's cache or clock effects favour one side."""
    from analysis import tables
    from workloads import images
    if imgs is None:
        imgs = image_table(configs, sorted({w.part for w in workloads if not w.writes}), droot, manifest, cache)
    plan = [(wl, run, fs, opts) for wl in workloads for run in range(1, runs + 1) for fs, opts in configs]
    clock = clock or RunClock(len(plan))
    rows = []
    for wl, run, fs, opts in plan:
        label = images.label(fs, opts)
        progress("bench %s %s on %s, run %d/%d%s" % (clock.next(), wl.name, label, run, runs,
                                                     ", IOPS cap %d" % iops_cap if iops_cap else ""))
        rundir = os.path.join(outdir, label, wl.name, "run-%d" % run)
        s = run_once(fs, opts, wl, droot, manifest, cache, ResultsDir(rundir), warm=warm,
                     tools=tool_versions(fs, wl), iops=iops_cap,
                     baseline=("before" if run % 2 else "after") if baseline else None)
        # the time of a run whose reads failed (a corrupt image) is the time of errors: no row, no ranking
        check_workload_ok(s, "%s on %s, run %d: stopped, nothing kept" % (wl.name, label, run))
        rows.append(dict(tables.row_from_summary(s), run=run, dir=os.path.relpath(rundir, outdir)))
    doc = {"schema_version": tables.SCHEMA_VERSION, "kind": "fstrace-bench", "dataset_id": manifest["id"],
           "runs": runs, "cache": "warm" if warm else "cold", "iops_cap": iops_cap,
           "images": imgs, "rows": rows,
           "kernel": os.uname().release}
    tmp = os.path.join(outdir, "bench.json.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.rename(tmp, os.path.join(outdir, "bench.json"))
    with open(os.path.join(outdir, "bench.csv"), "w") as f:
        f.write(tables.render_csv(doc))
    with open(os.path.join(outdir, "tables.txt"), "w") as f:
        f.write(tables.render_bench(doc))
    return doc


def _bench(args, configs, workloads, droot, manifest, cache, outdir):
    """The bench into outdir (the bench directory's .partial: it is complete only once renamed)."""
    progress("bench: %d configurations x %d workloads x %d runs" % (len(configs), len(workloads), args.runs))
    measure(configs, workloads, droot, manifest, cache, outdir, args.runs, warm=args.warm, iops_cap=args.iops_cap,
            baseline=not getattr(args, "no_baseline", False))
    with open(os.path.join(outdir, "tables.txt")) as f:
        sys.stdout.write(f.read())
    write_html(os.path.join(outdir, "report.html"), sets_html("fstrace bench: dataset %s" % manifest["id"],
                                                              [("", outdir)], None))
