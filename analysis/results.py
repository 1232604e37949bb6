"""Reader for fstrace results files.

The file describes itself: its JSON header carries the layout of every record
type (field names, C types, offsets) as the collector compiled them from
bpf/records.h, so this reader builds numpy dtypes from the header and never
keeps its own copy of a layout.  A results file copied from another machine
is read the same way, without root and without BPF.

Results come from other machines and are read by root, so nothing in the file
is trusted: format 2 and later files carry a CRC32 of the header and of every
record section (checked before anything is used), the header is checked against
HEADER_SCHEMA (the types of every field the analysis reads), and every count
and offset is bounded by the file's size.  Any damage is one ResultsError
naming the file's part and what is wrong.  Format 1 files (no checksums) are
still read; Results.verified says the damage they may carry went unchecked.
From format 3 on the header also carries what the analysis reads of records.h
beyond layouts and enumerations (Results.schema; analysis/schema.py).
"""
import json
import math
import mmap
import os
import stat
import struct
import zlib

import numpy as np

from analysis import schema

MAGIC = b"FSTRACE\0"
FORMAT = 3           # what the collector writes (user/results.h): checksummed, records.h's schema in the header
OLDEST_FORMAT = 1    # still read: format 2 without the schema (analysis/schema.py FORMAT_2), 1 also unverified
PREAMBLE = 16        # magic, format, header length
MAX_RECORD_SIZE = 1 << 20
# what is read whole (not mapped) from a results or bench directory is bounded, far above what fstrace writes
# (a header: at most FST_MAX_STACKS stacks of FST_MAX_STACK_DEPTH frames per kind, tens of MB; a summary or
# bench.json: well under 1 MB): a file grown or crafted to gigabytes is refused, never read into memory
MAX_HEADER_BYTES = 256 << 20
MAX_JSON_BYTES = 64 << 20

_CTYPES = {
    "__u8": "u1", "__s8": "i1", "__u16": "u2", "__s16": "i2",
    "__u32": "u4", "__s32": "i4", "__u64": "u8", "__s64": "i8",
}


class ResultsError(Exception):
    pass


# ---- header schema: the type of every header field the analysis (summary, sampling, report) reads ----
# A dict spec is a JSON object whose listed keys are required unless Opt(); keys not listed are allowed
# (newer collectors add fields).  Null() allows null.  The analysis then reads the header without checks.

class Int:
    def __init__(self, lo=-(1 << 63), hi=(1 << 64) - 1):
        self.lo, self.hi = lo, hi


class Opt:
    def __init__(self, spec):
        self.spec = spec


class Null:
    def __init__(self, spec):
        self.spec = spec


class ListOf:
    def __init__(self, spec):
        self.spec = spec


class Tuple:
    def __init__(self, *specs):
        self.specs = specs


class Either:
    """One of several specs (a field whose form changed between collector versions)."""
    def __init__(self, *specs):
        self.specs = specs


class MapOf:
    """A JSON object with any keys; int_keys: every key is a decimal integer (enums)."""
    def __init__(self, spec, int_keys=False):
        self.spec, self.int_keys = spec, int_keys


INT, COUNT, ANY = Int(), Int(0), object()
STR_OPT = Opt(Null(str))
INT_OPT = Opt(Null(INT))
ENUM = MapOf(str, int_keys=True)
DISKSTATS = {"reads": COUNT, "reads_merged": COUNT, "sectors_read": COUNT, "writes": COUNT, "sectors_written": COUNT}
LAYOUT = {"size": Int(1, MAX_RECORD_SIZE),
          "fields": ListOf({"name": str, "type": str, "offset": Int(0, MAX_RECORD_SIZE), "size": Int(1, 4096)})}
SECTION = {"record": str, "offset": COUNT, "count": COUNT, "size": Int(1, MAX_RECORD_SIZE),
           "crc32": Opt(Int(0, 0xFFFFFFFF))}
