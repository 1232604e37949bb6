"""What a person sees first: the verdict (every number in it read back from summary.json), user stacks that stop
where their walk stops being trustworthy, and the Perfetto timeline (read back with the trace protos)."""
import re

import pytest

from analysis import report, timeline, verdict
from conftest import fstrace, timeline_flows

NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")  # not the 50 of p50


def numbers(text):
    return [float(x) for x in NUMBER.findall(text)]


def size_text(n):
    """n bytes as people read them: in the largest of GiB, MiB and KiB that n is at least one of, to a tenth
    (bytes below 1 KiB, whole)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return "%.1f %s" % (n / scale, unit)
    return "%d B" % n


def mag(n):
    return float(size_text(n).split()[0])


def mean_times(hist):
    """The mean of a {times: units} histogram (how often a unit was looked up or read, on average)."""
    units = sum(hist.values())
    return sum(int(times) * n for times, n in hist.items()) / units if units else 0.0


def logical_lines(text):
    """Verdict lines with their wrapped continuations (indented more than two columns) joined."""
    out = []
    for l in text.splitlines():
        if l.startswith("   ") and out:
            out[-1] += " " + l.strip()
        else:
            out.append(l)
    return out


@pytest.mark.unit
def test_verdict_numbers_are_a_stored_summarys(erofs_randread_summary):
    verdict_numbers_are_the_summarys(erofs_randread_summary)


@pytest.mark.bpf
def test_verdict_numbers_are_the_summarys(erofs_randread):
    verdict_numbers_are_the_summarys(erofs_randread[2])


def verdict_numbers_are_the_summarys(s):
    text = report.render(s, full=False)
    lines = logical_lines(text)
    assert len(text.splitlines()) <= 22 and max(len(l) for l in text.splitlines()) <= verdict.WIDTH
    by = {re.match(r"\s*(device \S+|[^:(]+)", l).group(1).strip(): l for l in lines}
    run = s["run"]
    assert lines[0] == "fstrace: %s on %s (cold cache), dataset %s, kernel %s" % (
        run["workload"], run["label"], run["dataset_id"], run["kernel"])
    r = s["reads"]
    # reads: count, MiB, wall, MiB/s, p50, p99 (us below 1 ms, ms above)
    lat = [r["latency_us"][q] if r["latency_us"][q] < 1000 else r["latency_us"][q] / 1000 for q in ("p50", "p99")]
    expect = [r["count"], mag(r["bytes"]), round(s["wall_s"], 3), mag(s["throughput_bytes_per_s"])] + \
        [round(x, 1 if x < 1000 else 2) for x in lat]
    got = numbers(by["reads"])
    assert got == pytest.approx(expect, abs=0.051), (by["reads"], expect)
    assert "%s in" % size_text(r["bytes"]) in by["reads"] and "= %s/s" % size_text(s["throughput_bytes_per_s"]) \
        in by["reads"], by["reads"]
    # time in requests: the summary's parts by share, the largest named dominant, the rest named
    a = s["attribution"]
    att = by["time in requests"]
    assert numbers(att)[0] == pytest.approx(a["wall_ns"] / 1e6, abs=0.05)
    shares = sorted(((p[:-3], v) for p, v in a["shares"].items() if v), key=lambda kv: -kv[1])
    shown = re.findall(r"(\w+) (\d+\.\d) %", att.split("under 0.1 %")[0])
    assert [n for n, _ in shown] == [n for n, v in shares if v >= 0.0005]
    for (name, v), (_, share) in zip(shown, shares):
        assert float(v) == pytest.approx(100 * share, abs=0.051)
    assert "%s %.1f %% (dominant)" % (shares[0][0], 100 * shares[0][1]) in att
    for name, v in shares:
        assert re.search(r"\b%s\b" % name, att), name  # every part with any time is named
    # one line per device, its numbers the summary's
    for name, d in s["devices"].items():
        line = by["device %s" % name]
        q = [d["q2c_us"][k] for k in ("p50", "p99")]
        expect = [d["requests"], mag(d["mean_bytes"]), 4, round(d["aligned_4k_pct"], 1)] + \
            [round(x, 1) if x < 1000 else round(x / 1000, 2) for x in q]
        assert numbers(line.split("): ", 1)[1]) == pytest.approx(expect, abs=0.051), (line, expect)
        assert "(%s)" % d["level"] in line and "mean %s" % size_text(d["mean_bytes"]) in line, line
    assert {d["level"] for d in s["devices"].values()} == {"loop", "backing"}
    # decompression: sampled on this tier, its share of request time and the kworkers' part
    dec = s["decompression"]
    line = by["decompression"]
    est = dec["estimate"]
    kw = s["async_work"].get("erofs decompression")
    expect = [round(est["ns"] / 1e6, 1), round(100 * est["ns"] / a["wall_ns"], 1), 95,
              round(est["ci95_ns"][0] / 1e6, 1), round(est["ci95_ns"][1] / 1e6, 1)]
    if kw:
        expect += [round(kw["ns"] / 1e6, 1), kw["items"]]
    assert not dec["available"] and "sampled" in line
    assert numbers(line) == pytest.approx(expect, abs=0.051), (line, expect)
    # the tracer's own cost: its part, its share, the estimate's error and sampling rate, the sampled share and
    # its interval, the collector process's own CPU per second
    tr = s["tracer"]
    smp = tr["sampled"]
    est = tr["estimate"]
    expect = [round(tr["part_ns"] / 1e6, 1), round(100 * tr["part_share"], 1), round(est["error_ns_95"] / 1e6, 1), 1,
              est["time_every"], round(100 * smp["share"], 1), 95,
              round(100 * smp["share_95"][0], 1), round(100 * smp["share_95"][1], 1)]
    if (tr.get("collector") or {}).get("cpu_ms_per_s") is not None:  # summaries of older collectors have none
        expect.append(round(tr["collector"]["cpu_ms_per_s"], 1))
    assert numbers(by["tracer"]) == pytest.approx(expect, abs=0.051), by["tracer"]
    # read amplification: device bytes per level and decompressed bytes (a bound on this tier) per byte received
    amp = s["amplification"]
    line = by["read amplification per byte received"]
    levels = amp["device_read_per_received"]
    expect = [mag(s["reads"]["bytes"])] + [round(levels[lv]["per_received"], 2) for lv in levels] + \
        [round(amp["decompressed_per_received"]["per_received"], 2), amp["unit_lookups"]["units"],
         round(mean_times(amp["unit_lookups"]["times"]), 2),
         round(mean_times(amp["unit_device_reads"]["times"]), 2),
         round(100 * amp["device_reread_share"]["share"], 1)]
    if amp["device_unneeded_share"].get("available"):
        expect.append(round(100 * amp["device_unneeded_share"]["share"], 1))
    assert numbers(line) == pytest.approx(expect, abs=0.0051), (line, expect)
    # lost and unavailable, one line each
    lost = [l for l in lines if l.strip().lower().startswith("lost")]
    assert len(lost) == 1
    unseen = s["unseen_block_requests"]
    if unseen or any((s.get("drops") or {}).values()) or any((s.get("losses") or {}).values()):
        assert lost[0].startswith("  LOST")
        if lost[0].endswith("(each: report --full)"):  # the totals, when every item would not fit one line
            assert "%d block requests unseen" % sum(unseen.values()) in lost[0] or not unseen
        else:
            assert all("%d on %s" % (v, k) in lost[0] for k, v in unseen.items())
    else:
        assert lost[0].startswith("  lost: nothing")
    un = [l for l in lines if l.startswith("  unavailable")]
    assert len(un) == (1 if s["unavailable"] else 0)
    for u in s["unavailable"]:
        # named without its explanation (what follows a colon or an opening parenthesis)
        name = re.split(r": | \(", u["figure"])[0]
        assert name in un[0] and (name == u["figure"] or u["figure"][len(name):] not in un[0]), (name, un[0])
    assert "fstrace report DIR --full" in text


@pytest.mark.bpf
def test_full_report_keeps_the_verdict_first_and_groups_tiers(erofs_randread):
    out, _, s = erofs_randread
    short = fstrace("report", str(out)).stdout
    full = fstrace("report", str(out), "--full").stdout
    head = short[:short.rindex("  (detail")]
    assert full.startswith(head)
    body = full[len(head):]
    assert "== where request time went" in body and "== tiers, losses and what could not be measured" in body
    # every probe listed once, under the heading of its own tier
    listed, tier = {}, None
    for l in body.splitlines():
        m = re.match(r"  probes at tier (\w+)", l)
        if m:
            tier = m.group(1)
        elif not l.startswith("      "):
            tier = None
        elif tier and re.fullmatch(r" +\w+(, \w+)*,?", l):  # its probes, six columns in (a long title wraps)
            for probe in l.strip().rstrip(",").split(", "):
                listed.setdefault(probe, []).append(tier)
    assert listed == {probe: [t["tier"]] for probe, t in s["tiers"].items()}, listed
    # the tiers are lines of at most WIDTH columns, never one line of all probes
    tier_lines = [l for l in body.splitlines() if "block_rq_issue" in l]
    assert tier_lines and all(len(l) <= verdict.WIDTH for l in tier_lines)


KERNEL_ENTRIES = ("entry_SYSCALL_64", "asm_exc_", "asm_sysvec_", "asm_common_interrupt", "ret_from_fork")


@pytest.mark.bpf
def test_user_stacks_stop_where_the_walk_stops(erofs_randread):
    """fio is built without frame pointers: its stacks end (at the root) in one [fio] frame, never a run of
    [unknown]; the frames kept under it are functions by name."""
    out, res, _ = erofs_randread
    for name in ("wallclock", "oncpu"):
        stacks = [l.rsplit(" ", 1)[0].split(";") for l in (out / ("%s.folded" % name)).read_text().splitlines()]
        assert stacks
        for st in stacks:
            assert not any(a == b == "[unknown]" for a, b in zip(st, st[1:])), st
        fio = [st for st in stacks if st[0] == "[fio]"]
        assert fio, name
        for st in fio:
            # the user frames end where the kernel was entered (a syscall, or an exception or interrupt taken in
            # user mode), or where a sample inside fstrace's own programs is folded under its tracer frame
            entry = next((i for i, f in enumerate(st)
                          if f.startswith(KERNEL_ENTRIES + (res.header["tracer_frame_prefix"],))), None)
            user = st[1:entry]
            while user and user[-1].startswith("["):  # the leaf's state marker ([cpu], [cpu: fstrace], ...)
                user = user[:-1]
            assert all(not f.startswith("[") for f in user), st  # trusted frames: named functions
    smp = res.header["sampling"]
    assert not any("[unknown];[unknown]" in st for st, _ in smp["folded"])


@pytest.mark.bpf
def test_timeline_is_a_perfetto_trace_of_every_request(erofs_randread):
    out, res, _ = erofs_randread
    path = out / timeline.NAME
    assert not (out / "timeline.json").exists()
    tracks, sl = timeline.read(str(path))
    req, io = res["req"], res["io"]
    kinds = set(res.header["enums"]["req_kind"].values())
    top = [s for s in sl if s["depth"] == 0]
    # one slice per request, on its thread's track
    assert sorted((s["start"], s["end"]) for s in top if s["name"] in kinds) == \
        sorted(zip(req["ts_start_ns"].tolist(), req["ts_end_ns"].tolist()))
    # one slice per block request, on a lane of its device, with the device phase nested in it
    blocks = [s for s in top if re.match(r"[RW] \d+ KiB$", s["name"])]
    assert len(blocks) == len(io)
    devices = {tracks[s["track"]][1] for s in blocks}
    assert {tracks[d][0] for d in devices} == {"block device %s" % n for n in
                                               {results_dev(res, d) for d in io["dev"].tolist()}}
    assert sum(1 for s in sl if s["name"] == "device" and s["depth"] == 1) == int((io["ts_issue_ns"] > 0).sum())
    # kworker work items on the kworker's own track
    work = res.records.get("work")
    if work is not None and len(work):
        items = [s for s in top if s["name"] in set(res.header["enums"]["work_kind"].values())]
        assert len(items) == len(work)
        assert all(tracks[s["track"]][0].startswith("kworker") for s in items)
    # flows: from a request to block requests (queued while it ran), from a block request to the work item its
    # completion queued, from a work item to the request it woke; both ends exist and the source comes first
    links = timeline_flows(res, sl)
    assert links
    for s, e, kind in links.values():
        if kind == ("request", "block request"):
            assert s["start"] <= e["start"] <= s["end"]
        elif kind == ("block request", "work item"):
            assert s["end"] <= e["start"]
        else:
            assert kind == ("work item", "request") and s["start"] < e["end"], kind
    # size: at most 100 bytes per request
    size = path.stat().st_size
    assert size / len(req) <= 100, size / len(req)


def results_dev(res, dev):
    from analysis.selection import dev_name
    return dev_name(dev, res.minor_bits)


@pytest.mark.unit
def test_ends_never_seen_are_lost_and_expired_state_is_not(erofs_randread_summary):
    """An end event that never came is a loss (LOST, with what it means); in-flight state expired after a long
    while without an end is said apart from the losses, with its age and, for today's collector, that it came
    from full tables only; an older collector's header (10 s, every entry that old) is read too."""
    import copy
    s = copy.deepcopy(erofs_randread_summary)
    s["drops"], s["unseen_block_requests"] = {}, {}
    s["losses"] = {"bio_table_full": 1, "request_completion_missed": 2, "bio_end_missed": 0}
    s["expired_in_flight"] = {"bios": 3, "requests": 4, "work_items": 0, "after_ns": 600 * 10**9,
                              "full_buckets_only": True, "run_failures": 0}
    lines = logical_lines(verdict.render(s))
    [lost] = [l for l in lines if l.startswith("  LOST")]
    assert "1 bio_table_full (kernel table full)" in lost and "2 request_completion_missed (its end never seen)" \
        in lost and "bio_end_missed" not in lost and "expired" not in lost
    [expired] = [l for l in lines if l.startswith("  expired")]
    assert "3 bios, 4 block requests with no end in 600 s expired from full in-flight tables" in expired
    # more than one line of items: their totals by kind, on one line, every item still in the full report
    s["unseen_block_requests"] = {"254:0": 1, "7:0": 1}
    s["drops"] = {"io": 5}
    [lost] = [l for l in verdict.lines(s) if l.startswith("  LOST")]
    assert lost == "  LOST: 5 dropped, 1 table full, 2 ends never seen, 2 block requests unseen (each: report --full)"
    full = report.render(s, full=True)
    assert "block requests the kernel completed unseen by fstrace: 254:0 1, 7:0 1" in full
    assert "LOST in the kernel (a table was full, or an end event never came): bio_table_full 1, " \
        "request_completion_missed 2" in full
    assert "in-flight state expired: 3 bios, 4 block requests with no end in 600 s expired from full" in full
    s["losses"], s["drops"], s["unseen_block_requests"] = {"bio_table_full": 0}, {}, {}
    s["expired_in_flight"] = {"bios": 1, "requests": 0, "work_items": 2, "after_ns": 10 * 10**9, "run_failures": 0}
    lines = logical_lines(verdict.render(s))
    assert [l for l in lines if l.startswith("  lost: nothing")]
    [expired] = [l for l in lines if l.startswith("  expired")]
    assert expired == "  expired: 1 bios, 0 block requests with no end in 10 s expired; 2 filesystem work items " \
        "queued and not seen to run in 10 s expired"


