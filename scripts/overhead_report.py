"""The markdown report of one `make bench-overhead` run, from the JSON the bench wrote: what ran it (command, date,
machine, kernel, tiers), its targets and their outcome, and its full output.  `make docs-overhead-run` writes
docs/generated/overhead-run.md with it (`scripts/docs_generated.py overhead`), from a copy of the JSON kept beside
it; the file is made only this way.  README's overhead table is written from the same JSON (readme_block: the block
between README_BEGIN and README_END).
"""
import shlex

from common import machine
from scripts.docs_generated import MADE_BY


# the windowed figures the bench checks against their true counts (scripts/bench_overhead.py coverage_run)
FIGURES = (("requests", "request estimate"), ("block", "windowed block requests"),
           ("erofs", "windowed erofs reads"))


def ms_list(ms):
    """Per-run figures as text, "-" for a run without one."""
    return ", ".join("%.1f" % m if m is not None else "-" for m in ms)


def check_text(c):
    """One run's check of a windowed figure as text (figure_check)."""
    if not c["available"]:
        return "unavailable (%s)" % c["why"]
    return "%.0f (%.0f-%.0f) vs %d %s" % (c["estimate"], *c["interval95"], c["truth"],
                                         "inside" if c["covered"] else "OUTSIDE")


def render(out):
    lines = ["%-22s %-20s %28s %22s %14s %14s %9s %9s %13s" % ("case", "config", "throughput MiB/s min/med/max",
                                                                 "ratio min/med/max", "med interval", "records/s med",
                                                                 "dropped", "attach s", "collector ms/s")]
    for case, res in out["cases"].items():
        for cfg, r in res.items():
            if cfg not in out["configs"]:
                continue
            t, q = r["throughput_bytes_per_s"], r["ratio_to_none"]
            lines.append("%-22s %-20s %9.1f %8.1f %8.1f   %6.3f %6.3f %6.3f %14s %14s %9s %9s %13s" % (
                case, cfg, t["min"] / 2**20, t["median"] / 2**20, t["max"] / 2**20, q["min"], q["median"], q["max"],
                "%.3f-%.3f" % tuple(q["median_interval"]) if q.get("median_interval") else "-",
                "%.0f" % r["records_per_s"]["median"] if r.get("records_per_s") else "-",
                "%d" % r["dropped"]["max"] if r.get("dropped") is not None else "-",
                "%.3f" % r["load_attach_s"]["median"] if r.get("load_attach_s") else "-",
                "%.1f" % r["collector_ms_per_s"]["median"] if r.get("collector_ms_per_s") else "-"))
    for case, res in out["cases"].items():
        for cfg, r in res.items():
            if cfg not in out["configs"]:
                continue
            for p in r.get("probe_costs") or []:
                lo, hi = p.get("ns_per_event_range") or (p["ns_per_event"], p["ns_per_event"])
                lines.append("  per-event cost %-22s %-18s %-34s %10.0f events/s %8.0f ns/event (%.0f-%.0f)%s" % (
                    case, cfg, p["program"][:34], p["events_per_s"] or 0, p["ns_per_event"] or 0, lo, hi,
                    " windowed" if p.get("windowed") else ""))
    lines += windows_cost_lines(out)
    for t in out.get("targets", []):
        lines.append("target %-58s %-14s %s: %s" % (t["what"], t["target"], target_value(t), t["verdict"]))
    for case, res in out["cases"].items():
        for cfg, cc in (res.get("completion_cost") or {}).items():
            c = cc["ns_per_completion"]
            lines.append("  block_rq_complete %-22s %-20s %s ns per completion (runs: %s)" % (
                case, cfg, "%.0f (%.0f-%.0f)" % (c["median"], c["min"], c["max"]) if c else "-",
                ", ".join("%.0f" % x if x is not None else "-" for x in cc["runs"])))
            w = (cc.get("with_windowed") or {}).get("ns_per_completion")
            if w:
                lines.append("  block_rq_complete %-22s %-20s %.0f (%.0f-%.0f) ns per completion with the windowed "
                             "hook" % (case, cfg, w["median"], w["min"], w["max"]))
    cov = out.get("window_coverage") or {}
    for r in cov.get("runs", []):
        lines.append("  %g s %s randread %-20s %s" % (cov["runtime_s"], r["start"], r["config"], "; ".join(
            "%s %s" % (key, check_text(r[key])) for key, _ in FIGURES)))
    m = out.get("main_command")
    if m:
        sm = m["tracer"].get("sampled") or {}
        lines.append("main command (%s): tracer part %.1f %% of request time (sampled timing); %.1f %% of on-CPU "
                     "samples inside requests are fstrace's (95 %%: %.1f-%.1f %%)" % (
                         m["command"], 100 * (m["tracer"]["part_share"] or 0), 100 * (sm.get("share") or 0),
                         100 * sm["share_95"][0] if sm.get("share_95") else 0,
                         100 * sm["share_95"][1] if sm.get("share_95") else 0))
    for r in (out.get("idle") or {}).get("rows", []):
        lines.append("idle collector %-20s beside %5d threads: %s ms/s" % (
            r["config"], r["threads"], ms_list(r["collector_ms_per_s"])))
    a = out.get("analysis")
    if a:
        lines.append("analysis: %d records in %.2f s = %.2f s per million records (dropped while recording: %d)"
                     % (a["records"], a["seconds"], a["seconds_per_million"], a["dropped"]))
    return "\n".join(lines)


