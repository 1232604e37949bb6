"""A small real results file, and results files forged from it (tests of the reader and of `report`).

Forging writes the file as a collector would but with a chosen header: a file with valid checksums
around values no collector writes is what a deliberately crafted file looks like.
"""
import json
import os
import shutil
import struct
import subprocess
import zlib

from cli.runner import COLLECTOR


def real_results(d):
    """A results file of a tiny real workload: direct reads of a 512 KiB file traced with block I/O
    (when the directory is on a block device) and stack sampling, so it has requests, block requests,
    tasks, folded stacks and device figures.  Returns its path."""
    data = os.path.join(d, "data")
    with open(data, "wb") as f:
        f.write(os.urandom(512 << 10))
    os.sync()
    st = os.stat(d)
    dev = "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    # every off-CPU interval's stack (not threshold-sampled): 32 reads of ~0.1 ms each would often have none
    argv = [COLLECTOR, "-o", os.path.join(d, "real.fst"), "--sample-hz", "4999", "--offcpu-sample-us", "0"]
    if os.path.exists("/sys/dev/block/" + dev):
        argv += ["-d", dev]
    # then a read of a pipe that waits for its writer: an off-CPU interval in a request every time, where a
    # direct read's device may complete it before the reader sleeps (seen in a VM, 3 runs in 40 with none)
    reader = ["sh", "-c", "dd if='%s' of=/dev/null bs=16k iflag=direct 2>/dev/null && sleep 0.05 | cat" % data]
    subprocess.run(argv + ["--"] + reader, check=True, timeout=60, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return os.path.join(d, "real.fst")


def split(raw):
    """(format, header dict, data bytes) of a results file's bytes (format 1 or 2)."""
    fmt, hlen = struct.unpack("<II", raw[8:16])
    start = 16 + (4 if fmt >= 2 else 0)
    header = json.loads(raw[start:start + hlen])
    data_start = start + hlen + (-(start + hlen)) % 8
    return fmt, header, raw[data_start:]


def forge(header, data, fmt=2):
    """The bytes of a results file with this header and data: format 2 with the header's checksum
    recomputed (the sections' are the header's own: the data is the real file's), or format 1 (as
    collectors wrote before checksums)."""
    header = json.loads(json.dumps(header))
    if fmt < 2:
        for sec in header["sections"]:
            sec.pop("crc32", None)
    header["format_version"] = fmt
    h = json.dumps(header).encode()
    out = b"FSTRACE\0" + struct.pack("<II", fmt, len(h))
    if fmt >= 2:
        out += struct.pack("<I", zlib.crc32(h, zlib.crc32(out)))
    out += h
    return out + b"\0" * (-len(out) % 8) + data


def results_dir(d, raw, summary=None):
    """A run directory holding results.fst with these bytes (and summary.json text, if given)."""
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "results.fst"), "wb") as f:
        f.write(raw)
    if summary is not None:
        with open(os.path.join(d, "summary.json"), "w") as f:
            f.write(summary)
    return d


def as_format_2(raw):
    """A results file of today's format as a format 2 collector wrote it: the same, without the header's
    "schema" (the records.h names format 3 added)."""
    _, header, data = split(raw)
    header.pop("schema", None)
    return forge(header, data, fmt=2)


if __name__ == "__main__":
    # tests/data/real.fst (tests/data/README.md): python3 -m tests.forge tests/data/real.fst, as root
    import sys
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        with open(real_results(d), "rb") as f:
            raw = f.read()
    with open(sys.argv[1], "wb") as f:
        f.write(as_format_2(raw))