HEADER_SCHEMA = {
    "kernel": {"release": str},
    "collector": ANY,
    "time": {"start_ns": INT, "end_ns": INT},
    "workload": Opt({"start_ns": INT_OPT, "end_ns": INT_OPT, "exit_status": INT_OPT, "signal": INT_OPT}),
    # "figure": the records.h FST_FIGURES id the analysis finds probes by (LEGACY_FIGURES before it existed)
    "probes": Opt(ListOf({"probe": str, "tier": str, "figure": Opt(str), "measures": str, "why": str,
                          "runs": Opt(COUNT), "run_ns": Opt(COUNT)})),
    # records.h encodings; older headers described the dev_t in words (it was the same)
    "dev_encoding": Opt(Either(str, {"minor_bits": Int(1, 31)})),
    "io_op": Opt({"cmd_flags_mask": Int(1, 0xFFFFFFFF)}),
    "loop_charging": Opt(Null(bool)),
    "devices": Opt(ListOf({"dev": COUNT, "unit_bytes": Int(1), "is_loop": bool, "level": Opt(str),
                           "diskstats_start": Opt(Null(DISKSTATS)), "diskstats_end": Opt(Null(DISKSTATS))})),
    "io_stacks": Opt(Null(MapOf(str))),
    "drops": Opt(Null(MapOf(INT))),
    "losses": Opt(Null(MapOf(INT))),
    "expired_in_flight": Opt(Null({"bios": Opt(INT), "requests": Opt(INT), "work_items": Opt(INT),
                                   "after_ns": Opt(COUNT), "full_buckets_only": Opt(bool)})),
    "work_kinds_from_completion": Opt(ListOf(INT)),
    "stat_calls_placed": Opt(bool),
    "tracer_sites": Opt({"time_every": Int(1), "sites": MapOf({"runs": COUNT, "timed": COUNT, "timed_ns": COUNT,
                                                               "timed_sq_ns": COUNT, "charged_ns": COUNT})}),
    # tids: the thread of each folded row, in the rows' order (collectors before it wrote none)
    "sampling": Opt({"hz": Opt(Null(Int(0, 1 << 31))), "folded": Opt(ListOf(Tuple(str, INT))),
                     "tids": Opt(ListOf(COUNT)),
                     "stacks_lost": Opt(INT), "runs": Opt(COUNT), "run_ns": Opt(COUNT)}),
    "tracer_frame_prefix": Opt(str),
    "task_state": Opt({"store": str, "why": str}),
    # what bounded the requests: the filesystems' entry points or the syscall tracepoints, each kind's tiers
    "request_bounds": Opt({"at": str, "why": str, "kinds": MapOf(str)}),
    "work_functions": Opt({"found_by": str, "found": MapOf(bool)}),
    "request_records": Opt({"mode": str, "record_over_ns": COUNT}),
    "io_stack_sampling": Opt({"mode": str, "every_ns": COUNT, "unsampled_id": INT, "windows_only": Opt(bool)}),
    "offcpu": Opt(Null({"walked_at": Opt(str), "sampling": Opt(str), "threshold_ns": Opt(COUNT),
                        "folded": Opt(ListOf(Tuple(str, INT, INT))), "stack_lost_ns": Opt(INT),
                        "stack_lost_ns_by_reason": Opt(MapOf(INT)), "dropped_ns_by_reason": Opt(MapOf(INT))})),
    "kernel_aggregates": Opt({"histograms": Opt(ListOf({"metric": INT, "dev": INT, "slots": ListOf(INT)})),
                              # records.h fst_req_agg: the requests counted instead of recorded
                              "requests_counted": Opt(ListOf({
                                  "kind": INT, "sdev": COUNT, "count": COUNT, "bytes": COUNT, "wall_ns": COUNT,
                                  "wall_hist": ListOf(COUNT), "wall_ns_loglin": ListOf(COUNT),
                                  "part_ns": MapOf(COUNT), "part_hist": MapOf(ListOf(COUNT))}))}),
    "config": Opt({"mode": STR_OPT, "mounts": Opt(Null(ListOf(str))), "fs": STR_OPT, "label": STR_OPT,
                   "workload": STR_OPT, "dataset_id": STR_OPT, "cache": STR_OPT, "iops_cap": INT_OPT,
                   "image": Opt({"bytes": INT_OPT}), "fs_kdevs": Opt(Null(ListOf(COUNT))), "fs_kdev": INT_OPT,
                   "loop_read_ahead_kb": INT_OPT, "proactive_reclaim": Opt(ListOf(str))}),
    "records": MapOf(LAYOUT),
    # records.h's attribution parts, decompression figures and counted-histogram layout (format 3 on)
    "schema": Opt({"parts": ListOf({"field": str, "group": str, "colour": str, "meaning": str}),
                   "decomp_figures": ListOf(str), "lat_sub_bits": Int(1, 16), "lat_slots": Int(1, 1 << 16),
                   "hist_slots": Int(1, 64), "req_agg_max": COUNT,
                   "amplification": ListOf({"name": str, "meaning": str}),
                   "figure_fs": Opt(MapOf(str))}),
    "enums": dict({"req_kind": ENUM, "charge": ENUM},
                  **{e: Opt(ENUM) for e in ("hist_metric", "context", "tier", "work_kind", "offcpu_reason",
                                            "erofs_event", "erofs_map_flag", "alg", "fs", "fs_cache", "io_op",
                                            "figure")}),
    "sections": ListOf(SECTION),
    "bad_records": Opt(COUNT),
}
# record fields the analysis reads without first asking whether the file has them
REQUIRED_FIELDS = {
    "req": ("kind", "sdev", "ino", "pid", "ret", "ts_start_ns", "ts_end_ns", "pcache_adds", "nr_missed_events",
            "nr_ios", "io_wait_ns", "worker_ns", "worker_wait_ns"),
    "io": ("dev", "cmd_flags", "charge", "bytes", "sector", "pid", "ts_queue_ns", "ts_complete_ns", "queue_stack"),
    "decomp": ("dev", "fs", "alg", "context", "tier", "pid", "charged_pid", "in_bytes", "out_bytes",
               "ts_start_ns", "ts_end_ns"),
    "work": ("kind", "pid", "comm", "ts_queue_ns", "ts_start_ns", "ts_end_ns"),
    "task": ("pid", "comm", "blkio_count", "blkio_delay_ns"),
}
# enumeration values the analysis looks up by name in every file
REQUIRED_ENUM_NAMES = {"req_kind": ("read", "stat", "open", "getdents", "write", "sync"), "charge": ("none",)}

