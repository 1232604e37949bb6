"""Names the kernel side and the analysis share, read from bpf/records.h, where each is defined once.

Only what a results header does not carry is read here (the order and names of the attribution parts, the
log-linear latency slot layout); everything a header carries is read from the header.
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
    return sorted(rows, key=lambda r: r[1])


def constant(name):
    m = re.search(r"#define %s \(?(\d+)u?\)?\s" % re.escape(name), _TEXT)
    if not m:
        raise KeyError("bpf/records.h has no constant %s" % name)
    return int(m.group(1))


PARTS = tuple(n for _, _, n in xmacro("FST_PARTS"))
LAT_SUB_BITS = constant("FST_LAT_SUB_BITS")
LAT_SLOTS = constant("FST_LAT_SLOTS")
HIST_SLOTS = constant("FST_HIST_SLOTS")
