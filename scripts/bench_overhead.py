"""Overhead benchmark: what tracing costs the workload, and what the tracer sustains.

In one run, on the same images, configurations alternate (order rotated every
repetition, each traced run between two untraced ones: run_sequence):
  none              the workload alone
  fstrace-floor     the hooks fstrace-full uses, each with a program that only returns
                    (collector --empty-programs): what the hooks cost before fstrace does anything,
                    the ratio no tracer on these hooks can beat on this machine
  fstrace-full      the collector exactly as `fstrace run` and `attach` start it by default
                    (cli/runner.py tracing_options(): sampling at SAMPLE_HZ with off-CPU and
                    sampled bio stacks, page-cache hits counted in the kernel)
  fstrace-nosample  the same with --sample-hz 0 (no stacks, no sampling)
  fstrace-records-all  the default with --records all (a record for every request)
  fstrace-block     collector --block-only (block requests only)
  fstrace-serve     the collector as `fstrace serve` starts it (cli/serve.py COLLECTOR_OPTIONS: every
                    request counted, no records of requests or block requests) writing its exposition
                    and its OpenMetrics twin where serve writes them (in memory where the machine has a
                    tmpfs at /run or /dev/shm) at each scrape, as serve has it do (ON_DEMAND_OPTIONS):
                    one every SCRAPE_EVERY_S, the first at a random time within the first period
  fstrace-attach    the collector as `fstrace attach` starts it by default: on a kernel without trampolines its
                    request hooks (the syscall tracepoints) only in windows sized to the default budget
                    (user/window.c); the read count the windows estimate is checked against fio's own
  fstrace-serve-budget  fstrace-serve at serve's default budget, likewise
  fstrace-attach-floor, fstrace-serve-floor  the floors of those two: the same options with --empty-programs,
                    the hooks attached all the time and the windowed ones in windows, each with a program that
                    only returns; a ratio target of a configuration with a floor in the run is checked beside it
  fstrace-untraced  the collector as `fstrace attach --pid P` starts it, attached to another process (a
                    sleeping one) while the workload runs outside the traced set: what fstrace left attached to
                    a live system costs the tasks it does not trace (its system-wide hooks; no device traced)
  bpftrace-hist     bpftrace one-liner: block request size histogram
  biolatency        libbpf-tools biolatency
Then, per case, STATS_RUNS runs each of fstrace-full, fstrace-untraced, the windowed
configurations, bpftrace-hist and (beside a windowed one) biolatency with kernel.bpf_stats_enabled=1 (off for
the throughput runs: it times every BPF program run, tracers' alike): each program's cost per event
(run_time_ns / run_cnt, the median over the runs, and their range) beside the events per second of the workload
it handled; for a windowed configuration, the CPU time per second of the workload its programs attached all the
time took (with its collector's own, a target), and the cost per completed block request of its programs on
block_rq_complete beside biolatency's (a target).  With a windowed configuration, --cover-runs randreads of
--cover-runtime-s (30) each under it, warm and then cold: the true counts (fio's reads, the kernel's reads
completed on the image's device in /proc/diskstats) against the 95 % intervals of the windows' request estimate
and of the results' windowed block and erofs figures (windowed_figure_estimates; "unavailable" where the results
have none).  Last, the main command's own profile: the share of on-CPU samples inside requests that were fstrace's.
Workloads: fio 4 KiB randread cold (caches dropped before it and every COLD_DROP_EVERY_S along) and warm (file
in the page cache), each CASE_RUNTIME_S long, and tar of the tree (cold).  Throughput is the workload's
own figure; a ratio is a traced run's over the untraced runs beside it, and each median carries a distribution-free 95 %
interval (order statistics: median_interval), which decides each design target (docs/overhead.md, "Targets") as
met, not met, or undecided by this run.  The JSON written (--out) holds the run's machine, kernel, arguments and
dates: scripts/overhead_report.py renders it as markdown (make docs-overhead-run).

Usage, from the checkout's root:
  python3 -m scripts.bench_overhead [--reps N] [--scale S] [--configs A,B] [--cases C,D] [--cover-runs N]
                                    [--cover-runtime-s S] [--idle-s S] [--out FILE.json]
"""
import argparse
import contextlib
import json
import math
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from analysis import results, summary, tracer, windows
from cli.devices import backing_block_device, dev_numbers, drop_caches, ensure_tracefs, mount_of, sdev_arg
from cli.runner import COLLECTOR, DEFAULT_BUDGET_PCT, Tracing, die_with_parent, tracing_options
from cli.serve import COLLECTOR_OPTIONS as SERVE_OPTIONS, ON_DEMAND_OPTIONS, exposition_root
from cli.signals import Interrupted, install_signal_handlers, stop_process
from common import machine
from common.system import Cleanup, FstraceError, losetup, mount, write_json_atomic
from scripts.overhead_report import FIGURES, ms_list, render
from workloads import catalog, dataset, images

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# collector options of each fstrace configuration: the default is what run/attach use, not a bench variant
FSTRACE_CONFIGS = {
    "fstrace-full": tracing_options(),
    "fstrace-nosample": tracing_options(Tracing(sample_hz=0)),
    "fstrace-records-all": tracing_options(Tracing(records="all")),
    "fstrace-block": ["--block-only"],
    # {expo}: a directory where serve keeps its own (cli/serve.py exposition_root), both files serve has written
    "fstrace-serve": SERVE_OPTIONS + ["--exposition", "{expo}/metrics.prom", "--openmetrics", "{expo}/metrics.om",
                                      "--exposition-interval", "1"] + ON_DEMAND_OPTIONS,
    # attach's and serve's defaults: on a kernel without trampolines, the request hooks in budgeted windows
    "fstrace-attach": tracing_options() + ["--budget", "%g" % DEFAULT_BUDGET_PCT],
    "fstrace-serve-budget": SERVE_OPTIONS + ["--exposition", "{expo}/metrics.prom", "--openmetrics",
                                             "{expo}/metrics.om", "--exposition-interval", "1",
                                             "--budget", "%g" % DEFAULT_BUDGET_PCT] + ON_DEMAND_OPTIONS,
}
# a scrape of a serve configuration's exposition (SIGHUP to its collector, as serve sends at a scrape that finds it
# stale) every this many seconds: the scrape_interval of Prometheus's example configuration (its own default is
# 1 min).  The first comes at a random time within the first period, so that the runs' expositions average one
# per period (a collector started with its workload: after its first second, before which its handler may not be
# in place and the signal would end it)
SCRAPE_EVERY_S = 15
# the directory FSTRACE_CONFIGS' {expo} names: a link in the bench's work directory to one made where serve makes
# its own (exposition_directory), so that the collector rewrites its files on the filesystem serve's would be on
EXPOSITION_LINK = "exposition"


def scraped(config):
    """Whether config's collector writes its exposition only when scraped (serve's on-demand private one)."""
    return all(o in FSTRACE_CONFIGS.get(config, []) for o in ON_DEMAND_OPTIONS)


@contextlib.contextmanager
def scraping(p, first_after_s=0.0, every_s=SCRAPE_EVERY_S):
    """While in the block, SIGHUP to process p every every_s (a scrape, as serve asks its collector for one), the
    first at first_after_s plus a random time within the period, from a thread: the waiting process itself does a
    plain wait, as for the configurations not scraped."""
    stop = threading.Event()

    def run():
        delay = first_after_s + random.uniform(0, every_s)
        while not stop.wait(delay):
            p.send_signal(signal.SIGHUP)  # nothing once p has been waited for
            delay = every_s
    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def collector_options(config, work):
    """The collector options of config (FSTRACE_CONFIGS) for a run in work."""
    return [a.replace("{expo}", os.path.join(work, EXPOSITION_LINK)) for a in FSTRACE_CONFIGS[config]]


def exposition_directory(c, work):
    """Make the directory FSTRACE_CONFIGS' {expo} names for work (removed by c)."""
    d = tempfile.mkdtemp(prefix="fstrace-bench-serve-", dir=exposition_root())
    c.push("remove " + d, shutil.rmtree, d, True)
    os.symlink(d, os.path.join(work, EXPOSITION_LINK))


# each ratio target's floor: the same options with --empty-programs, the same hooks (the windowed ones in the same
# kind of windows) each with a program that only returns
FLOOR_OF = {"fstrace-full": "fstrace-floor", "fstrace-attach": "fstrace-attach-floor",
            "fstrace-serve-budget": "fstrace-serve-floor"}
