"""The speedscope export of a real run: valid by speedscope's own schema, the same stacks and totals as the
folded files, the on-CPU samples split by the threads the collector counted them in, and opened by the real
speedscope viewer (its npm package, served from the test's directory to headless Chromium) without error,
showing those totals."""
import functools
import http.server
import json
import os
import re
import shutil
import threading
import time

import jsonschema
import pytest

from analysis import results, speedscope
from browser import open_in_browser
from conftest import ROOT, fstrace, one_line_error, read_folded
from forge import forge, results_dir, split

RELEASE = os.path.join(ROOT, "build", "speedscope", "node_modules", "speedscope", "dist", "release")
GRAPHS = ["wallclock", "oncpu", "offcpu"]  # the export's first profiles, in this order


def stacks_of(doc, profile):
    """{folded stack: summed weight} of a sampled profile."""
    names = [f["name"] for f in doc["shared"]["frames"]]
    out = {}
    for sample, w in zip(profile["samples"], profile["weights"]):
        st = ";".join(names[i] for i in sample)
        out[st] = out.get(st, 0) + w
    return out


@pytest.fixture(scope="module")
def run(erofs_randread):
    return erofs_randread[0]


@pytest.mark.bpf
def test_export_holds_the_folded_stacks_in_time_units_and_per_thread(run, tmp_path):
    doc = json.loads((run / speedscope.NAME).read_text())
    with open(os.path.join(RELEASE, "file-format-schema.json")) as f:
        jsonschema.validate(doc, json.load(f))
    # report --speedscope writes the same file from the results alone
    fstrace("report", str(run), "--speedscope", str(tmp_path / "p.json"))
    assert (tmp_path / "p.json").read_text() == (run / speedscope.NAME).read_text()

    res = results.load(str(run / "results.fst"))
    smp = res.header["sampling"]
    hz = smp["hz"]
    profiles = doc["profiles"]
    assert all(p["unit"] == "microseconds" and p["type"] == "sampled" for p in profiles)
    for name, p in zip(GRAPHS, profiles):
        folded = read_folded(run / (name + ".folded"))
        scale = 1e6 / hz if name == "oncpu" else 1  # a sample stands for 1/hz s; the others are microseconds
        got = stacks_of(doc, p)
        assert set(got) == set(folded), name
        for st, n in folded.items():
            assert got[st] == pytest.approx(n * scale, rel=1e-12), (name, st)
        assert p["endValue"] == pytest.approx(sum(folded.values()) * scale, rel=1e-12)

    # the rest: one profile per thread the collector sampled, adding up to its count of recorded samples
    threads = profiles[len(GRAPHS):]
    assert threads
    tids = [int(re.match(r"on-CPU, thread (\d+) ", p["name"]).group(1)) for p in threads]
    assert sorted(tids) == sorted(set(smp["tids"]))
    per_thread = {}
    for tid, (st, n) in zip(smp["tids"], smp["folded"]):
        per_thread[tid] = per_thread.get(tid, 0) + n
    for tid, p in zip(tids, threads):
        assert sum(p["weights"]) == pytest.approx(per_thread[tid] * 1e6 / hz, rel=1e-12)
    assert sum(per_thread.values()) == smp["samples"] - smp["stacks_lost"]
    # a thread is one of those that made the requests (fio's), or a kworker working for them, or a thread of the
    # workload sampled only inside path calls (open, stat) whose end placed them on another filesystem (fio's
    # helper thread opening /sys files): sampled before the collector knew their file, then not recorded
    req_threads = set(res["req"]["pid"].tolist())
    path_call = re.compile(r"sys_(openat2?|open|newfstatat|statx|newstat|newlstat)$")
    stacks_by_tid = {}
    for tid, (st, n) in zip(smp["tids"], smp["folded"]):
        stacks_by_tid.setdefault(tid, []).append(st)
    for tid, p in zip(tids, threads):
        if tid in req_threads:
            assert "(fio)" in p["name"]
        elif "(kworker)" not in p["name"]:
            assert p["name"].startswith("on-CPU, thread %d (thread)" % tid)
            for st in stacks_by_tid[tid]:
                assert any(path_call.search(f) for f in st.split(";")), (p["name"], st)


