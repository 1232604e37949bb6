"""Names the kernel side and the analysis share, read from bpf/records.h, where each is defined once.

What a results header carries is read from the header; read here is what it does not carry (the order and
names of the attribution parts, the log-linear latency slot layout, the figure ids the analysis looks probes
up by) and the encodings older results files were written with before their header carried them.
"""
import os
import re

RECORDS_H = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bpf", "records.h")

with open(RECORDS_H) as _f:
    _TEXT = _f.read()


def xmacro(name):
    """[(C name, value, name in results)] of the X-macro `#define name(E) E(C, v, "n") ...` (or E(C, v, n) with
    n an identifier, as FST_PARTS has), in value order."""
    m = re.search(r"#define %s\(E\)((?:.*\\\n)*.*)" % re.escape(name), _TEXT)
    if not m:
        raise KeyError("bpf/records.h has no X-macro %s" % name)
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    rows = [(c, int(v, 0), n) for c, v, n in re.findall(r'E\((\w+),\s*([0-9a-fA-Fx]+),\s*"?(\w[^",)]*)"?\)', body)]
    for nested in re.findall(r"\b(FST_\w+)\(E\)", body):  # an X-macro that includes another
        rows += xmacro(nested)
    return sorted(rows, key=lambda r: r[1])


def constant(name):
    m = re.search(r"#define %s \(?(0x[0-9a-fA-F]+|\d+)u?\)?\s" % re.escape(name), _TEXT)
    if not m:
        raise KeyError("bpf/records.h has no constant %s" % name)
    return int(m.group(1), 0)


def figure(name):
    """A figure id (records.h FST_FIGURES) by its name, checked: a typo is an error, not a figure never found."""
    if name not in FIGURES:
        raise KeyError("bpf/records.h FST_FIGURES has no figure %s" % name)
    return name


def _parts():
    """{field: (table group, colour, meaning)} of FST_PARTS, in index order."""
    m = re.search(r"#define FST_PARTS\(E\)((?:.*\\\n)*.*)", _TEXT)
    rows = re.findall(r'E\((\w+),\s*(\d+),\s*(\w+),\s*"(\w+)",\s*"(#[0-9a-fA-F]{6})",\s*"([^"]*)"\)', m.group(1))
    return {field: (group, colour, meaning)
            for _, _, field, group, colour, meaning in sorted(rows, key=lambda r: int(r[1]))}


PART_INFO = _parts()
PARTS = tuple(PART_INFO)
PART_GROUP = {p: g for p, (g, _, _) in PART_INFO.items()}
PART_COLOUR = {p: c for p, (_, c, _) in PART_INFO.items()}
PART_MEANING = {p: m for p, (_, _, m) in PART_INFO.items()}


def parts_in(group):
    """The parts the bench tables sum into one column (records.h FST_PARTS' group)."""
    return tuple(p for p in PARTS if PART_GROUP[p] == group)


def _amplification():
    """{figure id: meaning} of FST_AMPLIFICATION, in value order."""
    m = re.search(r"#define FST_AMPLIFICATION\(E\)((?:.*\\\n)*.*)", _TEXT)
    rows = re.findall(r'E\((\w+),\s*(\d+),\s*"(\w+)",\s*"([^"]*)"\)', m.group(1))
    return {name: meaning for _, _, name, meaning in sorted(rows, key=lambda r: int(r[1]))}


AMPLIFICATION = _amplification()  # read amplification figures (summary "amplification"), by id


def amp(name):
    """An amplification figure id (records.h FST_AMPLIFICATION), checked: a typo is an error."""
    if name not in AMPLIFICATION:
        raise KeyError("bpf/records.h FST_AMPLIFICATION has no figure %s" % name)
    return name


LAT_SUB_BITS = constant("FST_LAT_SUB_BITS")
LAT_SLOTS = constant("FST_LAT_SLOTS")
HIST_SLOTS = constant("FST_HIST_SLOTS")
REQ_AGG_MAX = constant("FST_REQ_AGG_MAX")  # (filesystem, kind) pairs whose requests the kernel can count (req_agg)
FIGURES = frozenset(n for _, _, n in xmacro("FST_FIGURES"))
DECOMP_FIGURES = frozenset(n for _, _, n in xmacro("FST_DECOMP_FIGURES"))  # per-unit decompression (copy) times
# encodings of the records' fields; a header carries them (dev_encoding, io_op), older headers did not
MINORBITS = constant("FST_MINORBITS")
OP_MASK = constant("FST_OP_MASK")
IO_OPS = {n: v for _, v, n in xmacro("FST_IO_OPS")}
