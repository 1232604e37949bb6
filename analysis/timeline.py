"""A run as a Perfetto trace (timeline.pftrace): protobuf TracePackets of track events, streamed to the file.

Open it at https://ui.perfetto.dev ("Open trace file"); nothing is uploaded, the UI reads it in the browser.

Tracks
  - one per traced thread (under its process): each request a slice, its attribution parts nested inside it
    as slices laid end to end (their durations are measured; their order inside the request is not, it is
    the order of records.h FST_PARTS); decompression units, filesystem cache misses and write compression
    chunks it ran on a child track "in-kernel work" (lanes where they overlap);
  - one per traced block device, with lanes for requests in flight together: each block request a slice
    from queue to completion, with the device phase (issue to completion) nested in it;
  - one per kworker that ran filesystem work: each work item a slice.
Flows, each from the identity one record carries of the other (none is matched by time):
  - request -> the block requests charged to its thread that were queued while it ran;
  - block request -> the work item its completion queued (the work record's io_complete_ns, io_sector and
    io_dev are that block request's io record's ts_complete_ns, sector and dev);
  - work item -> the request whose sleep its kworker ended last (the req record's waker_seq is the work
    record's seq).  It ends on the request's end event: the request began before the work item did, and a
    flow must begin before it ends.
So a slow read leads to its bios, their completion, the decompression it queued, and back to the read.

Size: names are interned, timestamps are deltas of a sequence-scoped incremental clock, and packets are
written in deflated chunks (TracePacket.compressed_packets, as Perfetto's own tracing service writes them).
Memory stays flat: records are visited in time order through a heap of pending slice ends, never collected.
The writer is the `perfetto` package's StreamingTraceProtoBuilder (PyPI, installed into build/venv by
scripts/setup.sh); its TraceProcessor is not used (it downloads a binary at run time).
"""
import heapq
import itertools
import os
import zlib

import numpy as np

from analysis.intervals import records_in_requests
from analysis.selection import dev_name, enum_name
from common.system import INSTALLED, ROOT

SEQ = 1               # the one packet sequence of the trace
CLOCK = 64            # its incremental clock (sequence-scoped clock ids start at 64)
MONOTONIC = 3         # BUILTIN_CLOCK_MONOTONIC: the records' clock (header "clock")
CLEARED, NEEDS_STATE = 1, 2  # TracePacket.sequence_flags
CHUNK = 4096          # packets per deflated chunk
# flow id ranges, one per kind of link (ids are per trace): request -> block request is the block request's
# index + 1; the others are offset past any record index
FLOW_IO_WORK = 1 << 40   # + the work item's index + 1
FLOW_WORK_REQ = 2 << 40  # + the woken request's index + 1
NAME = "timeline.pftrace"
# the writer's pinned PyPI packages: scripts/setup.sh's VENV_PACKAGES, which `make install` copies beside an
# installed package (an installed fstrace has no scripts/)
PACKAGES = open(os.path.join(ROOT, "timeline-packages")).read().split() if INSTALLED else []


