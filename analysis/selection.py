"""Picking and grouping records: the traced filesystems' requests' devices and records, enumeration names and values
from the results header, the probes of a figure, sums per thread and per context (small pure functions
over a loaded Results).
"""
import numpy as np

from analysis import results, schema


def enum_value(header, enum, name):
    for k, v in header["enums"][enum].items():
        if v == name:
            return int(k)
    raise KeyError("%s has no %s in this results file" % (enum, name))


def enum_name(header, enum, value):
    return header["enums"][enum].get(str(int(value)), str(int(value)))


def dev_name(kdev, minor_bits=schema.MINORBITS):
    """MAJ:MIN of a kernel dev_t (minor_bits: the results header's, Results.minor_bits)."""
    return "%d:%d" % (kdev >> minor_bits, kdev & ((1 << minor_bits) - 1))


def fs_devices(res):
    """Kernel dev_t of the traced filesystems' superblocks, or None when the run traced all of them."""
    cfg = res.config
    return cfg.get("fs_kdevs") or ([cfg["fs_kdev"]] if cfg.get("fs_kdev") is not None else None)


def fs_records(res, name):
    """Records of one type (decomp, erofs, fs_cache, compress) on the traced filesystems; empty when the file
    has none of that type."""
    r = res.records.get(name)
    if r is None:
        return np.zeros(0)
    fs_devs = fs_devices(res)
    return results.select(r, np.isin(r["dev"], fs_devs)) if fs_devs else r


def by_context(header, records, ns, count_key):
    """{where it ran: {count_key: records, ns}} over the records' context field."""
    out = {}
    for c in np.unique(records["context"]):
        m = records["context"] == c
        out[enum_name(header, "context", c)] = {count_key: int(m.sum()), "ns": int(ns[m].sum())}
    return out


def _kind_values(res, kinds):
    return [enum_value(res.header, "req_kind", k) for k in kinds]


def probe_tier(res, probe):
    for p in res.header.get("probes", []):
        if p["probe"] == probe:
            return p
    return None


def by_thread(records, ns):
    """The threads that did the work of some records, busiest first: pid, comm, records, time.  Grouped by one
    sort, not a pass per thread: forks churned through by the million make as many threads."""
    pids, first, inv, items = np.unique(records["pid"], return_index=True, return_inverse=True, return_counts=True)
    total = np.zeros(len(pids), dtype=np.int64)
    np.add.at(total, inv.reshape(-1), np.asarray(ns, dtype=np.int64))
    comms = records["comm"][first]
    out = [{"pid": int(pid), "comm": bytes(c).rstrip(b"\0").decode(errors="replace"), "items": int(k), "ns": int(t)}
           for pid, c, k, t in zip(pids, comms, items, total)]
    return sorted(out, key=lambda x: -x["ns"])


def times_hist(counts):
    """{times: how many units} of per-unit counts, keys as strings (a JSON object)."""
    v, n = np.unique(np.asarray(counts, dtype=np.int64), return_counts=True)
    return {str(int(a)): int(b) for a, b in zip(v, n)}


def figure_probes(res, name):
    """The probes of one figure (records.h FST_FIGURES id) and whether any of them is attached."""
    probes = [p for p in res.header.get("probes", []) if p["figure"] == res.schema.figure(name)]
    return probes, any(p["tier"] != "unavailable" for p in probes)


def traced_fs_types(cfg):
    """The types of the filesystems a run traced (its image's; attach's mounts'), or None: all of them."""
    return cfg.get("fs_types") or ([cfg["fs"]] if cfg.get("fs") else None)
