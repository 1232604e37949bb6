"""From records to the answers: summarize() builds the summary.json document of a loaded Results (its fields:
docs/outputs.md, "summary.json") from the modules that each answer one question (requests, windows, tracer,
devices, probes, decompression, caches, waits), and summarize_run adds what a run knows beside its results file.
Enum values and record layouts come from the results header, never from constants kept here.
"""
import numpy as np

from analysis import amplification, sampling
from analysis.baseline import compare
from analysis.caches import erofs_events, fs_caches, readahead
from analysis.decompression import decompression, write_compression
from analysis.devices import device_stats, device_unneeded
from analysis.hist import linear_slots
from analysis.probes import request_bounds, tiers, unavailable
from analysis.requests import (attribution, counted_latencies_us, counted_requests, failed_requests, fs_requests,
                               request_stats)
from analysis.selection import enum_value
from analysis.tracer import tracer_cost
from analysis.waits import async_work, async_work_unlinked, delay_accounting, lock_wait
from analysis.windows import request_windows


SCHEMA_VERSION = 1
META_KINDS = ("open", "getdents")  # the metadata requests the summary counts together


def run_info(res):
    """What ran: the run's configuration as the results header records it."""
    h, cfg = res.header, res.config
    wl = h.get("workload", {})
    return {
        "mode": cfg.get("mode", "run"), "mounts": cfg.get("mounts"),
        "fs": cfg.get("fs"), "label": cfg.get("label"), "workload": cfg.get("workload"),
        "dataset_id": cfg.get("dataset_id"), "cache": cfg.get("cache"), "loop_direct_io": cfg.get("loop_direct_io"),
        "image_bytes": cfg.get("image", {}).get("bytes"), "kernel": h["kernel"]["release"],
        "mkfs_argv": cfg.get("image", {}).get("mkfs_argv"),  # the exact command that built the image
        "iops_cap": cfg.get("iops_cap"), "storage": cfg.get("storage"),
        "options": cfg.get("options"),  # the image's options (compress "none": nothing to decompress)
        "collector": h["collector"], "tools": cfg.get("tools"), "workload_exit_status": wl.get("exit_status"),
        "workload_signal": wl.get("signal") or None,
        # what evicts page cache here with no memory pressure (cli/devices.proactive_reclaim); None: not looked
        "proactive_reclaim": cfg.get("proactive_reclaim"),
    }


def stat_calls(res):
    """The stat calls (recorded, counted), what they are, and the kinds of every request on the traced
    filesystems that the attribution sums."""
    if res.header.get("stat_calls_placed"):
        # path-based stat calls carry the device the kernel wrote into the caller's buffer: on the traced
        # filesystems like any request
        return (fs_requests(res, kinds=("stat",)), counted_requests(res, kinds=("stat",)),
                "stat calls on the traced filesystems (a path-based one placed by the device in its result)",
                ("read", "write", "stat") + META_KINDS)
    # older results: a path-based stat call had no device
    stat_kind = enum_value(res.header, "req_kind", "stat")
    return (res["req"][res["req"]["kind"] == stat_kind], counted_requests(res, kinds=("stat",), any_fs=True),
            "stat is path-based: counted for all paths the workload stat'ed", ("read", "write") + META_KINDS)


def request_figures(res, wall_ns):
    """The requests: reads (counts, bytes, latency, throughput over wall_ns), --budget's windows, writes, sync,
    metadata, and where their time went."""
    h, sch = res.header, res.schema
    reads, reads_cnt = fs_requests(res, kinds=("read",)), counted_requests(res, kinds=("read",))
    stats, stats_cnt, stat_note, all_kinds = stat_calls(res)
    rs = request_stats(reads, reads_cnt, sch)
    return {
        "reads": rs,
        "request_windows": request_windows(res),
        "read_latency_linear_us": linear_slots(np.concatenate([
            (reads["ts_end_ns"] - reads["ts_start_ns"]).astype(np.int64) / 1e3, counted_latencies_us(reads_cnt, sch)])),
        "throughput_bytes_per_s": rs["bytes"] / (wall_ns / 1e9) if wall_ns > 0 else None,
        "writes": request_stats(fs_requests(res, kinds=("write",)), counted_requests(res, kinds=("write",)), sch),
        "sync": dict(request_stats(res["req"][res["req"]["kind"] == enum_value(h, "req_kind", "sync")],
                                   counted_requests(res, kinds=("sync",), any_fs=True), sch),
                     note="sync is counted for every fsync/fdatasync/sync/syncfs of the workload"),
        "metadata": {"open_getdents": request_stats(fs_requests(res, kinds=META_KINDS),
                                                    counted_requests(res, kinds=META_KINDS), sch),
                     "stat": dict(request_stats(stats, stats_cnt, sch), attribution=attribution(stats, stats_cnt, sch),
                                  note=stat_note)},
        # the parts as records.h had them when the file was written, for readers of the summary alone (tables, plots)
        "attribution": dict(attribution(fs_requests(res, kinds=all_kinds), counted_requests(res, kinds=all_kinds),
                                        sch), kinds=list(all_kinds), part_info=sch.part_info()),
        "request_records": dict(h.get("request_records") or {"mode": "all"},
                                note="slow: requests that slept, did block I/O, missed the page cache, failed or "
                                     "took record_over_ns are recorded; the rest are counted in the kernel"),
        "task_state": h.get("task_state"),
    }