# The figure of each probe of collectors from before probes carried one (results format 1 and early format 2):
# their probe names, which name the kernel's functions and tracepoints.  Frozen: every newer collector writes
# "figure" itself (records.h FST_FIGURES), so a probe added later never needs a line here.
LEGACY_FIGURES = {
    "block_bio_queue": "bio_queue", "block_split": "bio_split", "block_rq_issue": "rq_issue",
    "block_rq_complete": "rq_complete", "workqueue_execute_start": "work_exec", "workqueue_execute_end": "work_exec",
    "workqueue_queue_work": "work_queue", "sys_enter": "req_start", "sys_exit": "req_end",
    "sched_switch": "cpu_split", "sched_wakeup": "wakeup", "sched_process_fork": "process_tree",
    "sched_process_exit": "process_tree", "mm_filemap_add_to_page_cache": "pcache_misses",
    "contention_begin": "lock_wait", "contention_end": "lock_wait", "page_cache_ra_order": "readahead_windows",
    "z_erofs_lz4_decompress": "erofs_lz4_decompress", "z_erofs_lzma_decompress": "erofs_lzma_decompress",
    "z_erofs_deflate_decompress": "erofs_deflate_decompress", "z_erofs_zstd_decompress": "erofs_zstd_decompress",
    "z_erofs_transform_plain": "erofs_plain_copy", "erofs_map_blocks_exit": "erofs_extents",
    "z_erofs_map_blocks_iter_exit": "erofs_extents", "erofs_readahead": "erofs_readahead",
    "erofs_readpages": "erofs_readahead", "erofs_read_folio": "erofs_read_folio", "erofs_readpage": "erofs_read_folio",
    "squashfs_decompress": "squashfs_decompress", "squashfs_cache_get": "squashfs_cache_lookups",
    "squashfs_read_data": "squashfs_cache_misses", "zstd_decompress_bio": "btrfs_zstd_decompress",
    "lzo_decompress_bio": "btrfs_lzo_decompress", "zlib_decompress_bio": "btrfs_zlib_decompress",
    "btrfs_compress_folios": "btrfs_compress_write", "btrfs_compress_pages": "btrfs_compress_write",
}