@pytest.mark.unit
def test_a_warm_run_that_missed_the_cache_says_so_and_names_what_evicts(erofs_randread_summary):
    """Page-cache misses in a warm run are said under the reads line, with the machine's proactive reclaim when
    the run found one; a cold run's misses are its point and are not."""
    import copy
    s = copy.deepcopy(erofs_randread_summary)
    s["reads"]["pagecache_misses"] = 7
    assert not [l for l in logical_lines(verdict.render(s)) if l.startswith("  warm run")]
    s["run"]["cache"] = "warm"
    s["run"]["proactive_reclaim"] = ["DAMON kdamond 0 (pid 77): pageout of memory idle for 60 s or more"]
    [line] = [l for l in logical_lines(verdict.render(s)) if l.startswith("  warm run")]
    assert line == ("  warm run, yet 7 page-cache misses: this machine reclaims memory it judges idle on its own "
                    "(DAMON kdamond 0 (pid 77): pageout of memory idle for 60 s or more)")
    s["run"]["proactive_reclaim"] = []
    [line] = [l for l in logical_lines(verdict.render(s)) if l.startswith("  warm run")]
    assert line.endswith("7 page-cache misses: no proactive reclaim found on this machine")
    s["run"]["proactive_reclaim"] = None  # a results file from before runs looked
    [line] = [l for l in logical_lines(verdict.render(s)) if l.startswith("  warm run")]
    assert line.endswith("7 page-cache misses: whether this machine reclaims page cache on its own was not recorded")
    s["reads"]["pagecache_misses"] = 0
    assert not [l for l in logical_lines(verdict.render(s)) if l.startswith("  warm run")]


