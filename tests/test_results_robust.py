"""The results reader on damaged and crafted files: every damage is detected or harmless, one line
naming it, never a crash or a hang (fixed-seed fuzzing of a copy of a real results file)."""
import json
import os
import random
import signal
import stat
import subprocess
import zlib

import numpy as np
import pytest

from analysis import devices, report, results, schema, summary
from analysis.render import analyse
from conftest import FSTRACE, one_line_error
from forge import forge, real_results, results_dir, split
from common.system import FstraceError

TRIALS = 300


@pytest.mark.unit
def test_stored_file_is_verified(real):
    res = results.load(real[0])
    assert res.verified and res.format == 2
    assert len(res["req"]) > 0 and res.header["offcpu"]["folded"]  # direct reads wait for the device


@pytest.mark.unit
def test_io_records_of_records_version_1_are_read(real):
    """A collector of records_version 1 recorded each part of a request completed in parts apart and counted no
    requeues: its devices' figures are read, the requeued count unknown (None), not 0."""
    res = results.load(real[0])
    assert res.header["records_version"] == 1 and "nr_requeues" not in res["io"].dtype.names
    stats = devices.device_stats(res)
    assert stats and all(d["requests"] and d["requeued"] is None for d in stats.values())


@pytest.mark.bpf
def test_collectors_file_is_verified_and_of_the_current_format(tmp_path):
    """The stored file the other tests damage is an older collector's: today's writes the current format,
    checksummed, and reads back whole; forged again, it reads the same (the forger writes what it does)."""
    path = real_results(str(tmp_path))
    res = results.load(path)
    assert res.verified and res.format == results.FORMAT
    assert len(res["req"]) > 0 and res.header["offcpu"]["folded"]
    with open(path, "rb") as f:
        raw = f.read()
    fmt, header, data = split(raw)
    assert fmt == results.FORMAT
    copy = tmp_path / "copy.fst"
    copy.write_bytes(forge(header, data, fmt=fmt))
    assert outcome(str(copy)) == outcome(path)


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def outcome(path, catch_analysis=False):
    """("damaged", message) when the reader refuses the file, ("ok", report text) when the whole terminal
    report is made from it; anything else (an exception, more than 10 s) fails the test."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(10)
    try:
        try:
            res = results.load(path)
        except results.ResultsError as e:
            return "damaged", str(e)
        if catch_analysis:  # as `report` does for content the checks could not vouch for
            try:
                return "ok", analyse(res, None, path)[1]
            except FstraceError as e:
                return "damaged", str(e)
        return "ok", report.render(summary.summarize(res))
    except Hang:
        pytest.fail("reading %s took more than 10 s" % path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def part_of(raw, pos):
    """Which part of a format 2 file byte pos is in: preamble, header, padding or "section NAME"."""
    _, header, data = split(raw)
    data_start = len(raw) - len(data)
    if pos < 20:
        return "preamble"
    if pos < data_start:
        return "header" if pos < 20 + int.from_bytes(raw[12:16], "little") else "padding"
    off = pos - data_start
    for sec in header["sections"]:
        if sec["offset"] <= off < sec["offset"] + sec["count"] * sec["size"]:
            return "section " + sec["record"]
    raise AssertionError("byte %d is in no part" % pos)


@pytest.mark.unit
def test_real_file_reads_and_forged_copy_reads_the_same(real, tmp_path):
    path, raw = real
    fmt, header, data = split(raw)
    assert fmt == 2
    copy = tmp_path / "copy.fst"
    copy.write_bytes(forge(header, data))
    assert outcome(path) == outcome(str(copy))
    assert outcome(path)[0] == "ok"


@pytest.mark.unit
def test_every_byte_flip_is_detected(real, tmp_path):
    """A fixed-seed fuzzer: a random byte XORed with a random non-zero value, anywhere in the file, is
    refused with a line naming the part it hit; every section is hit, not only the header."""
    _, raw = real
    rng = random.Random(1616)
    f = tmp_path / "flipped.fst"
    _, header, _ = split(raw)
    sections = [s for s in header["sections"] if s["count"]]
    hit = set()
    data_start = len(raw) - len(split(raw)[2])
    # every byte of the preamble, a few in each non-empty section, then anywhere
    chosen = list(range(20)) + [data_start + s["offset"] + rng.randrange(s["count"] * s["size"])
                                for s in sections for _ in range(4)]
    for i in range(TRIALS):
        pos = chosen[i] if i < len(chosen) else rng.randrange(len(raw))
        b = bytearray(raw)
        b[pos] ^= rng.randrange(1, 256)
        f.write_bytes(bytes(b))
        kind, msg = outcome(str(f))
        part = part_of(raw, pos)
        assert kind == "damaged", "flip at byte %d (%s) not detected" % (pos, part)
        hit.add(part)
        if part.startswith("section "):
            assert part in msg and "checksum mismatch" in msg, msg
        elif part == "header":
            assert "header" in msg or "not an fstrace results file" in msg or "format" in msg, msg
    assert {"section " + s["record"] for s in sections} <= hit
    assert {"preamble", "header"} <= hit


@pytest.mark.unit
def test_truncations_are_refused(real, tmp_path):
    _, raw = real
    _, header, data = split(raw)
    data_start = len(raw) - len(data)
    cuts = set(range(0, 40)) | set(range(0, len(raw), 97)) | {data_start - 1, data_start, len(raw) - 1}
    cuts |= {data_start + s["offset"] + d for s in header["sections"] for d in (-1, 1)}
    f = tmp_path / "cut.fst"
    for n in sorted(c for c in cuts if 0 <= c < len(raw)):
        f.write_bytes(raw[:n])
        kind, msg = outcome(str(f))
        assert kind == "damaged", "cut at %d bytes not detected" % n
    f.write_bytes(raw + b"\0" * 8)
    assert outcome(str(f)) == ("damaged", "8 bytes after the last section: the file is damaged")


# (where in the header, the wrong value, what the message must name)
WRONG_TYPES = [
    (("time", "end_ns"), "soon", "time.end_ns: expected an integer"),
    (("kernel", "release"), 618, "kernel.release: expected a string"),
    (("kernel",), None, "kernel: expected an object"),
    (("devices", 0, "unit_bytes"), "4096", "devices[0].unit_bytes"),
    (("devices", 0, "unit_bytes"), 0, "devices[0].unit_bytes: expected an integer from 1"),
    (("sampling", "folded", 0, 1), "1", "sampling.folded[0][1]"),
    (("sampling", "hz"), True, "sampling.hz"),
    (("probes", 0, "tier"), None, "probes[0].tier: expected a string"),
    (("drops", "req"), "many", "drops.req"),
    (("config",), [], "config: expected an object"),
    (("enums", "req_kind"), {"one": "read"}, "enums.req_kind: key 'one' is not an integer"),
    (("records", "req", "fields", 0, "offset"), -1, "records.req.fields[0].offset"),
    (("records", "req", "size"), 1 << 40, "records.req.size"),
    (("sections", 0, "count"), "167", "sections[0].count"),
    (("sections", 0, "crc32"), None, "sections[0].crc32"),
    (("time", "start_ns"), 1 << 70, "time.start_ns: expected an integer from"),
]


def _set(doc, where, value):
    for k in where[:-1]:
        doc = doc[k]
    doc[where[-1]] = value


@pytest.mark.unit
@pytest.mark.parametrize("where,value,named", WRONG_TYPES, ids=[".".join(map(str, w[0])) for w in WRONG_TYPES])
def test_header_value_of_wrong_type_is_named(real, tmp_path, where, value, named):
    """With checksums that match (a crafted file): the schema names the field, nothing crashes."""
    _, raw = real
    _, header, data = split(raw)
    if where[0] == "devices" and not header["devices"]:
        pytest.skip("the fixture traced no block device here")
    if where[:2] == ("sampling", "folded"):
        # a row of the right shape to spoil: a run this short does not always take an on-CPU sample
        header["sampling"]["folded"] = [["vfs_read;filemap_read", 3]]
    _set(header, where, value)
    f = tmp_path / "typed.fst"
    f.write_bytes(forge(header, data))
    kind, msg = outcome(str(f))
    assert kind == "damaged" and named in msg, msg


@pytest.mark.unit
def test_bounds_of_counts_and_layouts(real, tmp_path):
    _, raw = real
    _, header, data = split(raw)
    f = tmp_path / "bounds.fst"
    cases = [
        (("sections", 0, "count"), 10 ** 15, "truncated in section req"),
        (("sections", 1, "offset"), 10 ** 15, "truncated in section"),
        (("records", "req", "fields", 0, "offset"), header["records"]["req"]["size"],
         "does not fit a %d-byte record" % header["records"]["req"]["size"]),
        (("records", "req", "fields", 0, "type"), "__u128", "unknown field type '__u128'"),
        (("records", "req", "fields", 1, "name"), header["records"]["req"]["fields"][0]["name"], "empty or twice"),
        (("sections", 0, "record"), "nosuch", "no record layout"),
    ]
    for where, value, named in cases:
        h = json.loads(json.dumps(header))
        _set(h, where, value)
        f.write_bytes(forge(h, data))
        kind, msg = outcome(str(f))
        assert kind == "damaged" and named in msg, (where, msg)
    h = json.loads(json.dumps(header))
    h["records"]["req"]["fields"] = [x for x in h["records"]["req"]["fields"] if x["name"] != "ts_end_ns"]
    f.write_bytes(forge(h, data))
    assert outcome(str(f)) == ("damaged", "record layout req lacks ts_end_ns")


def _leaves(doc, where=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, where + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, where + (i,))
    yield where


@pytest.mark.unit
def test_header_type_fuzz_never_crashes(real, tmp_path):
    """A fixed-seed fuzzer over every value of the header (checksums recomputed): a value of another type
    is either refused by the schema or does not matter to the analysis, which then completes."""
    _, raw = real
    _, header, data = split(raw)
    leaves = [w for w in _leaves(header) if w]
    rng = random.Random(16)
    others = ["text", 7, -1, None, [], {}, True, 1.5e308, 1 << 70, [1, "a"], {"1": 2}]
    f = tmp_path / "fuzz.fst"
    refused = 0
    for _ in range(TRIALS):
        h = json.loads(json.dumps(header))
        where = rng.choice(leaves)
        cur = h
        for k in where[:-1]:
            cur = cur[k]
        was = cur[where[-1]]
        value = rng.choice([v for v in others if type(v) is not type(was)])
        cur[where[-1]] = value
        f.write_bytes(forge(h, data))
        kind, msg = outcome(str(f))  # raises on a crash: the analysis is not guarded here
        refused += kind == "damaged"
    assert refused > TRIALS // 10  # the fuzzer reaches fields the analysis reads


@pytest.mark.unit
def test_format_1_is_read_unverified_and_damage_in_it_never_crashes(real, tmp_path):
    """Files written before checksums still read (marked unverified); flips in them either are caught
    (shape, bounds, schema) or give a report, or one line from `report`: never an exception or a hang."""
    _, raw = real
    _, header, data = split(raw)
    old = forge(header, data, fmt=1)
    f = tmp_path / "old.fst"
    f.write_bytes(old)
    res = results.load(str(f))
    assert not res.verified and res.format == 1
    assert outcome(str(f)) == outcome(real[0])
    rng = random.Random(1)
    kinds = {}
    for _ in range(TRIALS):
        b = bytearray(old)
        b[rng.randrange(len(b))] ^= rng.randrange(1, 256)
        f.write_bytes(bytes(b))
        kind, _ = outcome(str(f), catch_analysis=True)
        kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds.get("damaged") and kinds.get("ok")  # without checksums, many flips go unseen


def report_of(d):
    return subprocess.run([FSTRACE, "report", d], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120)


@pytest.mark.unit
def test_report_on_damaged_directories(real, tmp_path):
    """`fstrace report DIR` on damage: one line naming the file, the part and what is wrong; exit 1."""
    _, raw = real
    _, header, data = split(raw)
    data_start = len(raw) - len(data)
    req = next(s for s in header["sections"] if s["record"] == "req")
    flipped = bytearray(raw)
    flipped[data_start + req["offset"] + 5] ^= 0x40
    typed = json.loads(json.dumps(header))
    typed["time"]["end_ns"] = "late"
    # format 1 (nothing to verify) with requests that end before they start: the analysis fails on it
    backwards = bytearray(data)
    np.frombuffer(backwards, dtype=results.dtype_for(header["records"]["req"]), count=req["count"])["ts_end_ns"] = 0
    cases = [
        (bytes(flipped), None, ["results.fst: section req", "checksum mismatch"]),
        (raw[:data_start + 100], None, ["results.fst: truncated in section"]),
        (raw[:30], None, ["results.fst: truncated in the header"]),
        (forge(typed, data), None, ["results.fst: header field time.end_ns: expected an integer"]),
        (forge(header, bytes(backwards), fmt=1), None,
         ["results.fst: the analysis cannot use it (ValueError", "results format 1 has no checksums"]),
        (raw, "{\"ground_truth\": {\"read_bytes\": 12", ["summary.json: not valid JSON", "damaged"]),
        (raw, "[1, 2]", ["summary.json: not a JSON object"]),
        (raw, "{\"ground_truth\": {\"read_bytes\": \"lots\"}}", ["summary.json: field ground_truth.read_bytes"]),
    ]
    for i, (fst, summ, named) in enumerate(cases):
        d = results_dir(str(tmp_path / ("d%d" % i)), fst, summ)
        line = one_line_error(report_of(d))
        assert d in line and all(n in line for n in named), line
    # the same one line from compare, and for a damaged bench.json
    bad = results_dir(str(tmp_path / "badsum"), raw, "{\"ground_truth\": ")
    line = one_line_error(subprocess.run([FSTRACE, "compare", bad, bad], stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, timeout=120))
    assert line.startswith("fstrace: error: %s/summary.json: not valid JSON" % bad), line
    with open(os.path.join(bad, "bench.json"), "w") as f:
        f.write('{"rows": [{"dir": 5}]}')
    line = one_line_error(report_of(bad))
    assert line == "fstrace: error: %s/bench.json: field rows[0].dir: expected a string, found 5" % bad
    # intact, with a good summary.json: a report and no error
    d = results_dir(str(tmp_path / "good"), raw, json.dumps({"ground_truth": {"read_bytes": 524288}}))
    p = report_of(d)
    assert p.returncode == 0 and "reads:" in p.stdout and "512.0 KiB read" in p.stdout and not p.stderr, p.stderr


@pytest.mark.unit
def test_compare_reads_a_directory_of_results_fst_alone(real, tmp_path):
    """A run directory with results.fst and no summary.json (the collector run alone): report reads it, and so
    does compare, with the figures of report's own analysis of the file."""
    a = results_dir(str(tmp_path / "a"), real[1])
    b = results_dir(str(tmp_path / "b"), real[1])
    with open(os.path.join(b, "summary.json"), "w") as f:  # B as a run keeps it: the same figures either way
        json.dump(summary.summarize(results.load(real[0])), f)
    p = subprocess.run([FSTRACE, "compare", a, b], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    assert p.returncode == 0 and not p.stderr, p.stderr
    wall = "%.3f" % summary.summarize(results.load(real[0]))["wall_s"]
    row = p.stdout.splitlines()[1].split()
    assert row[:4] == ["-", "-", wall, wall] and row[4] == "1.000", p.stdout


@pytest.mark.unit
def test_report_says_format_1_is_unverified(real, tmp_path):
    _, raw = real
    _, header, data = split(raw)
    d = results_dir(str(tmp_path / "old"), forge(header, data, fmt=1))
    p = report_of(d)
    assert p.returncode == 0 and "reads:" in p.stdout
    assert p.stderr == "fstrace: %s/results.fst: results format 1 carries no checksums: damage in it cannot " \
                       "be detected\n" % d


@pytest.mark.unit
def test_crc_matches_zlib(real):
    """The collector's CRC32 is zlib's: the header checksum covers the preamble and the header."""
    _, raw = real
    fmt, header, data = split(raw)
    hlen = int.from_bytes(raw[12:16], "little")
    assert int.from_bytes(raw[16:20], "little") == zlib.crc32(raw[20:20 + hlen], zlib.crc32(raw[:16]))
    for s in header["sections"]:
        assert s["crc32"] == zlib.crc32(data[s["offset"]:s["offset"] + s["count"] * s["size"]])
    assert os.path.getsize(real[0]) == len(raw)


@pytest.mark.unit
def test_enum_names_the_analysis_looks_up_are_required(real, tmp_path):
    _, raw = real
    _, header, data = split(raw)
    header["enums"]["req_kind"] = {k: v for k, v in header["enums"]["req_kind"].items() if v != "stat"}
    f = tmp_path / "enums.fst"
    f.write_bytes(forge(header, data))
    assert outcome(str(f)) == ("damaged", "header field enums.req_kind lacks stat")


@pytest.mark.unit
def test_fifo_in_the_directory_does_not_hang(tmp_path):
    """A FIFO blocks on open: it is refused at once."""
    d = str(tmp_path / "fifo")
    os.makedirs(d)
    os.mkfifo(os.path.join(d, "results.fst"))
    line = one_line_error(report_of(d))
    assert "results.fst: not a regular file" in line


@pytest.mark.bpf
def test_device_in_the_directory_does_not_hang(real, tmp_path):
    """/dev/zero never ends: a character device (made by root) as summary.json is refused at once."""
    _, raw = real
    d = results_dir(str(tmp_path / "zero"), raw)
    os.mknod(os.path.join(d, "summary.json"), 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    line = one_line_error(report_of(d))
    assert "summary.json: not a regular file" in line


@pytest.mark.unit
def test_format_3_is_analysed_with_the_names_its_header_carries(real, tmp_path):
    """From format 3 on the header carries records.h's parts (and figures, histogram layout): the analysis reads
    them there, not from today's sources; a format 2 file is read with what format 2 collectors had."""
    _, header, data = split(real[1])
    old = results.load(real[0])
    assert old.format == 2 and "schema" not in old.header and old.schema.parts == schema.FORMAT_2_SCHEMA.parts
    header["schema"] = json.loads(json.dumps(schema.FORMAT_2))
    io_wait = next(p for p in header["schema"]["parts"] if p["field"] == "io_wait_ns")
    io_wait["meaning"] = "waiting for the device, in the words of this file's collector"
    f = tmp_path / "format3.fst"
    f.write_bytes(forge(header, data, fmt=3))
    res = results.load(str(f))
    assert res.format == 3 and res.verified
    assert res.schema.part_meaning["io_wait_ns"] == io_wait["meaning"]
    s = summary.summarize(res)
    assert s["attribution"]["part_info"] == header["schema"]["parts"]
    assert io_wait["meaning"] in report.render(s, full=True)
    assert io_wait["meaning"] not in report.render(summary.summarize(old), full=True)
    # a format 3 header must say it
    del header["schema"]
    f.write_bytes(forge(header, data, fmt=3))
    assert outcome(str(f)) == ("damaged", "header field schema is missing")
