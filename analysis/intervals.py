"""Intervals and events in time or on a device (pure numpy functions): which request an event fell in, how many
intervals overlap a query, the bytes a union of intervals covers.
"""
import numpy as np


def union_bytes(starts, ends):
    """Bytes covered by the union of the intervals [starts, ends): what was read at least once."""
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order].astype(np.int64), ends[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    # an interval adds what lies beyond the furthest end of those that start before it
    prev = np.concatenate([[s[0]], reach[:-1]])
    return int(np.maximum(e - np.maximum(s, prev), 0).sum())


def overlap_counts(starts, ends, qs, qe):
    """How many of the intervals [starts, ends) overlap each query [qs, qe)."""
    s, e = np.sort(starts), np.sort(ends)
    return np.searchsorted(s, qe, side="left") - np.searchsorted(e, qs, side="right")


def records_in_requests(reqs, pids, ts):
    """Index into reqs of the request each (pid, ts) event fell in, -1 outside any request.  One sort of requests
    and events together (by pid, then time, a request before an event at its start): an event's request is the
    last request before it in that order, if it is the event's thread's and has not ended -- no pass per thread,
    which forks churned through by the million would make quadratic."""
    n, m = len(reqs), len(ts)
    out = np.full(m, -1, dtype=np.int64)
    if not n or not m:
        return out
    pid = np.concatenate([reqs["pid"].astype(np.int64), np.asarray(pids, dtype=np.int64)])
    at = np.concatenate([reqs["ts_start_ns"].astype(np.uint64), np.asarray(ts, dtype=np.uint64)])
    is_event = np.concatenate([np.zeros(n, dtype=np.int8), np.ones(m, dtype=np.int8)])
    order = np.lexsort((is_event, at, pid))
    # the position in that order of the latest request at or before each position (-1 before any)
    last_req = np.maximum.accumulate(np.where(order < n, np.arange(n + m), -1))
    events = order >= n
    ev, at_req = order[events] - n, last_req[events]
    ok = at_req >= 0
    ev, k = ev[ok], order[at_req[ok]]
    hit = (reqs["pid"][k].astype(np.int64) == np.asarray(pids, dtype=np.int64)[ev]) & \
        (np.asarray(ts, dtype=np.uint64)[ev] <= reqs["ts_end_ns"][k].astype(np.uint64))
    out[ev[hit]] = k[hit]
    return out


def covered_bytes(starts, ends, qs, qe):
    """Bytes of each query [qs, qe) that lie inside the union of the intervals [starts, ends)."""
    qs, qe = np.asarray(qs, dtype=np.int64), np.asarray(qe, dtype=np.int64)
    if not len(starts):
        return np.zeros(len(qs), dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[order].astype(np.int64), np.asarray(ends)[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    first = np.concatenate([[True], s[1:] > reach[:-1]])  # each starts a disjoint piece of the union
    ms, me = s[first], np.maximum.reduceat(e, np.nonzero(first)[0])
    before = np.concatenate([[0], np.cumsum(me - ms)])  # the union's bytes in the pieces before each

    def upto(x):  # the union's bytes below x
        k = np.searchsorted(ms, x, side="right")
        j = np.maximum(k - 1, 0)
        return np.where(k > 0, before[j] + np.clip(x - ms[j], 0, me[j] - ms[j]), 0)
    return upto(qe) - upto(qs)
