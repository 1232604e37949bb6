"""Waiting that is not the device's: kworkers running filesystem work for the traced requests, contended
sleeping locks, and the kernel's own per-thread blkio delay beside fstrace's I/O wait.
"""
import numpy as np

from analysis import sampling
from analysis.hist import percentiles
from analysis.selection import by_thread, enum_name, probe_tier
from analysis.windows import in_windows, probe_windows, sampled_count, window_weights


def lock_wait(res, reqs):
    """Time requests slept on contended sleeping locks, or why it is unknown."""
    p = probe_tier(res, "contention_begin")
    if not p or p["tier"] == "unavailable" or "lock_ns" not in reqs.dtype.names:
        return {"available": False, "why": (p or {}).get("why") or "this collector has no lock probe"}
    waited = reqs[reqs["lock_ns"] > 0]
    return {"available": True, "tier": p["tier"], "ns": int(reqs["lock_ns"].sum()),
            "spin_estimate": sampling.lock_spin_estimate(res.header),
            "waits": int(reqs["nr_lock_waits"].sum()), "requests_waiting": int(len(waited)),
            "wait_us": percentiles(waited["lock_ns"] / 1e3) if len(waited) else None,
            "method": "switched out between lock:contention_begin and contention_end (mutex, rwsem, "
                      "rt-mutex, percpu-rwsem); spin_estimate: on-CPU spinning for locks (part of oncpu_ns), "
                      "from samples"}


def work_unlinked(res, w):
    """Which work items fstrace's devices and requests did not cause: of the kinds queued from a block request's
    completion (results header work_kinds_from_completion), those that name no traced block request and woke no
    traced request (another device's, or queued before tracing).  Older results: none."""
    from_completion = res.header.get("work_kinds_from_completion") or []
    names = w.dtype.names
    if not from_completion or "io_dev" not in names or "seq" not in names:
        return np.zeros(len(w), dtype=bool)
    reqs = res["req"]
    wakers = np.unique(reqs["waker_seq"][reqs["waker_seq"] > 0]) if "waker_seq" in reqs.dtype.names else []
    # io_dev: the traced device whose completion queued it (io_complete_ns is 0 when its io record was not written)
    return np.isin(w["kind"], from_completion) & (w["io_dev"] == 0) & ~np.isin(w["seq"], wakers)


def async_work(res):
    """Known filesystem work items run by kworkers for what fstrace traced (tracepoint tier): count, time,
    queueing delay.  Work the traced devices and requests did not cause is in async_work_unlinked.  Under
    --budget, where the workqueue hooks were attached only in the windows, the records are the windows' sample
    (basis): items and ns are estimates over the whole traced time (work_windowed), the per-item times, queueing
    delays and workers the sample's."""
    w = res.records.get("work")
    if w is None or not len(w):
        return {}
    w = w[~work_unlinked(res, w)]
    rw, rows = probe_windows(res, "workqueue_execute_end")
    from_completion = res.header.get("work_kinds_from_completion") or []
    out = {}
    for k in np.unique(w["kind"]):
        g = w[w["kind"] == k]
        name = enum_name(res.header, "work_kind", k)
        run_ns = (g["ts_end_ns"] - g["ts_start_ns"]).astype(np.int64)
        queued = g[g["ts_queue_ns"] > 0]
        delay_us = (queued["ts_start_ns"] - queued["ts_queue_ns"]) / 1e3
        workers = by_thread(g, run_ns)
        out[name] = {
            "items": int(len(g)), "ns": int(run_ns.sum()), "item_us": percentiles(run_ns / 1e3),
            "queue_delay_us": percentiles(delay_us), "workers": int(len(workers)),
            "by_worker": workers[:8],
            "tier": "tp_btf workqueue_execute_start/end (exact time of the work function)",
            "basis": "every request",
        }
        if rw is not None:
            # queued by a read's block completion: they come with the traced processes' reads, scaled by them
            out[name].update(work_windowed(rw, rows, g, "%s work items" % name,
                                           "read" if int(k) in from_completion else None))
    return out


