"""fstrace advise: Pareto front, mixes, and cause sentences whose every number is a figure of the bench results."""
import json
import os

import numpy as np
import pytest

from conftest import CACHE, SCALE, fstrace
from analysis import advice, results
from workloads import dataset, images

EROFS_4K, SQUASHFS_4K = "erofs-lz4hc12-C4096", "squashfs-lz4hc-b4096"
SQUASHFS_4K_OPTS = {"compress": "lz4hc", "block": 4096}
# squashfs keeps decompressed metadata (inode, directory, fragment and id tables) in a cache of 8 blocks of 8 KiB
# (SQUASHFS_CACHED_BLKS, fs/squashfs/squashfs_fs.h) and reads a missed block with its own bios into private pages
# (fs/squashfs/block.c: not the block device's page cache; the partial-page cache there needs 4 KiB device
# blocks, and this kernel reads squashfs through 1 KiB ones).  erofs reads inodes and directories through the page
# cache (erofs_bread -> read_mapping_folio), so a cold run reads each 4 KiB block once.
SQUASHFS_CACHED_BLKS = 8
# Tree size decides seed 000's full-random stat: at the test scale (0.05) squashfs's inode and directory tables
# are 7 metadata blocks and fit that cache, and squashfs needs fewer requests than erofs (measured: 12 vs 111); at
# 0.1 (800 files) they are 12 blocks and a stat in random order mostly misses, as on the seed's 7000-file rootfs.
STAT_SCALE = "0.1"


@pytest.mark.unit
def test_pareto_front_pure():
    pts = [("a", 10, 5.0), ("b", 8, 6.0), ("c", 12, 4.0), ("d", 11, 6.0), ("e", 8, 7.0), ("f", 10, 5.0)]
    # d is beaten by a (smaller and faster), e by b (same size, faster); a and f tie and both stay
    assert advice.pareto(pts) == ["a", "b", "c", "f"]
    assert advice.pareto([("x", 1, 1.0)]) == ["x"]


def _row(wall, io, cpu, other, requests, mean_bytes):
    return {"wall_s": wall, "io_wait_s": io, "oncpu_s": cpu, "other_s": other, "loop_requests": requests,
            "loop_mean_bytes": mean_bytes, "loop_aligned_4k_pct": 100.0, "io_wait_share": io / wall,
            "oncpu_share": cpu / wall, "decompression_share": None, "decompression_note": "unavailable"}


@pytest.mark.unit
@pytest.mark.parametrize("slower,says,never", [
    # more I/O wait on more requests, less CPU (the boot mix's top two on the default dataset looked like this):
    # the cause is the requests, not the CPU time it spends less of
    (_row(1.27, 0.37, 0.21, 0.03, 5676, 22339), "B issues 2.6x more device requests (5676 vs 2173", "on CPU"),
    # more I/O wait on fewer requests: longer waits, never "more requests"
    (_row(1.27, 0.37, 0.21, 0.03, 1000, 90000), "B spends 0.370 s in I/O wait against 0.290 s, on 1000 device "
     "requests against 2173 (87.9 KiB mean against 49.5)", "more device requests"),
    # 2 % more requests is no "1.0x more"
    (_row(1.27, 0.37, 0.21, 0.03, 2216, 22339), "B spends 0.370 s in I/O wait against 0.290 s, on 2216 device "
     "requests against 2173 (21.8 KiB mean against 49.5)", "more device requests"),
    # no part longer: no part is named as the cause
    (_row(1.27, 0.20, 0.21, 0.01, 5676, 22339), "the difference lies outside its traced requests", "spends 0."),
])
def test_cause_is_a_part_where_the_slower_spends_more(slower, says, never):
    faster = _row(1.26, 0.29, 0.45, 0.03, 2173, 50725)
    med = {("tar-data", "A"): faster, ("tar-data", "B"): slower}
    cand = [{"label": label, "bytes": 100 << 20, "seconds": {"tar-data": r["wall_s"]}}
            for label, r in (("A", faster), ("B", slower))]
    c = advice.explain(cand[0], cand[1], med, [("tar-data", 1)])
    assert says in c["text"] and never not in c["text"], c["text"]
    assert advice.numbers(c["text"], {"A", "B", "tar-data"}) == [c["facts"][i]["text"] for i in c["order"]]


@pytest.mark.unit
def test_a_lead_inside_run_to_run_noise_is_said():
    def cand(rank, label, spread):
        return {"rank": rank, "label": label, "bytes": 1 << 20, "weighted_s": sum(spread) / 2, "pareto": True,
                "seconds": {"tar-data": sum(spread) / 2}, "spread_s": spread}
    mix = [("tar-data", 1)]
    noisy = advice.render({"ranking": [cand(1, "A", [1.154, 1.7]), cand(2, "B", [1.255, 1.548])], "causes": []},
                          mix)
    assert "Not by more than run-to-run noise: A's runs took 1.154-1.700 s (weighted), B's 1.255-1.548 s" in noisy
    clear = advice.render({"ranking": [cand(1, "A", [1.1, 1.2]), cand(2, "B", [1.21, 1.5])], "causes": []}, mix)
    assert "noise" not in clear


