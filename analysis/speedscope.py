"""A run's stacks in speedscope's file format (its package's dist/release/file-format-schema.json), which
speedscope opens as it is (and other viewers import): one sampled profile per flamegraph the run has --
wall-clock, on-CPU and off-CPU, with the folded files' stacks and weights in microseconds -- and the on-CPU
samples again split by the thread they were taken in.

Per-request profiles do not apply: the kernel sums stacks per (stack, thread) and per (stack, reason), so no
stack belongs to one request (the timeline, timeline.pftrace, has the requests one by one).  Off-CPU and
wall-clock time have no per-thread split for the same reason: off-CPU stacks are summed over threads.
"""
import json

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
NAME = "profile.speedscope.json"  # in every run directory
UNIT = "microseconds"


class Frames:
    """speedscope's shared frame table: each name once, referred to by index."""

    def __init__(self):
        self.index, self.frames = {}, []

    def __call__(self, name):
        if name not in self.index:
            self.index[name] = len(self.frames)
            self.frames.append({"name": name})
        return self.index[name]


def sampled(name, stacks, frames, scale=1.0):
    """A sampled profile of {folded stack: weight}; each weight times scale (microseconds)."""
    samples, weights = [], []
    for st, w in sorted(stacks.items()):
        samples.append([frames(f) for f in st.split(";")])
        weights.append(w * scale)
    return {"type": "sampled", "name": name, "unit": UNIT, "startValue": 0, "endValue": sum(weights),
            "samples": samples, "weights": weights}


def thread_names(res):
    """{thread id: task name} of the threads that made requests (the samples' traced threads)."""
    req = res["req"]
    names = {}
    for tid, comm in zip(req["pid"].tolist(), req["comm"].tolist()):
        names[tid] = comm.split(b"\0", 1)[0].decode("utf-8", "replace")
    return names


def per_thread(header):
    """{thread id: {folded stack: samples}} of the on-CPU samples (collectors that wrote sampling.tids)."""
    from analysis.sampling import folded
    smp = header.get("sampling") or {}
    if "tids" not in smp:
        return {}
    rows = list(zip(smp["tids"], smp.get("folded", [])))
    wanted = folded(header, kworkers=True)  # what the on-CPU flamegraph holds
    out = {}
    for tid, (st, n) in rows:
        if st in wanted:
            d = out.setdefault(tid, {})
            d[st] = d.get(st, 0) + n
    return out


def document(res, specs):
    """The speedscope file (a dict) of a run: specs as analysis.render.flamegraph_specs gives them."""
    from analysis.sampling import KWORKER_ROOT
    frames = Frames()
    hz = (res.header.get("sampling") or {}).get("hz") or 0
    label = res.config.get("label") or "fstrace"
    profiles = []
    order = {"wallclock": 0, "oncpu": 1, "offcpu": 2}
    for name, stacks, title, subtitle, unit in sorted(specs, key=lambda s: order.get(s[0], 9)):
        if unit == "samples":  # each on-CPU sample stands for 1/hz s
            profiles.append(sampled("%s (%d samples at %d Hz)" % (title, sum(stacks.values()), hz), stacks, frames,
                                    1e6 / hz))
        elif unit == "us":
            profiles.append(sampled(title, stacks, frames))
        else:
            raise ValueError("flamegraph %s: unit %s has no speedscope unit" % (name, unit))
    if hz and any(s[0] == "oncpu" for s in specs):
        names = thread_names(res)
        for tid, stacks in sorted(per_thread(res.header).items()):
            kworker = next(iter(stacks)).startswith(KWORKER_ROOT)
            who = "kworker" if kworker else names.get(tid, "thread")
            profiles.append(sampled("on-CPU, thread %d (%s): %d samples at %d Hz"
                                    % (tid, who, sum(stacks.values()), hz), stacks, frames, 1e6 / hz))
    return {"$schema": SCHEMA, "name": "fstrace: %s" % label, "exporter": "fstrace", "activeProfileIndex": 0,
            "shared": {"frames": frames.frames}, "profiles": profiles}


def text(res, specs):
    return json.dumps(document(res, specs), separators=(",", ":")) + "\n"