def _fill_figures(header):
    """Every probe of an older header gets its figure (LEGACY_FIGURES; a probe unknown there is a figure of its
    own), so the analysis finds probes by figure in every file."""
    for p in header.get("probes") or ():
        if "figure" not in p:
            p["figure"] = LEGACY_FIGURES.get(p["probe"], "probe:" + p["probe"])


_KIND = {str: "a string", bool: "true or false", float: "a number"}


def _short(v):
    r = repr(v)  # repr escapes control characters: safe to print
    return r if len(r) <= 40 else r[:37] + "..."


def _check(v, spec, where):
    def bad(expected):
        raise ResultsError("header field %s: expected %s, found %s" % (where or "(top)", expected, _short(v)))
    if spec is ANY:
        return
    if isinstance(spec, Either):
        errors = []
        for sub in spec.specs:
            try:
                return _check(v, sub, where)
            except ResultsError as e:
                errors.append(str(e))
        raise ResultsError(errors[-1])
    if isinstance(spec, Null):
        if v is not None:
            _check(v, spec.spec, where)
        return
    if isinstance(spec, Int):
        if type(v) is not int:
            bad("an integer")
        if not spec.lo <= v <= spec.hi:
            bad("an integer from %d to %d" % (spec.lo, spec.hi))
    elif spec is float:
        if type(v) not in (int, float) or not math.isfinite(v):
            bad("a number")
    elif spec in (str, bool):
        if type(v) is not spec:
            bad(_KIND[spec])
    elif isinstance(spec, Tuple):
        if type(v) is not list or len(v) != len(spec.specs):
            bad("a list of %d values" % len(spec.specs))
        for i, (x, sub) in enumerate(zip(v, spec.specs)):
            _check(x, sub, "%s[%d]" % (where, i))
    elif isinstance(spec, ListOf):
        if type(v) is not list:
            bad("a list")
        for i, x in enumerate(v):
            _check(x, spec.spec, "%s[%d]" % (where, i))
    elif isinstance(spec, MapOf):
        if type(v) is not dict:
            bad("an object")
        for k, x in v.items():
            if spec.int_keys and not (k.isascii() and k.lstrip("-").isdigit()):
                raise ResultsError("header field %s: key %s is not an integer" % (where, _short(k)))
            _check(x, spec.spec, "%s.%s" % (where, k if k.isprintable() and len(k) < 40 else _short(k)))
    else:  # dict: an object with these keys
        if type(v) is not dict:
            bad("an object")
        for k, sub in spec.items():
            path = "%s.%s" % (where, k) if where else k
            if k not in v:
                if not isinstance(sub, Opt):
                    raise ResultsError("header field %s is missing" % path)
                continue
            _check(v[k], sub.spec if isinstance(sub, Opt) else sub, path)