@pytest.mark.bpf
def test_unknown_mix_entry_and_fs_are_one_line(tmp_path):
    for args, want in [(["--mix", "nosuch=1"], "unknown workload 'nosuch'"),
                       (["--mix", "cat-500=0"], "weight of cat-500 must be a positive number"),
                       (["--mix", "write-small=1"], "write-small writes"),
                       (["--fs", "zfs"], "unknown filesystem 'zfs'")]:
        p = fstrace("advise", *args, "-o", str(tmp_path / "o"), check=False)
        assert p.returncode == 1 and p.stdout == "", p.stderr
        assert p.stderr.count("\n") == 1 and want in p.stderr, p.stderr
        assert not os.path.exists(tmp_path / "o")


# how a fact's text states its value, and how far from the value the rounding to that text may take it
SAID_AS = {"count": 1, "seconds": 1, "pct": 100, "pct100": 1, "ratio": 1, "kib": 1 / 1024, "mib": 1 / (1 << 20)}
SAID_WITHIN = {
    "count": lambda v: 500 if v >= 10000 else 0.5,        # thousands as "N k"
    "seconds": lambda v: 0.0005 if v < 10 else 0.005,
    "pct": lambda v: 0.005,                               # a share, to a whole per cent
    "pct100": lambda v: 0.5,
    "ratio": lambda v: 0.05 if v < 10 else 0.5,
    "kib": lambda v: 0.05 * 1024,
    "mib": lambda v: 0.05 * (1 << 20),
}


def said(text, fmt):
    """The value a fact's text states, in the figure's own unit."""
    n = float(text[:-2]) * 1000 if text.endswith(" k") else float(text)
    return n / SAID_AS[fmt]


def _check_sentences(out, doc_key, bench_sub):
    adv = json.loads((out / "advice.json").read_text())[doc_key]
    bench = json.loads((out / bench_sub / "bench.json").read_text())
    med = advice.medians(bench)
    sizes = advice.image_sizes(bench, ["tree"])
    names = set(sizes) | {wl for wl, _ in med}
    assert adv["causes"]
    for c in adv["causes"]:
        facts = c["facts"]
        for f in facts:
            if "of" in f:
                a, b = (facts[i]["value"] for i in f["of"])
                assert f["value"] == pytest.approx(a / b)
            elif f["figure"] == "bytes":
                assert f["value"] == sizes[f["label"]]
            else:
                assert f["value"] == med[(f["workload"], f["label"])][f["figure"]]
            within = SAID_WITHIN[f["format"]](f["value"]) * (1 + 1e-9)  # half a unit of the last digit, inclusive
            assert said(f["text"], f["format"]) == pytest.approx(f["value"], abs=within), f
        assert sorted(c["order"]) == list(range(len(facts)))
        assert advice.numbers(c["text"], names) == [facts[i]["text"] for i in c["order"]]
    # the front: the candidates no other is at least as small and as fast as, and better in one
    ranking = adv["ranking"]

    def beaten(c):
        return any(o["bytes"] <= c["bytes"] and o["weighted_s"] <= c["weighted_s"] and
                   (o["bytes"], o["weighted_s"]) != (c["bytes"], c["weighted_s"]) for o in ranking)
    assert [c["pareto"] for c in ranking] == [not beaten(c) for c in ranking]
    for c in adv["ranking"]:
        assert c["weighted_s"] == med[("stat-all", c["label"])]["wall_s"]
        times = [r["wall_s"] for r in bench["rows"] if r["label"] == c["label"]]
        assert c["spread_s"] == [min(times), max(times)]


def _loop_reads(bench_dir, workload, label):
    """(bytes read, distinct bytes read, lowest byte read) on the image's loop device in the median run of one
    candidate: bytes read again were read before in the same cold run."""
    med = advice.medians(json.loads((bench_dir / "bench.json").read_text()))
    res = results.load(str(bench_dir / med[(workload, label)]["dir"] / "results.fst"))
    io = res.records["io"]
    loops = [d["dev"] for d in res.header["devices"] if d["is_loop"]]
    rd = io[(res.io_ops(io) == res.io_op("read")) & np.isin(io["dev"], loops)]
    assert len(rd), label
    start = rd["sector"].astype(np.int64) * 512
    ivs = sorted(zip(start.tolist(), (start + rd["bytes"].astype(np.int64)).tolist()))
    distinct, reach = 0, 0
    for a, b in ivs:
        distinct += max(0, b - max(a, reach))
        reach = max(reach, b)
    return int(rd["bytes"].astype(np.int64).sum()), distinct, ivs[0][0]


