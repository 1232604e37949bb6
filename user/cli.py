"""fstrace command line: run a standard workload on a freshly built image under tracing, or report on results.

Invoked through ./fstrace (which installs and builds what is missing first).
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from user.system import (Cleanup, FstraceError, Interrupted, ResultsDir, backing_block_device,  # noqa: E402
                         block_devices_of_mount, delayacct_sweep, dev_numbers, drop_caches, in_cgroup, install_signal_handlers,
                         iops_cap, is_cgroup2_dir, kdev, losetup, make_tmpdir, mount, mount_of, mounts, proc_start,
                         read_ahead_kb, recorded_run, run_cgroup, run_process_group, signals_held, write_json_atomic,
                         writing)

COLLECTOR = os.path.join(ROOT, "build", "fstrace-collect")
DEFAULT_CACHE = "/var/cache/fstrace"
# kernel stacks of the workload inside its requests (sampling tier).  Each sample is a timer interrupt on
# every CPU (a trap to the hypervisor on a VM) and a stack walk of microseconds: at 4999 Hz the shipped
# configuration lost a fifth of cold tar throughput here (make bench-overhead), so 997 (prime: it does not run
# in step with HZ timers); --sample-hz raises it where a short run needs more samples.
SAMPLE_HZ = 997
# off-CPU stacks (collector --offcpu-sample-us): walking a stack at every switch out of a request was the
# costliest thing the tracer did (1.7-2.3 us, make bench-overhead); intervals of 1 ms and more are always
# walked (lock waits that matter are exact), shorter ones are threshold-sampled, each stack's time unbiased
OFFCPU_SAMPLE_US = 1000
# the longest --duration/--interval the collector accepts (MAX_SECONDS in user/collect.c)
MAX_SECONDS = 1e8


def progress(msg):
    print("fstrace: " + msg, file=sys.stderr, flush=True)


def require_root(what):
    if os.geteuid() != 0:
        raise FstraceError("%s must run as root (try: sudo ./fstrace %s)" % (what, " ".join(sys.argv[1:])))


def tool_versions(fs, wl):
    from workloads import images
    tools = {"mkfs": images.tool_version(fs)}
    if wl.part == "single":
        if not shutil.which("fio"):
            raise FstraceError("fio is not installed (needed for --workload %s); run scripts/setup.sh" % wl.name)
        tools["fio"] = subprocess.run(["fio", "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    return tools


def default_outdir(label, workload):
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("fstrace-results", "%s-%s-%s" % (stamp, label, workload))


def parse_image_opts(args):
    opts = {"compress": args.compress, "level": args.level}
    if getattr(args, "features", None):
        if args.fs != "erofs":
            raise FstraceError("--features is for --fs erofs (its mkfs.erofs -E features), not %s" % args.fs)
        opts["features"] = args.features
    if args.cluster is not None:
        opts["cluster" if args.fs == "erofs" else "block"] = args.cluster
    return opts


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
    p = subprocess.Popen(argv, cwd=cwd, preexec_fn=_die_with_parent, pass_fds=(ready_w,) if on_ready else ())
    c = Cleanup()
    c.push("stop collector", lambda: None, record={"kind": "process", "pid": p.pid, "start": proc_start(p.pid)})
    try:
        if on_ready:
            os.close(ready_w)
            if os.read(ready_r, 16) == b"ready\n":  # b"": it exited before attaching
                on_ready()
        rc = p.wait()
    except Interrupted:
        rc = _stop_collector(p)
        if not interrupt_ends:
            raise
    finally:
        if ready_r is not None:
            os.close(ready_r)
        if p.returncode is None:  # any other way out: the collector must not outlive this (nor keep the mount)
            _stop_collector(p)
        c.run()
        delayacct_sweep()  # a collector that was killed could not give task_delayacct back itself
    if rc < 0:
        raise FstraceError("collector killed by %s; no results" % signal.Signals(-rc).name)
    if rc != 0:
        raise FstraceError("collector failed (exit %d); see its message above" % rc)


def _stop_collector(p, timeout_s=30):
    """Ask the collector to finish (SIGINT) and wait for it; SIGKILL after timeout_s.  Signals are held off
    meanwhile: a second Ctrl-C (or a SIGTERM, SIGHUP) must not leave it running on the mount."""
    with signals_held():
        p.send_signal(signal.SIGINT)
        try:
            return p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()


def _die_with_parent():
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def resolve_dataset(args):
    from workloads import dataset
    cache = os.path.abspath(args.cache)
    if args.dataset:
        return dataset.from_user(args.dataset, cache, progress)
    return dataset.ensure_default(cache, args.scale, progress)


def check_ready(what):
    require_root(what)
    if not os.access(COLLECTOR, os.X_OK):
        raise FstraceError("collector not built: run make (or ./fstrace, which builds it)")


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
            devs = ["-d", "%d:%d:%d:loop" % (loop[0], loop[1], unit)]
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


def cmd_run(args):
    from workloads import catalog, images

    try:
        wl = catalog.get(args.workload)
    except KeyError as e:
        raise FstraceError(e.args[0])
    if args.fs not in images.FILESYSTEMS:
        raise FstraceError("unknown filesystem %r (choose from %s)" % (args.fs, ", ".join(images.FILESYSTEMS)))
    check_ready("fstrace run")
    opts = images.normalize(args.fs, parse_image_opts(args))
    label = images.label(args.fs, opts)
    outdir = ResultsDir(args.out or default_outdir(label, wl.name))  # checked before any work
    tools = tool_versions(args.fs, wl)
    droot, manifest = resolve_dataset(args)
    summary = run_once(args.fs, opts, wl, droot, manifest, os.path.abspath(args.cache), outdir,
                       warm=args.warm, direct_io=not args.no_direct_io, tools=tools, iops=args.iops_cap,
                       trace_opts=tracing_options(args))
    sys.stdout.write(render_summary(summary, full=False))
    warn_if_nothing_seen(summary)
    check_workload_ok(summary, "results (of a failing run) in %s" % outdir.outdir)
    progress("results in %s" % outdir.outdir)
    return 0


def resolve_filters(args):
    """attach and serve: (mounts chosen by --fs/--mount, their superblock devices, block devices to trace: those
    under the mounts and every --dev), each device as (major, minor)."""
    chosen = []
    if args.fs:
        chosen = [m for m in mounts() if m[1] == args.fs]
        if not chosen:
            raise FstraceError("no %s filesystem is mounted" % args.fs)
    for path in args.mount or []:
        if not os.path.exists(path):
            raise FstraceError("--mount %s: no such path" % path)
        m = mount_of(path)
        if m[0] != os.path.realpath(path):
            raise FstraceError("--mount %s is not a mount point (it is on %s)" % (path, m[0]))
        chosen.append(m)
    sdevs, devs = [], []
    for m in chosen:
        if m[3] not in sdevs:
            sdevs.append(m[3])
        for d in block_devices_of_mount(m):
            if d not in devs:
                devs.append(d)
    for d in args.dev or []:
        try:
            ma, mi = (int(x) for x in d.split(":"))
        except ValueError:
            raise FstraceError("--dev wants MAJ:MIN, got %r" % d)
        if not os.path.exists("/sys/dev/block/%d:%d" % (ma, mi)):
            raise FstraceError("--dev %s: no such block device" % d)
        devs.append((ma, mi))
    for pid in args.pid or []:
        if pid <= 0 or proc_start(pid) is None:
            raise FstraceError("--pid %d: no such process" % pid)
    if args.cgroup and not is_cgroup2_dir(args.cgroup):
        raise FstraceError("--cgroup %s: not a cgroup v2 directory" % args.cgroup)
    return chosen, sdevs, devs


def filter_argv(args, sdevs, devs):
    """The collector options of attach's and serve's filters."""
    argv = []
    for ma, mi in devs:
        is_loop = os.path.exists("/sys/dev/block/%d:%d/loop" % (ma, mi))
        argv += ["-d", "%d:%d:4096%s" % (ma, mi, ":loop" if is_loop else "")]
    for ma, mi in sdevs:
        argv += ["--sdev", "%d:%d" % (ma, mi)]
    for pid in args.pid or []:
        argv += ["--pid", str(pid)]
    if args.comm:
        argv += ["--comm", args.comm]
    if args.cgroup:
        argv += ["--cgroup", args.cgroup]
    return argv


def cmd_attach(args):
    """Trace a live system: no images, no workloads of ours."""
    check_ready("fstrace attach")
    chosen, sdevs, devs = resolve_filters(args)
    # checked here, as the collector checks them (parse_seconds): refused there, "attached" never shows
    if args.duration is not None and not args.duration > 0:
        raise FstraceError("--duration must be more than 0 seconds, got %g" % args.duration)
    for name, v in (("--duration", args.duration), ("--interval", args.interval)):
        if v is not None and not v <= MAX_SECONDS:
            raise FstraceError("%s must be at most %g seconds, got %g" % (name, MAX_SECONDS, v))
    outdir = ResultsDir(args.out or default_outdir("attach", args.fs or "all"))
    with outdir as partial:
        summary = _attach(args, partial, chosen, sdevs, devs)
    sys.stdout.write(render_summary(summary, full=False))
    warn_if_nothing_seen(summary)
    progress("results in %s" % outdir.outdir)
    return 0


def _attach(args, partial, chosen, sdevs, devs):
    argv = [COLLECTOR, "-o", os.path.join(partial, "results.fst")] + filter_argv(args, sdevs, devs)
    if args.duration:
        argv += ["--duration", str(args.duration)]
    if args.interval > 0:
        argv += ["--interval", str(args.interval)]
    argv += tracing_options(args)
    meta = {"mode": "attach", "label": "attach", "workload": "attach", "fs": args.fs,
            "mounts": [m[0] for m in chosen], "fs_kdevs": [kdev(*d) for d in sdevs] or None,
            "devices_note": "alignment measured against 4 KiB (image cluster size unknown when attaching)",
            "filters": {"fs": args.fs, "mount": args.mount, "dev": args.dev, "pid": args.pid,
                        "comm": args.comm, "cgroup": args.cgroup}}
    # in a recorded temp dir, not a bare temp file: should this process be SIGKILLed, the next start removes it
    with Cleanup() as c:
        meta_path = os.path.join(make_tmpdir(c), "meta.json")
        with open(meta_path, "w") as f:
            json.dump(meta, f)
        run_collector(argv + ["-m", meta_path], cwd="/", interrupt_ends=True, on_ready=lambda: progress(
            "attached: %s; Ctrl-C to stop" % (", ".join(m[0] for m in chosen) or "all filesystems")))
    return write_summary(partial)


def cmd_serve(args):
    """Always on: the collector keeps only in-kernel aggregates; they are served as Prometheus metrics."""
    from user import serve
    check_ready("fstrace serve")
    listen = serve.parse_listen(args.listen)

    def resolve():
        chosen, sdevs, devs = resolve_filters(args)
        return chosen, [COLLECTOR] + filter_argv(args, sdevs, devs)
    return serve.serve(listen, resolve, args, progress)


def write_summary(resdir, wl=None, ctx=None):
    """summary.json, the on-CPU flamegraph (SVG + folded) and the Perfetto timeline of a results directory."""
    from analysis import flamegraph, results, summary, timeline
    res = results.load(os.path.join(resdir, "results.fst"))
    gt = wl.ground_truth(resdir, ctx) if wl else None
    s = summary.summarize(res, gt)
    s["failed_requests"] = failed_requests(res)
    # a full disk here is one line naming the file (ENOSPC names none); the directory is removed after it
    with writing(os.path.join(resdir, "summary.json")):
        write_json_atomic(os.path.join(resdir, "summary.json"), s, indent=1, sort_keys=True)
    for name, stacks, title, subtitle, unit in flamegraph_specs(res):
        with writing(os.path.join(resdir, name + ".svg")):
            flamegraph.write(resdir, name, stacks, title, subtitle, unit=unit)
    try:
        with writing(os.path.join(resdir, timeline.NAME)):
            timeline.write(res, os.path.join(resdir, timeline.NAME))
    except ImportError as e:  # build/venv missing (setup.sh makes it): the rest of the results stand
        progress("no timeline: %s" % e)
    write_html(os.path.join(resdir, "report.html"), run_html(s, res))
    return s


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


def failed_requests(res):
    """Requests on the traced filesystems that returned an error: {"read errno 117 (EUCLEAN)": count}."""
    import errno as errnos
    from analysis import summary
    r = summary.fs_requests(res, kinds=("read", "getdents", "open", "stat"))
    r = r[r["ret"] < 0]
    out = {}
    for kind, ret in zip(r["kind"], r["ret"]):
        e = -int(ret)
        key = "%s errno %d (%s)" % (summary.enum_name(res.header, "req_kind", kind), e, errnos.errorcode.get(e, "?"))
        out[key] = out.get(key, 0) + 1
    return out


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


def requests_seen(s):
    """Requests of every kind the summary counts (reads, writes, open/getdents, stat)."""
    m = s["metadata"]
    return (s["reads"]["count"] + (s.get("writes") or {}).get("count", 0) + m["open_getdents"]["count"]
            + m["stat"]["count"])


def warn_if_nothing_seen(s):
    """A trace of no requests is not a fast filesystem: said after the report, where it is read."""
    if not requests_seen(s):
        progress("WARNING: no requests were traced: %s" % (
            "the filters matched nothing that did I/O" if s["run"].get("mode") == "attach"
            else "the workload read nothing from the image"))


FLAMEGRAPHS = [("wallclock", "Wall-clock flamegraph",
                "Where requests' time went: CPU from samples, off-CPU time as measured, one colour per category."),
               ("oncpu", "On-CPU flamegraph", "Sampled kernel stacks of the traced tasks inside their requests."),
               ("offcpu", "Off-CPU flamegraph", "Kernel stacks at switch-out, weighted by the time blocked.")]


def write_html(path, text):
    """Write a report (HTML, SVG) in place atomically.  Root writes reports where other users can write (/tmp)
    and from results made elsewhere: the temporary is created exclusively under a random name (mkstemp),
    and a symlink at the final path is refused (rename would replace, never follow, one planted later)."""
    if os.path.islink(path):
        raise FstraceError("%s is a symbolic link; refusing to write the report through it" % path)
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                                   prefix=".%s." % os.path.basename(path), suffix=".tmp")
    except OSError as e:
        raise FstraceError("cannot write %s: %s" % (path, e.strerror))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            os.fchmod(f.fileno(), 0o644)  # mkstemp makes it 0600; a report is for reading
        os.rename(tmp, path)
    except BaseException as e:
        os.unlink(tmp)
        if isinstance(e, OSError):
            raise FstraceError("cannot write %s: %s" % (path, e.strerror))
        raise


def run_html(s, res):
    """The self-contained HTML report of one run.  Its flamegraphs are drawn again from the results rather
    than read from the directory's SVG files: those could hold script, or be links out of the directory."""
    from analysis import flamegraph, html, plots, report, summary, tables
    label = s["run"].get("label") or "run"
    figs = [("Latency CDF", plots.latency_cdf([(label, summary.latencies_us(res))], "request latency")),
            ("Attribution", plots.attribution_bars([(label, s["attribution"]["parts_ns"])],
                                                   summary.ATTRIBUTION_PARTS, "where request time went"))]
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
    from analysis import flamegraph, html, plots, results, sampling, summary, tables
    cdf, bars, texts = [], [], []
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
            cdf.append((label, summary.latencies_us(res)))
            bars.append((label, summary.attribution(summary.fs_requests(
                res, kinds=("read", "write", "open", "getdents")))["parts_ns"]))
            stacks[-1][key] = sampling.folded(res.header, kworkers=True)
    figs = [("Latency CDF per configuration", plots.latency_cdf(cdf, "request latency")),
            ("Attribution per configuration", plots.attribution_bars(bars, summary.ATTRIBUTION_PARTS,
                                                                     "where request time went"))]
    if len(sets) == 2:  # a comparison: B against A, per configuration both have
        for key in [k for k in stacks[0] if k in stacks[1]]:
            what = " ".join(key) if key else "%s vs %s" % (sets[1][1], sets[0][1])
            figs.append(("Differential on-CPU flamegraph: %s" % what,
                         flamegraph.differential(stacks[0][key], stacks[1][key], what)))
    return html.compare_page(title, head_text, figs, texts)


