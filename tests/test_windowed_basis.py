"""--budget's windowed workqueue hooks and device counts in the figures built on them, and the dashboard's table of
which block figures are exact: kworker work items
(waits.async_work, async_work_unlinked) are estimates over the whole traced time where the workqueue hooks were
attached only in windows, with basis "windows' sample", and plain counts with basis "every request" where they
were not; fstrace compare takes a device's exact count (else the estimate), never the windows' raw count.  Pure
analysis on tests/data/real.fst with budget_windows' forged windows and forged work records: the truth is
what the forgery put there."""
import json
import os
import re

import numpy as np
import pytest

from analysis import compare, report, results, summary, tables, verdict
from analysis.selection import enum_value
from budget_windows import BLOCK_PROBES, EROFS_PROBES, WINDOW_NS, device, erofs_forged, forged, window_open
from conftest import DATA, ROOT

pytestmark = pytest.mark.unit

WORK_PROBES = ["workqueue_queue_work", "workqueue_execute_start", "workqueue_execute_end"]
RUN_NS = 10_000  # each forged work item's run: shorter than the grace, so each weighs 1


@pytest.fixture(scope="module")
def base():
    return results.load(os.path.join(DATA, "real.fst"))


def with_work(res, per_window, probes, linked=True, extra_starts=()):
    """res with per_window erofs decompression work items starting in each window (RUN_NS long, 5 us apart),
    and at extra_starts; linked: each names the traced device whose completion queued it (else none: another
    device's), and the workqueue hooks windowed where probes has them."""
    res.header["request_windows"]["windowed_probes"] = ["sys_enter", "sys_exit"] + probes
    starts = [window_open(i) + 5000 * (j + 1) for i, k in enumerate(per_window) for j in range(k)]
    starts += list(extra_starts)
    w = np.zeros(len(starts), dtype=res.records["work"].dtype)
    w["ts_start_ns"] = starts
    w["ts_end_ns"] = w["ts_start_ns"] + RUN_NS
    w["ts_queue_ns"] = w["ts_start_ns"] - 2000
    w["kind"] = enum_value(res.header, "work_kind", "erofs decompression")
    w["io_dev"] = res.header["devices"][0]["dev"] if linked else 0
    w["pid"], w["seq"] = 99, np.arange(1, len(starts) + 1)
    w["comm"] = b"kworker/u9:0"
    return results.Results(res.header, dict(res.records, work=w))


def test_windowed_work_items_are_estimated_over_the_whole_traced_time(base):
    """4 items in each window of 10 % of the time (no calls known: scaled by the windows' time): 40 per window's
    share, 200 over the 5 windows' span, and their time 200 x RUN_NS; what the windows saw beside it."""
    res = with_work(forged(base, [1] * 5, total=50), [4] * 5, BLOCK_PROBES + WORK_PROBES)
    s = summary.summarize(res)
    wk = s["async_work"]["erofs decompression"]
    assert wk["basis"] == "windows' sample"
    assert wk["items"]["estimate"] == pytest.approx(200) and wk["items"]["interval95"] == pytest.approx([200, 200])
    assert wk["items"]["seen"] == 20 and wk["ns"]["seen"] == 20 * RUN_NS
    assert wk["recorded"] == {"items": 20, "ns": 20 * RUN_NS}
    assert wk["ns"]["estimate"] == pytest.approx(200 * RUN_NS)
    assert wk["item_us"]["p50"] == pytest.approx(RUN_NS / 1e3)  # per item: the sample's, as before
    text = "\n".join(report.kworkers_section(s))
    assert "≈ 200 (95 %: 200–200, windows) work items" in text and "≈ 2000 (95 %: 2000–2000, windows) us" in text
    assert "(20 work items)" not in text and "seen in the windows: 0.2 ms, 20 items" in text
    assert "ran in: kworker/u9:0[99] 20 items 0.2 ms (recorded in the windows)" in text


def test_work_items_outside_the_windows_are_not_seen(base):
    """Items starting between windows or after sys_enter's detach are recorded but in no window's count."""
    late, between = window_open(0) + WINDOW_NS + 10, window_open(0) + WINDOW_NS + 4_000_000
    res = with_work(forged(base, [1] * 3, total=30), [2, 2, 2], BLOCK_PROBES + WORK_PROBES,
                    extra_starts=[late, between])
    wk = summary.summarize(res)["async_work"]["erofs decompression"]
    assert wk["items"]["seen"] == 6 and wk["items"]["estimate"] == pytest.approx(60)
    assert wk["recorded"]["items"] == 8  # the two outside included
    assert "seen in the windows: 0.1 ms, 6 items" in verdict.work_text(wk)


