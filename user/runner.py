"""Running a workload under tracing: the collector started and stopped (run, attach), the
options that decide what it records, and run_once, one workload on a freshly mounted image into a results
directory with its summary.  cli.py (run, attach), bench.py and advise.py (the matrices) and
scripts/bench_overhead.py import it.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

from analysis.render import failed_requests, flamegraph_specs, run_html, write_html
from user.system import (Cleanup, FstraceError, Interrupted, backing_block_device, delayacct_sweep, dev_numbers,
                         drop_caches, in_cgroup, iops_cap, kdev, losetup, make_tmpdir, mount, mount_of, proc_start,
                         progress, read_ahead_kb, run_cgroup, run_process_group, signals_held, write_json_atomic,
                         sdev_arg, writing)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTOR = os.path.join(ROOT, "build", "fstrace-collect")
# kernel stacks of the workload inside its requests (sampling tier).  Each sample is a timer interrupt on
# every CPU (a trap to the hypervisor on a VM) and a stack walk of microseconds: at 4999 Hz the shipped
# configuration lost a fifth of cold tar throughput here (make bench-overhead), so 997 (prime: it does not run
# in step with HZ timers); --sample-hz raises it where a short run needs more samples.
SAMPLE_HZ = 997
# off-CPU stacks (collector --offcpu-sample-us): walking a stack at every switch out of a request was the
# costliest thing the tracer did (1.7-2.3 us, make bench-overhead); intervals of 1 ms and more are always
# walked (lock waits that matter are exact), shorter ones are threshold-sampled, each stack's time unbiased
OFFCPU_SAMPLE_US = 1000


def require_root(what):
    if os.geteuid() != 0:
        raise FstraceError("%s must run as root (try: sudo ./fstrace %s)" % (what, " ".join(sys.argv[1:])))


def check_ready(what):
    require_root(what)
    if not os.access(COLLECTOR, os.X_OK):
        raise FstraceError("collector not built: run make (or ./fstrace, which builds it)")


def tool_versions(fs, wl):
    from workloads import images
    tools = {"mkfs": images.tool_version(fs)}
    if wl.part == "single":
        if not shutil.which("fio"):
            raise FstraceError("fio is not installed (needed for --workload %s); run scripts/setup.sh" % wl.name)
        tools["fio"] = subprocess.run(["fio", "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    return tools


def resolve_dataset(args):
    from workloads import dataset
    cache = os.path.abspath(args.cache)
    if args.dataset:
        return dataset.from_user(args.dataset, cache, progress)
    return dataset.ensure_default(cache, args.scale, progress)


def tracing_options(args):
    """Collector options that change what is recorded and what it costs (run, attach, bench alike)."""
    return ["--sample-hz", str(SAMPLE_HZ if getattr(args, "sample_hz", None) is None else args.sample_hz),
            "--records", getattr(args, "records", None) or "slow",
            "--io-stacks", getattr(args, "io_stacks", None) or "sampled",
            "--offcpu-sample-us", str(OFFCPU_SAMPLE_US if getattr(args, "offcpu_sample_us", None) is None
                                      else args.offcpu_sample_us)]


def add_tracing_arguments(p):
    p.add_argument("--records", choices=("slow", "all"), default="slow",
                   help="slow (default): one record per request that slept, did block I/O, missed the page cache, "
                        "failed or took over 1 ms; page-cache hits are counted in the kernel. all: a record each")
    p.add_argument("--io-stacks", choices=("sampled", "all"), default="sampled",
                   help="kernel stacks bios were queued from: at most one per 10 ms per CPU (default) or every bio's")
    p.add_argument("--sample-hz", type=int, help="on-CPU stack sampling rate (default %d; 0: off)" % SAMPLE_HZ)
    p.add_argument("--offcpu-sample-us", type=int,
                   help="off-CPU stacks: intervals this long are always walked, shorter ones with probability "
                        "length/US and weighted US (default %d; 0: every interval's stack at its switch out, "
                        "exact, with the scheduler's frames)" % OFFCPU_SAMPLE_US)


def run_collector(argv, cwd, interrupt_ends=False, on_ready=None):
    """Run the collector; on interrupt, stop it so it finishes its file.  Returns only once it has exited,
    whatever happens: its cwd (run: the mounted image) is unmounted next.

    interrupt_ends: Ctrl-C is the normal way to end (attach) rather than an abort (run).
    on_ready: called once the collector says its programs are attached (its --ready-fd)."""
    ready_r = ready_w = None
    if on_ready:
        ready_r, ready_w = os.pipe()
        argv = argv[:1] + ["--ready-fd", str(ready_w)] + argv[1:]
    # should this process be SIGKILLed, the collector is told (SIGTERM) and ends its workload; the next
    # fstrace start kills it if it is still there (it is recorded with what the run made)
    p = subprocess.Popen(argv, cwd=cwd, preexec_fn=die_with_parent, pass_fds=(ready_w,) if on_ready else ())
    c = Cleanup()
    c.push("stop collector", lambda: None, record={"kind": "process", "pid": p.pid, "start": proc_start(p.pid)})
    try:
        if on_ready:
            os.close(ready_w)
            if os.read(ready_r, 16) == b"ready\n":  # b"": it exited before attaching
                on_ready()
        rc = p.wait()
    except Interrupted:
        rc = stop_process(p)
        if not interrupt_ends:
            raise
    finally:
        if ready_r is not None:
            os.close(ready_r)
        if p.returncode is None:  # any other way out: the collector must not outlive this (nor keep the mount)
            stop_process(p)
        c.run()
        delayacct_sweep()  # a collector that was killed could not give task_delayacct back itself
    if rc < 0:
        raise FstraceError("collector killed by %s; no results" % signal.Signals(-rc).name)
    if rc != 0:
        raise FstraceError("collector failed (exit %d); see its message above" % rc)


def stop_process(p, timeout_s=30):
    """Ask a collector or a tracer to finish (SIGINT) and wait for it; SIGKILL after timeout_s.  Signals are held
    off meanwhile: a second Ctrl-C (or a SIGTERM, SIGHUP) must not leave it running on the mount."""
    with signals_held():
        p.send_signal(signal.SIGINT)
        try:
            return p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()


def die_with_parent():
    """preexec_fn of a child that must not outlive this process (a collector, a tracer): SIGTERM at its death."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_once(fs, opts, wl, droot, manifest, cache, outdir, warm=False, direct_io=True, tools=None, iops=None,
             trace_opts=None):
    """Build (or reuse) the image, mount it, run one workload under tracing; returns its summary.

    Write workloads get a fresh, empty image instead.  outdir (a ResultsDir) appears only when complete; an
    error or interrupt leaves no mount, loop device, cgroup or partial output."""
    from workloads import catalog, images
    ctx = catalog.context(droot, wl.part, manifest)
    if wl.writes:
        if fs not in images.WRITABLE:
            raise FstraceError("workload %s writes: it needs --fs %s" % (wl.name, ", ".join(images.WRITABLE)))
        image = {"fs": fs, "options": opts, "label": images.label(fs, opts), "fresh_empty": True,
                 "tool": images.tool_version(fs)}
    else:
        image = images.ensure_image(fs, opts, ctx["source"], "%s/%s" % (manifest["id"], wl.part), cache,
                                    progress)
    with outdir as partial:
        with Cleanup() as c:
            tmp = make_tmpdir(c)
            mnt = os.path.join(tmp, "mnt")
            if wl.writes:
                image["path"] = os.path.join(tmp, "empty.img")
                images.mkfs_empty(fs, image["path"], images.tree_bytes(ctx["source"]))
                dev, dio = losetup(image["path"], c, direct_io=direct_io, read_only=False)
                mount(dev, mnt, fs, c, images.mount_options(fs, opts, writable=True))
            else:
                dev, dio = losetup(image["path"], c, direct_io=direct_io)
                mount(dev, mnt, fs, c, images.mount_options(fs, opts))
            loop = dev_numbers(dev)
            unit = images.alignment_unit(fs, opts)
            # only the requests on the image (the workload's pipes and /dev/null cost the tracer without a word in
            # the answer: the analysis keeps the image's alone)
            devs = ["-d", "%d:%d:%d:loop" % (loop[0], loop[1], unit), "--sdev", sdev_arg(mount_of(mnt))]
            backing = backing_block_device(image["path"])
            if backing:
                devs += ["-d", "%d:%d:4096" % backing]
            wl_argv = wl.prepare(mnt, partial, ctx)
            # the run's own cgroup (ended as a whole at cleanup) and the --iops-cap one
            own = run_cgroup(c)
            cgroups = [d for d in (own, iops_cap([loop], iops, c) if iops else None) if d]
            argv = in_cgroup(wl_argv, cgroups) if cgroups else wl_argv
            if own is None:  # no cgroup v2: its process group is ended at cleanup instead
                argv = run_process_group(argv, tmp, c)
            meta = {
                "fs": fs, "label": image["label"], "options": opts, "workload": wl.name,
                "workload_summary": wl.summary, "argv": wl_argv, "cgroups": cgroups, "dataset_id": manifest["id"],
                "dataset_part": wl.part, "dataset": manifest, "image": image, "tools": tools,
                # the superblock's device as the kernel records it (btrfs's stat() shows a subvolume's instead)
                "fs_kdev": kdev(*mount_of(mnt)[3]), "loop_device": dev, "loop_kdev": kdev(*loop),
                "loop_direct_io": dio, "backing_kdev": kdev(*backing) if backing else None,
                "backing_note": None if backing else "image is not on a block device: backing level not traced",
                "cache": "source in page cache" if wl.writes else ("warm" if warm else "cold"),
                "alignment_unit_bytes": unit, "iops_cap": iops, "loop_read_ahead_kb": read_ahead_kb(dev),
            }
            meta_path = os.path.join(tmp, "meta.json")
            with open(meta_path, "w") as f:
                json.dump(meta, f)
            if wl.writes:  # seed 004: the files being copied are already in memory
                subprocess.run(["tar", "cf", "-", "."], cwd=ctx["source"], stdout=subprocess.DEVNULL, check=True)
                os.sync()
            elif warm:
                progress("warming the page cache with one untraced run")
                subprocess.run(argv, cwd=mnt, stdout=subprocess.DEVNULL, check=False)
            else:
                drop_caches()
            progress("running %s on %s (%s)" % (wl.name, image["label"], dev))
            run_collector([COLLECTOR, "-o", os.path.join(partial, "results.fst"), "-m", meta_path, "--progress"] +
                          (trace_opts or tracing_options(None)) + devs + ["--"] + argv, cwd=mnt)
        summary = write_summary(partial, wl, ctx)
    return summary


