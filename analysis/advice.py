"""fstrace advise, the pure part: from bench documents to a ranking, its Pareto front and cause sentences.

Every number in a cause sentence is a Fact: a figure of one configuration on one workload as the bench measured it
(the median run's row in bench.json, or the image table's size), or a ratio of two such facts, formatted by one of
FORMATS.  A sentence is a template of {} slots filled only from its facts, so the text cannot say a number the
results do not hold; tests recompute every fact from bench.json and compare.
"""
import re

from analysis import amplification, tables


def _count(n):
    return "%d" % n if n < 10000 else "%d k" % round(n / 1000)


FORMATS = {
    "count": _count,
    "seconds": lambda v: "%.3f" % v if v < 10 else "%.2f" % v,
    "pct": lambda v: "%.0f" % (100 * v),       # a share (0..1) as a percentage
    "pct100": lambda v: "%.0f" % v,            # already a percentage
    "ratio": lambda v: ("%.1f" % v) if v < 10 else ("%.0f" % v),
    "kib": lambda v: "%.1f" % (v / 1024),
    "mib": lambda v: "%.1f" % (v / (1 << 20)),
}


def medians(doc):
    """{(workload, label): the median run's row}: the run whose figures a table shows beside its times."""
    return {k: tables._median_row(v) for k, v in tables.group(doc).items()}


def image_sizes(doc, parts):
    """{label: bytes of its images of these dataset parts} (btrfs: blocks allocated; the others: file size)."""
    out = {}
    for i in doc["images"]:
        if i["part"] in parts:
            out[i["label"]] = out.get(i["label"], 0) + i["bytes"]
    return out


def rank(doc, mix, parts):
    """Candidates by weighted time (sum of weight x the median run's time over the mix), fastest first.
    mix: [(workload, weight)]."""
    med = medians(doc)
    runs = tables.group(doc)
    sizes = image_sizes(doc, parts)
    out = []
    for label in dict.fromkeys(r["label"] for r in doc["rows"]):
        per = {wl: med[(wl, label)]["wall_s"] for wl, _ in mix}
        times = {wl: [r["wall_s"] for r in runs[(wl, label)]] for wl, _ in mix}
        first = med[(mix[0][0], label)]
        out.append({"label": label, "fs": first["fs"], "bytes": sizes[label],
                    # read amplification on the mix's first workload (median run)
                    "amplification": {k: first.get(k) for k in ("loop_read_per_received", "decompressed_per_received",
                                                                 "decompressed_method", "reread_share")},
                    "weighted_s": sum(w * per[wl] for wl, w in mix), "seconds": per,
                    # the weighted time of the fastest and of the slowest runs: how far apart run-to-run noise
                    # puts the same candidate
                    "spread_s": [sum(w * min(times[wl]) for wl, w in mix), sum(w * max(times[wl]) for wl, w in mix)]})
    out.sort(key=lambda c: (c["weighted_s"], c["bytes"], c["label"]))
    for i, c in enumerate(out, 1):
        c["rank"] = i
    return out


def pareto(points):
    """Labels of the points no other point beats on both size and time (lower is better on each, strictly on
    one).  points: [(label, size, time)]."""
    front = []
    for label, size, t in points:
        if not any((s2 <= size and t2 <= t) and (s2 < size or t2 < t) for _, s2, t2 in points):
            front.append(label)
    return front


class Sentence:
    """A sentence built from facts: add() a fact and get its text for the template."""

    def __init__(self):
        self.parts, self.facts = [], []

    def fact(self, figure, fmt, value, label=None, workload=None, of=None):
        """of: indexes of the two facts this one is the ratio of (first / second)."""
        f = {"figure": figure, "format": fmt, "value": value, "text": FORMATS[fmt](value)}
        if of is not None:
            f["of"] = of
        else:
            f.update(label=label, workload=workload)
        self.facts.append(f)
        return len(self.facts) - 1

    def say(self, template, *facts):
        """template's {} slots take the facts' texts, in order."""
        self.parts.append((template, list(facts)))

    def render(self):
        return "".join(t.format(*[self.facts[i]["text"] for i in idx]) for t, idx in self.parts)

    def as_dict(self):
        """order: the facts as the text states them (every fact is stated once)."""
        return {"text": self.render(), "facts": self.facts, "order": [i for _, idx in self.parts for i in idx]}