class Site(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass


def viewer(site):
    """An HTTP server of directory `site` on 127.0.0.1: (server, port)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Site, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]


# what speedscope and software WebGL in a headless browser say on every load, whatever the profile
NOISE = re.compile(r"^(console\.log: (speedscope v|WebGL initialized|Importing as )|console\.timeEnd: import|"
                   r"log warning rendering: )")


def open_profile(tmp_path, profile_text):
    """Speedscope's release served with the profile from tmp_path/site: (rows of its profile table, problems)."""
    site = tmp_path / "site"
    shutil.copytree(RELEASE, site)
    (site / "profile.json").write_text(profile_text)
    httpd, port = viewer(site)
    b, page = None, None
    try:
        b, page = open_in_browser("http://127.0.0.1:%d/index.html#profileURL=/profile.json" % port)
        rows, deadline = [], time.time() + 30
        while time.time() < deadline:
            page.settle(0.2)
            rows = page.js('Array.prototype.map.call(document.querySelectorAll("tbody tr[title]"), '
                           'function (r) { return [r.title, r.lastElementChild.textContent]; })')
            if rows or any(not NOISE.match(e) for e in page.errors):
                break
        page.settle(0.5)
        return rows, [e for e in page.errors if not NOISE.match(e)]
    finally:
        if b:
            b.close()
        httpd.shutdown()
        httpd.server_close()


UNITS = {"ns": 1e-3, "µs": 1.0, "ms": 1e3, "s": 1e6}


def microseconds(shown):
    """speedscope's time as it prints it ("91.80ms", "812.00µs"): (microseconds, half its last digit's worth)."""
    m = re.fullmatch(r"([\d.]+)(ns|µs|ms|s)", shown)
    assert m, shown
    unit = UNITS[m.group(2)]
    return float(m.group(1)) * unit, 0.005 * unit


@pytest.mark.bpf
def test_speedscope_opens_the_run_and_shows_the_folded_totals(run, tmp_path):
    doc = json.loads((run / speedscope.NAME).read_text())
    res = results.load(str(run / "results.fst"))
    hz = res.header["sampling"]["hz"]
    rows, problems = open_profile(tmp_path, (run / speedscope.NAME).read_text())
    assert problems == []
    assert [t for t, _ in rows] == [p["name"] for p in doc["profiles"]]
    for name, (_, shown) in zip(GRAPHS, rows):
        total = sum(read_folded(run / (name + ".folded")).values()) * (1e6 / hz if name == "oncpu" else 1)
        value, rounding = microseconds(shown)
        assert abs(value - total) <= rounding + 1e-9, (name, shown, total)


@pytest.mark.bpf
def test_the_viewer_check_catches_a_profile_speedscope_refuses(tmp_path):
    """A frame index past the frame table: speedscope fails to import it, and the check says so."""
    bad = {"$schema": speedscope.SCHEMA, "shared": {"frames": [{"name": "a"}]},
           "profiles": [{"type": "sampled", "name": "x", "unit": "microseconds", "startValue": 0, "endValue": 1,
                         "samples": [[5]], "weights": [1]}]}
    rows, problems = open_profile(tmp_path, json.dumps(bad))
    assert rows == [] and any("Failed to load" in p for p in problems), problems


@pytest.mark.unit
def test_a_run_without_stacks_or_with_a_bench_is_one_line(real, tmp_path):
    _, header, data = split(real[1])
    out = tmp_path / "p.json"
    header["sampling"] = {"hz": 0, "why_off": "--sample-hz 0"}
    header["offcpu"] = None
    run = results_dir(str(tmp_path / "nostacks"), forge(header, data))
    line = one_line_error(fstrace("report", run, "--speedscope", str(out), check=False))
    assert line == "fstrace: error: --speedscope: %s/results.fst holds no stacks (sampling and off-CPU stacks " \
                   "were off)" % run
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "bench.json").write_text("{}")
    line = one_line_error(fstrace("report", str(bench), "--speedscope", str(out), check=False))
    assert "--speedscope exports one run's stacks" in line and speedscope.NAME in line
    assert not out.exists()


@pytest.mark.unit
def test_threads_that_do_not_fit_the_stacks_are_refused(real, tmp_path):
    _, header, data = split(real[1])
    assert len(header["sampling"]["tids"]) == len(header["sampling"]["folded"])
    if not header["sampling"]["folded"]:  # the short real run took no on-CPU sample: two rows of its own
        header["sampling"]["folded"] = [["vfs_read;filemap_read", 3], ["vfs_read;erofs_read_folio", 2]]
        header["sampling"]["tids"] = [1, 2]
    header["sampling"]["tids"] = header["sampling"]["tids"][1:]
    run = results_dir(str(tmp_path / "run"), forge(header, data))
    line = one_line_error(fstrace("report", run, "--speedscope", str(tmp_path / "p.json"), check=False))
    assert "header field sampling.tids: %d threads for %d stacks" % (len(header["sampling"]["tids"]),
                                                                    len(header["sampling"]["folded"])) in line