def render_summary(s, full=True):
    """The terminal report (the verdict; full: then the detail), control characters escaped: task names and
    stacks (attach traces any task) and results from other machines must not drive the terminal."""
    from analysis import report
    return report.terminal_safe(report.render(s, full))


# Reporting reads results made on other machines, as root: every file is untrusted.  Damage is one line
# naming the file and what is wrong (never a traceback), names in bench.json resolve only inside the
# directory reported, and text from the files reaches the terminal only through report.terminal_safe.

def _error(where, what):
    from analysis.report import terminal_safe
    return FstraceError(terminal_safe("%s: %s" % (where, what)))


def in_dir(base, name, named_in=None):
    """base/name, refused unless it resolves inside base (a symlink or .. out of a results directory)."""
    from analysis import report, results
    try:
        return results.inside(base, name, named_in)
    except results.ResultsError as e:
        raise FstraceError(report.terminal_safe(str(e)))


def load_results(fst):
    """A loaded results file, or one line naming the file and its damage."""
    from analysis import results
    try:
        res = results.load(fst)
    except FileNotFoundError:
        raise _error(fst, "no results file there")
    except OSError as e:
        raise _error(fst, "cannot read it: %s" % e.strerror)
    except results.ResultsError as e:
        raise _error(fst, e)
    return res


