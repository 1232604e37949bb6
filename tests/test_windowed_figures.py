"""--budget's windowed block and erofs figures (analysis/windows.py sampled_count, devices.windowed_reads,
caches.erofs_windowed): counts the windows sampled are estimates over the whole traced time with a 95 % interval,
never the sample's raw counts as whole-run totals.  Pure analysis on tests/data/real.fst with a forged header and
forged records: the truth is what the forgery put there."""
import os

import pytest

from analysis import results, summary, tables, verdict
from budget_windows import GAP_NS, WINDOW_NS, device, erofs_forged, forged, window_open
from conftest import DATA
from scripts import bench_overhead as bench

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def base():
    return results.load(os.path.join(DATA, "real.fst"))


def test_the_same_rate_in_every_window_estimates_the_truth(base):
    """Every window sees its share of the device's reads (the windows' own exact count): the estimate is the
    whole traced time's count, and the windows' spread is none."""
    d = device(summary.summarize(forged(base, [5, 3, 8, 5, 2], total=700)))
    est = d["windowed"]["requests"]
    # each request 50 us of a 100 ms window: weighted up by the chance an edge cut it off (completion_weights)
    assert est["estimate"] == pytest.approx(700, rel=1e-3) and est["interval95"] == pytest.approx([700, 700], rel=2e-3)
    assert est["seen"] == 23 and d["requests"] == 23 and d["basis"] == "windows' sample"
    assert "block_rq_done counted" in est["method"]
    # by time alone: 4 reads in each window of 10 % of the time
    d = device(summary.summarize(forged(base, [4] * 6, dev_reads=False)))
    assert d["windowed"]["requests"]["estimate"] == pytest.approx(40 * 6, rel=1e-3)


def test_the_interval_narrows_with_more_windows(base):
    """The same spread of counts over 5 windows and over 40: a narrower interval around the truth."""
    widths = []
    for n in (5, 40):
        pattern = [(2, 4), (6, 4), (3, 4), (5, 4), (4, 4)]  # (seen, device reads) per window: 4 of 4 on average
        per = [pattern[i % 5] for i in range(n)]
        res = forged(base, [p[0] for p in per], total=4 * n * 10)
        for row, (_, reads) in zip(res.header["request_windows"]["windows"], per):
            row[-1] = [reads]
        est = device(summary.summarize(res))["windowed"]["requests"]
        lo, hi = est["interval95"]
        assert lo <= 4 * n * 10 <= hi
        widths.append((hi - lo) / est["estimate"])
    assert widths[1] < widths[0] / 2


def test_records_outside_the_windows_are_not_counted(base):
    """Reads queued between windows, or after sys_enter's detach, are not in any window's count."""
    late = window_open(0) + WINDOW_NS + 10
    between = window_open(0) + WINDOW_NS + GAP_NS // 2
    clean = device(summary.summarize(forged(base, [3, 3, 3], total=90)))["windowed"]["requests"]
    noisy = device(summary.summarize(forged(base, [3, 3, 3], total=90, extra_io=[
        (late, late + 1000), (between, between + 1000), (between + 5, between + 900)])))["windowed"]["requests"]
    assert noisy["seen"] == clean["seen"] == 9 and noisy["estimate"] == clean["estimate"] == pytest.approx(90, rel=1e-3)


def test_a_device_without_its_per_window_reads_falls_back_to_the_windows_time(base):
    d = device(summary.summarize(forged(base, [4, 4, 4], dev_reads=False)))
    est = d["windowed"]["requests"]
    assert est["auxiliary"] == "window time"
    assert "scaled by the time the windows covered" in est["method"] and "block_rq_done was not attached" in \
        est["method"]