def write_summary(resdir, wl=None, ctx=None):
    """summary.json, the flamegraphs (SVG + folded), their speedscope file, the Perfetto timeline and the HTML
    report of a results directory."""
    from analysis import flamegraph, results, speedscope, summary, timeline
    res = results.load(os.path.join(resdir, "results.fst"))
    gt = wl.ground_truth(resdir, ctx) if wl else None
    s = summary.summarize(res, gt)
    s["failed_requests"] = failed_requests(res)
    # a full disk here is one line naming the file (ENOSPC names none); the directory is removed after it
    with writing(os.path.join(resdir, "summary.json")):
        write_json_atomic(os.path.join(resdir, "summary.json"), s, indent=1, sort_keys=True)
    specs = flamegraph_specs(res)
    for name, stacks, title, subtitle, unit in specs:
        with writing(os.path.join(resdir, name + ".svg")):
            flamegraph.write(resdir, name, stacks, title, subtitle, unit=unit)
    if specs:
        write_html(os.path.join(resdir, speedscope.NAME), speedscope.text(res, specs))
    try:
        with writing(os.path.join(resdir, timeline.NAME)):
            timeline.write(res, os.path.join(resdir, timeline.NAME))
    except ImportError as e:  # build/venv missing (setup.sh makes it): the rest of the results stand
        progress("no timeline: %s" % e)
    write_html(os.path.join(resdir, "report.html"), run_html(s, res))
    return s


def check_workload_ok(s, then):
    """A run whose workload failed, or whose reads failed, is reported but does not succeed (its timings
    are those of errors).  then: what the error line ends with (where the results are, or are not)."""
    failed = s.get("failed_requests") or {}
    status = s["run"].get("workload_exit_status")
    if failed or status not in (0, None):
        raise FstraceError("workload %s%s; %s" % (
            "exited with status %s" % status if status not in (0, None) else "ended",
            ", failed requests: " + ", ".join("%s x%d" % kv for kv in sorted(failed.items())) if failed else "",
            then))