def note_unverified(res, fst):
    """Say so when a file had no checksums to check (after its analysis, so damage stays one line)."""
    if not res.verified:
        progress("%s: results format %d carries no checksums: damage in it cannot be detected"
                 % (fst, res.format))


def load_doc(path, schema):
    """A JSON document of a results or bench directory (summary.json, bench.json), or one line on its damage."""
    from analysis import results
    d = os.path.dirname(path) or "."
    path = in_dir(d, os.path.basename(path))
    try:
        return results.load_json(path, schema)
    except OSError as e:
        raise _error(path, "cannot read it: %s" % e.strerror)
    except results.ResultsError as e:
        raise _error(path, e)


def analyse(res, gt, fst, full=True):
    """(summary, terminal report) of a loaded results file.  The header's types, the layouts and the bounds
    were checked on loading; content that still does not fit the analysis (a format 1 file damaged where
    nothing could tell, or values no collector writes) is one line, not a traceback."""
    from analysis import summary
    try:
        s = summary.summarize(res, gt)
        s["failed_requests"] = failed_requests(res)
        text = render_summary(s, full)
    except (ArithmeticError, AttributeError, IndexError, KeyError, TypeError, ValueError, MemoryError) as e:
        why = ("results format %d has no checksums: the file is probably damaged" % res.format if not res.verified
               else "its checksums match, but its content is not what this fstrace's collector writes")
        raise _error(fst, "the analysis cannot use it (%s: %s); %s" % (type(e).__name__, str(e)[:100], why))
    note_unverified(res, fst)
    return s, text


