"""Pictures and timelines people look at: flamegraph SVGs (valid, proportional) and the Perfetto timeline."""
import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from analysis import flamegraph, results
from conftest import CACHE, SCALE, fstrace, timeline_flows

SVG = "{http://www.w3.org/2000/svg}"


def frames(svg_text):
    root = ET.fromstring(svg_text.encode())
    out = {}
    for g in root.iter(SVG + "g"):
        name = g.find(SVG + "title").text.split(" (")[0]
        rect = g.find(SVG + "rect")
        out.setdefault(name, []).append((int(g.get("data-weight")), float(rect.get("width")),
                                          float(rect.get("x")), rect.get("fill")))
    return out


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.bpf
def test_run_writes_an_oncpu_flamegraph_showing_decompression(xz_run):
    svg = (xz_run / "oncpu.svg").read_text()
    f = frames(svg)
    assert "squashfs_decompress" in f
    total = sum(n for n, _, _, _ in f["entry_SYSCALL_64_after_hwframe"])
    folded = (xz_run / "oncpu.folded").read_text().splitlines()
    assert sum(int(l.rsplit(" ", 1)[1]) for l in folded) >= total > 0


@pytest.mark.bpf
def test_oncpu_stacks_carry_the_user_frames_that_made_the_syscall(xz_run):
    """tar and cat read through libc: the frame under the syscall entry is a libc function, by name."""
    res = results.load(str(xz_run / "results.fst"))
    smp = res.header["sampling"]
    assert 0 < smp["with_user_stack"] <= smp["samples"]
    callers = {}
    for st, n in smp["folded"]:
        frames = st.split(";")
        if "entry_SYSCALL_64_after_hwframe" in frames:
            i = frames.index("entry_SYSCALL_64_after_hwframe")
            if i:
                callers[frames[i - 1]] = callers.get(frames[i - 1], 0) + n
    named = {f: n for f, n in callers.items() if not f.startswith("[")}
    assert any(re.search(r"read|write", f) for f in named), callers


@pytest.mark.unit
def test_no_timeline_file_without_the_writers_packages(tmp_path, monkeypatch):
    """Without perfetto and protobuf the timeline is missing (the results say why), not an empty file that reads
    as one."""
    from analysis import timeline

    def missing():
        raise ImportError("the timeline needs the Python packages perfetto and protobuf")
    monkeypatch.setattr(timeline, "protos", missing)
    res = type("Results", (), {"header": {"time": {"start_ns": 0}}})()
    with pytest.raises(ImportError):
        timeline.write(res, str(tmp_path / timeline.NAME))
    assert os.listdir(tmp_path) == []


@pytest.mark.bpf
def test_timeline_holds_every_request_and_block_request(xz_run):
    from analysis import timeline
    tracks, sl = timeline.read(str(xz_run / timeline.NAME))
    res = results.load(str(xz_run / "results.fst"))
    kinds = set(res.header["enums"]["req_kind"].values())
    top = [s for s in sl if s["depth"] == 0]
    assert sum(1 for s in top if s["name"] in kinds) == len(res["req"])
    assert sum(1 for s in top if re.match(r"[RW] \d+ KiB$", s["name"])) == len(res["io"])
    starts = sorted(f for s in sl for f in s["flows"])
    ends = sorted(f for s in sl for f in s["ends"])
    assert starts == ends and len(starts) > 0
    # a request's parts are nested inside it and add up to its wall time (the timeline drops none)
    parts = {p[:-3] for p in res.schema.parts}
    req_total = sum(s["end"] - s["start"] for s in top if s["name"] in kinds)
    part_total = sum(s["end"] - s["start"] for s in sl if s["depth"] == 1 and s["name"] in parts)
    req = res["req"]
    assert req_total == int((req["ts_end_ns"] - req["ts_start_ns"]).sum())
    # (a part that would run past the request's end is cut there: parts can exceed wall time by a few ns)
    assert part_total == pytest.approx(sum(int(req[p].sum()) for p in res.schema.parts), rel=1e-3)


@pytest.fixture(scope="module")
def erofs_tar_run(tmp_path_factory):
    """Cold sequential reads of compressed erofs on a loop device: readahead decompresses in kworkers."""
    out = tmp_path_factory.mktemp("out") / "erofs"
    fstrace("run", "--fs", "erofs", "--workload", "tar-data", "--scale", SCALE, "--cache", CACHE, "-o", str(out))
    return out


