"""The Grafana dashboard (dashboards/fstrace.json): templated by instance and mount, and every panel's query --
its variables set to one fstrace serve and one traced erofs mount -- run against a real Prometheus scraping that
serve while fio reads the mount: each returns series for that mount (or its device), over metric families serve
writes; what it returns agrees with fio's and the block layer's own counts where they say the same."""
import json
import os
import re
import time

import pytest

from conftest import ROOT, drop_caches
from serving import Prometheus, diskstat, fio_randread, fresh_scrape, parse, start_serve, stop, value

DASHBOARD = os.path.join(ROOT, "dashboards", "fstrace.json")
METRIC = re.compile(r"\b(fstrace_[a-z0-9_]+)\b")
# families only the fentry and kprobe tiers fill (the decompressors timed one by one)
# the request families' one per-instance series: the share of time serve's --budget windows held the request hooks
# attached is the tracer's, not a mount's (the bpf-lane test below checks it carries no mount label)
PER_INSTANCE_REQUEST = {"fstrace_request_window_fraction"}
TIMED_DECOMPRESSION = re.compile(r"^fstrace_decompress(ions|_errors|_seconds|_in_bytes|_out_bytes)_total$")


def load():
    with open(DASHBOARD) as f:
        return json.load(f)


def targets(doc):
    """(panel title, target) of every query of the dashboard."""
    return [(p["title"], t) for p in doc["panels"] if p["type"] != "row" for t in p["targets"]]


def family(metric):
    """The family a sample name belongs to (a histogram's _bucket, _sum and _count are its own)."""
    return re.sub(r"_(bucket|sum|count)$", "", metric)


@pytest.mark.unit
def test_dashboard_is_templated_by_instance_and_mount():
    doc = load()
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "mount", "device"):
        v = variables[name]
        assert v["includeAll"] and v["multi"] and "fstrace_" in v["definition"]
    assert '$instance' in variables["mount"]["definition"] and '$instance' in variables["device"]["definition"]
    found = targets(doc)
    assert len(found) >= 12
    for title, t in found:
        assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title
        assert 'instance=~"$instance"' in t["expr"], title
        # a query over per-mount series selects the chosen mounts, one over per-device series the devices
        for m in METRIC.findall(t["expr"]):
            if m.startswith("fstrace_request") and m not in PER_INSTANCE_REQUEST:
                assert re.search(r'%s\{[^}]*mount=~"\$mount"' % m, t["expr"]), (title, m)
            if m.startswith("fstrace_block_"):
                assert re.search(r'%s\{[^}]*device=~"\$device"' % m, t["expr"]), (title, m)
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in doc["panels"]:  # panels tile the grid without overlapping, within its 24 columns
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(g["x"] + i, g["y"] + j) for i in range(g["w"]) for j in range(g["h"])}
        assert not cells & mine, p["title"]
        cells |= mine


def promql_regex(s):
    """A variable's value as Grafana puts it in a PromQL regex: regex-escaped, then escaped for the string."""
    return re.escape(s).replace("\\", "\\\\")