def report_bench(bench_dir):
    """Re-render a bench directory's tables, re-summarizing every run from its own results file."""
    from analysis import report, results, tables
    bench = os.path.join(bench_dir, "bench.json")
    doc = load_doc(bench, results.BENCH_SCHEMA)
    rows = []
    for r in doc["rows"]:
        rundir = in_dir(bench_dir, r["dir"], bench)
        gt = load_doc(os.path.join(rundir, "summary.json"), results.SUMMARY_SCHEMA).get("ground_truth")
        fst = in_dir(rundir, "results.fst")
        s, _ = analyse(load_results(fst), gt, fst)
        rows.append(dict(tables.row_from_summary(s), run=r["run"], dir=r["dir"]))
    doc["rows"] = rows
    sys.stdout.write(report.terminal_safe(tables.render_bench(doc)))
    return 0


def cmd_report(args):
    from analysis import results
    path = args.dir
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "bench.json")):
        rc = report_bench(path)
        if args.html:
            write_html(args.html, sets_html("fstrace bench: %s" % path, [("", path)], None))
            progress("HTML report in %s" % args.html)
        return rc
    fst = in_dir(path, "results.fst") if os.path.isdir(path) else path
    res = load_results(fst)
    gt = None
    spath = os.path.join(os.path.dirname(fst), "summary.json")
    if os.path.lexists(spath):
        gt = load_doc(spath, results.SUMMARY_SCHEMA).get("ground_truth")
    s, text = analyse(res, gt, fst, args.full)
    sys.stdout.write(text)
    if args.html:
        write_html(args.html, run_html(s, res))
        progress("HTML report in %s" % args.html)
    return 0