def protos():
    """The perfetto package's trace protos and streaming writer, or ImportError saying where they come from."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
        from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder
    except ImportError as e:
        if INSTALLED:  # Debian has neither package: a virtual environment over Debian's Python adds them
            raise ImportError(
                "the timeline needs the Python packages %s from PyPI (Debian has neither): python3 -m venv "
                "--system-site-packages /opt/fstrace-venv && /opt/fstrace-venv/bin/pip install %s, then run "
                "fstrace with FSTRACE_PYTHON=/opt/fstrace-venv/bin/python3 (%s)" % (
                    " and ".join(p.split("=")[0] for p in PACKAGES), " ".join(PACKAGES), e))
        raise ImportError("the timeline needs the Python package perfetto (and protobuf) from build/venv: run "
                          "scripts/setup.sh (%s)" % e)
    return perfetto_trace_pb2, StreamingTraceProtoBuilder


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class Writer:
    """Packets of one sequence: interned event names, incremental timestamps, deflated chunks."""

    def __init__(self, f, t0):
        self.pb, builder = protos()
        self.builder = builder(f)
        self.chunk = []
        self.names = {}
        self.new_names = []
        self.now = t0
        self.packets = 0
        p = self.pb.TracePacket(timestamp=t0, timestamp_clock_id=MONOTONIC, trusted_packet_sequence_id=SEQ,
                                sequence_flags=CLEARED, first_packet_on_sequence=True)
        p.clock_snapshot.clocks.add(clock_id=CLOCK, timestamp=t0, is_incremental=True)
        p.clock_snapshot.clocks.add(clock_id=MONOTONIC, timestamp=t0)
        p.trace_packet_defaults.timestamp_clock_id = CLOCK
        self.emit(p)

    def name(self, text):
        iid = self.names.get(text)
        if iid is None:
            iid = self.names[text] = len(self.names) + 1
            self.new_names.append((iid, text))
        return iid

    def track(self, uuid, name, parent=None, pid=None, tid=None, process=False):
        p = self.pb.TracePacket(trusted_packet_sequence_id=SEQ)
        d = p.track_descriptor
        d.uuid = uuid
        if parent:
            d.parent_uuid = parent
        if process:
            d.process.pid = pid
            d.process.process_name = name
        elif tid is not None:
            d.thread.pid, d.thread.tid, d.thread.thread_name = pid, tid, name
        else:
            d.name = name
        self.emit(p)

    def event(self, ts, kind, track, name=None, flows=(), ends=()):
        """A slice begin (kind 1) or end (kind 2) at ts, which never goes back in time."""
        p = self.pb.TracePacket(timestamp=max(ts - self.now, 0), trusted_packet_sequence_id=SEQ,
                                sequence_flags=NEEDS_STATE)
        self.now = max(ts, self.now)
        e = p.track_event
        e.type = kind
        e.track_uuid = track
        if name is not None:
            e.name_iid = self.name(name)
        if flows:
            e.flow_ids.extend(flows)
        if ends:
            e.terminating_flow_ids.extend(ends)
        self.emit(p)

    def emit(self, p):
        if self.new_names:
            for iid, text in self.new_names:
                p.interned_data.event_names.add(iid=iid, name=text)
            self.new_names = []
        raw = p.SerializeToString()
        self.chunk.append(b"\x0a" + _varint(len(raw)) + raw)  # Trace.packet (field 1), as in a Trace message
        self.packets += 1
        if len(self.chunk) >= CHUNK:
            self.flush()

    def flush(self):
        if self.chunk:
            self.builder.write_packet(self.pb.TracePacket(compressed_packets=zlib.compress(b"".join(self.chunk), 9)))
            self.chunk = []


class Lanes:
    """Tracks of one group (a device, a thread's in-kernel work): the first slice free at a start takes it."""

    def __init__(self, w, uuids, name, parent):
        self.w, self.uuids, self.name, self.parent = w, uuids, name, parent
        self.free = []    # (end, lane) of lanes whose slice has ended or will
        self.lanes = []   # uuid per lane

    def take(self, start, end):
        if self.free and self.free[0][0] <= start:
            _, lane = heapq.heappop(self.free)
        else:
            lane = len(self.lanes)
            self.lanes.append(next(self.uuids))
            self.w.track(self.lanes[lane], "%s%s" % (self.name, " (%d)" % (lane + 1) if lane else ""), self.parent)
        heapq.heappush(self.free, (end, lane))
        return self.lanes[lane]


def _comm(rec):
    return bytes(rec["comm"]).rstrip(b"\0").decode(errors="replace")


def _sorted(records, key):
    return records[np.argsort(records[key], kind="stable")] if records is not None and len(records) else ()


def _grouped(keys):
    """{key: [indices with that key]} of a vector of keys, -1 = none."""
    out = {}
    for i in np.nonzero(keys >= 0)[0].tolist():
        out.setdefault(int(keys[i]), []).append(i)
    return out


def io_of_work(io, work):
    """Index into io of the block request whose completion queued each work item, -1 when none did or its
    record is not there: the one io record with the work record's (io_complete_ns, io_sector, io_dev)."""
    out = np.full(len(work), -1, dtype=np.int64)
    if io is None or not len(io) or "io_complete_ns" not in work.dtype.names:
        return out
    order = np.argsort(io["ts_complete_ns"], kind="stable")
    done = io["ts_complete_ns"][order]
    caused = np.nonzero(work["io_complete_ns"] > 0)[0]
    lo = np.searchsorted(done, work["io_complete_ns"][caused], "left")
    hi = np.searchsorted(done, work["io_complete_ns"][caused], "right")
    for k, a, b in zip(caused.tolist(), lo.tolist(), hi.tolist()):
        for j in order[a:b]:  # one, unless two devices completed in the same nanosecond
            if io["dev"][j] == work["io_dev"][k] and io["sector"][j] == work["io_sector"][k]:
                out[k] = j
                break
    return out


def io_start_ns(io):
    """When each block request began: its first bio's queue time, else (queued before tracing) its completion."""
    return np.where(io["ts_queue_ns"] > 0, io["ts_queue_ns"], io["ts_complete_ns"])


def request_of_io(req, io):
    """Index into req of the request each block request was queued in (charged to its thread and begun while the
    request ran), -1 when none."""
    return records_in_requests(req, io["pid"], io_start_ns(io))


def waker_of_request(req, work):
    """Index into work of the work item whose kworker woke each request last, -1 when none did or its record
    is not there: the req record's waker_seq is the work record's seq."""
    out = np.full(len(req), -1, dtype=np.int64)
    if work is None or not len(work) or "waker_seq" not in req.dtype.names:
        return out
    order = np.argsort(work["seq"], kind="stable")
    seqs = work["seq"][order]
    k = np.searchsorted(seqs, req["waker_seq"])
    inside = k < len(seqs)
    hit = np.zeros(len(req), dtype=bool)
    hit[inside] = (seqs[k[inside]] == req["waker_seq"][inside]) & (req["waker_seq"][inside] > 0)
    out[hit] = order[k[hit]]
    return out


class Slices:
    """The slices of a trace, one source per kind of record (requests, block requests, work items, in-kernel work),
    each a generator in start order, and the tracks they go on: a thread's track made as its first slice comes."""

    def __init__(self, res, w, uuids):
        self.res, self.h, self.w, self.uuids = res, res.header, w, uuids
        self.req, self.io = res.records.get("req"), res.records.get("io")
        self.work = _sorted(res.records.get("work"), "ts_start_ns")
        self.threads, self.procs = {}, {}
        self.last_comm = {}  # a traced thread's name as of its last request (its first may predate an exec)
        req, io, work = self.req, self.io, self.work
        if req is not None and len(req):
            late = req[np.argsort(req["ts_end_ns"], kind="stable")[::-1]]
            _, first = np.unique(late["pid"], return_index=True)
            self.last_comm = {int(late["pid"][k]): _comm(late[k]) for k in first}
        # request -> block requests charged to its thread and queued while it ran (flow id: block request index + 1)
        self.owner = None
        if req is not None and len(req) and io is not None and len(io):
            self.owner = request_of_io(req, io)
            owned = np.nonzero(self.owner >= 0)[0]
            self.by_owner = owned[np.argsort(self.owner[owned], kind="stable")]
            self.owner_keys = self.owner[self.by_owner]
        # block request -> the work items its completion queued; work item -> the requests it woke
        self.cause = io_of_work(io, work) if len(work) else np.zeros(0, dtype=np.int64)
        self.queued_by = _grouped(self.cause)
        self.waker = waker_of_request(req, work) if req is not None and len(req) else np.zeros(0, dtype=np.int64)
        self.woke = _grouped(self.waker)

    def thread_track(self, rec):
        pid = int(rec["pid"])
        if pid not in self.threads:
            tgid = int(rec["tgid"]) if "tgid" in rec.dtype.names else pid
            if tgid not in self.procs:
                self.procs[tgid] = next(self.uuids)
                self.w.track(self.procs[tgid], self.last_comm.get(tgid, _comm(rec)), pid=tgid, process=True)
            self.threads[pid] = next(self.uuids)
            self.w.track(self.threads[pid], self.last_comm.get(pid, _comm(rec)), self.procs[tgid], pid=tgid,
                         tid=pid)
        return self.threads[pid]

    def flows_of(self, i):
        if self.owner is None:
            return ()
        lo, hi = np.searchsorted(self.owner_keys, i, "left"), np.searchsorted(self.owner_keys, i, "right")
        return (self.by_owner[lo:hi] + 1).tolist()

    def requests(self):
        req = self.req
        if req is None or not len(req):
            return
        parts = [p for p in self.res.schema.parts if p in req.dtype.names]
        for i in np.argsort(req["ts_start_ns"], kind="stable"):
            r = req[i]
            s, e = int(r["ts_start_ns"]), max(int(r["ts_end_ns"]), int(r["ts_start_ns"]))
            children, t = [], s
            for p in parts:
                d = int(r[p])
                if d > 0 and t < e:
                    children.append((t, min(t + d, e), p[:-3]))
                    t += d
            yield (s, e, self.thread_track(r), enum_name(self.h, "req_kind", r["kind"]), children,
                   self.flows_of(i), (), (FLOW_WORK_REQ + int(i) + 1,) if self.waker[i] >= 0 else ())

    def block_requests(self):
        res, io, devices = self.res, self.io, {}
        read_op = res.io_op("read")
        ops = res.io_ops(io) if io is not None and len(io) else ()
        start = io_start_ns(io) if len(ops) else ()
        for i in np.argsort(start, kind="stable") if len(ops) else ():
            b = io[i]
            dev = int(b["dev"])
            if dev not in devices:
                top = next(self.uuids)
                self.w.track(top, "block device %s" % dev_name(dev, res.minor_bits))
                devices[dev] = Lanes(self.w, self.uuids, "requests %s" % dev_name(dev, res.minor_bits), top)
            s, e = int(start[i]), int(b["ts_complete_ns"])
            issue = int(b["ts_issue_ns"])
            children = [(issue, e, "device")] if s <= issue <= e else []
            owned = self.owner is not None and self.owner[i] >= 0
            yield (s, e, devices[dev].take(s, e),
                   "%s %d KiB" % ("R" if ops[i] == read_op else "W", int(b["bytes"]) // 1024), children,
                   [FLOW_IO_WORK + k + 1 for k in self.queued_by.get(int(i), ())], (int(i) + 1,) if owned else (), ())

    def work_items(self):
        for k, r in enumerate(self.work):
            yield (int(r["ts_start_ns"]), int(r["ts_end_ns"]), self.thread_track(r),
                   enum_name(self.h, "work_kind", r["kind"]), [], [FLOW_WORK_REQ + i + 1 for i in self.woke.get(k, ())],
                   (FLOW_IO_WORK + k + 1,) if self.cause[k] >= 0 else (), ())

    def in_kernel_kinds(self):
        """[(records in start order, their slice's name)] of decompression units, cache misses (hits are
        sub-microsecond and would bury the track) and write compression chunks."""
        h, res, kinds = self.h, self.res, []
        dec = res.records.get("decomp")
        if dec is not None and len(dec):
            kinds.append((_sorted(dec, "ts_start_ns"), lambda d: "decompress %s %s" % (
                enum_name(h, "fs", d["fs"]), enum_name(h, "alg", d["alg"]))))
        cache = res.records.get("fs_cache")
        if cache is not None and len(cache):
            kinds.append((_sorted(cache[cache["missed"] != 0], "ts_start_ns"),
                          lambda c: "%s cache miss" % enum_name(h, "fs_cache", c["cache"])))
        comp = res.records.get("compress")
        if comp is not None and len(comp):
            kinds.append((_sorted(comp, "ts_start_ns"), lambda c: "compress %s %s" % (
                enum_name(h, "fs", c["fs"]), enum_name(h, "alg", c["alg"]))))
        return kinds

    def in_kernel_work(self):
        """Decompression units, cache misses and write compression chunks, on the thread that ran them."""
        groups = {}

        def stream(n, recs, label):  # binds n and label now: a generator in the comprehension saw the last kind's
            return ((int(r["ts_start_ns"]), n, r, label) for r in recs)
        streams = [stream(n, recs, label) for n, (recs, label) in enumerate(self.in_kernel_kinds())]
        for s, _, r, label in heapq.merge(*streams, key=lambda x: x[0]):
            pid = int(r["pid"])
            if pid not in groups:
                groups[pid] = Lanes(self.w, self.uuids, "in-kernel work", self.thread_track(r))
            e = max(int(r["ts_end_ns"]), s)
            yield (s, e, groups[pid].take(s, e), label(r), [], (), (), ())


def slices(res, w, uuids):
    """(start, end, track, name, children [(start, end, name)], flow ids, terminating flow ids, terminating flow
    ids of its end event) of every slice, by start time: merged from each kind's records in start order."""
    src = Slices(res, w, uuids)
    return heapq.merge(src.requests(), src.block_requests(), src.work_items(), src.in_kernel_work(),
                       key=lambda x: x[0])


def write(res, path):
    """Write the trace to path; returns {"packets", "bytes", "flows"}."""
    t0 = int(res.header["time"]["start_ns"])
    counts = {"flows": 0}
    protos()  # before the file is made: without the writer's packages there is no timeline, not an empty one
    with open(path, "wb") as f:
        w = Writer(f, t0)
        uuids = itertools.count(1)
        pending = []  # (ts, order, track, kind, name, terminating flow ids): begins and ends not yet due
        order = itertools.count()

        def due(until):
            while pending and pending[0][0] <= until:
                ts, _, track, kind, name, ends = heapq.heappop(pending)
                w.event(ts, kind, track, name, ends=ends)

        for s, e, track, name, children, flows, ends, end_ends in slices(res, w, uuids):
            due(s)
            w.event(s, 1, track, name, flows, ends)
            counts["flows"] += len(flows)
            for cs, ce, cname in children:
                heapq.heappush(pending, (cs, next(order), track, 1, cname, ()))
                heapq.heappush(pending, (ce, next(order), track, 2, None, ()))
            heapq.heappush(pending, (e, next(order), track, 2, None, end_ends))
        due(float("inf"))
        w.flush()
        counts["packets"] = w.packets
        counts["bytes"] = f.tell()
    return counts


def read(path):
    """A trace write() wrote, decoded: ({track uuid: (name, parent uuid)}, [slice]), each slice a dict of track,
    name, start, end (ns, the records' clock), depth, the flow ids it starts ("flows") and ends ("ends") on its
    begin or end event, and "flow_at": {flow id: the position in the trace of the event that carries it}
    (Perfetto links a flow only from an earlier event to a later one).  For tests and checks: it holds every
    slice in memory."""
    pb, _ = protos()
    outer = pb.Trace()
    with open(path, "rb") as f:
        outer.ParseFromString(f.read())
    tracks, out, open_ = {}, [], {}
    names = {}
    now = None
    events = 0
    for wrapper in outer.packet:
        inner = pb.Trace()
        inner.ParseFromString(zlib.decompress(wrapper.compressed_packets))
        for p in inner.packet:
            for n in p.interned_data.event_names:
                names[n.iid] = n.name
            if p.HasField("clock_snapshot"):
                now = next(c.timestamp for c in p.clock_snapshot.clocks if c.clock_id == CLOCK)
                continue
            if p.HasField("track_descriptor"):
                d = p.track_descriptor
                tracks[d.uuid] = (d.thread.thread_name or d.process.process_name or d.name,
                                  d.parent_uuid if d.HasField("parent_uuid") else None)
                continue
            if not p.HasField("track_event"):
                continue
            now += p.timestamp
            events += 1
            e = p.track_event
            stack = open_.setdefault(e.track_uuid, [])
            if e.type == 1:
                stack.append({"track": e.track_uuid, "name": names[e.name_iid], "start": now, "depth": len(stack),
                              "flows": [], "ends": [], "flow_at": {}})
                s = stack[-1]
            elif e.type == 2:
                s = stack.pop()
                s["end"] = now
                out.append(s)
            else:
                continue
            s["flows"] += e.flow_ids
            s["ends"] += e.terminating_flow_ids
            s["flow_at"].update((f, events) for f in list(e.flow_ids) + list(e.terminating_flow_ids))
    return tracks, out
