"""fstrace bench: the seed tables, fs x compressor x cluster size x workload x runs, with causes beside each time.

Runs alternate between configurations (for run i: every configuration once, in a fixed order), so a noisy,
shared machine affects all configurations alike; tables report min/median/max like hyperfine.
"""
import datetime
import os
import sys
import time

from analysis.render import sets_html, write_html
from analysis.seeds import SEED002_COMPRESSORS
from cli.directories import ResultsDir
from cli.runner import check_iops_cap, check_ready, check_workload_ok, resolve_dataset, run_once, tool_versions
from cli import shards
from common.system import FstraceError, progress, write_json_atomic

SEED001_SIZES = [4096 << i for i in range(9)]  # the seed's block sizes, 4 KiB to 1 MiB

PRESETS = {
    # seed 000: erofs vs squashfs, uncompressed and LZ4HC at 4K/16K/64K/128K, all tree and fio workloads
    "seed000": {
        "fs": ["erofs", "squashfs"],
        "variants": [("none", None), ("lz4hc", 4096), ("lz4hc", 16384), ("lz4hc", 65536), ("lz4hc", 131072)],
        # the seed builds its compressed erofs images with -Efragments (its tree table; its silesia table omits it)
        "erofs_features": ["fragments"],
        "workloads": ["tar-data", "tar-meta", "cat-500", "stat-500", "cat-all", "stat-all", "seqread", "randread",
                      "randread-10m"],
        "storage": ["cloud-3000iops"],
        "not_reproduced": [
            "the seed's data (a Debian docker rootfs; silesia.tar): fstrace's generated tree and silesia.bin stand "
            "in, so sizes and times are of other bytes",
            "its cloud disk's latency: io.max caps requests at 3000 IOPS and 125 MiB/s but cannot add the network "
            "round trip of each request",
            "its machine and versions (2-vCPU Xeon 8369B, Linux 6.2, erofs-utils 1.6, squashfs-tools 4.5.1): "
            "this machine's kernel and tools are in every result",
            "hyperfine's mean +- sigma over many runs: the table gives min/median/max of --runs"],
    },
    # seed 001: squashfs gzip/lzo/xz x block 4 KiB-1 MiB: size, ratio, build time, whole-image read time; and what
    # it asked for: small random reads per block size and decompression per block
    "seed001": {
        "configs": [("squashfs", {"compress": c, "block": b}) for c in ("gzip", "lzo", "xz") for b in SEED001_SIZES],
        "workloads": ["tar-data", "randread-10m"],
        "storage": [None],
        "not_reproduced": [
            "the seed's image (Ubuntu 14.04.2 desktop, 2.9 GB): fstrace's generated tree stands in",
            "UTIME as the seed took it (its script unpacked each image with unsquashfs): here it is reading every "
            "file through the kernel's squashfs (tar-data, caches dropped), the way a system reads it",
            "CTIME on its 4-thread laptop: mksquashfs uses this machine's CPUs (2 here), and an image built once "
            "is cached with its build time"],
    },
    # seed 002: erofs vs squashfs 128 KiB vs squashfs 4 KiB x none/LZ4/LZ4HC/XZ, tar of usr/bin from an SD card
    "seed002": {
        "configs": [(fs, o) for _, sq, er in SEED002_COMPRESSORS for fs, o in (
            ("squashfs", {"compress": sq, "block": 131072}), ("squashfs", {"compress": sq, "block": 4096}),
            ("erofs", {"compress": er}))],
        "workloads": ["tar-usrbin"],
        "storage": ["sdcard"],
        "not_reproduced": [
            "the Raspberry Pi 3's CPU (4x Cortex-A53 at 1.2 GHz): decompression costs several times less here, "
            "so XZ's CPU-bound times are not the seed's",
            "the SD card's own latency per request: the sdcard profile caps bandwidth (20 MiB/s) and IOPS (1500) "
            "but cannot add a card's access time",
            "the seed's data (Debian 10.2 Xfce live image, tar2sqfs from squashfs-tools-ng): fstrace's generated "
            "tree and mksquashfs stand in",
            "worst of 5 runs: the table gives the worst of --runs"],
    },
    # seed 004: btrfs none/lzo/zlib/zstd against ext4 and xfs: write (cp -a && sync) and read (tar, cp -a to RAM),
    # ranked per storage medium
    "seed004": {
        "configs": [("btrfs", {"compress": c}) for c in ("none", "lzo", "zlib", "zstd:1", "zstd:3")] +
                   [("ext4", {}), ("xfs", {})],
        "workloads": ["write-small", "write-large", "tar-data", "cp-ram"],
        "storage": ["sata-ssd", "nvme", "hdd"],
        "not_reproduced": [
            "the seed's data (ffmpeg and boost build directories, 1.5k files/2.7 GiB and 149k files/2 GiB): "
            "fstrace's generated tree (many small files) and single file (one large) stand in",
            "its disks: the profiles cap bandwidth and IOPS to each medium's, but a hard disk's seek (time "
            "growing with distance) and an SSD's write cache cannot be imitated by throttling",
            "fstrim before each write and a remount before each read: the image is fresh for writes and the "
            "caches are dropped before reads",
            "xfs.0/xfs.1 and ext4.0/ext4.1 (the seed ran each twice): --runs repeats every configuration"],
    },
}


