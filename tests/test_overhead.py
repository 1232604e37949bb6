"""The observer effect: what fstrace records and counts reconciles with the workload exactly, nothing is
dropped without a ring-buffer wakeup per record, and the tracer's own time is a part of its own.

No timing thresholds here: the cost itself is measured by `make bench-overhead`."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from analysis import hist, results, sampling
from analysis import requests
from analysis import summary as S
from analysis.selection import enum_value
from conftest import COLLECTOR, ROOT, assert_exact_partition, drop_caches, offcpu_by_reason, run_workload, trace_python


@pytest.fixture(scope="module")
def warm_randread(tmp_path_factory):
    """Warm 4 KiB randread of the whole file (a fixed number of I/Os, all page-cache hits), as run ships."""
    return run_workload(tmp_path_factory, "erofs", "randread", "--warm")


@pytest.fixture(scope="module")
def warm_randread_all(tmp_path_factory):
    return run_workload(tmp_path_factory, "erofs", "randread", "--warm", "--records", "all")


@pytest.mark.bpf
def test_warm_randread_every_io_recorded_or_counted_none_dropped(warm_randread):
    _, res, s = warm_randread
    gt = s["ground_truth"]
    assert gt["ios"] > 1000
    assert set(s["drops"].values()) == {0}
    reads = requests.reads_of(res)
    cnt = requests.counted_requests(res, kinds=("read",))
    # fio's own count = recorded + counted, and the bytes likewise
    assert len(reads) + cnt["count"] == gt["ios"] == s["reads"]["count"]
    assert int(reads["ret"].sum()) + cnt["bytes"] == gt["read_bytes"] == s["reads"]["bytes"]
    # warm: nearly every read is a page-cache hit, counted rather than streamed
    assert cnt["count"] > 0.9 * gt["ios"]
    assert s["reads"]["counted_in_kernel"] == cnt["count"] and s["reads"]["recorded"] == len(reads)
    # a recorded read is one that slept, did I/O, missed the cache, failed or was slow: never a plain hit
    slow = res.header["request_records"]["record_over_ns"]
    plain = (reads["nr_switches"] == 0) & (reads["nr_ios"] == 0) & (reads["pcache_adds"] == 0) & \
        (reads["ra_windows"] == 0) & (reads["nr_missed_events"] == 0) & (reads["ret"] >= 0) & \
        ((reads["ts_end_ns"] - reads["ts_start_ns"]) < slow)
    assert not plain.any()
    assert_exact_partition(res)
    # the summary's attribution adds the counted parts to the recorded ones, exactly
    a = s["attribution"]
    assert a["unaccounted_ns"] == 0
    assert a["requests_counted_in_kernel"] >= cnt["count"]


@pytest.mark.bpf
def test_requests_beyond_the_counted_aggregate_are_recorded(tmp_path, collector_header):
    """req_agg has FST_REQ_AGG_MAX entries, one per (filesystem, kind) as its first request is counted: with every
    filesystem traced, a process that opens and reads a file on each of more tmpfs mounts than that uses them all
    up; the reads on the mounts left without an entry are recorded instead, and every mount's recorded + counted
    reads are exactly the reads done on it."""
    agg_max = collector_header["schema"]["req_agg_max"]
    n_fs = agg_max // 2 + 4  # an open and a read entry each: more than there are
    reads_each = 20
    mounts = []
    try:
        for i in range(n_fs):
            m = tmp_path / ("fs%d" % i)
            m.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "fstrace-agg", str(m)], check=True)
            mounts.append(m)
            (m / "f").write_bytes(os.urandom(16384))
        bits = collector_header["dev_encoding"]["minor_bits"]
        kdevs = [os.major(os.stat(m).st_dev) << bits | os.minor(os.stat(m).st_dev) for m in mounts]
        script = ("import os, sys\n"
                  "for p in sys.argv[1:]:\n"
                  "    fd = os.open(p, os.O_RDONLY)\n"
                  "    for i in range(%d):\n"
                  "        assert len(os.pread(fd, 4096, (i %% 4) * 4096)) == 4096\n"
                  "    os.close(fd)\n" % reads_each)
        out = tmp_path / "r.fst"
        p = subprocess.run([COLLECTOR, "-o", str(out), "--", "/usr/bin/python3", "-c", script] +
                           [str(m / "f") for m in mounts], stderr=subprocess.PIPE, text=True)
        assert p.returncode == 0, p.stderr
        res = results.load(str(out))
    finally:
        for m in mounts:
            subprocess.run(["umount", str(m)])
    read = enum_value(res.header, "req_kind", "read")
    req = res["req"]
    rows = res.header["kernel_aggregates"]["requests_counted"]
    # every entry given, each to one (filesystem, kind): none wasted, as the workload is one thread (CPUs racing
    # for the same key can waste one)
    assert len(rows) == agg_max
    assert len({(r["sdev"], r["kind"]) for r in rows}) == len(rows)
    counted = {r["sdev"]: r["count"] for r in rows if r["kind"] == read}
    for kdev in kdevs:
        recorded = int(((req["kind"] == read) & (req["sdev"] == kdev)).sum())
        assert recorded + counted.get(kdev, 0) == reads_each, (kdev, recorded, counted.get(kdev))
    # the mounts read first had entries; the last ones found none left and were recorded whole
    assert counted.get(kdevs[0], 0) > 0
    assert kdevs[-1] not in counted
    assert_exact_partition(res)


@pytest.mark.bpf
def test_records_all_streams_every_read_without_drops(warm_randread_all):
    """--records all: one record per read at the warm rate, and still nothing dropped (the reader is woken by
    the fill level and its own timer, never per record)."""
    _, res, s = warm_randread_all
    gt = s["ground_truth"]
    assert res.header["request_records"]["mode"] == "all"
    assert set(s["drops"].values()) == {0}
    reads = requests.reads_of(res)
    assert len(reads) == gt["ios"] == s["reads"]["count"]
    assert requests.counted_requests(res, kinds=("read",)) is None
    assert_exact_partition(res)


@pytest.mark.bpf
def test_counted_latencies_agree_with_recorded_ones(warm_randread, warm_randread_all):
    """The same warm workload, counted vs recorded: the counted requests' histogram-based p50 lies within the
    slot error (1/16) of what a recorded run measures, up to run-to-run spread (a factor of 2 either way)."""
    p_counted = warm_randread[2]["reads"]["latency_us"]["p50"]
    p_recorded = warm_randread_all[2]["reads"]["latency_us"]["p50"]
    assert 0.5 * p_recorded <= p_counted <= 2 * p_recorded


@pytest.mark.unit
def test_merged_percentiles_within_a_sixteenth(real):
    """The log-linear slots (records.h FST_LAT_SLOTS, as a results file describes them) locate any percentile
    within 1/16 of its value."""
    sch = results.load(real[0]).schema
    rng = np.random.default_rng(7)
    ns = np.concatenate([rng.lognormal(8, 1.2, 5000), rng.lognormal(11, 0.5, 500)]).astype(np.int64)
    slots = np.zeros(sch.lat_slots, dtype=np.int64)
    for v in ns:
        sub = 1 << sch.lat_sub_bits
        e = int(v).bit_length() - 1
        slot = int(v) if v < sub else (e - 2) * sub + ((int(v) >> (e - sch.lat_sub_bits)) & (sub - 1))
        lo, hi = hist.loglin_bounds(slot, sch.lat_sub_bits)
        assert lo <= v < hi  # the Python bounds invert the kernel's slot function
        slots[slot] += 1
    est = hist.merged_percentiles([], slots, sch.lat_sub_bits, ns.sum() / 1e3)
    for p in (50, 90, 99):
        true = np.percentile(ns, p, method="inverted_cdf") / 1e3
        assert abs(est["p%g" % p] - true) <= true / 16 + 1e-3
    assert abs(est["mean"] - ns.mean() / 1e3) < 1e-6


@pytest.mark.bpf
def test_tracer_part_in_summary_and_figures(erofs_randread):
    """The tracer's time is its own part, taken out of on-CPU; where samples landed in its programs, the on-CPU
    flamegraph names them and the wall-clock stacks end them in the tracer's frame."""
    out, res, s = erofs_randread
    req = res["req"]
    assert req["tracer_ns"].sum() > 0
    assert s["tracer"]["part_ns"] == s["attribution"]["parts_ns"]["tracer_ns"]
    prefix = res.header["tracer_frame_prefix"]
    sm = s["tracer"]["sampled"]
    # a sample is the tracer's when its stack passes through one of fstrace's programs (a frame with the prefix)
    assert sm["tracer_samples"] == sum(n for st, n in sampling.folded(res.header).items()
                                       if any(f.startswith(prefix) for f in st.split(";")))
    # a short cold run may see none (the programs take a few per cent of a small on-CPU time):
    # test_tracer_programs_named_in_stacks makes sure of some
    if sm["tracer_samples"]:
        assert prefix.strip() in (out / "oncpu.svg").read_text()
        assert sampling.WALL_TRACER in (out / "wallclock.folded").read_text()


