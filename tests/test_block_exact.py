"""--budget's exact block figures from the completion alone (block.bpf.c block_rq_done): under serve and attach, a
device's read requests and bytes are the kernel's own /proc/diskstats count of them, and its queue-to-complete
histogram from the request's start_time_ns agrees with the issue hook's of the same requests."""
import os
import subprocess

import pytest

from analysis import devices, results
from cli.runner import COLLECTOR
from analysis import summary as S
from conftest import drop_caches, finish_attach, short_of_kernel, start_attach
from serving import diskstat, fio_randread, fresh_scrape, parse, start_serve, stop, value


def kdev_name(dev):
    rdev = os.stat(dev).st_rdev
    return "%d:%d" % (os.major(rdev), os.minor(rdev)), os.major(rdev) << 20 | os.minor(rdev)


def iostats_on(dev):
    """Whether the block layer keeps I/O statistics on dev, and so stamps each request's start_time_ns."""
    with open("/sys/block/%s/queue/iostats" % os.path.basename(dev)) as f:
        return f.read().strip() == "1"


def cdf(slots):
    n = sum(slots)
    out, acc = [], 0
    for s in slots:
        acc += s
        out.append(acc / n)
    return out


def apart_more_than_one_slot(a, b):
    """The least share of requests that must move more than one log2 slot to turn histogram a into b: for
    distributions on a line, the largest gap between one's CDF and the other's shifted by one slot."""
    fa, fb = cdf(a), cdf(b)
    n = len(fa)
    return max(max(fa[k] - fb[min(k + 1, n - 1)], fb[k] - fa[min(k + 1, n - 1)]) for k in range(n))


@pytest.mark.unit
def test_apart_more_than_one_slot_measures_the_shift():
    # same histogram: 0; shifted by one slot: 0; by two: half (the other half can pair one slot apart); by four:
    # everything
    h = [0, 5, 10, 5, 0, 0, 0, 0]
    assert apart_more_than_one_slot(h, h) == 0
    assert apart_more_than_one_slot(h, [0, 0, 5, 10, 5, 0, 0, 0]) == 0
    assert apart_more_than_one_slot(h, [0, 0, 0, 5, 10, 5, 0, 0]) == 0.5
    assert apart_more_than_one_slot(h, [0, 0, 0, 0, 0, 5, 10, 5]) == 1.0
    # a tenth of the requests two slots away
    assert abs(apart_more_than_one_slot([0, 10, 0, 0], [0, 9, 0, 1]) - 0.1) < 1e-12


@pytest.mark.bpf
def test_serve_counts_every_block_read_at_the_completion_alone(mounted_erofs):
    """serve (--budget 1, its default): the loop device's read requests and bytes are counted by block_rq_done
    and equal its /proc/diskstats delta; every figure says it is exact and where it came from."""
    mnt, dev = mounted_erofs
    name, _ = kdev_name(dev)
    if not iostats_on(dev):
        pytest.skip("%s keeps no I/O statistics: /proc/diskstats does not count its requests" % dev)
    p, port, rest = start_serve("--budget", "1", "--mount", mnt)  # after start_serve's own --budget 100
    try:
        drop_caches()
        before = parse(fresh_scrape(port))
        ds0 = diskstat(dev)
        fio_randread(mnt)
        ds1 = diskstat(dev)
        after = parse(fresh_scrape(port))
    finally:
        log = stop(p, rest)
    assert p.returncode == 0, log
    assert value(after, "fstrace_probe_info", probe="block_rq_done", tier="tp_btf") + \
        value(after, "fstrace_probe_info", probe="block_rq_done", tier="raw_tp") == 1

    def info(figure):
        return {dict(ls)["source"] for (n, ls), v in after.items() if n == "fstrace_block_figure_info" and v == 1
                and dict(ls)["device"] == name and dict(ls)["op"] == "read" and dict(ls)["figure"] == figure
                and dict(ls)["basis"] == "exact"}
    assert info("requests") == info("bytes") == {"block_rq_done"}
    assert info("q2c") == {"start_time_ns"}

    def inc(n):
        return value(after, n, device=name, op="read") - value(before, n, device=name, op="read")
    requests, nbytes = inc("fstrace_block_requests_total"), inc("fstrace_block_request_bytes_sum")
    missed = {"missed_runs": value(after, "fstrace_probe_missed_runs_total", probe="block_rq_done")}
    short = short_of_kernel(requests, ds1[0] - ds0[0], missed)
    assert nbytes <= ds1[1] - ds0[1] and (short or nbytes == ds1[1] - ds0[1]), (nbytes, ds0, ds1)
    if short:
        # and the exposition says them unseen (a lower bound since tracing began)
        assert value(after, "fstrace_block_requests_unseen_total", device=name, op="read") >= short