def validate_header(header, fmt=FORMAT):
    """Raise ResultsError naming the first header field that does not have the type the analysis expects,
    then check the record layouts and the sections' shape (not yet their bounds: see load())."""
    _check(header, HEADER_SCHEMA, "")
    names = set()
    for i, sec in enumerate(header["sections"]):
        rec = sec["record"]
        where = "section %s" % _short(rec)[1:-1]
        if rec in names:
            raise ResultsError("%s: listed twice in the header" % where)
        names.add(rec)
        if rec not in header["records"]:
            raise ResultsError("%s: no record layout for it in the header" % where)
        if fmt >= 2 and "crc32" not in sec:
            raise ResultsError("header field sections[%d].crc32 is missing" % i)
    if "req" not in names:
        raise ResultsError("header: no section of requests (req)")
    if fmt >= 3 and "schema" not in header:
        raise ResultsError("header field schema is missing")
    sch = schema.of(header)
    # the counted requests' histograms are added slot by slot: every row's must have the kernel's slot counts
    counted = (header.get("kernel_aggregates") or {}).get("requests_counted") or []
    for i, row in enumerate(counted):
        where = "header field kernel_aggregates.requests_counted[%d]" % i
        if len(row["wall_hist"]) != sch.hist_slots or len(row["wall_ns_loglin"]) != sch.lat_slots or \
                any(len(h) != sch.hist_slots for h in row["part_hist"].values()):
            raise ResultsError("%s: histograms of the wrong number of slots" % where)
        if set(row["part_ns"]) != set(row["part_hist"]):
            raise ResultsError("%s: parts and their histograms disagree" % where)
    smp = header.get("sampling") or {}
    if "tids" in smp and len(smp["tids"]) != len(smp.get("folded", [])):
        raise ResultsError("header field sampling.tids: %d threads for %d stacks" % (len(smp["tids"]),
                                                                                  len(smp.get("folded", []))))
    for enum, needed in REQUIRED_ENUM_NAMES.items():
        missing = [n for n in needed if n not in header["enums"][enum].values()]
        if missing:
            raise ResultsError("header field enums.%s lacks %s" % (enum, ", ".join(missing)))
    for name, layout in header["records"].items():
        fields = set()
        for f in layout["fields"]:
            if f["name"] in fields or not f["name"]:
                raise ResultsError("record layout %s: field name %s empty or twice" % (_short(name), _short(f["name"])))
            fields.add(f["name"])
            if f["type"] != "char" and f["type"] not in _CTYPES:
                raise ResultsError("record layout %s: unknown field type %s" % (_short(name), _short(f["type"])))
            width = f["size"] if f["type"] == "char" else int(_CTYPES[f["type"]][1:])
            if f["size"] != width or f["offset"] + width > layout["size"]:
                raise ResultsError("record layout %s: field %s (offset %d, size %d) does not fit a %d-byte record "
                                   "of its type" % (_short(name), _short(f["name"]), f["offset"], f["size"],
                                                     layout["size"]))
        missing = [f for f in REQUIRED_FIELDS.get(name, ()) if f not in fields]
        if missing and name in names:
            raise ResultsError("record layout %s lacks %s" % (name, ", ".join(missing)))


def dtype_for(layout):
    """numpy dtype for one record layout from the header (validated by validate_header)."""
    names, formats, offsets = [], [], []
    for f in layout["fields"]:
        names.append(f["name"])
        if f["type"] == "char":
            formats.append("S%d" % f["size"])
        else:
            try:
                formats.append("<" + _CTYPES[f["type"]])
            except KeyError:
                raise ResultsError("unknown field type %r in record layout" % f["type"])
        offsets.append(f["offset"])
    return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                     "itemsize": layout["size"]})


def select(records, mask):
    """records[mask] for a structured record array, copied as rows of bytes by np.compress: numpy copies a
    structured selection field by field (2.3 s for 2.9 M 216-byte records), and a boolean index of the rows
    byte by byte (1.1 s for 3.2 M); compress copies whole rows (0.11 s)."""
    if not len(records):
        return records[mask]
    rows = np.ascontiguousarray(records).view(np.uint8).reshape(len(records), records.dtype.itemsize)
    return np.compress(mask, rows, axis=0).view(records.dtype).reshape(-1)


class Results:
    """A loaded results file: .header (dict) and .records[name] (numpy structured arrays).

    .verified: the file carried checksums (format 2 on) and they matched; False for format 1 files,
    whose damage could not have been detected."""

    def __init__(self, header, records, path=None, verified=False, fmt=FORMAT):
        self.header = header
        self.records = records
        self.path = path
        self.verified = verified
        self.format = fmt
        self.schema = schema.of(header)  # records.h's parts, figures and layouts as this file was written with
        # requests.fs_requests' selections by kinds (read-only arrays): each copies every record it chose
        self.request_selections = {}

    def __getitem__(self, name):
        return self.records[name]

    @property
    def config(self):
        return self.header.get("config", {})

    @property
    def minor_bits(self):
        """dev_t encoding of every dev field: major << minor_bits | minor (records.h FST_MINORBITS)."""
        enc = self.header.get("dev_encoding")
        return enc["minor_bits"] if isinstance(enc, dict) else schema.MINORBITS

    def io_ops(self, io):
        """The op of each block request: its cmd_flags masked as the header says; compare with io_op(name)."""
        mask = (self.header.get("io_op") or {}).get("cmd_flags_mask", schema.OP_MASK)
        return io["cmd_flags"] & mask

    def io_op(self, name):
        """The value of block op name (read, write) in io_ops()."""
        ops = self.header["enums"].get("io_op")
        if ops is None:  # before headers carried them: records.h's, which they were written with
            return schema.IO_OPS[name]
        for k, v in ops.items():
            if v == name:
                return int(k)
        raise KeyError("io_op has no %s in this results file" % name)


