"""--budget's request windows: the requests the windows saw, weighted up to the whole traced time, with a 95 %
interval (a ratio estimator over the windows).
"""
import math
import numpy as np

from analysis.requests import fs_requests
from analysis.selection import enum_value


# two-sided 95 % Student t quantiles by degrees of freedom (1-30); beyond, the normal's
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t95(df):
    return _T95[df - 1] if df <= len(_T95) else 1.96


def window_weights(length_ns, window_ns, grace_ns):
    """How many requests each seen one stands for, beyond 1/fraction (user/window.c says why): a request no
    longer than the grace is seen whenever it starts inside a window; a longer one only if it starts early
    enough to end before sys_exit is detached, W + G - L of W."""
    length = np.asarray(length_ns, dtype=np.float64)
    room = np.maximum(window_ns + grace_ns - length, 1.0)
    return np.where(length <= grace_ns, 1.0, window_ns / np.minimum(room, window_ns))


def window_auxiliary(rw, rows, kind):
    """The windows' auxiliary for requests of kind: the traced processes' own read (write) syscall counts in each
    window and over the whole traced time, as the collector took them from task I/O accounting, and what they
    are; (None, None, None) where it has none (another kind, an older file, or no such counts here).  A window
    whose count a failed look left unknown has None."""
    field = {"read": "read_calls", "write": "write_calls"}.get(kind)
    io = rw.get("io_calls") or {}
    if not field or "reads_total" not in io or any(field not in r or "open_edge_ns" not in r for r in rows):
        return None, None, None
    total = io["reads_total"] if kind == "read" else io["writes_total"]
    return [r[field] for r in rows], total, io["source"]


def seen_in_windows(res, rw, rows, kind):
    """Per window, the requests of kind it saw (counted in the kernel, and recorded ones that started in it) and
    those weighted by window_weights, with each window's length; and the recorded ones outside every window or
    ending after their window's sys_exit was gone."""
    kv = enum_value(res.header, "req_kind", kind)
    recorded = fs_requests(res, kinds=(kind,))
    start = recorded["ts_start_ns"].astype(np.int64)
    length = recorded["ts_end_ns"].astype(np.int64) - start
    weight = window_weights(length, rw["window_ns"], rw["grace_ns"])
    seen, weighted, lengths, inside, late = [], [], [], 0, 0
    for w in rows:
        m = (start >= w["open_ns"]) & (start < w["enter_closed_ns"])
        inside += int(m.sum())
        late += int((recorded["ts_end_ns"][m].astype(np.int64) > w["exit_closed_ns"]).sum())
        counted = w["counted_by_kind"][kv] if kv < len(w["counted_by_kind"]) else 0
        seen.append(counted + int(m.sum()))
        weighted.append(counted + float(weight[m].sum()))
        lengths.append(w["enter_closed_ns"] - w["open_ns"])
    return seen, weighted, lengths, int(len(start) - inside), late


def windows_facts(rw, span, kind, seen, outside, late):
    """What the collector's windows were (share of the time, budget, cost) and what they saw."""
    return {"active": True, "budget_pct": rw["budget_pct"], "duty_fixed": rw.get("duty_fixed"),
            "windows": rw["windows_total"], "window_ns": rw["window_ns"], "grace_ns": rw["grace_ns"],
            "fraction": (rw["in_windows_ns"] / span) if span > 0 else None,
            "slow_path_ns_per_syscall": rw["slow_path_ns_per_syscall"],
            "cost_share_while_attached": rw["cost_share_while_attached"],
            # the collector's own CPU time per window, part of the cost the windows were sized with (older files:
            # none)
            "collector_cpu_per_window_ns": rw.get("window_cpu_ns"),
            # how the collector measured it, and what the budget does not bound (older files: not recorded)
            "cost_method": rw.get("cost_method"),
            "always_on_share_in_windows": rw.get("always_on_share_in_windows"),
            # records outside every window, or ending after their window's sys_exit was gone: none by design
            "recorded_outside_windows": outside, "recorded_after_their_window": late,
            "kind": kind, "seen": int(sum(seen))}


