"""The collector on its own, as it runs on a target box: results file, tiers, fallback, integrity."""
import json
import os
import re
import subprocess
import time

import numpy as np
import pytest

from analysis import results
from analysis import selection
from conftest import COLLECTOR, assert_exact_partition, collector_map_ids

pytestmark = pytest.mark.bpf


def collect(tmp_path, *args, cmd):
    """The collector alone, a record for every request (these tests check requests one by one)."""
    out = tmp_path / "r.fst"
    p = subprocess.run([COLLECTOR, "-o", str(out), "--records", "all"] + list(args) + ["--"] + cmd,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    return results.load(str(out))


@pytest.fixture(scope="module")
def payload(tmp_path_factory):
    d = tmp_path_factory.mktemp("payload")
    path = d / "payload.bin"
    data = os.urandom(300000)
    path.write_bytes(data)
    return str(path), len(data)


def read_requests_of(res, path):
    st = os.stat(path)
    req = res["req"]
    read = selection.enum_value(res.header, "req_kind", "read")
    return req[(req["kind"] == read) & (req["ino"] == st.st_ino)]


def test_results_file_describes_itself(tmp_path, payload):
    path, size = payload
    res = collect(tmp_path, cmd=["dd", "if=" + path, "of=/dev/null", "bs=65536"])
    h = res.header
    assert h["format"] == "fstrace-results"
    assert h["kernel"]["release"] == os.uname().release
    assert {p["probe"] for p in h["probes"]} >= {"sys_enter", "block_rq_complete", "sched_switch"}
    assert all(p["tier"] in ("fentry", "kprobe", "tp_btf", "raw_tp", "unavailable") for p in h["probes"])
    for name, layout in h["records"].items():
        assert results.dtype_for(layout).itemsize == layout["size"]
    reads = read_requests_of(res, path)
    assert int(reads["ret"].sum()) == size
    assert len(reads) == (size + 65535) // 65536 + 1  # dd reads until a 0-byte read
    assert bytes(reads["comm"][0]).startswith(b"dd")


def btf_tracepoints():
    """Tracepoints the running kernel's BTF describes (btf_trace_NAME typedefs): tp_btf can attach to them."""
    out = subprocess.run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux"], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    return set(re.findall(r"'btf_trace_(\w+)'", out))


def test_tracepoint_probes_use_tp_btf_wherever_the_kernel_offers_it(tmp_path, payload):
    """An object that silently fell back to raw_tp (a program the verifier refuses on tp_btf) loses task storage
    and pays a helper call per field: every tracepoint probe must be on tp_btf where BTF describes it."""
    path, _ = payload
    res = collect(tmp_path, cmd=["dd", "if=" + path, "of=/dev/null", "bs=65536"])
    offered = btf_tracepoints()
    on_raw = [p["probe"] for p in res.header["probes"] if p["tier"] == "raw_tp" and p["probe"] in offered]
    assert not on_raw, "on raw_tp although the kernel offers tp_btf: %s" % on_raw
    assert any(p["tier"] == "tp_btf" for p in res.header["probes"])


def test_raw_tp_tier_gives_the_same_answer(tmp_path, payload):
    """The raw_tp twins (for kernels without tp_btf) measure what the tp_btf programs do."""
    path, size = payload
    res = collect(tmp_path, "--no-tp-btf", cmd=["dd", "if=" + path, "of=/dev/null", "bs=4096"])
    # every tracepoint probe falls back to its raw_tp twin; function probes (decompressors, squashfs's cache,
    # btrfs's compressor) have no tracepoint tier
    probes = [p for p in res.header["probes"] if p["tier"] not in ("fentry", "kprobe") and
              not p["why"].startswith("fentry:") and not p["why"].startswith("not loaded: without --budget")]
    attached = {p["figure"] for p in probes if p["tier"] == "raw_tp"}
    for p in probes:
        if p["tier"] != "raw_tp":
            # only another kernel's name for a tracepoint whose twin here is attached (erofs_readpages on 6.18)
            assert p["tier"] == "unavailable" and "no tracepoint" in p["why"] and p["figure"] in attached, p
    reads = read_requests_of(res, path)
    assert int(reads["ret"].sum()) == size
    assert len(reads) == (size + 4095) // 4096 + 1
    wall = (reads["ts_end_ns"] - reads["ts_start_ns"]).astype(np.int64)
    parts = sum(reads[p].astype(np.int64) for p in res.schema.parts)
    assert np.all(wall == parts)


def test_children_are_traced(tmp_path, payload):
    path, size = payload
    res = collect(tmp_path, cmd=["sh", "-c", "cat %s > /dev/null; (cat %s) > /dev/null" % (path, path)])
    reads = read_requests_of(res, path)
    assert int(reads["ret"].sum()) == 2 * size
    assert len(np.unique(reads["tgid"])) == 2


def test_truncated_file_is_refused(tmp_path, payload):
    path, _ = payload
    collect(tmp_path, cmd=["cat", path])
    full = (tmp_path / "r.fst").read_bytes()
    cut = tmp_path / "cut.fst"
    cut.write_bytes(full[:-100])
    with pytest.raises(results.ResultsError, match="truncated"):
        results.load(str(cut))
    (tmp_path / "junk.fst").write_bytes(b"not a results file")
    with pytest.raises(results.ResultsError, match="not an fstrace"):
        results.load(str(tmp_path / "junk.fst"))


def test_metadata_file_is_embedded(tmp_path):
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"dataset_id": "abc", "note": "quote \" and backslash \\"}))
    res = collect(tmp_path, "-m", str(meta), cmd=["true"])
    assert res.config == {"dataset_id": "abc", "note": "quote \" and backslash \\"}