@pytest.mark.bpf
def test_attach_counts_every_block_read_and_its_latency_agrees_with_the_issue_hook(tmp_path, mounted_erofs):
    """attach --budget 1: the results' block figures of the loop device are block_rq_done's, its read requests and
    bytes those of /proc/diskstats between the collector's own snapshots, and its queue-to-complete histogram from
    start_time_ns puts at least 95 % of the requests within a log2 slot of where the issue hook's puts them (the
    time block_rq_issue and block_bio_queue kept in flight, as run takes it).  The issue hook is attached only in
    the windows: its histogram is the windows' requests, a sample of the same workload's, and marked so."""
    mnt, dev = mounted_erofs
    name, kdev = kdev_name(dev)
    if not iostats_on(dev):
        pytest.skip("%s keeps no I/O statistics: /proc/diskstats does not count its requests" % dev)
    out = tmp_path / "out"
    p, seen = start_attach(out, "--budget", "1", "--window-duty", "0.5", "--mount", mnt, "--duration", "6",
                           "--interval", "0.5")
    # cold passes over big.bin for 4 s: requests all along, in and out of the windows
    reader = ("end=$(($(date +%%s) + 4)); while [ $(date +%%s) -lt $end ]; do echo 1 > /proc/sys/vm/drop_caches; "
              "cat %s > /dev/null; done" % os.path.join(mnt, "big.bin"))
    subprocess.run(["sh", "-c", reader], check=True)
    finish_attach(p, seen)
    res = results.load(str(out / "results.fst"))
    h = res.header
    assert "block_rq_issue" in h["request_windows"]["windowed_probes"]
    figs = {f["dev"]: f for f in h["kernel_aggregates"]["block_figures"]}
    f = figs[kdev]
    assert (f["basis"], f["counted_by"]) == ("exact", "block_rq_done"), f
    read = f["ops"]["read"]
    d = next(x for x in h["devices"] if x["dev"] == kdev)
    reads = d["diskstats_end"]["reads"] - d["diskstats_start"]["reads"]
    sectors = d["diskstats_end"]["sectors_read"] - d["diskstats_start"]["sectors_read"]
    probe = next(x for x in h["probes"] if x["probe"] == "block_rq_done")
    assert probe["tier"] in ("tp_btf", "raw_tp"), probe
    # never more than the kernel counted: nothing else reads the device, and the snapshots lie inside the attach
    short = short_of_kernel(read["requests"], reads, probe)
    assert read["bytes"] <= sectors * 512, (read, sectors)
    over = devices.exact_over_diskstats(d)
    (lo, hi), (blo, bhi) = over["read_requests"], over["read_bytes"]
    st = devices.device_stats(res)[name]
    if short or read["bytes"] != sectors * 512:
        # the runs the kernel skipped: the analysis says them unseen, over the snapshots' own span
        assert st["counted_over_diskstats_span"], st
        assert st["unseen_requests"] == max(0, reads - hi), (st, over, reads)
        assert st["unseen_sectors"] == max(0, sectors - bhi // 512), (st, over, sectors)
        # said unless a request in flight at the first snapshot widened the span's count past the kernel's
        assert st["unseen_requests"] + st["unseen_sectors"] > 0 or d["diskstats_start"].get("in_flight"), (st, over)
    else:
        # over the snapshots' own span, read just before and after each: the same, within what they straddled
        assert lo <= reads <= hi and blo <= sectors * 512 <= bhi, (over, reads, sectors)
        assert st["unseen_requests"] == 0 and st["unseen_sectors"] == 0, st
    assert read["q2c_source"] == "start_time_ns" and read["start_kept"] == read["requests"]
    assert (read["q2c_basis"], read["d2c_basis"]) == ("exact", "exact")
    q2c = next(r for r in h["kernel_aggregates"]["histograms"] if r["dev"] == kdev and r["sub"] == 0
               and r["metric"] == S.enum_value(h, "hist_metric", "io_q2c_us"))
    issue = read["issue_hook_q2c_us"]
    # the issue hook sees the requests queued and completed inside a window, the completion every one
    assert 100 <= sum(issue) < read["requests"]
    assert apart_more_than_one_slot(q2c["slots"], issue) <= 0.05, (q2c["slots"], issue)


@pytest.mark.bpf
def test_a_budget_without_windows_records_every_block_request(tmp_path, mounted_erofs):
    """--budget where nothing is windowed (--block-only: no request hooks to window) leaves the block hooks attached
    all the time, recording every request as without a budget: the loop device's read records are its
    /proc/diskstats reads between the collector's snapshots."""
    mnt, dev = mounted_erofs
    name, kdev = kdev_name(dev)
    if not iostats_on(dev):
        pytest.skip("%s keeps no I/O statistics: /proc/diskstats does not count its requests" % dev)
    drop_caches()
    out = tmp_path / "r.fst"
    subprocess.run([COLLECTOR, "-o", str(out), "--dev", name + ":4096:loop", "--block-only", "--budget", "1", "--",
                    "cat", os.path.join(mnt, "big.bin")], check=True, stdout=subprocess.DEVNULL)
    res = results.load(str(out))
    assert not res.header["request_windows"]["active"]
    d = next(x for x in res.header["devices"] if x["dev"] == kdev)
    reads = d["diskstats_end"]["reads"] - d["diskstats_start"]["reads"]
    io = res.records["io"]
    on = io[(io["dev"] == kdev) & (res.io_ops(io) == res.io_op("read"))]
    probe = next(x for x in res.header["probes"] if x["probe"] == "block_rq_complete")
    if short_of_kernel(len(on), reads, probe):
        # the runs the kernel skipped: the analysis says them unseen
        assert devices.device_stats(res)[name]["unseen_requests"] == reads - len(on)
