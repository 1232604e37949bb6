"""Flamegraphs as self-contained SVG from folded stacks (pure functions: folded counts -> SVG text).

Folded stacks ("root;...;leaf count" lines) are the format FlameGraph, inferno and speedscope read; fstrace
keeps them next to every SVG.  Frames that decompress are drawn in their own colour so the cost the seeds
argue about stands out; a differential graph colours each frame by how its samples changed from A to B.

SCRIPT (flamegraph.js) makes a graph interactive -- zoom into a frame, reset, search -- from what render() puts
in the SVG: frames in pre-order with their depth and weight, the graph's total, unit and drawing width.  A
standalone SVG file carries it (standalone()); an HTML report carries it once for all its graphs.
"""
import os
from xml.sax.saxutils import escape

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "flamegraph.js")) as _f:
    SCRIPT = _f.read()

from analysis.sampling import DECOMPRESSOR, TRACER_FRAME_PREFIX

WIDTH = 1200
ROW = 16
PAD = 24
MARGIN = 10  # left and right of the frames
CHAR_WIDTH, MIN_LABEL_WIDTH = 7, 40  # a frame's label: what fits of its name (flamegraph.js relabels the same way)


def folded_text(stacks):
    return "".join("%s %d\n" % (st, n) for st, n in sorted(stacks.items()))


def tree(stacks):
    """Nested {name: [count, children]} from {stack: count}."""
    root = [0, {}]
    for st, n in stacks.items():
        root[0] += n
        node = root
        for frame in st.split(";"):
            child = node[1].setdefault(frame, [0, {}])
            child[0] += n
            node = child
    return root


# the category frames wallclock_folded() ends stacks with: one distinct colour each
CATEGORY_COLOURS = {
    "[cpu]": "rgb(90,170,90)",                  # other CPU: green
    "[cpu: decompression]": "rgb(220,80,30)",   # decompression: orange, as decompressor frames
    "[cpu: lock spin]": "rgb(200,150,220)",     # spinning for a contended lock: light purple
    "[cpu: fstrace]": "rgb(130,130,130)",       # fstrace's own programs: mid grey, as their frames
    "[io_wait]": "rgb(40,90,200)",              # waiting for block I/O: blue
    "[worker]": "rgb(0,150,150)",               # a kworker ran filesystem work for it: teal
    "[lock_wait]": "rgb(150,60,170)",           # asleep on a contended lock: purple
    "[dsleep]": "rgb(140,110,80)",              # other uninterruptible sleep: brown
    "[sleep]": "rgb(170,170,170)",              # interruptible sleep: grey
}


