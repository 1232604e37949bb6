"""`report` on results from other machines: nothing in a results or bench directory, and (when root runs it) no
link an unprivileged user plants, makes it write or read elsewhere, run script in the HTML report's viewer, or
drive the terminal."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from analysis import flamegraph, results, summary, tables
from analysis.render import flamegraph_specs
from conftest import FSTRACE, NOBODY, one_line_error
from forge import forge, results_dir, split


@pytest.fixture
def victim():
    """A file only root can reach, and what it holds."""
    d = tempfile.mkdtemp(prefix="fstrace-victim-")
    os.chmod(d, 0o700)
    path = os.path.join(d, "precious")
    secret = "precious-%s" % os.urandom(8).hex()
    with open(path, "w") as f:
        f.write(secret)
    yield path, secret
    shutil.rmtree(d)


@pytest.fixture
def sticky_dir():
    """Root's sticky directory every user may write to, as /tmp: a report may be written there (no other user
    can rename root's files in it), but not through a link another user planted (fs.protected_symlinks is off
    here: fstrace alone must refuse)."""
    d = tempfile.mkdtemp(prefix="fstrace-sticky-")
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d)


def fstrace(*args):
    return subprocess.run([FSTRACE] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300)


def plant_link(target, link):
    subprocess.run(NOBODY + ["ln", "-s", target, link], check=True)
    assert os.lstat(link).st_uid == 65534


@pytest.mark.bpf
def test_html_target_symlink_is_refused(real, tmp_path, victim, sticky_dir):
    run = results_dir(str(tmp_path / "run"), real[1])
    html = os.path.join(sticky_dir, "report.html")
    plant_link(victim[0], html)
    line = one_line_error(fstrace("report", run, "--html", html))
    assert "symbolic link" in line and html in line
    assert open(victim[0]).read() == victim[1]
    assert os.readlink(html) == victim[0]
    assert sorted(os.listdir(sticky_dir)) == ["report.html"]


@pytest.mark.bpf
def test_planted_tmp_symlink_is_not_followed(real, tmp_path, victim, sticky_dir):
    """The old FILE.tmp name, planted as a link: the report goes to a fresh temporary of its own."""
    run = results_dir(str(tmp_path / "run"), real[1])
    html = os.path.join(sticky_dir, "report.html")
    plant_link(victim[0], html + ".tmp")
    p = fstrace("report", run, "--html", html)
    assert p.returncode == 0, p.stderr
    assert open(victim[0]).read() == victim[1]
    assert os.readlink(html + ".tmp") == victim[0]
    st = os.lstat(html)
    assert not os.path.islink(html) and st.st_uid == 0 and st.st_mode & 0o777 == 0o640
    assert open(html).read().startswith("<!DOCTYPE html>")
    assert sorted(os.listdir(sticky_dir)) == ["report.html", "report.html.tmp"]


@pytest.mark.unit
def test_svgs_of_the_results_directory_never_reach_the_html(real, tmp_path, victim):
    run = results_dir(str(tmp_path / "run"), real[1])
    with open(os.path.join(run, "oncpu.svg"), "w") as f:
        f.write('<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)">'
                '<script>alert(2)</script><foreignObject><iframe src="http://evil.example/"/></foreignObject>'
                '<image href="http://evil.example/x.png"/></svg>')
    os.symlink(victim[0], os.path.join(run, "offcpu.svg"))
    os.symlink("/etc/hostname", os.path.join(run, "wallclock.svg"))
    out = str(tmp_path / "out.html")
    p = fstrace("report", run, "--html", out)
    assert p.returncode == 0, p.stderr
    page = open(out).read()
    for bad in ("alert(", "onload", "foreignObject", "evil.example", victim[1]):
        assert bad not in page, bad
    assert page.count("<script") == 1  # the page's own figure counter
    # the flamegraphs in the page are the ones drawn from the records, not the files
    res = results.load(os.path.join(run, "results.fst"))
    drawn = {name: flamegraph.render(st, title, sub, unit=unit) for name, st, title, sub, unit in flamegraph_specs(res)}
    assert "offcpu" in drawn and "wallclock" in drawn
    for svg in drawn.values():
        assert svg[svg.index("<svg"):] in page


@pytest.mark.unit
def test_markup_in_header_strings_is_escaped_in_the_html(real, tmp_path):
    _, header, data = split(real[1])
    header["config"] = {"label": "<script>alert(3)</script>", "workload": "<img src=x onerror=alert(4)>",
                        "dataset_id": "d", "cache": "cold", "fs": "erofs"}
    header["kernel"]["release"] = "</pre><script>alert(5)</script>"
    run = results_dir(str(tmp_path / "run"), forge(header, data))
    out = str(tmp_path / "out.html")
    p = fstrace("report", run, "--html", out)
    assert p.returncode == 0, p.stderr
    page = open(out).read()
    assert "alert(" in page  # the text is there, as text
    for bad in ("<script>alert", "<img src=x", "</pre><script>"):
        assert bad not in page, bad


@pytest.mark.unit
def test_escape_sequences_in_header_strings_are_not_printed_raw(real, tmp_path):
    _, header, data = split(real[1])
    header["kernel"]["release"] = "6.18\x1b]0;owned\x07\x1b[2J"
    header["config"] = {"label": "l\x1b[31m", "workload": "w\u009b1m", "dataset_id": "d\u202e", "cache": "cold",
                        "fs": "erofs"}
    stack, reason, ns = header["offcpu"]["folded"][0]
    header["offcpu"]["folded"][0] = ["%s;evil\x1b[5m" % stack, reason, ns]
    run = results_dir(str(tmp_path / "run"), forge(header, data))
    p = fstrace("report", run)
    assert p.returncode == 0, p.stderr
    for raw_char in ("\x1b", "\x07", "\u009b", "\u202e"):
        assert raw_char not in p.stdout and raw_char not in p.stderr
    assert "6.18\\x1b]0;owned\\x07\\x1b[2J" in p.stdout and "l\\x1b[31m" in p.stdout
    assert "w\\x9b1m" in p.stdout and "d\\u202e" in p.stdout
    # and in the one line of an error about such a value
    header["time"]["end_ns"] = "\x1b[2J"
    run = results_dir(str(tmp_path / "bad"), forge(header, data))
    line = one_line_error(fstrace("report", run))
    assert "\x1b" not in line and "\\x1b[2J" in line


def bench_dir(d, dirs, fst):
    """A bench directory whose bench.json names these run directories (rows as a bench writes them)."""
    os.makedirs(d)
    row = tables.row_from_summary(summary.summarize(results.load(fst)))
    doc = {"schema_version": 1, "kind": "fstrace-bench", "dataset_id": "x", "runs": 1, "cache": "cold",
           "iops_cap": None, "images": [], "kernel": "k",
           "rows": [dict(row, dir=r, run=1, workload="w", label="l%d" % i) for i, r in enumerate(dirs)]}
    with open(os.path.join(d, "bench.json"), "w") as f:
        json.dump(doc, f)
    return d


@pytest.mark.unit
def test_bench_json_paths_resolve_only_inside_the_directory(real, tmp_path):
    outside = results_dir(str(tmp_path / "outside"), real[1], json.dumps({"ground_truth": {}}))
    # a bench whose run is inside it reports (the check does not refuse what is legitimate)
    good = bench_dir(str(tmp_path / "good"), ["r/run-1"], real[0])
    results_dir(os.path.join(good, "r", "run-1"), real[1], json.dumps({"ground_truth": {}}))
    p = fstrace("report", good)
    assert p.returncode == 0 and "fstrace bench: dataset x" in p.stdout, p.stderr
    for i, name in enumerate(["../outside", outside, "link", "r/../../outside", "ok\x1b[2J/../../outside"]):
        b = bench_dir(str(tmp_path / ("b%d" % i)), [name], real[0])
        os.symlink(outside, os.path.join(b, "link"))
        line = one_line_error(fstrace("report", b))
        assert "bench.json" in line and "leads outside" in line and "\x1b" not in line, line
        line = one_line_error(fstrace("compare", b, good, "--html", str(tmp_path / "c.html")))
        assert "leads outside" in line, line
        assert not os.path.exists(tmp_path / "c.html")


@pytest.mark.unit
def test_symlinked_results_file_out_of_the_directory_is_refused(real, tmp_path, victim):
    run = str(tmp_path / "run")
    os.makedirs(run)
    os.symlink(victim[0], os.path.join(run, "results.fst"))
    line = one_line_error(fstrace("report", run))
    assert "leads outside" in line and victim[1] not in line


@pytest.mark.unit
def test_json_files_linked_out_of_the_directory_are_refused(real, tmp_path, victim):
    run = results_dir(str(tmp_path / "run"), real[1])
    os.symlink(victim[0], os.path.join(run, "summary.json"))
    line = one_line_error(fstrace("report", run))
    assert line == "fstrace: error: %s/summary.json leads outside %s; refused" % (run, run)
    bench = str(tmp_path / "bench")
    os.makedirs(bench)
    os.symlink(victim[0], os.path.join(bench, "bench.json"))
    for p in (fstrace("report", bench), fstrace("compare", bench, run)):
        line = one_line_error(p)
        assert line == "fstrace: error: %s/bench.json leads outside %s; refused" % (bench, bench)


@pytest.fixture
def shared_dir():
    """A directory everyone may read and write (as nobody runs report on it too)."""
    d = tempfile.mkdtemp(prefix="fstrace-shared-")
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d)


BENCH_FIELDS = ["io_wait_share", "oncpu_share", "other_share", "kworker_share", "lock_share", "decompression_share",
                "wall_s", "io_wait_s", "loop_requests", "loop_mean_bytes", "pagecache_misses"]


@pytest.mark.bpf
@pytest.mark.parametrize("field", BENCH_FIELDS)
def test_bench_figure_of_wrong_type_is_one_line(real, shared_dir, field):
    """bench.json's figures are checked before a table is drawn from them: one line naming the field, in the text
    report, the HTML report and a comparison, as root and as an unprivileged user."""
    b = bench_dir(os.path.join(shared_dir, "b"), ["r/run-1"], real[0])
    results_dir(os.path.join(b, "r", "run-1"), real[1], json.dumps({"ground_truth": {}}))
    html = os.path.join(shared_dir, "r.html")
    every_reader = [(who, argv) for who in ([], NOBODY)
                    for argv in (["report", b], ["report", b, "--html", html], ["compare", b, b])]
    # every reader of the first wrong type; the other types through one reader each in turn (the schema check is
    # the readers' shared first step, and each start of the command line is a Python start)
    for i, value in enumerate(("x", [1], {"a": 1}, True)):
        with open(os.path.join(b, "bench.json")) as f:
            doc = json.load(f)
        doc["rows"][0][field] = value
        with open(os.path.join(b, "bench.json"), "w") as f:
            json.dump(doc, f)
        for who, argv in every_reader if i == 0 else every_reader[i::3]:
            p = subprocess.run(who + [FSTRACE] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=300)
            line = one_line_error(p)
            assert "bench.json: field rows[0].%s: expected" % field in line, (who, argv, line)
        assert not os.path.exists(html)


@pytest.mark.bpf
@pytest.mark.parametrize("name,size", [("summary.json", 1 << 31), ("summary.json", 1 << 40), ("bench.json", 1 << 33)])
def test_json_file_grown_huge_is_refused_unread(real, shared_dir, name, size):
    """A JSON file of a results or bench directory grown (sparse) to gigabytes: one line saying so, not a
    MemoryError or minutes spent reading it."""
    d = bench_dir(os.path.join(shared_dir, "b"), ["r/run-1"], real[0])
    run = results_dir(os.path.join(d, "r", "run-1"), real[1], json.dumps({"ground_truth": {}}))
    if name == "summary.json":
        d = run
    os.truncate(os.path.join(d, name), size)
    for who in ([], NOBODY):
        line = one_line_error(subprocess.run(who + [FSTRACE, "report", d], stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True, timeout=120))
        assert line == "fstrace: error: %s/%s: %d bytes: more than fstrace writes there (at most %d); refused" % (
            d, name, size, results.MAX_JSON_BYTES), line


@pytest.mark.unit
def test_header_length_beyond_the_bound_is_refused_unread(real, tmp_path):
    """A results file whose preamble claims a header of gigabytes (the file sparse to that size): refused from the
    preamble, the header never read."""
    raw = real[1]
    hlen = 1 << 31
    f = tmp_path / "results.fst"
    f.write_bytes(raw[:12] + hlen.to_bytes(4, "little") + raw[16:])
    os.truncate(f, hlen + len(raw))
    line = one_line_error(subprocess.run([FSTRACE, "report", str(tmp_path)], stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, timeout=120))
    assert line == "fstrace: error: %s: header of %d bytes: more than any collector writes (at most %d); refused" \
        % (f, hlen, results.MAX_HEADER_BYTES), line