def _share_fact(s, row, field, label, wl):
    v = row.get(field)
    return None if v is None else s.fact(field, "pct", v, label, wl)


def _decompression_tier(row):
    """measured (fentry/kprobe in the requests), sampled (the stack-sampling estimate) or None (unavailable)."""
    if row.get("decompression_share") is None:
        return None
    return "measured" if row.get("decompression_note") is None else "sampled"


def explain(better, worse, med, mix):
    """One or two sentences on why `better` (a ranked candidate) beats `worse`, from the workload of the mix
    where their weighted times differ most, and on what the faster costs in size (or saves)."""
    wl = max(mix, key=lambda m: m[1] * abs(worse["seconds"][m[0]] - better["seconds"][m[0]]))[0]
    a, b = med[(wl, better["label"])], med[(wl, worse["label"])]
    A, B = better["label"], worse["label"]
    s = Sentence()
    ta = s.fact("wall_s", "seconds", a["wall_s"], A, wl)
    tb = s.fact("wall_s", "seconds", b["wall_s"], B, wl)
    s.say("%s takes {} s on %s against {} s for %s" % (A, wl, B), ta, tb)
    deltas = {c: b[c] - a[c] for c in tables.COMPONENTS}
    # a cause is a part of the time where the slower one spends more: the part that grew most (a part where
    # it spends less, however large the difference, is no reason for its being slower)
    moved = max(deltas, key=lambda c: deltas[c])
    na, nb = a.get("loop_requests"), b.get("loop_requests")
    if deltas[moved] <= 0:
        s.say(": the difference lies outside its traced requests (%s spends no longer in any part of them)" % B)
    elif moved == "io_wait_s" and na and nb and nb > na and FORMATS["ratio"](nb / na) != FORMATS["ratio"](1):
        fa, fb = s.fact("loop_requests", "count", na, A, wl), s.fact("loop_requests", "count", nb, B, wl)
        r = s.fact("ratio", "ratio", nb / na, of=[fb, fa])
        s.say(": %s issues {}x more device requests ({} vs {}" % B, r, fb, fa)
        mb = b.get("loop_mean_bytes")
        if mb:
            s.say(", {} KiB mean", s.fact("loop_mean_bytes", "kib", mb, B, wl))
        al = b.get("loop_aligned_4k_pct")
        if al is not None:
            s.say(", {} % " + ALIGNED, s.fact("loop_aligned_4k_pct", "pct100", al, B, wl))
        io = _share_fact(s, b, "io_wait_share", B, wl)
        s.say(")" if io is None else "); {} %% of %s's time there is I/O wait" % B, *([] if io is None else [io]))
    elif moved == "io_wait_s" and na and nb:  # about as many requests or fewer ("1.0x more" says nothing)
        wb = s.fact("io_wait_s", "seconds", b["io_wait_s"], B, wl)
        wa = s.fact("io_wait_s", "seconds", a["io_wait_s"], A, wl)
        fb, fa = s.fact("loop_requests", "count", nb, B, wl), s.fact("loop_requests", "count", na, A, wl)
        s.say(": %s spends {} s in I/O wait against {} s, on {} device requests against {}" % B, wb, wa, fb, fa)
        mb, ma = b.get("loop_mean_bytes"), a.get("loop_mean_bytes")
        if mb and ma:
            s.say(" ({} KiB mean against {})", s.fact("loop_mean_bytes", "kib", mb, B, wl),
                  s.fact("loop_mean_bytes", "kib", ma, A, wl))
    elif moved == "oncpu_s":
        tier = _decompression_tier(b)
        if tier:
            d = s.fact("decompression_share", "pct", b["decompression_share"], B, wl)
            s.say(": %s spends {} %% of it decompressing (%s)" % (B, tier), d)
        else:
            c = _share_fact(s, b, "oncpu_share", B, wl)
            s.say(": %s spends {} %% of it on CPU (decompression not measurable here)" % B, c)
        oa, ob = s.fact("oncpu_s", "seconds", a["oncpu_s"], A, wl), s.fact("oncpu_s", "seconds", b["oncpu_s"], B, wl)
        s.say(", {} s on CPU against {} s", ob, oa)
    else:  # other: sleeping, run queue, kworkers, locks
        oa, ob = s.fact(moved, "seconds", a[moved], A, wl), s.fact(moved, "seconds", b[moved], B, wl)
        what = {"io_wait_s": "in I/O wait", "other_s": "asleep off I/O (locks, kworkers, run queue)"}[moved]
        s.say(": %s spends {} s %s against {} s" % (B, what), ob, oa)
    s.say(".")
    _image_sizes(s, better, worse)
    return dict(s.as_dict(), better=A, worse=B, workload=wl)