FSTRACE_CONFIGS.update({floor: FSTRACE_CONFIGS[cfg] + ["--empty-programs"] for cfg, floor in FLOOR_OF.items()})
# the configurations whose request counts come from windows: their estimate is checked against fio's own count
WINDOWED = ("fstrace-attach", "fstrace-serve-budget")
CASES = ["fio-randread-4k-cold", "fio-randread-4k-warm", "tar-seqread-cold"]
CONFIGS = ["none", "fstrace-floor", "fstrace-full", "fstrace-nosample", "fstrace-records-all", "fstrace-block",
           "fstrace-serve", "fstrace-attach", "fstrace-attach-floor", "fstrace-serve-budget", "fstrace-serve-floor",
           "fstrace-untraced", "bpftrace-hist", "biolatency"]
BPFTRACE_HIST = "tracepoint:block:block_rq_complete { @bytes = hist(args->nr_sector * 512); }"
SAMPLING = "perf_event sampling"  # perf sampling's row among the programs


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def bpf_prog_ids():
    out = subprocess.run(["bpftool", "prog", "show"], stdout=subprocess.PIPE, text=True).stdout
    return {line.split(":")[0] for line in out.splitlines() if line[:1].isdigit()}


def prog_ids_of_process(pid):
    """The ids of the BPF programs process pid holds open (the prog_id line of each descriptor's fdinfo): its own,
    whatever else loads programs meanwhile."""
    ids = set()
    try:
        fds = os.listdir("/proc/%d/fdinfo" % pid)
    except OSError:
        return ids
    for fd in fds:
        try:
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                ids.update(line.split()[1] for line in f if line.startswith("prog_id:"))
        except OSError:  # closed meanwhile
            pass
    return ids


class Tracer:
    """A third-party tracer in the background around a workload; ready once its BPF programs are loaded
    (its own output may be buffered in a pipe, so it is not read)."""

    def __init__(self, argv):
        before = bpf_prog_ids()
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  preexec_fn=die_with_parent)
        try:
            self._wait_loaded(argv, before)
        except BaseException:  # interrupted, or it never loaded: not left running with its programs attached
            self.stop()
            raise

    def _wait_loaded(self, argv, before):
        deadline = time.time() + 60
        last = None
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError("%s exited with %d before tracing" % (argv[0], self.p.returncode))
            now = bpf_prog_ids() - before
            if now and now == last:
                time.sleep(0.5)  # attach follows load
                # its own programs, by its descriptors; the new ids where it holds none open itself
                self.ids = prog_ids_of_process(self.p.pid) or now
                return
            last = now
            time.sleep(0.2)
        raise RuntimeError("%s did not load its programs within 60 s" % argv[0])

    def prog_stats(self):
        """[(name, runs, run_ns)] of the programs this tracer loaded (counted while bpf_stats_enabled=1)."""
        out = []
        for prog in json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], stdout=subprocess.PIPE,
                                              text=True).stdout or "[]"):
            if str(prog["id"]) in self.ids:
                out.append((prog.get("name", "?"), prog.get("run_cnt", 0), prog.get("run_time_ns", 0)))
        return out

    def stop(self):
        stop_process(self.p)


