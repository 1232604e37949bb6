"""The analysis stays linear in the records after fork churn (millions of short-lived threads, each a task
record): its per-thread figures group by a sort, never by a pass over every record per thread.

Checked without a clock: the requests' and records' columns count the elements every numpy operation on them
touches, and the figures must equal those of the per-thread passes they replace (kept here as the reference)."""
import numpy as np
import pytest

from analysis import intervals, results, selection, waits


class Counted(np.ndarray):
    """An array whose elementwise operations count the elements they touch (into Counted.touched)."""
    touched = 0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        Counted.touched += sum(x.size for x in inputs if isinstance(x, Counted))
        plain = [x.view(np.ndarray) if isinstance(x, Counted) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, Counted) else x for x in kwargs["out"])
        return getattr(ufunc, method)(*plain, **kwargs)


def churned(real_path, nreq, ntask, npid, seed=0):
    """Results of the real file's layouts with nreq requests and ntask task records over npid thread ids (some
    threads without requests, some ids reused by several task records, blkio counts of 0 among them)."""
    real = results.load(real_path)
    rng = np.random.default_rng(seed)
    req = np.resize(real["req"], nreq).copy()
    req["pid"] = rng.integers(1, npid, nreq)
    req["ts_start_ns"] = np.sort(rng.integers(1, 10 ** 12, nreq))
    req["ts_end_ns"] = req["ts_start_ns"] + rng.integers(0, 10 ** 6, nreq)
    for f in ("io_wait_ns", "worker_ns", "worker_wait_ns"):
        req[f] = rng.integers(0, 10 ** 6, nreq)
    task = np.zeros(ntask, dtype=real["task"].dtype)
    task["pid"] = rng.integers(1, npid + npid // 4, ntask)
    task["blkio_count"] = rng.integers(0, 3, ntask)
    task["blkio_delay_ns"] = task["blkio_count"] * 1000
    task["comm"] = [b"t%d" % i for i in range(ntask)]
    records = dict(real.records, req=req, task=task)
    return results.Results(real.header, records, fmt=real.format)


def per_thread_passes_delay_accounting(res):
    """delay_accounting as it was: a pass over the requests per task record (the reference)."""
    t, req = res["task"], res["req"]
    waited = (req["io_wait_ns"].astype(np.int64) + req["worker_ns"].astype(np.int64) +
              req["worker_wait_ns"].astype(np.int64))
    out = []
    for x in t:
        ours = int(waited[req["pid"] == x["pid"]].sum())
        if x["blkio_count"] or ours:
            out.append({"pid": int(x["pid"]), "comm": bytes(x["comm"]).rstrip(b"\0").decode(errors="replace"),
                        "blkio_delay_ns": int(x["blkio_delay_ns"]), "blkio_count": int(x["blkio_count"]),
                        "fstrace_io_wait_ns": ours})
    return out


def per_thread_passes_records_in_requests(reqs, pids, ts):
    """records_in_requests as it was: a pass over requests and events per thread (the reference)."""
    out = np.full(len(ts), -1, dtype=np.int64)
    for pid in np.unique(pids):
        ri = np.nonzero(reqs["pid"] == pid)[0]
        if not len(ri):
            continue
        order = ri[np.argsort(reqs["ts_start_ns"][ri], kind="stable")]
        ei = np.nonzero(pids == pid)[0]
        k = np.searchsorted(reqs["ts_start_ns"][order], ts[ei], side="right") - 1
        ok = k >= 0
        hit = np.zeros(len(ei), dtype=bool)
        hit[ok] = ts[ei][ok] <= reqs["ts_end_ns"][order[k[ok]]]
        out[ei[hit]] = order[k[hit]]
    return out


def per_thread_passes_by_thread(records, ns):
    out = []
    for pid in np.unique(records["pid"]):
        m = records["pid"] == pid
        out.append({"pid": int(pid), "comm": bytes(records["comm"][m][0]).rstrip(b"\0").decode(errors="replace"),
                    "items": int(m.sum()), "ns": int(ns[m].sum())})
    return sorted(out, key=lambda x: -x["ns"])


@pytest.mark.unit
def test_per_thread_figures_equal_the_per_thread_passes(real):
    res = churned(real[0], nreq=400, ntask=300, npid=60)
    da = waits.delay_accounting(res)["threads"]
    assert da == per_thread_passes_delay_accounting(res)
    assert any(t["blkio_count"] == 0 for t in da) and any(t["fstrace_io_wait_ns"] == 0 for t in da)
    assert len({t["pid"] for t in da}) < len(da)  # thread ids reused: each record gets its thread's wait

    req = res["req"]
    rng = np.random.default_rng(1)
    pids = rng.integers(1, 70, 500)
    ts = rng.integers(0, 10 ** 12, 500).astype(np.uint64)
    ts[:100] = req["ts_start_ns"][:100]  # events at a request's start and end belong to it
    ts[100:200] = req["ts_end_ns"][:100]
    pids[:200] = np.tile(req["pid"][:100], 2)
    got = intervals.records_in_requests(req, pids, ts)
    assert np.array_equal(got, per_thread_passes_records_in_requests(req, pids, ts))
    assert (got[:200] >= 0).all() and (got == -1).any()

    ns = rng.integers(0, 10 ** 6, len(req))
    assert selection.by_thread(req, ns) == per_thread_passes_by_thread(req, ns)


@pytest.mark.unit
def test_per_thread_figures_touch_each_record_a_bounded_number_of_times(real):
    """2 000 threads: a pass per thread touches millions of elements; a grouping a few per record."""
    res = churned(real[0], nreq=2000, ntask=2000, npid=2000)
    req, task = res["req"].view(Counted), res["task"].view(Counted)
    counted = results.Results(res.header, dict(res.records, req=req, task=task), fmt=res.format)
    bound = 40 * (len(req) + len(task))

    Counted.touched = 0
    waits.delay_accounting(counted)
    assert 0 < Counted.touched <= bound

    Counted.touched = 0
    intervals.records_in_requests(req, task["pid"], task["ts_exit_ns"])
    assert 0 < Counted.touched <= bound

    Counted.touched = 0
    selection.by_thread(req, req["io_wait_ns"].view(np.ndarray))
    assert 0 < Counted.touched <= bound