def test_unwindowed_work_items_are_counted(base):
    """The workqueue hooks attached all the time (only the block ones windowed): every item counted, as before."""
    res = with_work(forged(base, [1] * 5, total=50), [4] * 5, BLOCK_PROBES)
    s = summary.summarize(res)
    wk = s["async_work"]["erofs decompression"]
    assert wk["basis"] == "every request" and wk["items"] == 20 and wk["ns"] == 20 * RUN_NS and "recorded" not in wk
    text = "\n".join(report.kworkers_section(s))
    assert "0.2 ms (20 work items)" in text and "windows" not in text


def test_unlinked_work_items_are_estimated_by_the_windows_time(base):
    """Work no traced device queued, under windowed hooks: an estimate scaled by the windows' time; always
    attached: the count."""
    res = with_work(erofs_forged(base, [2] * 4), [3] * 4, BLOCK_PROBES + EROFS_PROBES + WORK_PROBES, linked=False)
    s = summary.summarize(res)
    assert "erofs decompression" not in s["async_work"]
    un = s["async_work_unlinked"]["erofs decompression"]
    assert un["basis"] == "windows' sample" and un["items"]["auxiliary"] == "window time"
    assert un["items"]["estimate"] == pytest.approx(120)
    assert "≈ 120 (95 %: 120–120, windows) work items" in "\n".join(report.kworkers_section(s))
    res.header["request_windows"]["windowed_probes"] = ["sys_enter", "sys_exit"]
    un = summary.summarize(res)["async_work_unlinked"]["erofs decompression"]
    assert un == {"items": 12, "ns": 12 * RUN_NS, "basis": "every request"}


def test_linked_work_items_are_scaled_by_the_traced_reads(base):
    """Work queued by a read's completion comes with the traced processes' reads: where their calls per window
    are known, those scale it (2 items per window against 4 calls of 40 in all per window: 20 each)."""
    res = with_work(erofs_forged(base, [2] * 4), [2] * 4, BLOCK_PROBES + EROFS_PROBES + WORK_PROBES)
    wk = summary.summarize(res)["async_work"]["erofs decompression"]
    assert wk["items"]["auxiliary"] == "forged" and wk["items"]["estimate"] == pytest.approx(80)
    assert "≈ 80" in verdict.work_text(wk)


def loop_device_summary(base, exact):
    res = forged(base, [3, 3, 3], total=30)
    res.header["devices"][0]["level"] = "loop"
    if exact:
        res.header["kernel_aggregates"]["block_figures"] = [
            {"dev": res.header["devices"][0]["dev"], "basis": "exact", "counted_by": "block_rq_done",
             "ops": {"read": {"requests": 31, "bytes": 31 * 4096}}}]
    return summary.summarize(res)


def test_compare_takes_the_exact_device_count_under_windows(base):
    """9 reads recorded in the windows, 31 counted exactly: compare's device requests are 31, said exact."""
    s = loop_device_summary(base, exact=True)
    assert device(s)["requests"] == 9
    f = compare.figures(s, s["amplification"])
    assert f["device_requests"] == 31 and f["basis"]["device_requests"] == "exact (block_rq_done)"
    assert f["basis"]["device_mean_bytes"] == "the windows' sample's"


def test_compare_takes_the_estimate_without_an_exact_count(base):
    s = loop_device_summary(base, exact=False)
    f = compare.figures(s, s["amplification"])
    assert f["device_requests"] == pytest.approx(30, rel=1e-3)
    assert f["basis"]["device_requests"].startswith("estimated: ≈ 30")
    # the companion line says which run's figure is which
    c = {"figures": (f, dict(f, device_requests=60, basis={})),
         "accounts_for": [{"part": "io_wait", "delta_ns": 1, "share_of_change": 1.0}]}
    line = next(x for x in compare.companions(c, "A", "B") if x.startswith("device requests"))
    assert line.startswith("device requests 30 (A) -> 60 (B), x2.00; A: estimated: ≈ 30")


def test_compare_takes_every_request_without_windows(base):
    res = forged(base, [3, 3, 3], total=30, probes=[])
    res.header["devices"][0]["level"] = "loop"
    s = summary.summarize(res)
    f = compare.figures(s, s["amplification"])
    assert f["device_requests"] == 9 and f["basis"] == {}


def test_compare_takes_the_estimated_erofs_lookups_under_windows(base):
    """16 pcluster lookups recorded in the windows, 160 estimated in all: compare's unit lookups are the
    estimate, said so."""
    res = erofs_forged(base, [3, 5, 4, 4])
    h = res.header
    res.records["erofs"]["map_flags"] = enum_value(h, "erofs_map_flag", "mapped") | enum_value(h, "erofs_map_flag",
                                                                                               "encoded")
    s = summary.summarize(res)
    assert s["amplification"]["unit_lookups"]["times"] == {"1": 16}
    f = compare.figures(s, s["amplification"])
    assert f["unit_lookups"] == pytest.approx(160) and f["basis"]["unit_lookups"].startswith("estimated: ≈ 160")


