"""Reader for fstrace results files.

The file describes itself: its JSON header carries the layout of every record
type (field names, C types, offsets) as the collector compiled them from
bpf/records.h, so this reader builds numpy dtypes from the header and never
keeps its own copy of a layout.  A results file copied from another machine
is read the same way, without root and without BPF.
"""
import json
import struct

import numpy as np

MAGIC = b"FSTRACE\0"
SUPPORTED_FORMAT = 1

_CTYPES = {
    "__u8": "u1", "__s8": "i1", "__u16": "u2", "__s16": "i2",
    "__u32": "u4", "__s32": "i4", "__u64": "u8", "__s64": "i8",
}


class ResultsError(Exception):
    pass


def dtype_for(layout):
    """numpy dtype for one record layout from the header."""
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


class Results:
    """A loaded results file: .header (dict) and .records[name] (numpy structured arrays)."""

    def __init__(self, header, records, path=None):
        self.header = header
        self.records = records
        self.path = path

    def __getitem__(self, name):
        return self.records[name]

    @property
    def config(self):
        return self.header.get("config", {})


def read_header(fp):
    """Parse magic and JSON header; returns (header, data_start) with fp positioned after the header."""
    head = fp.read(16)
    if len(head) < 16 or head[:8] != MAGIC:
        raise ResultsError("not an fstrace results file")
    fmt, hlen = struct.unpack("<II", head[8:16])
    if fmt != SUPPORTED_FORMAT:
        raise ResultsError("results format %d is not supported (this reader knows %d)" % (fmt, SUPPORTED_FORMAT))
    raw = fp.read(hlen)
    if len(raw) != hlen:
        raise ResultsError("results file is truncated (header)")
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise ResultsError("results header is not valid JSON: %s" % e)
    data_start = 16 + hlen
    data_start += (-data_start) % 8
    return header, data_start


def load(path):
    """Load a results file; record arrays are views over one buffer (no per-record Python work)."""
    with open(path, "rb") as fp:
        header, data_start = read_header(fp)
        fp.seek(data_start)
        blob = fp.read()
    records = {}
    for sec in header.get("sections", []):
        dt = dtype_for(header["records"][sec["record"]])
        if dt.itemsize != sec["size"]:
            raise ResultsError("section %s: record size %d, layout says %d"
                               % (sec["record"], sec["size"], dt.itemsize))
        end = sec["offset"] + sec["count"] * sec["size"]
        if end > len(blob):
            raise ResultsError("results file is truncated (section %s)" % sec["record"])
        records[sec["record"]] = np.frombuffer(blob, dtype=dt, count=sec["count"], offset=sec["offset"])
    return Results(header, records, path)