def windows_cost_lines(out):
    """Per windowed configuration and fio case: what its windowed hooks cost fio's reads, measured on them."""
    lines = []
    for case, res in out["cases"].items():
        for cfg, r in res.items():
            wc = (r.get("window_counts") or {}) if cfg in out["configs"] else {}
            lost = wc.get("traced_reads_lost_over_time")
            if lost:
                lines.append("  windows' cost to fio's reads, measured on them %-22s %-20s %.2f %% over the run "
                             "(median; %.2f-%.2f %%; %d of %d runs had one)" % (
                                 case, cfg, 100 * lost["median"], 100 * lost["min"], 100 * lost["max"],
                                 wc["traced_reads_lost_runs"], wc["repetitions"]))
    return lines


def target_value(t):
    """A target row's figure as text: its median and interval (or range), and its floor's, where it has them."""
    if "median" not in t:
        return "-"
    text = "%s %s" % ("median" if "interval" in t or "range" in t else "value",
                      "%d" % t["median"] if isinstance(t["median"], int) else "%.3f" % t["median"])
    if "interval" in t:
        text += ", %.0f %% interval %.3f-%.3f" % (100 * t["coverage"], *t["interval"])
    if "range" in t:
        text += ", range %.3f-%.3f" % tuple(t["range"])
    if "floor_median" in t:
        text += " (floor %.3f, %.3f-%.3f)" % (t["floor_median"], *t["floor_interval"])
    return text