def _parse_header(raw):
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
        raise ResultsError("header: not valid JSON (%s)" % str(e)[:80])
    if type(header) is not dict:
        raise ResultsError("header: not a JSON object")
    return header


def read_header(fp, size=None):
    """Parse magic and JSON header; returns (header, data_start, format) with fp after the header.

    size: the file's size, to bound the header length (default: from fp).  The header is checked
    (CRC on format 2, then HEADER_SCHEMA) before it is returned."""
    if size is None:
        size = os.fstat(fp.fileno()).st_size
    head = fp.read(PREAMBLE)
    if len(head) < 8 or head[:8] != MAGIC:
        raise ResultsError("not an fstrace results file")
    if len(head) < PREAMBLE:
        raise ResultsError("truncated in the preamble (%d bytes)" % size)
    fmt, hlen = struct.unpack("<II", head[8:16])
    if not OLDEST_FORMAT <= fmt <= FORMAT:
        raise ResultsError("results format %d is not supported (this reader knows %d to %d)"
                           % (fmt, OLDEST_FORMAT, FORMAT))
    crc_len = 4 if fmt >= 2 else 0
    if hlen > MAX_HEADER_BYTES:
        raise ResultsError("header of %d bytes: more than any collector writes (at most %d); refused"
                           % (hlen, MAX_HEADER_BYTES))
    if PREAMBLE + crc_len + hlen > size:
        raise ResultsError("truncated in the header (it says %d bytes, the file has %d in all)" % (hlen, size))
    stored = struct.unpack("<I", fp.read(4))[0] if crc_len else None
    raw = fp.read(hlen)
    if crc_len:
        crc = zlib.crc32(raw, zlib.crc32(head))
        if crc != stored:
            raise ResultsError("header: checksum mismatch (stored %08x, computed %08x): the file is damaged"
                               % (stored, crc))
    header = _parse_header(raw)
    validate_header(header, fmt)
    _fill_figures(header)
    data_start = PREAMBLE + crc_len + hlen
    data_start += (-data_start) % 8
    return header, data_start, fmt


