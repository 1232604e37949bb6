"""Self-contained HTML reports, one file per run or comparison: text, tables, plots and flamegraphs inline.

Nothing is fetched from the network; the file can be mailed or attached to a review as it is.  The page's one
script is the project's own: a few lines count the figures the browser actually laid out
(data-rendered-figures on <body>, which the headless-browser test checks), and the flamegraphs' script
(analysis/flamegraph.js) makes them zoomable and searchable.  A Content-Security-Policy lets the page run
that script alone (by its hash): no other script, no fetch, no frame, no form, whatever a results file held.
"""
import base64
import hashlib
from html import escape

from analysis import flamegraph

STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1280px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ccc; }
pre { background: #f6f6f6; padding: 10px; overflow-x: auto; font-size: 12px; line-height: 1.3; }
.figure { margin: 12px 0; overflow-x: auto; }
.figure svg { max-width: 100%; height: auto; }
.note { color: #555; font-size: 13px; }
table.kv td { padding: 2px 10px 2px 0; font-size: 13px; }
"""

SCRIPT = """
window.addEventListener("load", function () {
  var n = 0;
  document.querySelectorAll(".figure > svg").forEach(function (s) {
    var r = s.getBoundingClientRect();
    if (r.width > 0 && r.height > 0) n++;
  });
  document.body.setAttribute("data-rendered-figures", String(n));
});
""" + flamegraph.SCRIPT

# Only the page's own script runs (its hash); styles may be inline because the plots' SVG (matplotlib) sets
# style attributes, which a policy can allow only all together -- a style runs no code and fetches nothing here
CSP = ("default-src 'none'; script-src 'sha256-%s'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
       % base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode())


def inline_svg(svg_text):
    """An SVG document as an element of the page (its XML prologue dropped)."""
    return '<div class="figure">%s</div>' % svg_text[svg_text.index("<svg"):]


def pre(text):
    return "<pre>%s</pre>" % escape(text)


def key_values(pairs):
    return '<table class="kv">%s</table>' % "".join(
        "<tr><td>%s</td><td>%s</td></tr>" % (escape(str(k)), escape(str(v))) for k, v in pairs)


def page(title, sections):
    """sections: [(heading, html fragment)]; <body data-figures> says how many inline figures they hold."""
    body = "".join("<h2>%s</h2>\n%s\n" % (escape(h), frag) for h, frag in sections)
    figures = sum(frag.count('<div class="figure">') for _, frag in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"%s\"><title>%s</title>"
            "<style>%s</style><script>%s</script></head>\n<body data-figures=\"%d\">\n<h1>%s</h1>\n%s"
            "</body></html>\n" % (CSP, escape(title), STYLE, SCRIPT, figures, escape(title), body))


def run_page(s, text_report, table_text, plots, flamegraphs):
    """One run: the verdict first (analysis/verdict.py), then the pictures (latency CDF, attribution,
    flamegraphs), then the facts, the seed-style row and the full report."""
    from analysis import verdict
    run = s["run"]
    title = "fstrace: %s on %s" % (run.get("workload") or run.get("mode") or "trace", run.get("label") or "live system")
    facts = [("kernel", run.get("kernel")), ("dataset", run.get("dataset_id")), ("cache", run.get("cache")),
             ("wall time", "%.3f s" % s["wall_s"]), ("read requests", s["reads"]["count"]),
             ("bytes read", s["reads"]["bytes"]), ("IOPS cap", run.get("iops_cap") or "none"),
             ("dropped records", sum((s.get("drops") or {}).values()))]
    facts += [("unavailable (%s)" % why, "; ".join(figs)) for why, figs in verdict.unavailable_groups(s).items()]
    sections = [("Verdict", pre(verdict.render(s)))]
    sections += [(heading, inline_svg(svg)) for heading, svg in plots]
    sections += [(heading, inline_svg(svg) + '<p class="note">%s</p>' % escape(note))
                 for heading, svg, note in flamegraphs]
    sections.append(("Run", key_values(facts)))
    if table_text:
        sections.append(("Seed-style table", pre(table_text)))
    sections.append(("Full report", pre(text_report)))
    return page(title, sections)


def compare_page(title, compare_text, plots, tables_text):
    """Result sets side by side: what changed (a comparison), plots per configuration (and with two sets the
    differential flamegraph of each configuration both have), the sets' tables."""
    sections = [("What changed", pre(compare_text))] if compare_text else []
    sections += [(heading, inline_svg(svg)) for heading, svg in plots]
    sections += [(heading, pre(text)) for heading, text in tables_text]
    return page(title, sections)
