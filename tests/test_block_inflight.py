"""Block requests' in-flight state against what the kernel and the workload say: a request held in flight
longer than any age limit, a bio waiting as long for a request, a request requeued, and a request address issued
again after its completion went unseen.

The device is a loop device in direct-I/O mode on a file of tests/slow_disk.py's FUSE file system, which holds a
read as long as the test says, or returns it short: every block request is one read there, and the loop driver
completes a short read in part and requeues the rest (drivers/block/loop.c lo_complete_rq)."""
import json
import os
import subprocess
import time

import pytest

from analysis import results
from analysis import devices, selection
from conftest import COLLECTOR, assert_exact_partition, map_entries, map_of, map_update
from slow_disk import expected, slow_loop

pytestmark = pytest.mark.bpf

# the workload: O_DIRECT reads of the loop device, each (offset, size) in its own thread when "threads" is set,
# with each read's thread, bytes, start and end (CLOCK_MONOTONIC, the clock of every record) written to OUT;
# "after" waits for a file before reading, "wait_held" for the FUSE server's held-OFF files of the reads before
READER = r"""
import json, mmap, os, sys, threading, time
dev, out, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
done = []
def read(off, size, gate=None):
    while gate and not os.path.exists(gate):
        time.sleep(0.01)
    buf = mmap.mmap(-1, size)
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    t0 = time.monotonic_ns()
    n = os.preadv(fd, [buf], off)
    t1 = time.monotonic_ns()
    os.close(fd)
    done.append({"off": off, "tid": threading.get_native_id(), "t0": t0, "t1": t1, "n": n, "data": buf[:n].hex()})
threads = []
for r in plan["reads"]:
    for held in r.get("wait_held", []):
        while not os.path.exists(os.path.join(plan["state"], "held-%d" % held)):
            time.sleep(0.01)
    if plan.get("threads"):
        threads.append(threading.Thread(target=read, args=(r["off"], r["size"], r.get("after"))))
        threads[-1].start()
    else:
        read(r["off"], r["size"], r.get("after"))
for t in threads:
    t.join()
json.dump(done, open(out, "w"))
"""


def collector_args(out, dev):
    rdev = os.stat(dev).st_rdev
    return [COLLECTOR, "-o", str(out), "--records", "all", "-d", "%d:%d" % (os.major(rdev), os.minor(rdev))]