@pytest.mark.bpf
def test_timeline_flows_lead_from_a_read_through_its_bios_and_decompression_back_to_it(erofs_tar_run):
    """Request -> block request -> the decompression work item its completion queued -> the request that work
    woke: each link from the identity the records carry, every flow with both ends, source first, and every whole
    chain the records hold drawn."""
    from analysis import timeline
    res = results.load(str(erofs_tar_run / "results.fst"))
    _, sl = timeline.read(str(erofs_tar_run / timeline.NAME))
    links = timeline_flows(res, sl)
    by_kind = {}
    for f, (s, e, kind) in links.items():
        by_kind.setdefault(kind, []).append(f)
    assert set(by_kind) == {("request", "block request"), ("block request", "work item"),
                            ("work item", "request")}, {k: len(v) for k, v in by_kind.items()}
    # the records behind them: a work item names the io record of the completion that queued it (on the erofs
    # loop device, completed before the work was queued); a request names the work item that woke it, which
    # ran while the request was open
    io, work, req = res["io"], res["work"], res["req"]
    cause = timeline.io_of_work(io, work)
    queued = np.nonzero(work["io_complete_ns"] > 0)[0]
    assert len(queued) and (cause[queued] >= 0).all()
    assert (io["ts_complete_ns"][cause[queued]] <= work["ts_queue_ns"][queued]).all()
    loops = {d["dev"] for d in res.header["devices"] if d["is_loop"]}
    assert set(io["dev"][cause[queued]].tolist()) <= loops
    waker = timeline.waker_of_request(req, work)
    woken = np.nonzero(req["waker_seq"] > 0)[0]
    # (a work item still running when tracing stopped has no record yet: at most one per CPU)
    assert len(woken) and int((waker[woken] < 0).sum()) <= os.cpu_count()
    woken = woken[waker[woken] >= 0]
    assert (work["ts_start_ns"][waker[woken]] < req["ts_end_ns"][woken]).all()
    assert (work["ts_end_ns"][waker[woken]] > req["ts_start_ns"][woken]).all()
    # and whole chains: a read whose block request's completion queued the work item that woke that same read.
    # How many the records hold depends on the kernel, not on fstrace: erofs queues a decompression work item
    # only for a completion in an atomic context (else it decompresses there, or the reader does: after the
    # first such completion small readaheads decompress in the reader), and the read that waits for a
    # readahead's pages is often not the one that issued it, so a run can hold none; each one it holds is drawn
    owner = timeline.request_of_io(req, io)  # the read each block request was queued in
    held = [i for i in woken.tolist() if cause[waker[i]] >= 0 and owner[cause[waker[i]]] == i]
    read_to_block = {}
    for f in by_kind[("request", "block request")]:
        s, e, _ = links[f]
        read_to_block.setdefault(id(e), set()).add(id(s))
    block_to_work = {id(links[f][1]): id(links[f][0]) for f in by_kind[("block request", "work item")]}
    chains = 0
    for f in by_kind[("work item", "request")]:
        w, r, _ = links[f]
        block = block_to_work.get(id(w))
        chains += block is not None and id(r) in read_to_block.get(block, ())
    assert chains == len(held), (chains, len(held))


@pytest.mark.bpf
def test_offcpu_flamegraph_is_trimmed_at_the_scheduler(xz_run):
    """The off-CPU graph's roots are the reasons, and no scheduler or BPF frame is drawn."""
    svg = (xz_run / "offcpu.svg").read_text()
    f = frames(svg)
    assert any(name.startswith("[") for name in f)  # the reason roots
    assert "schedule" not in f and not any(n.startswith("bpf_prog_") for n in f)  # trimmed at the scheduler


@pytest.mark.bpf
def test_wallclock_flamegraph_colours_io_decompression_and_cpu_apart(xz_run):
    """One graph of requests' wall time: sampled on-CPU time plus measured off-CPU time, by category."""
    res = results.load(str(xz_run / "results.fst"))
    hz = res.header["sampling"]["hz"]
    folded = {}
    for line in (xz_run / "wallclock.folded").read_text().splitlines():
        st, n = line.rsplit(" ", 1)
        folded[st] = int(n)
    by_cat = {}
    for st, us in folded.items():
        cat = st.rsplit(";", 1)[1]
        by_cat[cat] = by_cat.get(cat, 0) + us
    samples = sum(n for _, n in res.header["sampling"]["folded"])
    cpu_us = sum(v for k, v in by_cat.items() if k.startswith("[cpu"))
    assert cpu_us == pytest.approx(samples * 1e6 / hz, rel=0.01)
    off_us = sum(ns for _, _, ns in res.header["offcpu"]["folded"]) / 1e3
    assert sum(v for k, v in by_cat.items() if not k.startswith("[cpu")) == pytest.approx(off_us, rel=0.01, abs=50)
    assert by_cat["[cpu: decompression]"] > 0 and by_cat["[io_wait]"] > 0
    f = frames((xz_run / "wallclock.svg").read_text())
    fills = {cat: f[cat][0][3] for cat in ("[cpu]", "[cpu: decompression]", "[io_wait]")}
    assert len(set(fills.values())) == 3
    assert fills == {c: flamegraph.CATEGORY_COLOURS[c] for c in fills}