def run_to_end(argv, scrape=False, **kw):
    """argv to its end in a process group of its own, its output discarded, a failure raised; interrupted, the
    group is asked to stop (SIGTERM: a collector ends its workload and detaches, fstrace run undoes its mounts, a
    shell pipeline's every process ends) and waited for, so that nothing still holds a mount unmounted next.
    scrape: argv is a collector serve would scrape (scraping)."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent,
                         start_new_session=True, **kw)
    try:
        with scraping(p, first_after_s=1) if scrape else contextlib.nullcontext():
            rc = p.wait()
    except BaseException:
        stop_process(p, timeout_s=60, sig=signal.SIGTERM, group=True)
        raise
    if rc:
        raise subprocess.CalledProcessError(rc, argv)


def timed_shell(script, outfile):
    """sh script whose own start/end (ns) are written to outfile, so every configuration is timed alike."""
    return ["sh", "-c", 's=$(date +%%s%%N); %s; e=$(date +%%s%%N); echo $((e - s)) > %s' % (script, outfile)]


def collector_cpu_s(header):
    """The collector process's own CPU seconds while the workload ran (reading and filing records, its windows and
    timers; --budget's calibration before it left out), else over the whole traced interval; None from a collector
    that did not say"""
    c = tracer.collector_cpu(header)
    return c["cpu_ns"] / 1e9 if c["available"] else None


def traced_diskstats_reads(summ):
    """{"major:minor": reads completed} of each traced device between the collector's own diskstats snapshots (at
    its attach and its end: the summary's diskstats_delta): reads of the image outside that span (the mount's
    metadata looked up before the attach) are no request its windows could see."""
    return {name: d["diskstats_delta"]["reads"] for name, d in (summ.get("devices") or {}).items()
            if d.get("diskstats_delta")}


def unseen_reads(summ):
    """{"major:minor": read requests} of each traced device that /proc/diskstats counted completed and fstrace did not
    see (the summary's unseen_requests: under --budget against block_rq_done's count over the snapshots' span):
    completions the kernel ran no program for (docs/measuring.md, Lost events), which the windowed estimate's total
    carries where the counts around the snapshots were read (analysis/devices.py windowed_reads)."""
    return {name: d["unseen_requests"] for name, d in (summ.get("devices") or {}).items()
            if d.get("unseen_requests") is not None}


def bench_meta(work):
    """The results' config the bench's collector runs get, as run and attach give theirs (collector -m): what
    they traced, erofs images only, so the analysis tells the erofs figures apart as it does for run."""
    path = os.path.join(work, "bench-meta.json")
    if not os.path.exists(path):
        with open(path, "w") as f:
            json.dump({"mode": "bench", "label": "bench", "workload": "bench", "fs": "erofs", "fs_types": ["erofs"]}, f)
    return path


def run_one(config, argv, cwd, devs, work, estimates=False):
    """One run of config around argv: its figures (records, drops, the programs' runs, the windows' estimate);
    estimates: also the estimate objects of the results' windowed block and erofs figures (windowed_figure_estimates),
    which takes the whole analysis."""
    fst = os.path.join(work, "r.fst")
    if os.path.exists(fst):
        os.unlink(fst)
    info = {}
    if config in FSTRACE_CONFIGS:
        options = collector_options(config, work)
        cmd = [COLLECTOR, "-o", fst, "-m", bench_meta(work)] + devs + options + ["--"] + argv
        run_to_end(cmd, scrape=scraped(config), cwd=cwd)
        res = results.load(fst)
        n = sum(len(a) for a in res.records.values())
        span = (res.header["time"]["end_ns"] - res.header["time"]["start_ns"]) / 1e9
        wl = res.header.get("workload") or {}
        rw = res.header.get("request_windows") or {}
        info = {"records": n, "records_per_s": n / span if span else None,
                "dropped": sum(res.header["drops"].values()),
                "load_attach_s": res.header["time"]["load_attach_ns"] / 1e9,
                "collector_cpu_s": collector_cpu_s(res.header),
                "window_edges_cpu_s": window_edges_cpu_s(rw, wl.get("start_ns") or res.header["time"]["start_ns"]),
                "probes": [(p["probe"], p["runs"], p.get("run_ns", 0)) for p in res.header["probes"] if p["runs"]]
                + ([(SAMPLING, res.header["sampling"]["runs"], res.header["sampling"]["run_ns"])]
                   if res.header["sampling"].get("runs") else []),
                # per second of the workload: what the programs did before it started (--budget's calibration) is
                # the windowed hooks', and the tracer's start and end are no part of the workload's time
                "span_s": (wl["end_ns"] - wl["start_ns"]) / 1e9 if wl.get("start_ns") and wl.get("end_ns") else span,
                "windowed_probes": (rw.get("windowed_probes", []) + ([SAMPLING] if rw.get("sampling_windowed") else [])
                                    if rw.get("active") else []),
                "tiers": {p["probe"]: p["tier"] for p in res.header["probes"]},
                # the programs on the completion tracepoint, by the hook the header names (two share it)
                "completion_probes": [p["probe"] for p in res.header["probes"]
                                      if p.get("hook", p["probe"]) == COMPLETION_HOOK]}
        if estimates:
            summ = summary.summarize(res)
            info["figures"] = windowed_figure_estimates(summ)
            info["diskstats_reads"] = traced_diskstats_reads(summ)
            info["unseen_reads"] = unseen_reads(summ)
        if config in WINDOWED:
            w = windows.request_windows(res)
            info["windows"] = {k: w.get(k) for k in ("active", "why", "fraction", "windows", "seen", "estimate",
                                                     "interval95", "traced_reads_lost")}
        return info
    if config == "fstrace-untraced":
        return run_untraced(argv, cwd, fst)
    tool = None
    if config == "bpftrace-hist":
        tool = Tracer(["bpftrace", "-e", BPFTRACE_HIST])
    elif config == "biolatency":
        tool = Tracer(["biolatency"])
    try:
        t0 = time.monotonic()
        run_to_end(argv, cwd=cwd)
        if tool:
            info = {"probes": tool.prog_stats(), "span_s": time.monotonic() - t0}
    finally:
        if tool:
            tool.stop()
    return info


def start_collector(argv):
    """The collector of argv started with --ready-fd, dying with this process: (process, the ready pipe's read end)."""
    rfd, wfd = os.pipe()
    try:
        collector = subprocess.Popen(argv[:1] + ["--ready-fd", str(wfd)] + argv[1:], pass_fds=(wfd,),
                                     preexec_fn=die_with_parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except BaseException:
        os.close(rfd)
        raise
    finally:
        os.close(wfd)
    return collector, rfd


def wait_ready(rfd, what, timeout_s=300):
    """Until the collector says it is attached (raises when it exits before, or has not within timeout_s)."""
    with os.fdopen(rfd) as ready:
        if not select.select([ready], [], [], timeout_s)[0]:
            raise RuntimeError("%s: the collector did not attach within %d s" % (what, timeout_s))
        if ready.readline().strip() != "ready":
            raise RuntimeError("%s: the collector exited before attaching" % what)


def run_untraced(argv, cwd, fst):
    """The workload beside a collector that traces another process (attach --pid, default options)."""
    sleeper = subprocess.Popen(["sleep", "3600"], preexec_fn=die_with_parent)
    collector, ready = start_collector([COLLECTOR, "-o", fst, "--pid", str(sleeper.pid)] + tracing_options())
    try:
        wait_ready(ready, "fstrace-untraced")
        t0 = time.monotonic()
        run_to_end(argv, cwd=cwd)
        span = time.monotonic() - t0
    finally:
        stop_process(collector)
        stop_process(sleeper, sig=signal.SIGKILL)
    res = results.load(fst)
    return {"records": sum(len(a) for a in res.records.values()), "records_per_s": None,
            "dropped": sum(res.header["drops"].values()), "load_attach_s": res.header["time"]["load_attach_ns"] / 1e9,
            "collector_cpu_s": collector_cpu_s(res.header),
            "probes": [(p["probe"], p["runs"], p.get("run_ns", 0)) for p in res.header["probes"] if p["runs"]],
            "span_s": span}


class BpfStats:
    """kernel.bpf_stats_enabled=1 for a while (the kernel then times every BPF program run), restored after."""

    PATH = "/proc/sys/kernel/bpf_stats_enabled"

    def __enter__(self):
        with open(self.PATH) as f:
            self.was = f.read().strip()
        with open(self.PATH, "w") as f:
            f.write("1")
        return self

    def __exit__(self, *exc):
        with open(self.PATH, "w") as f:
            f.write(self.was)


# runs with bpf stats on per case and configuration: one run's per-event figure moved by a fifth between benches
STATS_RUNS = 3
# each fio case's length: at the default budget a window opens every three seconds or so, and a windowed
# configuration's time-average cost is what its ratio is to show; a run of a second or less (a cold 16 MiB
# randread, 0.34 s on the 2-CPU VM of docs/generated) holds a window in about one repetition in nine (0.34 s of a
# 3 s period) and none in the rest, so its median shows the hooks left attached and not the windows.  Ten seconds
# hold three or so in every repetition
CASE_RUNTIME_S = 10
# the windowed configurations' estimates against the true counts: at the default budget a window opens every few
# seconds, so a case (CASE_RUNTIME_S) holds three or so, an interval wide with so few; these runs hold ten (defaults of
# --cover-runs and --cover-runtime-s, per configuration and start, warm and cold)
COVER_RUNS = 3
COVER_RUNTIME_S = 30
# the windowed configurations' collector with no workload, tracing every task of the system as serve does: what
# staying attached costs in the collector itself, beside the machine's own threads and beside IDLE_THREADS more
# sleeping ones (its looks at the traced threads' read counts, and the windows' attach, go over every thread)
IDLE_RUNS = 2
IDLE_S = 20
IDLE_THREADS = 2000
SLEEPERS = ("import sys, threading; e = threading.Event(); "
            "[threading.Thread(target=e.wait, daemon=True).start() for _ in range(int(sys.argv[1]))]; "
            "print('ready', flush=True); e.wait()")


def threads_on_machine():
    """Every thread of the system now (/proc/PID/task/TID)."""
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                n += len(os.listdir("/proc/%s/task" % pid))
            except OSError:  # gone meanwhile
                pass
    return n


def idle_run(config, devs, work, seconds):
    """The collector of config alone, every task of the system traced (no command: as serve and attach without a
    process filter), its CPU ms per second over seconds from when it said ready (--budget's calibration done), by
    the kernel's account of the process (/proc/PID/stat utime + stime, in clock ticks)."""
    fst = os.path.join(work, "idle.fst")
    options = collector_options(config, work)
    collector, ready = start_collector([COLLECTOR, "-o", fst] + devs + options)

    def cpu_s():
        with open("/proc/%d/stat" % collector.pid) as f:
            utime, stime = (int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
        return (utime + stime) / os.sysconf("SC_CLK_TCK")
    try:
        wait_ready(ready, config)
        c0, t0 = cpu_s(), time.monotonic()
        with scraping(collector) if scraped(config) else contextlib.nullcontext():
            time.sleep(seconds)
        # a collector that died meanwhile would read as one that took no CPU
        if collector.poll() is not None:
            raise RuntimeError("%s: the idle collector exited while measured (status %d)" % (config,
                                                                                          collector.returncode))
        c1, t1 = cpu_s(), time.monotonic()
    finally:
        status = stop_process(collector)
        if os.path.exists(fst):
            os.unlink(fst)
    if status != 0:
        raise RuntimeError("%s: the idle collector ended with status %d" % (config, status))
    return (c1 - c0) / (t1 - t0) * 1e3


def idle_collector(windowed, devs, work, seconds=IDLE_S):
    """Rows of the windowed configurations' collector CPU ms per second of an idle seconds, IDLE_RUNS runs each,
    with the machine's threads and with IDLE_THREADS more."""
    rows = []
    for extra in (0, IDLE_THREADS):
        helper = None
        if extra:
            helper = subprocess.Popen([sys.executable, "-c", SLEEPERS, str(extra)], stdout=subprocess.PIPE,
                                      text=True, preexec_fn=die_with_parent)
        try:
            if helper and helper.stdout.readline().strip() != "ready":
                raise RuntimeError("bench: the sleeping threads did not start")
            for cfg in windowed:
                threads = threads_on_machine()
                ms = [idle_run(cfg, devs, work, seconds) for _ in range(IDLE_RUNS)]
                rows.append({"config": cfg, "extra_threads": extra, "threads": threads, "collector_ms_per_s": ms})
                log("%s: idle collector beside %d threads: %s ms/s" % (cfg, threads, ms_list(ms)))
        finally:
            if helper:
                stop_process(helper, sig=signal.SIGKILL)
                helper.stdout.close()
    return rows


def probe_costs(infos):
    """[{program, runs, events_per_s, ns_per_event, ns_per_event_range, windowed}] over runs with bpf stats on
    (infos, one per run): each program's median over the runs it ran in, heaviest first; windowed: attached only
    in --budget's windows."""
    per = {}
    windowed = set()
    for info in infos:
        span = info.get("span_s") or 0
        windowed.update(info.get("windowed_probes") or [])
        for name, runs, ns in info.get("probes", []):
            if runs and span:
                per.setdefault(name, []).append((runs, runs / span, ns / runs))
    rows = [{"program": name, "runs": statistics.median(r[0] for r in v),
             "events_per_s": statistics.median(r[1] for r in v), "ns_per_event": statistics.median(r[2] for r in v),
             "ns_per_event_range": [min(r[2] for r in v), max(r[2] for r in v)], "windowed": name in windowed}
            for name, v in per.items()]
    return sorted(rows, key=lambda p: -p["events_per_s"] * p["ns_per_event"])


def window_edges_cpu_s(rw, since_ns):
    """--budget: the collector's CPU seconds at the edges of its windows opened since since_ns (the start of the
    span its CPU time is taken over: analysis/tracer.py collector_cpu), attaching and detaching the windowed hooks
    and its looks at the counts, which the budget sizes the windows to pay for (window rows' collector_cpu_ns);
    0 without windows."""
    fields = rw.get("window_fields", [])
    if not rw.get("active") or "collector_cpu_ns" not in fields:
        return 0.0
    k, o = fields.index("collector_cpu_ns"), fields.index("open_ns")
    return sum(row[k] or 0 for row in rw.get("windows", []) if row[o] >= since_ns) / 1e9


def collector_ms_per_s(info, outside_windows=False):
    """The collector process's own CPU ms per second of the workload in one run (run_one's info), or None: per
    second of the workload as the programs' rates are (its CPU time includes draining the records after the
    workload ended, as their runs include the events then; summary.json's figure is per second of the traced
    time after the workload's start instead); outside_windows: less its windows' edges (window_edges_cpu_s),
    which are inside the budget"""
    cpu, span = info.get("collector_cpu_s"), info.get("span_s")
    if cpu is not None and outside_windows:
        cpu = max(cpu - (info.get("window_edges_cpu_s") or 0.0), 0.0)
    return cpu / span * 1e3 if cpu is not None and span else None


def always_on_ms_per_s(costs, bound=None):
    """CPU ms per second of the workload that the programs attached all the time took (probe_costs rows: the
    windowed ones left out), their statistics' own clock reads included; bound 0 or 1: with each program's lowest
    or highest cost per event of the runs instead of its median."""
    return sum(p["events_per_s"] * (p["ns_per_event"] if bound is None else
                                    (p.get("ns_per_event_range") or [p["ns_per_event"]] * 2)[bound])
               for p in costs if not p.get("windowed")) / 1e6


def main_command_profile(cache, scale):
    """The main command's own on-CPU profile: the share of samples inside requests that were fstrace's."""
    out = tempfile.mkdtemp(prefix="fstrace-bench-run-")
    try:
        run_to_end([os.path.join(ROOT, "fstrace"), "run", "--fs", "erofs", "--workload", "randread",
                    "--cache", cache, "--scale", str(scale), "-o", os.path.join(out, "r")])
        with open(os.path.join(out, "r", "summary.json")) as f:
            s = json.load(f)
        return {"command": "fstrace run --fs erofs --workload randread", "tracer": s["tracer"],
                "attribution_shares": s["attribution"]["shares"]}
    finally:
        shutil.rmtree(out, ignore_errors=True)


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
    run_to_end([COLLECTOR, "-o", fst] + devs + FSTRACE_CONFIGS["fstrace-records-all"] + ["--"] + argv)
    t0 = time.perf_counter()
    res = results.load(fst)
    summary.summarize(res)
    dt = time.perf_counter() - t0
    n = sum(len(a) for a in res.records.values())
    return {"records": n, "seconds": dt, "seconds_per_million": dt / n * 1e6,
            "dropped": sum(res.header["drops"].values())}


def window_counts(ws):
    """How often fio's own read count fell inside the windows' 95 % interval, over the repetitions that had one."""
    with_interval = [w for w in ws if w.get("interval95")]
    covered = [w for w in with_interval if w["interval95"][0] <= w["fio_ios"] <= w["interval95"][1]]
    # what the windowed hooks cost fio's reads over each run, measured on them (analysis/windows.py
    # windows_slowdown): the windows' part of what the throughput ratio shows
    lost = [w["traced_reads_lost"]["over_time"] for w in ws if "over_time" in (w.get("traced_reads_lost") or {})]
    return {"repetitions": len(ws), "with_interval": len(with_interval), "covered": len(covered),
            "fraction": stats([w["fraction"] for w in ws if w.get("fraction") is not None]) if ws else None,
            "traced_reads_lost_over_time": stats(lost), "traced_reads_lost_runs": len(lost),
            "why_none": sorted({w.get("why") or "" for w in ws if not w.get("interval95")}),
            "rows": [{k: w.get(k) for k in ("fio_ios", "seen", "estimate", "interval95", "fraction", "windows")}
                     for w in ws]}


def find_estimate_objects(node, path=()):
    """[(path, object)] of every object under node of the form {"estimate": N, "interval95": [lo, hi], ...}: a
    figure the collector saw only in --budget windows, weighted up to all the traced time (path: the keys down
    to it)."""
    out = []
    if isinstance(node, dict):
        if "estimate" in node and isinstance(node.get("interval95"), (list, tuple)) and len(node["interval95"]) == 2:
            out.append((path, node))
        for key, value in node.items():
            out += find_estimate_objects(value, path + (str(key),))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += find_estimate_objects(value, path + (str(i),))
    return out


# the key naming a windowed count of read requests: a device's read requests (the devices section's figures are
# read requests unless named otherwise), and the workload's reads that erofs served (fio counts each)
BLOCK_COUNT_KEYS = ("requests",)
EROFS_COUNT_KEYS = ("requests", "reads")


def windowed_figure_estimates(summ):
    """The windowed block and erofs figures of a summary (summary.summarize): {"devices": {dev: [(path, object)]},
    "erofs": [(path, object)]}, each object an estimate with its 95 % interval (find_estimate_objects).  Where the
    collector attached the block and erofs programs all the time these figures are exact, and none is found."""
    devices = (summ or {}).get("devices") or {}
    return {"devices": {dev: find_estimate_objects(d) for dev, d in devices.items() if isinstance(d, dict)},
            "erofs": find_estimate_objects((summ or {}).get("erofs"))}


def count_estimate(found, keys, where):
    """The one estimate object of found [(path, object)] whose path ends in one of keys, or (None, why)."""
    if not found:
        return None, "the results have no estimate under %s (its figures exact, or not there)" % where
    match = [(path, obj) for path, obj in found if path and path[-1] in keys]
    if len(match) != 1:
        return None, "%s estimate(s) under %s (%s), %s named %s" % (
            len(found), where, ", ".join("/".join(p) or "." for p, _ in found),
            "none" if not match else "more than one", " or ".join(keys))
    path, obj = match[0]
    return {"path": "/".join(path), "estimate": obj["estimate"], "interval95": list(obj["interval95"])}, None


def figure_check(estimate, why, truth, truth_what, unseen=None):
    """One run's check of a windowed figure: its estimate against the true count, or why it is unavailable; unseen:
    the true count's requests no program ran for, where known (unseen_reads), said beside a miss."""
    if estimate is None:
        return {"available": False, "why": why, "truth": truth, "truth_what": truth_what}
    lo, hi = estimate["interval95"]
    out = dict(estimate, available=True, truth=truth, truth_what=truth_what, covered=lo <= truth <= hi)
    if unseen is not None:
        out["unseen"] = unseen
    return out


def diskstats_reads():
    """{"major:minor": reads completed} of every block device (/proc/diskstats: the kernel's own count)."""
    out = {}
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            out["%s:%s" % (fields[0], fields[1])] = int(fields[3])
    return out


def coverage_run(info, fio_ios, dev, disk_reads):
    """A 30 s run's checks: the request estimate, the windowed block figure of dev (the image's loop device, whose
    every read request is the workload's) and the windowed erofs figure, each against its true count: fio's reads,
    the kernel's reads completed on dev (between the collector's own snapshots at its attach and end), fio's reads."""
    w = info["windows"]
    req = ({"path": "request_windows", "estimate": w["estimate"], "interval95": w["interval95"]}
           if w.get("interval95") else None)
    figs = info.get("figures") or {"devices": {}, "erofs": []}
    block, block_why = count_estimate(figs["devices"].get(dev), BLOCK_COUNT_KEYS, "devices/" + dev)
    erofs, erofs_why = count_estimate(figs["erofs"], EROFS_COUNT_KEYS, "erofs")
    return {"fraction": w.get("fraction"), "windows": w.get("windows"),
            "requests": figure_check(req, w.get("why") or "no interval", fio_ios, "fio's reads"),
            "block": figure_check(block, block_why, disk_reads, "diskstats reads completed, " + dev,
                                  (info.get("unseen_reads") or {}).get(dev)),
            "erofs": figure_check(erofs, erofs_why, fio_ios, "fio's reads")}


def coverage_verdict(checks):
    """Whether the true count lay inside the 95 % interval in every run (figure_check rows): unavailable where no
    run had the figure (never a pass), not met where one run's interval missed it, undecided where some runs had
    no interval."""
    have = [c for c in checks if c["available"]]
    if not have:
        return "unavailable (%s)" % "; ".join(sorted({c["why"] for c in checks}))
    missed = [c for c in have if not c["covered"]]
    if missed:
        return "not met (%d of %d runs outside: %s)" % (len(missed), len(checks), "; ".join(
            "%d not in %.0f-%.0f%s" % (c["truth"], *c["interval95"],
                                        " (%d unseen by the programs, in the estimate's total)" % c["unseen"]
                                        if c.get("unseen") else "") for c in missed))
    if len(have) < len(checks):
        return "undecided (%d of %d runs inside; %d without an interval: %s)" % (
            len(have), len(checks), len(checks) - len(have),
            "; ".join(sorted({c["why"] for c in checks if not c["available"]})))
    return "met (%d of %d runs)" % (len(have), len(checks))


# the completion tracepoint: fstrace's programs on it are found by their hook in the results header (block_rq_done
# and block_rq_complete both run on it), biolatency's by its program names, which the kernel cuts to 15 characters
COMPLETION_HOOK = "block_rq_complete"
COMPLETION_PROG = COMPLETION_HOOK[:13]


def completion_runs(probes, names=None):
    """(runs, run_ns) of one run's programs on block_rq_complete ((name, runs, run_ns) with the statistics on;
    names: those programs' names where the run said which, else found by COMPLETION_PROG) that ran."""
    return [(runs, ns) for name, runs, ns in probes
            if (name in names if names is not None else name.startswith(COMPLETION_PROG)) and runs]


def completion_cost_ns(probes, names=None):
    """ns per completed block request of one run's programs on block_rq_complete (completion_runs): their run time
    summed, over the completions (the most runs of them: an always-attached one runs on every completion, a
    windowed one only in windows); None where none ran."""
    rows = completion_runs(probes, names)
    return sum(ns for _, ns in rows) / max(r for r, _ in rows) if rows else None


def completion_costs(infos):
    """min/median/max over the runs (run_one infos) of completion_cost_ns of the exact path: the programs on the
    completion attached all the time (block_rq_done under --budget, the windowed one left out: its cost is in the
    windows, which the budget bounds), and each run's; with_windowed: the same of every program on it."""
    def over(per_run):
        ran = [c for c in per_run if c is not None]
        return {"min": min(ran), "median": statistics.median(ran), "max": max(ran)} if ran else None

    def exact_path(i):
        names = i.get("completion_probes")
        return None if names is None else [n for n in names if n not in (i.get("windowed_probes") or [])]
    per_run = [completion_cost_ns(i.get("probes") or [], exact_path(i)) for i in infos]
    every = [completion_cost_ns(i.get("probes") or [], i.get("completion_probes")) for i in infos]
    # what each run's cost is over: a case with a few completions a run (a warm read's) times them one by one, cold
    completions = [max((r for r, _ in completion_runs(i.get("probes") or [], i.get("completion_probes"))), default=0)
                   for i in infos]
    out = {"runs": per_run, "ns_per_completion": over(per_run), "completions": completions}
    if every != per_run:
        out["with_windowed"] = {"runs": every, "ns_per_completion": over(every)}
    return out


def median_interval(xs, level=0.95):
    """Distribution-free interval for the median of xs: the order statistics (x_(k), x_(n+1-k)) with the largest k
    whose coverage, 1 - 2 P(Binomial(n, 1/2) < k), is still at least level.  With too few values for that (under
    6 for 95 %) the range, with its own coverage.  Returns (lo, hi, coverage)."""
    v = sorted(xs)
    n = len(v)
    below = [math.comb(n, i) / 2 ** n for i in range(n + 1)]  # P(exactly i of n below the median)
    k, cover = 1, 1 - 2 * below[0]
    while k + 1 <= n // 2 and 1 - 2 * sum(below[:k + 1]) >= level:
        k += 1
        cover = 1 - 2 * sum(below[:k])
    return v[k - 1], v[n - k], cover


def stats(xs):
    if not xs:
        return None
    out = {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}
    if len(xs) > 1:
        lo, hi, cover = median_interval(xs)
        out["median_interval"] = [lo, hi]
        out["median_interval_coverage"] = cover
    return out


# the design targets (docs/overhead.md; full attribution's ratio per case, block-only against biolatency), checked in
# every run
FULL_TARGETS = {"fio-randread-4k-cold": 0.97, "fio-randread-4k-warm": 0.90, "tar-seqread-cold": 0.97}
# attach and serve at their default budget: the median ratio in every case, and no case shown below the second
BUDGET_TARGET = 0.985
BUDGET_NOT_BELOW = 0.98
# attach's and serve's programs attached all the time and their collector process: CPU ms per second of the workload
ALWAYS_ON_LIMIT_MS_PER_S = 5


def poisson_upper_95(k):
    """The exact (Garwood) two-sided 95 % upper bound of a Poisson mean with k events seen: the mean whose
    chance of k or fewer is 2.5 % (bisection on the cumulative distribution, summed in log space: exp(-mu) alone
    underflows from mu of about 745)."""
    def at_most_k(mu):
        logs = [i * math.log(mu) - mu - math.lgamma(i + 1) for i in range(k + 1)]
        top = max(logs)
        return math.exp(top) * math.fsum(math.exp(x - top) for x in logs)
    lo, hi = max(float(k), 1e-9), k + 10.0 + 10 * math.sqrt(k + 1)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at_most_k(mid) > 0.025 else (lo, mid)
    return (lo + hi) / 2


def verdict(interval, target, coverage):
    """met / not met when the median's 95 % interval is wholly on one side of the target, else undecided."""
    lo, hi = interval
    if coverage < 0.95:
        return "undecided (too few repetitions for a 95 %% interval: %.0f %%; 6 or more give one)" % (100 * coverage)
    return "met" if lo >= target else "not met" if hi < target else "undecided (the interval spans it)"


def coverage_row(cfg, case, wc):
    """The target row of fio's count against a windowed configuration's 95 % interval (window_counts: wc)."""
    return {"kind": "short-case-windows",
            "what": "%s: fio's count inside the 95 %% interval, %s" % (cfg, case), "target": "every repetition",
            "median": wc["covered"],
            "verdict": "%d of %d repetitions with an interval%s" % (
                wc["covered"], wc["with_interval"],
                "; %d without (%s)" % (wc["repetitions"] - wc["with_interval"], "; ".join(wc["why_none"]))
                if wc["repetitions"] > wc["with_interval"] else "")}


def always_on_row(cfg, case, r):
    """The target row of a windowed configuration's programs attached all the time (the runs with the statistics
    on: each program's median cost per event, and its lowest and highest) plus its collector process's own CPU (the
    throughput runs: the median, and its interval), in CPU ms per second of the workload."""
    costs = r["probe_costs"]
    # the collector less its windows' edges: those are the budget's, which sizes the windows to pay for them
    col = r.get("collector_outside_windows_ms_per_s") or r.get("collector_ms_per_s") or {}
    c_med = col.get("median") or 0
    c_lo, c_hi = col.get("median_interval") or (c_med, c_med)
    med = always_on_ms_per_s(costs) + c_med
    lo, hi = always_on_ms_per_s(costs, 0) + c_lo, always_on_ms_per_s(costs, 1) + c_hi
    limit = ALWAYS_ON_LIMIT_MS_PER_S
    return {"kind": "always-on", "what": "%s: always-on programs + collector (less its windows' edges, which the "
            "budget pays for), CPU ms per s of %s" % (cfg, case),
            "target": "<= %g" % limit,
            "median": med, "range": [lo, hi],
            "verdict": "met" if hi <= limit else "not met" if lo > limit else
            "undecided (the runs' range spans it)"}


def completion_row(cfg, case, ours, biolatency):
    """The target row of the exact block path's cost per completion of cfg against biolatency's, each
    over the runs with the statistics on (completion_costs), in the same bench."""
    row = {"kind": "completion-cost", "what": "%s: exact block path ns per completion vs biolatency, %s" % (cfg, case),
           "target": "<= biolatency"}
    f = (ours or {}).get("ns_per_completion")
    b = (biolatency or {}).get("ns_per_completion")
    if not f:
        return dict(row, verdict="unavailable (no block request completed in its runs with the statistics on)")
    row["median"] = f["median"]
    if not b:
        return dict(row, verdict="unavailable (%s)" % ("biolatency counted no completion" if biolatency else
                                                       "biolatency was not in this run"))
    row["biolatency_median"] = b["median"]
    text = "%.0f ns (%.0f-%.0f) against biolatency's %.0f ns (%.0f-%.0f)" % (
        f["median"], f["min"], f["max"], b["median"], b["min"], b["max"])

    def per_run(side):
        n = [c for c in side.get("completions") or [] if c]
        return "%d" % n[0] if n and min(n) == max(n) else "%d-%d" % (min(n), max(n)) if n else None
    counts = (per_run(ours), per_run(biolatency))
    if all(counts):
        text += ", over %s completions a run (biolatency's %s)" % counts
    w = ((ours or {}).get("with_windowed") or {}).get("ns_per_completion")
    if w:
        text += "; with the windowed completion hook's share, %.0f ns (%.0f-%.0f)" % (w["median"], w["min"], w["max"])
    return dict(row, verdict=("met: " if f["max"] <= b["min"] else "not met: " if f["min"] > b["max"] else
                              "undecided (the runs' ranges overlap): ") + text)


def targets(out):
    """Each target of the run: the median, its interval, and whether this run shows it met."""
    rows = []
    at_not_below = {cfg: [] for cfg in WINDOWED}  # per windowed configuration: (case, verdict at BUDGET_NOT_BELOW)
    for case, target in FULL_TARGETS.items():
        rows += case_target_rows(case, out["cases"].get(case, {}), target, at_not_below)
    rows += budget_not_below_rows(at_not_below)
    rows += estimate_rows(out.get("window_coverage") or {})
    drops = [r["dropped"]["max"] for res in out["cases"].values() for c, r in res.items()
             if c in out["configs"] and r.get("dropped") is not None]
    if drops:
        rows.append({"kind": "drops", "what": "dropped records, every fstrace run", "target": "0", "median": max(drops),
                     "verdict": "met" if max(drops) == 0 else "not met"})
    for case, res in out["cases"].items():
        la = res.get("fstrace-full", {}).get("load_attach_s")
        if la and la.get("median_interval"):
            lo, hi = la["median_interval"]
            cover = la["median_interval_coverage"]
            rows.append({"kind": "load-attach",
                         "what": "load+attach s, fstrace-full, " + case, "target": "< 0.3", "median": la["median"],
                         "interval": [lo, hi], "coverage": cover,
                         "verdict": verdict([lo, hi], 0.3, cover) if cover < 0.95 else
                         "met" if hi < 0.3 else "not met" if lo >= 0.3 else "undecided (the interval spans it)"})
    a = out.get("analysis")
    if a:
        rows.append({"kind": "analysis",
                     "what": "analysis s per million records", "target": "< 2", "median": a["seconds_per_million"],
                     "verdict": "met" if a["seconds_per_million"] < 2 else "not met"})
    rows += tracer_share_rows(out)
    return rows


def ratio_row(kind, what, res, cfg, target):
    """The ratio target row of cfg, beside its floor's ratio where the run has it (FLOOR_OF)."""
    q = res[cfg]["ratio_to_none"]
    row = {"kind": kind,
           "what": what, "target": ">= %g" % target, "median": q["median"], "interval": q["median_interval"],
           "coverage": q["median_interval_coverage"],
           "verdict": verdict(q["median_interval"], target, q["median_interval_coverage"])}
    fq = (res.get(FLOOR_OF[cfg]) or {}).get("ratio_to_none") or {}
    if fq.get("median_interval"):
        row["floor_median"] = fq["median"]
        row["floor_interval"] = fq["median_interval"]
        if fq["median_interval"][1] < target and fq["median_interval_coverage"] >= 0.95:
            row["verdict"] += "; beyond this machine: the hooks alone (floor) keep less"
    return row


def case_target_rows(case, res, target, at_not_below):
    """One case's target rows: fstrace-full's ratio, each windowed configuration's (its verdict at
    BUDGET_NOT_BELOW added to at_not_below), coverage, always-on and completion costs, and fstrace-block beside
    biolatency."""
    rows = []
    full = res.get("fstrace-full")
    if full and full["ratio_to_none"].get("median_interval"):
        rows.append(ratio_row("full-ratio", "fstrace-full ratio, " + case, res, "fstrace-full", target))
    for cfg in WINDOWED:
        r = res.get(cfg)
        q = r and r["ratio_to_none"]
        if q and q.get("median_interval"):
            rows.append(ratio_row("budget-ratio", "%s (budget %g %%) ratio, %s" % (cfg, DEFAULT_BUDGET_PCT, case),
                                  res, cfg, BUDGET_TARGET))
            at_not_below[cfg].append((case, verdict(q["median_interval"], BUDGET_NOT_BELOW,
                                                    q["median_interval_coverage"])))
        wc = (r or {}).get("window_counts")
        if wc:
            rows.append(coverage_row(cfg, case, wc))
        if r and r.get("probe_costs") is not None:
            rows.append(always_on_row(cfg, case, r))
        if r and (res.get("completion_cost") or {}).get(cfg):
            rows.append(completion_row(cfg, case, res["completion_cost"][cfg],
                                       res["completion_cost"].get("biolatency")))
    pair = res.get("block_vs_biolatency")
    if pair and pair.get("median_interval"):
        lo, hi = pair["median_interval"]
        cover = pair["median_interval_coverage"]
        rows.append({"kind": "block-vs-biolatency",
                     "what": "fstrace-block / biolatency ratio, " + case, "target": "not below 1",
                     "median": pair["median"], "interval": [lo, hi], "coverage": cover,
                     "verdict": verdict([lo, hi], 1.0, cover) if cover < 0.95 else
                     "not met (shown below)" if hi < 1 else "met (shown at least equal)" if lo >= 1
                     else "not shown below (the interval spans 1)"})
    return rows


def budget_not_below_rows(at_not_below):
    """Per windowed configuration: no case shown below BUDGET_NOT_BELOW."""
    rows = []
    for cfg, vs in at_not_below.items():
        if vs:
            below = [case for case, v in vs if v == "not met"]
            open_ = [case for case, v in vs if v.startswith("undecided (too few")]
            rows.append({"kind": "budget-not-below", "what": "%s (budget %g %%): no case not met at %g" % (
                cfg, DEFAULT_BUDGET_PCT,
                                                                            BUDGET_NOT_BELOW),
                         "target": "no case below", "median": len(below),
                         "verdict": "not met (shown below %g: %s)" % (BUDGET_NOT_BELOW, ", ".join(below)) if below
                         else "undecided (too few repetitions for a 95 %% interval: %s)" % ", ".join(open_) if open_
                         else "met (no case of %d shown below %g)" % (len(vs), BUDGET_NOT_BELOW)})
    return rows


def estimate_rows(cov):
    """The windowed configurations' estimates: the true count inside their 95 % interval on every run."""
    rows = []
    for cfg in WINDOWED:
        for start in ("warm", "cold"):
            runs = [r for r in cov.get("runs", []) if r["config"] == cfg and r["start"] == start]
            for key, what in FIGURES if runs else ():
                checks = [r[key] for r in runs]
                row = {"kind": "estimate-" + key,
                       "what": "%s: true count inside the 95 %% interval, %s, %g s %s randread" % (
                    cfg, what, cov["runtime_s"], start), "target": "every run", "verdict": coverage_verdict(checks)}
                if any(c["available"] for c in checks):  # the runs whose interval held the true count
                    row["median"] = sum(1 for c in checks if c.get("covered"))
                rows.append(row)
    return rows


def tracer_share_rows(out):
    """The tracer's share of the main command's in-request samples, below 10 %."""
    sm = (out.get("main_command") or {}).get("tracer", {}).get("sampled") or {}
    if not sm.get("share_95"):
        return []
    lo, hi = sm["share_95"]
    # the summary's interval is the normal one, which a count of a few samples (none: 0-0) makes too narrow:
    # the top is at least the exact Poisson one's
    hi = min(max(hi, poisson_upper_95(sm["tracer_samples"]) / sm["samples"]), 1.0)
    return [{"kind": "tracer-share",
             "what": "tracer's share of in-request samples, main command", "target": "< 0.10",
             "median": sm["share"], "interval": [lo, hi], "coverage": 0.95,
             "verdict": ("met" if hi < 0.10 else "not met" if lo >= 0.10 else
                         "undecided (the interval spans it)")}]


# cold time-based runs (the cold fio case, the cold estimate runs): the page cache dropped this often all along, so
# that the file, a few MiB at a small scale, is read from the device in every window and not only in the run's
# first second; each drop's own CPU time falls on every configuration alike
COLD_DROP_EVERY_S = 0.2


@contextlib.contextmanager
def cache_dropper(on):
    """While the block: the page cache dropped every COLD_DROP_EVERY_S (on), so a randread keeps reaching the device
    and the windowed block and erofs figures have requests to estimate in every window."""
    if not on:
        yield
        return
    # a group of its own, ended whole: no sleep of the loop is left behind it
    p = subprocess.Popen(["sh", "-c", "while :; do echo 1 > /proc/sys/vm/drop_caches; sleep %g; done"
                          % COLD_DROP_EVERY_S], preexec_fn=die_with_parent, start_new_session=True)
    try:
        yield
    finally:
        stop_process(p, sig=signal.SIGKILL, group=True)


@contextlib.contextmanager
def case_cache(case):
    """While one run of a case: its page cache as the case says, dropped before it (cold) and all along
    (drops_along)."""
    if case["cold"]:
        drop_caches()
    with cache_dropper(case.get("drops_along", False)):
        yield


def window_coverage(windowed, args, mnt, single_file, fio_ctx, devs, work, image_dev):
    """The windowed configurations' estimates against the true counts: args.cover_runs randreads of
    args.cover_runtime_s each per configuration, first warm (the file in the page cache: the request estimate
    against fio's reads), then cold (caches dropped before each: the block and erofs figures have requests to
    estimate), each run's checks by coverage_run."""
    wl = catalog.Fio("bench-cover", "", "randread", runtime_s=args.cover_runtime_s)
    argv = wl.prepare(mnt, work, fio_ctx)
    out = {"runtime_s": args.cover_runtime_s, "device": image_dev, "runs": []}
    for start in ("warm", "cold"):
        if start == "warm":  # the cold cases before dropped the caches
            subprocess.run(["cat", os.path.join(mnt, single_file)], stdout=subprocess.DEVNULL, check=True)
        for cfg in windowed:
            for i in range(args.cover_runs):
                if start == "cold":
                    drop_caches()
                before = diskstats_reads()
                with cache_dropper(start == "cold"):
                    info = run_one(cfg, argv, mnt, devs, work, estimates=True)
                reads = info.get("diskstats_reads", {}).get(image_dev, diskstats_reads()[image_dev] - before[image_dev])
                run = coverage_run(info, wl.ground_truth(work, None)["ios"], image_dev, reads)
                out["runs"].append(dict(run, config=cfg, start=start))
                log("%s: %g s %s randread %d/%d (the estimates against fio's and the kernel's counts)" % (
                    cfg, args.cover_runtime_s, start, i + 1, args.cover_runs))
    return out


def bench_args(argv):
    """The bench's arguments as BENCH_ARGS would give them: without --out, which the make target sets."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            out.append(a)
    return out


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)  # 6 or more give each median a 95 % interval; 9: the 2nd and 8th
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--configs", help="comma-separated subset of: " + ", ".join(CONFIGS) + " (none is always run)")
    ap.add_argument("--cases", help="comma-separated subset of: " + ", ".join(CASES) + " (default: all)")
    ap.add_argument("--cache", default=os.environ.get("FSTRACE_CACHE", "/var/cache/fstrace"))
    ap.add_argument("--cover-runs", type=int, default=COVER_RUNS,
                    help="runs per windowed configuration and start (warm, cold) of the estimates' check")
    ap.add_argument("--cover-runtime-s", type=float, default=COVER_RUNTIME_S,
                    help="seconds of each of those runs (the targets are stated for 30)")
    ap.add_argument("--idle-s", type=float, default=IDLE_S, help="seconds of each idle collector's look")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results",
                                                  "overhead-%s.json" % time.strftime("%Y%m%d-%H%M%S")))
    args = ap.parse_args()
    if args.reps < 1 or args.cover_runs < 0 or args.cover_runtime_s <= 0 or args.idle_s <= 0:
        sys.exit("bench: --reps must be 1 or more, --cover-runs 0 or more, --cover-runtime-s and --idle-s above 0")
    return args


def mount_images(c, work, img_single, img_tree):
    """Both images mounted on loop devices (undone by c): ({"single"|"tree": mount point}, the collector's device
    arguments, the single file's loop device as "major:minor")."""
    mounts = {}
    devs = []
    for key, img in (("single", img_single), ("tree", img_tree)):
        dev, _ = losetup(img["path"], c)
        mnt = os.path.join(work, "mnt-" + key)
        mount(dev, mnt, "erofs", c)
        mounts[key] = mnt
        ma, mi = dev_numbers(dev)
        if key == "single":
            image_dev = "%d:%d" % (ma, mi)  # the loop device fio's reads reach
        # as fstrace run traces an image: its block device and only the requests on its filesystem
        devs += ["-d", "%d:%d:4096:loop" % (ma, mi), "--sdev", sdev_arg(mount_of(mnt))]
    backing = backing_block_device(img_single["path"])
    if backing:
        devs += ["-d", "%d:%d:4096:backing" % backing]
    return mounts, devs, image_dev


def bench_cases(mounts, work, manifest, fio_ctx):
    """The cases (CASES, in order): what each runs, where, whether from a cold cache, and whether the cache is
    dropped all along (drops_along: a time-based randread keeps reaching the device, cache_dropper)."""
    cold = catalog.Fio("bench-cold", "", "randread", runtime_s=CASE_RUNTIME_S)
    warm = catalog.Fio("bench-warm", "", "randread", runtime_s=CASE_RUNTIME_S)
    cases = {
        "fio-randread-4k-cold": {"kind": "fio", "wl": cold, "cold": True, "drops_along": True,
                                 "argv": cold.prepare(mounts["single"], work, fio_ctx), "cwd": mounts["single"]},
        "fio-randread-4k-warm": {"kind": "fio", "wl": warm, "cold": False,
                                 "argv": warm.prepare(mounts["single"], work, fio_ctx), "cwd": mounts["single"]},
        "tar-seqread-cold": {"kind": "shell", "cold": True, "bytes": manifest["tree_bytes"],
                             "argv": timed_shell("tar cf - . | cat > /dev/null",
                                                 os.path.join(work, "elapsed_ns")), "cwd": mounts["tree"]},
    }
    assert list(cases) == CASES
    return cases


def run_sequence(have, reps):
    """The order of a case's runs, as (repetition, configuration): in each repetition every configuration but none
    once, in an order rotated from one repetition to the next, each right after a run of none, and one more none at
    the end, so that every traced run has an untraced one on each side (neighbour_ratios).  Throughput on a shared
    machine drifts over minutes (successive untraced runs agree far better than runs a repetition apart), and a
    traced run's ratio to its neighbours cancels that drift where one to a run of none minutes away kept it.  With
    fewer than three others the last of one repetition would be the first of the next, its two runs sharing a
    neighbour (their ratios correlated, which the median's interval does not allow for): one more none between."""
    others = [c for c in have if c != "none"]
    if not others:
        return [(rep, "none") for rep in range(reps)]
    seq = []
    for rep in range(reps):
        if rep and len(others) < 3:
            seq.append((rep - 1, "none"))
        k = rep % len(others)
        for cfg in others[k:] + others[:k]:
            seq += [(rep, "none"), (rep, cfg)]
    return seq + [(reps - 1, "none")]


def neighbour_ratios(seq, throughputs):
    """{configuration: [its runs' throughput over the mean of the untraced runs right before and after each]}, in
    the order run (run_sequence's seq, throughputs beside it); none's own are 1."""
    out = {}
    for i, (_, cfg) in enumerate(seq):
        if cfg == "none":
            out.setdefault(cfg, []).append(1.0)
            continue
        around = [throughputs[j] for j in (i - 1, i + 1) if 0 <= j < len(seq) and seq[j][1] == "none"]
        out.setdefault(cfg, []).append(throughputs[i] / statistics.mean(around))
    return out


def run_case(name, case, have, reps, devs, work):
    """One case's runs in run_sequence's order: ({configuration: [throughput]}, {configuration: [its ratios to
    the untraced runs beside it]}, {configuration: [run_one's facts]})."""
    rows = {cfg: [] for cfg in have}
    infos = {cfg: [] for cfg in have}
    seq = run_sequence(have, reps)
    tps = []
    for i, (rep, cfg) in enumerate(seq):
        with case_cache(case):
            info = run_one(cfg, case["argv"], case["cwd"], devs, work)
        tps.append(throughput(case, work))
        rows[cfg].append(tps[-1])
        if cfg in WINDOWED and case["kind"] == "fio":  # the estimate against fio's own count
            info["windows"]["fio_ios"] = case["wl"].ground_truth(work, None)["ios"]
        infos[cfg].append(info)
        if i + 1 == len(seq) or seq[i + 1][0] != rep:
            log("%s: repetition %d/%d done" % (name, rep + 1, reps))
    return rows, neighbour_ratios(seq, tps), infos


def case_results(case, have, rows, ratios, infos):
    """A case's figures per configuration: throughput and its ratio to the untraced runs beside it (run_case), the
    collector's figures, the windowed ones' counts, and fstrace-block beside biolatency."""
    res = {}
    for cfg in have:
        res[cfg] = {"throughput_bytes_per_s": stats(rows[cfg]), "ratio_to_none": stats(ratios[cfg])}
        if infos[cfg] and infos[cfg][0]:
            for k in ("records_per_s", "dropped", "load_attach_s", "records"):
                res[cfg][k] = stats([i[k] for i in infos[cfg] if i.get(k) is not None])
            for key, outside in (("collector_ms_per_s", False), ("collector_outside_windows_ms_per_s", True)):
                ms = [collector_ms_per_s(i, outside) for i in infos[cfg]]
                res[cfg][key] = stats([m for m in ms if m is not None]) if any(m is not None for m in ms) else None
    for cfg in WINDOWED:
        if cfg in have and case["kind"] == "fio":
            res[cfg]["window_counts"] = window_counts([i["windows"] for i in infos[cfg]])
    if "fstrace-block" in have and "biolatency" in have:
        # the two in the same repetition, each over the untraced runs beside it
        res["block_vs_biolatency"] = stats([b / q for b, q in zip(ratios["fstrace-block"], ratios["biolatency"])])
    return res


def program_costs(case, have, res, devs, work):
    """Per-program cost into res: STATS_RUNS runs each, alternating, with the kernel's BPF run-time accounting on
    the windowed ones: what their always-on programs cost, which the budget does not bound; biolatency beside
    the windowed ones: its cost per block request completed against theirs."""
    stat_cfgs = [c for c in ("fstrace-full", "fstrace-untraced") + WINDOWED + ("bpftrace-hist",) if c in have]
    if "biolatency" in have and any(c in have for c in WINDOWED):
        stat_cfgs.append("biolatency")
    stat_infos = {c: [] for c in stat_cfgs}
    with BpfStats():
        for _ in range(STATS_RUNS):
            for cfg in stat_cfgs:
                with case_cache(case):
                    stat_infos[cfg].append(run_one(cfg, case["argv"], case["cwd"], devs, work))
    for cfg in stat_cfgs:
        res[cfg]["probe_costs"] = probe_costs(stat_infos[cfg])
        if cfg in WINDOWED:
            res[cfg]["always_on_ms_per_s"] = always_on_ms_per_s(res[cfg]["probe_costs"])
    res["completion_cost"] = {cfg: completion_costs(stat_infos[cfg]) for cfg in stat_cfgs
                              if cfg in WINDOWED or cfg == "biolatency"}


def main():
    args = parse_args()
    started = time.time()
    droot, manifest = dataset.ensure_default(args.cache, args.scale, log)
    single_ctx = catalog.context(droot, "single", manifest)
    tree_ctx = catalog.context(droot, "tree", manifest)
    img_single = images.ensure_image("erofs", {}, single_ctx["source"], manifest["id"] + "/single", args.cache, log)
    img_tree = images.ensure_image("erofs", {}, tree_ctx["source"], manifest["id"] + "/tree", args.cache, log)
    wanted = set(args.configs.split(",")) | {"none"} if args.configs else set(CONFIGS)
    unknown = wanted - set(CONFIGS)
    if unknown:
        sys.exit("bench: unknown configuration(s): %s" % ", ".join(sorted(unknown)))
    cases_wanted = set(args.cases.split(",")) if args.cases else set(CASES)
    unknown = cases_wanted - set(CASES)
    if unknown:
        sys.exit("bench: unknown case(s): %s" % ", ".join(sorted(unknown)))
    have = [c for c in CONFIGS if c in wanted and (c not in ("bpftrace-hist", "biolatency") or shutil.which(
        "bpftrace" if c == "bpftrace-hist" else "biolatency"))]
    out = {"configs": have, "reps": args.reps, "dataset_id": manifest["id"], "kernel": os.uname().release,
           "scale": args.scale, "machine": machine.record(), "bench_args": bench_args(sys.argv[1:]), "cases": {}}
    with Cleanup() as c:
        work = tempfile.mkdtemp(prefix="fstrace-bench-")
        c.push("remove " + work, shutil.rmtree, work, True)
        exposition_directory(c, work)
        if "bpftrace-hist" in have:
            ensure_tracefs(c)
        mounts, devs, image_dev = mount_images(c, work, img_single, img_tree)
        fio_ctx = {"single_file": single_ctx["single_file"]}
        cases = bench_cases(mounts, work, manifest, fio_ctx)
        subprocess.run(["cat", os.path.join(mounts["single"], single_ctx["single_file"])],
                       stdout=subprocess.DEVNULL, check=True)
        for name, case in cases.items():
            if name not in cases_wanted:
                continue
            rows, ratios, infos = run_case(name, case, have, args.reps, devs, work)
            res = case_results(case, have, rows, ratios, infos)
            program_costs(case, have, res, devs, work)
            if not out.get("tiers"):  # what measured: fstrace-full's probes' tiers, else another configuration's
                cfg = next((c for c in ["fstrace-full"] + list(FSTRACE_CONFIGS) if infos.get(c)), None)
                if cfg:
                    out["tiers"] = {"config": cfg, "probes": infos[cfg][0]["tiers"]}
            out["cases"][name] = res
        windowed = [c for c in WINDOWED if c in have]
        if windowed and "fio-randread-4k-warm" in cases_wanted:
            out["window_coverage"] = window_coverage(windowed, args, mounts["single"], single_ctx["single_file"],
                                                     fio_ctx, devs, work, image_dev)
        if windowed:
            out["idle"] = {"seconds": args.idle_s, "rows": idle_collector(windowed, devs, work, args.idle_s)}
        log("analysis speed")
        out["analysis"] = analysis_rate(work, devs, mounts["single"], single_ctx["single_file"])
    log("the main command's own profile")
    out["main_command"] = main_command_profile(args.cache, args.scale)
    out["targets"] = targets(out)
    out["started_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    out["ended_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    write_json_atomic(args.out, out, indent=1)
    print(render(out))
    log("wrote " + args.out)


if __name__ == "__main__":
    # Ctrl-C, kill or a hangup: the cleanups and finally clauses run (tracers stopped, mounts and loop devices
    # undone), and the children that hold BPF programs die with this process even when it is SIGKILLed
    install_signal_handlers(keep_ignored=True)
    try:
        main()
    except Interrupted as e:
        log("%s; cleaned up, no results written" % e)
        sys.exit(128 + e.signum)
    except FstraceError as e:
        log("error: %s" % e)
        sys.exit(1)