def _image_sizes(s, better, worse):
    """The sentence on what the faster candidate's image costs in size (or saves) against the slower one's."""
    za = s.fact("bytes", "mib", better["bytes"], better["label"])
    zb = s.fact("bytes", "mib", worse["bytes"], worse["label"])
    if better["bytes"] <= worse["bytes"]:
        s.say(" Its image is also smaller: {} MiB against {} MiB.", za, zb)
    else:
        r = s.fact("ratio", "ratio", better["bytes"] / worse["bytes"], of=[za, zb])
        s.say(" It costs a {}x larger image: {} MiB against {} MiB.", r, za, zb)


def advise(doc, mix, parts):
    """The ranking, the Pareto front and the causes: the fastest against the runner-up, and every other candidate
    on the front (each smaller than the fastest) against the fastest."""
    ranked = rank(doc, mix, parts)
    front = pareto([(c["label"], c["bytes"], c["weighted_s"]) for c in ranked])
    for c in ranked:
        c["pareto"] = c["label"] in front
    med = medians(doc)
    causes = []
    if len(ranked) > 1:
        causes.append(explain(ranked[0], ranked[1], med, mix))
        causes += [explain(ranked[0], c, med, mix) for c in ranked[2:] if c["pareto"]]
    return {"ranking": ranked, "pareto": front, "causes": causes}


def overlap(a, b):
    """Whether two ranked candidates' runs overlap in weighted time (neither is faster in every run)."""
    return a["spread_s"][0] <= b["spread_s"][1] and b["spread_s"][0] <= a["spread_s"][1]


def noise(ranking, w):
    """Says when the fastest's lead is inside run-to-run noise."""
    if len(ranking) > 1 and overlap(ranking[0], ranking[1]):
        top, nxt = ranking[0], ranking[1]
        w("Not by more than run-to-run noise: %s's runs took %.3f-%.3f s (weighted), %s's %.3f-%.3f s; more "
          "--runs or a quieter machine would tell them apart." % (top["label"], *top["spread_s"], nxt["label"],
                                                                 *nxt["spread_s"]))


def flips(uncapped, capped):
    """How the order changes under the IOPS cap: [(label, rank uncapped, rank capped)] for those that moved."""
    pos = {c["label"]: c["rank"] for c in capped}
    return [(c["label"], c["rank"], pos[c["label"]]) for c in uncapped if pos.get(c["label"]) != c["rank"]]