def _split(text):
    return [x for x in (text or "").split(",") if x]


def plan_configs(preset=None, fs=None, compress=None, cluster=None, features=None):
    """[(fs, normalized options)] from a preset or from the comma-separated lists of --fs, --compress, --cluster
    and --features, as given."""
    from workloads import images
    if preset:
        if preset not in PRESETS:
            raise FstraceError("unknown preset %r (choose from %s)" % (preset, ", ".join(PRESETS)))
        p = PRESETS[preset]
        if "configs" in p:
            return [(fs, images.normalize(fs, o)) for fs, o in p["configs"]]
        fss, variants, erofs_features = p["fs"], p["variants"], p.get("erofs_features")
    else:
        fss = _split(fs)
        comps = _split(compress) or [None]
        try:
            clusters = [int(c) for c in _split(cluster)] or [None]
        except ValueError:
            raise FstraceError("--cluster takes sizes in bytes, comma-separated, got %r" % cluster)
        variants = [(c, k) for c in comps for k in clusters]
        erofs_features = _split(features) or None
    if not fss:
        raise FstraceError("bench needs --preset or --fs")
    out = []
    for name in fss:
        if name not in images.FILESYSTEMS:
            raise FstraceError("unknown filesystem %r (choose from %s)" % (name, ", ".join(images.FILESYSTEMS)))
        for comp, size in variants:
            opts = {"compress": comp}
            if size is not None and name in ("erofs", "squashfs"):
                opts["cluster" if name == "erofs" else "block"] = size
            if name == "erofs" and comp != "none" and erofs_features:
                opts["features"] = erofs_features
            o = images.normalize(name, opts)
            if (name, o) not in out:  # uncompressed images ignore the cluster size: one each
                out.append((name, o))
    return out


def plan_workloads(preset=None, workload=None):
    """The workloads of --workload (comma-separated), else of the preset."""
    from workloads import catalog
    names = PRESETS[preset]["workloads"] if preset and not workload else _split(workload)
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
            argv = rec.get("mkfs_argv") or []
            rows.append({"part": part, "fs": fs, "label": rec["label"], "bytes": rec[size_key],
                         "source_bytes": rec.get("source_bytes"),
                         # the options as the seeds write them: mkfs's argv less the tool, image and source paths
                         "build_options": " ".join(a for a in argv[1:] if a not in (rec["path"] + ".partial",
                                                                                    ctx["source"])) or None,
                         "ratio_to_uncompressed": rec[size_key] / base[fs][size_key],
                         "build_seconds": rec["build_seconds"], "tool": rec["tool"],
                         "verified": rec.get("verified")})
    return rows


def prepare(command, out, dataset, cache, scale=1.0):
    """Root and collector checked, the results directory (out, else a new one named for the command) claimed
    before any work, the dataset resolved (resolve_dataset): (ResultsDir, dataset root, manifest, absolute cache
    path)."""
    check_ready("fstrace " + command)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    results = ResultsDir(out or os.path.join("fstrace-results", "%s-%s" % (stamp, command)), numbered=not out)
    droot, manifest = resolve_dataset(dataset, cache, scale)
    return results, droot, manifest, os.path.abspath(cache)


