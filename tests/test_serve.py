"""fstrace serve: the in-kernel aggregates as Prometheus metrics, checked against fio's own counts, the block
layer's /proc/diskstats, promtool and a real Prometheus server scraping it; a daemon's bad days (garbage, slow
and vanishing clients, 100 at once, SIGHUP, SIGTERM, an unmounted filesystem).  Every socket is on 127.0.0.1."""
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from cli.devices import kdev, mount_of
from cli.serve import EXPOSITION_ROOTS, MEMORY_FS, exposition_root, wants_openmetrics
from conftest import COLLECTOR, FSTRACE, bpf_objects_left, bpf_objects_of, collector_under, drop_caches, \
    short_of_kernel
from serving import (PROMETHEUS_ACCEPT, Prometheus, diskstat, fio_randread, fresh_scrape, normalized, parse, scrape,
                     scrape_om, start_serve, stop, value)


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(next(l for l in f if l.startswith("VmRSS:")).split()[1]) * 1024


def promtool_findings(text):
    """What Prometheus's own linter says of an exposition: "" when it passes with nothing to say."""
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    return lint.stdout.strip() or ("" if lint.returncode == 0 else "exit status %d" % lint.returncode)


def undocumented(text):
    """The metric families of an exposition that docs/serve.md's table does not name."""
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "serve.md")) as f:
        table = "".join(line for line in f if line.startswith("| `"))
    return [m for m in re.findall(r"^# TYPE (\S+)", text, re.M) if "`%s`" % m not in table]