def cell(text):
    """Text for a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def machine_text(m):
    """The machine of a run, in words."""
    m = machine.stored(m)
    if not m:
        return "not recorded"
    parts = ["%s, %s CPUs" % (m.get("arch"), m.get("cpus"))]
    if m.get("cpu"):
        parts.append(m["cpu"])
    if m.get("memory_bytes"):
        parts.append("%g GiB" % round(m["memory_bytes"] / (1 << 30), 1))
    parts.append("virtual machine: %s, container: %s" % (m.get("vm") or "none detected",
                                                         m.get("container") or "none detected"))
    return "; ".join(parts)


def tiers_text(tiers):
    """The tier of each probe of one of the run's fstrace configurations (fstrace-full's where it ran), by tier."""
    if not tiers:
        return "not recorded"
    by = {}
    for probe, tier in sorted(tiers["probes"].items()):
        by.setdefault(tier, []).append(probe)
    return "%s's probes: %s" % (tiers["config"], "; ".join(
        "%s: %s" % (tier, ", ".join(probes)) if tier != "unavailable" else "unavailable: %d (%s)" % (
            len(probes), ", ".join(probes[:3]) + ", ...") for tier, probes in sorted(by.items())))


def command(out):
    args = out.get("bench_args")
    if args is None:
        return "not recorded"
    return "sudo make bench-overhead" + (' BENCH_ARGS="%s"' % shlex.join(args) if args else "")


def render_markdown(out):
    lines = ["# One run of `make bench-overhead`", "",
             MADE_BY % "docs-overhead-run", "",
             "The bench's JSON is kept beside this file as `overhead-run.json`. What each figure and target means: "
             "[overhead.md](../overhead.md).", "",
             "| | |", "|---|---|",
             "| command | `%s` |" % command(out),
             "| started, ended (UTC) | %s, %s |" % (out.get("started_utc", "not recorded"),
                                                  out.get("ended_utc", "not recorded")),
             "| machine | %s |" % cell(machine_text(out.get("machine"))),
             "| kernel | %s |" % cell(out.get("kernel")),
             "| tiers | %s |" % cell(tiers_text(out.get("tiers"))),
             "| repetitions, dataset scale | %s, %s |" % (out.get("reps"), out.get("scale", "not recorded")),
             "| configurations | %s |" % cell(", ".join(out.get("configs", []))),
             "", "## Targets", "",
             "| target | required | figure | outcome |", "|---|---|---|---|"]
    for t in out.get("targets", []):
        lines.append("| %s | %s | %s | %s |" % (cell(t["what"]), cell(t["target"]), cell(target_value(t)),
                                               cell(t["verdict"])))
    lines += ["", "## Full output", "", "```", render(out), "```", ""]
    return "\n".join(lines)


# README's overhead table: per kind of target (the bench's target rows' "kind"), what it asks
README_TARGETS = [
    ("always-on", "`attach` and `serve` (default budget): always-attached programs + collector",
     "at most 5 ms CPU per s of workload, every case"),
    ("budget-ratio", "`attach` and `serve` (default budget): throughput ratio to untraced",
     "median >= 0.985, every case"),
    ("budget-not-below", "`attach` and `serve` (default budget): no case below 0.98", "no case not met at 0.98"),
    ("completion-cost", "exact block path: `block_rq_complete` ns per completion", "no more than biolatency's"),
    ("estimate-requests", "request estimate against fio's count", "inside the 95 % interval, every 30 s run"),
    ("estimate-block", "windowed block figure against /proc/diskstats", "inside the 95 % interval, every 30 s run"),
    ("estimate-erofs", "windowed erofs figure against fio's count", "inside the 95 % interval, every 30 s run"),
    ("full-ratio", "`run` (full attribution): throughput ratio to untraced",
     "0.97 cold randread, 0.90 warm, 0.97 cold tar"),
    ("block-vs-biolatency", "`--block-only` against biolatency", "not below 1"),
    ("drops", "records dropped", "none"),
    ("load-attach", "load and attach", "under 0.3 s"),
    ("analysis", "analysis", "under 2 s per million records"),
    ("tracer-share", "fstrace's share of the samples inside requests", "under 10 %"),
]
OUTCOMES = ("met", "not met", "undecided", "unavailable")
README_BEGIN = "<!-- overhead-run: written by make docs-overhead-run from docs/generated/overhead-run.json -->"
README_END = "<!-- /overhead-run -->"


def outcome(verdict):
    """A target row's verdict as one of OUTCOMES."""
    for o in ("met", "not met", "unavailable"):
        if verdict.startswith(o):
            return o
    return "undecided"


def outcomes_text(rows):
    """How many of rows (target rows of one kind) were met, not met, undecided, unavailable."""
    if not rows:
        return "not in this run"
    n = {o: 0 for o in OUTCOMES}
    for r in rows:
        n[outcome(r["verdict"])] += 1
    return ", ".join("%d %s" % (n[o], o) for o in OUTCOMES if n[o])


def readme_block(out):
    """README's overhead table of a run, between README_BEGIN and README_END."""
    lines = [README_BEGIN, "", "| target | required | outcome |", "|---|---|---|"]
    targets = out.get("targets", [])
    for kind, what, required in README_TARGETS:
        lines.append("| %s | %s | %s |" % (what, required,
                                          outcomes_text([t for t in targets if t.get("kind") == kind])))
    m = out.get("machine") or {}
    lines += ["", "`%s` on %s, Linux %s, %s: the run's figures, each target per case and configuration, in "
              "[docs/generated/overhead-run.md](docs/generated/overhead-run.md)." % (
                  command(out), "a %s-CPU %s %s" % (m.get("cpus"), m.get("arch"), "%s virtual machine" % m["vm"]
                                                    if m.get("vm") else "machine") if m else "an unrecorded machine",
                  out.get("kernel"),
                  (out.get("started_utc") or "no date")[:10]), "", README_END]
    return "\n".join(lines)


def replace_readme_block(text, block):
    """text (README) with its block between README_BEGIN and README_END replaced by block."""
    try:
        start = text.index(README_BEGIN)
        end = text.index(README_END, start) + len(README_END)
    except ValueError:
        raise ValueError("no %s ... %s block to replace" % (README_BEGIN, README_END))
    return text[:start] + block + text[end:]
