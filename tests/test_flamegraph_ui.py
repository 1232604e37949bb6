"""The flamegraphs people explore: in headless Chromium, a click on a frame zooms into its subtree, Reset Zoom
restores the graph, a search marks exactly the frames whose names match and prints their share -- checked
against the folded files the run wrote -- in report.html, in compare's HTML and in the standalone SVG files;
and the report's Content-Security-Policy stops script the page did not bring."""
import re

import pytest

from analysis import flamegraph
from browser import open_in_browser, file_url
from conftest import fstrace, read_folded

pytestmark = pytest.mark.bpf

# every element's name on the page, as the browser built it
ELEMENT_NAMES = 'Array.prototype.map.call(document.querySelectorAll("*"), function (e) { return e.localName; })'
# a graph's folded file, by the start of its title (flamegraph_specs, flamegraph.differential)
FOLDED_OF = [("wall-clock", "wallclock"), ("on-CPU", "oncpu"), ("off-CPU", "offcpu"),
             ("differential on-CPU", "oncpu")]
SEARCHES = ["_read", "/^z_erofs_|decompress/"]  # nested matches (vfs_read > filemap_read) count once


def folded_share(folded, query):
    """(weight of the stacks with a frame matching, total weight): the share a search must print."""
    m = re.fullmatch(r"/(.*)/", query)
    hit = (lambda f: re.search(m.group(1), f)) if m else (lambda f: query in f)
    return sum(n for st, n in folded.items() if any(hit(f) for f in st.split(";"))), sum(folded.values())


def frames(page, svg):
    """[{name, depth, weight, x, width, shown, match}] of the graph's frames in document order."""
    rows = page.js("""Array.prototype.map.call(%s.querySelectorAll("g.frame"), function (g) {
        var r = g.querySelector("rect");
        return [g.querySelector("title").textContent, +g.getAttribute("data-depth"), +g.getAttribute("data-weight"),
                +r.getAttribute("x"), +r.getAttribute("width"), getComputedStyle(g).display !== "none",
                g.classList.contains("fg-match")];
    })""" % svg)
    return [dict(zip(("name", "depth", "weight", "x", "width", "shown", "match"), [t.rsplit(" (", 1)[0]] + r))
            for t, *r in rows]


def subtree(fs, i):
    j = i + 1
    while j < len(fs) and fs[j]["depth"] > fs[i]["depth"]:
        j += 1
    return range(i, j)


def ancestors(fs, i):
    out, need = [], fs[i]["depth"] - 1
    for j in range(i - 1, -1, -1):
        if need >= 0 and fs[j]["depth"] == need:
            out.append(j)
            need -= 1
    return out


def exercise(page, svg, folded):
    """Zoom, reset and search one graph (`svg`: a JavaScript expression for its element) drawn from `folded`."""
    assert page.js("%s.getAttribute('data-interactive')" % svg) == "1"
    left, usable = (float(page.js("%s.getAttribute('%s')" % (svg, a))) for a in ("data-left", "data-usable"))
    unit = page.js("%s.getAttribute('data-unit')" % svg)
    before = frames(page, svg)
    assert sum(f["weight"] for f in before if f["depth"] == 0) == sum(folded.values())
    # the widest frame below a root that has frames above it and does not span the graph already
    candidates = [i for i, f in enumerate(before) if len(subtree(before, i)) > 1 and 20 < f["width"] < 0.9 * usable]
    assert candidates, "no frame to zoom into"
    i = max(candidates, key=lambda k: (before[k]["depth"] > 0, before[k]["width"]))
    page.click_element('%s.querySelectorAll("g.frame")[%d].querySelector("rect")' % (svg, i))
    page.settle()
    after = frames(page, svg)
    scale = usable / before[i]["width"]
    assert after[i]["x"] == pytest.approx(left, abs=2e-3) and after[i]["width"] == pytest.approx(usable, abs=2e-3)
    inside, up = set(subtree(before, i)), set(ancestors(before, i))
    for j, (b, a) in enumerate(zip(before, after)):
        if j in inside:  # widths in proportion to their weights, positions within the clicked frame's span
            assert a["shown"] and a["width"] == pytest.approx(b["width"] * scale, rel=1e-3, abs=3e-3), (j, b, a)
            assert a["width"] == pytest.approx(usable * b["weight"] / before[i]["weight"], rel=1e-3, abs=3e-3)
            assert left - 1e-3 <= a["x"] and a["x"] + a["width"] <= left + usable + 3e-3
        elif j in up:
            assert a["shown"] and a["width"] == pytest.approx(usable, abs=2e-3)
        else:
            assert not a["shown"], (j, b, a)
    page.click_element('%s.querySelector(".fg-reset")' % svg)
    page.settle()
    restored = frames(page, svg)
    assert all(r["shown"] for r in restored)
    assert [(r["x"], r["width"]) for r in restored] == [(b["x"], b["width"]) for b in before]
    assert page.js("%s.querySelector('.fg-reset').getAttribute('visibility')" % svg) == "hidden"

    counted = 0
    for query in SEARCHES:
        page.answer_prompt(query)
        page.click_element('%s.querySelector(".fg-search")' % svg)
        page.settle()
        fs = frames(page, svg)
        m = re.fullmatch(r"/(.*)/", query)
        want = [bool(re.search(m.group(1), f["name"])) if m else query in f["name"] for f in fs]
        assert [f["match"] for f in fs] == want, query
        hit, total = folded_share(folded, query)
        text = page.js("%s.querySelector('.fg-matched').textContent" % svg)
        got = re.fullmatch(r"Matched: ([\d.]+)% \((\d+) of (\d+) (\S+)\)", text)
        assert got, text
        assert (int(got.group(2)), int(got.group(3)), got.group(4)) == (hit, total, unit), (query, text)
        assert float(got.group(1)) == pytest.approx(100.0 * hit / total, abs=0.005 + 1e-9)
        counted += hit
    return counted