def readme_promql():
    """The PromQL queries docs/serve.md gives as the seeds' questions (its code block after "in PromQL")."""
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "serve.md")) as f:
        text = f.read()
    block = text[text.index("## Scraping and querying"):]
    block = block[block.index("in PromQL"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    queries, cur = [], []
    for line in block.strip().splitlines():
        if line.startswith("#"):
            if cur:
                queries.append(" ".join(cur))
            cur = []
        else:
            cur.append(line.strip())
    return queries + [" ".join(cur)] if cur else queries


def other_ops():
    """{(major, minor): discards and flushes completed} of every block device (/proc/diskstats), requests that are
    neither reads nor writes"""
    out = {}
    with open("/proc/diskstats") as f:
        for line in f:
            v = line.split()
            out[(int(v[0]), int(v[1]))] = sum(int(x) for x in (v[14:15] + v[18:19]))
    return out


def traced_devices(collector):
    """(major, minor) of every --dev of a running collector, from its command line"""
    argv = open("/proc/%d/cmdline" % collector).read().split("\0")
    return [tuple(int(x) for x in argv[i + 1].split(":")[:2]) for i, a in enumerate(argv) if a in ("-d", "--dev")]


@pytest.mark.bpf
def test_serve_counts_every_read_and_prometheus_agrees(mounted_erofs, collector_header):
    mnt, dev = mounted_erofs
    others0 = other_ops()
    p, port, rest = start_serve("--mount", mnt)
    prom = None
    try:
        prom = Prometheus(port)
        prom.wait_for('up{job="fstrace"}', 1.0)
        drop_caches()
        before = parse(fresh_scrape(port))
        ds0 = diskstat(dev)
        time.sleep(1.5)  # Prometheus holds a sample of the counters as they were before the workload
        t0 = time.time()
        job = fio_randread(mnt)
        ds1 = diskstat(dev)
        text = fresh_scrape(port)
        after = parse(text)
        t1 = time.time()

        # the exposition is valid by Prometheus's own linter
        assert promtool_findings(text) == ""
        assert undocumented(text) == []

        # every read fio made is counted once, with the bytes it returned (fio is the only reader there)
        sel = dict(kind="read", mount=mnt, fs="erofs")

        def inc(name, **kw):
            return value(after, name, **sel, **kw) - value(before, name, **sel, **kw)
        assert inc("fstrace_requests_total") == job["total_ios"] == 512
        assert inc("fstrace_request_bytes_total") == job["io_bytes"] == 2 << 20
        assert inc("fstrace_request_duration_seconds_count") == 512
        # the parts of each request partition its wall time, so their sums do too (printed to the ns)
        parts = {ls for n, ls in after if n == "fstrace_request_time_seconds_total"}
        names = {v for ls in parts for k, v in ls if k == "part"}
        # every part of records.h FST_PARTS, no other (as the collector's results header lists them)
        assert {p["field"][:-3] for p in collector_header["schema"]["parts"]} == names
        assert abs(inc("fstrace_request_time_seconds_total") - inc("fstrace_request_duration_seconds_sum")) < 1e-6
        io_wait = inc("fstrace_request_time_seconds_total", part="io_wait")
        wall = inc("fstrace_request_duration_seconds_sum")
        # cold reads through a loop device wait for it; fio timed each read around the syscall, so its total
        # completion latency bounds the kernel's wall time from above
        assert 0 < io_wait < wall <= job["clat_ns"]["mean"] * job["total_ios"] / 1e9
        assert inc("fstrace_pagecache_misses_total") > 0

        # the block layer's own counts of the loop device equal the exported ones
        loop = "%d:%d" % (os.major(os.stat(dev).st_rdev), os.minor(os.stat(dev).st_rdev))
        blk = lambda s, n: value(s, n, device=loop, op="read")  # noqa: E731
        completion = {"missed_runs": value(after, "fstrace_probe_missed_runs_total", probe="block_rq_complete")}
        nreqs = blk(after, "fstrace_block_requests_total") - blk(before, "fstrace_block_requests_total")
        short = short_of_kernel(nreqs, ds1[0] - ds0[0], completion)
        nbytes = blk(after, "fstrace_block_request_bytes_sum") - blk(before, "fstrace_block_request_bytes_sum")
        assert nbytes <= ds1[1] - ds0[1] and (short or nbytes == ds1[1] - ds0[1]), (nbytes, ds0, ds1)
        assert value(after, "fstrace_probe_info", probe="sys_exit") == 1
        # the image's device is named for what it is (records.h FST_DEV_LEVELS), as attach's results name it
        assert value(after, "fstrace_block_device_info", device=loop, level="loop") == 1
        assert value(after, "fstrace_filesystem_mounted", mount=mnt) == 1
        assert value(after, "fstrace_dropped_records_total") == 0
        assert value(after, "fstrace_unaggregated_requests_total") == 0
        # every attached probe says how many of its events the kernel skipped; none here
        attached = {dict(ls)["probe"] for (n, ls), v in after.items() if n == "fstrace_probe_info"
                    and dict(ls)["tier"] != "unavailable"}
        missed = {dict(ls)["probe"]: v for (n, ls), v in after.items() if n == "fstrace_probe_missed_runs_total"}
        assert set(missed) == attached and "sched_switch" in attached
        # erofs's event tracepoints make per-request records only, which serve keeps none of: not loaded at all
        records_only = {"erofs_map_blocks_exit", "erofs_readahead", "erofs_read_folio"}
        assert all(value(after, "fstrace_probe_info", probe=n, tier="unavailable") == 1 for n in records_only)
        loaded = set()
        for kind, i in bpf_objects_of(collector_under(p.pid)):
            if kind == "prog":
                out = subprocess.run(["bpftool", "-j", "prog", "show", "id", str(i)], stdout=subprocess.PIPE,
                                     text=True).stdout
                loaded.add(json.loads(out)["name"] if out.strip() else "")
        # bpftool names a program by its function (the tier's suffix after the probe's name)
        assert any(x.startswith("block_rq_complete_") for x in loaded), loaded
        assert not [x for x in loaded for n in records_only if x.startswith(n + "_")], loaded
        assert value(after, "fstrace_expired_in_flight_total") == 0
        # the kernel completed no block request on the loop device that fstrace did not see (nor the reverse), but
        # for those it ran no program for, which are said unseen; no in-flight table was full, and every loss
        # records.h names is a series
        unseen_loop = blk(after, "fstrace_block_requests_unseen_total")
        assert unseen_loop >= short if short else unseen_loop == 0, (unseen_loop, short)
        assert blk(after, "fstrace_block_requests_beyond_diskstats_total") == 0
        losses = {dict(ls)["what"]: v for (n, ls), v in after.items() if n == "fstrace_losses_total"}
        assert set(losses) == set(collector_header["losses"])
        assert not any(v for k, v in losses.items() if k != "request_completion_missed"), losses
        # a completion the kernel did not run the program for (measuring.md, "unseen block requests") leaves its
        # request held until its address is issued again, where it counts as missed: on any traced device
        # (the backing disk's other users too), and each is one request diskstats completed that fstrace did not
        # see, so the misses are bounded by the unseen requests of all devices; those are reads and writes, and a
        # flush or discard of the backing disk's other users can be missed as well: bounded by diskstats' count
        unseen = sum(v for (n, ls), v in after.items() if n == "fstrace_block_requests_unseen_total")
        others1 = other_ops()
        other = sum(others1[d] - others0.get(d, 0) for d in traced_devices(collector_under(p.pid, timeout=10)))
        assert losses["request_completion_missed"] <= unseen + other, (losses, unseen, other)

        # Prometheus asked for OpenMetrics and got it: only that format has the counters' _created samples
        assert prom.query('count(fstrace_requests_created{mount="%s"})' % mnt) > 0
        # Prometheus: raw counter values at the end and before the workload are exact
        q = 'sum(fstrace_requests_total{kind="read",mount="%s"})' % mnt
        prom.wait_for(q, value(after, "fstrace_requests_total", **sel))
        assert prom.query(q) - prom.query(q, at=t0) == 512
        # increase() extrapolates the samples inside the window to its edges: the counter is flat at both
        # edges, so the estimate is the true increase times window / (span of the samples), and with 1 s
        # scrapes the span falls short of the window by at most about 2.2 s (1.1 scrape intervals each side)
        w = int(time.time() - t0) + 3
        est = prom.query('sum(increase(fstrace_requests_total{kind="read",mount="%s"}[%ds]))' % (mnt, w))
        assert 512 <= est <= 512 * w / (w - 2.2) + 1e-6, est
        # p99 from the log2 buckets: Prometheus interpolates inside the bucket holding the true p99, so it is
        # within a factor 2 of it; fio's p99 is the same reads timed from user space, a little longer
        p99 = prom.query('histogram_quantile(0.99, sum by (le) (increase(fstrace_request_duration_seconds_bucket'
                         '{kind="read",mount="%s"}[%ds])))' % (mnt, w))
        fio_p99 = job["clat_ns"]["percentile"]["99.000000"] / 1e9
        assert fio_p99 / 2.2 <= p99 <= fio_p99 * 2, (p99, fio_p99)
        # the I/O-wait rate, integrated over the window, is the I/O wait counted (same extrapolation bound)
        rate = prom.query('sum(rate(fstrace_request_time_seconds_total{part="io_wait",kind="read",mount="%s"}[%ds]))'
                          % (mnt, w))
        assert io_wait * 0.999 <= rate * w <= io_wait * w / (w - 2.2) * 1.001, (rate * w, io_wait)
        # docs/serve.md's queries: in a ratio of two rates over the same samples the extrapolation cancels, so the
        # I/O-wait share and the mean block request size are those of the raw counters
        share = prom.query('sum by (mount) (rate(fstrace_request_time_seconds_total{kind="read",part="io_wait",'
                           'mount="%s"}[%ds])) / sum by (mount) (rate(fstrace_request_duration_seconds_sum{kind="read",'
                           'mount="%s"}[%ds]))' % (mnt, w, mnt, w))
        assert abs(share - io_wait / wall) < 1e-6, (share, io_wait / wall)
        mean = prom.query('sum by (device) (rate(fstrace_block_request_bytes_sum{device="%s"}[%ds])) / sum by (device) '
                          '(rate(fstrace_block_request_bytes_count{device="%s"}[%ds]))' % (loop, w, loop, w))
        assert abs(mean - (ds1[1] - ds0[1]) / (ds1[0] - ds0[0])) < 1e-6 * mean, mean
        # docs/serve.md's own three queries, as written there (over this window): the same answers
        readme = readme_promql()
        assert len(readme) == 3, readme
        got = [prom.query_all(q.replace("[5m]", "[%ds]" % w)) for q in readme]
        assert abs(got[0][frozenset({("fs", "erofs")})] - p99) < 1e-9 * p99, got[0]
        assert abs(got[1][frozenset({("mount", mnt)})] - share) < 1e-9, got[1]
        assert abs(got[2][frozenset({("device", loop)})] - mean) < 1e-9 * mean, got[2]
        assert t1 - t0 < w
    finally:
        if prom:
            prom.close()
        log = stop(p, rest)
    assert p.returncode == 0, log


@pytest.mark.bpf
def test_serve_survives_bad_clients_and_stops_clean(mounted_erofs):
    mnt, _ = mounted_erofs
    p, port, rest = start_serve("--mount", mnt)
    collector = collector_under(p.pid, timeout=10)
    objs = bpf_objects_of(collector)
    assert any(kind == "link" for kind, _ in objs), objs
    private = [a for a in open("/proc/%d/cmdline" % collector).read().split("\0") if a.endswith("metrics.prom")]
    # rewritten at each scrape: kept in memory where the machine has a memory filesystem at one of the roots
    root = exposition_root()
    assert private and os.path.dirname(os.path.dirname(private[0])) == (root or tempfile.gettempdir()), private
    if any(mount_of(r)[1] in MEMORY_FS for r in EXPOSITION_ROOTS if os.path.isdir(r)):
        assert mount_of(private[0])[1] in MEMORY_FS, mount_of(private[0])
    try:
        # garbage request line, a path that is not served, HTTP/0.9 nonsense
        for junk in (b"\x00\xff garbage\r\n\r\n", b"GET /other HTTP/1.0\r\n\r\n", b"BREW /metrics HTCPCP/1.0\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(junk)
                s.recv(4096)
        with pytest.raises(urllib.error.HTTPError) as e:
            scrape(port, "/")
        assert e.value.code == 404
        # a slow client holding half a request does not block a scraper
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        slow.sendall(b"GET /metr")
        assert "fstrace_requests_total" in scrape(port)
        # a client that resets the connection mid-response
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            s.recv(100)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        # 100 scrapers at once: every one gets the whole exposition
        results = []

        def one():
            try:
                results.append(parse(scrape(port)).get(("fstrace_start_time_seconds", frozenset())))
            except Exception as e:  # noqa: BLE001 (reported below)
                results.append(e)
        threads = [threading.Thread(target=one) for _ in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(results) == 100 and all(isinstance(r, float) for r in results), results
        slow.close()
        # memory stays flat: a few hundred more scrapes grow neither process
        rss0 = rss(p.pid), rss(collector)
        for _ in range(300):
            scrape(port)
        rss1 = rss(p.pid), rss(collector)
        assert rss1[0] - rss0[0] < 1 << 20 and rss1[1] - rss0[1] < 256 << 10, (rss0, rss1)
        # SIGHUP: the exposition is rewritten at once and serving goes on
        p.send_signal(signal.SIGHUP)
        assert "fstrace_requests_total" in fresh_scrape(port)
        assert p.poll() is None
    finally:
        log = stop(p, rest)
    assert p.returncode == 0, log
    assert bpf_objects_left(objs) == set()
    assert private and not os.path.exists(os.path.dirname(private[0]))


@pytest.mark.bpf
def test_a_scrape_gets_through_while_300_connections_are_held(mounted_erofs):  # noqa: F811
    """300 connections more than serve's bound of them, each sending its request a header line a second (a
    slow client that never stalls long enough for a read to time out): a scrape is still answered, and every held
    connection is closed by serve within its time for a request."""
    from cli import serve
    mnt, _ = mounted_erofs
    p, port, rest = start_serve("--mount", mnt)
    held, done = [], threading.Event()
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            held.append(s)

        def trickle():
            while not done.wait(1.0):
                for s in held:
                    with contextlib.suppress(OSError):
                        s.sendall(b"X-Slow: 1\r\n")
        threading.Thread(target=trickle, daemon=True).start()
        assert "fstrace_requests_total" in scrape(port)
        # a held connection ends in serve's own time, however it trickles: an EOF or a reset, never a reply
        deadline = time.monotonic() + 6 * serve.CONNECTION_TIMEOUT_S
        for s in held:
            s.settimeout(max(deadline - time.monotonic(), 0.1))
            try:
                assert s.recv(4096) == b""
            except ConnectionResetError:
                pass
        done.set()
        assert "fstrace_requests_total" in scrape(port)
    finally:
        done.set()
        for s in held:
            s.close()
        log = stop(p, rest)
    assert p.returncode == 0, log


def collector_files(collector):
    """The private directory of serve's collector (where its exposition goes), from its command line."""
    argv = open("/proc/%d/cmdline" % collector).read().split("\0")
    return os.path.dirname(argv[argv.index("--openmetrics") + 1])


def gone(pid, timeout=30.0):
    """pid has exited (and been reaped, or is a zombie) within timeout seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.bpf
def test_sigkill_of_serve_leaves_nothing(mounted_erofs):  # noqa: F811
    """serve SIGKILLed: its collector ends with it (its programs detached), and the next fstrace start removes
    its directory, one line, naming it."""
    mnt, _ = mounted_erofs
    p, port, rest = start_serve("--mount", mnt)
    collector = collector_under(p.pid, timeout=10)
    objs = bpf_objects_of(collector)
    private = collector_files(collector)
    assert any(kind == "link" for kind, _ in objs) and os.path.isdir(private), objs
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    try:
        assert gone(collector), "the collector outlived serve"
    finally:
        if not gone(collector, 0):
            os.kill(collector, signal.SIGKILL)
    assert bpf_objects_left(objs) == set()
    q = subprocess.run([FSTRACE, "attach", "--duration", "-1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    lines = [l for l in q.stderr.splitlines() if "leftover of dead run %d" % p.pid in l]
    assert lines == ["fstrace: leftover of dead run %d: removed %s" % (p.pid, private)], q.stderr
    assert not os.path.exists(private)


@pytest.mark.bpf
def test_collector_killed_under_serve_is_one_line(mounted_erofs):  # noqa: F811
    mnt, _ = mounted_erofs
    p, port, rest = start_serve("--mount", mnt)
    collector = collector_under(p.pid, timeout=10)
    private = collector_files(collector)
    os.kill(collector, signal.SIGKILL)
    p.wait(timeout=60)
    time.sleep(0.1)  # the reader thread takes the last lines
    lines = [l for l in "".join(rest).splitlines() if l.startswith("fstrace")]
    assert p.returncode == 1 and lines == ["fstrace: error: the collector was killed by SIGKILL"], rest
    assert not os.path.exists(private)
    assert not os.path.exists("/run/fstrace/run-%d.json" % p.pid)


@pytest.mark.bpf
def test_collector_that_cannot_load_is_one_line_saying_it_exited():
    """Without CAP_PERFMON (serve as root's uid with CAP_BPF alone, as a unit's CapabilityBoundingSet may leave it)
    the collector cannot load its programs and exits 2 at once: serve says that, under the collector's own line,
    not that it hung."""
    p = subprocess.run(["setpriv", "--bounding-set=-all,+bpf", "--inh-caps=-all", FSTRACE, "serve", "--listen",
                        "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    said = p.stderr.splitlines()
    assert p.returncode == 1 and p.stdout == ""
    assert re.fullmatch(r"fstrace-collect: loading \w+: Operation not permitted", said[-2]), p.stderr
    assert said[-1] == "fstrace: error: the collector did not start: it exited 2; see its message above", p.stderr


@pytest.mark.unit
def test_a_collector_that_exits_before_ready_is_said_to_have_exited():
    """Its end of the ready pipe closes as it exits, a moment before it can be reaped: serve must not take that
    moment for a hang (a stand-in closes the pipe, then exits 2 a little later)."""
    import sys
    from cli import serve as S
    from common.system import FstraceError
    script = "import os, sys, time; os.close(int(sys.argv[-1])); time.sleep(0.3); sys.exit(2)"  # the fd: last
    settings = S.Settings(listen="127.0.0.1:0", update_interval=1.0)
    with pytest.raises(FstraceError) as e:
        S.start_collector([sys.executable, "-c", script], "/nonexistent/x.prom", "/nonexistent/x.om", settings,
                          threading.Event())
    assert str(e.value) == "the collector did not start: it exited 2; see its message above"


STAND_IN = """import os, signal, sys, time
path, answer = sys.argv[1], sys.argv[2] == "answer"
def rewrite(*a):
    with open(path + ".tmp", "w") as f:
        f.write("rewritten %f\\n" % time.time())
    os.rename(path + ".tmp", path)
signal.signal(signal.SIGHUP, rewrite if answer else signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def stand_in_collector(path, answer):
    """A process that rewrites path (a new file renamed over it) on SIGHUP, or ignores SIGHUP."""
    import sys
    p = subprocess.Popen([sys.executable, "-c", STAND_IN, path, "answer" if answer else "ignore"],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    return p


@pytest.mark.unit
def test_a_scrape_has_a_stale_exposition_rewritten_and_a_silent_collector_costs_one_wait(tmp_path):
    """Server.fresh: a file older than --update-interval (or dated in the future: a clock stepped back) is
    rewritten before it is served; a young one is served as it is; a collector that does not answer costs the
    first scrape REFRESH_TIMEOUT_S and one message, and the scrapes after it nothing, until REFRESH_RETRY_S."""
    from cli import serve as S
    path = str(tmp_path / "metrics.prom")
    with open(path, "w") as f:
        f.write("old\n")
    said = []
    server = S.Server(("127.0.0.1", 0), path, path + ".om", 30, said.append)
    procs = []
    try:
        server.use_collector(stand_in_collector(path, answer=True))
        procs.append(server.collector)
        old = time.time() - 3600
        os.utime(path, (old, old))
        server.fresh(path)
        assert open(path).read().startswith("rewritten")
        young = stat_id(path)
        server.fresh(path)
        assert stat_id(path) == young  # not rewritten: younger than 30 s
        future = time.time() + 3600
        os.utime(path, (future, future))
        server.fresh(path)
        assert stat_id(path) != young and os.stat(path).st_mtime < future
        assert said == []

        server.use_collector(stand_in_collector(path, answer=False))
        procs.append(server.collector)
        os.utime(path, (old, old))
        t = time.monotonic()
        server.fresh(path)
        assert time.monotonic() - t >= S.REFRESH_TIMEOUT_S
        t = time.monotonic()
        for _ in range(5):
            server.fresh(path)
        assert time.monotonic() - t < 1
        assert len(said) == 1 and "did not rewrite" in said[0], said
    finally:
        server.server_close()
        for p in procs:
            p.kill()
            p.wait()


def small_erofs(tmp_path):
    """(an erofs image holding f, 8 KiB; an empty mount point) in tmp_path."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x" * 8192)
    img, mnt = str(tmp_path / "img.erofs"), str(tmp_path / "mnt")
    os.mkdir(mnt)
    subprocess.run(["mkfs.erofs", img, str(src)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return img, mnt


def two_images_on_one_loop(tmp_path):
    """(image A, its mount point, image B, its mount point, a read-only loop device set up with A), small_erofs's
    in tmp_path/a and tmp_path/b: for tests that set the device up again with B under the same number."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    img_a, mnt_a = small_erofs(tmp_path / "a")
    img_b, mnt_b = small_erofs(tmp_path / "b")
    loop = subprocess.run(["losetup", "-f", "--show", "-r", img_a], check=True, stdout=subprocess.PIPE,
                          text=True).stdout.strip()
    return img_a, mnt_a, img_b, mnt_b, loop


def read_small(mnt, n):
    """n reads of small_erofs's file f, mounted at mnt (its first 4 KiB each time)."""
    fd = os.open(os.path.join(mnt, "f"), os.O_RDONLY)
    try:
        for _ in range(n):
            assert len(os.pread(fd, 4096, 0)) == 4096
    finally:
        os.close(fd)


@pytest.mark.bpf
def test_a_mount_that_goes_away_and_comes_back_elsewhere(tmp_path):
    """Unmounted: reported, its counters stay, serving goes on.  Mounted again there from another loop device:
    serve follows it (filters resolved again) and counts its reads under the new device."""
    img, mnt = small_erofs(tmp_path)
    loops, mounted = [], False

    def mount():
        loops.append(subprocess.run(["losetup", "-f", "--show", "-r", img], check=True, stdout=subprocess.PIPE,
                                    text=True).stdout.strip())
        subprocess.run(["mount", "-t", "erofs", "-o", "ro", loops[-1], mnt], check=True)
        rdev = os.stat(loops[-1]).st_rdev
        return "%d:%d" % (os.major(rdev), os.minor(rdev))

    def read_file():
        drop_caches()
        with open(os.path.join(mnt, "f"), "rb") as f:
            assert len(f.read()) == 8192
    try:
        first = mount()
        mounted = True
        p, port, rest = start_serve("--mount", mnt)
        try:
            read_file()
            reads = value(parse(fresh_scrape(port)), "fstrace_requests_total", kind="read", mount=mnt)
            assert reads >= 1
            subprocess.run(["umount", mnt], check=True)
            mounted = False
            time.sleep(2.5)  # serve looks at the mounts every second
            after = parse(fresh_scrape(port))
            assert value(after, "fstrace_filesystem_mounted", mount=mnt) == 0
            assert value(after, "fstrace_requests_total", kind="read", mount=mnt) == reads  # counters stay
            assert p.poll() is None and "%s is no longer mounted" % mnt in "".join(rest)

            second = mount()
            mounted = True
            assert second != first
            deadline = time.time() + 60
            while "following it" not in "".join(rest) and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(1)
            samples = parse(fresh_scrape(port))
            while value(samples, "fstrace_filesystem_mounted", mount=mnt, device=second) != 1 and \
                    time.time() < deadline:
                samples = parse(fresh_scrape(port))
            read_file()
            samples = parse(fresh_scrape(port))
            assert value(samples, "fstrace_requests_total", kind="read", mount=mnt, device=second) >= 1
            assert value(samples, "fstrace_filesystem_mounted", mount=mnt, device=second) == 1
        finally:
            log = stop(p, rest)
        assert p.returncode == 0, log
        assert "mounted again from another device (%s): following it" % second in log, log
    finally:
        if mounted:
            subprocess.run(["umount", mnt], check=True)
        for dev in loops:
            subprocess.run(["losetup", "-d", dev], check=True)


def stat_id(path):
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns


@pytest.mark.bpf
def test_a_private_exposition_is_written_only_when_scraped(tmp_path, mounted_erofs):
    """serve's private exposition: not rewritten while no one scrapes, a mount anywhere included (the collector
    would otherwise write both files every --update-interval for nobody); a scrape after reads gets them counted
    at once, its own rewrite, in either format."""
    mnt, _ = mounted_erofs
    p, port, rest = start_serve("--mount", mnt)  # --update-interval 0.2
    collector = collector_under(p.pid, timeout=10)
    argv = open("/proc/%d/cmdline" % collector).read().split("\0")
    prom = [a for a in argv if a.endswith("metrics.prom")][0]
    om = [a for a in argv if a.endswith("metrics.om")][0]
    other = tmp_path / "other"
    other.mkdir()
    mounted = False

    def unscraped(seconds):
        """Whether both files stayed as they were over seconds with no scrape."""
        ids = stat_id(prom), stat_id(om)
        time.sleep(seconds)
        return (stat_id(prom), stat_id(om)) == ids
    try:
        om_id = stat_id(om)
        before = parse(fresh_scrape(port))
        deadline = time.time() + 10  # the OpenMetrics file is renamed a moment after the other
        while stat_id(om) == om_id and time.time() < deadline:
            time.sleep(0.01)
        assert unscraped(2), "rewritten with no scrape (ten intervals)"
        ids = stat_id(prom), stat_id(om)
        fd = os.open(os.path.join(mnt, "big.bin"), os.O_RDONLY)
        try:
            for i in range(7):
                assert len(os.pread(fd, 4096, i * 4096)) == 4096
        finally:
            os.close(fd)
        after = parse(scrape(port))  # the first scrape, no waiting: the rewrite is its own
        assert stat_id(prom) != ids[0]
        reads = value(after, "fstrace_requests_total", kind="read", mount=mnt) - \
            value(before, "fstrace_requests_total", kind="read", mount=mnt)
        assert reads == 7, reads
        time.sleep(0.3)
        om_ids = stat_id(om)
        assert "fstrace_requests_total" in scrape_om(port) and stat_id(om) != om_ids
        time.sleep(0.3)  # the OpenMetrics file renamed after the other
        assert unscraped(1)
        # a mount changes the labels' view, not the files: still no rewrite, and the next scrape is the first
        ids = stat_id(prom)
        subprocess.run(["mount", "-t", "tmpfs", "none", str(other)], check=True)
        mounted = True
        time.sleep(1)
        assert stat_id(prom) == ids, "a mount brought a rewrite"
        assert p.poll() is None
    finally:
        if mounted:
            subprocess.run(["umount", str(other)], check=True)
        log = stop(p, rest)
    assert p.returncode == 0, log


@pytest.mark.bpf
def test_textfile_is_what_is_served(tmp_path, mounted_erofs):
    """--textfile: the exposition lives in the user's file (node_exporter's textfile directory), the one served;
    SIGHUP brings it back at once when it was deleted."""
    mnt, _ = mounted_erofs
    out = tmp_path / "fstrace.prom"
    p, port, rest = start_serve("--mount", mnt, "--textfile", str(out), "--update-interval", "1000")
    try:
        assert scrape(port) == out.read_text()
        # what Prometheus gets is the same samples in OpenMetrics text, plus each counter's and histogram's
        # _created (the collector's start), under families named by OpenMetrics's rules
        classic, om = out.read_text(), scrape_om(port)
        assert scrape(port) == classic  # not rewritten meanwhile (interval 1000 s): both are one exposition
        assert subprocess.run(["promtool", "check", "metrics"], input=classic, text=True).returncode == 0
        start = value(parse(classic), "fstrace_start_time_seconds")
        om_samples = normalized(parse(om))
        created = {k: v for k, v in om_samples.items() if k[0].endswith("_created")}
        assert created and set(created.values()) == {start}
        assert {k: v for k, v in om_samples.items() if k not in created} == normalized(parse(classic))
        fams = {f.name: f for f in text_string_to_metric_families(om)}
        assert fams["fstrace_requests"].type == "counter" and fams["fstrace_probe"].type == "info"
        assert fams["fstrace_request_duration_seconds"].unit == "seconds"
        assert fams["fstrace_request_bytes"].unit == "bytes" and fams["fstrace_block_request_bytes"].unit == "bytes"
        assert "fstrace_losses" in fams and "fstrace_block_requests_unseen" in fams
        # anything else than a scraper asking for OpenMetrics gets the classic format
        for accept in ("*/*", "text/plain", "application/openmetrics-text;q=0.1,text/plain;q=0.5"):
            req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, headers={"Accept": accept})
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                assert r.read().decode() == classic
        out.unlink()
        p.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while not out.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert scrape(port) == out.read_text()
        assert value(parse(out.read_text()), "fstrace_filesystem_mounted", mount=mnt) == 1
    finally:
        log = stop(p, rest)
    assert p.returncode == 0, log
    assert sorted(os.listdir(tmp_path)) == ["fstrace.prom"]  # kept after stop, no temporary file


@pytest.mark.bpf
def test_pid_filter_serves_final_counters_once_the_processes_exit(tmp_path):
    """--pid: the collector ends with the traced processes; serve keeps their last counters until stopped."""
    f = tmp_path / "data"
    f.write_bytes(b"y" * 65536)
    reader = subprocess.Popen(["sh", "-c", "sleep 1.5; cat %s > /dev/null; sleep 0.5" % f])
    p, port, rest = start_serve("--pid", str(reader.pid))
    try:
        reader.wait(timeout=30)
        deadline = time.time() + 30
        while "traced processes have exited" not in "".join(rest) and time.time() < deadline:
            time.sleep(0.1)
        assert "traced processes have exited" in "".join(rest)
        st = os.stat(str(f)).st_dev
        reads = parse(scrape(port))
        assert value(reads, "fstrace_request_bytes_total", kind="read",
                     device="%d:%d" % (os.major(st), os.minor(st))) >= 65536
        assert p.poll() is None
    finally:
        log = stop(p, rest)
    assert p.returncode == 0, log


@pytest.mark.bpf
def test_per_comm_counts_each_task_name_exactly(mounted_erofs):
    """--per-comm: the reads of two task names on the mount, each counted under its name."""
    mnt, _ = mounted_erofs
    p, port, rest = start_serve("--mount", mnt, "--per-comm")
    target = os.path.join(mnt, "small.txt")
    try:
        for name, n in (("fst-reader-a", 7), ("fst-reader-b", 5)):
            subprocess.run(["python3", "-c", "import ctypes, os, sys; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(),"
                            " 0, 0, 0); fd = os.open(sys.argv[2], os.O_RDONLY); "
                            "[os.pread(fd, 4096, 4096 * i) for i in range(int(sys.argv[3]))]", name, target, str(n)],
                           check=True)
        samples = parse(fresh_scrape(port))
        for name, n in (("fst-reader-a", 7), ("fst-reader-b", 5)):
            assert value(samples, "fstrace_comm_requests_total", comm=name, kind="read", mount=mnt) == n
            size = os.path.getsize(target)  # preads past its end return less, then 0
            assert value(samples, "fstrace_comm_request_bytes_total", comm=name, kind="read", mount=mnt) == \
                sum(max(0, min(4096, size - 4096 * i)) for i in range(n))
        # the per-name counts add up to the filesystem's
        assert value(samples, "fstrace_comm_requests_total", kind="read", mount=mnt) == \
            value(samples, "fstrace_requests_total", kind="read", mount=mnt)
        assert value(samples, "fstrace_comm_requests_total", comm="") == 0  # far from the 64 series
        # 100 more names: the map fills at 64 series, every later request is counted under comm="" alone
        subprocess.run(["python3", "-c", "import ctypes, os, sys; libc = ctypes.CDLL(None); "
                        "fd = os.open(sys.argv[1], os.O_RDONLY)\nfor i in range(100):\n"
                        "    libc.prctl(15, b'fst-many-%d' % i, 0, 0, 0); os.pread(fd, 100, 0)", target], check=True)
        samples = parse(fresh_scrape(port))
        named = [ls for (n, ls) in samples if n == "fstrace_comm_requests_total" and dict(ls)["comm"]]
        assert len(named) == 64
        other = value(samples, "fstrace_comm_requests_total", comm="")
        assert other > 0
        assert sum(samples[("fstrace_comm_requests_total", ls)] for ls in named) + other == \
            value(samples, "fstrace_requests_total", mount=mnt)
    finally:
        log = stop(p, rest)
    assert p.returncode == 0, log


@pytest.mark.bpf
def test_collector_alone_writes_the_textfile(tmp_path):
    """As on a box without Python (node_exporter's textfile collector): the collector's file, SIGHUP, SIGTERM."""
    out = tmp_path / "fstrace.prom"
    p = subprocess.Popen([COLLECTOR, "--records", "none", "--no-io-records", "--sample-hz", "0", "--exposition",
                          str(out), "--exposition-interval", "1000", "--comm", "fstrace-nobody"],
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not out.exists() and time.time() < deadline:
            time.sleep(0.05)
        first = value(parse(out.read_text()), "fstrace_last_update_time_seconds")
        p.send_signal(signal.SIGHUP)  # long before the next interval: rewritten because of the signal
        deadline = time.time() + 10
        while value(parse(out.read_text()), "fstrace_last_update_time_seconds") == first and time.time() < deadline:
            time.sleep(0.05)
        assert value(parse(out.read_text()), "fstrace_last_update_time_seconds") > first
        assert p.poll() is None
    finally:
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=60)[1]
    assert p.returncode == 0, err
    assert subprocess.run(["promtool", "check", "metrics"], input=out.read_text(), text=True).returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["fstrace.prom"]  # no temporary file left


@pytest.mark.bpf
@pytest.mark.parametrize("args,says", [
    (["--listen", "127.0.0.1"], "--listen wants ADDR:PORT"),
    (["--listen", "127.0.0.1:99999"], "--listen wants ADDR:PORT"),
    (["--listen", "192.0.2.1:9464"], "--listen 192.0.2.1:9464:"),  # not an address of this machine
    (["--update-interval", "0"], "--update-interval wants seconds above 0"),
    (["--textfile", "/nonexistent/dir/x.prom"], "--textfile /nonexistent/dir/x.prom: no such directory"),
    (["--mount", "/nonexistent/mount"], "--mount /nonexistent/mount: no such path"),
])
def test_bad_serve_arguments_are_one_line(args, says):
    where = exposition_root() or tempfile.gettempdir()
    before = {d for d in os.listdir(where) if d.startswith("fstrace-serve-")}
    p = subprocess.run([FSTRACE, "serve"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    lines = [l for l in p.stderr.splitlines() if l.startswith("fstrace")]
    assert p.returncode != 0 and len(lines) == 1 and says in lines[0], p.stderr
    assert {d for d in os.listdir(where) if d.startswith("fstrace-serve-")} == before


@pytest.mark.bpf
def test_per_comm_needs_records_none():
    p = subprocess.run([COLLECTOR, "--exposition", "/tmp/x.prom", "--per-comm"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2 and p.stderr.startswith("fstrace-collect: --per-comm needs --records none")
    assert not os.path.exists("/tmp/x.prom")


@pytest.mark.bpf
def test_bad_exposition_interval_is_one_line():
    p = subprocess.run([COLLECTOR, "--exposition", "/tmp/x.prom", "--exposition-interval", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2
    assert p.stderr.strip() == "fstrace-collect: --exposition-interval wants a number of seconds above 0 " \
                               "(at most 1e+08), got '0'"


@pytest.mark.bpf
def test_serve_streams_no_per_request_records(tmp_path, mounted_erofs):
    """serve's collector counts every request in the kernel and streams none of the per-request records
    (requests, block requests, erofs events, work items), which the exporter never reads; the counted bytes
    are the bytes the reader got."""
    from analysis import results
    from cli.serve import COLLECTOR_OPTIONS
    mnt, _ = mounted_erofs
    drop_caches()  # cold: erofs maps extents and its decompression work runs, so there is something to stream
    fst = str(tmp_path / "r.fst")
    files = [os.path.join(mnt, "big.bin"), os.path.join(mnt, "small.txt")]
    subprocess.run([COLLECTOR, "-o", fst] + COLLECTOR_OPTIONS + ["--exposition", str(tmp_path / "x.prom"),
                    "--", "cat"] + files, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    res = results.load(fst)
    assert res.header["request_records"]["mode"] == "none"
    for kind in ("req", "io", "erofs", "work"):
        assert len(res[kind]) == 0, kind
    assert sum(res.header["drops"].values()) == 0
    st = os.stat(mnt)
    read = int(next(k for k, v in res.header["enums"]["req_kind"].items() if v == "read"))
    rows = [r for r in res.header["kernel_aggregates"]["requests_counted"]
            if r["kind"] == read and r["sdev"] == kdev(os.major(st.st_dev), os.minor(st.st_dev))]
    assert sum(r["bytes"] for r in rows) == sum(os.path.getsize(f) for f in files)


@pytest.mark.unit
@pytest.mark.parametrize("accept,om", [
    (PROMETHEUS_ACCEPT, True),
    ("application/openmetrics-text; version=1.0.0; charset=utf-8", True),
    ("application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5", True),
    (None, False), ("", False), ("*/*", False), ("text/plain", False), ("text/*;q=0.9,*/*;q=0.1", False),
    ("application/openmetrics-text;q=0.2,text/plain;q=0.5", False),
    ("application/openmetrics-text;q=0", False), ("application/openmetrics-text;q=zero,text/plain", False),
    ("application/json", False),
])
def test_openmetrics_only_for_scrapers_that_ask_for_it(accept, om):
    assert wants_openmetrics(accept) is om


def bpf_map_id(pid, name):
    """The id of the BPF map `name` process pid holds."""
    for kind, mid in bpf_objects_of(pid):
        if kind == "map":
            info = json.loads(subprocess.run(["bpftool", "-j", "map", "show", "id", str(mid)], check=True,
                                             stdout=subprocess.PIPE, text=True).stdout)
            if info.get("name") == name:
                return mid
    raise AssertionError("process %d holds no map %s" % (pid, name))


def hexbytes(b):
    return ["%02x" % x for x in b]


def map_lookup(mid, key):
    out = json.loads(subprocess.run(["bpftool", "-j", "map", "lookup", "id", str(mid), "key", "hex"] + hexbytes(key),
                                    check=True, stdout=subprocess.PIPE, text=True).stdout)
    return bytes(int(x, 16) for x in out["value"])


def map_update(mid, key, val):
    subprocess.run(["bpftool", "map", "update", "id", str(mid), "key", "hex"] + hexbytes(key) + ["value", "hex"] +
                   hexbytes(val), check=True)


@pytest.mark.bpf
def test_block_requests_unseen_and_beyond_diskstats_never_negative(mounted_erofs):
    """fstrace_block_requests_unseen_total: what /proc/diskstats counted since the start that fstrace did not see.
    To have some, the collector's own count of the loop device's reads is taken away in its map (as if it had
    missed them all); then set above the kernel's (the excess goes to fstrace_block_requests_beyond_diskstats_total,
    the unseen counter neither goes negative nor shrinks)."""
    mnt, dev = mounted_erofs
    rdev = os.stat(dev).st_rdev
    loop = "%d:%d" % (os.major(rdev), os.minor(rdev))
    p, port, rest = start_serve("--mount", mnt)
    collector = collector_under(p.pid, timeout=10)
    fields = dict(device=loop, op="read")
    try:
        drop_caches()
        with open(os.path.join(mnt, "big.bin"), "rb") as f:
            f.read(1 << 20)
        time.sleep(0.5)
        s = parse(fresh_scrape(port))
        seen = value(s, "fstrace_block_requests_total", **fields)
        assert seen > 0
        assert value(s, "fstrace_block_requests_unseen_total", **fields) == 0
        assert value(s, "fstrace_block_requests_beyond_diskstats_total", **fields) == 0

        # the device's entry in dev_io (device i of the collector's --dev options is entry i: records.h struct
        # fst_dev_cfg io_slot), whose read sizes histogram (after struct fst_align's 6 counters) counts the
        # requests fstrace saw
        slot = traced_devices(collector).index((os.major(rdev), os.minor(rdev))).to_bytes(4, "little")
        dev_io = bpf_map_id(collector, "dev_io")
        io = bytearray(map_lookup(dev_io, slot))
        hist = slice(48, 48 + 8 * 40)
        assert sum(int.from_bytes(io[i:i + 8], "little") for i in range(hist.start, hist.stop, 8)) == seen
        io[hist] = bytes(8 * 40)
        map_update(dev_io, slot, io)
        s = parse(fresh_scrape(port))
        assert value(s, "fstrace_block_requests_unseen_total", **fields) == seen
        assert value(s, "fstrace_block_requests_beyond_diskstats_total", **fields) == 0

        io[hist.start:hist.start + 8] = int(seen + 1000).to_bytes(8, "little")
        map_update(dev_io, slot, io)
        s = parse(fresh_scrape(port, om=True))
        assert value(s, "fstrace_block_requests_unseen_total", **fields) == seen  # a counter: it does not shrink
        assert value(s, "fstrace_block_requests_beyond_diskstats_total", **fields) == 1000
    finally:
        log = stop(p, rest)
    assert p.returncode == 0, log


@pytest.mark.bpf
def test_a_mount_that_goes_away_and_comes_back_on_the_same_device(tmp_path):
    """Unmounted, then mounted again at the same path from the same loop device: the same collector counts on
    (the filters still match), the counters go on from where they were, under the same series."""
    img, mnt = small_erofs(tmp_path)
    loop = subprocess.run(["losetup", "-f", "--show", "-r", img], check=True, stdout=subprocess.PIPE,
                          text=True).stdout.strip()
    rdev = os.stat(loop).st_rdev
    device = "%d:%d" % (os.major(rdev), os.minor(rdev))
    mounted = False
    try:
        subprocess.run(["mount", "-t", "erofs", "-o", "ro", loop, mnt], check=True)
        mounted = True
        p, port, rest = start_serve("--mount", mnt)
        collector = collector_under(p.pid, timeout=10)
        try:
            read_small(mnt, 3)
            reads = value(parse(fresh_scrape(port)), "fstrace_requests_total", kind="read", mount=mnt)
            assert reads >= 3
            subprocess.run(["umount", mnt], check=True)
            mounted = False
            deadline = time.time() + 30
            while "%s is no longer mounted" % mnt not in "".join(rest) and time.time() < deadline:
                time.sleep(0.1)
            gone = parse(fresh_scrape(port))
            assert value(gone, "fstrace_filesystem_mounted", mount=mnt, device=device) == 0
            assert value(gone, "fstrace_requests_total", kind="read", mount=mnt) == reads

            subprocess.run(["mount", "-t", "erofs", "-o", "ro", loop, mnt], check=True)
            mounted = True
            while "mounted again from the same device" not in "".join(rest) and time.time() < deadline:
                time.sleep(0.1)
            samples = parse(fresh_scrape(port))
            while value(samples, "fstrace_filesystem_mounted", mount=mnt, device=device) != 1 and \
                    time.time() < deadline:
                samples = parse(fresh_scrape(port))
            read_small(mnt, 5)
            samples = parse(fresh_scrape(port, om=True))
            # counted on by the same collector, from where the counter was, in the one series of the mount
            assert value(samples, "fstrace_requests_total", kind="read", mount=mnt, device=device) >= reads + 5
            assert [dict(ls)["device"] for (n, ls) in samples
                    if n == "fstrace_filesystem_mounted" and dict(ls)["mount"] == mnt] == [device]
            assert value(samples, "fstrace_filesystem_mounted", mount=mnt, device=device) == 1
            assert collector_under(p.pid, timeout=10) == collector
        finally:
            log = stop(p, rest)
        assert p.returncode == 0, log
        assert "%s is mounted again from the same device; counting on" % mnt in log, log
        assert "following it" not in log, log
    finally:
        if mounted:
            subprocess.run(["umount", mnt], check=True)
        subprocess.run(["losetup", "-d", loop], check=True)


@pytest.mark.bpf
@pytest.mark.parametrize("filtered", [True, False], ids=["mount-filter", "every-filesystem"])
def test_a_device_number_reused_by_another_filesystem_keeps_the_old_labels_whole(tmp_path, filtered):
    """Image A on a loop device, read N times; unmounted, the loop device detached and set up again (the same
    device number) with image B, mounted elsewhere and read M times: A's series keep exactly what they held,
    with fstrace_filesystem_mounted 0, and B's reads are B's: not exposed under --mount A (B was not chosen),
    under B's own labels, M of them, when every filesystem is traced.  Under --mount A (with --per-comm: the task
    names' series too), A set up again there afterwards is counted on from where it was."""
    img_a, mnt_a, img_b, mnt_b, loop = two_images_on_one_loop(tmp_path)
    rdev = os.stat(loop).st_rdev
    device = "%d:%d" % (os.major(rdev), os.minor(rdev))
    attached, mounted = True, []

    def of(samples, mnt):
        return {k: v for k, v in samples.items() if ("mount", mnt) in k[1]}
    try:
        subprocess.run(["mount", "-t", "erofs", "-o", "ro", loop, mnt_a], check=True)
        mounted.append(mnt_a)
        p, port, rest = start_serve(*(["--mount", mnt_a, "--per-comm"] if filtered else []))
        try:
            read_small(mnt_a, 3)
            deadline = time.time() + 30
            # labelled as the collector finds it mounted when it first writes the device's counts
            while value(parse(fresh_scrape(port)), "fstrace_requests_total", kind="read", mount=mnt_a) != 3 and \
                    time.time() < deadline:
                pass
            subprocess.run(["umount", mnt_a], check=True)
            mounted.remove(mnt_a)
            gone = parse(fresh_scrape(port))
            while value(gone, "fstrace_filesystem_mounted", mount=mnt_a) != 0 and time.time() < deadline:
                gone = parse(fresh_scrape(port))
            assert value(gone, "fstrace_filesystem_mounted", mount=mnt_a, device=device) == 0
            assert value(gone, "fstrace_requests_total", kind="read", mount=mnt_a) == 3
            assert value(gone, "fstrace_request_bytes_total", kind="read", mount=mnt_a) == 3 * 4096

            subprocess.run(["losetup", "-d", loop], check=True)
            attached = False
            subprocess.run(["losetup", "-r", loop, img_b], check=True)
            attached = True
            assert os.stat(loop).st_rdev == rdev
            subprocess.run(["mount", "-t", "erofs", "-o", "ro", loop, mnt_b], check=True)
            mounted.append(mnt_b)
            read_small(mnt_b, 5)
            samples = parse(fresh_scrape(port))
            if not filtered:
                while value(samples, "fstrace_requests_total", kind="read", mount=mnt_b) < 5 and \
                        time.time() < deadline:
                    samples = parse(fresh_scrape(port))
            read_small(mnt_b, 2)
            samples = parse(fresh_scrape(port))
            # A's series hold what they held when it was unmounted, not one more
            assert of(gone, mnt_a) and of(samples, mnt_a) == of(gone, mnt_a)
            if filtered:
                assert of(samples, mnt_b) == {}
                assert value(gone, "fstrace_comm_requests_total", kind="read", mount=mnt_a) == 3

                subprocess.run(["umount", mnt_b], check=True)
                mounted.remove(mnt_b)
                fresh_scrape(port)  # B seen unmounted
                subprocess.run(["losetup", "-d", loop], check=True)
                attached = False
                subprocess.run(["losetup", "-r", loop, img_a], check=True)
                attached = True
                subprocess.run(["mount", "-t", "erofs", "-o", "ro", loop, mnt_a], check=True)
                mounted.append(mnt_a)
                read_small(mnt_a, 4)
                back = parse(fresh_scrape(port))
                assert value(back, "fstrace_filesystem_mounted", mount=mnt_a, device=device) == 1
                assert value(back, "fstrace_requests_total", kind="read", mount=mnt_a) == 7
                assert value(back, "fstrace_request_bytes_total", kind="read", mount=mnt_a) == 7 * 4096
                assert value(back, "fstrace_comm_requests_total", kind="read", mount=mnt_a) == 7
                assert of(back, mnt_b) == {}
            else:
                assert value(samples, "fstrace_filesystem_mounted", mount=mnt_b, device=device) == 1
                assert value(samples, "fstrace_requests_total", kind="read", mount=mnt_b, device=device) == 7
                assert value(samples, "fstrace_request_bytes_total", kind="read", mount=mnt_b) == 7 * 4096
            assert p.poll() is None
        finally:
            log = stop(p, rest)
        assert p.returncode == 0, log
    finally:
        for mnt in mounted:
            subprocess.run(["umount", mnt], check=True)
        if attached:
            subprocess.run(["losetup", "-d", loop], check=True)


@pytest.mark.bpf
def test_a_filesystem_mounted_read_and_gone_between_two_scrapes_keeps_its_labels(tmp_path):
    """Every filesystem traced, no scrape from before A's mount to after B's reads: image A on a loop device,
    read 3 times, unmounted, the device set up again with image B elsewhere and read 5 times.  The collector
    labels a device between scrapes as it would at a rewrite every interval: the first scrape after has A's 3
    under A's mount (unmounted) and B's 5 under B's, not 8 under B's."""
    img_a, mnt_a, img_b, mnt_b, loop = two_images_on_one_loop(tmp_path)
    rdev = os.stat(loop).st_rdev
    device = "%d:%d" % (os.major(rdev), os.minor(rdev))
    attached, mounted = True, []
    try:
        p, port, rest = start_serve()
        try:
            fresh_scrape(port)
            subprocess.run(["mount", "-t", "erofs", "-o", "ro", loop, mnt_a], check=True)
            mounted.append(mnt_a)
            time.sleep(1)  # the mount seen (five intervals) before A has a request: no label yet
            read_small(mnt_a, 3)
            time.sleep(1)  # labelled as mounted, with no change of the mount table to bring it
            subprocess.run(["umount", mnt_a], check=True)
            mounted.remove(mnt_a)
            time.sleep(1)  # seen unmounted
            subprocess.run(["losetup", "-d", loop], check=True)
            attached = False
            subprocess.run(["losetup", "-r", loop, img_b], check=True)
            attached = True
            assert os.stat(loop).st_rdev == rdev
            subprocess.run(["mount", "-t", "erofs", "-o", "ro", loop, mnt_b], check=True)
            mounted.append(mnt_b)
            read_small(mnt_b, 5)
            samples = parse(fresh_scrape(port))
            assert value(samples, "fstrace_requests_total", kind="read", mount=mnt_a, device=device) == 3
            assert value(samples, "fstrace_filesystem_mounted", mount=mnt_a, device=device) == 0
            assert value(samples, "fstrace_requests_total", kind="read", mount=mnt_b, device=device) == 5
            assert value(samples, "fstrace_filesystem_mounted", mount=mnt_b, device=device) == 1
            assert p.poll() is None
        finally:
            log = stop(p, rest)
        assert p.returncode == 0, log
    finally:
        for mnt in mounted:
            subprocess.run(["umount", mnt], check=True)
        if attached:
            subprocess.run(["losetup", "-d", loop], check=True)


@pytest.mark.bpf
def test_counters_never_shrink_and_memory_stays_flat_over_1000_scrapes(mounted_erofs):
    """Weeks of counters in small: 1000 scrapes (both formats) while cold and warm reads run; every counter,
    histogram bucket, count and sum is a non-negative integer-exact value that never goes down from one scrape to
    the next, the _created samples never move, and neither process grows.  (The counters are u64 in the kernel
    and printed as such: at a million requests a second one wraps after 584000 years.)"""
    mnt, _ = mounted_erofs
    p, port, rest = start_serve("--mount", mnt)
    collector = collector_under(p.pid, timeout=10)
    done, reads = threading.Event(), [0]

    def workload():
        fd = os.open(os.path.join(mnt, "big.bin"), os.O_RDONLY)
        size = os.fstat(fd).st_size
        try:
            while not done.is_set():
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # this file's pages only: cold reads again
                for _ in range(64):
                    os.pread(fd, 4096, random.randrange(size // 4096) * 4096)
                    reads[0] += 1
        finally:
            os.close(fd)
    counter_like = ("_total", "_bucket", "_count", "_sum", "_created")
    worker = threading.Thread(target=workload, daemon=True)
    worker.start()
    last = {False: {}, True: {}}
    try:
        for i in range(1000):
            om = i % 2 == 1
            if om and i % 100 != 1:  # the OpenMetrics parser checks one in 100; the rest are read the same way
                req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port,
                                             headers={"Accept": PROMETHEUS_ACCEPT})
                with urllib.request.urlopen(req, timeout=10) as r:
                    text = r.read().decode()
            else:
                text = scrape_om(port) if om else scrape(port)
            samples = normalized(parse(text))
            prev = last[om]
            for k, v in samples.items():
                if not k[0].endswith(counter_like):
                    continue
                # counts are whole numbers (a float there would lose counts past 2^53); times and sums need not be
                assert v == int(v) or "_seconds" in k[0] or k[0].endswith(("_sum", "_created")), (k, v)
                if k in prev:
                    assert v >= prev[k] if not k[0].endswith("_created") else v == prev[k], (i, k, prev[k], v)
            assert set(prev) <= set(samples)  # no series goes away
            last[om] = samples
            if i == 100:
                rss0 = rss(p.pid), rss(collector)
        rss1 = rss(p.pid), rss(collector)
    finally:
        done.set()
        worker.join(timeout=30)
        log = stop(p, rest)
    assert p.returncode == 0, log
    assert reads[0] > 0
    counted = value(last[False], "fstrace_requests_total", kind="read", mount=mnt)
    assert counted > 0 and value(last[False], "fstrace_block_requests_total") > 0
    assert rss1[0] - rss0[0] < 1 << 20 and rss1[1] - rss0[1] < 256 << 10, (rss0, rss1)


@pytest.mark.bpf
def test_openmetrics_needs_the_exposition(tmp_path):
    p = subprocess.run([COLLECTOR, "-o", str(tmp_path / "x.fst"), "--openmetrics", str(tmp_path / "x.om")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2 and p.stderr.strip() == \
        "fstrace-collect: --openmetrics needs --exposition (it is the same figures in another format)"
    assert os.listdir(tmp_path) == []


def _fio_and_its_other_reads(mnt, *fio_args):
    """fio's 4 KiB random reads of the mount's big.bin: (its own count of reads, its read syscalls of other files,
    as the kernel counted them: the shell's count holds its reaped child's)"""
    fio_json = os.path.join(mnt + ".fio.json")
    fio = subprocess.run(["sh", "-c", 'fio "$@" && grep syscr /proc/$$/io', "sh", "--name=x",
                          "--filename=" + os.path.join(mnt, "big.bin"), "--rw=randread", "--bs=4k", "--ioengine=psync",
                          "--readonly", "--invalidate=0", "--output-format=json", "--output=" + fio_json]
                         + list(fio_args), stdout=subprocess.PIPE, text=True, check=True)
    with open(fio_json) as f:
        text = f.read()
    os.unlink(fio_json)
    ios = json.loads(text[text.index("{"):])["jobs"][0]["read"]["total_ios"]
    return ios, int(fio.stdout.split()[-1]) - ios


def _serve_fio_on_a_budget(mnt, env=None):
    """serve at --budget 1 with windows for 0.4 of the time, tracing fio only, its file warm: start_serve's"""
    subprocess.run(["cat", os.path.join(mnt, "big.bin")], stdout=subprocess.DEVNULL, check=True)  # warm
    return start_serve("--mount", mnt, "--comm", "fio", "--budget", "1", "--window-duty", "0.4", env=env)


def _assert_estimate_holds(after, mnt, ios, other_reads):
    """fstrace_requests_estimated's reads lie inside its own bounds, and the bounds hold fio's count of reads, give
    or take its reads of other files (the windows are weighted by all its read syscalls)"""
    lo, est, hi = (value(after, "fstrace_requests_estimated", kind="read", mount=mnt, bound=b)
                   for b in ("lower95", "estimate", "upper95"))
    assert lo <= est <= hi
    assert lo - other_reads <= ios <= hi + other_reads, (lo, est, hi, ios, other_reads)


@pytest.mark.bpf
def test_serve_on_a_budget_estimates_reads_with_an_interval(mounted_erofs):  # noqa: F811
    """--budget: the request hooks only in windows; fstrace_requests_total counts what they saw, and
    fstrace_requests_estimated's 95 % bounds hold fio's own count of every read it made, give or take fio's
    reads of other files: the windows are weighted by the traced threads' read syscalls (--comm fio: with every
    task traced, another process's reads too), and fio's start reads its libraries and /proc in a burst no
    window may see, which the windows' spread cannot show."""
    mnt, _ = mounted_erofs
    p, port, rest = _serve_fio_on_a_budget(mnt)
    try:
        time.sleep(0.5)
        before = parse(fresh_scrape(port))
        assert value(before, "fstrace_requests_total", kind="read", mount=mnt) == 0
        # of fio's libraries, /proc and /sys (and the shell's)
        ios, other_reads = _fio_and_its_other_reads(mnt, "--rate_iops=5000", "--time_based", "--runtime=5s")
        assert 0 < other_reads < ios / 20, (other_reads, ios)
        time.sleep(1.0)
        after = parse(fresh_scrape(port))
        frac = value(after, "fstrace_request_window_fraction")
        assert 0.2 < frac < 0.6 and value(after, "fstrace_request_windows_total") >= 4
        # what stays attached, measured in the windows beside the budget
        assert 0 <= value(after, "fstrace_always_on_cpu_share") < 1
        # the collector's own CPU time: grew while it served, and is no more than the kernel's account of it now
        collector = collector_under(p.pid, timeout=10)
        cpu = value(after, "fstrace_collector_cpu_seconds_total")
        with open("/proc/%d/stat" % collector) as f:
            utime, stime = (int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
        assert value(before, "fstrace_collector_cpu_seconds_total") < cpu
        assert cpu <= (utime + stime) / os.sysconf("SC_CLK_TCK") + 0.02, (cpu, utime, stime)
        seen = value(after, "fstrace_requests_total", kind="read", mount=mnt) - value(
            before, "fstrace_requests_total", kind="read", mount=mnt)
        assert 0 < seen < ios  # the hooks were off part of the time
        _assert_estimate_holds(after, mnt, ios, other_reads)
        # weighted by fio's own read calls, every window's known
        assert value(after, "fstrace_requests_estimated_by_calls", kind="read", mount=mnt) == 1
        assert value(after, "fstrace_request_windows_without_calls_total") == 0
        assert value(after, "fstrace_call_count_looks_failed_total") == 0
    finally:
        stop(p, rest)


@pytest.mark.bpf
def test_serve_on_a_budget_leaves_out_only_the_windows_of_a_failed_look(mounted_erofs):  # noqa: F811
    """Two looks at the traced processes' read counts fail (FSTRACE_FAIL_CALL_LOOKS: the eighth window's opening
    look, the ninth's closing one, as an unreadable task iterator would), about 2.1 to 2.9 s after the start (a
    window of 0.1 s and its 20 ms grace in each 0.3 s period at --window-duty 0.4), while fio reads as fast as it
    can (from about 0.7 s to 6.7 s): the metrics say two windows' calls are unknown and two looks failed, the
    estimate is still weighted by fio's own calls over the other windows, and its 95 % bounds hold fio's count
    (give or take its reads of other files, as above)."""
    mnt, _ = mounted_erofs
    p, port, rest = _serve_fio_on_a_budget(mnt, env={"FSTRACE_FAIL_CALL_LOOKS": "15,18"})
    try:
        time.sleep(0.5)
        before = parse(fresh_scrape(port))
        assert value(before, "fstrace_requests_total", kind="read", mount=mnt) == 0
        assert value(before, "fstrace_call_count_looks_failed_total") == 0  # they fail while fio reads
        ios, other_reads = _fio_and_its_other_reads(mnt, "--time_based", "--runtime=6s")
        assert 0 < other_reads < ios / 20, (other_reads, ios)
        time.sleep(1.0)
        text = fresh_scrape(port)
        assert promtool_findings(text) == ""
        assert undocumented(text) == []
        after = parse(text)
        assert value(after, "fstrace_request_windows_total") >= 12
        assert value(after, "fstrace_call_count_looks_failed_total") == 2
        assert value(after, "fstrace_request_windows_without_calls_total") == 2
        assert value(after, "fstrace_requests_estimated_by_calls", kind="read", mount=mnt) == 1
        _assert_estimate_holds(after, mnt, ios, other_reads)
    finally:
        stop(p, rest)


@pytest.mark.bpf
def test_serve_on_a_budget_weights_by_time_when_no_window_has_its_calls(mounted_erofs):  # noqa: F811
    """Every look at the counts after the first fails (FSTRACE_FAIL_CALL_LOOKS 1 to 64): every window's calls are
    unknown, so the estimate falls back to the windows' time and says so (by_calls 0), the counter of windows
    without calls keeps up with the windows, and with fio held to a rate tracing does not slow, the estimate by
    time still holds fio's count."""
    mnt, _ = mounted_erofs
    p, port, rest = _serve_fio_on_a_budget(mnt, env={"FSTRACE_FAIL_CALL_LOOKS": ",".join(str(n) for n in range(1, 65))})
    try:
        time.sleep(0.5)
        # 3 s: the hook numbers 64 looks, two per 0.3 s window period, so the scrape comes before the 33rd window
        ios, other_reads = _fio_and_its_other_reads(mnt, "--rate_iops=5000", "--time_based", "--runtime=3s")
        time.sleep(1.0)
        after = parse(fresh_scrape(port))
        windows = value(after, "fstrace_request_windows_total")
        assert 4 <= windows < 32
        assert value(after, "fstrace_request_windows_without_calls_total") == windows
        # both looks of each window, and those of the window the scrape fell in: its opening one while it is open,
        # both in its grace period (window.c counts a window once its sys_exit is detached, GRACE_NS after its
        # closing look)
        assert 2 * windows <= value(after, "fstrace_call_count_looks_failed_total") <= 2 * windows + 2
        assert value(after, "fstrace_requests_estimated_by_calls", kind="read", mount=mnt) == 0
        _assert_estimate_holds(after, mnt, ios, other_reads)
    finally:
        stop(p, rest)


@contextlib.contextmanager
def nobodys_directory_with_a_planted_tmp(tmp_path, name):
    """(directory the user nobody owns, root's victim file): nobody, as an attacker would, has put
    <name>.tmp there as a symlink to the victim (the temporary name the collector used to open with O_TRUNC)."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"root's data\n")
    d = tempfile.mkdtemp(prefix="fstrace-attacker-")
    try:
        os.chmod(d, 0o755)
        os.chown(d, 65534, 65534)
        subprocess.run(["runuser", "-u", "nobody", "--", "ln", "-s", str(victim), os.path.join(d, name + ".tmp")],
                       check=True)
        yield d, victim
    finally:
        subprocess.run(["rm", "-rf", d], check=True)


@pytest.mark.bpf
def test_serve_refuses_a_textfile_directory_others_can_write(tmp_path):
    """Security: serve (root) refuses --textfile in a directory nobody owns, in one line, and touches nothing
    there: it used to open <file>.tmp with O_CREAT|O_TRUNC, through the symlink nobody planted."""
    with nobodys_directory_with_a_planted_tmp(tmp_path, "x.prom") as (d, victim):
        p = subprocess.Popen([FSTRACE, "serve", "--listen", "127.0.0.1:0", "--textfile", os.path.join(d, "x.prom")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err = ""
        for line in p.stderr:
            err += line
            if "serving http" in line:  # it served there: stopped, and the test fails below
                p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        lines = [l for l in err.splitlines() if l.startswith("fstrace")]
        assert p.returncode != 0 and len(lines) == 1 and "other users can write its directory" in lines[0], err
        assert victim.read_bytes() == b"root's data\n"
        assert sorted(os.listdir(d)) == ["x.prom.tmp"]


@pytest.mark.bpf
def test_collector_alone_never_writes_through_a_planted_symlink(tmp_path):
    """Security: the collector run alone (no directory check) into a directory nobody owns writes a new file of
    its own and renames it: nobody's <file>.tmp symlink leads nowhere, the victim keeps its bytes."""
    with nobodys_directory_with_a_planted_tmp(tmp_path, "x.prom") as (d, victim):
        out = os.path.join(d, "x.prom")
        p = subprocess.Popen([COLLECTOR, "--records", "none", "--no-io-records", "--sample-hz", "0", "--exposition",
                              out, "--exposition-interval", "1000", "--comm", "fstrace-nobody"],
                             stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 60
            while not os.path.exists(out) and p.poll() is None and time.time() < deadline:
                time.sleep(0.05)
        finally:
            p.send_signal(signal.SIGTERM)
            err = p.communicate(timeout=60)[1]
        assert victim.read_bytes() == b"root's data\n"
        assert p.returncode == 0, err
        assert value(parse(open(out).read()), "fstrace_start_time_seconds") > 0
        assert not os.path.islink(out) and os.stat(out).st_uid == 0
        assert sorted(os.listdir(d)) == ["x.prom", "x.prom.tmp"]  # nobody's link, left alone


@pytest.mark.bpf
def test_labels_of_long_and_invalid_utf8_names_stay_valid_utf8(tmp_path):
    """A mount path past a label's 255 bytes is cut after a whole character (it was cut inside one), and a task
    name's invalid bytes are U+FFFD: Prometheus refuses a whole scrape with one label of invalid UTF-8."""
    img, _ = small_erofs(tmp_path)
    base = os.path.join(str(tmp_path), "m")
    # "é" (2 bytes) from base on: byte 255 falls inside one
    pad = "" if (255 - len(base.encode()) - 1) % 2 else "x"
    mnt = os.path.join(base + pad, "é" * 120)
    os.makedirs(mnt)
    want = mnt.encode()[:254].decode()  # the 255th byte starts an "é" the label has no room for
    assert len(mnt.encode()) > 255 and len(want.encode()) == 254
    loop = subprocess.run(["losetup", "-f", "--show", "-r", img], check=True, stdout=subprocess.PIPE,
                          text=True).stdout.strip()
    mounted = False
    try:
        subprocess.run(["mount", "-t", "erofs", "-o", "ro", loop, mnt], check=True)
        mounted = True
        p, port, rest = start_serve("--mount", mnt, "--per-comm")
        try:
            subprocess.run(["python3", "-c", "import ctypes,sys; libc=ctypes.CDLL(None); "
                            "libc.prctl(15, b'rd\\xff\\xc3', 0, 0, 0); open(sys.argv[1],'rb').read()",
                            os.path.join(mnt, "f")], check=True)
            time.sleep(0.5)
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
                raw = r.read()
        finally:
            log = stop(p, rest)
        assert p.returncode == 0, log
        text = raw.decode("utf-8")  # strictly: it was refused here before
        assert promtool_findings(text) == ""
        samples = parse(text)
        assert value(samples, "fstrace_filesystem_mounted", mount=want) == 1
        assert value(samples, "fstrace_requests_total", kind="read", mount=want) >= 1
        assert value(samples, "fstrace_comm_requests_total", comm="rd\ufffd\ufffd", mount=want) >= 1
    finally:
        if mounted:
            subprocess.run(["umount", mnt], check=True)
        subprocess.run(["losetup", "-d", loop], check=True)


@pytest.mark.unit
def test_the_private_exposition_goes_to_the_first_memory_filesystem_root(monkeypatch):
    """serve's rewritten files: in /run when it is on a tmpfs, else /dev/shm when that is, else the temporary
    directory (None)."""
    import cli.devices as devices
    import cli.serve as serve
    monkeypatch.setattr(serve.os, "access", lambda path, mode: True)
    monkeypatch.setattr(serve.os.path, "isdir", lambda path: True)
    monkeypatch.setattr(devices.os.path, "realpath", lambda path: path)
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)
    for table, want in (([("/", "ext4"), ("/run", "tmpfs"), ("/dev/shm", "tmpfs")], "/run"),
                        ([("/", "ext4"), ("/dev/shm", "tmpfs")], "/dev/shm"),
                        ([("/", "ext4"), ("/run/user/0", "tmpfs"), ("/dev", "devtmpfs")], None),
                        ([("/", "tmpfs")], "/run"),  # a root in memory: /run on it
                        ([("/", "ext4"), ("/dev", "devtmpfs"), ("/dev/shm", "ramfs")], "/dev/shm"),
                        ([("/", "ext4")], None)):
        monkeypatch.setattr(devices, "mounts", lambda t=table: [(mp, fs, "none", (0, 1)) for mp, fs in t])
        assert serve.exposition_root() == want, table
    # the packaged unit's runtime directory first (its /run is read-only there); TMPDIR given: the user's choice
    monkeypatch.setattr(devices, "mounts", lambda: [("/", "ext4"), ("/run", "tmpfs"), ("/dev/shm", "tmpfs")])
    monkeypatch.setenv("RUNTIME_DIRECTORY", "/run/fstrace")
    assert serve.exposition_root() == "/run/fstrace"
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    assert serve.exposition_root() == "/run/fstrace"
    monkeypatch.delenv("RUNTIME_DIRECTORY")
    assert serve.exposition_root() is None
