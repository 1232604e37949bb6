"""Images, workloads and the bench matrix: options really applied, fair inputs, tables that add up."""
import csv
import json
import subprocess

import pytest

from conftest import CACHE, SCALE, fstrace
from workloads import images

pytestmark = pytest.mark.bpf


@pytest.mark.parametrize("fs,opts", [
    ("squashfs", {"compress": "lz4hc", "block": 16384}),
    ("squashfs", {"compress": "none", "block": 4096}),
    ("erofs", {"compress": "lz4hc", "cluster": 16384}),
    ("erofs", {"compress": "none"}),
])
def test_image_options_are_applied(default_tree, fs, opts):
    src, manifest = default_tree
    rec = images.ensure_image(fs, opts, src, manifest["id"] + "/tree", CACHE)
    assert rec["verified"]["checked"] is True
    if fs == "squashfs":
        out = subprocess.run(["unsquashfs", "-s", rec["path"]], stdout=subprocess.PIPE, text=True).stdout
        assert "Block size %d" % opts["block"] in out
        if opts["compress"] == "lz4hc":
            assert "Compression lz4" in out and "-Xhc" in out
        else:
            assert "Data is uncompressed" in out
    else:
        out = subprocess.run([images.erofs_tool("dump.erofs"), "-s", rec["path"]], stdout=subprocess.PIPE,
                             text=True).stdout
        feats = out.split("Filesystem features:")[1].splitlines()[0].split()
        assert ("0padding" in feats) == (opts["compress"] != "none")
        assert ("big_pcluster" in feats) == (opts.get("cluster", 4096) > 4096)
    assert rec["tool"].startswith("mkfs.erofs" if fs == "erofs" else "mksquashfs")


def test_unknown_preset_and_fs_are_refused(tmp_path):
    p = fstrace("bench", "--preset", "seed999", "-o", str(tmp_path / "b"), check=False)
    assert p.returncode == 1 and "unknown preset 'seed999'" in p.stderr
    p = fstrace("bench", "--fs", "zfs", "--workload", "randread", check=False)
    assert p.returncode == 1 and "unknown filesystem 'zfs'" in p.stderr


@pytest.fixture(scope="module")
def small_bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "b"
    p = fstrace("bench", "--fs", "erofs,squashfs", "--compress", "lz4hc", "--cluster", "4096",
                "--workload", "cat-500,randread-10m", "--runs", "2", "--scale", SCALE, "--cache", CACHE,
                "-o", str(out))
    return out, p.stdout


def test_bench_tables_and_files(small_bench):
    out, text = small_bench
    doc = json.loads((out / "bench.json").read_text())
    assert len(doc["rows"]) == 2 * 2 * 2
    labels = {r["label"] for r in doc["rows"]}
    assert labels == {"erofs-lz4hc12-C4096", "squashfs-lz4hc-b4096"}
    with open(out / "bench.csv") as f:
        assert len(list(csv.DictReader(f))) == len(doc["rows"])
    for label in labels:
        assert label in text
    assert "cat-500" in text and "randread-10m" in text and "image sizes (tree)" in text
    for img in doc["images"]:
        assert 0 < img["ratio_to_uncompressed"] < 1.0  # lz4hc at 4 KiB shrinks the dataset
    # every run's directory is a full run result
    for r in doc["rows"]:
        assert (out / r["dir"] / "results.fst").exists()


def test_same_random_file_list_on_every_image(small_bench):
    out, _ = small_bench
    lists = {p.read_text() for p in out.glob("*/cat-500/run-*/filelist.txt")}
    assert len(lists) == 1
    assert len(next(iter(lists)).splitlines()) == min(500, 400)  # the scaled dataset has 400 files


def test_cold_runs_are_cold(small_bench):
    out, _ = small_bench
    for r in json.loads((out / "bench.json").read_text())["rows"]:
        assert r["pagecache_misses"] > 0
        assert r["loop_requests"] > 0


def test_fio_requests_equal_fio_ios_in_bench(small_bench):
    out, _ = small_bench
    for run in out.glob("*/randread-10m/run-*"):
        s = json.loads((run / "summary.json").read_text())
        assert s["reads"]["count"] == s["ground_truth"]["ios"] == 2560


def test_compare_finds_the_configuration_that_changed(small_bench, tmp_path):
    """B is A with one configuration's runs made slower by a known amount of I/O wait: compare reports that
    configuration's ratio and component change, and nothing for the others."""
    out, _ = small_bench
    doc = json.loads((out / "bench.json").read_text())
    key = ("randread-10m", "erofs-lz4hc12-C4096")
    changed = [r for r in doc["rows"] if (r["workload"], r["label"]) == key]
    assert len(changed) == 2
    median_run = min(changed, key=lambda r: r["wall_s"])  # of two runs, the table's median run is the faster
    added_io_wait = median_run["wall_s"]
    for r in changed:
        r["io_wait_s"] += r["wall_s"]
        r["wall_s"] *= 2
    b = tmp_path / "b"
    b.mkdir()
    (b / "bench.json").write_text(json.dumps(doc))
    p = fstrace("compare", str(out), str(b))
    lines = [l.split() for l in p.stdout.splitlines()[1:] if l.strip()]
    assert len(lines) == 4
    for wl, label, _, _, ratio, moved, io_wait, _, oncpu, _, other in lines:
        if (wl, label) == key:
            assert (ratio, moved, io_wait) == ("2.000", "io_wait", "%+.3f" % added_io_wait)
        else:
            assert (ratio, io_wait, oncpu, other) == ("1.000", "+0.000", "+0.000", "+0.000")


def test_warm_run_hits_the_cache(tmp_path):
    """A warm run reads from the page cache: no misses and no block I/O of its own, unless this machine evicts
    idle page cache on its own (a DAMON pageout scheme, as on the VMs this runs on), whose evictions the verdict
    then names beside the misses, the only reads that may do I/O of their own."""
    from cli.devices import proactive_reclaim
    out = tmp_path / "warm"
    fstrace("run", "--fs", "erofs", "--workload", "cat-500", "--warm", "--scale", SCALE, "--cache", CACHE,
            "-o", str(out))
    s = json.loads((out / "summary.json").read_text())
    assert s["run"]["cache"] == "warm"
    assert s["run"]["proactive_reclaim"] == proactive_reclaim()
    loop = [d for d in s["devices"].values() if d["level"] == "loop"][0]
    misses = s["reads"]["pagecache_misses"]
    if misses:
        assert s["run"]["proactive_reclaim"], "misses in a warm run with nothing evicting page cache on its own"
        text = " ".join(l.strip() for l in fstrace("report", str(out)).stdout.splitlines())
        assert ("warm run, yet %d page-cache misses: this machine reclaims memory it judges idle on its own (%s)"
                % (misses, "; ".join(s["run"]["proactive_reclaim"]))) in text
        # I/O of its own only for a miss (one with none: a file inlined in metadata the cache still held)
        assert loop["charged_to_workload"] <= misses
        return
    # none of the traced run's own: a read-ahead the untraced warm-up queued may still complete after the
    # traced run began (seen: 5 of them after a test that had dropped the caches), charged to nobody
    assert loop["charged_to_workload"] == 0
    assert loop["by_charge"]["none"]["requests"] == loop["requests"]