def graphs(page):
    """[(JavaScript expression of the graph, its folded file's name)] of a page's flamegraphs."""
    titles = page.js('Array.prototype.map.call(document.querySelectorAll("svg.flamegraph"), '
                     'function (s) { return s.querySelector("text").textContent; })')
    out = []
    for k, title in enumerate(titles):
        name = [n for prefix, n in FOLDED_OF if title.startswith(prefix)][-1]
        out.append(('document.querySelectorAll("svg.flamegraph")[%d]' % k, name))
    return out


@pytest.fixture(scope="module")
def run(erofs_randread):
    return erofs_randread[0]


def test_report_flamegraphs_zoom_reset_and_search(run):
    b, page = open_in_browser(file_url(run / "report.html"))
    try:
        found = graphs(page)
        assert sorted(n for _, n in found) == ["offcpu", "oncpu", "wallclock"]
        matched = {name: exercise(page, svg, read_folded(run / (name + ".folded"))) for svg, name in found}
        assert matched["wallclock"] > 0  # erofs's frames are in the wall-clock graph
        assert page.errors == []  # no script error and nothing the page's policy refused
    finally:
        b.close()


def test_compare_html_flamegraph_zooms_and_searches(run, tmp_path):
    out = tmp_path / "c.html"
    fstrace("compare", str(run), str(run), "--html", str(out))
    b, page = open_in_browser(file_url(out))
    try:
        found = graphs(page)
        assert [n for _, n in found] == ["oncpu"]  # the differential graph: B's samples
        exercise(page, found[0][0], read_folded(run / "oncpu.folded"))
        assert page.errors == []
    finally:
        b.close()


@pytest.mark.parametrize("name", ["wallclock", "oncpu", "offcpu", "differential"])
def test_standalone_svg_zooms_and_searches(run, tmp_path, name):
    if name == "differential":
        svg = tmp_path / "d.svg"
        fstrace("compare", str(run), str(run), "--flamegraph", str(svg))
        name = "oncpu"
    else:
        svg = run / (name + ".svg")
    b, page = open_in_browser(file_url(svg))
    try:
        exercise(page, "document.documentElement", read_folded(run / (name + ".folded")))
        assert page.errors == []
    finally:
        b.close()


def test_frame_names_stay_text_when_zoomed_and_searched(tmp_path):
    """A name that is markup is drawn, relabelled and searched as text: no element, no script."""
    evil = '<img src=x onerror=alert(1)><script>alert(2)</script>'
    stacks = {"a;%s;b" % evil: 30, "a;c": 10, "d": 10}
    path = tmp_path / "evil.svg"
    path.write_text(flamegraph.standalone(flamegraph.render(stacks, "t")))
    b, page = open_in_browser(file_url(path))
    try:
        tags = set(page.js(ELEMENT_NAMES))
        assert tags == {"svg", "rect", "text", "g", "title", "script"}
        exercise(page, "document.documentElement", stacks)
        page.answer_prompt("<img")
        page.click_element('document.querySelector(".fg-search")')
        page.settle()
        assert page.js('document.querySelector(".fg-matched").textContent') == "Matched: 60.00% (30 of 50 samples)"
        page.click_element('document.querySelectorAll("g.frame")[0].querySelector("rect")')  # zoom: relabels
        page.settle()
        labels = page.js('Array.prototype.map.call(document.querySelectorAll("g.frame text"), '
                         'function (t) { return t.textContent; })')
        assert any(l.startswith("<img src=x") for l in labels), labels
        tags = set(page.js(ELEMENT_NAMES))
        assert tags == {"svg", "rect", "text", "g", "title", "script"}
        assert page.errors == []  # an alert would be here as a dialog
    finally:
        b.close()


def test_the_policy_stops_script_the_page_did_not_bring(run, tmp_path):
    """Were markup ever to slip into the page, the Content-Security-Policy would not run it or fetch for it."""
    page_text = (run / "report.html").read_text()
    assert page_text.count("<script") == 1 and "Content-Security-Policy" in page_text
    injected = page_text.replace('<h1>', '<script>document.title = "ran";</script>'
                                 '<img src="http://127.0.0.1:9/x.png"><h1>', 1)
    out = tmp_path / "injected.html"
    out.write_text(injected)
    b, page = open_in_browser(file_url(out))
    try:
        assert page.js("document.title") != "ran"
        assert page.js("document.body.getAttribute('data-rendered-figures')") == "5"  # its own script ran
        refused = [e for e in page.errors if "Content Security Policy" in e and "blocked" in e]
        assert len(refused) == 2 == len(page.errors), page.errors
        assert "Executing inline script" in refused[0] and "http://127.0.0.1:9/x.png" in refused[1], refused
    finally:
        b.close()
