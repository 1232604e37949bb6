"""Read amplification against ground truth, compare of two configurations, storage profiles' throttles, and the
seed presets end to end (small dataset, one run per cell)."""
import json
import os
import re

import numpy as np
import pytest

from conftest import CACHE, SCALE, fstrace, run_workload
from analysis import amplification
from analysis import selection
from cli import storage
from workloads import images


@pytest.fixture(scope="module")
def erofs_none_rand(tmp_path_factory):
    return run_workload(tmp_path_factory, "erofs", "randread-10m", "--compress", "none")


@pytest.fixture(scope="module")
def erofs_64k_rand(tmp_path_factory):
    # a large cluster read at 4 KiB random offsets: each read decompresses a pcluster far larger than it
    return run_workload(tmp_path_factory, "erofs", "randread-10m", "--compress", "lz4hc", "--cluster", "65536")


def _loop(s):
    return [d for d in s["devices"].values() if d["level"] == "loop"][0]


MAX_REQUEST_BYTES = 1280 << 10  # the block layer's default cap of a request (BLK_DEF_MAX_SECTORS_CAP), the loop's


def _device_bytes_agree(seen, level, reads):
    """A device's bytes in fstrace's block records against the kernel's own count of the run (/proc/diskstats at
    its start and end): equal, or, when the kernel withheld block completions from the programs (docs/measuring.md,
    "Lost events"), short by whole requests the kernel counted and fstrace did not see: at least one, few, and
    none larger than a request can be."""
    kernel = level["diskstats_bytes"]
    if not level.get("unseen_bytes"):
        assert seen == kernel > 0
        return
    assert 0 < kernel - seen <= level["unseen_bytes"], (seen, level)
    assert 1 <= level["unseen_requests"] <= 0.1 * reads, level
    assert level["unseen_bytes"] <= level["unseen_requests"] * MAX_REQUEST_BYTES, level


def _check_levels(s):
    a = s["amplification"]
    received = s["ground_truth"]["read_bytes"]
    assert a["received_bytes"] == received
    lv = a[amplification.DEVICE_READ]
    loop = _loop(s)
    delta = loop["diskstats_delta"]
    # the kernel's own count of the image's device (/proc/diskstats at the run's start and end)
    assert lv["loop"]["diskstats_bytes"] == delta["sectors_read"] * 512
    _device_bytes_agree(lv["loop"]["bytes"], dict(lv["loop"], unseen_requests=loop["unseen_requests"]),
                        delta["reads"])
    assert lv["loop"]["per_received"] == lv["loop"]["bytes"] / received
    # direct-I/O loop: every byte the loop device read, it read from the disk behind it (each level's withheld
    # completions, reported, are the only difference)
    withheld = lv["loop"].get("unseen_bytes", 0) + lv["backing"].get("unseen_bytes", 0)
    if not withheld:
        assert lv["backing"]["bytes"] == lv["loop"]["bytes"]
    else:
        assert abs(lv["backing"]["bytes"] - lv["loop"]["bytes"]) <= withheld, lv


@pytest.mark.bpf
def test_uncompressed_image_has_no_decompression_figure(erofs_none_rand):
    _, _, s = erofs_none_rand
    _check_levels(s)
    a = s["amplification"]
    dec = a[amplification.DECOMPRESSED]
    assert dec["applies"] is False and "per_received" not in dec and "bytes" not in dec
    assert a[amplification.UNIT_LOOKUPS]["applies"] is False
    row = amplification.row(a)
    assert row["decompressed_per_received"] is None and row["decompressed_method"] == "n/a"
    text = " ".join(l.strip() for l in fstrace("report", str(erofs_none_rand[0])).stdout.splitlines())
    assert "decompressed: none (uncompressed image)" in text


