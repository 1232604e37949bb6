"""What a results directory's summary becomes for people: the terminal report, the HTML reports (one run, or
result sets side by side), the flamegraphs the results hold stacks for, and the atomic write of any of them.

Functions over summaries and loaded results; the analysis modules (numpy, matplotlib) are imported only where
they are used, so that importing this costs commands that draw nothing (serve, --help) nothing.
"""
import os

from analysis.load import error, in_dir, load_doc, load_results, note_unverified
from common.safedir import RESULTS_FILE_MODE, VerifiedDir


def render_summary(s, full=True):
    """The terminal report (the verdict; full: then the detail), control characters escaped: task names and
    stacks (attach traces any task) and results from other machines must not drive the terminal."""
    from analysis import report
    return report.terminal_safe(report.render(s, full))


def analyse(res, gt, fst, full=True, baseline=None):
    """(summary, terminal report) of a loaded results file.  The header's types, the layouts and the bounds
    were checked on loading; content that still does not fit the analysis (a format 1 file damaged where
    nothing could tell, or values no collector writes) is one line, not a traceback."""
    from analysis import summary
    try:
        s = summary.summarize_run(res, gt, baseline)
        text = render_summary(s, full)
    except (ArithmeticError, AttributeError, IndexError, KeyError, TypeError, ValueError, MemoryError) as e:
        why = ("results format %d has no checksums: the file is probably damaged" % res.format if not res.verified
               else "its checksums match, but its content is not what this fstrace's collector writes")
        raise error(fst, "the analysis cannot use it (%s: %s); %s" % (type(e).__name__, str(e)[:100], why))
    note_unverified(res, fst)
    return s, text


def run_summary(d):
    """A run directory's summary: its summary.json, or, when it holds only results.fst (a collector run alone,
    or a run whose summary was not kept), the analysis of that file, as `report` makes it."""
    from analysis import results
    spath = os.path.join(d, "summary.json")
    if os.path.lexists(spath):
        return load_doc(spath, results.SUMMARY_SCHEMA)
    fst = in_dir(d, "results.fst")
    return analyse(load_results(fst), None, fst, full=False)[0]


