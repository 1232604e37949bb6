"""Overhead benchmark: what tracing costs the workload, and what the tracer sustains.

In one run, on the same images, configurations alternate (order rotated every
repetition, so drift on a shared machine hits all alike):
  none            the workload alone
  fstrace-block   collector --block-only (block requests only)
  fstrace-full    collector with requests and attribution
  bpftrace-hist   bpftrace one-liner: block request size histogram
  biolatency      libbpf-tools biolatency
Workloads: fio 4 KiB randread cold (caches dropped), warm (file in the page
cache, time based), and tar of the tree (cold).  Throughput is the workload's
own figure; ratios are traced/untraced within one repetition.

Usage: python3 scripts/bench_overhead.py [--reps N] [--scale S] [--out FILE.json]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from analysis import results, summary  # noqa: E402
from user.system import Cleanup, backing_block_device, dev_numbers, drop_caches, ensure_tracefs, losetup, mount  # noqa: E402
from workloads import catalog, dataset, images  # noqa: E402

COLLECTOR = os.path.join(ROOT, "build", "fstrace-collect")
CONFIGS = ["none", "fstrace-block", "fstrace-full", "bpftrace-hist", "biolatency"]
BPFTRACE_HIST = "tracepoint:block:block_rq_complete { @bytes = hist(args->nr_sector * 512); }"


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def bpf_prog_ids():
    out = subprocess.run(["bpftool", "prog", "show"], stdout=subprocess.PIPE, text=True).stdout
    return {line.split(":")[0] for line in out.splitlines() if line[:1].isdigit()}


class Tracer:
    """A third-party tracer in the background around a workload; ready once its BPF programs are loaded
    (its own output may be buffered in a pipe, so it is not read)."""

    def __init__(self, argv):
        before = bpf_prog_ids()
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        last = None
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError("%s exited with %d before tracing" % (argv[0], self.p.returncode))
            now = bpf_prog_ids() - before
            if now and now == last:
                time.sleep(0.5)  # attach follows load
                return
            last = now
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("%s did not load its programs within 60 s" % argv[0])

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def timed_shell(script, outfile):
    """sh script whose own start/end (ns) are written to outfile, so every configuration is timed alike."""
    return ["sh", "-c", 's=$(date +%%s%%N); %s; e=$(date +%%s%%N); echo $((e - s)) > %s' % (script, outfile)]


def run_one(config, argv, cwd, devs, work):
    fst = os.path.join(work, "r.fst")
    if os.path.exists(fst):
        os.unlink(fst)
    info = {}
    if config in ("fstrace-block", "fstrace-full"):
        cmd = [COLLECTOR, "-o", fst] + devs + (["--block-only"] if config == "fstrace-block" else []) + ["--"] + argv
        subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        res = results.load(fst)
        n = sum(len(a) for a in res.records.values())
        span = (res.header["time"]["end_ns"] - res.header["time"]["start_ns"]) / 1e9
        info = {"records": n, "records_per_s": n / span if span else None,
                "dropped": sum(res.header["drops"].values()),
                "load_attach_s": res.header["time"]["load_attach_ns"] / 1e9}
        return info
    tracer = None
    if config == "bpftrace-hist":
        tracer = Tracer(["bpftrace", "-e", BPFTRACE_HIST])
    elif config == "biolatency":
        tracer = Tracer(["biolatency"])
    try:
        subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        if tracer:
            tracer.stop()
    return info


def throughput(case, work):
    if case["kind"] == "fio":
        gt = case["wl"].ground_truth(work, None)
        return gt["bw_bytes"]
    with open(os.path.join(work, "elapsed_ns")) as f:
        return case["bytes"] / (int(f.read()) / 1e9)


def analysis_rate(work, devs, single_mnt, single_file):
    """Records analysed per second, from a large real results file (warm randread, every read recorded)."""
    wl = catalog.Fio("bench-analysis", "", "randread", runtime_s=6)
    argv = wl.prepare(single_mnt, work, {"single_file": single_file})
    fst = os.path.join(work, "big.fst")
    subprocess.run([COLLECTOR, "-o", fst] + devs + ["--"] + argv, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    t0 = time.perf_counter()
    res = results.load(fst)
    summary.summarize(res)
    dt = time.perf_counter() - t0
    n = sum(len(a) for a in res.records.values())
    return {"records": n, "seconds": dt, "seconds_per_million": dt / n * 1e6,
            "dropped": sum(res.header["drops"].values())}


def stats(xs):
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)} if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--cache", default=os.environ.get("FSTRACE_CACHE", "/var/cache/fstrace"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results",
                                                  "overhead-%s.json" % time.strftime("%Y%m%d-%H%M%S")))
    args = ap.parse_args()
    droot, manifest = dataset.ensure_default(args.cache, args.scale, log)
    single_ctx = catalog.context(droot, "single", manifest)
    tree_ctx = catalog.context(droot, "tree", manifest)
    img_single = images.ensure_image("erofs", {}, single_ctx["source"], manifest["id"] + "/single", args.cache, log)
    img_tree = images.ensure_image("erofs", {}, tree_ctx["source"], manifest["id"] + "/tree", args.cache, log)
    have = [c for c in CONFIGS if c not in ("bpftrace-hist", "biolatency") or shutil.which(
        "bpftrace" if c == "bpftrace-hist" else "biolatency")]
    out = {"configs": have, "reps": args.reps, "dataset_id": manifest["id"], "kernel": os.uname().release,
           "cases": {}}
    with Cleanup() as c:
        work = tempfile.mkdtemp(prefix="fstrace-bench-")
        c.push("remove " + work, shutil.rmtree, work, True)
        if "bpftrace-hist" in have:
            ensure_tracefs(c)
        mounts = {}
        devs = []
        for key, img in (("single", img_single), ("tree", img_tree)):
            dev, _ = losetup(img["path"], c)
            mnt = os.path.join(work, "mnt-" + key)
            mount(dev, mnt, "erofs", c)
            mounts[key] = mnt
            ma, mi = dev_numbers(dev)
            devs += ["-d", "%d:%d:4096:loop" % (ma, mi)]
        backing = backing_block_device(img_single["path"])
        if backing:
            devs += ["-d", "%d:%d" % backing]
        cold = catalog.Fio("bench-cold", "", "randread", io_size="16m")
        warm = catalog.Fio("bench-warm", "", "randread", runtime_s=3)
        fio_ctx = {"single_file": single_ctx["single_file"]}
        cases = {
            "fio-randread-4k-cold": {"kind": "fio", "wl": cold, "cold": True,
                                     "argv": cold.prepare(mounts["single"], work, fio_ctx), "cwd": mounts["single"]},
            "fio-randread-4k-warm": {"kind": "fio", "wl": warm, "cold": False,
                                     "argv": warm.prepare(mounts["single"], work, fio_ctx), "cwd": mounts["single"]},
            "tar-seqread-cold": {"kind": "shell", "cold": True, "bytes": manifest["tree_bytes"],
                                 "argv": timed_shell("tar cf - . | cat > /dev/null",
                                                     os.path.join(work, "elapsed_ns")), "cwd": mounts["tree"]},
        }
        subprocess.run(["cat", os.path.join(mounts["single"], single_ctx["single_file"])],
                       stdout=subprocess.DEVNULL, check=True)
        for name, case in cases.items():
            rows = {cfg: [] for cfg in have}
            infos = {cfg: [] for cfg in have}
            for rep in range(args.reps):
                order = have[rep % len(have):] + have[:rep % len(have)]
                for cfg in order:
                    if case["cold"]:
                        drop_caches()
                    info = run_one(cfg, case["argv"], case["cwd"], devs, work)
                    rows[cfg].append(throughput(case, work))
                    infos[cfg].append(info)
                log("%s: repetition %d/%d done" % (name, rep + 1, args.reps))
            base = rows["none"]
            res = {}
            for cfg in have:
                ratios = [t / b for t, b in zip(rows[cfg], base)]
                res[cfg] = {"throughput_bytes_per_s": stats(rows[cfg]), "ratio_to_none": stats(ratios)}
                if infos[cfg] and infos[cfg][0]:
                    for k in ("records_per_s", "dropped", "load_attach_s"):
                        res[cfg][k] = stats([i[k] for i in infos[cfg] if i.get(k) is not None])
            out["cases"][name] = res
        log("analysis speed")
        out["analysis"] = analysis_rate(work, devs, mounts["single"], single_ctx["single_file"])
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(render(out))
    log("wrote " + args.out)


def render(out):
    lines = ["%-22s %-14s %28s %22s %14s %9s %12s" % ("case", "config", "throughput MiB/s min/med/max",
                                                       "ratio min/med/max", "records/s med", "dropped",
                                                       "attach s")]
    for case, res in out["cases"].items():
        for cfg, r in res.items():
            t, q = r["throughput_bytes_per_s"], r["ratio_to_none"]
            lines.append("%-22s %-14s %9.1f %8.1f %8.1f   %6.3f %6.3f %6.3f %14s %9s %12s" % (
                case, cfg, t["min"] / 2**20, t["median"] / 2**20, t["max"] / 2**20, q["min"], q["median"], q["max"],
                "%.0f" % r["records_per_s"]["median"] if r.get("records_per_s") else "-",
                "%d" % r["dropped"]["max"] if r.get("dropped") else "-",
                "%.3f" % r["load_attach_s"]["median"] if r.get("load_attach_s") else "-"))
    a = out["analysis"]
    lines.append("analysis: %d records in %.2f s = %.2f s per million records (dropped while recording: %d)"
                 % (a["records"], a["seconds"], a["seconds_per_million"], a["dropped"]))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