def test_unseen_requests_are_not_claimed_from_windowed_records(base):
    """The kernel's 34 reads against 9 recorded in the windows: no loss said; with the exact count (block_rq_done)
    the loss is the kernel's count less it."""
    res = forged(base, [3, 3, 3], total=30)
    s = summary.summarize(res)
    d = device(s)
    assert d["diskstats_delta"]["reads"] == 34 and d["unseen_requests"] is None and "unseen_why" in d
    assert not s["unseen_block_requests"] and "match /proc/diskstats" not in verdict.lost_line(s)
    assert "unknown on %s" % next(iter(s["devices"])) in verdict.lost_line(s)
    res.header["kernel_aggregates"]["block_figures"] = [{"dev": res.header["devices"][0]["dev"], "basis": "exact",
                                                        "counted_by": "block_rq_done",
                                                        "ops": {"read": {"requests": 30, "bytes": 30 * 4096}}}]
    d = device(summary.summarize(res))
    assert d["exact"]["requests"] == 30 and d["unseen_requests"] == 4 and "block_rq_done" in d["unseen_method"]
    assert "30 reads (exact, block_rq_done); ≈ 30 (95 %: 30–30, windows)" in verdict.device_line("x", d)
    # the hooks always attached: every recorded completion counts, as before
    res.header["request_windows"]["windowed_probes"] = ["sys_enter", "sys_exit"]
    d = device(summary.summarize(res))
    assert d["basis"] == "every request" and "windowed" not in d and d["unseen_requests"] == 34 - 9


def test_the_bench_finds_one_windowed_count_under_a_device_and_one_under_erofs(base):
    s = summary.summarize(erofs_forged(base, [3, 5, 4, 4]))
    figs = bench.windowed_figure_estimates(s)
    name = next(iter(s["devices"]))
    block, why = bench.count_estimate(figs["devices"][name], bench.BLOCK_COUNT_KEYS, name)
    assert why is None and block["path"] == "windowed/requests" and block["estimate"] == pytest.approx(160, rel=1e-3)
    erofs, why = bench.count_estimate(figs["erofs"], bench.EROFS_COUNT_KEYS, "erofs")
    # 16 reads seen, per read call 1 of 2, 320 calls in all
    assert why is None and erofs["path"] == "windowed/reads" and erofs["estimate"] == pytest.approx(160)
    er = s["erofs"]
    assert er["basis"] == "windows' sample" and er["windowed"]["seen"]["events"]["map"] == 16
    assert er["events"]["map"]["estimate"] == pytest.approx(160) and "≈ 160" in verdict.estimate_text(
        er["events"]["map"])
    # always attached: exact counts, no estimate for the bench to find
    s = summary.summarize(forged(base, [3, 5]))
    assert bench.windowed_figure_estimates(s)["erofs"] == []


def test_erofs_reads_beside_another_filesystem_are_its_own(base):
    """Traced beside btrfs, the erofs reads are those on erofs's superblock, and none the kernel counted apart."""
    res = erofs_forged(base, [3, 5, 4, 4], others_traced=True)
    er = summary.summarize(res)["erofs"]
    assert er["windowed"]["reads"]["estimate"] == pytest.approx(160)
    assert er["windowed"]["reads"]["method"].startswith("reads on the erofs filesystems only")
    res.header["request_windows"]["windows"][1][12][1] = 2  # the kernel counted 2 reads apart in a window
    er = summary.summarize(res)["erofs"]
    assert "estimate" not in er["windowed"]["reads"] and "not told apart" in er["windowed"]["reads"]["why"]


def test_a_table_gives_a_windowed_loop_device_its_exact_reads_or_none(base):
    """A bench table's loop_requests: never the windows' count as the run's."""
    res = forged(base, [3, 3, 3], total=30)
    res.header["devices"][0]["level"] = "loop"
    assert tables.row_from_summary(summary.summarize(res))["loop_requests"] is None
    res.header["kernel_aggregates"]["block_figures"] = [{"dev": res.header["devices"][0]["dev"], "basis": "exact",
                                                        "counted_by": "block_rq_done",
                                                        "ops": {"read": {"requests": 31, "bytes": 31 * 4096}}}]
    assert tables.row_from_summary(summary.summarize(res))["loop_requests"] == 31
