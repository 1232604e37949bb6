"""A bench matrix split over machines: `bench --shard I/N` runs a fixed part of it and records the machine it ran
on; `bench --merge DIR...` makes one bench directory of the parts, a cell run on two machines kept as two cells.

The split is a pure function of the matrix (its storage media, workloads and configurations in the order bench
plans them): cell k of it belongs to shard k mod N, on every machine alike, so each cell is in exactly one shard
and a scheduler's array index (Slurm's SLURM_ARRAY_TASK_ID, Kubernetes' JOB_COMPLETION_INDEX, both from 0) is
the shard's index.
"""
import os
import shutil

from cli.devices import backing_block_device
from common.machine import record as machine_record
from common.system import FstraceError, progress


def parse(text):
    """--shard I/N: (I, N), 0 <= I < N, as the schedulers number their array tasks."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise FstraceError("--shard takes INDEX/COUNT (e.g. 0/4, the first of four), got %r" % text)
    if count < 1 or not 0 <= index < count:
        raise FstraceError("--shard %s: the index counts from 0 and stays below the count (0/%d to %d/%d)"
                           % (text, max(count, 1), max(count, 1) - 1, max(count, 1)))
    return index, count


def matrix(preset, configs, workloads, media):
    """The whole matrix a shard is a part of, by name: what every shard of one bench must agree on."""
    from workloads import images
    return {"preset": preset, "media": [m["name"] if m else None for m in media],
            "workloads": [w.name for w in workloads], "configs": [images.label(fs, o) for fs, o in configs]}


def cells_of(m, shard=None):
    """The cells (medium, workload, configuration label) of matrix m, in bench's order; of shard (index, count)
    only its own: every count-th from the index."""
    cells = [(medium, wl, label) for medium in m["media"] for wl in m["workloads"] for label in m["configs"]]
    return cells if shard is None else cells[shard[0]::shard[1]]


def _sys(path):
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def disk_of(path):
    """The block device holding path (where the images and their loop devices' backing files are): name, model
    and whether it rotates, as sysfs gives them; a path on no block device of its own says so."""
    dev = backing_block_device(path)
    if dev is None:
        return {"device": None, "why": "%s is on no block device of its own (tmpfs, overlay, network)" % path}
    sysdir = os.path.realpath("/sys/dev/block/%d:%d" % dev)
    disk = os.path.dirname(sysdir) if os.path.exists(os.path.join(sysdir, "partition")) else sysdir
    rot = _sys(os.path.join(disk, "queue", "rotational"))
    return {"device": os.path.basename(sysdir), "disk": os.path.basename(disk),
            "model": _sys(os.path.join(disk, "device", "model")),
            "rotational": None if rot is None else rot == "1"}


def machine(storage, cache):
    """What a bench ran on: common/machine.py's record, the disk under the image cache, and the storage profile its
    image devices were throttled to (None: the disk as it is)."""
    return machine_record() | {"disk": disk_of(cache), "profile": storage["name"] if storage else None}


def _identity(rec):
    """A machine record less its storage profile (one machine runs several profiles)."""
    return tuple(sorted((k, repr(v)) for k, v in (rec or {}).items() if k != "profile"))


def _benches(d):
    """The bench directories of a bench --out: [(path, bench.json document)], read as every file of a results
    directory is (load_doc: checked against the bench schema, one line when damaged)."""
    from analysis import results
    from analysis.load import in_dir, load_doc
    if not os.path.isdir(d):
        raise FstraceError("%s is not a bench directory" % d)
    if os.path.exists(os.path.join(d, "preset.json")):
        preset = load_doc(os.path.join(d, "preset.json"), {"benches": results.ListOf(str)})
        subs = [in_dir(d, b, os.path.join(d, "preset.json")) for b in preset["benches"]]
    elif os.path.exists(os.path.join(d, "bench.json")):
        subs = [d]
    else:
        raise FstraceError("%s holds neither bench.json nor preset.json: not a bench directory" % d)
    return [(s, load_doc(os.path.join(s, "bench.json"), results.BENCH_SCHEMA)) for s in subs]


def _check_same(benches):
    """Every part from one matrix, run alike: else one line naming the first two that differ."""
    first_dir, first = benches[0]
    for d, doc in benches[1:]:
        for key in ("matrix", "dataset_id", "runs", "cache", "iops_cap"):
            if doc.get(key) != first.get(key):
                raise FstraceError("%s and %s are not parts of one bench: their %s differ (%r, %r)"
                                   % (first_dir, d, key, first.get(key), doc.get(key)))
    if first.get("matrix") is None:
        raise FstraceError("%s records no matrix (a bench from before --shard): nothing to merge it by"
                           % first_dir)


def _machine_names(benches):
    """{machine identity: name}: the host name, with #2, #3 ... after it when two records share one."""
    names, taken = {}, {}
    for _, doc in benches:
        ident = _identity(doc.get("machine"))
        if ident not in names:
            host = (doc.get("machine") or {}).get("host") or "unknown"
            taken[host] = taken.get(host, 0) + 1
            names[ident] = host if taken[host] == 1 else "%s#%d" % (host, taken[host])
    return names


def _check_complete(benches, names):
    """Each machine's shards together are its whole matrix, no cell twice: else one line saying what is missing
    or doubled."""
    per = {}
    for d, doc in benches:
        sh = doc.get("shard") or {"index": 0, "count": 1}
        per.setdefault(names[_identity(doc.get("machine"))], {}).setdefault(sh["count"], set()).add(sh["index"])
    for name, counts in per.items():
        if len(counts) > 1:
            raise FstraceError("machine %s ran shards of %s counts: a matrix split one way per machine"
                               % (name, " and ".join(str(c) for c in sorted(counts))))
        (count, got), = counts.items()
        missing = sorted(set(range(count)) - got)
        if missing:
            raise FstraceError("machine %s lacks shard%s %s of %d: the merge would not be the whole matrix" % (
                name, "s" if len(missing) > 1 else "", ", ".join(str(i) for i in missing), count))


def parts_of(inputs):
    """The bench directories (each a shard's, or a whole bench's) in inputs, checked to be parts of one matrix that
    make it whole: ([(path, bench.json document)], {machine identity: its name in the merge})."""
    benches = [b for d in inputs for b in _benches(d)]
    if not benches:
        raise FstraceError("nothing to merge: %s hold%s no bench" % (", ".join(inputs), "" if len(inputs) > 1
                                                                           else "s"))
    _check_same(benches)
    names = _machine_names(benches)
    _check_complete(benches, names)
    several = len(names) > 1
    progress("bench --merge: %d part%s from %d machine%s: %s" % (
        len(benches), "s" if len(benches) > 1 else "", len(names), "s" if several else "",
        ", ".join(names.values())))
    return benches, names


def merged_medium(parts, names, m, out):
    """One storage medium's parts (parts_of) merged into one bench document, their runs copied into out: a cell
    labelled by its machine when more than one machine ran the matrix (m: the matrix)."""
    from analysis.load import in_dir
    several = len(names) > 1
    doc = {k: parts[0][1].get(k) for k in ("schema_version", "kind", "dataset_id", "runs", "cache", "iops_cap",
                                           "storage", "matrix")}
    doc.update(rows=[], images=[], configs=[], machines={}, shard=None, merged_from=[d for d, _ in parts])
    seen = set()
    for d, part in parts:
        name = names[_identity(part.get("machine"))]
        doc["machines"][name] = part.get("machine")
        suffix = "@" + name if several else ""
        for r in part["rows"]:
            if r["workload"] not in m["workloads"] or r["label"] not in m["configs"]:
                raise FstraceError("%s: %s on %s is not a cell of its own matrix; refused"
                                   % (os.path.join(d, "bench.json"), r["workload"], r["label"]))
            cell = (name, r["workload"], r["label"], r["run"])
            if cell in seen:
                raise FstraceError("%s on %s, run %d, is in two parts (%s among them): shards of one matrix "
                                   "share no cell" % (r["workload"], r["label"], r["run"], d))
            seen.add(cell)
            new_dir = os.path.join(name, r["dir"]) if several else r["dir"]
            shutil.copytree(in_dir(d, r["dir"], os.path.join(d, "bench.json")),
                            os.path.join(out, new_dir), symlinks=True)
            doc["rows"].append(dict(r, label=r["label"] + suffix, config_label=r["label"], machine=name,
                                    dir=new_dir))
        for i in part["images"]:
            if not any(x["label"] == i["label"] + suffix and x["part"] == i["part"] for x in doc["images"]):
                doc["images"].append(dict(i, label=i["label"] + suffix, machine=name))
        for c in part["configs"]:
            if not any(x["label"] == c["label"] + suffix for x in doc["configs"]):
                doc["configs"].append(dict(c, label=c["label"] + suffix, config_label=c["label"],
                                           machine=name))
    # the matrix's order, not the shards': rows by workload, run and configuration as one bench runs them
    order = {(wl, lb): k for k, (wl, lb) in enumerate((w, c) for w in m["workloads"] for c in m["configs"])}
    doc["rows"].sort(key=lambda r: (order[(r["workload"], r["config_label"])] // len(m["configs"]), r["run"],
                                    list(names.values()).index(r["machine"]),
                                    order[(r["workload"], r["config_label"])]))
    rank = {c: k for k, c in enumerate(m["configs"])}
    doc["configs"].sort(key=lambda c: (list(names.values()).index(c["machine"]), rank[c["config_label"]]))
    kernels = sorted({(rec or {}).get("kernel") or "?" for rec in doc["machines"].values()})
    doc["kernel"] = ", ".join(kernels)
    return doc


def per_machine(medium, doc):
    """A merged bench document of several machines as one document per machine, its cells under their own
    labels (what a seed table reads): [(medium and machine, document)]."""
    out = []
    for name, rec in doc["machines"].items():
        def own(items):
            return [dict(x, label=x["config_label"] if "config_label" in x else x["label"][:-len("@" + name)])
                    for x in items if x.get("machine") == name]
        sub = dict(doc, rows=own(doc["rows"]), images=own(doc["images"]), configs=own(doc["configs"]),
                   machine=rec, machine_name=name)
        disk = (rec or {}).get("disk") or {}
        what = " ".join(x for x in (disk.get("model"), disk.get("disk")) if x)
        out.append(("%s, %s%s" % (medium, name, "") if medium else "%s (%s)" % (name, what or "its disk"), sub))
    return out