def chromium(html_path, png_path):
    """Open a page in headless Chromium: (DOM after load, console messages, screenshot written)."""
    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--no-first-run", "--hide-scrollbars", "--enable-logging=stderr",
            "--v=0"]
    url = "file://" + str(html_path)
    dom = subprocess.run(base + ["--dump-dom", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=120)
    shot = subprocess.run(base + ["--window-size=1280,3000", "--screenshot=" + str(png_path), url],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    console = [l for l in (dom.stderr + shot.stderr).splitlines() if ":CONSOLE" in l]
    return dom.stdout, console, png_path.exists()


@pytest.mark.bpf
def test_the_console_check_catches_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script>x</body></html>")
    _, console, _ = chromium(bad, tmp_path / "bad.png")
    assert any("undefinedFunction" in l for l in console)


@pytest.mark.bpf
def test_html_report_renders_in_a_browser(xz_run, tmp_path):
    """The run's self-contained report: every figure laid out, no console message, a non-blank page."""
    from PIL import Image
    page = xz_run / "report.html"
    text = page.read_text()
    assert not re.search(r'(src|href)\s*=\s*"(https?:|//)', text)  # nothing fetched from the network
    figures = int(re.search(r'data-figures="(\d+)"', text).group(1))
    assert figures == 5  # latency CDF, attribution bars, wall-clock, on-CPU and off-CPU flamegraphs
    dom, console, shot = chromium(page, tmp_path / "report.png")
    assert console == []
    assert 'data-rendered-figures="%d"' % figures in dom
    assert "squashfs_decompress" in dom and "Latency CDF" in dom
    assert shot
    im = Image.open(tmp_path / "report.png").convert("RGB")
    colours = im.getcolors(maxcolors=1 << 20)
    assert len(colours) > 50  # plots and flamegraphs, not a blank or error page
    white = max(colours)[0] / (im.size[0] * im.size[1])
    assert white < 0.95


@pytest.mark.bpf
def test_offline_report_and_compare_write_html(xz_run, tmp_path):
    out = tmp_path / "r.html"
    fstrace("report", str(xz_run), "--html", str(out))
    assert out.read_text().count('<div class="figure">') == 5
    cmp = tmp_path / "c.html"
    fstrace("compare", str(xz_run), str(xz_run), "--html", str(cmp))
    dom, console, _ = chromium(cmp, tmp_path / "c.png")
    assert console == []
    # latency CDF, attribution, and the differential flamegraph of the one configuration both have
    assert 'data-rendered-figures="3"' in dom and "What changed" in dom and "Differential on-CPU flamegraph" in dom


@pytest.mark.unit
def test_linear_histogram_counts_every_value_and_keeps_the_tail():
    from analysis import hist
    values = list(range(0, 1000)) + [50000]  # p99 near 990: the outlier lands in the last row
    lin = hist.linear_slots(values)
    assert sum(lin["counts"]) == len(values)
    assert lin["step_us"] in (50.0, 100.0)  # a round step giving about 20 rows up to p99
    assert lin["counts"][-1] >= 1
    text = hist.format_linear_counts(lin["counts"], lin["step_us"], "usecs")
    assert text.count("\n") == len(lin["counts"]) + 1 and "+ :" in text


@pytest.mark.bpf
def test_part_histograms_count_the_requests_that_had_the_part(xz_run):
    res = results.load(str(xz_run / "results.fst"))
    s = json.loads((xz_run / "summary.json").read_text())
    from analysis import requests
    kinds = tuple(s["attribution"]["kinds"])  # the request kinds the attribution is over (stat calls too)
    assert "stat" in kinds
    reqs = requests.fs_requests(res, kinds=kinds)
    cnt = requests.counted_requests(res, kinds=kinds)
    for part, slots in s["attribution"]["part_hist_log2_us"].items():
        # recorded requests with the part, and the counted ones the kernel's own histogram holds
        assert sum(slots) == int((reqs[part] > 0).sum()) + (int(cnt["part_hist"][part].sum()) if cnt else 0)