@pytest.mark.bpf
def test_large_cluster_decompresses_more_than_it_returns(erofs_64k_rand):
    out, res, s = erofs_64k_rand
    _check_levels(s)
    a = s["amplification"]
    dec = a[amplification.DECOMPRESSED]
    assert dec["available"] and dec["method"] == "bound"
    assert dec["per_received"] > 1
    # every pcluster the reads looked up is one of the image's own extents (dump.erofs), as mapped
    h = res.header
    e = selection.fs_records(res, "erofs")
    maps = e[(e["event"] == selection.enum_value(h, "erofs_event", "map")) &
             ((e["map_flags"] & selection.enum_value(h, "erofs_map_flag", "encoded")) != 0) & (e["plen"] > 0)]
    assert len(maps) == s["erofs"]["pcluster_lookups"] > 0
    assert dec["bytes"] == int(maps["llen"].astype(np.uint64).sum())
    single = res.config["dataset"]["single_file"]
    extents = {x[0]: x for x in images.erofs_extents(res.config["image"]["path"], "/" + single)}
    for la, llen, pa, plen in zip(maps["la"], maps["llen"], maps["pa"], maps["plen"]):
        x = extents[int(la)]
        assert (int(pa), int(plen)) == (x[2], x[3])
        assert 0 < int(llen) <= x[1]
    lookups = a[amplification.UNIT_LOOKUPS]
    assert lookups["units"] == len({int(p) for p in maps["pa"]})
    assert sum(int(k) * v for k, v in lookups["times"].items()) == len(maps)


@pytest.fixture(scope="module")
def erofs_64k_seq(tmp_path_factory):
    # the whole large file read in order: every pcluster of it is looked up
    return run_workload(tmp_path_factory, "erofs", "seqread", "--compress", "lz4hc", "--cluster", "65536")


def _outside_extents(res, s, extents):
    """From the image's own extent map: bytes of the read block requests on the image's device outside every
    extent given ([pa, pa + plen), disjoint in an erofs image), over the requests that carry an extent's byte;
    and the bytes of those that carry none."""
    dev = res.config["fs_kdev"]
    io = res["io"][(res.io_ops(res["io"]) == res.io_op("read")) & (res["io"]["dev"] == dev)]
    qs = io["sector"].astype(np.int64)[:, None] * 512
    qe = qs + io["bytes"].astype(np.int64)[:, None]
    pa = np.array([x[0] for x in extents], dtype=np.int64)[None, :]
    pe = pa + np.array([x[1] for x in extents], dtype=np.int64)[None, :]
    inside = np.clip(np.minimum(qe, pe) - np.maximum(qs, pa), 0, None).sum(axis=1)
    outside = (qe - qs)[:, 0] - inside
    loop = _loop(s)
    _device_bytes_agree(int((qe - qs).sum()), {"diskstats_bytes": loop["diskstats_delta"]["sectors_read"] * 512,
                                              "unseen_bytes": loop.get("unseen_sectors", 0) * 512,
                                              "unseen_requests": loop.get("unseen_requests", 0)},
                        loop["diskstats_delta"]["reads"])
    return int(outside[inside > 0].sum()), int(outside[inside == 0].sum()), int((qe - qs).sum())


def _single_file_extents(res):
    single = res.config["dataset"]["single_file"]
    return [(x[2], x[3]) for x in images.erofs_extents(res.config["image"]["path"], "/" + single) if x[3]]


@pytest.mark.bpf
def test_unneeded_share_of_a_whole_file_read_is_the_layouts(erofs_64k_seq):
    """The large file read whole: the units looked up are every extent of it in the image's own map (dump.erofs),
    and the device bytes outside them, in the requests that carry them, are what that map and the block
    requests (/proc/diskstats' bytes) give: none."""
    _, res, s = erofs_64k_seq
    _check_levels(s)
    extents = _single_file_extents(res)
    u = s["amplification"][amplification.UNNEEDED]
    assert u["available"], u
    unneeded, apart, total = _outside_extents(res, s, extents)
    assert (u["bytes"], u["no_unit_bytes"], u["device_bytes"]) == (unneeded, apart, total)
    assert u["share"] == unneeded / total == 0
    assert s["device_unneeded"]["units_looked_up"] >= len(extents)
    h = res.header
    e = selection.fs_records(res, "erofs")
    maps = e[(e["event"] == selection.enum_value(h, "erofs_event", "map")) & (e["plen"] > 0) &
             ((e["map_flags"] & selection.enum_value(h, "erofs_map_flag", "meta")) == 0)]
    assert {(int(a), int(b)) for a, b in zip(maps["pa"], maps["plen"])} >= set(extents)


