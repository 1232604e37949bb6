"""Pictures and timelines people look at: flamegraph SVGs (valid, proportional) and the Perfetto timeline."""
import json
import xml.etree.ElementTree as ET

import pytest

from analysis import flamegraph, results
from conftest import CACHE, SCALE, fstrace

SVG = "{http://www.w3.org/2000/svg}"


def frames(svg_text):
    root = ET.fromstring(svg_text.encode())
    out = {}
    for g in root.iter(SVG + "g"):
        name = g.find(SVG + "title").text.split(" (")[0]
        rect = g.find(SVG + "rect")
        out.setdefault(name, []).append((int(g.get("data-samples")), float(rect.get("width")),
                                          float(rect.get("x")), rect.get("fill")))
    return out


def test_flamegraph_widths_are_proportional_to_samples():
    stacks = {"a;b": 3, "a;c": 1, "d": 4, "a;b;squashfs_decompress": 2}
    f = frames(flamegraph.render(stacks, "t"))
    (na, wa, _, _), = f["a"]
    (nd, wd, _, _), = f["d"]
    (nb, wb, _, _), = f["b"]
    assert (na, nd, nb) == (6, 4, 5)
    assert wa / wd == pytest.approx(6 / 4, rel=1e-3)
    assert wb / wa == pytest.approx(5 / 6, rel=1e-3)
    assert f["squashfs_decompress"][0][3] == "rgb(220,80,30)"
    assert flamegraph.folded_text(stacks).count("\n") == 4


def test_differential_flamegraph_colours_the_change():
    a = {"x;y": 10, "x;z": 10}
    b = {"x;y": 30, "x;z": 10}
    f = frames(flamegraph.render(b, "diff", base=a))
    y_fill, z_fill = f["y"][0][3], f["z"][0][3]
    assert y_fill.startswith("rgb(230,")  # more of B's samples than of A's: red
    assert z_fill.endswith(",230)")       # less: blue


@pytest.fixture(scope="module")
def xz_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "xz"
    fstrace("run", "--fs", "squashfs", "--compress", "xz", "--cluster", "131072", "--workload", "tar-data",
            "--scale", SCALE, "--cache", CACHE, "-o", str(out))
    return out


def test_run_writes_an_oncpu_flamegraph_showing_decompression(xz_run):
    svg = (xz_run / "oncpu.svg").read_text()
    f = frames(svg)
    assert "squashfs_decompress" in f
    total = sum(n for n, _, _, _ in f["entry_SYSCALL_64_after_hwframe"])
    folded = (xz_run / "oncpu.folded").read_text().splitlines()
    assert sum(int(l.rsplit(" ", 1)[1]) for l in folded) >= total > 0


def test_timeline_holds_every_request_and_block_request(xz_run):
    t = json.loads((xz_run / "timeline.json").read_text())
    res = results.load(str(xz_run / "results.fst"))
    ev = t["traceEvents"]
    assert sum(1 for e in ev if e.get("cat") == "request") == len(res["req"])
    assert sum(1 for e in ev if e.get("cat") == "block") == len(res["io"])
    starts = sorted(e["id"] for e in ev if e["ph"] == "s")
    ends = sorted(e["id"] for e in ev if e["ph"] == "f")
    assert starts == ends and len(starts) > 0
    assert all(e["dur"] > 0 for e in ev if e["ph"] == "X")


def test_offcpu_stacks_account_for_every_offcpu_nanosecond(xz_run):
    """The kernel-side off-CPU stack map and the per-request attribution are one measurement: they agree."""
    res = results.load(str(xz_run / "results.fst"))
    off = res.header["offcpu"]
    names = res.header["enums"]["offcpu_reason"]
    total = {}
    for _, reason, ns in off["folded"]:
        total[names[str(reason)]] = total.get(names[str(reason)], 0) + ns
    req = res["req"]
    parts = {"io_wait": int(req["io_wait_ns"].sum()), "dsleep": int(req["dsleep_ns"].sum()),
             "sleep": int(req["sleep_ns"].sum()),
             "worker": int(req["worker_ns"].sum() + req["worker_wait_ns"].sum())}
    assert sum(total.values()) + off["stack_lost_ns"] == sum(parts.values())
    for reason, ns in total.items():
        assert ns <= parts[reason]
    svg = (xz_run / "offcpu.svg").read_text()
    f = frames(svg)
    assert any(name.startswith("[") for name in f)  # the reason roots
    assert "schedule" not in f and not any(n.startswith("bpf_prog_") for n in f)  # trimmed at the scheduler