def render(adv, mix, capped=None, iops_cap=None, storage=None):
    """The terminal table and the advice."""
    out = []
    w = out.append
    mix_text = ", ".join("%s x%g" % (wl, wt) for wl, wt in mix)
    sets = [("storage %s" % storage if storage else "uncapped", adv)] + (
        [("IOPS cap %d" % iops_cap, capped)] if capped else [])
    for name, a in sets:
        w("ranking (%s), mix %s: weighted time = sum of weight x median run time" % (name, mix_text))
        w("  %3s %-28s %10s %12s  %s  %s  %6s %7s" % ("#", "config", "image MiB", "weighted s", "pareto",
                                                      "  ".join("%10s" % wl[:10] for wl, _ in mix), "dev/B", "dec/B"))
        for c in a["ranking"]:
            amp = c.get("amplification") or {}
            w("  %3d %-28s %10.1f %12.3f  %-6s  %s  %6s %7s" % (
                c["rank"], c["label"], c["bytes"] / (1 << 20), c["weighted_s"], "*" if c["pareto"] else "",
                "  ".join("%10.3f" % c["seconds"][wl] for wl, _ in mix),
                amplification.ratio_text(amp.get("loop_read_per_received")), amplification.decompressed_text(amp)))
        w("")
    w("dev/B, dec/B: bytes read from the image's device and bytes decompressed per byte received, on %s (median "
      "run; <=: a bound, n/a: uncompressed, -: not measurable here)" % mix[0][0])
    w("")
    top = adv["ranking"][0]
    w("advice: %s is fastest for this mix." % top["label"])
    noise(adv["ranking"], w)
    small = [c for c in adv["ranking"] if c["pareto"] and c is not top]
    if small:
        w("Smaller images on the size/time front: %s." % ", ".join(c["label"] for c in small))
    for c in adv["causes"]:
        w("  - " + c["text"])
    if capped:
        moved = flips(adv["ranking"], capped["ranking"])
        if not moved:
            w("At %d IOPS the ranking does not change." % iops_cap)
        else:
            ctop = capped["ranking"][0]["label"]
            head = ("The ranking flips at %d IOPS: %s is fastest there" % (iops_cap, ctop) if ctop != top["label"]
                    else "At %d IOPS %s stays fastest but the order below it changes" % (iops_cap, top["label"]))
            w("%s (%s)." % (head, "; ".join("%s %d -> %d" % m for m in moved)))
            noise(capped["ranking"], w)
            for c in capped["causes"][:1]:
                w("  - capped: " + c["text"])
    return "\n".join(out) + "\n"


ALIGNED = "4 KiB-aligned"  # the figure's name (loop_aligned_4k_pct): its 4 is no measured number
NUMBER = re.compile(r"\d+(?:\.\d+)?(?: k)?")


def numbers(text, names):
    """The numbers a sentence states, once the names it quotes (labels, workloads) are taken out."""
    for n in sorted(list(names) + [ALIGNED], key=len, reverse=True):
        text = text.replace(n, " ")
    return NUMBER.findall(text)


def scatter(sets):
    """SVG: image size vs weighted time, one panel per device model; the Pareto front as a step line with its
    points filled.  sets: [(name, advice)]."""
    from analysis import plots
    plt = plots._pyplot()
    fig, axes = plt.subplots(1, len(sets), figsize=(7 * len(sets), 4.5), squeeze=False)
    for ax, (name, adv) in zip(axes[0], sets):
        for c in adv["ranking"]:
            x, y = c["bytes"] / (1 << 20), c["weighted_s"]
            ax.scatter([x], [y], s=36, color="#c83c3c" if c["pareto"] else "#999999", zorder=3)
            ax.annotate(c["label"], (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
        front = sorted((c["bytes"] / (1 << 20), c["weighted_s"]) for c in adv["ranking"] if c["pareto"])
        if front:
            ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="#c83c3c", alpha=0.6,
                    label="Pareto front")
            ax.legend(loc="upper right", fontsize=8)
        ax.set_xlabel("image size (MiB)")
        ax.set_ylabel("weighted time (s)")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
    return plots._svg(fig)
