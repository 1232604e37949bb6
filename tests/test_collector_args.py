"""The collector's options: every one it advertises is parsed, and a bad value is one line and a non-zero exit
before anything is loaded (checked with strace: no bpf() call at all)."""
import os
import re
import subprocess

import pytest

from analysis import results
from cli.cgroups import cgroup2_root
from conftest import COLLECTOR

pytestmark = pytest.mark.bpf


def traced(tmp_path, argv):
    """Run the collector under strace, recording only its bpf() calls: (process, bpf calls made)."""
    trace = tmp_path / "bpf.trace"
    p = subprocess.run(["strace", "-f", "-qq", "-e", "trace=bpf", "-o", str(trace), COLLECTOR] + argv,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    return p, [l for l in trace.read_text().splitlines() if "bpf(" in l]


def a_block_device():
    return sorted(os.listdir("/sys/dev/block"))[0]


def a_dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return str(p.pid)


def an_absent_block_device():
    assert not os.path.exists("/sys/dev/block/4095:1048575")  # the largest dev_t: nothing has it
    return "4095:1048575"


# (arguments, what the one line must say); each is followed by "-- true" unless it ends with a missing value
BAD = [
    (["--ready-fd", "x"], "--ready-fd wants a whole number"),
    (["--ready-fd", "-1"], "--ready-fd wants a whole number"),
    (["--ready-fd", "1000"], "--ready-fd 1000: not an open file descriptor"),
    (["--sample-hz", "x"], "--sample-hz wants a whole number"),
    (["--sample-hz", "-5"], "--sample-hz wants a whole number"),
    (["--sample-hz", "99999999999999999999"], "--sample-hz wants a whole number"),
    (["--interval", "-1"], "--interval wants a number of seconds above 0"),
    (["-i", "nan"], "--interval wants a number of seconds above 0"),
    (["--duration", "0"], "--duration wants a number of seconds above 0"),
    (["-D", "5s"], "--duration wants a number of seconds above 0"),
    (["-D", "inf"], "--duration wants a number of seconds above 0"),
    (["-d", "8:x"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["-d", "-1:0"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["-d", "8"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["-d", "4096:0"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["-d", "7:1048576"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["-d", "8:0=1:2"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["-d", "8:0:4096=x"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["--dev", "7:0:100"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["--dev", "7:0:4096:lop"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["--dev", "7:0:4096:loop:x"], "--dev wants MAJ:MIN[:UNIT[:LEVEL]]"),
    (["--dev", an_absent_block_device], "no block device"),
    (["--sdev", "8"], "--sdev wants MAJ:MIN"),
    (["-s", "8:1x"], "--sdev wants MAJ:MIN"),
    (["--sdev", "0:39="], "--sdev wants MAJ:MIN"),
    (["--sdev", "0:39=0:40=1:2"], "--sdev wants MAJ:MIN"),
    (["--pid", "abc"], "--pid wants a whole number"),
    (["-p", "0"], "--pid wants a whole number"),
    (["--pid", a_dead_pid], "no such process"),
    (["--cgroup", "/nonexistent/cgroup"], "not a cgroup v2 directory"),
    (["-g", "/tmp"], "not a cgroup v2 directory"),  # a directory, of another filesystem
    (["-c", "a" * 16], "a task name has 1 to 15 characters"),
    (["--comm", ""], "a task name has 1 to 15 characters"),
    (["--comm", "a" * 300], "--comm 'aaaaaaaaaaaaaaa...' (300 bytes): a task name has 1 to 15 characters"),
    (["--offcpu-sample-us", "-3"], "--offcpu-sample-us wants a whole number from 0 to 4000000"),
    (["--sample-hz", "1000000000"], "--sample-hz wants a whole number from 0 to 100000"),
    (["--bogus"], "unknown option --bogus"),
    (["-x"], "unknown option -x"),
    (["--duration"], "--duration needs a value"),
    (["-d"], "-d needs a value"),
]


@pytest.mark.parametrize("args,says", BAD, ids=[" ".join(a if isinstance(a, str) else a.__name__ for a in b[0])
                                                  or "none" for b in BAD])
def test_bad_option_is_one_line_and_loads_nothing(tmp_path, args, says):
    out = tmp_path / "r.fst"
    args = [a if isinstance(a, str) else a() for a in args]
    missing_value = says.endswith("needs a value")
    p, bpf_calls = traced(tmp_path, ["-o", str(out)] + args + ([] if missing_value else ["--", "true"]))
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and lines[0].startswith("fstrace-collect: ") and says in lines[0], p.stderr
    assert bpf_calls == []
    assert not out.exists()


@pytest.mark.parametrize("args,says", [b for b in BAD if not b[1].endswith("needs a value")],
                         ids=[" ".join(a if isinstance(a, str) else a.__name__ for a in b[0])
                              for b in BAD if not b[1].endswith("needs a value")])
def test_check_says_what_a_run_would(tmp_path, args, says):
    """--check (what fstrace asks before it sets anything up) refuses what a run refuses, with the same line,
    and loads nothing."""
    args = [a if isinstance(a, str) else a() for a in args]
    p, bpf_calls = traced(tmp_path, ["--check"] + args)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == 2 and len(lines) == 1 and says in lines[0], p.stderr
    assert bpf_calls == []


def test_check_of_good_options_is_silent_and_loads_nothing(tmp_path):
    p, bpf_calls = traced(tmp_path, ["--check", "--comm", "x", "--sample-hz", "997", "--offcpu-sample-us", "0",
                                     "-d", a_block_device(), "--cgroup", cgroup2_root()])
    assert p.returncode == 0 and p.stdout == "" and p.stderr == "", p.stderr
    assert bpf_calls == []


def test_results_file_is_required(tmp_path):
    p, bpf_calls = traced(tmp_path, ["--", "true"])
    assert p.returncode == 2 and p.stderr.strip() == "fstrace-collect: -o FILE is required (see --help)"
    assert bpf_calls == []


def usage_options():
    """(option, metavar or None) for every option the usage text lists, short and long forms apart."""
    text = subprocess.run([COLLECTOR, "--help"], stdout=subprocess.PIPE, text=True, check=True).stdout
    opts = []
    for m in re.finditer(r"^  (?:(-\w), )?\s*(--[\w-]+)(?: (\S+))?", text, re.M):
        short, long, metavar = m.groups()
        opts += [(o, metavar) for o in (short, long) if o]
    return opts


def test_usage_lists_every_option_it_has():
    names = {o for o, _ in usage_options()}
    assert {"-o", "-m", "-d", "-p", "-g", "-c", "-s", "-i", "-D", "--ready-fd", "--sample-hz", "--progress",
            "--no-tp-btf", "--block-only", "--no-fentry"} <= names


def test_every_advertised_option_is_parsed(tmp_path):
    """Each option of the usage text, with a valid value, is accepted (then --help ends the parse)."""
    meta = tmp_path / "meta.json"
    meta.write_text("{}")
    valid = {"FILE": str(meta), "PID": str(os.getpid()), "PATH": cgroup2_root(), "NAME": "x", "MAJ:MIN": "0:1",
             "MAJ:MIN[=SMAJ:SMIN]": "0:39=0:40",
             "SEC": "1", "FD": "1", "HZ": "0", "MAJ:MIN[:UNIT[:LEVEL]]": a_block_device() + ":4096:disk",
             "US": "1000", "MODE": "all", "PCT": "1", "F": "0.5"}
    for opt, metavar in usage_options():
        assert metavar is None or metavar in valid, "a valid value for %s %s belongs in this table" % (opt, metavar)
        argv = [COLLECTOR, opt] + ([valid[metavar]] if metavar else []) + ["--help"]
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.returncode == 0 and p.stdout.startswith("usage:"), (opt, p.stderr)


def elf_is_static(path):
    """No PT_INTERP program header: nothing loads the binary's libraries at run time."""
    import struct
    with open(path, "rb") as f:
        elf = f.read()
    assert elf[:4] == b"\x7fELF" and elf[4] == 2  # 64-bit
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    return all(struct.unpack_from("<I", elf, phoff + i * phentsize)[0] != 3 for i in range(phnum))  # PT_INTERP


def test_a_good_run_loads_and_says_whether_it_is_static(tmp_path):
    """The control for the checks above: the same strace sees a valid run load its programs; and the
    results header says whether the collector is static, as its ELF headers do."""
    out = tmp_path / "r.fst"
    p, bpf_calls = traced(tmp_path, ["-o", str(out), "--", "true"])
    assert p.returncode == 0, p.stderr
    assert any("BPF_PROG_LOAD" in l for l in bpf_calls)
    assert results.load(str(out)).header["collector"]["static"] is elf_is_static(COLLECTOR)
