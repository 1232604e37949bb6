"""erofs's own tracepoints: the pclusters each read needed, checked against the block I/O the device saw."""
import os
import subprocess

import pytest

from analysis import results
from analysis import caches
from conftest import CACHE, COLLECTOR, SCALE, fstrace

pytestmark = pytest.mark.bpf


def test_cold_read_fetches_every_needed_pcluster_once(erofs_tar_16k):
    """Cold tar of compressed erofs: the pclusters erofs mapped are exactly the compressed data read."""
    _, res, s = erofs_tar_16k
    e = s["erofs"]
    assert e["events"]["map"] > 0 and e["events"]["readahead"] > 0
    assert e["pclusters"] > 0
    loop = [d for d in s["devices"].values() if d["level"] == "loop"][0]
    if loop["unseen_requests"]:
        # the kernel withheld block events (docs/measuring.md, "Lost events"): the exact comparison cannot be made
        pytest.skip("the kernel withheld %d block completions: pclusters not compared with the device"
                    % loop["unseen_requests"])
    assert e["pclusters_reread"] == 0 and e["pclusters_without_device_read"] == 0
    assert e["pclusters_read_once"] == e["pclusters"]
    # the same bytes, independently: block requests queued from erofs's compressed-data path
    assert e["pcluster_bytes"] == loop["by_origin"]["erofs compressed data"]["bytes"]
    assert max(i for i, n in enumerate(e["plen_hist_log2_bytes"]) if n) <= 14  # no pcluster above 16 KiB
    assert e["per_request"]["map"]["requests_with"] > 0


def reread_after_dropping_the_file(img, mnt, opts):
    """Read a file cold, drop only its page cache, trace a second read: which pclusters came from memory."""
    loop = subprocess.check_output(["losetup", "-f", "--show", "-r", img], text=True).strip()
    os.makedirs(mnt, exist_ok=True)
    try:
        subprocess.check_call(["mount", "-t", "erofs", "-o", opts, loop, mnt])
        try:
            subprocess.check_call(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"])
            path = max((os.path.join(d, f) for d, _, fs in os.walk(mnt) for f in fs), key=os.path.getsize)
            with open(path, "rb") as f:
                f.read()
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            rdev = os.stat(loop).st_rdev
            out = os.path.join(os.path.dirname(mnt), "r.fst")
            subprocess.run([COLLECTOR, "-o", out, "-d", "%d:%d" % (os.major(rdev), os.minor(rdev)), "--", "cat",
                            path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
        finally:
            subprocess.call(["umount", mnt])
    finally:
        subprocess.call(["losetup", "-d", loop])
    res = results.load(out)
    return caches.erofs_events(res, res["req"]), res


def test_without_a_compressed_cache_every_pcluster_comes_from_the_device(tmp_path):
    """cache_strategy=disabled keeps no compressed pages: a second read fetches every pcluster again."""
    out = tmp_path / "run"
    fstrace("run", "--fs", "erofs", "--cluster", "16384", "--workload", "seqread", "--scale", SCALE, "--cache",
            CACHE, "-o", str(out))
    image = results.load(str(out / "results.fst")).config["image"]["path"]  # built and cached by the run
    e, res = reread_after_dropping_the_file(image, str(tmp_path / "mnt"), "ro,cache_strategy=disabled")
    assert e["pclusters"] > 0
    unseen = sum(d["diskstats_end"]["reads"] - d["diskstats_start"]["reads"] for d in res.header["devices"]) - \
        len(res["io"])
    if unseen:
        pytest.skip("the kernel withheld %d block completions: pclusters not compared with the device" % unseen)
    assert e["pclusters_without_device_read"] == 0, e
    # a pcluster split between two readahead windows is read twice: nothing keeps its compressed pages
    assert e["pclusters_read_once"] + e["pclusters_reread"] == e["pclusters"]