def open_regular(path):
    """path opened for reading, if it is a regular file: a FIFO or a device node in a results directory
    (tar run by root recreates them) would block or never end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ResultsError("not a regular file")
    return os.fdopen(fd, "rb")


def load(path):
    """Load and verify a results file; record arrays are views over one buffer (no per-record Python work).

    Raises ResultsError (one line: which part of the file, what is wrong) for any damage it can see;
    OSError for a file it cannot read."""
    with open_regular(path) as fp:
        size = os.fstat(fp.fileno()).st_size
        header, data_start, fmt = read_header(fp, size)
        pad_len = data_start - fp.tell()
        pad = fp.read(pad_len)
        # the records mapped, not read: reading copied every byte once more (0.35-0.9 s for 700 MB).  A
        # finished results file is never rewritten in place (the collector links its temporary file under the
        # name), so the mapping cannot shrink under the arrays.
        try:
            blob = memoryview(mmap.mmap(fp.fileno(), 0, prot=mmap.PROT_READ))[data_start:] \
                if size > data_start else b""
        except (OSError, ValueError):  # a filesystem that cannot map files; a file emptied meanwhile
            blob = fp.read()
    if len(pad) < pad_len:
        raise ResultsError("truncated in the padding after the header")
    if fmt >= 2 and pad.strip(b"\0"):
        raise ResultsError("padding after the header is not zeros: the file is damaged")
    records = {}
    expect = 0  # format 2: sections back to back from the data start, nothing after the last
    for sec in header["sections"]:
        name = sec["record"]
        dt = dtype_for(header["records"][name])
        if dt.itemsize != sec["size"]:
            raise ResultsError("section %s: record size %d, its layout says %d" % (name, sec["size"], dt.itemsize))
        nbytes = sec["count"] * sec["size"]
        end = sec["offset"] + nbytes
        if end > len(blob):
            raise ResultsError("truncated in section %s (%d records need data bytes %d to %d, the file has %d)"
                               % (name, sec["count"], sec["offset"], end, len(blob)))
        if fmt >= 2:
            if sec["offset"] != expect:
                raise ResultsError("section %s: starts at data byte %d, right after the previous one is %d"
                                   % (name, sec["offset"], expect))
            expect = end
            crc = zlib.crc32(memoryview(blob)[sec["offset"]:end])
            if crc != sec["crc32"]:
                raise ResultsError("section %s (%d records, data bytes %d to %d): checksum mismatch: "
                                   "the file is damaged" % (name, sec["count"], sec["offset"], end))
        records[name] = np.frombuffer(blob, dtype=dt, count=sec["count"], offset=sec["offset"])
    if fmt >= 2 and expect != len(blob):
        raise ResultsError("%d bytes after the last section: the file is damaged" % (len(blob) - expect))
    return Results(header, records, path, verified=fmt >= 2, fmt=fmt)


def inside(base, name, named_in=None):
    """base/name resolved (symlinks followed), refused unless it stays inside base: a results or bench
    directory from another machine must not make root read elsewhere (absolute names, .., symlinks out).
    named_in: the file that gave the name, for the message."""
    where = "%s: %s" % (named_in, _short(name)) if named_in else os.path.join(base, str(name))
    if type(name) is not str or not name or "\0" in name:
        raise ResultsError("%s is not a file name" % where)
    real_base = os.path.realpath(base)
    path = os.path.realpath(os.path.join(real_base, name))
    if os.path.commonpath([real_base, path]) != real_base:
        raise ResultsError("%s leads outside %s; refused" % (where, base))
    return path


# what `report` reads from the JSON files next to results: their other fields are rendered or recomputed
SUMMARY_SCHEMA = {"ground_truth": Opt(Null({"read_bytes": Opt(Int(0)), "write_bytes": Opt(Int(0)),
                                             "ios": Opt(Int(0))})),
                  # the untraced run (analysis/baseline.py compare): what the verdict prints of it
                  "baseline": Opt(Null({"why": Opt(str), "method": Opt(str), "wall_s": Opt(float),
                                        "traced_ratio": Opt(Null(float)),
                                        "throughput_bytes_per_s": Opt(Null(float)),
                                        "traced_throughput_bytes_per_s": Opt(Null(float)),
                                        "latency_us": Opt(Null({"p50": float, "p99": float}))}))}
SHARE = Null(float)
# a bench row: every figure the tables (analysis/tables.py render_bench, compare) read from it
BENCH_ROW = {"dir": str, "run": INT, "workload": str, "label": str, "wall_s": float,
             "io_wait_share": SHARE, "oncpu_share": SHARE, "other_share": SHARE, "decompression_share": SHARE,
             "kworker_share": Opt(SHARE), "lock_share": Opt(SHARE), "io_wait_s": float, "oncpu_s": float,
             "other_s": float, "loop_requests": Null(COUNT), "loop_mean_bytes": Null(float),
             "loop_aligned_4k_pct": Null(float), "pagecache_misses": COUNT}
BENCH_SCHEMA = {"rows": ListOf(BENCH_ROW),
                "dataset_id": Null(str), "cache": Null(str), "runs": INT, "kernel": Null(str),
                "images": ListOf({"part": str, "label": str, "bytes": INT, "ratio_to_uncompressed": float,
                                  "build_seconds": float})}


def load_json(path, schema=None):
    """A JSON object from a file of a results or bench directory, checked against schema; ResultsError
    saying what is wrong when it is damaged (the caller names the file)."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_JSON_BYTES:
            raise ResultsError("%d bytes: more than fstrace writes there (at most %d); refused"
                               % (size, MAX_JSON_BYTES))
        raw = f.read(MAX_JSON_BYTES + 1)
    if len(raw) > MAX_JSON_BYTES:  # grown since it was measured
        raise ResultsError("more than %d bytes: more than fstrace writes there; refused" % MAX_JSON_BYTES)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:  # ValueError: also bytes that are not UTF-8
        raise ResultsError("not valid JSON (%s): the file is damaged" % str(e)[:80])
    if type(doc) is not dict:
        raise ResultsError("not a JSON object: the file is damaged")
    if schema:
        try:
            _check(doc, schema, "")
        except ResultsError as e:
            raise ResultsError(str(e).replace("header field", "field"))
    return doc
