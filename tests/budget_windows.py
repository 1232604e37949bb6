"""--budget's request windows forged over tests/data/real.fst: a results header with windows and the records
seen in them, for the unit tests of the windowed figures (the truth is what the forgery put there)."""
import copy

import numpy as np

from analysis import results

T0 = 10 ** 12
WINDOW_NS, GRACE_NS, GAP_NS = 100_000_000, 20_000_000, 900_000_000
FIELDS = ["open_ns", "enter_closed_ns", "exit_closed_ns", "syscalls", "busy_ns", "tracer_ns", "windowed_prog_ns",
          "always_prog_ns", "read_calls", "write_calls", "open_edge_ns", "close_edge_ns", "counted_by_kind",
          "collector_cpu_ns", "dev_reads_from_ns", "dev_reads_to_ns", "block_on_ns", "dev_reads"]
# the collector's looks at the device's exact counts, just after sys_enter's attach and detach; block_bio_queue's
# attach began a few ms before the window opened
LOOK_NS, BLOCK_LEAD_NS = 20_000, 3_000_000
BLOCK_PROBES = ["block_bio_queue", "block_split", "block_rq_issue", "block_rq_requeue", "block_bio_complete",
                "block_rq_complete"]
EROFS_PROBES = ["erofs_map_blocks_exit", "erofs_readahead", "erofs_read_folio"]


def window_open(i):
    return T0 + i * (WINDOW_NS + GAP_NS)


def forged(base, per_window, dev_reads=True, total=None, probes=BLOCK_PROBES, extra_io=(), calls=None):
    """real.fst with windows of --budget (per_window: read block requests queued in each, 2 us apart, each 50 us
    long) recorded on its device, dev_reads counted per window (the same numbers) and total over the traced
    time (total; None: dev_reads_total null); extra_io: (queue, complete) times of more recorded reads."""
    h = copy.deepcopy(base.header)
    dev = h["devices"][0]["dev"]
    n = len(per_window)
    span = n * (WINDOW_NS + GAP_NS)
    rows, io_times = [], list(extra_io)
    for i, k in enumerate(per_window):
        o = window_open(i)
        io_times += [(o + 2000 * (j + 1), o + 2000 * (j + 1) + 50_000) for j in range(k)]
        rows.append([o, o + WINDOW_NS, o + WINDOW_NS + GRACE_NS, 0, 0, 0, 0, 0,
                     None if calls is None else calls[i], 0, 0, 0, [0] * 8, 0,
                     o + LOOK_NS if dev_reads else None, o + WINDOW_NS + LOOK_NS if dev_reads else None,
                     o - BLOCK_LEAD_NS, [k] if dev_reads else None])
    h["request_windows"] = {
        "active": True, "budget_pct": 1.0, "duty_fixed": None, "windowed_probes": ["sys_enter", "sys_exit"] + probes,
        "window_ns": WINDOW_NS, "grace_ns": GRACE_NS, "slow_path_ns_per_syscall": 100.0,
        "cost_share_while_attached": 0.1, "t_start_ns": T0, "t_end_ns": T0 + span, "in_windows_ns": n * WINDOW_NS,
        "windows_total": n, "windows_kept": n, "window_fields": FIELDS, "windows": rows,
        "dev_reads_total": [total] if dev_reads else None}
    if calls is not None:
        h["request_windows"]["io_calls"] = {"reads_total": sum(calls) * 10, "writes_total": 0, "source": "forged"}
    h["time"] = dict(h["time"], start_ns=T0, end_ns=T0 + span)
    io = np.zeros(len(io_times), dtype=base.records["io"].dtype)
    io["ts_queue_ns"], io["ts_complete_ns"] = zip(*io_times) if io_times else ([], [])
    io["ts_issue_ns"] = io["ts_queue_ns"] + 1000
    io["dev"], io["bytes"], io["nr_bios"] = dev, 4096, 1
    io["cmd_flags"] = base.records["io"]["cmd_flags"][0]  # a read of real.fst's
    return results.Results(h, dict(base.records, io=io))


def device(s):
    return next(iter(s["devices"].values()))


def erofs_forged(base, per_window, others_traced=False):
    """forged() with erofs map records in the windows (per_window each, in a read request on the erofs
    superblock) and --budget's erofs probes windowed; the traced processes' read calls as auxiliary."""
    res = forged(base, per_window, total=sum(per_window) * 10, probes=BLOCK_PROBES + EROFS_PROBES,
                 calls=[k * 2 for k in per_window])
    sdev = res.header["devices"][0]["dev"]
    res.header["config"] = {"fs": "erofs", "fs_kdev": sdev, "fs_types": ["erofs", "btrfs"] if others_traced else None}
    rk = {v: int(k) for k, v in res.header["enums"]["req_kind"].items()}
    times = [window_open(i) + 2000 * (j + 1) for i, k in enumerate(per_window) for j in range(k)]
    req = np.zeros(len(times), dtype=base.records["req"].dtype)
    req["ts_start_ns"], req["ts_end_ns"] = times, np.array(times) + 1500
    req["kind"], req["sdev"], req["pid"] = rk["read"], sdev, 7
    e = np.zeros(len(times), dtype=base.records["erofs"].dtype)
    e["ts_ns"], e["pid"], e["dev"], e["event"] = np.array(times) + 100, 7, sdev, 1
    e["map_flags"], e["pa"], e["plen"] = 1, np.arange(len(times)) * 8192, 4096
    return results.Results(res.header, dict(res.records, req=req, erofs=e))