@pytest.mark.bpf
def test_every_panel_query_returns_series_for_a_traced_erofs_mount(mounted_erofs):
    mnt, dev = mounted_erofs
    rdev = os.stat(dev).st_rdev
    loop = "%d:%d" % (os.major(rdev), os.minor(rdev))
    p, port, rest = start_serve("--mount", mnt)
    prom = None
    try:
        prom = Prometheus(port)
        prom.wait_for('up{job="fstrace"}', 1.0)
        exposition = fresh_scrape(port)
        families = set(re.findall(r"^# TYPE (\S+) ", exposition, re.M))
        drop_caches()
        time.sleep(1.5)  # Prometheus holds a sample of the counters as they were before the workload
        ds0 = diskstat(dev)
        t0 = time.time()
        job = fio_randread(mnt)
        ds1 = diskstat(dev)
        after = parse(fresh_scrape(port))
        prom.wait_for('sum(fstrace_requests_total{kind="read",mount="%s"})' % mnt,
                      value(after, "fstrace_requests_total", kind="read", mount=mnt))
        # a series the workload brought (a device's alignment counters come with its first request) has a rate
        # once Prometheus holds two samples of it: two scrapes (1 s apart) after the workload
        end = time.time()
        deadline = end + 20
        while (prom.query("timestamp(fstrace_start_time_seconds)") or 0) < end + 1.1 and time.time() < deadline:
            time.sleep(0.2)
        window = int(time.time() - t0) + 3
        instance = "127.0.0.1:%d" % port
        subst = {"$instance": promql_regex(instance), "$mount": promql_regex(mnt), "$device": promql_regex(loop),
                 "$__rate_interval": "%ds" % window}
        decompressors = {dict(ls)["probe"]: dict(ls)["tier"] for (n, ls), v in after.items()
                         if n == "fstrace_probe_info" and re.search("decompress|transform_plain", dict(ls)["probe"])}
        timed = any(TIMED_DECOMPRESSION.match(n) for n, _ in after)

        # the rule the unit test applies by name, against the series serve wrote: a family with a mount label is
        # selected by $mount wherever the dashboard uses it; the per-instance one has no mount label
        per_mount = {n for n, ls in after if "mount" in dict(ls)}
        assert not per_mount & PER_INSTANCE_REQUEST and PER_INSTANCE_REQUEST <= {n for n, _ in after}
        for title, t in targets(load()):
            for m in per_mount & set(METRIC.findall(t["expr"])):
                assert re.search(r'%s\{[^}]*mount=~"\$mount"' % m, t["expr"]), (title, m)

        got = {}
        for title, t in targets(load()):
            expr = t["expr"]
            for k, v in subst.items():
                expr = expr.replace(k, v)
            metrics = set(METRIC.findall(expr))
            assert {family(m) for m in metrics} <= families, (title, metrics - families)
            series = prom.query_all(expr)
            got[(title, t["refId"])] = series
            if all(TIMED_DECOMPRESSION.match(m) for m in metrics) and not timed:
                # no decompressor could be timed on this kernel: no series, and the probes say why
                assert series == {} and set(decompressors.values()) == {"unavailable"}, (title, decompressors)
                continue
            assert series, (title, expr)
            for labels in series:
                labels = dict(labels)
                assert labels.get("instance", instance) == instance, (title, labels)
                assert labels.get("mount", mnt) == mnt, (title, labels)
                assert labels.get("device", loop) == loop, (title, labels)

        # what the panels say, against what fio and the block layer say
        shares = got[("Attribution shares per mount", "A")]
        assert sum(shares.values()) == pytest.approx(1.0, abs=1e-6)  # the parts partition the read time
        assert shares[frozenset({("instance", instance), ("mount", mnt), ("part", "io_wait")})] > 0  # cold reads
        p50, p90, p99 = (next(iter(got[("Read latency percentiles per filesystem", r)].values())) for r in "ABC")
        fio_p99 = job["clat_ns"]["percentile"]["99.000000"] / 1e9
        assert p50 <= p90 <= p99 and fio_p99 / 2.2 <= p99 <= fio_p99 * 2, (p50, p90, p99, fio_p99)
        mean = got[("Block request size per device", "A")][frozenset({("instance", instance), ("device", loop),
                                                                       ("op", "read")})]
        assert mean == pytest.approx((ds1[1] - ds0[1]) / (ds1[0] - ds0[0]), rel=1e-6)
        assert set(got[("Losses", "A")].values()) == {0.0}  # nothing dropped
        seen = got[("The tracer's own cost and coverage", "B")]
        assert list(seen.values()) == [1.0]  # every block request diskstats counted was seen
    finally:
        if prom:
            prom.close()
        log = stop(p, rest)
    assert p.returncode == 0, log
