"""Alignment figures implied by the images' own formats.

erofs stores compressed data in whole filesystem blocks (4 KiB), so every
block request it makes is 4 KiB aligned at both ends.  squashfs packs
variable-size compressed blocks back to back and reads through a 1 KiB device
block (max(1 KiB, logical block size)), so its requests are 1 KiB aligned but
mostly not 4 KiB aligned.
"""
import numpy as np
import pytest

from analysis import selection

pytestmark = pytest.mark.bpf


def loop_stats(summary):
    return [d for d in summary["devices"].values() if d["level"] == "loop"][0]


def test_erofs_requests_are_block_aligned(erofs_tar_16k):
    _, res, summary = erofs_tar_16k
    d = loop_stats(summary)
    assert d["requests"] > 50
    assert d["aligned_4k_pct"] == 100.0
    assert d["unit_bytes"] == 16384
    # pclusters are at most 16 KiB but need not start on a 16 KiB boundary
    assert d["aligned_unit_pct"] < 100.0


def test_squashfs_requests_are_1k_not_4k_aligned(squashfs_tar):
    _, res, summary = squashfs_tar
    d = loop_stats(summary)
    assert d["requests"] > 50
    assert d["aligned_1k_pct"] == 100.0
    assert d["aligned_4k_pct"] < 60.0
    assert d["cross_unit_pct"] > 0.0


def test_kernel_counters_agree_with_records(erofs_tar_16k, squashfs_tar):
    """The in-kernel alignment counters and the records are two computations of one thing."""
    for _, res, _ in (erofs_tar_16k, squashfs_tar):
        io = res["io"]
        for agg in res.header["kernel_aggregates"]["alignment"]:
            rows = io[io["dev"] == agg["dev"]]
            unit = [d["unit_bytes"] for d in res.header["devices"] if d["dev"] == agg["dev"]][0]
            start = rows["sector"].astype(np.uint64) * np.uint64(512)
            end = start + rows["bytes"].astype(np.uint64)
            assert agg["nr"] == len(rows)
            assert agg["start_4k"] == int((start % np.uint64(4096) == 0).sum())
            assert agg["end_unit"] == int((end % np.uint64(unit) == 0).sum())


def test_kernel_size_histogram_agrees_with_records(erofs_tar_16k):
    from analysis.hist import log2_slots
    _, res, _ = erofs_tar_16k
    io = res["io"]
    metric = selection.enum_value(res.header, "hist_metric", "io_bytes")
    hists = [h for h in res.header["kernel_aggregates"]["histograms"] if h["metric"] == metric and
             h["sub"] == res.io_op("read")]
    assert hists
    for h in hists:
        rows = io[(io["dev"] == h["dev"]) & (res.io_ops(io) == res.io_op("read"))]
        assert h["slots"] == log2_slots(rows["bytes"], len(h["slots"]))