def work_figures(res, all_fs, attr):
    """What the kernel did for the requests all_fs (every kind on the traced filesystems; attr: their attribution):
    the tracer's cost, decompression, locks, the filesystems' lookups and caches, readahead, kworkers, delays."""
    return {
        "tracer": tracer_cost(res, attr),
        "decompression": decompression(res, all_fs),
        "lock_wait": lock_wait(res, all_fs),
        "erofs": erofs_events(res, all_fs),
        "device_unneeded": device_unneeded(res),
        "fs_caches": fs_caches(res, all_fs),
        "write_compression": write_compression(res),
        "readahead": readahead(res, fs_requests(res, kinds=("read",))),
        "async_work": async_work(res),
        "async_work_unlinked": async_work_unlinked(res),
        "offcpu": sampling.offcpu_summary(res.header),
        "delay_accounting": delay_accounting(res),
    }


def device_and_loss_figures(res):
    """The traced devices, the probes' tiers and what they could not measure, and everything lost."""
    h = res.header
    devices = device_stats(res)
    return {
        "devices": devices,
        "tiers": tiers(res),
        "request_bounds": request_bounds(h),
        "unavailable": unavailable(res),
        "drops": h.get("drops"),
        "losses": h.get("losses"),  # kernel-side tables that were full (records.h FST_LOSSES); older files: None
        "expired_in_flight": h.get("expired_in_flight"),
        "unseen_block_requests": {name: d["unseen_requests"] for name, d in devices.items()
                                  if d.get("unseen_requests")},
        # recorded only in --budget's windows with no exact count: whether any went unseen is not known
        "unseen_block_requests_unknown": {name: d["unseen_why"] for name, d in devices.items() if d.get("unseen_why")},
        # an excess can hide as many lost completions: "none unseen" is not claimed for these devices
        "traced_beyond_diskstats": {name: d["traced_beyond_diskstats"] for name, d in devices.items()
                                    if d.get("traced_beyond_diskstats")},
        "bad_records": h.get("bad_records", 0),
    }


def summarize(res, ground_truth=None):
    """summary.json's figures of a loaded results file; ground_truth: the workload's own count (fio, tar)."""
    h = res.header
    wl = h.get("workload", {})
    wall_ns = (wl.get("end_ns") or h["time"]["end_ns"]) - (wl.get("start_ns") or h["time"]["start_ns"])
    s = {"schema_version": SCHEMA_VERSION, "run": run_info(res), "wall_s": wall_ns / 1e9}
    s.update(request_figures(res, wall_ns))
    s.update(work_figures(res, fs_requests(res, kinds=tuple(s["attribution"]["kinds"])), s["attribution"]))
    s.update(device_and_loss_figures(res), ground_truth=ground_truth or {})
    s["amplification"] = amplification.figures(s, res.schema)
    return s


def summarize_run(res, ground_truth=None, baseline=None):
    """summary.json's document of a run, as `run` writes it and `report` shows it: summarize()'s figures, the
    requests that failed, and the untraced baseline (analysis/baseline.py compare) where one was measured, or why
    none was."""
    s = summarize(res, ground_truth)
    s["failed_requests"] = failed_requests(res)
    if baseline is not None:  # the untraced run, kept in summary.json: the results file has no trace of it
        s["baseline"] = compare(baseline, s) if "wall_s" in baseline else baseline
    return s
