"""fstrace advise: Pareto front, mixes, and cause sentences whose every number is a figure of the bench results."""
import json
import os

import pytest

from conftest import CACHE, SCALE, fstrace
from analysis import advice


def test_pareto_front_pure():
    pts = [("a", 10, 5.0), ("b", 8, 6.0), ("c", 12, 4.0), ("d", 11, 6.0), ("e", 8, 7.0), ("f", 10, 5.0)]
    # d is beaten by a (smaller and faster), e by b (same size, faster); a and f tie and both stay
    assert advice.pareto(pts) == ["a", "b", "c", "f"]
    assert advice.pareto([("x", 1, 1.0)]) == ["x"]


def test_unknown_mix_entry_and_fs_are_one_line(tmp_path):
    for args, want in [(["--mix", "nosuch=1"], "unknown workload 'nosuch'"),
                       (["--mix", "cat-500=0"], "weight of cat-500 must be a positive number"),
                       (["--mix", "write-small=1"], "write-small writes"),
                       (["--fs", "zfs"], "unknown filesystem 'zfs'")]:
        p = fstrace("advise", *args, "-o", str(tmp_path / "o"), check=False)
        assert p.returncode == 1 and p.stdout == "", p.stderr
        assert p.stderr.count("\n") == 1 and want in p.stderr, p.stderr
        assert not os.path.exists(tmp_path / "o")


def _check_sentences(out, doc_key, bench_sub):
    adv = json.loads((out / "advice.json").read_text())[doc_key]
    bench = json.loads((out / bench_sub / "bench.json").read_text())
    med = advice.medians(bench)
    sizes = advice.image_sizes(bench, ["tree"])
    names = set(sizes) | {wl for wl, _ in med}
    assert adv["causes"]
    for c in adv["causes"]:
        facts = c["facts"]
        for f in facts:
            if "of" in f:
                a, b = (facts[i]["value"] for i in f["of"])
                assert f["value"] == pytest.approx(a / b)
            elif f["figure"] == "bytes":
                assert f["value"] == sizes[f["label"]]
            else:
                assert f["value"] == med[(f["workload"], f["label"])][f["figure"]]
            assert f["text"] == advice.FORMATS[f["format"]](f["value"])
        assert sorted(c["order"]) == list(range(len(facts)))
        assert advice.numbers(c["text"], names) == [facts[i]["text"] for i in c["order"]]
    # the ranking and the front are the pure functions of the measured points
    pts = [(c["label"], c["bytes"], c["weighted_s"]) for c in adv["ranking"]]
    assert [c["label"] for c in adv["ranking"] if c["pareto"]] == advice.pareto(pts)
    for c in adv["ranking"]:
        assert c["weighted_s"] == med[("stat-all", c["label"])]["wall_s"]


def test_advise_stat_all_real_run(tmp_path):
    out = tmp_path / "adv"
    p = fstrace("advise", "--mix", "stat-all=1", "--fs", "erofs,squashfs", "--compress", "lz4hc", "--cluster",
                "4096", "--runs", "1", "--iops-cap", "3000", "--scale", SCALE, "--cache", CACHE, "-o", str(out))
    assert "advice:" in p.stdout and "fstrace: bench [" not in p.stdout and "left]" in p.stderr
    for f in ("advice.json", "advice.txt", "advice.html", "uncapped/bench.json", "iops-3000/bench.json"):
        assert (out / f).exists(), f
    _check_sentences(out, "uncapped", "uncapped")
    _check_sentences(out, "capped", "iops-3000")
    html = (out / "advice.html").read_text()
    assert "Image size vs weighted time" in html and "Attribution on stat-all" in html
    # budget below every image: one line, no advice directory
    p = fstrace("advise", "--mix", "stat-all=1", "--fs", "erofs", "--compress", "lz4hc", "--cluster", "4096",
                "--runs", "1", "--budget-bytes", "4096", "--scale", SCALE, "--cache", CACHE, "-o",
                str(tmp_path / "b"), check=False)
    assert p.returncode == 1 and "no candidate fits in --budget-bytes 4096" in p.stderr
    assert not os.path.exists(tmp_path / "b") and not os.path.exists(str(tmp_path / "b") + ".partial")