def test_collector_refuses_non_root(tmp_path):
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", COLLECTOR, "-o",
                        "/tmp/x.fst", "--", "true"], stderr=subprocess.PIPE, text=True)
    assert p.returncode != 0
    assert "must run as root" in p.stderr


def test_stale_in_flight_entries_are_expired_from_full_buckets_only(tmp_path, collector_header):
    """The last resort of a full in-flight table: an entry whose end event never came, older than FST_STALE_NS,
    is expired from a bucket with no free slot, and counted in the header; one as old in a bucket with room, or
    a younger one, stays (it may still be in flight: a request can be held for minutes).  In each in-flight table
    of a running collector (found by its pid among the map owners) one bucket is filled with three stale entries
    and a young one, and another holds a lone stale entry: the collector's expiry, which walks one slice of every
    table a run, takes exactly the three within one pass over the tables (the header's pass_ns).  The two are the
    tables' last buckets, in the slice a pass walks last, so they are filled before it comes."""
    import struct
    stale_ns = collector_header["expired_in_flight"]["after_ns"]
    pass_s = collector_header["expired_in_flight"]["pass_ns"] / 1e9
    # kernel time (CLOCK_MONOTONIC, as bpf_ktime_get_ns) older than FST_STALE_NS, and one that is not
    old, young = time.monotonic_ns() - stale_ns - 10**9, time.monotonic_ns()
    if old <= 0:
        pytest.skip("the machine has been up for less than FST_STALE_NS: no kernel time is that old")
    f = tmp_path / "stale.fst"
    proc = subprocess.Popen([COLLECTOR, "-o", str(f), "--", "sleep", "%g" % (pass_s + 2)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        maps = {}
        deadline = time.time() + 20
        while len(maps) < 3 and time.time() < deadline:
            ids = collector_map_ids(proc.pid)
            shown = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], stdout=subprocess.PIPE,
                                              text=True, check=True).stdout)
            maps = {m["name"]: m for m in shown if m.get("name") in ("bio_starts", "rq_starts", "work_queued")
                    and m["id"] in ids}
            time.sleep(0.1)
        assert len(maps) == 3, maps
        # a bucket is four slots {u64 key, value}: the key is any address-like number; the value's time is where
        # each table's expiry reads it (fst_bio_start.ts_queue, fst_rq_start.ts_issue, the queued work's time)
        slot = {"bio_starts": lambda key, ts: struct.pack("<QQ", key, ts),
                "rq_starts": lambda key, ts: struct.pack("<QQQ", key, 0, ts),
                "work_queued": lambda key, ts: struct.pack("<QQ", key, ts)}
        for name, make in slot.items():
            m = maps[name]
            size = m["bytes_value"] // 4
            full = [make(0xdead0001 + i, young if i == 3 else old) for i in range(4)]
            lone = [make(0xdead0011, old)]
            nb = m["max_entries"]
            for bucket, slots in ((nb - 2, full), (nb - 1, lone)):
                value = b"".join(s + bytes(size - len(s)) for s in slots)
                value += bytes(m["bytes_value"] - len(value))
                subprocess.run(["bpftool", "map", "update", "id", str(m["id"]), "key"]
                               + [str(b) for b in struct.pack("<I", bucket)] + ["value"]
                               + [str(b) for b in value], check=True)
    finally:
        assert proc.wait(timeout=pass_s + 30) == 0, proc.stderr.read()
    ex = results.load(str(f)).header["expired_in_flight"]
    assert (ex["bios"], ex["requests"], ex["work_items"]) == (3, 3, 3), ex
    assert ex["full_buckets_only"]