@pytest.mark.bpf
def test_unneeded_share_of_random_reads_is_the_layouts(erofs_64k_rand):
    """4 KiB random reads of a 64 KiB-cluster image: the device bytes outside the pclusters looked up (placed by
    the image's own extent map) over all the device read."""
    _, res, s = erofs_64k_rand
    h = res.header
    e = selection.fs_records(res, "erofs")
    looked = {int(p) for p in e["pa"][(e["event"] == selection.enum_value(h, "erofs_event", "map")) & (e["plen"] > 0)]}
    extents = [x for x in _single_file_extents(res) if x[0] in looked]
    assert extents
    unneeded, apart, total = _outside_extents(res, s, extents)
    u = s["amplification"][amplification.UNNEEDED]
    assert (u["bytes"], u["no_unit_bytes"], u["device_bytes"]) == (unneeded, apart, total)
    assert u["share"] == unneeded / total
    assert amplification.row(s["amplification"])["unneeded_share"] == u["share"]


@pytest.mark.bpf
def test_compare_two_configurations(erofs_none_rand, erofs_64k_rand):
    (da, _, sa), (db, _, sb) = erofs_none_rand, erofs_64k_rand
    text = fstrace("compare", str(da), str(db)).stdout
    assert "erofs-none" in text and "erofs-lz4hc12-C65536" in text
    assert "nothing to compare" not in text
    rows = {}
    table = text.split("time per part of the requests")[1].split("read amplification")[0]
    for line in table.splitlines()[2:]:
        f = line.split()
        if len(f) == 4 and f[0] + "_ns" in sa["attribution"]["parts_ns"]:
            rows[f[0] + "_ns"] = f
    pa, pb = sa["attribution"]["parts_ns"], sb["attribution"]["parts_ns"]
    assert set(rows) == set(pa)
    for p, (_, a, b, d) in rows.items():
        assert (a, b, d) == ("%.1f" % (pa[p] / 1e6), "%.1f" % (pb[p] / 1e6), "%+.1f" % ((pb[p] - pa[p]) / 1e6))
    amp = text.split("\nread amplification (")[1].split("\n\n")[0].splitlines()
    assert amp[2].split()[:4] == ["A", "%.2f" % sa["amplification"]["device_read_per_received"]["loop"]["per_received"],
                                  "%.2f" % sa["amplification"]["device_read_per_received"]["backing"]["per_received"],
                                  "n/a"]
    assert amp[3].split()[3] == "<=%.2f" % sb["amplification"]["decompressed_per_received"]["per_received"]
    for line, s in zip(amp[2:4], (sa, sb)):
        assert line.endswith("%.1f %%" % (100 * s["amplification"]["device_unneeded_share"]["share"]))
    assert "most of the" in text or "no difference" in text


def _fio_runtime_s(rundir):
    with open(os.path.join(rundir, "fio.json")) as f:
        t = f.read()
    return json.loads(t[t.index("{"):])["jobs"][0]["read"]["runtime"] / 1e3


@pytest.fixture(scope="module")
def big_file_dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("bigfile")
    with open(d / "big.bin", "wb") as f:
        f.write(np.random.default_rng(7).bytes(48 << 20))
    return d


@pytest.mark.bpf
@pytest.mark.parametrize("workload,limit", [("seqread", "rbps"), ("randread-10m", "riops")])
def test_storage_profile_throttle_holds(tmp_path, big_file_dataset, workload, limit):
    """The sdcard profile on the image's device: bytes/s (sequential reads) and IOPS (4 KiB random reads) the
    device did, by /proc/diskstats over fio's own runtime, are the profile's within 10 %."""
    out = tmp_path / "run"
    fstrace("run", "--fs", "erofs", "--compress", "none", "--workload", workload, "--dataset", str(big_file_dataset),
            "--storage", "sdcard", "--cache", CACHE, "-o", str(out))
    s = json.loads((out / "summary.json").read_text())
    prof = storage.profile("sdcard")
    assert s["run"]["storage"]["name"] == "sdcard" and s["run"]["storage"][limit] == prof[limit]
    delta = _loop(s)["diskstats_delta"]
    t = _fio_runtime_s(out)
    measured = delta["sectors_read"] * 512 / t if limit == "rbps" else delta["reads"] / t
    assert abs(measured - prof[limit]) <= 0.1 * prof[limit], (measured, prof[limit], delta, t)


def rate(b):
    """A byte rate as docs/storage.md's table writes it: whole MiB/s, else whole MB/s as the source gave it."""
    mib = 1 << 20
    return "%.0f MiB/s" % (b / mib) if b % mib == 0 else "%.0f MB/s" % (b / 1e6)


