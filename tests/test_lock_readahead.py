"""Lock wait as its own part of a request, and the readahead windows the kernel sized for it."""
import gzip
import re

import pytest

from analysis import results, sampling
from conftest import offcpu_by_reason, run_summary

pytestmark = pytest.mark.bpf

# the slow paths of the sleeping locks: where a thread waiting for one goes off-CPU
SLEEPING_LOCK = re.compile(r"^(__mutex_lock\S*|mutex_lock\S*|rwsem_down_\S+|__down\S*|rt_mutex\S*|percpu_down\S*|"
                           r"__percpu_down\S*)$")


def kernel_config(name):
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            return any(line.strip() == name + "=y" for line in f)
    except OSError:
        return None


def folded(out):
    return sampling.offcpu_folded(results.load(str(out / "results.fst")).header)


def test_parallel_squashfs_readers_wait_for_the_decompressor_lock(tmp_path):
    """Four cold readers of an xz squashfs: lock wait is measured, and only where the kernel stack is in a lock."""
    # every off-CPU interval's stack at its switch out (exact, scheduler frames kept): the stacks' lock time
    # must equal the part's, and each lock wait's stack must show the lock's slow path
    s = run_summary(tmp_path / "p4", "--fs", "squashfs", "--compress", "xz", "--cluster", "131072",
                    "--workload", "cat-all-p4", "--offcpu-sample-us", "0")
    lk = s["lock_wait"]
    assert lk["available"] and lk["tier"] in ("tp_btf", "raw_tp")
    assert lk["ns"] > 0 and lk["waits"] > 0
    assert s["attribution"]["parts_ns"]["lock_ns"] == lk["ns"]
    assert s["attribution"]["unaccounted_ns"] == 0
    # independent evidence: the stack the thread was switched out with (taken by the unwinder, not by the
    # contention tracepoints) ends in a sleeping lock's slow path for every lock wait, and for no other wait
    stacks = folded(tmp_path / "p4" / "out")
    lock_ns = 0
    for (reason, stack), ns in stacks.items():
        in_lock = any(SLEEPING_LOCK.match(f) for f in stack.split(";"))
        if reason == "lock_wait":
            assert in_lock, stack
            lock_ns += ns
        else:
            assert not (in_lock and stack.split(";")[-1].startswith("__mutex_lock")), (reason, stack)
    # a stack the kernel could not store is counted by reason, not dropped
    lost = sampling.stack_lost_by_reason(results.load(str(tmp_path / "p4" / "out" / "results.fst")).header)
    assert lock_ns + lost.get("lock_wait", 0) == lk["ns"]
    # and every other reason's too: the stacks and the attribution are one measurement
    res = results.load(str(tmp_path / "p4" / "out" / "results.fst"))
    assert res.header["offcpu"]["sampling"] == "every_interval" and res.header["offcpu"]["walked_at"] == "switch_out"
    total, parts = offcpu_by_reason(res)
    assert sum(total.values()) + res.header["offcpu"]["stack_lost_ns"] == sum(parts.values())
    for reason in parts:
        assert total.get(reason, 0) + lost.get(reason, 0) == parts[reason], reason
    # a counted lock wait is one the request slept in, and every lock sleep is counted
    req = results.load(str(tmp_path / "p4" / "out" / "results.fst"))["req"]
    assert ((req["nr_lock_waits"] > 0) == (req["lock_ns"] > 0)).all()
    assert lk["requests_waiting"] == int((req["lock_ns"] > 0).sum())
    if kernel_config("CONFIG_SQUASHFS_DECOMP_SINGLE"):
        # one decompressor per filesystem: the readers queue on its mutex
        on_decomp = sum(ns for (reason, stack), ns in stacks.items()
                        if reason == "lock_wait" and "squashfs_decompress" in stack.split(";"))
        assert on_decomp > 0.5 * lk["ns"]

    # the same files read by one reader: nobody to contend with for the decompressor
    one = run_summary(tmp_path / "p1", "--fs", "squashfs", "--compress", "xz", "--cluster", "131072",
                      "--workload", "cat-all")
    assert one["lock_wait"]["available"]
    one_stacks = folded(tmp_path / "p1" / "out")
    assert not any("squashfs_decompress" in st.split(";") for (reason, st) in one_stacks if reason == "lock_wait")
    assert one["reads"]["bytes"] == s["reads"]["bytes"] == s["ground_truth"]["read_bytes"]


def test_readahead_windows_cover_a_cold_sequential_read(tmp_path):
    """Every page of a cold sequential read arrives in a readahead window; a warm re-read needs none."""
    cold = run_summary(tmp_path / "cold", "--fs", "erofs", "--workload", "seqread")
    ra = cold["readahead"]
    if not ra["available"]:  # kernels before the readahead tracepoints (6.10) must say so
        assert ra["why"]
        pytest.skip("no readahead figures on this kernel: %s" % ra["why"])
    file_pages = (cold["ground_truth"]["read_bytes"] + 4095) // 4096
    assert ra["windows"] > 0
    assert 1 <= ra["requests_with_readahead"] <= ra["windows"]
    assert ra["pages"] >= file_pages
    assert sum(ra["window_hist_log2_pages"]) == ra["windows"]
    limit_pages = ra["device_read_ahead_kb"] // 4
    assert limit_pages > 0
    # the window ramps up to the device's limit on a read this long (the kernel may pass it, never stay below)
    assert ra["max_window_pages"] >= min(limit_pages, file_pages // 4)

    warm = run_summary(tmp_path / "warm", "--fs", "erofs", "--workload", "seqread", "--warm")
    assert warm["readahead"]["windows"] == 0
    assert warm["reads"]["pagecache_misses"] == 0
    assert warm["reads"]["bytes"] == cold["reads"]["bytes"]