def estimate(out, rw, rows, weighted, lengths, span, kind):
    """The ratio estimate of all the requests from the windows' weighted counts, into out, with its method and
    95 % interval (or why there is none)."""
    k = len(rows)
    total_len = float(sum(lengths))
    if not k or not total_len or span <= 0:
        out["why"] = "no window opened while tracing"
        return out
    aux, aux_total, aux_what = window_auxiliary(rw, rows, kind)
    if aux_what:
        # by the calls, over the windows whose calls are known: a look at the counts that failed at a window's
        # edge left its own unknown (what the look missed, a later one took: the total is whole)
        known = [a is not None for a in aux]
        out["windows_without_calls"] = known.count(False)
        if known.count(True) < 2:
            aux = aux_what = None
        else:
            rows, weighted, lengths, aux = ([x for x, keep in zip(v, known) if keep]
                                            for v in (rows, weighted, lengths, aux))
            k, total_len = len(rows), float(sum(lengths))
    if aux is None:
        aux, aux_total = lengths, span
    total_aux = float(sum(aux))
    out["auxiliary"] = aux_what or "window time"
    if aux_what and not total_aux:
        out["why"] = "the traced processes made no %s syscall in any window" % kind
        return out
    # a ratio estimator over the windows (each a random sample of the traced time): requests per unit of the
    # auxiliary in the windows, times its total; its error from the windows' spread, finite-population corrected
    rate = sum(weighted) / total_aux
    out["estimate"] = rate * aux_total
    out["method"] = ("requests seen in %d random windows (%.1f %% of the time), weighted by window_weights for "
                     "requests longer than the grace, scaled by %s; 95 %% interval from the windows' spread "
                     "(ratio estimator, Student t)" % (
                         k, 100.0 * total_len / span,
                         "the time the windows covered" if not aux_what else
                         "the traced processes' own %s syscalls in the windows against all of theirs (%s: tracing "
                         "slows a window's requests, and these slow with them)" % (kind, aux_what)))
    if aux_what and out["windows_without_calls"]:
        out["method"] += ("; %d more windows left out: a look at the counts failed at an edge of each, leaving "
                          "its calls unknown" % out["windows_without_calls"])
    if k < 2:
        out["why"] = "one window: no interval"
        return out
    return interval95(out, rows, weighted, aux, aux_total, aux_what, rate)


def interval95(out, rows, weighted, aux, aux_total, aux_what, rate):
    """The estimate's 95 % interval (Student t over the windows' residuals, finite-population corrected; with the
    calls as auxiliary, widened by the calls that may lie on the other side of a window's edge), into out."""
    k, total_aux, est = len(rows), float(sum(aux)), out["estimate"]
    mean_aux = total_aux / k
    resid = [n - rate * a for n, a in zip(weighted, aux)]
    var_rate = sum(r * r for r in resid) / (k - 1) / k / mean_aux ** 2
    fpc = max(0.0, 1.0 - total_aux / aux_total) if aux_total else 0.0
    half = t95(k - 1) * math.sqrt(var_rate * fpc) * aux_total
    if aux_what:
        # the counts are looked at just after sys_enter's attach and detach: calls made between an edge and the
        # look may be on its other side; at most the window's call rate times that time, at both edges
        edge = sum(a / max(r["enter_closed_ns"] - r["open_ns"], 1) * (r["open_edge_ns"] + r["close_edge_ns"])
                   for a, r in zip(aux, rows))
        out["edge_share"] = edge / total_aux
        half += est * out["edge_share"]
    out["interval95"] = [max(est - half, float(out["seen"])), est + half]
    return out


def request_windows(res, kind="read"):
    """--budget: the requests of kind the windows saw, weighted up to the whole traced time, with a 95 %
    interval; None-free figures only where the collector windowed its hooks."""
    rw = res.header.get("request_windows")
    if not rw:
        return {"active": False, "why": "this collector always attaches its request hooks"}
    if not rw.get("active"):
        return {"active": False, "why": rw.get("why", "")}
    rows = [dict(zip(rw["window_fields"], row)) for row in rw["windows"]]
    span = rw["t_end_ns"] - rw["t_start_ns"]
    seen, weighted, lengths, outside, late = seen_in_windows(res, rw, rows, kind)
    out = windows_facts(rw, span, kind, seen, outside, late)
    if rw["windows_kept"] < rw["windows_total"]:
        out["why"] = "only the first %d windows are kept: no estimate" % rw["windows_kept"]
        return out
    return estimate(out, rw, rows, weighted, lengths, span, kind)