@pytest.mark.bpf
def test_tracer_programs_named_in_stacks(tmp_path, mounted_erofs):
    """A thread reading a cached file in a tight loop for a second, sampled at 4999 Hz: its requests are short
    and fstrace's programs a good share of them, so hundreds of samples land in them; each such frame is labelled
    with the tracer's prefix and names a program behind one of the probes the header lists."""
    mnt, _ = mounted_erofs
    path = sorted(os.path.join(d, n) for d, _, ns in os.walk(mnt) for n in ns)[0]
    script = ("import os, sys, time\n"
              "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
              "end = time.monotonic() + 1.0\n"
              "while time.monotonic() < end:\n"
              "    for _ in range(200):\n"
              "        os.pread(fd, 64, 0)\n")
    res = trace_python(tmp_path, "busy", script, [path], "--sample-hz", "4999")
    prefix = res.header["tracer_frame_prefix"]
    folded = sampling.folded(res.header)
    frames = {fr for st in folded for fr in st.split(";") if fr.startswith(prefix)}
    assert sum(n for st, n in folded.items() if any(f.startswith(prefix) for f in st.split(";"))) >= 20, frames
    loaded = {pr["probe"] for pr in res.header["probes"] if pr["tier"] != "unavailable"}
    # every labelled frame is one of the programs behind the probes the header lists (or the sampler's own)
    assert all(any(fr[len(prefix):].startswith(name[:10]) for name in loaded) or "sample" in fr
               for fr in frames), frames
    assert any("sys_e" in fr for fr in frames), frames


def empty_program_ids():
    out = subprocess.run(["bpftool", "-j", "prog", "show"], stdout=subprocess.PIPE, text=True, check=True).stdout
    return {p["id"] for p in json.loads(out or "[]") if p.get("name") == "fst_empty"}