def flamegraph_specs(res):
    """(name, folded stacks, title, subtitle, unit) of each flamegraph the results hold stacks for."""
    from analysis import sampling
    label = res.config.get("label") or "fstrace"
    out = []
    stacks = sampling.folded(res.header, kworkers=True)
    if res.header.get("sampling", {}).get("hz"):
        out.append(("oncpu", stacks, "on-CPU stacks inside requests, and of kworkers working for them: %s" % label,
                    "%d samples at %d Hz; orange: decompression, blue: block I/O"
                    % (sum(stacks.values()), res.header["sampling"]["hz"]), "samples"))
    offcpu = sampling.offcpu_folded(res.header)
    if res.header.get("offcpu"):
        weighted = {"[%s];%s" % k: max(1, ns // 1000) for k, ns in offcpu.items()}
        out.append(("offcpu", weighted, "off-CPU kernel stacks inside requests: %s" % label,
                    "weighted by microseconds blocked; roots: why it was off-CPU", "us"))
    wall = sampling.wallclock_folded(res.header)
    if wall:
        out.append(("wallclock", wall, "wall-clock kernel stacks inside requests: %s" % label,
                    "microseconds; green: CPU, orange: decompression, blue: I/O wait, teal: kworker, purple: lock "
                    "wait (light: spinning), brown: other D sleep (CPU from samples, off-CPU measured)", "us"))
    return out


FLAMEGRAPHS = [("wallclock", "Wall-clock flamegraph",
                "Where requests' time went: CPU from samples, off-CPU time as measured, one colour per category."),
               ("oncpu", "On-CPU flamegraph", "Sampled kernel stacks of the traced tasks inside their requests."),
               ("offcpu", "Off-CPU flamegraph", "Kernel stacks at switch-out, weighted by the time blocked.")]


def write_html(path, text):
    """Write a report (HTML, SVG) in place atomically.  Root writes reports where other users can write (/tmp)
    and from results made elsewhere: the directory is a VerifiedDir (one no other user can change: none could
    swap it or a name in it for a link), the temporary is made there exclusively under a random name, and a
    symlink at the final path is refused (rename would replace, never follow, one planted later)."""
    path = os.path.abspath(path)
    with VerifiedDir.open(os.path.dirname(path)) as d:
        d.write_atomic(os.path.basename(path), text, mode=RESULTS_FILE_MODE)


def run_html(s, res):
    """The self-contained HTML report of one run.  Its flamegraphs are drawn again from the results rather
    than read from the directory's SVG files: those could hold script, or be links out of the directory."""
    from analysis import flamegraph, html, plots, report, requests, tables
    label = s["run"].get("label") or "run"
    figs = [("Latency CDF", plots.latency_cdf([(label, requests.latencies_us(res))], "request latency")),
            ("Attribution", plots.attribution_bars([(label, s["attribution"]["parts_ns"])], res.schema,
                                                   "where request time went"))]
    drawn = {name: flamegraph.render(stacks, title, subtitle, unit=unit)
             for name, stacks, title, subtitle, unit in flamegraph_specs(res)}
    flames = [(heading, drawn[name], note) for name, heading, note in FLAMEGRAPHS if name in drawn]
    table = None
    if s["run"].get("workload"):
        doc = {"dataset_id": s["run"].get("dataset_id"), "cache": s["run"].get("cache"), "runs": 1,
               "kernel": s["run"]["kernel"], "images": [], "rows": [tables.row_from_summary(s)]}
        table = tables.render_bench(doc)
    return html.run_page(s, report.render(s), table, figs, flames)


def sets_html(title, sets, head_text):
    """HTML of result sets side by side (a comparison, or one bench): latency CDF and attribution per
    configuration, and the sets' tables.  sets: [(name prefix, run or bench directory)]."""
    from analysis import flamegraph, html, plots, requests, results, sampling, schema, tables
    cdf, bars, texts, schemas = [], [], [], []
    stacks = []  # per set: {(workload, label) or None: on-CPU folded stacks}, for the differential flamegraphs
    for side, d in sets:
        stacks.append({})
        bench = os.path.join(d, "bench.json")
        if os.path.exists(bench):
            doc = load_doc(bench, results.BENCH_SCHEMA)
            texts.append(("%s%s" % (side + ": " if side else "", d), tables.render_bench(doc)))
            runs = {}
            for r in doc["rows"]:
                runs.setdefault((r["workload"], r["label"]), r)
            run_dirs = [(" ".join(x for x in (side, wl, label) if x), in_dir(d, r["dir"], bench), (wl, label))
                        for (wl, label), r in runs.items()]
        else:
            run_dirs = [(" ".join(x for x in (side, os.path.basename(os.path.normpath(d))) if x), d, None)]
        for label, rd, key in run_dirs:
            if not os.path.exists(os.path.join(rd, "results.fst")):
                continue
            fst = in_dir(rd, "results.fst")
            res = load_results(fst)
            note_unverified(res, fst)
            cdf.append((label, requests.latencies_us(res)))
            bars.append((label, requests.attribution(requests.fs_requests(
                res, kinds=("read", "write", "open", "getdents")), None, res.schema)["parts_ns"]))
            schemas.append(res.schema)
            stacks[-1][key] = sampling.folded(res.header, kworkers=True)
    figs = [("Latency CDF per configuration", plots.latency_cdf(cdf, "request latency")),
            # the parts of the newest collector among them (an older one's file lacks the parts added since)
            ("Attribution per configuration", plots.attribution_bars(
                bars, max(schemas, key=lambda x: len(x.parts), default=schema.FORMAT_2_SCHEMA),
                "where request time went"))]
    if len(sets) == 2:  # a comparison: B against A, per configuration both have
        for key in [k for k in stacks[0] if k in stacks[1]]:
            what = " ".join(key) if key else "%s vs %s" % (sets[1][1], sets[0][1])
            figs.append(("Differential on-CPU flamegraph: %s" % what,
                         flamegraph.differential(stacks[0][key], stacks[1][key], what)))
    return html.compare_page(title, head_text, figs, texts)
