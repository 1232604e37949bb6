"""--budget's windowed block and erofs figures (analysis/windows.py sampled_count, devices.windowed_reads,
caches.erofs_windowed): counts the windows sampled are estimates over the whole traced time with a 95 % interval,
never the sample's raw counts as whole-run totals.  Pure analysis on tests/data/real.fst with a forged header and
forged records: the truth is what the forgery put there."""
import os

import numpy as np
import pytest

from analysis import amplification, report, results, summary, tables, verdict
from analysis.selection import enum_value
from budget_windows import GAP_NS, LOOK_NS, WINDOW_NS, device, erofs_forged, forged, window_open
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
    """Reads queued between windows, or after sys_enter's detach and the collector's look at the device's counts
    just after it (dev_reads_to_ns: a completion before that look is in the window's exact count, and so in its
    sample), are not in any window's count."""
    late = window_open(0) + WINDOW_NS + LOOK_NS + 10
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


def with_cut_requests(base, n, reads, recorded, length_ns, from_ns, to_ns, lead_ns):
    """n windows whose device completed reads requests between the collector's looks (from_ns and to_ns after the
    window opened), each length_ns long, block_bio_queue's attach begun lead_ns before the open: those completing
    less than length_ns - lead_ns after the first look were queued before the hooks were on and not recorded;
    recorded: the other ones, spread over the rest of the span."""
    cut = length_ns - (from_ns + lead_ns)
    io = []
    for i in range(n):
        o = window_open(i)
        step = (to_ns - from_ns - cut) // recorded
        io += [(c - length_ns, c) for c in (o + from_ns + cut + step * j + step // 2 for j in range(recorded))]
    res = forged(base, [0] * n, total=reads * n * 10, extra_io=io)
    rw = res.header["request_windows"]
    at = {f: rw["window_fields"].index(f) for f in ("dev_reads_from_ns", "dev_reads_to_ns", "block_on_ns",
                                                     "dev_reads")}
    for i, row in enumerate(rw["windows"]):
        o = window_open(i)
        row[at["dev_reads_from_ns"]], row[at["dev_reads_to_ns"]] = o + from_ns, o + to_ns
        row[at["block_on_ns"]], row[at["dev_reads"]] = o - lead_ns, [reads]
    return res


def test_requests_cut_at_the_open_are_weighted_back_over_the_looks_span(base):
    """10 reads completed between the looks in each window, 2 of them queued before block_bio_queue was on (cut):
    the 8 recorded weighted over the looks' span (90 ms, the hooks on 7 ms before its start: a 25 ms request is
    recorded 72 ms of 90) restore the 10, and the interval widens by the cut share.  Weights over the window's
    own span and lead (100 ms, 2 ms) would give 8 x 100/77 per window: 3.9 % too many."""
    ms = 1_000_000
    res = with_cut_requests(base, 6, reads=10, recorded=8, length_ns=25 * ms, from_ns=5 * ms, to_ns=95 * ms,
                            lead_ns=2 * ms)
    est = device(summary.summarize(res))["windowed"]["requests"]
    assert est["seen"] == 48 and est["estimate"] == pytest.approx(600)
    # cut: 2 per window counted and not recorded, and the weights' 2 per window standing for them, of 10
    assert est["edge_share"] == pytest.approx((6 * 2 + 6 * 2) / 60.0)
    assert est["interval95"] == pytest.approx([600 - 600 * 0.4, 600 + 600 * 0.4])
    assert "edge cuts" in est["method"] and "40.00 %" in est["method"]


def test_a_window_whose_look_failed_is_left_out_of_the_exact_auxiliary_alone(base):
    """One window's dev_reads null (a failed look): the others still scale by the device's exact count; the method
    says how many were left out."""
    res = forged(base, [4, 4, 4, 4], total=200)
    rw = res.header["request_windows"]
    row = rw["windows"][1]
    for f in ("dev_reads_from_ns", "dev_reads_to_ns", "dev_reads"):
        row[rw["window_fields"].index(f)] = None
    est = device(summary.summarize(res))["windowed"]["requests"]
    assert est["auxiliary"].startswith("the reads block_rq_done counted")
    # 12 seen of 12 counted in the other three windows, 200 in all (the windows' time would give 160)
    assert est["estimate"] == pytest.approx(200) and est["seen"] == 12 and est["windows"] == 3
    assert "1 more window left out" in est["method"]


def across_windows(base):
    """Two windows: pclusters A and B looked up in the first, A and C in the second; the first window reads A,
    the second A again and B (looked up near the first's end, its read completing after those hooks went off)."""
    res = erofs_forged(base, [2, 2])
    h = res.header
    h["devices"][0]["level"] = "loop"
    e = res.records["erofs"]
    e["map_flags"] = enum_value(h, "erofs_map_flag", "mapped") | enum_value(h, "erofs_map_flag", "encoded")
    a, b, c = 0, 8192, 16384
    e["pa"] = [a, b, a, c]
    o0, o1 = window_open(0), window_open(1)
    io = np.zeros(3, dtype=res.records["io"].dtype)
    io["ts_queue_ns"] = [o0 + 1000, o1 + 1000, o1 + 2000]
    io["ts_complete_ns"] = io["ts_queue_ns"] + 4000
    io["ts_issue_ns"] = io["ts_queue_ns"] + 100
    io["sector"] = np.array([a, a, b]) // 512
    io["dev"], io["bytes"], io["nr_bios"] = h["devices"][0]["dev"], 4096, 1
    io["cmd_flags"] = base.records["io"]["cmd_flags"][0]
    return results.Results(h, dict(res.records, io=io))


def test_lookups_and_reads_are_paired_only_inside_one_window(base):
    """Over the run A would be read twice, B once, C never, and A's second read a re-read; paired inside each
    window (the hooks were off between them): four pclusters-in-a-window, A read once in each, B and C with no
    read in theirs, no re-read; B's read carries no unit looked up in its window.  Each says its basis, and the
    verdict's amplification line and the report say it; a bench row leaves the biased shares out."""
    s = summary.summarize(across_windows(base))
    er = s["erofs"]
    assert (er["pclusters"], er["pclusters_read_once"], er["pclusters_reread"],
            er["pclusters_without_device_read"]) == (4, 2, 0, 2)
    assert er["pclusters_basis"] == "paired in one window" and "one --budget window" in er["pclusters_method"]
    assert er["lookups_per_pcluster"] == {"1": 4} and er["device_reads_per_pcluster"] == {"0": 2, "1": 2}
    d = device(s)
    assert d["reread_bytes"] == 0 and d["reread_basis"] == "paired in one window"
    assert d["workload_reads"]["reread_bytes"] == 0
    un = s["device_unneeded"]
    assert un["basis"] == "paired in one window" and un["no_unit_bytes"] == 4096 and "same window" in un["method"]
    amp = s["amplification"]
    assert amp["unit_device_reads"]["basis"] == "paired in one window"
    line = amplification.lines(s)[0]
    assert "4 units looked up 1.00x, read 0.50x (paired within each window, biased)" in line
    assert "re-read 0.0 % (paired within each window, biased)" in line
    text = "\n".join(report.erofs_section(s))
    assert "(per window, lookups and reads paired only inside it): 4 (16.0 KiB)" in text
    assert "no read in the window 2" in text and "already in memory" not in text
    assert amplification.row(amp)["reread_share"] is None and amplification.row(amp)["unneeded_share"] is None
    # every probe attached all the time: paired over the run, as before
    res = across_windows(base)
    res.header["request_windows"]["windowed_probes"] = ["sys_enter", "sys_exit"]
    s = summary.summarize(res)
    er = s["erofs"]
    assert (er["pclusters"], er["pclusters_read_once"], er["pclusters_reread"],
            er["pclusters_without_device_read"]) == (3, 1, 1, 1)
    assert device(s)["reread_bytes"] == 4096 and "basis" not in s["amplification"]["device_reread_share"]
    assert s["device_unneeded"]["no_unit_bytes"] == 0


def test_too_few_windows_with_their_looks_fall_back_to_time_and_say_why(base):
    """Only one window's look at the device's counts succeeded: no exact auxiliary (two are needed), and the
    method says the looks failed, not that block_rq_done was not attached."""
    res = forged(base, [4, 4, 4], total=200)
    rw = res.header["request_windows"]
    for row in rw["windows"][1:]:
        row[rw["window_fields"].index("dev_reads")] = None
    est = device(summary.summarize(res))["windowed"]["requests"]
    assert est["auxiliary"] == "window time" and "failed in all windows but 1" in est["method"]
    assert "not attached" not in est["method"]


def test_no_block_records_make_no_block_estimate(base):
    """serve writes no block request records (--no-io-records): its windows recorded none, and the device's
    requests are not estimated as none but said unavailable, with why."""
    res = forged(base, [5, 3, 8, 5, 2], total=700)
    res.header["request_records"] = dict(res.header.get("request_records") or {}, io_records=False)
    res.records["io"] = res.records["io"][:0]
    d = device(summary.summarize(res))
    est = d["windowed"]["requests"]
    assert "estimate" not in est and "no block request records" in est["why"]
    found = bench.windowed_figure_estimates({"devices": {"x": d}, "erofs": None})
    assert bench.count_estimate(found["devices"]["x"], bench.BLOCK_COUNT_KEYS, "x")[0] is None


def _bracketed(base, per_window, start, end, in_flight=(0, 0), seen_per_window=None, exact_total=140):
    """forged() with block_rq_done's counts read around each diskstats snapshot (start, end: [before, after] read
    requests, 4 KiB each), the device's in-flight requests at the two snapshots, and, per window, the reads its
    exact count saw (seen_per_window; default: those recorded)."""
    res = forged(base, per_window, total=999)
    dev = res.header["devices"][0]
    zero = {"read_requests": [0, 0], "read_bytes": [0, 0], "write_requests": [0, 0], "write_bytes": [0, 0]}
    dev["exact_around_diskstats"] = {
        "counted_by": "block_rq_done",
        "start": dict(zero, read_requests=start, read_bytes=[n * 4096 for n in start]),
        "end": dict(zero, read_requests=end, read_bytes=[n * 4096 for n in end])}
    dev["diskstats_start"] = dict(dev["diskstats_start"], in_flight=in_flight[0])
    dev["diskstats_end"] = dict(dev["diskstats_end"], in_flight=in_flight[1])
    for row, k in zip(res.header["request_windows"]["windows"], seen_per_window or per_window):
        row[-1] = [k]
    res.header["kernel_aggregates"]["block_figures"] = [{"dev": dev["dev"], "basis": "exact",
                                                        "counted_by": "block_rq_done",
                                                        "ops": {"read": {"requests": exact_total,
                                                                         "bytes": exact_total * 4096}}}]
    return res


def test_the_exact_count_over_the_diskstats_snapshots_span_is_the_estimates_total(base):
    """block_rq_done's counts read just before and after each diskstats snapshot: the windows' estimate scales by
    the count over the snapshots' span (not the one up to the header's writing), its interval widened by the
    completions the reads straddled; the kernel's count inside that range: nothing unseen, nothing added."""
    d = device(summary.summarize(_bracketed(base, [3, 3, 3], [100, 101], [133, 135])))
    # real.fst's diskstats count 34 reads over the span
    assert d["diskstats_delta"]["reads"] == 34
    assert d["exact"]["over_diskstats"]["read_requests"] == [32, 35]
    est = d["windowed"]["requests"]
    assert est["estimate"] == pytest.approx(33.5, rel=1e-3)
    lo, hi = est["interval95"]
    assert lo == pytest.approx(32, rel=1e-3) and hi == pytest.approx(35, rel=1e-3)
    assert "in flight at them" in est["method"] and "never ran for" not in est["method"]
    assert d["unseen_requests"] == 0 and d["traced_beyond_diskstats"] == 0
    assert "snapshots' span" in d["unseen_method"] and d["counted_over_diskstats_span"]
    # more counted than the kernel's, past the low end: said as such, not as a shared device's edges
    d = device(summary.summarize(_bracketed(base, [3, 3, 3], [0, 0], [36, 40])))
    assert d["traced_beyond_diskstats"] == 2 and d["unseen_requests"] == 0
    assert "never ran for" not in d["windowed"]["requests"]["method"]
    assert any("counted by block_rq_done than the kernel counted over the same span" in line
               for line in report.diskstats_lines(d))


def test_completions_no_program_ran_for_are_in_the_estimates_total(base):
    """The kernel counted 34 reads over the span where block_rq_done's count is 29 to 32: at least 2 are
    completions no program ran for (docs/measuring.md, Lost events), unseen by the windows' hook on the same
    tracepoint too, so the windows' ratio is of the seen ones and the total is the kernel's own count over its
    snapshots (exact: no straddle to widen by); the method says so.  Windows that recorded half of what their
    exact count saw make the estimate half of it."""
    d = device(summary.summarize(_bracketed(base, [3, 3, 3], [100, 101], [130, 132])))
    assert d["exact"]["over_diskstats"]["read_requests"] == [29, 32]
    assert d["unseen_requests"] == 2
    assert d["unseen_sectors"] == d["diskstats_delta"]["sectors_read"] - 32 * 8
    est = d["windowed"]["requests"]
    # the windows recorded all their exact count saw: the kernel's 34, with no spread and no cut
    assert est["estimate"] == pytest.approx(34, rel=1e-3)
    assert est["interval95"] == pytest.approx([34, 34], rel=1e-3)
    assert "the kernel's count over the diskstats snapshots' span, 2 more than block_rq_done's" in est["method"]
    assert "widened by the 3 requests" not in est["method"]
    half = device(summary.summarize(_bracketed(base, [3, 3, 3], [100, 101], [130, 132], seen_per_window=[6, 6, 6])))
    assert half["windowed"]["requests"]["estimate"] == pytest.approx(17, rel=1e-3)


def test_requests_in_flight_at_a_snapshot_widen_the_exact_span_count(base):
    """The kernel counts a request completed only after its bios' end_io ran, after block_rq_complete: one in
    flight at a snapshot may fall on the kernel's other side of it, so the span's count is widened by the device's
    in-flight requests there (the bytes are not: both count them at the tracepoint's call)."""
    d = device(summary.summarize(_bracketed(base, [3, 3, 3], [100, 100], [130, 130], in_flight=(2, 3))))
    over = d["exact"]["over_diskstats"]
    assert over["read_requests"] == [27, 32] and over["read_bytes"] == [30 * 4096, 30 * 4096]


def test_the_span_widening_scales_with_the_estimate_and_stops_at_what_was_seen(base):
    """Windows that recorded half of what the exact count saw in them: the estimate is twice the span's count,
    and the straddle's widening is scaled alike; its low end is never below what the windows recorded."""
    d = device(summary.summarize(_bracketed(base, [3, 3, 3], [0, 0], [60, 70], seen_per_window=[6, 6, 6])))
    est = d["windowed"]["requests"]
    # half of the 65 the span counted (its midpoint)
    assert est["estimate"] == pytest.approx(32.5, rel=1e-3)
    # the edges' cuts (half of what was counted: ± 16.25), then ± half the straddle (5) scaled by estimate / total
    # (1/2): ± 2.5 more than the same run without a straddle
    assert est["interval95"] == pytest.approx([32.5 - 16.25 - 2.5, 32.5 + 16.25 + 2.5], rel=1e-3)
    d = device(summary.summarize(_bracketed(base, [3, 3, 3], [0, 0], [1, 90], seen_per_window=[3, 3, 3])))
    assert d["windowed"]["requests"]["interval95"][0] == pytest.approx(9)


def test_a_failed_read_around_a_snapshot_falls_back_to_the_whole_exact_count_and_says_so(base):
    res = _bracketed(base, [3, 3, 3], [0, 0], [30, 30], exact_total=45)
    res.header["devices"][0]["exact_around_diskstats"] = None
    del res.header["request_windows"]["dev_reads_total"]
    d = device(summary.summarize(res))
    est = d["windowed"]["requests"]
    assert est["estimate"] == pytest.approx(45, rel=1e-3) and est["auxiliary"] != "window time"
    assert "could not be read" in est["method"] and "not attached" not in est["method"]
    assert "over_diskstats" not in d["exact"] and not d.get("counted_over_diskstats_span")


def _slowdown_rows(rates_in, rate_before=1000.0, gap_ns=GAP_NS, fail=(), grace_rate=900.0, short=()):
    """Windows of WINDOW_NS (those in short: half that, cut off) and a grace of 20 ms, every WINDOW_NS + grace +
    gap_ns, the traced threads reading at rate_before per s in the gaps, rates_in[i] in window i and grace_rate in
    the graces; fail: (i, "open"|"close"|"exit") looks that failed."""
    grace = 20_000_000
    rows, total, t = [], 0.0, 0
    for i, r in enumerate(rates_in):
        on = WINDOW_NS // 2 if i in short else WINDOW_NS
        total += rate_before * gap_ns / 1e9
        looks = {"open": total}
        total += r * on / 1e9
        looks["close"] = total
        total += grace_rate * grace / 1e9
        looks["exit"] = total
        o = t + gap_ns
        rows.append({"open_ns": o, "enter_closed_ns": o + on, "exit_closed_ns": o + on + grace,
                     "open_edge_ns": 0, "close_edge_ns": 0,
                     **{"reads_at_" + ("exit_closed" if e == "exit" else e): None if (i, e) in fail else round(c)
                        for e, c in looks.items()}})
        t = o + on + grace
    rw = {"io_calls": {"from_ns": 0, "reads_total": round(total)}, "t_start_ns": 0, "t_end_ns": t,
          "window_ns": WINDOW_NS, "grace_ns": grace}
    return rw, rows


def test_the_traced_reads_lost_in_the_windows_against_the_gap_before_each():
    """windows_slowdown: the reads in the windows against those the gap's rate before each gives, from the
    cumulative counts at the windows' looks; with the graces for the share lost while attached, and over the
    time; the first window (no gap before it), those cut short or a failed look borders, and short gaps are left
    out; the looks' times widen the interval; older files say why there is none."""
    from analysis.windows import windows_slowdown
    rw, rows = _slowdown_rows([300, 800, 800, 800])  # the first, with no gap before it, left out
    lost = windows_slowdown(rw, rows)
    assert lost["windows"] == 3 and lost["in_windows"] == pytest.approx(0.2, abs=1e-3)
    assert lost["interval95"] == pytest.approx([0.2, 0.2], abs=2e-3)
    # attached: 120 ms of which 100 at 800 and 20 at 900, against 1000
    assert lost["while_attached"] == pytest.approx(1 - (80 + 18) / 120, abs=1e-3)
    attached_share = 4 * (WINDOW_NS + 20_000_000) / rw["t_end_ns"]
    assert lost["over_time"] == pytest.approx(lost["while_attached"] * attached_share)
    rw, rows = _slowdown_rows([100, 700, 900, 800, 850, 750])
    lost = windows_slowdown(rw, rows)
    lo, hi = lost["interval95"]
    assert lost["in_windows"] == pytest.approx(0.2, abs=1e-3) and lo < 0.19 and hi > 0.21
    assert "5 windows" in lost["method"]
    # the looks' times widen it: 1 ms at each edge of a 100 ms window, 2 %
    for r in rows:
        r["open_edge_ns"] = r["close_edge_ns"] = 1_000_000
    wider = windows_slowdown(rw, rows)["interval95"]
    assert wider == pytest.approx([lo - 0.02, hi + 0.02])
    # the second window's opening look failed, the third's closing one, the fourth's last: those three and the
    # fifth (its gap begins at the fourth's last look) stand for nothing; their rates would show if counted
    rw, rows = _slowdown_rows([800, 500, 600, 300, 400, 800, 800], fail={(1, "open"), (2, "close"), (3, "exit")})
    lost = windows_slowdown(rw, rows)
    assert lost["windows"] == 2 and lost["in_windows"] == pytest.approx(0.2, abs=1e-3)
    # a window cut short (the end of tracing) is left out
    rw, rows = _slowdown_rows([800, 800, 800, 0], short={3})
    assert windows_slowdown(rw, rows)["windows"] == 2
    # gaps shorter than a window: nothing to compare
    rw, rows = _slowdown_rows([800] * 4, gap_ns=WINDOW_NS // 2)
    assert windows_slowdown(rw, rows) == {"why": "0 windows with a gap before it to compare (2 are needed)"}
    old = [{k: v for k, v in r.items() if not k.startswith("reads_at")} for r in rows]
    assert "not recorded" in windows_slowdown(rw, old)["why"]
    none = [dict(r, reads_at_open=None, reads_at_close=None, reads_at_exit_closed=None) for r in rows]
    no_io = dict(rw, io_calls={"why": "no task I/O accounting in this kernel"})
    assert windows_slowdown(no_io, none)["why"].endswith("; no task I/O accounting in this kernel")


def test_the_verdict_names_what_the_windows_cost_the_traced_reads():
    """The report's windows line gives the measured loss of the traced reads with its interval, and over the time."""
    s = {"request_windows": {"active": True, "fraction": 0.1, "windows": 5, "budget_pct": 1.0, "seen": 10,
                             "traced_reads_lost": {"in_windows": 0.2, "interval95": [0.15, 0.25], "over_time": 0.02}}}
    line = verdict.windows_line(s)
    assert "the traced reads slowed 20.0 % in the windows (95 %: 15.0 % to 25.0 %), 2.00 % over the time" in line