def _squashfs_4k_layout(scale):
    root, manifest = dataset.ensure_default(CACHE, float(scale))
    rec = images.ensure_image("squashfs", SQUASHFS_4K_OPTS, os.path.join(root, "tree"), manifest["id"] + "/tree",
                              CACHE)
    return images.squashfs_layout(rec["path"])


@pytest.mark.bpf
def test_stat_all_ranks_erofs_4k_above_squashfs_4k_once_tables_outgrow_squashfs_cache(tmp_path):
    out = tmp_path / "adv"
    fstrace("advise", "--mix", "stat-all=1", "--fs", "erofs,squashfs", "--compress", "lz4hc", "--cluster", "4096",
            "--runs", "1", "--iops-cap", "3000", "--scale", STAT_SCALE, "--cache", CACHE, "-o", str(out))
    doc = json.loads((out / "advice.json").read_text())
    # seed 000's ranking, uncapped and on its 3000-IOPS disk
    for key in ("uncapped", "capped"):
        assert [c["label"] for c in doc[key]["ranking"]] == [EROFS_4K, SQUASHFS_4K], doc[key]["ranking"]
        assert (doc[key]["causes"][0]["better"], doc[key]["causes"][0]["worse"]) == (EROFS_4K, SQUASHFS_4K)
    # why, from the image: its inode and directory tables do not fit squashfs's metadata cache
    layout = _squashfs_4k_layout(STAT_SCALE)
    assert len(layout["inode_dir_blocks"]) > SQUASHFS_CACHED_BLKS
    # and from the traces: squashfs reads nothing but its metadata tables, each byte of them many times over
    # (measured: 47 KiB distinct, read 112 times); erofs reads each block about once (measured: exactly once)
    sq_total, sq_distinct, sq_lowest = _loop_reads(out / "uncapped", "stat-all", SQUASHFS_4K)
    er_total, er_distinct, _ = _loop_reads(out / "uncapped", "stat-all", EROFS_4K)
    assert sq_lowest >= layout["inode_table"] // 4096 * 4096  # whole device blocks (1 KiB here, 4 KiB at most)
    assert sq_total >= 10 * sq_distinct
    assert er_total < 2 * er_distinct
    # the request counts the seed's gap comes from (measured: 1976 vs 220)
    rows = {r["label"]: r for r in json.loads((out / "uncapped" / "bench.json").read_text())["rows"]}
    assert rows[SQUASHFS_4K]["loop_requests"] > 4 * rows[EROFS_4K]["loop_requests"]


@pytest.mark.bpf
def test_advise_stat_all_real_run(tmp_path):
    out = tmp_path / "adv"
    p = fstrace("advise", "--mix", "stat-all=1", "--fs", "erofs,squashfs", "--compress", "lz4hc", "--cluster",
                "4096", "--runs", "1", "--iops-cap", "3000", "--scale", SCALE, "--cache", CACHE, "-o", str(out))
    assert "advice:" in p.stdout and "fstrace: bench [" not in p.stdout and "left]" in p.stderr
    for f in ("advice.json", "advice.txt", "advice.html", "uncapped/bench.json", "iops-3000/bench.json"):
        assert (out / f).exists(), f
    _check_sentences(out, "uncapped", "uncapped")
    _check_sentences(out, "capped", "iops-3000")
    # the other side of the test above: at this scale squashfs's tables fit its metadata cache, and it reads each
    # byte of them about once (measured: 24 KiB distinct, 34 KiB read: a block's 2-byte header and the block are
    # two requests that share their first KiB)
    assert len(_squashfs_4k_layout(SCALE)["inode_dir_blocks"]) <= SQUASHFS_CACHED_BLKS
    sq_total, sq_distinct, _ = _loop_reads(out / "uncapped", "stat-all", SQUASHFS_4K)
    assert sq_total < 2 * sq_distinct
    html = (out / "advice.html").read_text()
    assert "Image size vs weighted time" in html and "Attribution on stat-all" in html
    # budget below every image: one line, no advice directory
    p = fstrace("advise", "--mix", "stat-all=1", "--fs", "erofs", "--compress", "lz4hc", "--cluster", "4096",
                "--runs", "1", "--budget-bytes", "4096", "--scale", SCALE, "--cache", CACHE, "-o",
                str(tmp_path / "b"), check=False)
    assert p.returncode == 1 and "no candidate fits in --budget-bytes 4096" in p.stderr
    assert not os.path.exists(tmp_path / "b") and not os.path.exists(str(tmp_path / "b") + ".partial")
