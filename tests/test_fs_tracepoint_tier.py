"""Filesystem figures from the tracepoint tier on this kernel (no fentry, no kprobes)."""
import pytest

from conftest import CACHE, SCALE, run_summary as run

pytestmark = pytest.mark.bpf


def test_erofs_async_decompression_is_timed_by_the_workqueue(tmp_path):
    """Cold sequential reads of compressed erofs decompress in kworkers: every item is timed exactly."""
    # the sampling tier at 4999 Hz (run's default is 997): enough samples of the kworkers on the small dataset
    s = run(tmp_path, "--fs", "erofs", "--workload", "tar-data", "--sample-hz", "4999")
    work = s["async_work"].get("erofs decompression")
    assert work, s["async_work"]
    assert work["items"] > 10
    assert work["ns"] > 0 and work["item_us"]["p50"] > 0
    assert work["queue_delay_us"] is not None
    # (async_work counts only the items a traced block request's completion queued or that woke a traced read:
    # more than 10 of them says the link holds; another device's, counted apart, may run beside)
    # the kworker hop: requests woken by these work items are charged only the part of the work they slept
    # through, never more than the work items ran
    parts = s["attribution"]["parts_ns"]
    assert parts["worker_ns"] <= work["ns"]
    assert s["attribution"]["unaccounted_ns"] == 0
    # the sampling tier sees the same kworkers: samples taken while they ran the work agree with its exact time
    est = s["decompression"]["estimate"]
    hz = int(est["method"].split(" at ")[1].split(" Hz")[0])
    expected = work["ns"] * hz / 1e9
    got = est["kworker_samples"].get("erofs decompression", 0)
    assert got > 0
    if expected >= 30:
        assert 0.5 * expected <= got <= 1.5 * expected, (got, expected)


def test_a_read_woken_by_a_completion_on_top_of_a_kworker_is_not_charged_to_its_work(tmp_path):
    """Uncompressed erofs read while compressed erofs is read beside it, its decompression running in kworkers: a
    block completion that comes in on top of such a kworker and wakes one of the reads is the completion's
    wakeup, not the work item's.  No read may name a waking work item (waker_seq) or have kworker time."""
    import random
    import subprocess
    import sys
    import time
    from analysis import results
    from analysis import selection
    from conftest import erofs_mounted
    # beside: compressed erofs read cold over and over for as long as the runs here last, on a direct-I/O loop
    # device as fstrace run's own (completions in interrupt context, so erofs hands decompression to its
    # kworkers), without the compressed-page cache and with each file's pages dropped before it is read again.
    # (A loop of fstrace run beside decompressed for 0.1 s of every 3 s: a run here could miss it every time.)
    rng = random.Random(5)
    words = [bytes(rng.choice(b"abcdefghijklmnop") for _ in range(rng.randint(2, 9))) for _ in range(512)]
    files = {"f%02d" % i: b" ".join(rng.choice(words) for _ in range(120000))[:512 << 10] for i in range(32)}
    reader = ("import os, sys\n"
              "stop, mnt = sys.argv[1:]\n"
              "names = [os.path.join(mnt, n) for n in sorted(os.listdir(mnt))]\n"
              "while not os.path.exists(stop):\n"
              "    for n in names:\n"
              "        fd = os.open(n, os.O_RDONLY)\n"
              "        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
              "        while os.read(fd, 1 << 20):\n"
              "            pass\n"
              "        os.close(fd)\n")
    stop = tmp_path / "stop"
    (tmp_path / "beside").mkdir()
    with erofs_mounted(tmp_path / "beside", files, ["-zlz4hc", "-C4096", "-T0"], direct_io=True,
                       mount_options="ro,cache_strategy=disabled") as (mnt, _):
        beside = subprocess.Popen([sys.executable, "-c", reader, str(stop), mnt])
        work, attempt, deadline = None, 0, time.monotonic() + 120
        try:
            while time.monotonic() < deadline:  # until a run overlapped enough of the other reads' decompression
                attempt += 1
                s = run(tmp_path / ("plain%d" % attempt), "--fs", "erofs", "--compress", "none", "--workload",
                        "tar-data")
                res = results.load(str(tmp_path / ("plain%d" % attempt) / "out" / "results.fst"))
                work = res.records.get("work")
                if work is not None and len(work) >= 20 or beside.poll() is not None:
                    break
        finally:
            stop.touch()
            try:  # it ends within a file's read; never left holding the mount
                beside.wait(timeout=60)
            except subprocess.TimeoutExpired:
                beside.kill()
                beside.wait()
    assert beside.returncode == 0, "the reader beside failed: exit %s" % beside.returncode
    assert work is not None and len(work) >= 20, "the decompression beside never overlapped a run (%d runs)" % attempt
    req = res["req"]
    woken = int((req["waker_seq"] != 0).sum())
    assert len(req) and woken == 0, "%d of %d reads named a work item as their waker" % (woken, len(req))
    assert int(req["worker_ns"].sum()) == 0 and int(req["worker_wait_ns"].sum()) == 0
    # the other run's decompression is not this run's kworker work: kept apart, every item of it
    assert "erofs decompression" not in s["async_work"], s["async_work"]
    other = s["async_work_unlinked"]["erofs decompression"]
    kind = selection.enum_value(res.header, "work_kind", "erofs decompression")
    assert other["items"] == int((work["kind"] == kind).sum())
    assert other["ns"] == int((work["ts_end_ns"] - work["ts_start_ns"]).astype("int64").sum())