@pytest.mark.unit
def test_proactive_reclaim_is_found_in_damons_sysfs(tmp_path):
    """A running kdamond's pageout scheme on physical memory, and DAMON_RECLAIM enabled, are named as configured
    (access pattern, watermarks, how many filters); a stopped kdamond, a scheme of another action and a
    virtual-address context (it pages out only its targets' mappings) are not."""
    from cli.devices import proactive_reclaim

    def put(path, text):
        p = tmp_path / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")

    def found():
        return proactive_reclaim(str(tmp_path / "kdamonds"), str(tmp_path / "reclaim"))

    kd = "kdamonds/0/contexts/0/"
    put("kdamonds/0/state", "on")
    put("kdamonds/0/pid", "77")
    put(kd + "operations", "paddr")
    put(kd + "monitoring_attrs/intervals/aggr_us", "5000000")
    put(kd + "schemes/0/action", "pageout")
    put(kd + "schemes/0/access_pattern/age/min", "12")
    put(kd + "schemes/0/access_pattern/nr_accesses/max", "1")
    put(kd + "schemes/0/watermarks/metric", "none")
    put(kd + "schemes/0/ops_filters/nr_filters", "2")
    put(kd + "schemes/1/action", "lru_prio")
    put("kdamonds/1/state", "off")
    put("kdamonds/1/contexts/0/schemes/0/action", "pageout")
    put("kdamonds/2/state", "on")
    put("kdamonds/2/contexts/0/operations", "vaddr")
    put("kdamonds/2/contexts/0/schemes/0/action", "pageout")
    put("reclaim/enabled", "N")
    assert found() == ["DAMON kdamond 0 (pid 77): pageout of physical memory regions seen accessed in at most 1 "
                       "sample per 5 s for 60 s or more, 2 filters"]
    put(kd + "schemes/0/watermarks/metric", "free_mem_rate")
    put(kd + "schemes/0/watermarks/high", "500")
    assert found()[0].endswith("for 60 s or more while free memory is at most 500 per mille, 2 filters")
    put("reclaim/enabled", "Y")
    put("reclaim/min_age", "120000000")
    put("reclaim/wmarks_high", "500")
    put("kdamonds/0/state", "off")
    assert found() == ["DAMON_RECLAIM: pageout of memory unaccessed for 120 s or more while free memory is at most "
                       "500 per mille"]
    assert proactive_reclaim(str(tmp_path / "none"), str(tmp_path / "none")) == []