def plan_storage(preset=None, name=None, iops_cap=None):
    """The storage profiles to run on (None: unthrottled): --storage NAME, else --iops-cap's unprofiled device,
    else the preset's media, else none."""
    from cli import storage
    given = storage.check(name, iops_cap)
    if given:
        return [given]
    if preset and not iops_cap:
        return [storage.profile(n) if n else None for n in PRESETS[preset]["storage"]]
    return [None]


def check_counts(runs, iops_cap):
    """--runs and --iops-cap of bench and advise, before any work: a bench of no runs is no bench."""
    if runs < 1:
        raise FstraceError("--runs must be at least 1, got %d" % runs)
    check_iops_cap(iops_cap)


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
            clock=None, baseline=True, storage=None, cells=None, record=None):
    """Every workload on every configuration, runs times, into the bench directory outdir (bench.json, bench.csv,
    tables.txt and one results directory per run); returns the bench document.  imgs: the image table, if the
    caller has built it already; clock: a RunClock shared by several matrices (advise's uncapped and capped);
    baseline: each run also runs untraced, before the traced run in odd runs and after it in even ones, so that
    neither order's cache or clock effects favour one side.  cells: the (workload, label) pairs to run (a shard's),
    all when None; record: more fields for bench.json (a shard's machine and place in the matrix)."""
    from analysis import tables
    from workloads import images
    if imgs is None:
        imgs = image_table(configs, sorted({w.part for w in workloads if not w.writes}), droot, manifest, cache)
    plan = [(wl, run, fs, opts) for wl in workloads for run in range(1, runs + 1) for fs, opts in configs
            if cells is None or (wl.name, images.label(fs, opts)) in cells]
    clock = clock or RunClock(len(plan))
    rows = []
    for wl, run, fs, opts in plan:
        label = images.label(fs, opts)
        progress("bench %s %s on %s, run %d/%d%s" % (clock.next(), wl.name, label, run, runs,
                                                     ", IOPS cap %d" % iops_cap if iops_cap else
                                                     ", storage %s" % storage["name"] if storage else ""))
        rundir = os.path.join(outdir, label, wl.name, "run-%d" % run)
        s = run_once(fs, opts, wl, droot, manifest, cache, ResultsDir(rundir), warm=warm,
                     tools=tool_versions(fs, wl), iops=iops_cap, storage=storage,
                     baseline=("before" if run % 2 else "after") if baseline else None)
        # the time of a run whose reads failed (a corrupt image) is the time of errors: no row, no ranking
        check_workload_ok(s, "%s on %s, run %d: stopped, nothing kept" % (wl.name, label, run))
        rows.append(dict(tables.row_from_summary(s), run=run, part=wl.part, dir=os.path.relpath(rundir, outdir)))
    doc = {"schema_version": tables.SCHEMA_VERSION, "kind": "fstrace-bench", "dataset_id": manifest["id"],
           "runs": runs, "cache": "warm" if warm else "cold", "iops_cap": iops_cap, "storage": storage,
           "images": imgs, "rows": rows,
           "configs": [{"fs": fs, "options": opts, "label": images.label(fs, opts)} for fs, opts in configs],
           "kernel": os.uname().release, "machine": shards.machine(storage, cache)}
    doc.update(record or {})
    write_bench(doc, outdir)
    return doc


def write_bench(doc, outdir):
    """A bench directory's files from its document: bench.json (last, atomically), bench.csv, tables.txt."""
    from analysis import tables
    with open(os.path.join(outdir, "bench.csv"), "w") as f:
        f.write(tables.render_csv(doc))
    with open(os.path.join(outdir, "tables.txt"), "w") as f:
        f.write(tables.render_bench(doc))
    write_json_atomic(os.path.join(outdir, "bench.json"), doc, indent=1)