def _colour(frame):
    if frame in CATEGORY_COLOURS:
        return CATEGORY_COLOURS[frame]
    if frame.startswith(TRACER_FRAME_PREFIX):
        return CATEGORY_COLOURS["[cpu: fstrace]"]  # the tracer's own programs, never mistaken for the workload
    if DECOMPRESSOR.match(frame):
        return "rgb(220,80,30)"  # decompression: the one saturated colour
    if any(k in frame for k in ("io_schedule", "submit_bio", "blk_", "wait_on_page", "folio_wait")):
        return "rgb(70,130,200)"  # waiting for / issuing block I/O
    h = sum(frame.encode()) % 40
    return "rgb(%d,%d,%d)" % (235 + h // 4, 200 + h // 2, 140 + h)  # everything else: pale, varied


def _diff_colour(a, b, total_a, total_b):
    fa = a / total_a if total_a else 0.0
    fb = b / total_b if total_b else 0.0
    if fa == fb:
        return "rgb(220,220,220)"
    scale = min(1.0, abs(fb - fa) / max(fa, fb, 1e-9))
    c = int(220 - 160 * scale)
    return "rgb(230,%d,%d)" % (c, c) if fb > fa else "rgb(%d,%d,230)" % (c, c)


def render(stacks, title, subtitle="", base=None, unit="samples"):
    """SVG text. With base (the A side), colour frames red where B has more samples, blue where fewer."""
    root = tree(stacks)
    base_tree = tree(base) if base is not None else None
    total = root[0]
    depth = [0]

    def measure(node, d):
        depth[0] = max(depth[0], d)
        for child in node[1].values():
            measure(child, d + 1)

    measure(root, 0)
    height = (depth[0] + 1) * ROW + 3 * PAD
    usable = WIDTH - 2 * MARGIN
    # the controls flamegraph.js works (hidden in a static rendering, where they would do nothing), along
    # the bottom edge, under the roots
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<svg xmlns="http://www.w3.org/2000/svg" class="flamegraph" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="monospace" font-size="11" data-total="%d" data-unit="%s" data-left="%d" data-usable="%d">'
           % (WIDTH, height, WIDTH, height, total, escape(unit, {'"': "&quot;"}), MARGIN, usable),
           '<rect x="0" y="0" width="%d" height="%d" fill="white"/>' % (WIDTH, height),
           '<text x="%d" y="16" font-size="14" text-anchor="middle">%s</text>' % (WIDTH // 2, escape(title)),
           '<text x="%d" y="32" text-anchor="middle" fill="#555">%s</text>' % (WIDTH // 2, escape(subtitle)),
           '<text class="fg-reset" x="%d" y="%d" cursor="pointer" fill="#0645ad" visibility="hidden">Reset Zoom</text>'
           % (MARGIN, height - 8),
           '<text class="fg-search" x="%d" y="%d" text-anchor="end" cursor="pointer" fill="#0645ad" '
           'visibility="hidden">Search</text>' % (WIDTH - MARGIN, height - 8),
           '<text class="fg-matched" x="%d" y="%d" text-anchor="middle"></text>' % (WIDTH // 2, height - 8)]
    if not total:
        out.append('<text x="%d" y="%d" text-anchor="middle">no samples</text>' % (WIDTH // 2, height // 2))
        out.append("</svg>")
        return "\n".join(out) + "\n"
    total_b = base_tree[0] if base_tree else 0

    def draw(node, name, x, d, path, bnode):
        w = usable * node[0] / total
        y = height - PAD - (d + 1) * ROW
        if d >= 0:
            if bnode is not None or base_tree is not None:
                fill = _diff_colour(bnode[0] if bnode else 0, node[0], total_b, total)
            else:
                fill = _colour(name)
            label = "%s (%d %s, %.2f%%)" % (name, node[0], unit, 100.0 * node[0] / total)
            out.append('<g class="frame" data-weight="%d" data-depth="%d" cursor="pointer"><title>%s</title>'
                       '<rect x="%.3f" y="%d" width="%.3f" height="%d" fill="%s" stroke="white" stroke-width="0.5"/>'
                       % (node[0], d, escape(label), x, y, w, ROW - 1, fill))
            if w > MIN_LABEL_WIDTH:
                chars = int(w / CHAR_WIDTH)
                text = name if len(name) <= chars else name[:max(chars - 2, 0)] + ".."
                out.append('<text x="%.3f" y="%d">%s</text>' % (x + 3, y + ROW - 4, escape(text)))
            out.append("</g>")
        cx = x
        for cname, child in sorted(node[1].items()):
            draw(child, cname, cx, d + 1, path + [cname], bnode[1].get(cname) if bnode else None)
            cx += usable * child[0] / total

    draw(root, "all", float(MARGIN), -1, [], base_tree)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def differential(a, b, what):
    """The differential on-CPU flamegraph of B against A (folded stacks of each): B's widths, coloured by the
    change of each frame's share."""
    return render(b, "differential on-CPU flamegraph: %s" % what,
                  "widths: B's samples; red: more than in A (share), blue: less", base=a)


def standalone(svg_text):
    """An SVG file of render()'s text that is interactive on its own: SCRIPT inside it."""
    assert "]]>" not in SCRIPT
    end = svg_text.rindex("</svg>")
    return svg_text[:end] + '<script type="text/ecmascript"><![CDATA[\n%s]]></script>\n' % SCRIPT + svg_text[end:]


def write(dirpath, name, stacks, title, subtitle="", base=None, unit="samples"):
    """name.folded and name.svg (interactive) in dirpath; returns the SVG path."""
    with open(os.path.join(dirpath, name + ".folded"), "w") as f:
        f.write(folded_text(stacks))
    svg = os.path.join(dirpath, name + ".svg")
    with open(svg, "w") as f:
        f.write(standalone(render(stacks, title, subtitle, base, unit)))
    return svg