def empty_links(programs):
    """How many BPF links hold one of programs (ids) now; None when bpftool could not tell (it fails when a link it
    listed is gone before it opens it, and the collector attaches and detaches links all the time)."""
    out = subprocess.run(["bpftool", "-j", "link", "show"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    if out.returncode:
        return None
    return sum(1 for link in json.loads(out.stdout or "[]") if link.get("prog_id") in programs)


def real_and_floor(tmp_path, options, script, watch):
    """The collector with the shipped tracing options and options over `sh -c script`, as itself ("real") and as
    its floor (--empty-programs): per mode, its results and what watch(ids of the empty programs it loaded) returned
    from when the collector said it was attached (--ready-fd) until the script's end (a set, None left out): not
    while it attaches or detaches its probes one by one.  Neither leaves an empty program behind."""
    from analysis import results
    from cli.runner import tracing_options
    runs = {}
    for mode, extra in (("real", []), ("floor", ["--empty-programs"])):
        f, done = tmp_path / (mode + ".fst"), tmp_path / (mode + ".done")
        before = empty_program_ids()
        rfd, wfd = os.pipe()
        argv = ([COLLECTOR, "-o", str(f), "--ready-fd", str(wfd)] + tracing_options() + options + extra +
                ["--", "sh", "-c", "%s; touch %s" % (script, done)])
        p = subprocess.Popen(argv, pass_fds=(wfd,), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(wfd)
        with os.fdopen(rfd) as ready:
            assert ready.readline() == "ready\n", p.communicate()[1]
        seen = set()
        while not done.exists() and p.poll() is None:
            got = watch(empty_program_ids() - before)
            # kept only when the script had not ended by the look's end: the collector detaches everything as soon
            # as its command exits, which a look begun just before the script's last step would otherwise see
            if not done.exists() and p.poll() is None:
                seen.add(got)
            time.sleep(0.02)
        seen.discard(None)
        assert p.wait(timeout=60) == 0, p.stderr.read()
        # a program closed by its last holder is freed after an RCU grace period, not at once
        deadline = time.time() + 10
        while empty_program_ids() - before and time.time() < deadline:
            time.sleep(0.2)
        assert not empty_program_ids() - before
        runs[mode] = (results.load(str(f)), seen)
    return runs


def attached_probes(res):
    return {(q["probe"], q["tier"]) for q in res.header["probes"] if q["tier"] != "unavailable"}


@pytest.mark.bpf
def test_floor_takes_exactly_the_hooks_of_the_shipped_configuration(tmp_path):
    """make bench-overhead's fstrace-floor (--empty-programs) is only a floor if it sits on the same hooks as the
    configuration it is the floor of: same probes, same tiers, one do-nothing program per hook while it runs,
    none left after, and nothing recorded."""
    runs = real_and_floor(tmp_path, [], "cat /etc/passwd > /dev/null; sleep 2", len)
    (real, real_seen), (floor, floor_seen) = runs["real"], runs["floor"]
    assert attached_probes(floor) == attached_probes(real)
    assert real_seen == {0}
    assert max(floor_seen) == len(attached_probes(floor))  # entry-only probes here: one program each
    assert not len(floor["req"]) and not len(floor["io"])
    assert not floor.header["sampling"].get("runs")


@pytest.mark.bpf
def test_windowed_floor_takes_the_windowed_hooks_only_in_windows(tmp_path):
    """make bench-overhead's floors of attach and serve (--empty-programs with --budget) sit on the hooks of the
    configurations they are the floors of, the windowed ones only in the windows: the same probes and windowed
    probes as the real run, and over the run the empty programs' links are all of them and all but the windowed
    ones, never fewer."""
    runs = real_and_floor(tmp_path, ["--window-duty", "0.4"],
                          "for i in $(seq 40); do cat /etc/passwd > /dev/null; sleep 0.05; done", empty_links)
    header = {}
    for mode, (res, _) in runs.items():
        rw = res.header["request_windows"]
        assert rw["active"] and rw["windows_total"] >= 2, rw
        header[mode] = (attached_probes(res), rw["windowed_probes"])
    floor, seen = runs["floor"]
    assert not len(floor["req"]) and not len(floor["io"])
    assert header["floor"] == header["real"]
    assert runs["real"][1] == {0}
    hooks, windowed = len(header["floor"][0]), len(header["floor"][1])
    # between all and all but the windowed ones while a window's hooks come and go one by one
    assert {hooks, hooks - windowed} <= seen <= set(range(hooks - windowed, hooks + 1)), (seen, hooks, windowed)


@pytest.mark.bpf
def test_io_stack_sampling_reconciles(erofs_randread, erofs_tar_16k):
    """Rate-limited bio stacks (the default) and every bio's (--io-stacks all): origins cover every request."""
    for _, res, s in (erofs_randread, erofs_tar_16k):
        loop = [d for d in s["devices"].values() if d["level"] == "loop"][0]
        assert sum(v["requests"] for v in loop["by_origin"].values()) == loop["requests"]
    assert erofs_randread[1].header["io_stack_sampling"]["mode"] == "sampled"
    assert erofs_tar_16k[1].header["io_stack_sampling"]["mode"] == "all"
    assert "not sampled" not in [d for d in erofs_tar_16k[2]["devices"].values()
                                 if d["level"] == "loop"][0]["by_origin"]


@pytest.mark.bpf
def test_tracer_part_sampled_timing_reconciles(erofs_randread):
    """The tracer part is measured on 1 in FST_TRACER_TIME_EVERY handler runs chosen at random (the rest charged
    their site's mean): the header's per-site sums account for every nanosecond in the requests' tracer parts, the
    timed runs are a binomial share of the runs, and the report carries the estimate's method and error."""
    _, res, s = erofs_randread
    ts = res.header["tracer_sites"]
    every = ts["time_every"]
    assert every == 16
    charged = sum(site["charged_ns"] for site in ts["sites"].values())
    part = s["attribution"]["parts_ns"]["tracer_ns"]
    # no sdev filter in run: every charged request is kept; the clamp to on-CPU time only takes away
    assert 0 < part <= charged
    for name, site in ts["sites"].items():
        assert 0 < site["timed"] <= site["runs"] and site["timed_ns"] <= site["charged_ns"], name
        if name == "perf_event sampling":
            assert site["timed"] == site["runs"]
        elif site["runs"] >= 2000:
            # the first run of a site on each CPU is always timed; the rest with probability 1/every
            mean, sd = site["runs"] / every, (site["runs"] * (1 / every) * (1 - 1 / every)) ** 0.5
            assert abs(site["timed"] - mean) <= 6 * sd + os.cpu_count(), (name, site)
    est = s["tracer"]["estimate"]
    assert est["time_every"] == every and "1 in 16" in est["method"]
    # untimed runs charged a mean of timed runs that vary: the estimate has an error.  Not bounded by the part: a
    # handler run on a syscall tracepoint runs with interrupts on, and one timed run an interrupt lengthened by a
    # few hundred microseconds widens the error of a part of a few ms past the part itself, as it should
    # (a bound far above that, which only a broken sum would pass: twenty times the part)
    assert 0 < est["error_ns_95"] < 20 * part
    assert set(est["sites"]) == set(ts["sites"])


@pytest.mark.bpf
def test_offcpu_stacks_as_shipped_are_walked_at_the_switch_in(erofs_randread):
    """What run ships: off-CPU stacks threshold-sampled at 1 ms, said so in the header and the summary."""
    _, res, summary = erofs_randread
    if res.header["task_state"]["store"] != "task_storage":
        pytest.skip("off-CPU stacks are walked at the switch in only with tp_btf task storage: "
                    + res.header["task_state"]["why"])
    off = res.header["offcpu"]
    assert off["walked_at"] == "switch_in" and off["sampling"] == "threshold"
    assert sampling.offcpu_threshold_ns(res.header) == 1000 * 1000  # the CLI's default
    assert summary["offcpu"]["threshold_ns"] == 1000 * 1000
    assert "threshold-sampled" in summary["offcpu"]["method"]


@pytest.mark.bpf
def test_offcpu_stacks_estimate_every_offcpu_nanosecond(tmp_path_factory):
    """Threshold-sampled off-CPU stacks estimate the measured off-CPU parts without bias: each reason's stack
    total lies within 6 standard errors (at most sqrt(T x its time)) plus one threshold of the attribution's
    exact figure.  T is 200 us here so that a short test run's error bound is tight enough to mean something."""
    t = 200 * 1000
    _, res, _ = run_workload(tmp_path_factory, "erofs", "randread", "--offcpu-sample-us", str(t // 1000))
    if res.header["task_state"]["store"] != "task_storage":
        pytest.skip("off-CPU stacks are walked at the switch in only with tp_btf task storage: "
                    + res.header["task_state"]["why"])
    assert res.header["offcpu"]["sampling"] == "threshold" and sampling.offcpu_threshold_ns(res.header) == t
    total, parts = offcpu_by_reason(res)
    lost = sampling.stack_lost_by_reason(res.header)
    if parts["io_wait"] <= 200 * t:  # the bound is then under 45 % of it: else it would mean nothing
        pytest.skip("only %.1f ms of I/O wait in this run: too little for a 6-sigma bound" % (parts["io_wait"] / 1e6))
    for reason, exact in parts.items():
        est = total.get(reason, 0) + lost.get(reason, 0)
        assert abs(est - exact) <= 6 * (t * exact) ** 0.5 + t, (reason, est, exact)
        assert exact > 0 or est == 0, reason  # no time invented for a reason never seen
        assert exact < 20 * t or est > 0, reason  # missed whole only with probability about exp(-exact/t)


@pytest.mark.bpf
def test_block_only_charges_every_block_request_to_its_reader(tmp_path, mounted_erofs):
    """--block-only (fstrace-block in the bench) loads no request tracing, and its block handlers skip the
    per-task state: every block request is still recorded, charged to the thread that queued it, and the
    loop device's count is /proc/diskstats' (or the shortfall is reported as unseen)."""
    from analysis import results
    mnt, dev = mounted_erofs
    drop_caches()
    st = os.stat(dev)
    fst = str(tmp_path / "r.fst")
    subprocess.run([COLLECTOR, "-o", fst, "-d", "%d:%d:4096:loop" % (os.major(st.st_rdev), os.minor(st.st_rdev)),
                    "--block-only", "--", "cat", os.path.join(mnt, "big.bin")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    res = results.load(fst)
    assert res.header["task_state"]["store"] == "none" and len(res["req"]) == 0
    s = S.summarize(res)
    (d,) = [d for d in s["devices"].values() if d["level"] == "loop"]
    delta = d["diskstats_delta"]
    assert delta["reads"] > 0
    assert d["unseen_requests"] == delta["reads"] - d["requests_in_window"]
    io = res["io"]
    direct = enum_value(res.header, "charge", "direct")
    assert len(io) > 0 and (io["charge"] == direct).all() and len(np.unique(io["pid"])) == 1 and io["pid"][0] > 0
    assert sum(res.header["drops"].values()) == 0


@pytest.mark.bpf
def test_sampling_above_the_kernels_rate_cap_says_so(tmp_path):
    """The kernel lowers kernel.perf_event_max_sample_rate by itself when its sampling interrupts run long; a
    --sample-hz above it cannot be opened, and the results say that, not only "Invalid argument"."""
    path = "/proc/sys/kernel/perf_event_max_sample_rate"
    with open("/proc/sys/kernel/perf_cpu_time_max_percent") as f:
        if f.read().strip() in ("0", "100"):  # the kernel then neither lowers the cap nor lets it be set
            pytest.skip("kernel.perf_cpu_time_max_percent is 0 or 100: the sample rate cap is fixed")
    with open(path) as f:
        was = f.read().strip()
    try:
        with open(path, "w") as f:
            f.write("1000")
        res = trace_python(tmp_path, "capped", "pass", [], "--sample-hz", "4999")
    finally:
        with open(path, "w") as f:
            f.write(was)
    smp = res.header["sampling"]
    assert smp["hz"] == 0
    assert smp["why_off"] == "--sample-hz 4999 is above kernel.perf_event_max_sample_rate (1000)"


@pytest.mark.bpf
def test_collector_reports_its_own_cpu_time(tmp_path):
    """The collector's own CPU time (reading and filing records) is in the header, over the traced interval and
    while the workload ran, and in the summary: the kernel's account of the collector process (wait4's rusage,
    which holds its reaped workload too) less the workload's own CPU time bounds it, so no part of the
    workload's time is in it."""
    fst, own = tmp_path / "r.fst", tmp_path / "own"
    script = ("import os, sys, time\n"
              "t = time.process_time(); end = time.monotonic() + 1.5; fd = os.open(sys.argv[1], os.O_RDONLY)\n"
              "while time.monotonic() < end:\n"
              "    os.pread(fd, 4096, 0)\n"
              "open(sys.argv[2], 'w').write(str(time.process_time() - t))\n")
    p = subprocess.Popen([COLLECTOR, "-o", str(fst), "--records", "all", "--", "/usr/bin/python3", "-c", script,
                          "/etc/hostname", str(own)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    res = results.load(str(fst))
    assert len(res["req"]) > 10000  # records to read and file: work the collector did while the reader ran
    h = res.header
    total_ns = (ru.ru_utime + ru.ru_stime) * 1e9
    workload_ns = float(own.read_text()) * 1e9
    assert workload_ns > 0.5e9
    cpu, while_workload = h["collector"]["cpu_ns"], h["workload"]["collector_cpu_ns"]
    assert 0 < while_workload <= cpu
    # rusage is in microseconds; the workload's process_time leaves out only its interpreter's start
    assert cpu <= total_ns - workload_ns + 1e6, (cpu, total_ns, workload_ns)
    col = S.summarize(res)["tracer"]["collector"]
    assert col["available"] and col["over"] == "the workload" and col["cpu_ns"] == while_workload
    span = h["time"]["end_ns"] - h["workload"]["start_ns"]
    assert col["span_ns"] == span and col["cpu_ms_per_s"] == pytest.approx(while_workload / span * 1e3)


@pytest.mark.unit
def test_bench_median_interval_is_the_order_statistic_one():
    """make bench-overhead decides each target from the median's distribution-free 95 % interval: the order
    statistics (x_(k), x_(n+1-k)) with the largest k whose binomial coverage is still at least 95 %."""
    from scripts import bench_overhead as B
    from math import comb

    def coverage(n, k):
        return 1 - 2 * sum(comb(n, i) for i in range(k)) / 2 ** n

    for n in range(6, 40):
        xs = [float(10 * i) for i in range(n)][::-1]  # unsorted on purpose
        lo, hi, cover = B.median_interval(xs)
        k = int(lo / 10) + 1
        assert hi == 10 * (n - k) and cover == coverage(n, k) >= 0.95 and coverage(n, k + 1) < 0.95
    assert B.median_interval([1.0, 2.0, 3.0])[:2] == (1.0, 3.0)  # too few for 95 %: the range
    assert B.median_interval([1.0, 2.0, 3.0])[2] == 0.75
    assert B.verdict([0.98, 0.99], 0.97, 0.96) == "met"
    assert B.verdict([0.90, 0.96], 0.97, 0.96) == "not met"
    assert B.verdict([0.96, 0.99], 0.97, 0.96).startswith("undecided")
    assert B.verdict([0.98, 0.99], 0.97, 0.75).startswith("undecided")


@pytest.mark.unit
def test_bench_ratio_is_to_the_untraced_runs_on_either_side():
    """Every traced run of a case sits between two runs of none (the order of the others rotated each repetition),
    and its ratio is its throughput over their mean: a drift of the machine's speed over the case, which a ratio
    to a run of none a repetition away kept, cancels."""
    from scripts import bench_overhead as B

    have = ["none", "a", "b", "c"]
    seq = B.run_sequence(have, 4)
    cfgs = [c for _, c in seq]
    assert len(seq) == 4 * 2 * 3 + 1 and cfgs[0] == cfgs[-1] == "none"
    assert all((c == "none") == (i % 2 == 0) for i, c in enumerate(cfgs))
    for rep in range(4):
        ran = [c for r, c in seq if r == rep and c != "none"]
        assert sorted(ran) == ["a", "b", "c"] and ran[0] == ["a", "b", "c"][rep % 3]
    assert B.run_sequence(["none"], 3) == [(0, "none"), (1, "none"), (2, "none")]
    # with one or two others, one more none between repetitions: no two runs of one share a neighbour
    for few in (["none", "a"], ["none", "a", "b"]):
        order = B.run_sequence(few, 5)
        for cfg in few[1:]:
            at = [i for i, (_, c) in enumerate(order) if c == cfg]
            assert len(at) == 5 and all(j - i >= 3 for i, j in zip(at, at[1:])), order
            assert all(order[i - 1][1] == order[i + 1][1] == "none" for i in at)
    # a machine slowing steadily by 1 % a run, every traced configuration costing 2 %
    speed = [100.0 * (1 - 0.01 * i) for i in range(len(seq))]
    tps = [v * (1 if c == "none" else 0.98) for v, c in zip(speed, cfgs)]
    ratios = B.neighbour_ratios(seq, tps)
    assert ratios["none"] == [1.0] * 13 and sorted(ratios) == ["a", "b", "c", "none"]
    for c in "abc":
        assert len(ratios[c]) == 4 and all(r == pytest.approx(0.98) for r in ratios[c])
    # against the same repetition's first none, as before, the drift showed as cost
    first_none = {rep: tps[cfgs.index("none", 6 * rep)] for rep in range(4)}
    assert max(t / first_none[r] for (r, c), t in zip(seq, tps) if c != "none") < 0.975


@pytest.mark.unit
def test_bench_prints_what_the_windows_cost_fios_reads_measured_on_them():
    """Beside a windowed configuration's ratio, the share of fio's reads its windows took over each run, measured on
    the reads (windows_slowdown): its median and range over the runs that have it, and nothing where none has."""
    from scripts import bench_overhead as B
    from scripts.overhead_report import render

    ws = [{"fio_ios": 10, "fraction": 0.03, "traced_reads_lost": {"over_time": x}} for x in (0.004, 0.006, 0.008)]
    ws.append({"fio_ios": 10, "fraction": 0.03, "traced_reads_lost": {"why": "1 window with a gap before it"}})
    wc = B.window_counts(ws)
    assert wc["traced_reads_lost_over_time"]["median"] == pytest.approx(0.006)
    assert B.window_counts(ws[3:])["traced_reads_lost_over_time"] is None
    row = {"throughput_bytes_per_s": {"min": 1, "median": 1, "max": 1},
           "ratio_to_none": {"min": 1, "median": 1, "max": 1}}
    out = {"configs": ["none", "fstrace-attach"], "cases": {"fio-randread-4k-warm": {
        "none": row, "fstrace-attach": dict(row, window_counts=wc)}}}
    assert "fstrace-attach       0.60 % over the run (median; 0.40-0.80 %; 3 of 4 runs had one)" in render(out)


@pytest.mark.unit
def test_bench_checks_each_ratio_target_beside_its_own_floor():
    """Each ratio target is reported beside its own configuration's floor (the same options with empty programs):
    attach's beside fstrace-attach-floor, not the full configuration's fstrace-floor, and said to be beyond the
    machine only when that floor's own interval lies below the target."""
    from scripts import bench_overhead as B

    def ratio(median, lo, hi):
        return {"ratio_to_none": {"median": median, "median_interval": [lo, hi], "median_interval_coverage": 0.96}}

    assert B.FSTRACE_CONFIGS["fstrace-attach-floor"] == B.FSTRACE_CONFIGS["fstrace-attach"] + ["--empty-programs"]
    out = {"configs": [], "cases": {"fio-randread-4k-cold": {
        "fstrace-full": ratio(0.93, 0.90, 0.95), "fstrace-floor": ratio(0.99, 0.985, 1.0),
        "fstrace-attach": ratio(0.94, 0.92, 0.96), "fstrace-attach-floor": ratio(0.95, 0.93, 0.97),
        "fstrace-serve-budget": ratio(0.97, 0.95, 0.99)}}}
    rows = {r["what"].split(" ")[0]: r for r in B.targets(out) if "ratio" in r["what"]}
    assert rows["fstrace-full"]["verdict"] == "not met" and rows["fstrace-full"]["floor_median"] == 0.99
    assert rows["fstrace-attach"]["floor_median"] == 0.95
    assert rows["fstrace-attach"]["verdict"] == "not met; beyond this machine: the hooks alone (floor) keep less"
    assert rows["fstrace-serve-budget"]["verdict"].startswith("undecided")
    assert "floor_median" not in rows["fstrace-serve-budget"]  # no serve floor in this run


@pytest.mark.unit
def test_bench_always_on_cost_leaves_the_windowed_programs_out():
    """A windowed configuration's programs attached all the time: their CPU per second of the workload, from the
    per-program costs of the runs with statistics on, the programs --budget attaches only in windows (the header's
    windowed_probes, and perf sampling when windowed) left out."""
    from scripts import bench_overhead as B
    infos = [{"span_s": 2.0, "windowed_probes": ["sys_enter", "sys_exit", B.SAMPLING],
              "probes": [("sys_enter", 400000, 40000000), ("sys_exit", 400000, 40000000),
                         ("block_rq_complete", 20000, 10000000), (B.SAMPLING, 200, 400000)]},
             {"span_s": 1.0, "windowed_probes": ["sys_enter", "sys_exit"],
              "probes": [("block_rq_complete", 10000, 6000000), ("erofs_map_blocks_exit", 1000, 300000)]}]
    costs = {p["program"]: p for p in B.probe_costs(infos)}
    assert costs["sys_enter"]["windowed"] and costs[B.SAMPLING]["windowed"]
    assert not costs["block_rq_complete"]["windowed"]
    # block_rq_complete: 10 000 events/s at the median of 500 and 600 ns; erofs: 1000/s at 300 ns
    assert costs["block_rq_complete"]["events_per_s"] == 10000 and costs["block_rq_complete"]["ns_per_event"] == 550
    assert B.always_on_ms_per_s(list(costs.values())) == pytest.approx(10000 * 550 / 1e6 + 1000 * 300 / 1e6)
    # the collector process's own CPU while the workload ran, per second of it; None from a collector without it
    t = {"start_ns": 0, "end_ns": 4_000_000_000}
    header = {"collector": {"cpu_ns": 9_000_000}, "workload": {"collector_cpu_ns": 3_000_000, "start_ns": 1},
              "time": t}
    assert B.collector_ms_per_s({"collector_cpu_s": B.collector_cpu_s(header), "span_s": 2.0}) == pytest.approx(1.5)
    assert B.collector_cpu_s({"collector": {"cpu_ns": 9_000_000}, "workload": {}, "time": t}) == pytest.approx(0.009)
    assert B.collector_ms_per_s({"collector_cpu_s": B.collector_cpu_s({"collector": {}, "time": t}),
                                 "span_s": 2.0}) is None


def forged_ratio(median, lo, hi, coverage=0.96):
    return {"ratio_to_none": {"median": median, "median_interval": [lo, hi], "median_interval_coverage": coverage}}


@pytest.mark.unit
def test_bench_budget_ratio_targets_every_case_and_none_below():
    """attach and serve at their default budget: each case's median against 0.985 by its interval, and one row per
    configuration that is not met when any case's interval lies below 0.98, undecided when a case had too few
    repetitions for an interval, met otherwise."""
    from scripts import bench_overhead as B
    out = {"configs": [], "cases": {
        "fio-randread-4k-cold": {"fstrace-attach": forged_ratio(0.98, 0.975, 0.99),
                                 "fstrace-serve-budget": forged_ratio(0.99, 0.981, 0.995)},
        "fio-randread-4k-warm": {"fstrace-attach": forged_ratio(0.995, 0.99, 1.0),
                                 "fstrace-serve-budget": forged_ratio(1.0, 0.99, 1.01)},
        "tar-seqread-cold": {"fstrace-attach": forged_ratio(0.96, 0.95, 0.97),
                             "fstrace-serve-budget": forged_ratio(0.99, 0.98, 1.0)}}}
    rows = {r["what"]: r for r in B.targets(out)}
    ratio = "%s (budget 1 %%) ratio, %s"
    assert rows[ratio % ("fstrace-attach", "fio-randread-4k-cold")]["target"] == ">= 0.985"
    assert rows[ratio % ("fstrace-attach", "fio-randread-4k-cold")]["verdict"].startswith("undecided")
    assert rows[ratio % ("fstrace-attach", "fio-randread-4k-warm")]["verdict"] == "met"
    assert rows[ratio % ("fstrace-attach", "tar-seqread-cold")]["verdict"] == "not met"
    assert rows[ratio % ("fstrace-serve-budget", "fio-randread-4k-cold")]["verdict"] == \
        "undecided (the interval spans it)"
    below = "%s (budget 1 %%): no case not met at 0.98"
    assert rows[below % "fstrace-attach"]["verdict"] == "not met (shown below 0.98: tar-seqread-cold)"
    assert rows[below % "fstrace-serve-budget"]["verdict"] == "met (no case of 3 shown below 0.98)"
    # too few repetitions for an interval in one case: nothing shown below, nothing shown either
    out["cases"]["tar-seqread-cold"]["fstrace-serve-budget"] = forged_ratio(0.99, 0.97, 1.0, coverage=0.75)
    rows = {r["what"]: r for r in B.targets(out)}
    assert rows[below % "fstrace-serve-budget"]["verdict"].startswith("undecided (too few repetitions")


@pytest.mark.unit
def test_bench_always_on_target_is_five_ms_per_s_by_the_runs_range():
    """The programs attached all the time (the windowed ones left out) plus the collector process, in CPU ms per
    second of the workload, against 5: met when even the runs' highest costs and the collector's interval's top
    stay within it, not met when even the lowest exceed it, else undecided."""
    from scripts import bench_overhead as B

    def case(ns_range, collector):
        costs = [{"program": "block_rq_complete", "events_per_s": 10000, "ns_per_event": sum(ns_range) / 2,
                  "ns_per_event_range": ns_range, "windowed": False},
                 {"program": "sys_enter", "events_per_s": 1e6, "ns_per_event": 100, "ns_per_event_range": [90, 110],
                  "windowed": True}]
        r = dict(forged_ratio(1.0, 0.99, 1.01), probe_costs=costs,
                 collector_ms_per_s={"median": collector[0], "median_interval": collector[1:]})
        return {"configs": [], "cases": {"fio-randread-4k-cold": {"fstrace-attach": r}}}

    def row(out):
        return next(r for r in B.targets(out) if "always-on" in r["what"])
    # 10 000 completions/s at 200-300 ns: 2-3 ms/s, and the collector's 1 (0.5-1.5): 2.5-4.5, within 5
    r = row(case([200, 300], (1.0, 0.5, 1.5)))
    assert r["verdict"] == "met" and r["target"] == "<= 5" and r["range"] == pytest.approx([2.5, 4.5])
    assert r["median"] == pytest.approx(3.5)
    assert row(case([200, 400], (1.0, 0.5, 2.5)))["verdict"].startswith("undecided")  # 2.5-6.5
    assert row(case([500, 600], (1.0, 0.5, 1.5)))["verdict"] == "not met"  # 5.5-7.5


@pytest.mark.unit
def test_bench_completion_cost_against_biolatency_in_the_same_run():
    """The block_rq_complete programs' run time per completed request (names the kernel cut to 15 characters
    too), fstrace's windowed configuration's against biolatency's from the same bench: met when its every run is
    at most biolatency's cheapest, not met when its cheapest is above biolatency's dearest, unavailable (never met)
    without either."""
    from scripts import bench_overhead as B
    # an always-attached program on every completion and a windowed one on some: their time over the completions
    assert B.completion_cost_ns([("block_rq_complete", 1000, 200000), ("block_rq_complete", 100, 50000),
                                 ("sys_exit", 5000, 1000000)]) == 250
    assert B.completion_cost_ns([("block_rq_comple", 10, 3000)]) == 300  # bpftool's name of biolatency's
    assert B.completion_cost_ns([("sys_exit", 5, 100)]) is None
    # fstrace's programs on the completion by the names the header gave their hook: block_rq_done counts too
    fst = [("block_rq_done", 1000, 100000), ("block_rq_complete", 1000, 300000), ("block_rq_issue", 1000, 9000)]
    assert B.completion_cost_ns(fst, ["block_rq_done", "block_rq_complete"]) == 400
    assert B.completion_costs([{"probes": fst, "completion_probes": ["block_rq_done", "block_rq_complete"]}])[
        "ns_per_completion"]["median"] == 400
    # under --budget the target is the exact path: the windowed hook's share is said beside it
    cc = B.completion_costs([{"probes": fst, "completion_probes": ["block_rq_done", "block_rq_complete"],
                              "windowed_probes": ["sys_enter", "block_rq_complete"]}])
    assert cc["ns_per_completion"]["median"] == 100 and cc["with_windowed"]["ns_per_completion"]["median"] == 400
    bio = B.completion_costs([{"probes": [("block_rq_comple", 10, 3000)]}, {"probes": [("block_rq_comple", 10, 3400)]}])
    assert bio["ns_per_completion"] == {"min": 300, "median": 320, "max": 340}
    assert cc["completions"] == [1000] and bio["completions"] == [10, 10]
    # the target is the exact path's; the windowed hook's share is said beside it, and what the costs are over
    assert B.completion_row("fstrace-attach", "c", cc, bio)["verdict"] == (
        "met: 100 ns (100-100) against biolatency's 320 ns (300-340), over 1000 completions a run (biolatency's 10); "
        "with the windowed completion hook's share, 400 ns (400-400)")

    def verdict(ours, biolatency):
        res = dict(forged_ratio(1.0, 0.99, 1.01))
        out = {"configs": [], "cases": {"fio-randread-4k-cold": {
            "fstrace-attach": res, "completion_cost": {"fstrace-attach": B.completion_costs(
                [{"probes": [("block_rq_complete", 10, 10 * ns)]} for ns in ours])}}}}
        if biolatency is not None:
            out["cases"]["fio-randread-4k-cold"]["completion_cost"]["biolatency"] = B.completion_costs(
                [{"probes": [("block_rq_comple", 10, 10 * ns)]} for ns in biolatency])
        return next(r for r in B.targets(out) if "per completion" in r["what"])["verdict"]
    assert verdict([250, 280], [300, 340]).startswith("met: 265 ns (250-280) against biolatency's 320 ns")
    assert verdict([350, 400], [300, 340]).startswith("not met")
    assert verdict([290, 310], [300, 340]).startswith("undecided")
    assert verdict([290, 310], None) == "unavailable (biolatency was not in this run)"
    assert verdict([], [300]).startswith("unavailable (no block request completed")


@pytest.mark.unit
def test_bench_windowed_figures_against_their_true_counts():
    """The 30 s runs' windowed block and erofs figures: estimate objects {"estimate", "interval95"} found under the
    summary's devices and erofs sections, the device's read requests against the kernel's reads completed and
    erofs's reads against fio's; a results file without them is unavailable with the reason, never met."""
    from scripts import bench_overhead as B
    summ = {"devices": {"7:0": {"requests": {"estimate": 1000.0, "interval95": [900.0, 1100.0], "seen": 30},
                                "bytes": 4096000, "q2c_us": {"p50": 3}},
                        "7:1": {"requests": 4}},
            "erofs": {"events": {"map": {"estimate": 50.0, "interval95": [40.0, 60.0]}},
                      "reads": {"estimate": 2000.0, "interval95": [1500.0, 2500.0]}}}
    found = B.windowed_figure_estimates(summ)
    assert [p for p, _ in found["devices"]["7:0"]] == [("requests",)] and found["devices"]["7:1"] == []
    assert sorted(p for p, _ in found["erofs"]) == [("events", "map"), ("reads",)]
    windows = {"estimate": 2100.0, "interval95": [1900.0, 2300.0], "fraction": 0.02, "windows": 12}
    run = B.coverage_run({"windows": windows, "figures": found}, fio_ios=2000, dev="7:0", disk_reads=1050)
    assert run["requests"]["covered"] and run["block"]["covered"] and run["erofs"]["covered"]
    assert run["block"]["truth"] == 1050 and run["block"]["path"] == "requests"
    outside = B.coverage_run({"windows": windows, "figures": found}, fio_ios=2000, dev="7:0", disk_reads=1200)
    assert B.coverage_verdict([run["block"], run["block"]]) == "met (2 of 2 runs)"
    assert B.coverage_verdict([run["block"], outside["block"]]).startswith("not met (1 of 2 runs outside: 1200 not")
    # a miss whose true count has requests no program ran for (the summary's unseen_requests) says how many
    short = B.coverage_run({"windows": windows, "figures": found, "unseen_reads": {"7:0": 120}}, fio_ios=2000,
                           dev="7:0", disk_reads=1200)
    assert short["block"]["unseen"] == 120 and "unseen" not in outside["block"]
    assert B.coverage_verdict([short["block"]]) == ("not met (1 of 1 runs outside: 1200 not in 900-1100 (120 unseen "
                                                    "by the programs, in the estimate's total))")
    assert B.unseen_reads({"devices": {"7:0": {"unseen_requests": 3}, "7:1": {"unseen_requests": None}}}) == \
        {"7:0": 3}
    # exact figures (every program attached all the time), or another layout: unavailable with the reason
    bare = B.coverage_run({"windows": {"why": "one window: no interval"},
                           "figures": B.windowed_figure_estimates({"devices": {"7:0": {"requests": 1050}},
                                                                   "erofs": None})},
                          fio_ios=2000, dev="7:0", disk_reads=1050)
    for key in ("requests", "block", "erofs"):
        assert not bare[key]["available"]
    assert B.coverage_verdict([bare["block"]]).startswith("unavailable (the results have no estimate under devices/7:0")
    assert B.coverage_verdict([bare["requests"]]) == "unavailable (one window: no interval)"
    assert B.coverage_verdict([run["erofs"], bare["erofs"]]).startswith("undecided (1 of 2 runs inside")
    two = B.count_estimate([(("a", "requests"), {"estimate": 1, "interval95": [0, 2]}),
                            (("b", "requests"), {"estimate": 1, "interval95": [0, 2]})], ("requests",), "devices/7:0")
    assert two[0] is None and "more than one" in two[1]
    # the rows of the run: per configuration, start and figure
    out = {"configs": [], "cases": {}, "window_coverage": {"runtime_s": 30, "runs": [
        dict(run, config="fstrace-attach", start="cold"), dict(outside, config="fstrace-attach", start="cold")]}}
    rows = {r["what"]: r["verdict"] for r in B.targets(out)}
    assert rows["fstrace-attach: true count inside the 95 % interval, windowed block requests, 30 s cold randread"] \
        .startswith("not met")
    assert rows["fstrace-attach: true count inside the 95 % interval, request estimate, 30 s cold randread"] \
        == "met (2 of 2 runs)"


@pytest.mark.unit
def test_bench_tracer_share_with_few_samples_is_not_met_by_a_zero_interval():
    """The main command's tracer share: with no fstrace sample among a few inside requests the normal interval is
    0-0; the bench takes the exact Poisson top instead (3.689 events for none seen, 8.767 for 3), so 10 samples
    decide nothing and 1000 do."""
    from scripts import bench_overhead as B
    assert B.poisson_upper_95(0) == pytest.approx(3.689, abs=1e-3)
    assert B.poisson_upper_95(3) == pytest.approx(8.767, abs=1e-3)  # chi-square(0.975, 8) / 2
    # chi-square(0.975, 2k + 2) / 2 for k = 100 and 800 (scipy.stats.chi2.ppf): where exp(-mu) alone underflows
    assert B.poisson_upper_95(100) == pytest.approx(121.627, abs=1e-2)
    assert B.poisson_upper_95(800) == pytest.approx(857.412, abs=1e-2)

    def row(samples, tracer):
        out = {"configs": [], "cases": {}, "main_command": {"tracer": {"sampled": {
            "samples": samples, "tracer_samples": tracer, "share": tracer / samples, "share_95": [0.0, 0.0]}}}}
        return next(r for r in B.targets(out) if r["kind"] == "tracer-share")
    assert row(10, 0)["verdict"] == "undecided (the interval spans it)"
    assert row(10, 0)["interval"][1] == pytest.approx(0.3689, abs=1e-4)
    assert row(1000, 0)["verdict"] == "met"


@pytest.mark.unit
@pytest.mark.parametrize("arg", ["--reps=0", "--cover-runs=-1", "--cover-runtime-s=0", "--idle-s=0"])
def test_bench_bad_numbers_are_one_line_before_anything_runs(tmp_path, arg):
    p = subprocess.run([sys.executable, "-m", "scripts.bench_overhead", arg, "--cache", str(tmp_path / "cache"),
                        "--out", str(tmp_path / "o.json")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("bench: --reps must be"), p.stderr
    assert not os.listdir(tmp_path)


def forged_run():
    """A bench's JSON, as scripts.bench_overhead writes it, of one windowed configuration on one case."""
    from scripts import bench_overhead as B
    stats = {"min": 1e8, "median": 1.1e8, "max": 1.2e8}
    res = {"none": {"throughput_bytes_per_s": stats, "ratio_to_none": {"min": 1, "median": 1, "max": 1}},
           "fstrace-attach": dict(forged_ratio(0.99, 0.986, 1.0), throughput_bytes_per_s=stats,
                                  probe_costs=[{"program": "block_rq_complete", "events_per_s": 1000,
                                                "ns_per_event": 300, "ns_per_event_range": [250, 350],
                                                "windowed": False}])}
    res["fstrace-attach"]["ratio_to_none"].update(min=0.95, max=1.02)
    out = {"configs": ["none", "fstrace-attach"], "reps": 6, "scale": 0.02, "kernel": "6.18.0",
           "machine": {"arch": "x86_64", "cpus": 2, "cpu_model": "Xeon", "memory_gib": 23.5, "vm": "kvm",
                       "container": None},
           "bench_args": ["--reps", "6", "--scale", "0.02"], "started_utc": "2026-12-06T23:00:00Z",
           "ended_utc": "2026-12-06T23:10:00Z", "tiers": {"config": "fstrace-attach",
                                                          "probes": {"sys_enter": "tp_btf", "sys_exit": "tp_btf"}},
           "cases": {"fio-randread-4k-cold": res}}
    out["targets"] = B.targets(out)
    return out


@pytest.mark.unit
def test_overhead_report_says_what_ran_and_each_targets_outcome(tmp_path):
    """The generated report of a run states its command, machine, kernel, tiers and dates, every target with its
    outcome, and the full output; README's table counts each kind of target's outcomes; bad input is one line."""
    from scripts import overhead_report as R
    out = forged_run()
    md = R.render_markdown(out)
    assert '`sudo make bench-overhead BENCH_ARGS="--reps 6 --scale 0.02"`' in md
    assert "2026-12-06T23:00:00Z, 2026-12-06T23:10:00Z" in md and "| kernel | 6.18.0 |" in md
    assert "virtual machine: kvm" in md and "fstrace-attach's probes: tp_btf: sys_enter, sys_exit" in md
    for t in out["targets"]:
        assert "| %s |" % R.cell(t["verdict"]) in md
    assert "| fstrace-attach (budget 1 %) ratio, fio-randread-4k-cold | >= 0.985 | median 0.990, 96 % interval " \
        "0.986-1.000 | met |" in md
    assert R.render(out) in md
    block = R.readme_block(out)
    assert "| `attach` and `serve` (default budget): throughput ratio to untraced | median >= 0.985, every case " \
        "| 1 met |" in block
    # 300 ns (250-350) x 1000/s: 0.30 (0.25-0.35) ms/s
    assert "| `attach` and `serve` (default budget): always-attached programs + collector | at most 5 ms CPU per " \
        "s of workload, every case | 1 met |" in block
    assert "| records dropped | none | not in this run |" in block
    readme = "a\n%s\nold\n%s\nb\n" % (R.README_BEGIN, R.README_END)
    assert R.replace_readme_block(readme, block) == "a\n%s\nb\n" % block
    with pytest.raises(ValueError):
        R.replace_readme_block("no block", block)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    page = tmp_path / "page.md"
    p = subprocess.run([sys.executable, "-m", "scripts.docs_generated", "overhead", str(bad), "-o", str(page)],
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and not page.exists(), p.stderr


@pytest.mark.unit
def test_generated_overhead_run_and_readme_table_are_the_renderers_output():
    """docs/generated/overhead-run.md and README's overhead table are what `make docs-overhead-run` renders from the
    JSON kept beside the report: neither is edited by hand, and both change together."""
    from scripts import overhead_report as R
    with open(os.path.join(ROOT, "docs", "generated", "overhead-run.json")) as f:
        out = json.load(f)
    with open(os.path.join(ROOT, "docs", "generated", "overhead-run.md")) as f:
        assert f.read() == R.render_markdown(out)
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert R.readme_block(out) in readme


def bench_mounts(pids):
    """(mount point, loop device, its backing file) of the image mounts whose tree processes pids work in (a
    bench's own: its mount points are in a temporary directory of its own, whatever other benches run)."""
    cwds = set()
    for pid in pids:
        try:
            cwds.add(os.readlink("/proc/%d/cwd" % pid))
        except OSError:
            pass
    out = set()
    for line in open("/proc/self/mounts"):
        source, mnt = line.split()[:2]
        if "fstrace-bench-" in mnt and any(c == mnt or c.startswith(mnt + "/") for c in cwds):
            out.add((mnt, source, loop_backing(source)))
    return out


def loop_backing(dev):
    try:
        with open("/sys/block/%s/loop/backing_file" % os.path.basename(dev)) as f:
            return f.read().strip()
    except OSError:
        return None


@pytest.mark.bpf
@pytest.mark.parametrize("config,child", [("fstrace-full", "fstrace-collect"), ("biolatency", "biolatency")])
def test_bench_overhead_interrupted_leaves_nothing(tmp_path, config, child):
    """make bench-overhead killed (SIGTERM) while a tracer runs: one line, its exit status, and nothing left of it --
    no mount, no loop device, no tracer process, no BPF program.  Only what this bench made is looked for: on a
    shared machine other tracers and benches come and go meanwhile."""
    import shutil
    if child == "biolatency" and not shutil.which("biolatency"):
        pytest.skip("libbpf-tools' biolatency is not installed (scripts/setup.sh --test installs it)")
    from conftest import CACHE, ROOT, SCALE, bpf_objects_left, bpf_objects_of
    from cli.leftovers import task_comm as comm
    from conftest import alive, descendants
    bench = subprocess.Popen([os.path.join(ROOT, "build", "venv", "bin", "python3"), "-m", "scripts.bench_overhead",
                              "--reps", "50", "--configs", config, "--cache", CACHE, "--scale", SCALE,
                              "--out", str(tmp_path / "o.json")], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        # the tracer with its programs loaded, and the workload at work on the image
        deadline = time.monotonic() + 600
        while True:
            assert bench.poll() is None, bench.stderr.read()
            assert time.monotonic() < deadline
            kids = descendants(bench.pid)
            tracer = [p for p in kids if comm(p) == child]
            objs = bpf_objects_of(tracer[0]) if tracer else set()
            mounts = bench_mounts(kids)
            if any(kind == "prog" for kind, _ in objs) and mounts:
                break
            time.sleep(0.05)
        bench.terminate()
        err = bench.communicate(timeout=120)[1]
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert bench.returncode == 128 + 15, err
    assert err.strip().splitlines()[-1] == "bench: interrupted by SIGTERM; cleaned up, no results written"
    assert not (tmp_path / "o.json").exists()
    assert not [p for p in kids if alive(p)], [(p, comm(p)) for p in kids if alive(p)]
    mounted = {line.split()[1] for line in open("/proc/self/mounts")}
    for mnt, dev, backing in mounts:
        assert mnt not in mounted
        assert backing is None or loop_backing(dev) != backing, dev
    assert bpf_objects_left(objs) == set()