def figure_info_labels():
    """The labels serve writes on fstrace_block_figure_info (user/expose.c's sample format, its C string pieces
    joined)."""
    with open(os.path.join(ROOT, "user", "expose.c")) as f:
        src = re.sub(r'"\s*"', "", f.read())
    sample = re.search(r'"fstrace_block_figure_info\{(.*?)\}', src).group(1)
    return re.findall(r'(\w+)=\\"', sample)


def test_the_dashboard_table_shows_each_block_figures_basis():
    """Every label of fstrace_block_figure_info is a column of the dashboard's table of it, basis among them, in
    the order serve writes them, none hidden."""
    labels = figure_info_labels()
    assert labels == ["device", "op", "figure", "basis", "source"]
    with open(os.path.join(ROOT, "dashboards", "fstrace.json")) as f:
        doc = json.load(f)
    table = next(p for p in doc["panels"] if p["type"] == "table" and any(
        "fstrace_block_figure_info" in t["expr"] for t in p["targets"]))
    organize = next(t["options"] for t in table["transformations"] if t["id"] == "organize")
    hidden = {k for k, v in organize.get("excludeByName", {}).items() if v}
    assert not hidden & set(labels)
    order = organize["indexByName"]
    assert sorted(labels, key=order.__getitem__) == labels
    assert "windows_sample" in table["description"]


def with_writes(res, n):
    """res with n write block requests recorded in its first window on its device."""
    io = res.records["io"]
    w = np.zeros(n, dtype=io.dtype)
    w["ts_queue_ns"] = window_open(0) + 1000 * (np.arange(n) + 1)
    w["ts_issue_ns"], w["ts_complete_ns"] = w["ts_queue_ns"] + 100, w["ts_queue_ns"] + 900
    w["dev"], w["bytes"], w["nr_bios"], w["cmd_flags"] = io["dev"][0], 8192, 1, res.io_op("write")
    return results.Results(res.header, dict(res.records, io=np.concatenate([io, w])))


def exact_figures(res, reads, writes):
    res.header["kernel_aggregates"]["block_figures"] = [
        {"dev": res.header["devices"][0]["dev"], "basis": "exact", "counted_by": "block_rq_done",
         "ops": {"read": {"requests": reads, "bytes": reads * 4096},
                 "write": {"requests": writes, "bytes": writes * 8192}}}]


def test_windowed_write_requests_are_the_exact_count_or_said_as_the_windows(base):
    """3 writes recorded in the windows: the report never prints them as the device's writes; with the exact count
    (block_rq_done: 70) it prints that, and a write workload's table row takes it (else none)."""
    res = with_writes(forged(base, [3, 3, 3], total=30), 3)
    res.header["devices"][0]["level"] = "loop"
    s = summary.summarize(res)
    name, d = next(iter(s["devices"].items()))
    text = "\n".join(report.device_section(name, d))
    assert "3 write requests" not in text and "write requests over the whole traced time: unavailable" in text
    assert "3 recorded in the windows" in text
    s["writes"], s["reads"]["count"] = {"count": 12, "bytes": 12 * 8192}, 0
    assert tables.row_from_summary(s)["loop_requests"] is None
    exact_figures(res, 30, 70)
    s = summary.summarize(res)
    name, d = next(iter(s["devices"].items()))
    text = "\n".join(report.device_section(name, d))
    assert "70 write requests (exact, block_rq_done), 560.0 KiB; 3 recorded in the windows" in text
    s["writes"], s["reads"]["count"] = {"count": 12, "bytes": 12 * 8192}, 0
    assert tables.row_from_summary(s)["loop_requests"] == 70
    # every request traced: the records are the count, as before
    res.header["request_windows"]["windowed_probes"] = ["sys_enter", "sys_exit"]
    name, d = next(iter(summary.summarize(res)["devices"].items()))
    assert "  device %s (loop): 3 write requests, 24.0 KiB" % name in report.device_section(name, d)


def test_a_windowed_disks_traced_tasks_reads_are_said_as_the_windows(base):
    """On a disk, the traced tasks' reads the windows recorded come after the whole run's estimate: said as what
    the windows saw, not as the tasks' count."""
    res = forged(base, [3, 3, 3], total=30)
    res.header["devices"][0]["level"] = "disk"
    name, d = next(iter(summary.summarize(res)["devices"].items()))
    line = verdict.device_line(name, d)
    own = d["workload_reads"]["requests"]
    assert "(the traced tasks': %d of the 9 seen in the windows)" % own in line
    assert "(%d the traced tasks')" % own not in line
