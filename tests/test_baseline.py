"""run reports the untraced truth: the same workload once with no tracer attached, in the same cache state, and
the traced run's ratio to it."""
import os
import re

import pytest

from conftest import ROOT, fstrace, run_summary

pytestmark = pytest.mark.bpf


def _collector_program_names():
    """The programs the collector can load, from its skeletons, as the kernel names them (15 characters)."""
    names = set()
    build = os.path.join(ROOT, "build")
    for f in os.listdir(build):
        if f.endswith(".skel.h"):
            with open(os.path.join(build, f)) as fh:
                text = fh.read()
            progs = re.search(r"struct \{\n((?:\t\tstruct bpf_program \*\w+;\n)+)\t\} progs;", text)
            if progs:
                names |= {n[:15] for n in re.findall(r"struct bpf_program \*(\w+);", progs.group(1))}
    assert names, "no programs found in the skeletons"
    return names


def test_fio_run_reports_untraced_and_traced(erofs_randread):
    out, res, s = erofs_randread
    b = s["baseline"]
    # both runs did the whole job, by fio's own count
    assert b["exit_status"] == 0
    assert b["ground_truth"]["read_bytes"] == s["ground_truth"]["read_bytes"] > 0
    assert b["ground_truth"]["ios"] == s["ground_truth"]["ios"]
    # the figures compared are fio's own, from each run's own output
    assert b["throughput_bytes_per_s"] == b["ground_truth"]["bw_bytes"]
    assert b["traced_throughput_bytes_per_s"] == s["ground_truth"]["bw_bytes"]
    assert abs(b["traced_ratio"] - s["ground_truth"]["bw_bytes"] / b["ground_truth"]["bw_bytes"]) < 1e-9
    assert b["cache"] == "cold" and b["order"] == "before"
    # no program of the collector's was loaded as the untraced run ended
    assert b["programs_at_end"] is not None
    assert not set(b["programs_at_end"]) & _collector_program_names()
    verdict = fstrace("report", str(out)).stdout.splitlines()
    first = [i for i, line in enumerate(verdict) if re.match(r"  \S", line)][0]  # past the folded headline
    # each throughput named for what it measures: fio's bandwidth here, the reads over the traced wall time below
    assert verdict[first].startswith("  untraced, fio's bandwidth: %s" % _mib(b["throughput_bytes_per_s"]))
    said = " ".join(" ".join(verdict[first:first + 3]).split())
    assert "= %.3f of untraced (tracing cost" % b["traced_ratio"] in said
    assert verdict.index([x for x in verdict if x.startswith("  reads:")][0]) > first


def _mib(n):
    from analysis.units import size
    return size(n)


def test_shell_workload_baseline_and_no_baseline(tmp_path):
    s = run_summary(tmp_path / "a", "--fs", "squashfs", "--workload", "tar-data")
    b = s["baseline"]
    assert b["ground_truth"]["read_bytes"] == s["ground_truth"]["read_bytes"] > 0
    assert b["method"].startswith("bytes the workload read")
    assert b["throughput_bytes_per_s"] == b["ground_truth"]["read_bytes"] / b["wall_s"]
    s = run_summary(tmp_path / "b", "--fs", "squashfs", "--workload", "tar-data", "--no-baseline")
    assert s["baseline"] == {"why": "not run (--no-baseline)"}
    out = fstrace("report", str(tmp_path / "b" / "out")).stdout
    assert "untraced baseline: unavailable (not run (--no-baseline))" in out
