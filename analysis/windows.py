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


def completion_weights(length_ns, window_ns, lead_ns=0):
    """How many block requests each one a window recorded by its completion stands for: one completed inside a
    window is recorded only if its bios were all queued once block_bio_queue was attached for it, lead_ns before
    the window opened (a request is recorded whole or not at all), so one of length L completing at a random
    place of the window is recorded W - (L - lead) of W."""
    cut = np.maximum(np.asarray(length_ns, dtype=np.float64) - lead_ns, 0.0)
    return window_ns / np.maximum(window_ns - cut, window_ns / 10.0)


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


def seen_in_windows(res, rw, rows, kind, sdevs=None):
    """Per window, the requests of kind it saw (counted in the kernel, and recorded ones that started in it) and
    those weighted by window_weights, with each window's length; and the recorded ones outside every window or
    ending after their window's sys_exit was gone.  sdevs: the recorded ones on these filesystems only (the
    counted ones are the caller's to have none)."""
    kv = enum_value(res.header, "req_kind", kind)
    recorded = fs_requests(res, kinds=(kind,))
    if sdevs is not None:
        recorded = recorded[np.isin(recorded["sdev"], sdevs)]
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


def pick_auxiliary(out, rw, rows, kind):
    """What the windows of rows are scaled by for things that come with the traced processes' kind (read,
    write) calls: (keep, aux, aux_total, aux_what): those calls (window_auxiliary) over the windows whose calls
    are known (keep: per window whether it is one), where at least two are; else every window's time over the
    traced time (aux_what None).  A look at the counts that failed at a window's edge left its own unknown (what
    the look missed, a later one took: the total is whole); how many, into out."""
    aux, aux_total, aux_what = window_auxiliary(rw, rows, kind)
    if aux_what:
        known = [a is not None for a in aux]
        out["windows_without_calls"] = known.count(False)
        if known.count(True) >= 2:
            return known, [a for a in aux if a is not None], aux_total, aux_what
    return [True] * len(rows), window_lengths(rows), rw["t_end_ns"] - rw["t_start_ns"], None


def window_lengths(rows):
    """Each window's time with its hooks on, up to sys_enter's detach."""
    return [w["enter_closed_ns"] - w["open_ns"] for w in rows]


def ratio_estimate(out, weighted, aux, aux_total, floor, edge_rows=None):
    """A total estimated from the windows (each a random sample of the traced time): weighted, what each window
    saw (weighted by window_weights where a length applies), per unit of aux, each window's auxiliary, times its
    total aux_total, into out["estimate"]; with two windows or more its 95 % interval (interval95), no lower than
    floor (what was seen), else out["why"].  edge_rows: the windows' rows where aux is the traced processes'
    calls, whose looks at an edge widen it (interval95)."""
    rate = sum(weighted) / float(sum(aux))
    out["estimate"] = rate * aux_total
    if len(aux) < 2:
        out["why"] = "one window: no interval"
        return out
    return interval95(out, edge_rows, weighted, aux, aux_total, edge_rows is not None, rate, floor)


def estimate(out, rw, rows, weighted, lengths, span, kind):
    """The ratio estimate of all the requests from the windows' weighted counts, into out, with its method and
    95 % interval (or why there is none)."""
    if not rows or not sum(lengths) or span <= 0:
        out["why"] = "no window opened while tracing"
        return out
    keep, aux, aux_total, aux_what = pick_auxiliary(out, rw, rows, kind)
    rows, weighted, lengths = ([x for x, kept in zip(v, keep) if kept] for v in (rows, weighted, lengths))
    k, total_len = len(rows), float(sum(lengths))
    out["auxiliary"] = aux_what or "window time"
    if aux_what and not sum(aux):
        out["why"] = "the traced processes made no %s syscall in any window" % kind
        return out
    out["method"] = ("requests seen in %d random windows (%.1f %% of the time), weighted by window_weights for "
                     "requests longer than the grace, scaled by %s; 95 %% interval from the windows' spread "
                     "(ratio estimator, Student t)" % (k, 100.0 * total_len / span, scaled_by(kind, aux_what)))
    if aux_what and out["windows_without_calls"]:
        out["method"] += ("; %d more windows left out: a look at the counts failed at an edge of each, leaving "
                          "its calls unknown" % out["windows_without_calls"])
    return ratio_estimate(out, weighted, aux, aux_total, out["seen"], rows if aux_what else None)


def scaled_by(kind, aux_what):
    """What a window's count is scaled by, in words (pick_auxiliary's aux_what None: its time)."""
    return "the time the windows covered" if not aux_what else \
        "the traced processes' own %s syscalls in the windows against all of theirs (%s: tracing slows a " \
        "window's requests, and these slow with them)" % (kind, aux_what)