@pytest.mark.unit
def test_every_storage_profile_cites_its_numbers():
    """Each profile's source names a seed write-up or where its figures were published, and docs/storage.md's
    table has the profile's limits."""
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "storage.md")) as f:
        doc = f.read()
    for name, p in storage.PROFILES.items():
        assert re.search(r"seed 00\d|[a-z-]+\.(com|org|net)/\S+", p["source"]), (name, p["source"])
        row = [l for l in doc.splitlines() if l.startswith("| `%s` |" % name)]
        assert len(row) == 1, name
        cells = [c.strip() for c in row[0].split("|")[3:7]]
        assert cells == [rate(p["rbps"]), rate(p["wbps"]), str(p["riops"]), str(p["wiops"])], (name, cells)


@pytest.mark.bpf
def test_storage_and_iops_cap_refused_together(tmp_path):
    p = fstrace("run", "--fs", "erofs", "--workload", "cat-500", "--storage", "sdcard", "--iops-cap", "300",
                "--scale", SCALE, "--cache", CACHE, "-o", str(tmp_path / "x"), check=False)
    assert p.returncode == 1 and "give one" in p.stderr and not (tmp_path / "x").exists()
    p = fstrace("run", "--fs", "erofs", "--workload", "cat-500", "--storage", "floppy", "--scale", SCALE,
                "--cache", CACHE, "-o", str(tmp_path / "y"), check=False)
    assert p.returncode == 1 and "unknown storage profile 'floppy'" in p.stderr and not (tmp_path / "y").exists()


def _preset(tmp_path, name, *extra):
    out = tmp_path / name
    p = fstrace("bench", "--preset", name, "--runs", "1", "--no-baseline", "--scale", SCALE, "--cache", CACHE,
                "-o", str(out), *extra)
    return out, p.stdout


def _not_reproduced(text, name):
    from cli.bench import PRESETS
    assert "Not reproduced here:" in text
    for x in PRESETS[name]["not_reproduced"]:
        assert x in text


@pytest.mark.bpf
def test_preset_seed000(tmp_path):
    """seed 000's matrix on its cloud disk: both image size tables and every workload's table with a row per
    configuration, each with its measured time (or fio's bandwidth) and a cause."""
    from cli.bench import PRESETS
    p = PRESETS["seed000"]
    out, text = _preset(tmp_path, "seed000")
    doc = json.loads((out / "bench.json").read_text())
    configs = {(fs, "uncompressed" if c == "none" else str(b)) for fs in p["fs"] for c, b in p["variants"]}
    assert doc["storage"]["name"] == "cloud-3000iops" and len(doc["rows"]) == len(configs) * len(p["workloads"])
    lines = text.splitlines()

    def rows_after(i):
        rows = []
        for line in lines[i + 3:]:
            if not line.startswith("| "):
                break
            rows.append([c.strip() for c in line.strip("|").split("|")])
        return rows
    sizes = [i for i, line in enumerate(lines) if line == "Image size"]
    assert len(sizes) == 2  # the tree's images and the single file's
    for i in sizes:
        rows = rows_after(i)
        assert {(r[1], r[2]) for r in rows} == configs and len(rows) == len(configs)
        assert all(int(r[0]) > 0 for r in rows)
    for wl in p["workloads"]:
        rows = rows_after(lines.index(wl))
        assert {(r[0], r[1]) for r in rows} == configs and len(rows) == len(configs), (wl, rows)
        for r in rows:
            assert re.match(r"[\d.]+ MiB/s$" if wl in ("seqread", "randread", "randread-10m") else
                            r"[\d.]+ m?s \(", r[2]), (wl, r)
            assert r[3] and r[3] != "-", (wl, r)
    _not_reproduced(text, "seed000")


@pytest.mark.bpf
def test_preset_seed001(tmp_path):
    out, text = _preset(tmp_path, "seed001")
    doc = json.loads((out / "bench.json").read_text())
    assert len(doc["rows"]) == 27 * 2
    rows = [l for l in text.splitlines() if re.match(r"squashfs-(gzip|lzo|xz)-\d+\.squashfs ", l)]
    assert len(rows) == 27
    for line in rows:
        name, size, ratio, ctime, utime, rand = line.split()[:6]
        assert int(size) > 0 and ratio.endswith("%") and re.match(r"\d+m[\d.]+s$", ctime)
        assert re.match(r"\d+m[\d.]+s$", utime) and rand != "-"
    imgs = {i["label"]: i for i in doc["images"] if i["part"] == "tree"}
    assert all(i["build_seconds"] > 0 for i in imgs.values())
    _not_reproduced(text, "seed001")