def work_windowed(rw, rows, g, what, kind):
    """--budget, the workqueue hooks windowed: the work items g over the whole traced time, estimated from those
    the windows recorded ({"items", "ns": estimate objects (analysis/windows.py sampled_count), "basis",
    "recorded", "sample"}).  Seen in a window: the items that began running in it, weighted by window_weights (one is
    recorded only if it ended before the hooks went off); scaled by kind's calls of the traced processes where
    known (request_windows' auxiliary), else by the windows' time."""
    start = g["ts_start_ns"].astype(np.int64)
    run_ns = g["ts_end_ns"].astype(np.int64) - start
    weight = window_weights(run_ns, rw["window_ns"], rw["grace_ns"])
    masks = in_windows(rows, start)
    items = sampled_count(rw, rows, what, [float(weight[m].sum()) for m in masks], [int(m.sum()) for m in masks],
                          kind=kind)
    ns = sampled_count(rw, rows, "kworker time (ns) of the " + what, [float((weight * run_ns)[m].sum()) for m in masks],
                       [int(run_ns[m].sum()) for m in masks], kind=kind)
    return {"items": items, "ns": ns, "basis": "windows' sample",
            "recorded": {"items": int(len(g)), "ns": int(run_ns.sum())},
            "sample": "the workqueue hooks were attached only in --budget's windows: items and ns are estimates over "
                      "the whole traced time from those that began running in a window (their seen); recorded: "
                      "every item the windows recorded, those that began in a window's grace included; the per-item "
                      "times, queueing delays and workers are the recorded ones'"}


def async_work_unlinked(res):
    """Per kind, the work items kworkers ran that no traced block request queued and that woke no traced request
    (work_unlinked): items and time, kept apart so another device's work is not taken for the workload's.  Under
    --budget with the workqueue hooks windowed: estimates (work_windowed, by the windows' time: these do not
    come with the traced processes' calls)."""
    w = res.records.get("work")
    if w is None or not len(w):
        return {}
    w = w[work_unlinked(res, w)]
    rw, rows = probe_windows(res, "workqueue_execute_end")
    out = {}
    for k in np.unique(w["kind"]):
        g = w[w["kind"] == k]
        name = enum_name(res.header, "work_kind", k)
        out[name] = {"items": int(len(g)), "ns": int((g["ts_end_ns"] - g["ts_start_ns"]).astype(np.int64).sum()),
                     "basis": "every request"}
        if rw is not None:
            out[name].update(work_windowed(rw, rows, g, "%s work items not caused by the traced devices or "
                                                        "requests" % name, None))
    return out


def delay_accounting(res):
    """Per traced thread that exited: the kernel's blkio delay next to fstrace's I/O wait in its requests.  The
    requests' wait is summed per thread once (grouped by a sort) and looked up per task record: a pass over the
    requests per task record took minutes after fork churn's millions of task records."""
    t = res.records.get("task")
    if t is None or not len(t):
        return None
    req = res["req"]
    waited = (req["io_wait_ns"].astype(np.int64) + req["worker_ns"].astype(np.int64) +
              req["worker_wait_ns"].astype(np.int64))
    # a column, not the rows: requests are wide records
    req_pids, inv = np.unique(req["pid"], return_inverse=True)
    waited_by_pid = np.zeros(len(req_pids) + 1, dtype=np.int64)  # the last: threads without requests
    np.add.at(waited_by_pid, inv.reshape(-1), waited)
    ours = waited_by_pid[np.where(np.isin(t["pid"], req_pids), np.searchsorted(req_pids, t["pid"]), len(req_pids))]
    keep = np.nonzero((t["blkio_count"] != 0) | (ours != 0))[0]
    threads = [{"pid": int(x["pid"]), "comm": bytes(x["comm"]).rstrip(b"\0").decode(errors="replace"),
                "blkio_delay_ns": int(x["blkio_delay_ns"]), "blkio_count": int(x["blkio_count"]),
                "fstrace_io_wait_ns": int(o)} for x, o in zip(t[keep], ours[keep])]
    return {"threads": threads,
            "note": "blkio delay: the kernel's time in io_schedule() over the thread's life (task delay "
                    "accounting); fstrace: I/O wait (+ kworker time) inside its requests"}
