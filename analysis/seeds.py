"""The seeds' own tables (bench --preset seed000/001/002/004), filled with fstrace's measured values and a cause
column: pure functions from bench documents to text.

Each table keeps its seed's shape (rows, columns, units, order); the cause column is tables.cause() of the run the
time comes from.  docs: [(storage profile name or None, bench document)], one per medium the preset ran on.
"""
import statistics

from analysis import tables


# seed 002's compressors: (its name, squashfs's, erofs's); cli/bench.py builds the preset's matrix from it
SEED002_COMPRESSORS = [("none", "none", "none"), ("LZ4", "lz4", "lz4"), ("LZ4 HC", "lz4hc", "lz4hc"),
                       ("XZ", "xz", "lzma")]


def _runs(doc):
    return tables.group(doc)


def _median(rows):
    return statistics.median(r["wall_s"] for r in rows)


def _cluster(cfg):
    o = cfg["options"]
    if o.get("compress") == "none":
        return "uncompressed"
    return str(o.get("cluster", o.get("block", "")))


def _configs(doc):
    return {c["label"]: c for c in doc.get("configs", [])}


def _time(s):
    return "%.3f s" % s if s >= 1 else "%.1f ms" % (s * 1e3)


def _mmss(s):
    return "%dm%.3fs" % (s // 60, s % 60)


def _mib_s(nbytes, s):
    return "%.1f MiB/s" % (nbytes / s / (1 << 20)) if s else "-"


def _table(w, head, rows):
    """A seed-style table: | a | b | ... | with its header row."""
    w("| " + " | ".join(head) + " |")
    w("|---|")
    for r in rows:
        w("| " + " | ".join(str(x) for x in r) + " |")


def _images(doc, part):
    return [i for i in doc["images"] if i["part"] == part]


def seed000(docs):
    out = []
    w = out.append
    for medium, doc in docs:
        cfgs = _configs(doc)
        runs = _runs(doc)
        for part, title in (("tree", "Benchmark on multiple files"), ("single", "FIO benchmark on a single large "
                                                                                 "file")):
            imgs = _images(doc, part)
            if not imgs:
                continue
            w("%s%s" % (title, " (storage: %s)" % medium if medium else ""))
            w("Image size")
            _table(w, ["Size", "Filesystem", "Cluster size", "Build options"],
                   [(i["bytes"], i["fs"], _cluster(cfgs[i["label"]]), i.get("build_options") or "")
                    for i in sorted(imgs, key=lambda i: -i["bytes"])])
            for wl in dict.fromkeys(r["workload"] for r in doc["rows"]):
                keys = [k for k in runs if k[0] == wl]
                if not keys or runs[keys[0]][0].get("part", part) != part:
                    continue
                fio = runs[keys[0]][0].get("workload_bw_bytes") is not None
                w("")
                w(wl)
                if fio:
                    keys.sort(key=lambda k: -statistics.median(r["workload_bw_bytes"] for r in runs[k]))
                    _table(w, ["Filesystem", "Cluster size", "Bandwidth", "cause"], [
                        (cfgs[k[1]]["fs"], _cluster(cfgs[k[1]]),
                         "%.1f MiB/s" % (statistics.median(r["workload_bw_bytes"] for r in runs[k]) / (1 << 20)),
                         tables.cause(tables._median_row(runs[k]))) for k in keys])
                else:
                    keys.sort(key=lambda k: -_median(runs[k]))
                    _table(w, ["Filesystem", "Cluster size", "Time", "cause"], [
                        (cfgs[k[1]]["fs"], _cluster(cfgs[k[1]]), "%s (%s-%s)" % (
                            _time(_median(runs[k])), _time(min(r["wall_s"] for r in runs[k])),
                            _time(max(r["wall_s"] for r in runs[k]))),
                         tables.cause(tables._median_row(runs[k]))) for k in keys])
            w("")
    w("Time: median (min-max) of the runs; Bandwidth: fio's own, median run.")
    return out


def seed001(docs):
    out = []
    w = out.append
    for medium, doc in docs:
        cfgs = _configs(doc)
        runs = _runs(doc)
        tree = {i["label"]: i for i in _images(doc, "tree")}
        w("squashfs compressor x block size%s" % (" (storage: %s)" % medium if medium else ""))
        w("%-32s %10s %7s %11s %11s %14s  %s" % ("Filename", "Size KiB", "Ratio", "CTIME", "UTIME",
                                                 "4K rand read", "cause (UTIME; random reads)"))
        for label, cfg in cfgs.items():
            img = tree.get(label)
            if img is None:
                continue
            o = cfg["options"]
            ut, rr = runs.get(("tar-data", label)), runs.get(("randread-10m", label))
            rmed = tables._median_row(rr) if rr else None
            w("%-32s %10d %6.2f%% %11s %11s %14s  %s; %s" % (
                "squashfs-%s-%d.squashfs" % (o["compress"], o["block"]), img["bytes"] // 1024,
                100 * img["bytes"] / img["source_bytes"], _mmss(img["build_seconds"]),
                _mmss(_median(ut)) if ut else "-",
                "%.1f MiB/s" % (rmed["workload_bw_bytes"] / (1 << 20)) if rmed and rmed.get("workload_bw_bytes")
                else "-",
                tables.cause(tables._median_row(ut)) if ut else "-", tables.cause(rmed) if rmed else "-"))
        w("")
    w("Ratio: image size over the tree's bytes; CTIME: mksquashfs time (when the image was built); UTIME: "
      "reading every file through the kernel (tar-data, cold cache), median run; 4K rand read: fio 4 KiB random "
      "reads, 10 MiB, on the single large file's image (fio's bandwidth, median run): what the seed asked for.")
    return out


def seed002(docs):
    out = []
    w = out.append
    cols = [("SquashFS", "squashfs", 131072), ("SquashFS 4KiB", "squashfs", 4096), ("EROFS", "erofs", None)]
    for medium, doc in docs:
        cfgs = _configs(doc)
        runs = _runs(doc)
        imgs = {i["label"]: i for i in _images(doc, "tree")}

        def label(fs, block, comp):
            for lb, c in cfgs.items():
                o = c["options"]
                if c["fs"] == fs and o["compress"] == comp and (block is None or o.get("block") == block):
                    return lb
            return None

        cells = {(name, col): label(fs, block, sq if fs == "squashfs" else er)
                 for name, sq, er in SEED002_COMPRESSORS for col, fs, block in cols}
        head = ["Compressor"] + [c for c, _, _ in cols]
        w("Image Size Comparison")
        _table(w, head, [[name] + ["%.1f MiB" % (imgs[cells[(name, c)]]["bytes"] / (1 << 20))
                                   for c, _, _ in cols] for name, _, _ in SEED002_COMPRESSORS])
        w("")
        _table(w, head, [[name] + ["%.1f%%" % (100 * imgs[cells[(name, c)]]["ratio_to_uncompressed"])
                                   for c, _, _ in cols] for name, _, _ in SEED002_COMPRESSORS])
        wl = doc["rows"][0]["workload"] if doc["rows"] else "tar-usrbin"
        w("")
        w("Read Speed Comparison: %s, worst of %d run(s)%s" % (wl, doc["runs"],
                                                             ", storage %s" % medium if medium else ""))
        worst = {k: max(runs[(wl, lb)], key=lambda r: r["wall_s"]) for k, lb in cells.items() if (wl, lb) in runs}
        _table(w, head, [[name] + ["%.2fs" % worst[(name, c)]["wall_s"] for c, _, _ in cols]
                         for name, _, _ in SEED002_COMPRESSORS])
        w("")
        _table(w, head, [[name] + [_mib_s(worst[(name, c)]["read_bytes"], worst[(name, c)]["wall_s"])
                                   for c, _, _ in cols] for name, _, _ in SEED002_COMPRESSORS])
        w("")
        w("cause (the worst run of each cell)")
        _table(w, ["Compressor", "Format", "cause"],
               [(name, c, tables.cause(worst[(name, c)])) for name, _, _ in SEED002_COMPRESSORS for c, _, _ in cols])
        w("")
    w("MiB/s: the bytes tar read from the image over its time (the seed divided its tarball's size by it).")
    return out


def seed004(docs):
    out = []
    w = out.append
    choices = []
    for medium, doc in docs:
        cfgs = _configs(doc)
        runs = _runs(doc)
        tree = {i["label"]: i for i in _images(doc, "tree")}
        w("results on %s" % (medium or "this machine's disk, unthrottled"))
        w("%-14s %10s %14s %11s %19s %12s" % ("file system", "disk usage", "write time (s)", "write MiB/s",
                                             "tar to file read MiB/s", "cp read MiB/s"))
        for label in cfgs:
            wr, tr, cp = (runs.get((wl, label)) for wl in ("write-small", "tar-data", "cp-ram"))

            def mib(rows, key):
                if not rows:
                    return "-"
                m = tables._median_row(rows)
                return "%.1f" % (m[key] / m["wall_s"] / (1 << 20)) if m["wall_s"] else "-"
            img = tree.get(label)
            w("%-14s %10s %14s %11s %19s %12s" % (
                label, "%.3f" % (img["bytes"] / img["source_bytes"]) if img else "-",
                "%.3f" % _median(wr) if wr else "-", mib(wr, "write_bytes"), mib(tr, "read_bytes"),
                mib(cp, "read_bytes")))
        w("  large file: " + "; ".join("%s %.3f s" % (lb, _median(runs[("write-large", lb)]))
                                       for lb in cfgs if ("write-large", lb) in runs))
        w("  cause:")
        for label in cfgs:
            said = ["%s: %s" % (wl, tables.cause(tables._median_row(runs[(wl, label)])))
                    for wl in ("write-small", "tar-data") if (wl, label) in runs]
            w("    %-12s %s" % (label, "; ".join(said)))
        total = {lb: sum(_median(runs[(wl, lb)]) for wl in dict.fromkeys(r["workload"] for r in doc["rows"])
                         if (wl, lb) in runs) for lb in cfgs}
        order = sorted(total, key=total.get)
        choices.append((medium or "unthrottled", order, total, doc.get("machine_name")))
        w("")
    w("choices (by the sum of the median times of every workload)")
    w("%-16s %-12s %-12s %-12s %-12s" % ("hardware", "best", "2nd", "3rd", "worst"))
    for medium, order, _, _ in choices:
        w("%-16s %-12s %-12s %-12s %-12s" % (medium, *(order[:3] + ["-"] * (3 - len(order[:3]))), order[-1]))
    w("")
    if any(machine for *_, machine in choices):
        # a merged bench of several machines (bench --merge): the same sums side by side, a column per machine
        w("sum of the median times of every workload (s), per machine")
        labels = list(dict.fromkeys(lb for _, order, _, _ in choices for lb in order))
        _table(w, ["file system"] + [medium for medium, *_ in choices],
               [[lb] + ["%.3f" % total[lb] if lb in total else "-" for _, _, total, _ in choices] for lb in labels])
        w("")
    w("disk usage: image blocks allocated over the tree's bytes; write: cp -a of the tree into an empty image && "
      "sync (large file: of the single file); tar: tar cf - . | cat; cp: cp -a to /dev/shm.")
    return out


RENDER = {"seed000": seed000, "seed001": seed001, "seed002": seed002, "seed004": seed004}


def render(preset, docs, not_reproduced):
    out = ["fstrace bench --preset %s: the seed's tables with this machine's values" % preset, ""]
    out += RENDER[preset](docs)
    out += ["", "Not reproduced here:"] + ["  - " + x for x in not_reproduced]
    return "\n".join(line.rstrip() for line in out) + "\n"