def ratio_se(seen, aux):
    """The ratio estimator over the windows: sum(seen) / sum(aux), and its standard error from the windows'
    residuals (before any finite-population correction)."""
    k, total_aux = len(aux), float(sum(aux))
    rate = sum(seen) / total_aux
    resid = [n - rate * a for n, a in zip(seen, aux)]
    return rate, math.sqrt(sum(r * r for r in resid) / (k - 1) / k) / (total_aux / k)


def interval95(out, rows, weighted, aux, aux_total, aux_what, rate, floor):
    """The estimate's 95 % interval (Student t over the windows' residuals, finite-population corrected; with the
    calls as auxiliary, widened by the calls that may lie on the other side of a window's edge), into out."""
    k, total_aux, est = len(aux), float(sum(aux)), out["estimate"]
    se = ratio_se(weighted, aux)[1]
    fpc = max(0.0, 1.0 - total_aux / aux_total) if aux_total else 0.0
    half = t95(k - 1) * se * math.sqrt(fpc) * aux_total
    if aux_what:
        # the counts are looked at just after sys_enter's attach and detach: calls made between an edge and the
        # look may be on its other side; at most the window's call rate times that time, at both edges
        edge = sum(a / max(r["enter_closed_ns"] - r["open_ns"], 1) * (r["open_edge_ns"] + r["close_edge_ns"])
                   for a, r in zip(aux, rows))
        out["edge_share"] = edge / total_aux
        half += est * out["edge_share"]
    out["interval95"] = [max(est - half, float(floor)), est + half]
    return out


def request_windows(res, kind="read", sdevs=None):
    """--budget: the requests of kind the windows saw, weighted up to the whole traced time, with a 95 %
    interval; None-free figures only where the collector windowed its hooks.  sdevs: only the requests on
    these filesystems (their superblocks' kernel dev_t), where the kernel counted none of that kind apart."""
    rw = res.header.get("request_windows")
    if not rw:
        return {"active": False, "why": "this collector always attaches its request hooks"}
    if not rw.get("active"):
        return {"active": False, "why": rw.get("why", "")}
    rows = window_rows(rw)
    span = rw["t_end_ns"] - rw["t_start_ns"]
    seen, weighted, lengths, outside, late = seen_in_windows(res, rw, rows, kind, sdevs)
    out = windows_facts(rw, span, kind, seen, outside, late)
    out["traced_reads_lost"] = windows_slowdown(rw, rows)
    if rw["windows_kept"] < rw["windows_total"]:
        out["why"] = "only the first %d windows are kept: no estimate" % rw["windows_kept"]
        return out
    return estimate(out, rw, rows, weighted, lengths, span, kind)