def run_bench(configs, workloads, media, droot, manifest, cache, outdir, runs, warm=False, iops_cap=None,
              baseline=True, preset=None, shard=None):
    """The bench into outdir (the bench directory's .partial: it is complete only once renamed): measure() on
    each storage medium of media; on several (a preset's), one bench directory per medium under it, and the
    seed's tables across them when preset names the seed.  shard: (index, count), run only that part of the
    matrix (shards.cells_of); its seed tables are the merge's (bench --merge), not its own."""
    from analysis import seeds
    from workloads import images
    matrix = shards.matrix(preset, configs, workloads, media)
    mine = shards.cells_of(matrix, shard)
    progress("bench: %d configurations x %d workloads x %d runs%s%s" % (
        len(configs), len(workloads), runs,
        " x %d storage profiles (%s)" % (len(media), ", ".join(m["name"] for m in media)) if len(media) > 1 else
        ", storage %s" % media[0]["name"] if media[0] else "",
        ": shard %d of %d, %d of the %d cells" % (shard[0], shard[1], len(mine), len(shards.cells_of(matrix)))
        if shard else ""))
    clock = RunClock(len(mine) * runs)
    record = {"matrix": matrix, "shard": {"index": shard[0], "count": shard[1]} if shard else None}
    docs, dirs = [], []
    for medium in media:
        name = medium["name"] if medium else None
        cells = {(wl, label) for m, wl, label in mine if m == name}
        if not cells and (mine or medium is not media[0]):
            continue  # a shard of no cells at all (more shards than cells) still writes an empty bench
        used = [(fs, o) for fs, o in configs if any(images.label(fs, o) == label for _, label in cells)]
        wls = [w for w in workloads if any(w.name == wl for wl, _ in cells)]
        d = outdir if len(media) == 1 else os.path.join(outdir, medium["name"])
        os.makedirs(d, exist_ok=True)
        imgs = image_table(used, sorted({w.part for w in wls if not w.writes}), droot, manifest, cache)
        doc = measure(used, wls, droot, manifest, cache, d, runs, warm=warm, iops_cap=iops_cap, imgs=imgs,
                      clock=clock, storage=medium, baseline=baseline, cells=cells, record=record)
        docs.append((name, doc))
        dirs.append((name if medium and len(media) > 1 else "", d))
    seed = seeds.render(preset, docs, PRESETS[preset]["not_reproduced"]) if preset and not shard else None
    finish(outdir, dirs, [n for n, _ in docs], preset, seed, manifest["id"], shard=record["shard"])


def finish(outdir, dirs, media, preset, seed, dataset_id, shard=None):
    """A bench's last files: the seed tables and preset.json of a preset, report.html; the tables to stdout.
    dirs: [(medium name or "", bench directory)]; media: their storage profiles' names (None: unthrottled)."""
    text = "".join(open(os.path.join(d, "tables.txt")).read() for _, d in dirs)
    if preset:
        if seed:
            with open(os.path.join(outdir, "seed-tables.txt"), "w") as f:
                f.write(seed)
            text = seed + "\n" + text
        write_json_atomic(os.path.join(outdir, "preset.json"), {
            "preset": preset, "storage": media, "shard": shard,
            "not_reproduced": PRESETS[preset]["not_reproduced"],
            "benches": [os.path.relpath(d, outdir) for _, d in dirs]}, indent=1)
    sys.stdout.write(text)
    write_html(os.path.join(outdir, "report.html"), sets_html("fstrace bench: dataset %s" % dataset_id,
                                                              dirs, text if seed else None))


def merge(inputs, outdir):
    """bench --merge: the bench directories (each a shard's, or a whole bench's) in inputs merged into outdir (the
    results directory's .partial): one bench directory per storage medium (cli/shards.py merges each), runs copied
    in, and a preset's seed tables."""
    from analysis import seeds
    benches, names = shards.parts_of(inputs)
    m = benches[0][1]["matrix"]
    merged, seed_docs, dirs, media = [], [], [], []
    for medium in m["media"]:
        parts = [(d, doc) for d, doc in benches if ((doc.get("storage") or {}).get("name")) == medium]
        if not parts:
            continue
        out = outdir if len(m["media"]) == 1 else os.path.join(outdir, medium)
        os.makedirs(out, exist_ok=True)
        doc = shards.merged_medium(parts, names, m, out)
        write_bench(doc, out)
        merged.append((medium, doc))
        dirs.append((medium if len(m["media"]) > 1 else "", out))
        media.append(medium)
        seed_docs += shards.per_machine(medium, doc) if len(names) > 1 else [(medium, doc)]
    preset = m.get("preset")
    seed = seeds.render(preset, seed_docs, PRESETS[preset]["not_reproduced"]) if preset else None
    finish(outdir, dirs, media, preset, seed, benches[0][1]["dataset_id"])
    return merged