@pytest.mark.parametrize("build", ["full", "plain"])
def test_task_storage_and_pid_hash_agree(tmp_path, build):
    """Per-task state in task-local storage (chosen here: tp_btf and the map type exist) and in the pid-hash
    fallback (--no-tp-btf) record the same requests of a deterministic workload, each an exact partition; so
    does the plain build of the BPF objects (FSTRACE_BPF_PLAIN: what a kernel without BPF atomics or bpf_loop
    loads), which says so in its header, with its in-flight expiry unavailable and why."""
    from analysis import results
    n = {}
    env = dict(os.environ, **({"FSTRACE_BPF_PLAIN": "1"} if build == "plain" else {}))
    for mode, extra in (("task_storage", []), ("pid_hash", ["--no-tp-btf"])):
        f = tmp_path / (mode + ".fst")
        subprocess.run([COLLECTOR, "-o", str(f), "--records", "all"] + extra +
                       ["--", "sh", "-c", "for i in 1 2 3 4 5 6 7 8; do cat /etc/passwd; done > /dev/null"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        res = results.load(str(f))
        assert res.header["task_state"]["store"] == mode, res.header["task_state"]
        assert res.header["bpf_build"]["build"] == build, res.header["bpf_build"]
        assert ("unavailable" in res.header["expired_in_flight"]) == (build == "plain")
        assert_exact_partition(res)
        req = res["req"]
        passwd = req[req["ino"] == os.stat("/etc/passwd").st_ino]
        read = selection.enum_value(res.header, "req_kind", "read")
        n[mode] = int(((passwd["kind"] == read) & (passwd["ret"] > 0)).sum())
    # each cat reads /etc/passwd in one read that returns data (then one that returns 0)
    assert n["task_storage"] == n["pid_hash"] == 8


def test_work_functions_found_by_the_kernel_and_by_kallsyms_alike(tmp_path):
    """The work functions the programs are configured with, asked of the kernel (bpf_kallsyms_lookup_name, which
    keeps /proc/kallsyms out of load+attach), are found exactly where /proc/kallsyms lists them, as the fallback
    that reads that file finds them.  (Their addresses stay out of the header: they would give away the kernel's
    KASLR offset.  That they are right shows in the loop and erofs work the other tests see charged and named.)"""
    text = {}
    with open("/proc/kallsyms") as f:
        for line in f:
            addr, kind, name = line.split()[:3]
            if kind in "tTwW" and int(addr, 16):
                text.setdefault(name, int(addr, 16))
    found = {}
    for how, env in (("bpf_kallsyms_lookup_name", {}), ("/proc/kallsyms", {"FSTRACE_KSYMS_FROM_PROC": "1"})):
        out = tmp_path / ("%d.fst" % len(found))
        subprocess.run([COLLECTOR, "-o", str(out), "--", "true"], check=True, env=dict(os.environ, **env),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wf = results.load(str(out)).header["work_functions"]
        assert wf["found_by"] == how
        found[how] = wf["found"]
    asked, read = found["bpf_kallsyms_lookup_name"], found["/proc/kallsyms"]
    assert asked == read
    assert asked["loop_workfn"] and asked["z_erofs_decompressqueue_work"]  # built into this kernel
    assert len(asked) == 8
    for name, there in asked.items():
        assert there == (name in text), name


def voluntary_switches(pid):
    """Times task pid went to sleep of its own accord (its waits), from /proc."""
    with open("/proc/%d/status" % pid) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches:"))


def running_child(pid, comm):
    """Whether process pid has a child that runs comm (the collector's command, let go once tracing is attached)."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = f.read().split()
    except OSError:
        return False
    for kid in kids:
        try:
            with open("/proc/%s/comm" % kid) as f:
                if f.read().strip() == comm:
                    return True
        except OSError:
            pass
    return False


@pytest.mark.parametrize("sampled", [False, True])
def test_an_idle_collector_wakes_for_its_deadlines_only(tmp_path, sampled):
    """With nothing to read, the tracing loop sleeps until its next deadline (user/collect.c RB_IDLE_POLL_MS, the
    expiry walk's second): over 3 s of a sleeping command it waits some 12 to 16 times, where a drain every 50 ms
    makes 60.  With --sample-hz (and no --budget windows to hold the request records off) it keeps draining every
    50 ms, so that a request record's process is read while it still runs.  The header says both.  Its signals are
    let in while it waits, so the command's end still ends the trace, and the run says the command ended."""
    out = tmp_path / "r.fst"
    sampling = ["--sample-hz", "49"] if sampled else []
    p = subprocess.Popen([COLLECTOR, "-o", str(out)] + sampling + ["--", "sleep", "8"], stderr=subprocess.PIPE,
                         text=True)
    deadline = time.time() + 120
    while not running_child(p.pid, "sleep"):
        assert p.poll() is None and time.time() < deadline, p.stderr.read() if p.poll() is not None else "no command"
        time.sleep(0.05)
    before = voluntary_switches(p.pid)
    time.sleep(3)
    waits = voluntary_switches(p.pid) - before
    # the count is the loop's alone: the command still ran when it was taken
    assert running_child(p.pid, "sleep")
    err = p.communicate(timeout=120)[1]
    assert p.returncode == 0, err
    assert 40 <= waits <= 90 if sampled else 3 <= waits <= 30, waits
    h = results.load(str(out)).header
    assert (h["reader"]["poll_ms"], h["reader"]["poll_ms_sampled"]) == (250, 50 if sampled else None), h["reader"]
    assert h["workload"]["exit_status"] == 0 and not h["workload"]["interrupted"], h["workload"]