def test_uncompressed_erofs_has_no_decompression_work(tmp_path):
    s = run(tmp_path, "--fs", "erofs", "--compress", "none", "--workload", "tar-data")
    assert "erofs decompression" not in s["async_work"]
    assert s["reads"]["bytes"] == s["ground_truth"]["read_bytes"]


def test_decompression_time_is_unavailable_here_and_says_why(tmp_path):
    s = run(tmp_path, "--fs", "squashfs", "--workload", "cat-500")
    dec = s["decompression"]
    if dec["available"]:  # a kernel with fentry or kprobes: then it must have measured squashfs
        assert any(g["fs"] == "squashfs" and g["units"] > 0 for g in dec["groups"])
    else:
        assert "fentry" in dec["why"] and "kprobe" in dec["why"]
        assert any("decompression" in u["figure"] for u in s["unavailable"])
    # squashfs's own caches need the same tier (a lookup and the read nested in it)
    fc = s["fs_caches"]
    if fc["available"]:
        mine = [g for g in fc["groups"] if g["cache"] == "squashfs metadata"]
        assert mine and mine[0]["hits"] + mine[0]["misses"] == mine[0]["lookups"] > 0
    else:
        assert "squashfs_cache_get" in fc["why"] and "squashfs_read_data" in fc["why"]
        assert "fentry" in fc["why"] and "kprobe" in fc["why"]
        assert any("squashfs" in u["figure"] and "cache" in u["figure"] for u in s["unavailable"])


def test_sampling_estimate_sees_squashfs_decompression(tmp_path):
    """In-task decompression estimated from sampled stacks: clearly positive for xz, zero without compression."""
    # at 4999 Hz (run's default is 997): enough samples on the small test dataset for the interval to be tight
    xz = run(tmp_path / "xz", "--fs", "squashfs", "--compress", "xz", "--cluster", "131072", "--workload", "tar-data",
             "--sample-hz", "4999")
    est = xz["decompression"]["estimate"]
    assert est["samples"] > 50
    assert est["ci95_ns"][0] > 0
    assert "squashfs_decompress" in est["by_function"]
    assert est["samples"] <= est["samples_in_requests"]
    none = run(tmp_path / "none", "--fs", "squashfs", "--compress", "none", "--workload", "tar-data",
               "--sample-hz", "4999")
    est0 = none["decompression"]["estimate"]
    assert est0["samples"] == 0 and est0["samples_in_requests"] > 0


def test_block_requests_are_traced_back_to_the_filesystem_path(tmp_path):
    """Which path missed the cache and went to the device: the stack each block request was queued from."""
    # every bio's stack (the default takes at most one per 10 ms per CPU): each path must show up
    sq = run(tmp_path / "sq", "--fs", "squashfs", "--workload", "cat-500", "--io-stacks", "all")
    loop = [d for d in sq["devices"].values() if d["level"] == "loop"][0]
    assert loop["by_origin"]["squashfs data"]["requests"] > 0
    assert loop["by_origin"]["squashfs metadata"]["requests"] > 0
    assert sum(v["requests"] for v in loop["by_origin"].values()) == loop["requests"]
    er = run(tmp_path / "er", "--fs", "erofs", "--workload", "cat-500", "--io-stacks", "all")
    loop = [d for d in er["devices"].values() if d["level"] == "loop"][0]
    assert loop["by_origin"]["erofs compressed data"]["requests"] > 0
    assert loop["by_origin"]["erofs metadata"]["requests"] > 0
    back = [d for d in er["devices"].values() if d["level"] == "backing"]
    if back and back[0].get("by_origin"):
        # a failure names where the backing device's requests came from instead
        origins = {k: v["requests"] for k, v in back[0]["by_origin"].items()}
        assert origins.get("loop worker (backing file I/O)", 0) > 0, (origins, back[0]["requests"])


def test_btrfs_write_compression_is_timed_in_its_workers(tmp_path):
    """seed 004's cp -a && sync: compressing btrfs runs one work item per delalloc chunk in its kworkers."""
    import math
    import os
    from workloads import catalog, dataset
    z = run(tmp_path / "zstd", "--fs", "btrfs", "--compress", "zstd", "--workload", "write-small")
    work = z["async_work"].get("btrfs write compression")
    assert work, z["async_work"]
    assert work["ns"] > 0 and work["workers"] >= 1
    assert sum(w["items"] for w in work["by_worker"]) <= work["items"]
    assert all(w["comm"].startswith("kworker") for w in work["by_worker"])
    # ground truth from the files copied: btrfs compresses a file's delalloc range in chunks of at most
    # 512 KiB, and every file bigger than a page goes through compression at least once
    tree = os.path.join(dataset.ensure_default(CACHE, float(SCALE))[0], "tree")
    sizes = [os.path.getsize(os.path.join(tree, f)) for f in catalog.tree_files(tree)]
    assert sum(1 for s in sizes if s > 4096) <= work["items"] <= sum(math.ceil(s / 524288) for s in sizes)
    # per chunk (sizes, time) needs the compressor's own function: fentry or kprobe
    wc = z["write_compression"]
    if wc["available"]:
        g = wc["groups"][0]
        assert g["alg"] == "zstd" and g["chunks"] >= work["items"] and g["out_bytes"] < g["in_bytes"]
    else:
        assert "fentry" in wc["why"] and "kprobe" in wc["why"]
    none = run(tmp_path / "none", "--fs", "btrfs", "--compress", "none", "--workload", "write-small")
    assert "btrfs write compression" not in none["async_work"]
    assert not none["write_compression"]["available"] or none["write_compression"]["groups"] == []
    assert none["writes"]["bytes"] == z["writes"]["bytes"] == z["ground_truth"]["write_bytes"]