def windows_slowdown(rw, rows):
    """What the windows cost the traced reads, measured where cost_share_while_attached is modelled: the traced
    threads' read calls in each window (between its opening and closing looks) against those the rate of the gap
    before it (from the previous window's last look, once all its hooks were off, to this one's opening look) gives
    for the window's time; lost: one less their ratio (a ratio estimator over the windows, Student t 95 % interval,
    widened by the share of the window's calls its looks' times may misplace: open_edge_ns, close_edge_ns).  The
    same for the window and its grace together (sys_exit and the attribution hooks still on) is the share lost
    while attached; times the windows' and graces' part of the time, the share lost over it.  Left out: the first
    window (no gap before it: the collector's start, and a command it runs is held until then), a window cut
    short (the end of tracing: it may run past the workload's), a gap shorter than a window, one in which the
    traced threads read nothing, and any window a failed look borders.  It holds only what the windowed hooks
    cost: what stays attached all the time slows the gap and the window alike.  {"why"} where the rows have no
    such looks (older files) or fewer than two windows qualify."""
    if not rows or "reads_at_exit_closed" not in rows[0]:
        return {"why": "the traced threads' read counts at the windows' looks are not recorded"}
    win = rw["window_ns"]
    n, a, n_on, a_on, edge = [], [], [], [], 0.0
    for prev, r in zip(rows, rows[1:]):
        looks = (prev["reads_at_exit_closed"], r["reads_at_open"], r["reads_at_close"], r["reads_at_exit_closed"])
        gap_ns = r["open_ns"] - prev["exit_closed_ns"]
        on_ns, attached_ns = r["enter_closed_ns"] - r["open_ns"], r["exit_closed_ns"] - r["open_ns"]
        if None in looks or on_ns < win or gap_ns < win or looks[1] <= looks[0]:
            continue
        rate = (looks[1] - looks[0]) / gap_ns
        n.append(looks[2] - looks[1])
        a.append(rate * on_ns)
        n_on.append(looks[3] - looks[1])
        a_on.append(rate * attached_ns)
        # a look's calls may lie on either side of its edge: at most the window's rate times the look's time,
        # and the gap's at the last look before it (on the other side of the gap, the same count)
        edge += (r["open_edge_ns"] + r["close_edge_ns"] + prev.get("exit_edge_ns", 0)) / on_ns
    k = len(n)
    if k < 2:
        io_why = (rw.get("io_calls") or {}).get("why")
        return {"why": "%d window%s with a gap before it to compare (2 are needed)%s" % (
            k, "" if k == 1 else "s", "; " + io_why if io_why else "")}

    def lost(seen, expected, widen):
        r, se = ratio_se(seen, expected)
        half = t95(k - 1) * se + widen
        return 1 - r, [1 - r - half, 1 - r + half]
    widen = edge / k
    in_windows, interval = lost(n, a, widen)
    attached, attached_interval = lost(n_on, a_on, widen)
    span = rw["t_end_ns"] - rw["t_start_ns"]
    frac = sum(r["exit_closed_ns"] - r["open_ns"] for r in rows) / span if span > 0 else 0.0
    return {"in_windows": in_windows, "interval95": interval, "windows": k,
            "while_attached": attached, "while_attached_interval95": attached_interval,
            "over_time": attached * frac, "over_time_interval95": [x * frac for x in attached_interval],
            "method": "the traced threads' read calls in %d windows (task I/O accounting at each look) against the "
                      "calls their rate in the gap before each gives for its time, ratio estimator, 95 %% interval "
                      "Student t widened by the looks' times; with each window's grace (sys_exit on for %d ms "
                      "more) for the share lost while attached, and times the %.2f %% of the time attached over "
                      "the time; the hooks attached all the time are in neither side and not in it" % (
                          k, rw["grace_ns"] // 1000000, 100 * frac)}


def window_rows(rw):
    """The windows of a results header's request_windows, each a dict by its window_fields."""
    return [dict(zip(rw["window_fields"], row)) for row in rw["windows"]]


def probe_windows(res, probe):
    """--budget's request_windows where probe was attached only in them (its name among windowed_probes), and
    their rows; (None, None) where it was attached all the time (its figures then exact)."""
    rw = res.header.get("request_windows") or {}
    if not rw.get("active") or probe not in (rw.get("windowed_probes") or []):
        return None, None
    return rw, window_rows(rw)


def in_windows(rows, ts):
    """Per window, which of the times ts fall in it while its hooks were on, before sys_enter's detach."""
    ts = np.asarray(ts, dtype=np.int64)
    return [(ts >= w["open_ns"]) & (ts < w["enter_closed_ns"]) for w in rows]


def sampled_count(rw, rows, what, weighted, seen, aux=None, kind=None):
    """The estimate object of a count the windows sampled, over the whole traced time: {"estimate",
    "interval95", "seen", "windows", "auxiliary", "method"} (ratio_estimate), or with "why" in place of what is
    missing.  weighted, seen: per window, what it saw of what (weighted by window_weights where a length
    applies; as seen); aux: (per window, over the whole traced time, what it is) of an exact auxiliary; else
    kind's calls as request_windows takes them (pick_auxiliary), else the windows' time."""
    out = {"seen": int(sum(seen)), "windows": len(rows)}
    span = rw["t_end_ns"] - rw["t_start_ns"]
    if rw["windows_kept"] < rw["windows_total"]:
        out["why"] = "only the first %d windows are kept: no estimate" % rw["windows_kept"]
        return out
    if not rows or not sum(window_lengths(rows)) or span <= 0:
        out["why"] = "no window opened while tracing"
        return out
    edge_rows = None
    if aux is None:
        keep, vals, total, aux_what = pick_auxiliary(out, rw, rows, kind)
        rows, weighted = ([x for x, kept in zip(v, keep) if kept] for v in (rows, weighted))
        edge_rows = rows if aux_what else None
        aux, by = (vals, total, aux_what or "window time"), scaled_by(kind, aux_what)
    else:
        by = "%s in the windows against all of it" % aux[2]
    out["auxiliary"] = aux[2]
    if not sum(aux[0]):
        out["why"] = "no %s in any window" % aux[2]
        return out
    out["method"] = ("%s seen in %d random windows (%.1f %% of the time), scaled by %s; 95 %% interval from "
                     "the windows' spread (ratio estimator, Student t, finite-population corrected)" % (
                         what, len(rows), 100.0 * sum(window_lengths(rows)) / span, by))
    return ratio_estimate(out, weighted, aux[0], aux[1], out["seen"], edge_rows)
