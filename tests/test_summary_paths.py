"""`run` and `report` make a run's summary in one place (analysis/summary.py summarize_run): the same figures,
failed requests and untraced baseline whether the run writes summary.json or `report` reads the directory again,
on a forged results file (tests/data/real.fst with a fio run's configuration)."""
import json

import pytest

from analysis import render, results
from cli import runner
from conftest import fstrace
from forge import forge, split

pytestmark = pytest.mark.unit

# fio's own figures (its JSON): the traced run's and the untraced one's, so the ratio is known beforehand
TRACED_GT = {"read_bytes": 512 << 10, "ios": 32, "bw_bytes": 3_000_000,
             "clat_ns": {"percentile": {"50.000000": 90_000, "99.000000": 400_000}}}
UNTRACED = {"wall_s": 0.25, "exit_status": 0, "cache": "cold", "programs_at_end": [],
            "ground_truth": {"read_bytes": 512 << 10, "ios": 32, "bw_bytes": 4_000_000,
                             "clat_ns": {"percentile": {"50.000000": 70_000, "99.000000": 300_000}}}}


class Workload:
    """What write_summary asks of a workload: its own count of what it read."""
    def ground_truth(self, resdir, ctx):
        return TRACED_GT


def run_dir(tmp_path, real):
    """A run directory of real.fst forged to say a fio randread ran, its summary.json written as `run` does."""
    fmt, header, data = split(real[1])
    header["config"] = dict(header.get("config") or {}, workload="randread", label="erofs-lz4hc12-C4096",
                            fs="erofs", cache="cold", dataset_id="forged")
    d = tmp_path / "run"
    d.mkdir()
    (d / "results.fst").write_bytes(forge(header, data, fmt))
    return d, runner.write_summary(str(d), Workload(), None, baseline=dict(UNTRACED))


def test_run_and_report_give_the_same_summary_and_baseline(tmp_path, real):
    d, written = run_dir(tmp_path, real)
    with open(d / "summary.json") as f:
        stored = json.load(f)
    # report: the results file analysed again, with what summary.json keeps of the run (its ground truth, baseline)
    again, text = render.analyse(results.load(str(d / "results.fst")), stored["ground_truth"],
                                 str(d / "results.fst"), full=False, baseline=stored["baseline"])
    assert json.loads(json.dumps(again)) == stored == json.loads(json.dumps(written))
    b = stored["baseline"]
    assert b["method"].startswith("fio's own bandwidth")
    assert b["throughput_bytes_per_s"] == 4_000_000 and b["traced_throughput_bytes_per_s"] == 3_000_000
    assert b["traced_ratio"] == pytest.approx(0.75)
    assert b["latency_us"] == {"p50": 70.0, "p99": 300.0} and b["traced_latency_us"] == {"p50": 90.0, "p99": 400.0}
    assert stored["failed_requests"]  # real.fst's shell looked up names that were not there: on both paths
    # and the command prints what the written summary renders
    p = fstrace("report", str(d))
    assert p.returncode == 0, p.stderr
    assert p.stdout == text == render.render_summary(stored, full=False)
    assert "= 0.750 of untraced" in " ".join(p.stdout.split())  # the verdict folds long lines


def test_a_baseline_without_a_measurement_is_kept_as_its_reason(tmp_path, real):
    fmt, header, data = split(real[1])
    (tmp_path / "r.fst").write_bytes(forge(header, data, fmt))
    why = {"why": "not run (--no-baseline)"}
    s, _ = render.analyse(results.load(str(tmp_path / "r.fst")), None, str(tmp_path / "r.fst"), baseline=why)
    assert s["baseline"] == why


def test_the_verdict_names_each_throughput_for_what_it_measures(tmp_path, real):
    """fio's bandwidth (over its jobs' run time) and the reads over the traced wall time differ: each line says
    which it is."""
    d, s = run_dir(tmp_path, real)
    text = fstrace("report", str(d)).stdout
    said = " ".join(text.split())  # the verdict folds long lines
    # 4,000,000 and 3,000,000 bytes/s: fio's own figures, as forged
    assert "\n  untraced, fio's bandwidth: 3.8 MiB/s, p50 70.0 us, p99 300.0 us;" in text, text
    assert "; traced: 2.9 MiB/s = 0.750 of untraced" in said, text
    assert "\n  reads: %d requests, " % s["reads"]["count"] in text, text
    assert "in %.3f s wall = " % s["wall_s"] in said, text
    assert s["throughput_bytes_per_s"] == pytest.approx(s["reads"]["bytes"] / s["wall_s"])


def test_a_baseline_of_bytes_over_wall_time_is_named_so(tmp_path, real):
    fmt, header, data = split(real[1])
    (tmp_path / "r.fst").write_bytes(forge(header, data, fmt))
    untraced = dict(UNTRACED, ground_truth={"read_bytes": 1 << 20})
    s, text = render.analyse(results.load(str(tmp_path / "r.fst")), {"read_bytes": 1 << 20},
                             str(tmp_path / "r.fst"), full=False, baseline=untraced)
    assert s["baseline"]["throughput_bytes_per_s"] == (1 << 20) / 0.25
    assert "\n  untraced, bytes read over wall time: 4.0 MiB/s; traced: " in text, text