def cmd_compare(args):
    from analysis import report, results, sampling, tables
    docs = []
    for d in (args.a, args.b):
        bench, summ = os.path.join(d, "bench.json"), os.path.join(d, "summary.json")
        if os.path.exists(bench):
            load_doc(bench, results.BENCH_SCHEMA)
            docs.append(bench)
        elif os.path.exists(summ):
            load_doc(summ, results.SUMMARY_SCHEMA)
            docs.append(summ)
        else:
            raise FstraceError("%s holds neither bench.json nor summary.json" % d)
    try:
        text = tables.render_compare(tables.compare(tables.load_rows(args.a), tables.load_rows(args.b)))
    except (ArithmeticError, KeyError, TypeError, ValueError) as e:
        raise _error(" or ".join(docs), "not what fstrace writes there, or damaged (%s: %s)"
                     % (type(e).__name__, str(e)[:100]))
    sys.stdout.write(report.terminal_safe(text))
    if args.html:
        write_html(args.html, sets_html("fstrace compare: %s vs %s" % (args.a, args.b),
                                        [("A", args.a), ("B", args.b)], text))
        progress("HTML report in %s" % args.html)
    if args.flamegraph:
        from analysis import flamegraph
        folded = []
        for d in (args.a, args.b):
            if not os.path.exists(os.path.join(d, "results.fst")):
                raise FstraceError("--flamegraph compares two run directories; %s has no results.fst" % d)
            fst = in_dir(d, "results.fst")
            res = load_results(fst)
            note_unverified(res, fst)
            folded.append(sampling.folded(res.header, kworkers=True))
        write_html(args.flamegraph, flamegraph.differential(folded[0], folded[1], "%s vs %s" % (args.b, args.a)))
        progress("differential flamegraph in %s" % args.flamegraph)
    return 0