def trace_reads(tmp_path, dev, state, plan, build="full"):
    """The collector around READER with plan: (results, the reads as READER wrote them).  build "plain": the
    plain build of the BPF objects (FSTRACE_BPF_PLAIN; chosen by itself where the kernel lacks BPF atomics or
    bpf_loop), whose in-flight tables are hash maps."""
    out, done = tmp_path / "r.fst", tmp_path / "reads.json"
    plan = dict(plan, state=state)
    env = dict(os.environ, **({"FSTRACE_BPF_PLAIN": "1"} if build == "plain" else {}))
    subprocess.run(collector_args(out, dev) + ["--", "/usr/bin/python3", "-c", READER, dev, str(done),
                                               json.dumps(plan)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    res = results.load(str(out))
    assert res.header["bpf_build"]["build"] == build, res.header["bpf_build"]
    return res, json.load(open(done))


def server_reads(state):
    with open(os.path.join(state, "reads")) as f:
        return [tuple(int(x) for x in line.split()) for line in f]


def read_request(res, r):
    """The req record of READER's read r."""
    req = res["req"]
    mine = req[(req["pid"] == r["tid"]) & (req["kind"] == selection.enum_value(res.header, "req_kind", "read"))
               & (req["ret"] == r["n"]) & (req["ts_start_ns"] <= r["t1"]) & (req["ts_end_ns"] >= r["t0"])]
    assert len(mine) == 1, mine
    return mine[0]


@pytest.mark.parametrize("build", ["full", "plain"])
def test_a_requeued_request_is_one_request(tmp_path, build):
    """A short read of the loop device's backing file: the loop driver completes the part it got and requeues
    the rest, which is issued again.  That is one block request (as /proc/diskstats counts it): one io record of
    all its bytes, from its first sector, requeued once, charged to its reader, and no completion missed; the
    same with the plain build's in-flight tables."""
    off, size = 1 << 20, 8192
    with slow_loop(tmp_path, "--short", str(off)) as (dev, kdev, state):
        res, reads = trace_reads(tmp_path, dev, state, {"reads": [{"off": off, "size": size}]}, build)
        fuse = server_reads(state)
    [r] = reads
    # the workload got every byte, and the device was read twice: the short read, then the rest
    assert r["n"] == size and bytes.fromhex(r["data"]) == expected(off, size)
    assert fuse == [(off, size), (off + size // 2, size // 2)]
    io = res["io"][res["io"]["dev"] == kdev]
    assert len(io) == 1, io
    [rec] = io
    assert (rec["sector"], rec["bytes"], rec["nr_requeues"], rec["nr_bios"]) == (off // 512, size, 1, 1)
    assert rec["pid"] == r["tid"] and rec["error"] == 0
    req = read_request(res, r)
    assert req["ts_start_ns"] <= rec["ts_queue_ns"] <= rec["ts_issue_ns"] <= rec["ts_complete_ns"] <= \
        req["ts_end_ns"]
    assert req["nr_ios"] == 1 and req["io_bytes"] == size
    # the kernel's own count of the device's reads over the run: one request, its sectors
    d = devices.device_stats(res)["%d:%d" % (kdev >> 20, kdev & 0xFFFFF)]
    assert d["diskstats_delta"]["reads"] == d["requests_in_window"] == 1
    assert d["diskstats_delta"]["sectors_read"] == size // 512 and d["unseen_requests"] == 0
    assert d["traced_beyond_diskstats"] == 0 and d["requeued"] == 1
    assert not any(res.header["losses"].values()), res.header["losses"]


HOLD_S = 12  # longer than any age at which in-flight state may be taken for lost (it was 10 s)


def test_io_in_flight_longer_than_any_age_limit_stays_in_flight(tmp_path):
    """Four reads the device holds 12 s take the loop device's four requests (nr_requests 4), so a fifth read's
    bio waits for a request until one of them completes: four requests in flight 12 s and a bio queued as long.
    None of it is expired or lost: each io record is charged to its reader with its real queue and issue times,
    and each held read's I/O wait covers the hold."""
    held = [(1 + i) << 20 for i in range(4)]
    fifth = 5 << 20
    hold_args = [a for o in held for a in ("--hold", "%d=%d" % (o, HOLD_S))]
    with slow_loop(tmp_path, "--size", str(8 << 20), *hold_args, nr_requests=4) as (dev, kdev, state):
        plan = {"threads": True, "reads": [{"off": o, "size": 4096} for o in held]
                + [{"off": fifth, "size": 4096, "wait_held": held}]}
        res, reads = trace_reads(tmp_path, dev, state, plan)
    by_off = {r["off"]: r for r in reads}
    assert sorted(by_off) == held + [fifth]
    for r in reads:
        assert r["n"] == 4096 and bytes.fromhex(r["data"]) == expected(r["off"], 4096)
    for o in held:  # the device held each as long as it was told
        assert by_off[o]["t1"] - by_off[o]["t0"] >= HOLD_S * 10**9
    ex = res.header["expired_in_flight"]
    assert (ex["bios"], ex["requests"]) == (0, 0), ex
    assert not any(res.header["losses"].values()), res.header["losses"]
    io = res["io"][res["io"]["dev"] == kdev]
    assert sorted(int(s) * 512 for s in io["sector"]) == held + [fifth]
    direct = selection.enum_value(res.header, "charge", "direct")
    for rec in io:
        r = by_off[int(rec["sector"]) * 512]
        req = read_request(res, r)
        assert rec["pid"] == r["tid"] and rec["charge"] == direct and rec["nr_bios"] == 1
        assert req["ts_start_ns"] <= rec["ts_queue_ns"] <= rec["ts_issue_ns"] <= rec["ts_complete_ns"] <= \
            req["ts_end_ns"]
        if r["off"] in held:  # asleep for its I/O the whole hold, within the read the workload timed
            assert HOLD_S * 10**9 <= req["io_wait_ns"] <= r["t1"] - r["t0"]
    # the fifth bio was queued while the four requests were held and got its request when the first ended
    first_done = io[io["sector"] != fifth // 512]["ts_complete_ns"].min()
    [f] = io[io["sector"] == fifth // 512]
    assert f["ts_queue_ns"] < first_done <= f["ts_issue_ns"]
    assert_exact_partition(res)


def wait_for(path, proc, timeout=60):
    """Until path exists (the workload or the FUSE server made it); the collector proc still running."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "%s never appeared" % path
        time.sleep(0.01)


def requests_in_flight(m):
    """{request address: (bucket key, bucket value)} of the block requests in flight table m (rq_starts: buckets
    of four slots, each a u64 key and its value)."""
    slot = m["bytes_value"] // 4
    out = {}
    for k, v in map_entries(m).items():
        for i in range(4):
            addr = int.from_bytes(v[i * slot:i * slot + 8], "little")
            if addr:
                out[addr] = (k, v)
    return out


def test_a_request_address_issued_again_after_an_unseen_completion(tmp_path):
    """A completion the kernel does not deliver to BPF (it happens: docs/measuring.md, lost events) leaves the
    request's in-flight state behind, and blk-mq issues the same request address again (a device's requests are
    preallocated, one per tag).  Issued again with no requeue between, it is a new request, and the earlier
    completion counts as missed.  The unseen completions are made here: with nr_requests 4, four held reads take
    every request the loop device has; their in-flight state is copied from the collector's maps, and written
    back once they completed, as if none of those completions had been seen.  A fifth read then gets one of those
    four requests (the test checks it does), and is its own request."""
    held = [(1 + i) << 20 for i in range(4)]
    fifth = 5 << 20
    hold_args = [a for o in held + [fifth] for a in ("--hold-until-released", str(o))]
    with slow_loop(tmp_path, "--size", str(8 << 20), *hold_args, nr_requests=4) as (dev, kdev, state):
        out, done = tmp_path / "r.fst", tmp_path / "reads.json"
        go = os.path.join(state, "go")
        plan = {"threads": True, "state": state, "reads": [{"off": o, "size": 4096} for o in held]
                + [{"off": fifth, "size": 4096, "after": go}]}
        proc = subprocess.Popen(collector_args(out, dev) + ["--", "/usr/bin/python3", "-c", READER, dev,
                                                             str(done), json.dumps(plan)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

        def release(o):
            open(os.path.join(state, "release-%d" % o), "w").close()

        try:
            for o in held:
                wait_for(os.path.join(state, "held-%d" % o), proc)
            rq_starts, inflight = map_of(proc.pid, "rq_starts"), map_of(proc.pid, "task_inflight")
            flight = requests_in_flight(rq_starts)
            assert len(flight) == 4  # every request of the device
            # the readers' in-flight counts: the table's buckets that hold any (an array: every bucket is an entry)
            counts = {k: v for k, v in map_entries(inflight).items() if any(v)}
            assert counts
            for o in held:
                release(o)
            deadline = time.monotonic() + 60
            while requests_in_flight(rq_starts):  # their completions were seen
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            for bucket, value in flight.values():
                map_update(rq_starts, bucket, value)
            for bucket, value in counts.items():
                map_update(inflight, bucket, value)
            open(go, "w").close()
            wait_for(os.path.join(state, "held-%d" % fifth), proc)
            assert set(requests_in_flight(rq_starts)) == set(flight)  # the fifth read took one of the four
        finally:
            for o in held + [fifth]:
                release(o)
            open(go, "w").close()
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
    res, reads = results.load(str(out)), json.load(open(done))
    io = res["io"][res["io"]["dev"] == kdev]
    assert sorted(int(s) * 512 for s in io["sector"]) == held + [fifth]
    for r in reads:  # each record its read's alone: its own bio, queued and issued in its read
        [rec] = io[io["sector"] == r["off"] // 512]
        req = read_request(res, r)
        assert rec["pid"] == r["tid"] and rec["nr_bios"] == 1
        assert req["ts_start_ns"] <= rec["ts_queue_ns"] <= rec["ts_issue_ns"] <= rec["ts_complete_ns"] <= \
            req["ts_end_ns"]
    assert not io["nr_requeues"].any()
    losses = res.header["losses"]
    assert losses["request_completion_missed"] == 1
    assert not any(v for k, v in losses.items() if k != "request_completion_missed"), losses
    ex = res.header["expired_in_flight"]
    assert (ex["bios"], ex["requests"]) == (0, 0), ex
