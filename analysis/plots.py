"""Plots for the HTML report, drawn with matplotlib into SVG text (data in, SVG text out)."""
import atexit
import io
import os
import shutil
import tempfile

import numpy as np


def _private_config_dir():
    """Sets MPLCONFIGDIR to a private directory removed at exit when matplotlib's default ($XDG_CONFIG_HOME or
    ~/.config, /matplotlib) is no writable directory (a read-only HOME, nobody's /nonexistent): what matplotlib
    itself falls back to, without the warning it prints on stderr then."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    default = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"),
                           "matplotlib")
    try:
        os.makedirs(default, exist_ok=True)
    except OSError:
        pass
    if os.path.isdir(default) and os.access(default, os.W_OK):
        return
    os.environ["MPLCONFIGDIR"] = tempfile.mkdtemp(prefix="fstrace-matplotlib-")
    atexit.register(shutil.rmtree, os.environ["MPLCONFIGDIR"], True)


def _pyplot():
    _private_config_dir()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _svg(fig):
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})  # same data, same bytes
    _pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # inline: no XML prologue or doctype


def latency_cdf(series, title):
    """series: [(label, latencies in microseconds)]: one empirical CDF each, log-scaled time axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, lat_us in series:
        v = np.sort(np.maximum(np.asarray(lat_us, dtype=float), 0.1))
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label="%s (%d)" % (label, v.size))
    ax.set_xscale("log")
    ax.set_xlabel("request latency (µs)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title)
    if series:
        ax.legend(loc="lower right", fontsize=8)
    return _svg(fig)


def attribution_bars(rows, sch, title):
    """rows: [(label, {part: ns})]: one horizontal bar per configuration, stacked by share of wall time, parts in
    the order and colours of sch (analysis/schema.py: the results', or a summary's)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * max(len(rows), 1)))
    labels = [label for label, _ in rows]
    left = np.zeros(len(rows))
    for p in sch.parts:
        vals = np.array([float(d.get(p, 0)) for _, d in rows])
        totals = np.array([float(sum(d.values())) or 1.0 for _, d in rows])
        share = vals / totals
        if share.any():
            ax.barh(labels, share, left=left, color=sch.part_colour.get(p), label=p[:-3])
        left += share
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the time spent in requests")
    ax.invert_yaxis()
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    return _svg(fig)