def add_filter_arguments(p):
    """attach's and serve's filters (resolve_filters, filter_argv)."""
    p.add_argument("--fs", help="only files on (and devices under) mounted filesystems of this type")
    p.add_argument("--mount", action="append", help="only files on (and devices under) this mount; repeatable")
    p.add_argument("--dev", action="append", help="also trace this block device, MAJ:MIN; repeatable")
    p.add_argument("--pid", action="append", type=int, help="only this process and its children; repeatable")
    p.add_argument("--comm", help="only tasks with this name")
    p.add_argument("--cgroup", help="only tasks in this cgroup v2 directory")


def build_parser():
    from user import bench
    from workloads import catalog, images
    p = argparse.ArgumentParser(prog="fstrace", description="Explain why reads on erofs, squashfs and btrfs "
                                "are as fast or slow as they are.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="build an image, run a standard workload on it under tracing, report")
    r.add_argument("--fs", required=True, help="one of: " + ", ".join(images.FILESYSTEMS))
    r.add_argument("--workload", required=True, help="one of: " + ", ".join(sorted(catalog.WORKLOADS)))
    r.add_argument("--compress", help="compressor (erofs: lz4, lz4hc, lzma, deflate, libdeflate, zstd, none; "
                   "squashfs: gzip, lzo, lz4, lz4hc, xz, zstd, none; btrfs: none, lzo, zlib[:N], zstd[:N])")
    r.add_argument("--level", type=int, help="compression level (erofs lz4hc 0-12, default 12; lzma 0-9 or 100-109; "
                   "deflate 0-9; zstd 0-22; others: the tool's default)")
    r.add_argument("--features", help="erofs only, comma-separated mkfs.erofs -E features: "
                   + ", ".join(images.EROFS_FEATURES))
    r.add_argument("--cluster", type=int, help="erofs pcluster size / squashfs block size, bytes")
    r.add_argument("--dataset", help="directory or tarball to use instead of the built-in dataset")
    r.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)  # small datasets for tests
    r.add_argument("--warm", action="store_true", help="trace a warm-cache run (default: caches dropped)")
    r.add_argument("--no-direct-io", action="store_true", help="buffered loop device (backing file cached too)")
    r.add_argument("--iops-cap", type=int, help="cap the image device at this many IOPS (block throttling), "
                   "e.g. 3000 for seed 000's cloud disk")
    r.add_argument("-o", "--out", help="results directory (default: fstrace-results/<time>-<config>-<workload>)")
    add_tracing_arguments(r)
    r.add_argument("--cache", default=os.environ.get("FSTRACE_CACHE", DEFAULT_CACHE),
                   help="where datasets and images are kept (default %(default)s)")
    r.set_defaults(func=cmd_run)
    a = sub.add_parser("attach", help="trace a live system until Ctrl-C or --duration")
    add_filter_arguments(a)
    a.add_argument("--duration", type=float, help="seconds to trace (default: until Ctrl-C)")
    a.add_argument("--interval", type=float, default=1.0, help="live view refresh, seconds (0: off)")
    a.add_argument("-o", "--out", help="results directory (default: fstrace-results/<time>-attach-<fs>)")
    add_tracing_arguments(a)
    a.set_defaults(func=cmd_attach)
    from user import serve
    sv = sub.add_parser("serve", help="always on: the in-kernel aggregates as Prometheus metrics on /metrics")
    add_filter_arguments(sv)
    serve.add_arguments(sv)
    sv.set_defaults(func=cmd_serve)
    b = sub.add_parser("bench", help="the seed tables: fs x compressor x cluster x workload x runs, with causes")
    b.add_argument("--preset", help="a whole matrix: " + ", ".join(sorted(bench.PRESETS)))
    b.add_argument("--fs", help="comma-separated filesystems")
    b.add_argument("--compress", help="comma-separated compressors (see run --compress)")
    b.add_argument("--cluster", help="comma-separated cluster/block sizes, bytes")
    b.add_argument("--features", help="erofs -E features for its compressed images (see run --features)")
    b.add_argument("--workload", help="comma-separated workloads (default with --preset: the preset's)")
    b.add_argument("--runs", type=int, default=3, help="runs of each (default %(default)s)")
    b.add_argument("--warm", action="store_true", help="warm-cache runs")
    b.add_argument("--iops-cap", type=int, help="cap the image device at this many IOPS")
    b.add_argument("--dataset", help="directory or tarball instead of the built-in dataset")
    b.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)
    b.add_argument("-o", "--out", help="bench directory (default: fstrace-results/<time>-bench)")
    b.add_argument("--cache", default=os.environ.get("FSTRACE_CACHE", DEFAULT_CACHE))
    b.set_defaults(func=lambda a: bench.cmd_bench(a, run_once, resolve_dataset, check_ready, progress,
                                                  tool_versions, write_html, sets_html))
    from user import advise
    ad = sub.add_parser("advise", help="which fs, compressor and cluster size for a tree and a read mix: "
                        "ranking, Pareto front, causes")
    advise.add_arguments(ad, os.environ.get("FSTRACE_CACHE", DEFAULT_CACHE))
    ad.set_defaults(func=lambda a: advise.cmd_advise(a, run_once, resolve_dataset, check_ready, progress,
                                                     tool_versions, write_html, load_results))
    c = sub.add_parser("compare", help="what changed between two result sets (bench or run directories)")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--flamegraph", help="also write a differential on-CPU flamegraph SVG (two run directories)")
    c.add_argument("--html", help="also write a self-contained HTML report of the comparison to this file")
    c.set_defaults(func=cmd_compare)
    rep = sub.add_parser("report", help="print the report of a run or bench directory (no root, no BPF)")
    rep.add_argument("dir")
    rep.add_argument("--html", help="also write the run's self-contained HTML report to this file")
    rep.add_argument("--full", action="store_true", help="the detail under headings after the verdict "
                     "(histograms, per device, decompression, caches, tiers)")
    rep.set_defaults(func=cmd_report)
    return p


def main(argv=None):
    install_signal_handlers()
    command = "fstrace"
    try:
        args = build_parser().parse_args(argv)
        command = "fstrace " + args.command
        if args.command in ("run", "attach", "bench", "advise") and os.geteuid() == 0:
            with recorded_run():
                return args.func(args)
        return args.func(args)
    except FstraceError as e:
        print("fstrace: error: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:  # a vanished directory: one line, everything already undone.  Files fstrace writes
        # are named by writing(); an error without a file name (ENOSPC) still says what it came from
        print("fstrace: error: %s: %s" % (e.filename or "in " + command, e.strerror or e), file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt):
        print("fstrace: interrupted; cleaned up, no results written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
