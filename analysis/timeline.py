"""A run as a Perfetto-loadable timeline (Chrome trace event JSON): pure function from Results to a dict.

Tracks: one per traced thread (its requests, with their attribution in args), one per block device (its
requests, Q->C), one per kworker (filesystem work items); decompression units, filesystem cache misses and
write compression chunks, where they were measured, on the thread that ran them; flows link each request to the block requests charged to its thread while it ran.
"""
import json

import numpy as np

from analysis.summary import ATTRIBUTION_PARTS, dev_name, enum_name, enum_value


def _us(ns, t0):
    return (int(ns) - t0) / 1000.0


def build(res):
    h = res.header
    t0 = int(h["time"]["start_ns"])
    ev = []
    req = res.records.get("req")
    io = res.records.get("io")
    work = res.records.get("work")
    dec = res.records.get("decomp")
    ev.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "requests (traced threads)"}})
    ev.append({"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "block devices"}})
    ev.append({"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "kworkers (filesystem work)"}})
    flow = 0
    if req is not None and len(req):
        for r in req:
            args = {p[:-3]: int(r[p]) / 1000.0 for p in ATTRIBUTION_PARTS}
            args.update(bytes=int(r["ret"]), ino=int(r["ino"]), block_requests=int(r["nr_ios"]))
            ev.append({"ph": "X", "pid": 1, "tid": int(r["pid"]), "ts": _us(r["ts_start_ns"], t0),
                       "dur": max((int(r["ts_end_ns"]) - int(r["ts_start_ns"])) / 1000.0, 0.001),
                       "name": enum_name(h, "req_kind", r["kind"]), "cat": "request", "args": args})
    if io is not None and len(io):
        # per thread, its requests by start time: the request running when a block request was queued
        by_pid = {}
        if req is not None and len(req):
            for pid in np.unique(req["pid"]):
                mine = req[req["pid"] == pid]
                mine = mine[np.argsort(mine["ts_start_ns"])]
                by_pid[int(pid)] = (mine["ts_start_ns"], mine["ts_end_ns"])
        read_op = res.io_op("read")
        for b, op in zip(io, res.io_ops(io)):
            start = int(b["ts_queue_ns"]) or int(b["ts_complete_ns"])
            ev.append({"ph": "X", "pid": 2, "tid": int(b["dev"]), "ts": _us(start, t0),
                       "dur": max((int(b["ts_complete_ns"]) - start) / 1000.0, 0.001),
                       "name": "%s %d KiB" % ("R" if op == read_op else "W", int(b["bytes"]) // 1024),
                       "cat": "block", "args": {"sector": int(b["sector"]), "bytes": int(b["bytes"]),
                                                "charged_pid": int(b["pid"]), "bios": int(b["nr_bios"])}})
            spans = by_pid.get(int(b["pid"]))
            if spans is not None:
                k = int(np.searchsorted(spans[0], start, side="right")) - 1
                if k >= 0 and spans[1][k] >= start:
                    flow += 1
                    ev.append({"ph": "s", "id": flow, "pid": 1, "tid": int(b["pid"]), "ts": _us(start, t0),
                               "name": "issued", "cat": "flow"})
                    ev.append({"ph": "f", "bp": "e", "id": flow, "pid": 2, "tid": int(b["dev"]),
                               "ts": _us(start, t0), "name": "issued", "cat": "flow"})
        for d in np.unique(io["dev"]):
            ev.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": int(d), "args": {"name": dev_name(d, res.minor_bits)}})
    if work is not None and len(work):
        for w in work:
            ev.append({"ph": "X", "pid": 3, "tid": int(w["pid"]), "ts": _us(w["ts_start_ns"], t0),
                       "dur": max((int(w["ts_end_ns"]) - int(w["ts_start_ns"])) / 1000.0, 0.001),
                       "name": enum_name(h, "work_kind", w["kind"]), "cat": "work",
                       "args": {"queued_us_before": ((int(w["ts_start_ns"]) - int(w["ts_queue_ns"])) / 1000.0
                                                     if w["ts_queue_ns"] else None)}})
    def slice_on_thread(r, traced, name, cat, args):
        """A span of kernel work on the thread that ran it: the request track if traced, else the kworker's."""
        ev.append({"ph": "X", "pid": 1 if traced else 3, "tid": int(r["pid"]), "ts": _us(r["ts_start_ns"], t0),
                   "dur": max((int(r["ts_end_ns"]) - int(r["ts_start_ns"])) / 1000.0, 0.001),
                   "name": name, "cat": cat, "args": args})

    for d in dec if dec is not None else ():
        slice_on_thread(d, d["charged_pid"] != 0,
                        "decompress %s %s" % (enum_name(h, "fs", d["fs"]), enum_name(h, "alg", d["alg"])),
                        "decompression", {"in": int(d["in_bytes"]), "out": int(d["out_bytes"])})
    # misses only: hits are sub-microsecond and would bury the track
    cache = res.records.get("fs_cache")
    for c in cache[cache["missed"] != 0] if cache is not None else ():
        slice_on_thread(c, c["charged_pid"] != 0, "%s cache miss" % enum_name(h, "fs_cache", c["cache"]),
                        "cache miss", {"block": int(c["block"]), "bytes": int(c["bytes"])})
    comp = res.records.get("compress")
    for c in comp if comp is not None else ():
        slice_on_thread(c, c["context"] == enum_value(h, "context", "traced task"),
                        "compress %s %s" % (enum_name(h, "fs", c["fs"]), enum_name(h, "alg", c["alg"])),
                        "compression", {"ino": int(c["ino"]), "file_pos": int(c["file_pos"]),
                                        "in": int(c["in_bytes"]), "out": int(c["out_bytes"]), "ret": int(c["ret"])})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"kernel": h["kernel"]["release"], "workload": res.config.get("workload"),
                          "label": res.config.get("label")}}


def write(res, path):
    with open(path, "w") as f:
        json.dump(build(res), f)