@pytest.mark.bpf
def test_preset_seed002(tmp_path):
    out, text = _preset(tmp_path, "seed002")
    doc = json.loads((out / "bench.json").read_text())
    assert doc["storage"]["name"] == "sdcard" and len(doc["rows"]) == 12
    assert all(json.loads((out / r["dir"] / "summary.json").read_text())["run"]["storage"]["name"] == "sdcard"
               for r in doc["rows"])
    for name in ("none", "LZ4", "LZ4 HC", "XZ"):
        lines = [l for l in text.splitlines() if l.startswith("| %s |" % name)]
        assert len(lines) >= 4 + 3  # sizes, ratios, times, MiB/s; a cause line per format
        for l in lines:
            assert " - " not in l and "|  |" not in l
    _not_reproduced(text, "seed002")


@pytest.mark.bpf
def test_preset_seed004(tmp_path):
    out, text = _preset(tmp_path, "seed004", "--storage", "sata-ssd")
    doc = json.loads((out / "bench.json").read_text())
    assert len(doc["rows"]) == 7 * 4 and doc["storage"]["name"] == "sata-ssd"
    table = text.split("results on sata-ssd")[1].split("large file:")[0]
    rows = [l.split() for l in table.splitlines()[2:] if l.strip()]
    assert [r[0] for r in rows] == ["btrfs-none", "btrfs-lzo", "btrfs-zlib", "btrfs-zstd1", "btrfs-zstd3", "ext4",
                                    "xfs"]
    for r in rows:
        assert len(r) == 6 and "-" not in r[1:]
    assert re.search(r"^sata-ssd +\S+ +\S+ +\S+ +\S+$", text, re.M)
    _not_reproduced(text, "seed004")


@pytest.mark.unit
def test_seed000_tables_keep_the_seeds_shape():
    """seed000's tables from a bench document: image sizes largest first, times slowest first, fio bandwidth
    (fio's own) fastest first, each row with its run's cause."""
    from analysis import seeds, tables
    cfgs = [("erofs", {"compress": "none", "cluster": 4096}, "erofs-none"),
            ("squashfs", {"compress": "lz4hc", "block": 4096}, "squashfs-lz4hc-b4096")]

    def row(label, fs, wl, part, wall, bw=None):
        return {"label": label, "fs": fs, "workload": wl, "part": part, "wall_s": wall, "run": 1,
                "workload_bw_bytes": bw, "io_wait_share": 0.7, "oncpu_share": 0.2, "loop_requests": 10,
                "loop_mean_bytes": 4096, "loop_read_per_received": 1.5, "decompressed_method": "n/a"}
    doc = {"configs": [{"fs": f, "options": o, "label": lb} for f, o, lb in cfgs], "runs": 1,
           "images": [{"part": p, "fs": f, "label": lb, "bytes": n, "build_options": "-b 4096"}
                      for p in ("tree", "single") for (f, _, lb), n in zip(cfgs, (100, 50))],
           "rows": [row("erofs-none", "erofs", "tar-data", "tree", 0.5), row("squashfs-lz4hc-b4096", "squashfs",
                                                                             "tar-data", "tree", 2.0),
                    row("erofs-none", "erofs", "randread", "single", 1.0, 30 << 20),
                    row("squashfs-lz4hc-b4096", "squashfs", "randread", "single", 1.0, 10 << 20)]}
    text = seeds.render("seed000", [("cloud-3000iops", doc)], ["x"])
    lines = text.splitlines()
    tar = lines[lines.index("tar-data") + 3:lines.index("tar-data") + 5]
    assert tar[0].startswith("| squashfs | 4096 | 2.000 s") and tar[1].startswith("| erofs | uncompressed | 500.0 ms")
    rr = lines[lines.index("randread") + 3:lines.index("randread") + 5]
    assert rr[0].startswith("| erofs | uncompressed | 30.0 MiB/s")
    assert rr[1].startswith("| squashfs | 4096 | 10.0 MiB/s")
    assert all(tables.cause(doc["rows"][0]) in l for l in tar[1:])
    assert "| 100 | erofs | uncompressed | -b 4096 |" in text and "(storage: cloud-3000iops)" in text
